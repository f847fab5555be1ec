"""The dtypes weft has no element type for, over weft's torch backend: moved by every collective that only moves data,
reduced where that has a meaning (complex sums), refused by name where it has none.

    .venv/bin/torchrun --standalone --nproc_per_node 3 tests/torch/test_dtypes.py

uint16, uint32 and uint64 (random bits over their whole range), complex32, complex64 and complex128, float8_e4m3fn
and float8_e5m2 (small integers) go through broadcast, all_gather (list, into a tensor, coalesced), gather, scatter,
all_to_all_single (even and uneven), all_to_all of lists, send/recv and batch_isend_irecv. gloo moves none of these
but by send/recv, so every expected value is exact: each rank's input is a function of the case and the rank, which
every rank can compute. (torch.distributed passes complex to some collectives as torch.view_as_real; gather,
reduce, reduce_scatter and the functional collectives pass it as complex.)
"""

import zlib

import torch
import torch.distributed as dist
import torch.distributed._functional_collectives as funcol

from common import run_tests, same_bits

MOVED = [torch.uint16, torch.uint32, torch.uint64, torch.complex32, torch.complex64, torch.complex128,
         torch.float8_e4m3fn, torch.float8_e5m2]
COUNTS = [0, 1, 1000]


def inputs(dtype, count, case, rank):
    """Rank `rank`'s input for one case."""
    g = torch.Generator().manual_seed(zlib.crc32(repr((case, rank)).encode()))
    if dtype.is_complex:
        parts = torch.randint(-8, 9, (2, count), generator=g).to(dtype.to_real())
        return torch.complex(parts[0], parts[1]).to(dtype)
    if dtype.is_floating_point:  # the float8 types: small integers, exact in both
        return torch.randint(-8, 9, (count,), generator=g).to(torch.float32).to(dtype)
    size = torch.empty(0, dtype=dtype).element_size()
    return torch.randint(0, 256, (count * size,), generator=g, dtype=torch.uint8).view(dtype)


def poison(dtype, count):
    return torch.full((count * torch.empty(0, dtype=dtype).element_size(),), 0xA5, dtype=torch.uint8).view(dtype)


def test_broadcast_and_gathers(job):
    w = job.world
    for dtype in MOVED:
        for count in COUNTS:
            case = ("moved", str(dtype), count)
            mine = inputs(dtype, count, case, job.rank)
            every = [inputs(dtype, count, case, q) for q in range(w)]
            what = "%s count %d" % (dtype, count)
            for root in range(w):
                got = mine.clone() if job.rank == root else poison(dtype, count)
                dist.broadcast(got, src=root)
                job.check(same_bits(got, every[root]), "broadcast %s root %d" % (what, root))
                got = [poison(dtype, count) for _ in range(w)] if job.rank == root else None
                dist.gather(mine, got, dst=root)
                if job.rank == root:
                    job.check(all(same_bits(g, e) for g, e in zip(got, every)), "gather %s root %d" % (what, root))
                parts = [inputs(dtype, count, case + ("scatter", q), root) for q in range(w)]
                got = poison(dtype, count)
                dist.scatter(got, parts if job.rank == root else None, src=root)
                job.check(same_bits(got, parts[job.rank]), "scatter %s root %d" % (what, root))
            got = [poison(dtype, count) for _ in range(w)]
            dist.all_gather(got, mine)
            job.check(all(same_bits(g, e) for g, e in zip(got, every)), "all_gather (list) %s" % what)
            out = poison(dtype, count * w)
            dist.all_gather_into_tensor(out, mine)
            job.check(same_bits(out, torch.cat(every)), "all_gather_into_tensor %s" % what)
        # Coalesced (FSDP2's pattern), into a non-contiguous output as well.
        xs = [inputs(dtype, n, ("agc", str(dtype), n), job.rank) for n in (5, 300)]
        wants = [torch.cat([inputs(dtype, n, ("agc", str(dtype), n), q) for q in range(w)]) for n in (5, 300)]
        outs = [poison(dtype, 5 * w), poison(dtype, 2 * 300 * w)[::2]]
        with dist._coalescing_manager(async_ops=True) as cm:
            for o, x in zip(outs, xs):
                dist.all_gather_into_tensor(o, x)
        cm.wait()
        job.check(all(same_bits(o.contiguous(), x) for o, x in zip(outs, wants)),
                  "allgather_into_tensor_coalesced %s" % dtype)


def test_all_to_all(job):
    w = job.world
    for dtype in MOVED:
        for rows in (0, 1, 100):
            block = rows * 3
            x = inputs(dtype, block * w, ("a2a", str(dtype), rows), job.rank).view(rows * w, 3)
            want = torch.cat([inputs(dtype, block * w, ("a2a", str(dtype), rows), q)[job.rank * block:
                                                                                     (job.rank + 1) * block]
                              for q in range(w)]).view(rows * w, 3)
            got = poison(dtype, block * w).view(rows * w, 3)
            dist.all_to_all_single(got, x)
            job.check(same_bits(got, want), "all_to_all_single %s rows %d" % (dtype, rows))
        # Uneven: rank r sends (r + q) % 3 + q rows of 2 to rank q.
        rows_to = [[(r + q) % 3 + q for q in range(w)] for r in range(w)]
        sent = [inputs(dtype, sum(rows_to[r]) * 2, ("a2av", str(dtype)), r).view(-1, 2) for r in range(w)]
        want = torch.cat([sent[r].split(rows_to[r])[job.rank] for r in range(w)])
        recv_rows = [rows_to[r][job.rank] for r in range(w)]
        got = poison(dtype, sum(recv_rows) * 2).view(-1, 2)
        dist.all_to_all_single(got, sent[job.rank], recv_rows, rows_to[job.rank])
        job.check(same_bits(got, want), "all_to_all_single uneven %s" % dtype)
        outs = [poison(dtype, n * 2).view(n, 2) for n in recv_rows]
        dist.all_to_all(outs, list(sent[job.rank].split(rows_to[job.rank])))
        job.check(same_bits(torch.cat(outs), want), "all_to_all (lists) %s" % dtype)


def test_point_to_point(job):
    w = job.world
    nxt, prev = (job.rank + 1) % w, (job.rank - 1) % w
    for dtype in MOVED:
        for count in (0, 1, 2 ** 16 + 1):
            case = ("p2p", str(dtype), count)
            got = poison(dtype, count)
            dist.send(inputs(dtype, count, case, job.rank), dst=nxt)  # eager on host memory: every rank sends first
            dist.recv(got, src=prev)
            job.check(same_bits(got, inputs(dtype, count, case, prev)), "send/recv %s count %d" % (dtype, count))
        case = ("batch", str(dtype))
        got = [poison(dtype, 33) for _ in range(w)]
        ops = [dist.P2POp(dist.isend, inputs(dtype, 33, case + (q,), job.rank), q) for q in range(w)]
        ops += [dist.P2POp(dist.irecv, got[q], q) for q in range(w)]
        for work in dist.batch_isend_irecv(ops):
            work.wait()
        job.check(all(same_bits(got[q], inputs(dtype, 33, case + (job.rank,), q)) for q in range(w)),
                  "batch_isend_irecv %s" % dtype)


def test_complex_sums(job):
    """Complex SUM, AVG and PREMUL_SUM reduce as (real, imaginary) pairs of floats; every value here is exact."""
    w = job.world
    for dtype in (torch.complex32, torch.complex64, torch.complex128):
        for count in COUNTS:
            case = ("csum", str(dtype), count)
            every = [inputs(dtype, count * w, case, q) for q in range(w)]
            total = sum(every[1:], every[0].clone())
            real = torch.view_as_real(total)
            avg = torch.view_as_complex((real / w).contiguous())  # each part divided once, as weft divides
            what = "%s count %d" % (dtype, count)
            for root in range(w):
                got = every[job.rank].clone()
                dist.reduce(got, dst=root)
                if job.rank == root:
                    job.check(same_bits(got, total), "reduce sum %s root %d" % (what, root))
            got = every[job.rank].clone()
            dist.reduce(got, dst=0, op=dist.ReduceOp.AVG)
            if job.rank == 0:
                job.check(same_bits(got, avg), "reduce avg %s" % what)
            block = slice(job.rank * count, (job.rank + 1) * count)
            out = poison(dtype, count)
            dist.reduce_scatter_tensor(out, every[job.rank], op=dist._make_nccl_premul_sum(0.5))
            job.check(same_bits(out, total[block] * 0.5), "reduce_scatter_tensor premul_sum %s" % what)
            # torch's functional collectives hand the backend complex tensors as they are.
            got = funcol.wait_tensor(funcol.all_reduce(every[job.rank], "avg", dist.group.WORLD))
            job.check(same_bits(got, avg), "functional all_reduce avg %s" % what)
    # A conjugate view holds other values than it reads as: weft must move and reduce what it reads as. (Through
    # torch.distributed's functions torch resolves the view before any backend sees it, and loses what reduce
    # writes; a caller of the backend object hands it over as it is.)
    backend = dist.group.WORLD._get_backend(torch.device("cpu"))
    z = inputs(torch.complex64, 50, "conj", job.rank)
    every = [inputs(torch.complex64, 50, "conj", q) for q in range(w)]
    got = [[poison(torch.complex64, 50) for _ in range(w)]]
    backend.allgather(got, [z.conj()]).wait()
    job.check(all(same_bits(g, e.conj().resolve_conj()) for g, e in zip(got[0], every)),
              "all_gather of a conjugate view")
    zc = z.clone().conj()
    opts = dist.ReduceOptions()
    opts.rootRank = 0
    backend.reduce([zc], opts).wait()
    if job.rank == 0:
        # The sum of what the views read as (the conjugate of the sum would have -0.0 for its +0.0s).
        conjs = [e.conj().resolve_conj() for e in every]
        want = sum(conjs[1:], conjs[0].clone())
        job.check(zc.is_conj() and same_bits(zc.resolve_conj(), want), "reduce into a conjugate view")


def test_refusals(job):
    """A reduction without a meaning for the dtype is an exception naming the op and the dtype."""
    job.expect_raises(lambda: dist.all_reduce(torch.ones(4, dtype=torch.uint16)), (TypeError,),
                      ["all_reduce", "UInt16", "no weft reduction"], "uint16 all_reduce")
    job.expect_raises(lambda: dist.reduce_scatter_tensor(torch.ones(2, dtype=torch.uint32),
                                                         torch.ones(2 * job.world, dtype=torch.uint32)),
                      (TypeError,), ["reduce_scatter_tensor", "UInt32"], "uint32 reduce_scatter_tensor")
    job.expect_raises(lambda: dist.reduce(torch.ones(4).to(torch.float8_e4m3fn), dst=0), (TypeError,),
                      ["reduce", "Float8_e4m3fn"], "float8 reduce")
    for op, name in [(dist.ReduceOp.PRODUCT, "PRODUCT"), (dist.ReduceOp.MAX, "MAX"), (dist.ReduceOp.MIN, "MIN")]:
        job.expect_raises(lambda op=op: dist.reduce(torch.ones(4, dtype=torch.complex64), dst=0, op=op),
                          (ValueError,), ["reduce", name, "ComplexFloat"], "complex reduce %s" % name)
    job.check_still_works("after refusals")


def main():
    run_tests([("broadcast and gathers", test_broadcast_and_gathers), ("all_to_all", test_all_to_all),
               ("point to point", test_point_to_point), ("complex sums", test_complex_sums),
               ("refusals", test_refusals)])


if __name__ == "__main__":
    main()
