"""weft's torch backend on CUDA tensors (one rank: NCCL refuses two ranks on one GPU).

    .venv/bin/python tests/torch/test_cuda.py      # starts torchrun itself, or skips without a GPU

Every collective on CUDA tensors against the same collective on the same values as CPU tensors (the group's host
communicator), bit for bit, in every dtype (int16 reduced widened to int32 on NCCL; the dtypes weft only moves, as
bytes; complex averages as float pairs); stream order (the collective reads what the current stream wrote, wait()
orders the current stream after it); a tensor on the wrong device, a tag and a receive from any source are
refused. The group is made as NCCL users make theirs, with its device bound (init_process_group(device_id=...)),
so DeviceMesh and split_group make their groups by splitting it. Exits 77 (skipped) without a usable device.
"""

import os
import sys

import torch
import torch.distributed as dist

from torch.distributed.device_mesh import init_device_mesh

from common import Job, same_bits, skip_without_cuda
from test_collectives import COUNTS, DTYPES, OPS, inputs, poison, valid, weft_op
from test_dtypes import MOVED, inputs as moved_inputs, poison as moved_poison


def test_ops(job):
    dev = torch.device("cuda", torch.cuda.current_device())
    for dtype in DTYPES:
        for op in OPS:
            if not valid(dtype, op):
                continue
            for count in COUNTS:
                x = inputs(job, dtype, count, op, ("cuda", str(dtype), op, count))
                want = x.clone()
                dist.all_reduce(want, op=weft_op(op))
                got = x.to(dev)
                dist.all_reduce(got, op=weft_op(op))
                job.check(same_bits(got.cpu(), want), "cuda all_reduce %s %s count %d" % (dtype, op, count))
                want = poison(dtype, count)
                dist.reduce_scatter_tensor(want, x, op=weft_op(op))
                got = poison(dtype, count).to(dev)
                dist.reduce_scatter_tensor(got, x.to(dev), op=weft_op(op))
                job.check(same_bits(got.cpu(), want), "cuda reduce_scatter_tensor %s %s count %d" % (dtype, op, count))
        x = inputs(job, dtype, 1000, "sum", ("cuda ag", str(dtype)))
        got = poison(dtype, 1000 * job.world).to(dev)
        dist.all_gather_into_tensor(got, x.to(dev))
        job.check(same_bits(got.cpu(), x), "cuda all_gather_into_tensor %s" % dtype)
        got = x.to(dev)
        dist.broadcast(got, src=0)
        job.check(same_bits(got.cpu(), x), "cuda broadcast %s" % dtype)


def test_moved(job):
    """The dtypes weft only moves (as bytes, on NCCL too), and complex sums (as float pairs)."""
    dev = torch.device("cuda", torch.cuda.current_device())
    for dtype in MOVED:
        x = moved_inputs(dtype, 1000, ("cuda moved", str(dtype)), job.rank)
        got = moved_poison(dtype, 1000 * job.world).to(dev)
        dist.all_gather_into_tensor(got, x.to(dev))
        want = moved_poison(dtype, 1000 * job.world)
        dist.all_gather_into_tensor(want, x)
        job.check(same_bits(got.cpu(), want), "cuda all_gather_into_tensor %s" % dtype)
        got = x.to(dev)
        dist.broadcast(got, src=0)
        job.check(same_bits(got.cpu(), x), "cuda broadcast %s" % dtype)
    for dtype in (torch.complex64, torch.complex128):
        x = moved_inputs(dtype, 1000 * job.world, ("cuda complex", str(dtype)), job.rank)
        want = moved_poison(dtype, 1000)
        dist.reduce_scatter_tensor(want, x, op=dist.ReduceOp.AVG)
        got = moved_poison(dtype, 1000).to(dev)
        dist.reduce_scatter_tensor(got, x.to(dev), op=dist.ReduceOp.AVG)
        job.check(same_bits(got.cpu(), want), "cuda reduce_scatter_tensor avg %s" % dtype)


def test_stream_order(job):
    dev = torch.device("cuda", torch.cuda.current_device())
    side = torch.cuda.Stream()
    with torch.cuda.stream(side):
        x = torch.ones(1 << 20, device=dev)
        torch.cuda._sleep(50_000_000)  # the fill must wait: a collective that did not order after it reads ones
        x.mul_(3)
        work = dist.all_reduce(x, async_op=True)
        work.wait()  # the side stream now waits for the all-reduce
        y = x * 2
    side.synchronize()
    job.check(bool((y == 6 * job.world).all().item()), "cuda stream order")
    fut = dist.all_reduce(torch.full((10,), 2.0, device=dev), async_op=True).get_future()
    job.check(bool((fut.wait()[0] == 2 * job.world).all().item()), "cuda future value")


def test_refusals(job):
    dev = torch.device("cuda", torch.cuda.current_device())
    job.expect_raises(lambda: dist.all_gather_into_tensor(torch.empty(4 * job.world), torch.ones(4, device=dev)),
                      (ValueError,), ["all_gather_into_tensor", "one device"], "cuda input, cpu output")
    # NCCL has no tags and no receive from any source: refused, never matched by order.
    job.expect_raises(lambda: dist.isend(torch.ones(4, device=dev), 0, tag=3), (ValueError,),
                      ["send", "tag 3", "NCCL"], "cuda send with a tag")
    job.expect_raises(lambda: dist.irecv(torch.ones(4, device=dev)), (NotImplementedError,),
                      ["any source", "NCCL"], "cuda recv from any source")


def test_split(job):
    """With a bound device, dist.split_group splits the group (WeftBackend.split): its group is weft's, bound to
    the device, and runs CUDA collectives. DeviceMesh on cuda splits the same way for a dimension smaller than the
    world (several GPUs); at one rank it takes the world group, which must serve it as well."""
    dev = torch.device("cuda", torch.cuda.current_device())
    mesh = init_device_mesh("cuda", (job.world,), mesh_dim_names=("dp",))
    split = dist.split_group(split_ranks=[list(range(job.world))])
    for what, g in (("DeviceMesh", mesh.get_group("dp")), ("split_group", split)):
        job.check(dist.get_backend(g) == "weft", "%s's group is %s's" % (what, dist.get_backend(g)))
        job.check(g.bound_device_id == dev, "%s's group is bound to %s" % (what, g.bound_device_id))
        x = inputs(job, torch.float32, 1000, "sum", ("cuda split", what))
        want = x.clone()
        dist.all_reduce(want)
        got = x.to(dev)
        dist.all_reduce(got, group=g)
        job.check(same_bits(got.cpu(), want), "%s all_reduce on cuda" % what)


def main():
    if "RANK" not in os.environ:
        # Started by meson: skip (77) here without a device, else become a one-rank torchrun job (a torchrun
        # child's exit status does not reach meson, so the skip is decided before it).
        skip_without_cuda("CUDA tensors over weft")
        os.execv(sys.executable, [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node",
                                  "1", os.path.abspath(__file__)])
    local = int(os.environ.get("LOCAL_RANK", "0"))
    torch.cuda.set_device(local)
    job = Job(device_id=torch.device("cuda", local))
    job.run("cuda ops", test_ops)
    job.run("cuda moved dtypes", test_moved)
    job.run("cuda stream order", test_stream_order)
    job.run("cuda refusals", test_refusals)
    job.run("cuda split groups", test_split)
    job.finish()


if __name__ == "__main__":
    main()
