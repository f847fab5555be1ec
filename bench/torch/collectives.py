"""torch.distributed collectives over weft and gloo in the same job, in nccl-tests' columns.

    .venv/bin/torchrun --standalone --nproc_per_node 4 bench/torch/collectives.py
    .venv/bin/torchrun --standalone --nproc_per_node 2 bench/torch/collectives.py --max-bytes 16M --no-ddp

For all_reduce, all_gather_into_tensor and reduce_scatter_tensor (float32, sum) and each size from 4 KiB to
256 MiB (x4), each backend runs warm-up calls and then timed ones, one blocking call at a time, as nccl-tests
does; a size's time is the median over the timed calls, the slowest rank's (with --repeat K the sweep runs K
times, the backends' order reversed every other time: the medians over the sweeps, and the ratio's range).
nccl-tests' definitions: size is the bytes of the largest buffer (all-reduce: the tensor; all-gather: the
output; reduce-scatter: the input), algbw = size / time, busbw = algbw x 2(n-1)/n for all-reduce and x (n-1)/n
for the others; "time x" is the baseline's time over weft's.
After each size's timing one more call on each backend is checked exactly (every rank's input is its rank + 1),
and a wrong result ends the run with an error.
Then DDP training steps of torchvision's ResNet-50 (random data) over each backend, under no_sync, with a
comm hook that moves nothing ("no data": DDP's own share of the synchronisation) and, on CPU tensors, with one
that only copies each bucket once ("one copy": the least any host all-reduce could add), one step of each in
turn: each one's step and its gradient synchronisation (step minus the no_sync step of the same turn),
medians over the turns, the slowest rank's
(--ddp-only: just those; --ddp-bucket-view: DDP's gradient_as_bucket_view=True). --device cuda puts the
tensors on each rank's GPU and sets torch's nccl backend beside weft instead of gloo.
Environment: WEFT_SOCKET_IFNAME=lo keeps weft's bootstrap on loopback.
"""

import argparse
import os
import statistics
import time

import torch
import torch.distributed as dist

import weft.torch  # noqa: F401  registers "weft"


def parse_bytes(s):
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    return int(float(s[:-1]) * units[s[-1].upper()]) if s[-1].upper() in units else int(s)


def bus_factor(op, n):
    return 2 * (n - 1) / n if op == "all_reduce" else (n - 1) / n


def timed(fn, iters, warmup, gloo, cuda=False):
    """The slowest rank's median time of fn() (CUDA: until the device finished it)."""
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    for _ in range(warmup):
        fn()
    sync()
    dist.barrier(group=gloo)
    samples = []
    for _ in range(iters):
        t0 = time.perf_counter()
        fn()
        sync()
        samples.append(time.perf_counter() - t0)
    return slowest_medians({"fn": samples}, gloo)["fn"]


def slowest_medians(samples, gloo):
    """{name: the median of samples[name] on the slowest rank}."""
    names = list(samples)
    worst = torch.tensor([statistics.median(samples[name]) for name in names], dtype=torch.float64)
    dist.all_reduce(worst, op=dist.ReduceOp.MAX, group=gloo)
    return dict(zip(names, worst.tolist()))


def iterations(nbytes):
    if nbytes <= 1 << 20:
        return 40, 5
    if nbytes <= 16 << 20:
        return 10, 2
    return 5, 1


def collective(op, nbytes, world, group, device):
    """A closure running `op` once on float32 buffers whose largest is `nbytes`, and its element count."""
    count = nbytes // 4
    if op == "all_reduce":
        t = torch.ones(count, device=device)
        return (lambda: dist.all_reduce(t, group=group)), count
    # The blocks of all-gather and reduce-scatter: `count` rounded down to a multiple of the world.
    if op == "all_gather_into_tensor":
        out, inp = torch.empty(count // world * world, device=device), torch.ones(count // world, device=device)
        return (lambda: dist.all_gather_into_tensor(out, inp, group=group)), count
    inp, out = torch.ones(count // world * world, device=device), torch.empty(count // world, device=device)
    return (lambda: dist.reduce_scatter_tensor(out, inp, group=group)), count


def check(op, nbytes, world, rank, group, device, name):
    """One call of `op` at `nbytes` on inputs of rank + 1 everywhere, its result compared exactly (as
    nccl-tests' -c does after timing): a backend that is fast because it is wrong fails the run."""
    count = nbytes // 4
    inp = torch.full((count if op != "all_gather_into_tensor" else count // world,), float(rank + 1),
                     device=device)
    if op == "all_reduce":
        out = inp
        dist.all_reduce(out, group=group)
        want = torch.full_like(out, world * (world + 1) / 2)
    elif op == "all_gather_into_tensor":
        out = torch.empty(count // world * world, device=device)
        dist.all_gather_into_tensor(out, inp, group=group)
        want = torch.arange(1, world + 1, dtype=out.dtype, device=device).repeat_interleave(count // world)
    else:
        out = torch.empty(count // world, device=device)
        dist.reduce_scatter_tensor(out, inp[:count // world * world], group=group)
        want = torch.full_like(out, world * (world + 1) / 2)
    if not torch.equal(out, want):
        bad = (out != want).nonzero()[0].item()
        raise RuntimeError("%s of %d bytes over %s: element %d is %r, expected %r" % (
            op, nbytes, name, bad, out[bad].item(), want[bad].item()))


def sweep(args, world, rank, gloo, base, base_name):
    """Each op and size over weft and then the baseline, --repeat times over the whole sweep (the order of the
    two reversed every other time): a size's time is the median over repeats, "time x" the median over
    repeats of each repeat's baseline time over weft's, with its range when there are several."""
    sizes = []
    s = parse_bytes(args.min_bytes)
    while s <= parse_bytes(args.max_bytes):
        sizes.append(s)
        s *= 4
    groups = {"weft": None, base_name: base}
    cuda = args.device == "cuda"
    ops = ["all_reduce", "all_gather_into_tensor", "reduce_scatter_tensor"]
    times = {(op, nbytes): [] for op in ops for nbytes in sizes}
    for repeat in range(args.repeat):
        for op in ops:
            for nbytes in sizes:
                iters, warmup = iterations(nbytes)
                order = list(groups) if repeat % 2 == 0 else list(groups)[::-1]
                times[(op, nbytes)].append({name: timed(collective(op, nbytes, world, groups[name], args.device)[0],
                                                        iters, warmup, gloo, cuda) for name in order})
                for name in order:
                    check(op, nbytes, world, rank, groups[name], args.device, name)
    if rank != 0:
        return
    for op in ops:
        print("\n# %s, %d ranks, float32 sum, %s tensors; per backend: time (us), algbw, busbw (GB/s)%s" % (
            op, world, args.device, "; medians of %d repeats" % args.repeat if args.repeat > 1 else ""))
        print("%12s %12s %6s | %10s %7s %7s | %10s %7s %7s | %9s%s" % (
            "size", "count", "type", "weft us", "algbw", "busbw", base_name + " us", "algbw", "busbw", "time x",
            "  range" if args.repeat > 1 else ""))
        for nbytes in sizes:
            runs = times[(op, nbytes)]
            cols = []
            for name in ["weft", base_name]:
                t = statistics.median(r[name] for r in runs)
                algbw = nbytes / t / 1e9
                cols += [t * 1e6, algbw, algbw * bus_factor(op, world)]
            ratios = [r[base_name] / r["weft"] for r in runs]
            spread = "  %.2f-%.2f" % (min(ratios), max(ratios)) if len(runs) > 1 else ""
            print("%12d %12d %6s | %10.1f %7.3f %7.3f | %10.1f %7.3f %7.3f | %9.2f%s" % (
                nbytes, nbytes // 4, "float", *cols, statistics.median(ratios), spread), flush=True)


def no_data_hook(state, bucket):
    """A DDP comm hook that moves nothing: the bucket, as it is, at once."""
    fut = torch.futures.Future()
    fut.set_result(bucket.buffer())
    return fut


def one_copy_hook(scratch, bucket):
    """A DDP comm hook that reads each bucket once and writes its bytes once (into a scratch buffer of its
    own, kept across steps), on the thread that runs backward, and then returns the bucket as it is: the
    least memory traffic of any all-reduce, which must read every rank's input and write every rank's
    output."""
    buf = bucket.buffer()
    out = scratch.get(bucket.index())
    if out is None or out.shape != buf.shape or out.dtype != buf.dtype:
        out = scratch[bucket.index()] = torch.empty_like(buf)
    out.copy_(buf)
    fut = torch.futures.Future()
    fut.set_result(buf)
    return fut


def ddp_steps(args, world, rank, gloo, base, base_name):
    """ResNet-50 DDP steps over weft and the baseline, and the same model's step under no_sync (forward,
    backward, optimizer: no communication at all, not even DDP's broadcast of the batch-norm buffers, which the
    synced steps make before each forward), one step of each in turn; a backend's gradient
    synchronisation is its step minus the no_sync step of the same turn. A third DDP has a comm hook that
    returns each bucket at once ("no data": nothing moves): its synchronisation is DDP's own part (copying
    gradients into buckets and back, its bookkeeping), which no backend can take away. Another copies each
    bucket once and moves nothing ("one copy"): below that no host all-reduce can go where backward leaves no
    core to spare, since its every byte must be read and written at least once by some core. Every figure is
    a median over the turns, of the slowest rank's steps."""
    import torchvision
    from torch.nn.parallel import DistributedDataParallel as DDP
    x = torch.randn(args.ddp_batch, 3, args.ddp_image, args.ddp_image, device=args.device)
    y = torch.randint(0, 1000, (args.ddp_batch,), device=args.device)
    loss_fn = torch.nn.CrossEntropyLoss()
    cuda = args.device == "cuda"
    steps = {}
    # "compute" has a DDP of its own: a model that also took synced steps would skip its next synced step's
    # buffer broadcast after each no_sync one (DDP broadcasts buffers only after a forward that synced).
    rows = {"weft": None, base_name: base, "no data": None, "compute": None}
    if not cuda:
        rows["one copy"] = None
    for name, group in rows.items():
        torch.manual_seed(0)
        model = DDP(torchvision.models.resnet50(weights=None).to(args.device), process_group=group,
                    gradient_as_bucket_view=args.ddp_bucket_view)
        if name == "no data":
            model.register_comm_hook(None, no_data_hook)
        elif name == "one copy":
            model.register_comm_hook({}, one_copy_hook)
        opt = torch.optim.SGD(model.parameters(), lr=0.01)

        def step(model=model, opt=opt):
            opt.zero_grad()
            loss_fn(model(x), y).backward()
            opt.step()

        def local(model=model, opt=opt):
            with model.no_sync():
                step(model, opt)
        steps[name] = local if name == "compute" else step
    # One step of each in turn, the order reversed every other turn, so that the load's drift and its jumps
    # between speeds (this VM's steps move by half from one second to the next) fall on every configuration
    # alike; a backend's sync is then the median over turns of its step minus the no_sync step of the same turn.
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    names = list(steps)
    for fn in steps.values():
        for _ in range(2):
            fn()
    sync()
    dist.barrier(group=gloo)
    samples = {name: [] for name in names}
    for turn in range(args.ddp_steps):
        for name in (names if turn % 2 == 0 else names[::-1]):
            t0 = time.perf_counter()
            steps[name]()
            sync()
            samples[name].append(time.perf_counter() - t0)
    # The slowest rank's time of every step.
    flat = torch.tensor([t for name in names for t in samples[name]], dtype=torch.float64)
    dist.all_reduce(flat, op=dist.ReduceOp.MAX, group=gloo)
    worst = {name: flat[i * args.ddp_steps:(i + 1) * args.ddp_steps].tolist() for i, name in enumerate(names)}
    if rank != 0:
        return

    def paired(a, b):
        """The median over turns of a's step minus b's."""
        return statistics.median(x - y for x, y in zip(worst[a], worst[b]))
    params = sum(p.numel() for p in torchvision.models.resnet50(weights=None).parameters())
    print("\n# DDP step, torchvision resnet50 (%.1f M parameters, %.0f MB of float32 gradients), batch %d of "
          "3x%dx%d per rank, %d ranks%s; %d steps of each in turn; sync = step - the no_sync step of the same "
          "turn, median over turns" % (
              params / 1e6, params * 4 / 1e6, args.ddp_batch, args.ddp_image, args.ddp_image, world,
              ", gradient_as_bucket_view" if args.ddp_bucket_view else "", args.ddp_steps))
    print("%10s %12s %12s   %s" % ("backend", "step (ms)", "sync (ms)", "steps (ms)"))
    for name in ["compute", "no data"] + (["one copy"] if "one copy" in worst else []) + ["weft", base_name]:
        synced = "" if name == "compute" else "%12.1f" % (paired(name, "compute") * 1e3)
        print("%10s %12.1f %12s   %s" % (name, statistics.median(worst[name]) * 1e3, synced,
                                         " ".join("%.0f" % (t * 1e3) for t in worst[name])))
    ws, gs = paired("weft", "compute"), paired(base_name, "compute")
    print("%10s %12.2f %12s" % ("weft/" + base_name, statistics.median(worst["weft"]) /
                                statistics.median(worst[base_name]), "%.2f" % (ws / gs) if gs > 0 else "n/a"))
    # Beyond DDP's own part: what the backends' all-reduces add to the step.
    wc, gc = paired("weft", "no data"), paired(base_name, "no data")
    print("%10s %12s %12s   (sync beyond DDP's own, %.1f and %.1f ms)" % (
        "", "", "%.2f" % (wc / gc) if gc > 0 else "n/a", wc * 1e3, gc * 1e3), flush=True)
    if "one copy" in worst:
        # The floor: a sync ratio that no host all-reduce could beat here when the cores are all busy.
        fs = paired("one copy", "compute")
        print("%10s %12s %12s   (one copy's sync over %s's)" % (
            "", "", "%.2f" % (fs / gs) if gs > 0 else "n/a", base_name), flush=True)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--min-bytes", default="4K")
    p.add_argument("--max-bytes", default="256M")
    p.add_argument("--repeat", type=int, default=1,
                   help="sweep this many times; each size's figures are the medians over the sweeps")
    p.add_argument("--no-ddp", action="store_true", help="skip the ResNet-50 DDP step")
    p.add_argument("--ddp-batch", type=int, default=4)
    p.add_argument("--ddp-image", type=int, default=112)
    p.add_argument("--ddp-steps", type=int, default=15,
                   help="timed steps of each DDP configuration, one of each in turn")
    p.add_argument("--ddp-bucket-view", action="store_true",
                   help="DDP(gradient_as_bucket_view=True): gradients live in the buckets, no copies into them")
    p.add_argument("--ddp-only", action="store_true", help="only the DDP steps, not the collectives' sweep")
    p.add_argument("--device", choices=["cpu", "cuda"], default="cpu",
                   help="cuda: CUDA tensors (one GPU per rank), beside torch's nccl backend instead of gloo")
    args = p.parse_args()
    if args.device == "cuda":
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
    dist.init_process_group("weft")
    gloo = dist.new_group(backend="gloo")
    base_name = "nccl" if args.device == "cuda" else "gloo"
    base = dist.new_group(backend="nccl") if args.device == "cuda" else gloo
    world, rank = dist.get_world_size(), dist.get_rank()
    torch.set_num_threads(1)
    if not args.ddp_only:
        sweep(args, world, rank, gloo, base, base_name)
    if not args.no_ddp:
        ddp_steps(args, world, rank, gloo, base, base_name)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
