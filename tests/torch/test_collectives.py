"""Every collective of weft's torch backend against gloo in the same job, bit for bit.

    .venv/bin/torchrun --standalone --nproc_per_node 4 tests/torch/test_collectives.py

Inputs are random integers (a different draw per rank and case) small enough that every sum, product, min and max is
exact in every dtype, so any order of reduction gives the same bits and weft's result must equal gloo's exactly.
Outputs are poisoned first, so unwritten elements show. Where gloo lacks a reduction (AVG, PREMUL_SUM) the reference
is gloo's SUM with torch's division or scaling, done as weft defines it (see include/weft/weft.h); gloo has no int16
at all, so int16 references are gloo's on the same values as int32 (every value these tests make fits int16, so the
int32 result narrows exactly). Each dtype x op x count runs in place; out-of-place, non-contiguous, asynchronous and
coalesced forms are covered as well (all_gather_coalesced and sparse all-reduces too), and reduce, gather, scatter,
all-to-all (even, uneven, lists), send/recv and batch_isend_irecv over a few dtypes and every root, and all_gather and
reduce_scatter lists whose blocks differ in size per rank. The dtypes weft only moves (uint16..64, complex, float8)
are test_dtypes.py's.
"""

import datetime
import os
import sys
import zlib

import torch
import torch.distributed as dist

from common import bound_device, run_tests, same_bits

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "common"))
from threads import stream_threads  # noqa: E402

DTYPES = [torch.float32, torch.float64, torch.bfloat16, torch.float16, torch.int8, torch.uint8, torch.int16,
          torch.int32, torch.int64, torch.bool]
OPS = ["sum", "avg", "product", "min", "max", "premul_sum"]
COUNTS = [0, 1, 7, 1000, 2 ** 20 + 3]
PREMUL = 0.5  # exact in every float type


def inputs(job, dtype, count, op, case, rank=None):
    """This rank's (or `rank`'s) exact-integer input for one case."""
    rank = job.rank if rank is None else rank
    g = torch.Generator().manual_seed(zlib.crc32(repr((case, rank)).encode()))
    if dtype == torch.bool:
        return torch.randint(0, 2, (count,), generator=g).bool()
    if op == "product":  # nonzero, |product| <= 3^4 = 81
        v = torch.randint(1, 4, (count,), generator=g)
        if dtype != torch.uint8:
            v = v * (torch.randint(0, 2, (count,), generator=g) * 2 - 1)
    elif dtype == torch.uint8:
        v = torch.randint(0, 16, (count,), generator=g)
    else:
        v = torch.randint(-8, 9, (count,), generator=g)
    return v.to(dtype)


GLOO_AS = {torch.int16: torch.int32}  # dtypes gloo lacks, and what its references compute them in


def on_gloo(fn, *args):
    """fn(*args), a gloo collective, with every tensor of a dtype gloo lacks (alone or in a list) passed to it widened
    (GLOO_AS) and its result copied back: exact for every value these tests make."""
    back = []

    def widen(a):
        if isinstance(a, list):
            return [widen(t) for t in a]
        if isinstance(a, torch.Tensor) and a.dtype in GLOO_AS:
            w = a.to(GLOO_AS[a.dtype])
            back.append((a, w))
            return w
        return a
    fn(*[widen(a) for a in args])
    for a, w in back:
        a.copy_(w)


def poison(dtype, count):
    if dtype == torch.bool:
        return torch.ones(count, dtype=dtype)
    return torch.full((count,), 77, dtype=dtype)


def valid(dtype, op):
    if op == "premul_sum":
        return dtype.is_floating_point
    return not (dtype == torch.bool and op == "avg")


def weft_op(op):
    if op == "premul_sum":
        return dist._make_nccl_premul_sum(PREMUL)
    return {"sum": dist.ReduceOp.SUM, "avg": dist.ReduceOp.AVG, "product": dist.ReduceOp.PRODUCT,
            "min": dist.ReduceOp.MIN, "max": dist.ReduceOp.MAX}[op]


def gloo_reduced(job, x, op, collective):
    """gloo's result of `collective(tensor, reduce_op)` for weft's `op` on input x."""
    gloo_op = {"avg": dist.ReduceOp.SUM, "premul_sum": dist.ReduceOp.SUM}.get(op) or weft_op(op)
    src = x * PREMUL if op == "premul_sum" else x.clone()
    src = src.to(GLOO_AS.get(src.dtype, src.dtype))
    out = collective(src, gloo_op).to(x.dtype)
    if out.dtype == torch.bool:
        # gloo sums bools as bytes and leaves 2 in a bool (an invalid one); weft's SUM is logical or.
        return out.view(torch.uint8) != 0
    if op != "avg":
        return out
    if out.dtype.is_floating_point:  # weft divides once, in the accumulation type (float32 for half types)
        acc = torch.float64 if out.dtype == torch.float64 else torch.float32
        return (out.to(acc) / job.world).to(out.dtype)
    return torch.div(out.to(torch.int64), job.world, rounding_mode="trunc").to(out.dtype)


def ref_all_reduce(job, x, op):
    def coll(t, rop):
        dist.all_reduce(t, op=rop, group=job.gloo)
        return t
    return gloo_reduced(job, x, op, coll)


def ref_reduce_scatter(job, big, op):
    """gloo's reduce-scatter of `big` (world * n elements): gloo's all-reduce, this rank's block."""
    n = big.numel() // job.world
    return ref_all_reduce(job, big, op)[job.rank * n:(job.rank + 1) * n]


def test_all_reduce(job):
    for dtype in DTYPES:
        for op in OPS:
            if not valid(dtype, op):
                continue
            for count in COUNTS:
                case = ("all_reduce", str(dtype), op, count)
                x = inputs(job, dtype, count, op, case)
                want = ref_all_reduce(job, x, op)
                got = x.clone()
                dist.all_reduce(got, op=weft_op(op))
                job.check(same_bits(got, want), "all_reduce %s %s count %d" % (dtype, op, count))


def test_all_reduce_forms(job):
    """Non-contiguous, asynchronous (wait and future) and coalesced all-reduces."""
    for dtype in [torch.float32, torch.bfloat16, torch.int64, torch.bool]:
        for op in ["sum", "max"]:
            case = ("forms", str(dtype), op)
            x = inputs(job, dtype, 2000, op, case)
            want = ref_all_reduce(job, x, op)
            # A column of a 2-column matrix: strided; the other column must stay as it was.
            m = torch.stack([x, poison(dtype, 2000)], dim=1)
            dist.all_reduce(m[:, 0], op=weft_op(op))
            job.check(same_bits(m[:, 0].contiguous(), want) and same_bits(m[:, 1].contiguous(), poison(dtype, 2000)),
                      "all_reduce non-contiguous %s %s" % (dtype, op))
            got = x.clone()
            work = dist.all_reduce(got, op=weft_op(op), async_op=True)
            work.wait()
            job.check(work.is_completed() and work.is_success() and same_bits(got, want),
                      "all_reduce async wait %s %s" % (dtype, op))
            got = x.clone()
            fut = dist.all_reduce(got, op=weft_op(op), async_op=True).get_future()
            value = fut.wait()
            job.check(same_bits(value[0], want) and same_bits(got, want), "all_reduce future %s %s" % (dtype, op))
    # Several tensors of one call, and the coalescing manager.
    xs = [inputs(job, torch.float32, n, "sum", ("coalesced", n)) for n in (1, 1000, 33)]
    wants = [ref_all_reduce(job, x, "sum") for x in xs]
    gots = [x.clone() for x in xs]
    dist.all_reduce_coalesced(gots)
    job.check(all(same_bits(g, w) for g, w in zip(gots, wants)), "all_reduce_coalesced")
    gots = [x.clone() for x in xs]
    with dist._coalescing_manager(async_ops=True) as cm:
        for g in gots:
            dist.all_reduce(g)
    cm.wait()
    job.check(all(same_bits(g, w) for g, w in zip(gots, wants)), "all_reduce under _coalescing_manager")
    test_sparse_all_reduce(job)


def test_sparse_all_reduce(job):
    """Sparse COO tensors (embedding gradients: rows of a hybrid tensor; and fully sparse), summed as gloo sums
    them: entries of every rank, those at one index added. Rank 1 has none."""
    g = torch.Generator().manual_seed(7 + job.rank)
    for dense in (4, None):
        nnz = 0 if job.rank == 1 else 20
        rows = torch.randint(0, 12, (1, nnz), generator=g)
        if dense is None:
            indices = torch.cat([rows, torch.randint(0, 5, (1, nnz), generator=g)])
            values = torch.randint(-9, 10, (nnz,), generator=g).float()
            size = (12, 5)
        else:
            indices = rows
            values = torch.randint(-9, 10, (nnz, dense), generator=g).float()
            size = (12, dense)
        x = torch.sparse_coo_tensor(indices, values, size)
        want = x.clone()
        dist.all_reduce(want, group=job.gloo)
        got = x.clone()
        dist.all_reduce(got)
        job.check(got.is_sparse and same_bits(got.to_dense(), want.to_dense()),
                  "sparse all_reduce (%s)" % ("hybrid" if dense else "sparse"))
    job.expect_raises(lambda: dist.all_reduce(x.clone(), op=dist.ReduceOp.MAX), (ValueError,),
                      ["all_reduce", "sparse", "SUM"], "sparse all_reduce MAX")
    job.check_still_works("after sparse all-reduces")


def test_broadcast(job):
    for dtype in DTYPES:
        for count in COUNTS:
            for root in range(job.world):
                case = ("broadcast", str(dtype), count, root)
                x = inputs(job, dtype, count, "sum", case, rank=root)
                got = x.clone() if job.rank == root else poison(dtype, count)
                work = dist.broadcast(got, src=root, async_op=True)
                work.wait()
                want = x.clone() if job.rank == root else poison(dtype, count)
                on_gloo(lambda w, root=root: dist.broadcast(w, src=root, group=job.gloo), want)
                job.check(same_bits(got, want), "broadcast %s count %d root %d" % (dtype, count, root))


def test_all_gather(job):
    for dtype in DTYPES:
        for count in COUNTS:
            case = ("all_gather", str(dtype), count)
            x = inputs(job, dtype, count, "sum", case)
            want = [poison(dtype, count) for _ in range(job.world)]
            on_gloo(lambda ws, t: dist.all_gather(ws, t, group=job.gloo), want, x)
            want_flat = torch.cat(want)
            got = [poison(dtype, count) for _ in range(job.world)]
            dist.all_gather(got, x)
            job.check(all(same_bits(g, w) for g, w in zip(got, want)), "all_gather (list) %s count %d" % (dtype, count))
            out = poison(dtype, count * job.world)
            dist.all_gather_into_tensor(out, x)
            job.check(same_bits(out, want_flat), "all_gather_into_tensor %s count %d" % (dtype, count))
            out = poison(dtype, count * job.world)  # in place: the input is this rank's block of the output
            out[job.rank * count:(job.rank + 1) * count] = x
            dist.all_gather_into_tensor(out, out[job.rank * count:(job.rank + 1) * count])
            job.check(same_bits(out, want_flat), "all_gather_into_tensor in place %s count %d" % (dtype, count))
    # Coalesced gathers (FSDP2's pattern) and a non-contiguous output block.
    xs = [inputs(job, torch.bfloat16, n, "sum", ("agc", n)) for n in (5, 1000)]
    wants = []
    for x in xs:
        w = poison(torch.bfloat16, x.numel() * job.world)
        dist.all_gather_into_tensor(w, x, group=job.gloo)
        wants.append(w)
    outs = [poison(torch.bfloat16, x.numel() * job.world) for x in xs]
    with dist._coalescing_manager(async_ops=True) as cm:
        for o, x in zip(outs, xs):
            dist.all_gather_into_tensor(o, x)
    cm.wait()
    job.check(all(same_bits(o, w) for o, w in zip(outs, wants)), "allgather_into_tensor_coalesced")
    # torch's (deprecated) all_gather_coalesced: lists per rank of tensors shaped as the inputs, one of them
    # non-contiguous and one empty.
    ins = [inputs(job, torch.int32, n, "sum", ("agl", n)).reshape(shape)
           for n, shape in ((6, (2, 3)), (0, (0,)), (7, (7,)))]
    def lists():
        return [[poison(torch.int32, t.numel()).reshape(t.shape) for t in ins] for _ in range(job.world)]
    want, got = lists(), lists()
    got[0][0] = torch.full((3, 2), 77, dtype=torch.int32).t()
    on_gloo(lambda o, i: dist.all_gather_coalesced(o, i, group=job.gloo), want, ins)
    dist.all_gather_coalesced(got, ins)
    job.check(all(same_bits(g.contiguous(), w) for gs, ws in zip(got, want) for g, w in zip(gs, ws)),
              "all_gather_coalesced")
    x = inputs(job, torch.float32, 300, "sum", "agnc")
    m = torch.zeros(job.world * 300, 2)
    dist.all_gather_into_tensor(m[:, 1], x)
    w = torch.zeros(job.world * 300)
    dist.all_gather_into_tensor(w, x, group=job.gloo)
    job.check(same_bits(m[:, 1].contiguous(), w) and not m[:, 0].any().item(),
              "all_gather_into_tensor non-contiguous output")


def test_reduce_scatter(job):
    for dtype in DTYPES:
        for op in OPS:
            if not valid(dtype, op):
                continue
            for count in COUNTS:
                case = ("reduce_scatter", str(dtype), op, count)
                big = inputs(job, dtype, count * job.world, op, case)
                want = ref_reduce_scatter(job, big, op)
                out = poison(dtype, count)
                dist.reduce_scatter_tensor(out, big, op=weft_op(op))
                job.check(same_bits(out, want), "reduce_scatter_tensor %s %s count %d" % (dtype, op, count))
                if count > 1000:
                    continue  # the list and in-place forms share the path checked above
                out = poison(dtype, count)
                dist.reduce_scatter(out, list(big.chunk(job.world)) if count else
                                    [big[:0] for _ in range(job.world)], op=weft_op(op))
                job.check(same_bits(out, want), "reduce_scatter (list) %s %s count %d" % (dtype, op, count))
                inplace = big.clone()  # in place: the output is this rank's block of the input
                block = inplace[job.rank * count:(job.rank + 1) * count]
                dist.reduce_scatter_tensor(block, inplace, op=weft_op(op))
                job.check(same_bits(block, want), "reduce_scatter_tensor in place %s %s count %d" % (dtype, op, count))
    bigs = [inputs(job, torch.float32, n * job.world, "sum", ("rsc", n)) for n in (3, 1000)]
    wants = [ref_reduce_scatter(job, b, "avg") for b in bigs]
    outs = [poison(torch.float32, b.numel() // job.world) for b in bigs]
    with dist._coalescing_manager(async_ops=True) as cm:
        for o, b in zip(outs, bigs):
            dist.reduce_scatter_tensor(o, b, op=dist.ReduceOp.AVG)
    cm.wait()
    job.check(all(same_bits(o, w) for o, w in zip(outs, wants)), "reduce_scatter_tensor_coalesced avg")


def test_uneven(job):
    """all_gather and reduce_scatter of lists whose blocks differ in size from rank to rank, as torch's NCCL backend
    takes them (gloo refuses them): a rank with no elements, one past any eager threshold, a 2-d block and a
    non-contiguous one, views of one tensor, asynchronous too. all_gather's reference is every rank's input, made here; reduce_scatter's
    is gloo's all-reduce of the whole list. Ranks whose lists differ fail, and a list whose own block does not match the
    rank's tensor is refused."""
    w = job.world
    sizes = [[91, 0, 2 ** 18 + 3, 455][q % 4] + q for q in range(w)]
    sizes[1] = 0
    shape = [(s // 2, 2) if s % 2 == 0 and s else (s,) for s in sizes]
    for dtype in [torch.float32, torch.bfloat16, torch.int8, torch.int64, torch.bool]:
        case = ("uneven all_gather", str(dtype))
        x = inputs(job, dtype, sizes[job.rank], "sum", case).reshape(shape[job.rank])
        want = [inputs(job, dtype, sizes[q], "sum", case, rank=q).reshape(shape[q]) for q in range(w)]
        got = [poison(dtype, sizes[q]).reshape(shape[q]) for q in range(w)]
        got[0] = poison(dtype, 2 * sizes[0])[::2]
        dist.all_gather(got, x, async_op=True).wait()
        job.check(all(same_bits(g.contiguous(), v) for g, v in zip(got, want)), "uneven all_gather %s" % dtype)
        flat = poison(dtype, sum(sizes))  # into views of one tensor, as users of NCCL's all_gather_v write it
        dist.all_gather(list(flat.split(sizes)), x.reshape(-1))
        job.check(same_bits(flat, torch.cat([v.reshape(-1) for v in want])), "uneven all_gather into views %s" % dtype)
        for op in OPS:
            if not valid(dtype, op):
                continue
            blocks = [inputs(job, dtype, sizes[r], op, ("uneven reduce_scatter", str(dtype), op, r)) for r in range(w)]
            at = sum(sizes[:job.rank])
            want = ref_all_reduce(job, torch.cat(blocks), op)[at:at + sizes[job.rank]]
            out = poison(dtype, sizes[job.rank])
            dist.reduce_scatter(out, blocks, op=weft_op(op))
            job.check(same_bits(out, want), "uneven reduce_scatter %s %s" % (dtype, op))
    # Lists that differ below the largest block (rank 0 says block 1 is one longer) fail on every rank, naming its
    # sizes, and leave the group working; weft's own check of the counts catches lists whose largest blocks differ.
    group = dist.new_group()
    told = [3 * w + 3] + [q + 1 for q in range(1, w)]
    if job.rank == 0:
        told[1] += 1
    mine = told[job.rank]
    job.expect_raises(lambda: dist.all_gather([torch.zeros(s) for s in told], torch.ones(mine), group=group),
                      (dist.DistBackendError,), ["all_gather", "rank %d" % job.rank, "different lists of block sizes",
                                                 ", ".join(map(str, told))], "all_gather of lists that differ")
    job.expect_raises(lambda: dist.reduce_scatter(torch.zeros(mine), [torch.ones(s) for s in told], group=group),
                      (dist.DistBackendError,), ["reduce_scatter", "rank %d" % job.rank,
                                                 "different lists of block sizes"], "reduce_scatter of lists that differ")
    x = torch.ones(5)
    dist.all_reduce(x, group=group)
    job.check(bool((x == w).all().item()), "all_reduce after lists that differ")
    dist.destroy_process_group(group)
    mine = sizes[job.rank] + 1
    job.expect_raises(lambda: dist.all_gather([torch.zeros(s) for s in sizes], torch.zeros(mine)), (ValueError,),
                      ["all_gather", "rank %d's output" % job.rank, str(mine)], "all_gather of a block not its own")
    job.expect_raises(lambda: dist.reduce_scatter(torch.zeros(mine), [torch.zeros(s) for s in sizes]), (ValueError,),
                      ["reduce_scatter", "rank %d's input block" % job.rank, str(mine)],
                      "reduce_scatter into a block not its own")
    job.check_still_works("after uneven lists")


def test_async_returns_early(job):
    """An async all-reduce returns before its peers arrived, and wait() blocks until they did."""
    import time
    x = torch.ones(1 << 16)
    if job.rank == 0:
        t0 = time.monotonic()
        work = dist.all_reduce(x, async_op=True)
        issued = time.monotonic() - t0
        done_at_issue = work.is_completed()
        work.wait()
        job.check(issued < 0.5 and not done_at_issue, "async all_reduce returned after %.3f s, completed=%s" %
                  (issued, done_at_issue))
    else:
        time.sleep(1.0)
        dist.all_reduce(x)
    job.check(bool((x == job.world).all().item()), "async all_reduce value")


def test_blocking_runs_here(job):
    """A blocking collective (async_op=False) on CPU tensors runs on the calling thread: a group that has made only
    blocking calls has started no host stream thread, while its first async call starts one. And it keeps the
    group's issue order: a blocking all-reduce issued behind an async one that is still waiting for a late peer
    pairs with the peer's blocking call, not with its async one."""
    import time

    group = dist.new_group(backend="weft")
    dist.barrier(group=group)  # makes the group's communicator
    threads = len(stream_threads())
    x = torch.full((1000,), float(job.rank + 1))
    dist.all_reduce(x, group=group)
    out = torch.empty(job.world * 3)
    dist.all_gather_into_tensor(out, torch.full((3,), float(job.rank)), group=group)
    part = torch.empty(2)
    dist.reduce_scatter_tensor(part, torch.ones(2 * job.world), group=group)
    b = torch.full((5,), float(job.rank))
    dist.broadcast(b, src=job.world - 1, group=group)
    blocking_threads = len(stream_threads())
    want = float(job.world * (job.world + 1) // 2)
    job.check(bool((x == want).all()) and out.tolist() == [float(r) for r in range(job.world) for _ in range(3)] and
              part.tolist() == [float(job.world)] * 2 and bool((b == job.world - 1).all()), "blocking values")
    job.check(blocking_threads == threads,
              "blocking collectives started %d stream threads" % (blocking_threads - threads))
    # Behind an async call in flight (rank 0's waits for the late ranks), of another size and value.
    if job.rank != 0:
        time.sleep(0.3)
    a = torch.full((7,), float(job.rank + 1))
    work = dist.all_reduce(a, async_op=True, group=group)
    c = torch.full((11,), float(10 * (job.rank + 1)))
    dist.all_reduce(c, group=group)
    work.wait()
    job.check(len(stream_threads()) > threads, "an async collective ran without a new stream thread")
    job.check(bool((a == want).all()) and bool((c == 10 * want).all()),
              "issue order: async %s, blocking %s" % (a.tolist(), c.tolist()))
    dist.destroy_process_group(group)


def test_streams_follow_issuer(job):
    """Where a rank has no core to spare (this process's CPUs over the node's ranks, LOCAL_WORLD_SIZE or an MPI
    launcher's or Slurm's count, below torch's intra-op threads plus one), a group's host stream runs each async
    collective on the CPU of the thread that issued it (weftStreamIssuerCpu); WEFT_ISSUER_CPU=1 or 0 decides
    instead, and any other value fails the group's creation.
    The issuing thread is pinned to each CPU in turn; the stream threads a group started are then narrowed to that
    CPU, or never narrowed."""
    import time

    start = os.sched_getaffinity(0)
    cpus = sorted(start)[:4]
    local = next((int(os.environ[v]) for v in ("LOCAL_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_SIZE", "MPI_LOCALNRANKS",
                                               "MV2_COMM_WORLD_LOCAL_SIZE", "SLURM_NTASKS_PER_NODE")
                  if os.environ.get(v, "").isdigit() and int(os.environ[v]) > 0), 1)
    auto = len(start) // local < torch.get_num_threads() + 1
    saved = os.environ.pop("WEFT_ISSUER_CPU", None)
    try:
        for setting, follows in (("1", True), ("0", False), (None, auto)):
            if setting is not None:
                os.environ["WEFT_ISSUER_CPU"] = setting
            group = dist.new_group(backend="weft")
            dist.barrier(group=group)  # makes the group's communicator
            before = set(stream_threads())
            # The group's first stream starts here, unpinned: a thread starts on its creator's CPUs, and a stream's
            # thread follows its issuers within those only.
            dist.all_reduce(torch.ones(4), async_op=True, group=group).wait()
            unpinned = set(stream_threads()) - before
            job.check(bool(unpinned), "WEFT_ISSUER_CPU=%s: an async collective started no stream thread" % setting)
            for c in cpus:
                os.sched_setaffinity(0, {c})
                x = torch.full((1000,), float(job.rank + 1))
                work = dist.all_reduce(x, async_op=True, group=group)
                # Not wait() at once: a waiter that finds the collective not started runs it itself.
                deadline = time.monotonic() + 60
                while not work.is_completed() and time.monotonic() < deadline:
                    time.sleep(0.001)
                work.wait()
                # The stream goes back to the group's pool just after the Work completes; the next call would
                # otherwise start a stream on this pinned thread, which starts on this one CPU. Should one start
                # all the same, only the streams started unpinned are held to "never narrowed".
                time.sleep(0.05)
                job.check(bool((x == job.world * (job.world + 1) // 2).all()), "values, CPU %d" % c)
                mine = {t: a for t, a in stream_threads().items() if t not in before}
                what = "WEFT_ISSUER_CPU=%s, issued on CPU %d: the group's stream threads may run on %s" % (
                    setting, c, sorted(map(sorted, mine.values())))
                if follows:
                    job.check({c} in mine.values(), what)
                else:
                    job.check(all(a == start for t, a in mine.items() if t in unpinned), what)
            os.sched_setaffinity(0, start)
            dist.destroy_process_group(group)
            os.environ.pop("WEFT_ISSUER_CPU", None)
        os.environ["WEFT_ISSUER_CPU"] = "2"
        job.expect_raises(lambda: dist.new_group(backend="weft"), (RuntimeError, ValueError),
                          ["WEFT_ISSUER_CPU=2"], "a bad WEFT_ISSUER_CPU")
    finally:
        os.sched_setaffinity(0, start)
        os.environ.pop("WEFT_ISSUER_CPU", None)
        if saved is not None:
            os.environ["WEFT_ISSUER_CPU"] = saved
    job.check_still_works("after the stream placement settings")


def test_freed_on_issuing_thread(job):
    """A finished host collective's tensors are freed on a thread that issues collectives, never on weft's stream
    thread, whether its Work was waited for or dropped unwaited: freeing their Python objects on a thread of weft's
    own aborts the process once the interpreter is finalizing (torch's gloo workers do, in all_gather_object at
    exit). Rank 0's all-reduce ends after it dropped everything, as rank 1 joins late."""
    import threading
    import time
    import weakref
    freed_on = []
    for waited in (True, False):
        x = torch.ones(1 << 10)
        weakref.finalize(x, lambda: freed_on.append(threading.get_ident()))
        if job.rank == 1:
            time.sleep(0.3)
        work = dist.all_reduce(x, async_op=True)
        if waited:
            work.wait()
        del x, work
    for _ in range(500):  # each issue drops what finished since; every rank loops as long as the slowest
        done = torch.tensor([1 if len(freed_on) >= 2 else 0])
        dist.all_reduce(done, op=dist.ReduceOp.MIN)
        if done.item():
            break
        time.sleep(0.01)
    main = threading.main_thread().ident
    job.check(freed_on == [main, main], "the all-reduces' tensors were freed on threads %s, not only on the main "
              "thread %d (2 expected)" % (freed_on, main))


def test_barrier_and_objects(job):
    dist.barrier()
    dist.barrier(async_op=True).wait()
    objs = [{"rank": 0, "list": [1, 2.5, "three"]}, None] if job.rank == 0 else [None, None]
    if job.rank == 0:
        objs[1] = ("tuple", job.world)
    dist.broadcast_object_list(objs, src=0)
    job.check(objs == [{"rank": 0, "list": [1, 2.5, "three"]}, ("tuple", job.world)], "broadcast_object_list")
    gathered = [None] * job.world
    dist.all_gather_object(gathered, {"r": job.rank, "s": "x" * (job.rank * 1000)})
    job.check(gathered == [{"r": r, "s": "x" * (r * 1000)} for r in range(job.world)], "all_gather_object")


def test_subgroups(job):
    """Each subgroup has a communicator of its own: disjoint halves, an overlapping pair, the whole world again."""
    w = job.world
    patterns = [list(range(0, w, 2)), list(range(1, w, 2)), [0, w - 1], list(range(w))]
    groups = [(ranks, dist.new_group(ranks), dist.new_group(ranks, backend="gloo")) for ranks in patterns]
    for ranks, g, gg in groups:
        if job.rank not in ranks:
            continue
        x = inputs(job, torch.int64, 1001, "sum", ("sub", tuple(ranks)))
        want = x.clone()
        dist.all_reduce(want, group=gg)
        got = x.clone()
        dist.all_reduce(got, group=g)
        job.check(same_bits(got, want), "subgroup %s all_reduce" % ranks)
        out = poison(torch.int64, 1001 * len(ranks))
        dist.all_gather_into_tensor(out, x, group=g)
        ref = poison(torch.int64, 1001 * len(ranks))
        dist.all_gather_into_tensor(ref, x, group=gg)
        job.check(same_bits(out, ref), "subgroup %s all_gather_into_tensor" % ranks)
        dist.barrier(group=g)


def test_split_group(job):
    """dist.split_group, and new_group, where the default group has a bound device: torch then splits through the
    backend (WeftBackend.split), once per device type of the group's, and asks the ranks outside a new group to
    take part (perform_nocolor_split). init_process_group(device_id=cuda:N) binds one; here common.bound_device
    does. test_cuda.py does it for real."""
    w = job.world
    world = dist.distributed_c10d._get_default_group()
    backend = world._get_backend(torch.device("cpu"))
    job.check(backend.supports_splitting, "the weft backend says it supports splitting")
    job.check(backend.options._timeout == datetime.timedelta(seconds=120), "the backend's options hold its timeout")
    halves = [list(range(0, w, 2)), list(range(1, w, 2))]
    gloo_halves = [dist.new_group(ranks, backend="gloo") for ranks in halves]
    with bound_device():
        # The ranks between take part in torch's split without a group. Past this (at 3 ranks or more), torch
        # names the splits' stores differently on different members: the members must meet elsewhere.
        pair = dist.new_group([0, w - 1])
        split = dist.split_group(split_ranks=halves)
        whole = dist.split_group(split_ranks=[list(range(w))])
    mine = job.rank % 2
    for what, g, gg, ranks in (("split half", split, gloo_halves[mine], halves[mine]),
                               ("split whole", whole, job.gloo, list(range(w)))):
        job.check(dist.get_backend(g) == "weft", "%s is weft's, not %s's" % (what, dist.get_backend(g)))
        job.check(dist.get_process_group_ranks(g) == ranks and g.size() == len(ranks)
                  and g.rank() == ranks.index(job.rank), "%s: ranks %s, size %d, rank %d"
                  % (what, dist.get_process_group_ranks(g), g.size(), g.rank()))
        x = inputs(job, torch.int64, 1001, "sum", ("split", what))
        want, got = x.clone(), x.clone()
        dist.all_reduce(want, group=gg)
        dist.all_reduce(got, group=g)
        job.check(same_bits(got, want), "%s all_reduce" % what)
        out, ref = poison(torch.int64, 1001 * len(ranks)), poison(torch.int64, 1001 * len(ranks))
        dist.all_gather_into_tensor(out, x, group=g)
        dist.all_gather_into_tensor(ref, x, group=gg)
        job.check(same_bits(out, ref), "%s all_gather_into_tensor" % what)
    if job.rank in (0, w - 1):
        x = torch.full((7,), float(job.rank + 1))
        dist.all_reduce(x, group=pair)
        job.check(bool((x == 1 + w).all().item()), "new_group under a bound device all_reduce")
    job.expect_raises(lambda: world.split_group([0, w]), (RuntimeError,), ["split", "ranks holds %d" % w],
                      "split with a rank outside the group")
    job.check_still_works("after split groups")


ROOTED_DTYPES = [torch.float32, torch.bfloat16, torch.int8, torch.int16, torch.int64, torch.bool]


def test_rooted(job):
    """reduce, gather, scatter for every root against gloo's."""
    for dtype in ROOTED_DTYPES:
        for count in [0, 1, 1000] + ([2 ** 20 + 3] if dtype == torch.float32 else []):
            for root in range(job.world):
                case = ("rooted", str(dtype), count, root)
                for op in ["sum", "max"] + (["avg"] if dtype != torch.bool else []):
                    x = inputs(job, dtype, count, op, case + (op,))

                    def gloo_reduce(t, rop, root=root):
                        dist.reduce(t, dst=root, op=rop, group=job.gloo)
                        return t
                    want = gloo_reduced(job, x, op, gloo_reduce)
                    got = x.clone()
                    dist.reduce(got, dst=root, op=weft_op(op))
                    if job.rank == root:
                        job.check(same_bits(got, want), "reduce %s %s count %d root %d" % (dtype, op, count, root))
                x = inputs(job, dtype, count, "sum", case + ("gather",))
                got = [poison(dtype, count) for _ in range(job.world)] if job.rank == root else None
                want = [poison(dtype, count) for _ in range(job.world)] if job.rank == root else None
                dist.gather(x, got, dst=root)
                on_gloo(lambda t, ws, root=root: dist.gather(t, ws, dst=root, group=job.gloo), x, want)
                if job.rank == root:
                    job.check(all(same_bits(g, w) for g, w in zip(got, want)),
                              "gather %s count %d root %d" % (dtype, count, root))
                parts = ([inputs(job, dtype, count, "sum", case + ("scatter", q)) for q in range(job.world)]
                         if job.rank == root else None)
                got, want = poison(dtype, count), poison(dtype, count)
                dist.scatter(got, parts, src=root)
                on_gloo(lambda w, ps, root=root: dist.scatter(w, ps, src=root, group=job.gloo), want, parts)
                job.check(same_bits(got, want), "scatter %s count %d root %d" % (dtype, count, root))


def test_all_to_all(job):
    """all_to_all_single (even and uneven splits) and all_to_all of lists against gloo's all_to_all_single."""
    w = job.world
    for dtype in ROOTED_DTYPES:
        for rows in [0, 1, 333]:
            x = inputs(job, dtype, rows * w * 3, "sum", ("a2a", str(dtype), rows)).view(rows * w, 3)
            got, want = poison(dtype, rows * w * 3).view(rows * w, 3), poison(dtype, rows * w * 3).view(rows * w, 3)
            dist.all_to_all_single(got, x)
            on_gloo(lambda w, t: dist.all_to_all_single(w, t, group=job.gloo), want, x)
            job.check(same_bits(got, want), "all_to_all_single %s rows %d" % (dtype, rows))
        # Uneven: rank r sends (r + q) % 3 + q rows to rank q.
        send_rows = [(job.rank + q) % 3 + q for q in range(w)]
        recv_rows = [(r + job.rank) % 3 + job.rank for r in range(w)]
        x = inputs(job, dtype, sum(send_rows) * 2, "sum", ("a2av", str(dtype))).view(-1, 2)
        got, want = poison(dtype, sum(recv_rows) * 2).view(-1, 2), poison(dtype, sum(recv_rows) * 2).view(-1, 2)
        dist.all_to_all_single(got, x, recv_rows, send_rows)
        on_gloo(lambda w, t: dist.all_to_all_single(w, t, recv_rows, send_rows, group=job.gloo), want, x)
        job.check(same_bits(got, want), "all_to_all_single uneven %s" % dtype)
        ins = list(x.split(send_rows))
        outs = [poison(dtype, n * 2).view(n, 2) for n in recv_rows]
        dist.all_to_all(outs, ins)
        job.check(same_bits(torch.cat(outs), want), "all_to_all (lists) %s" % dtype)


def test_send_recv(job):
    """A ring: every rank sends to the next and receives from the previous (sends are eager on host memory)."""
    w = job.world
    nxt, prev = (job.rank + 1) % w, (job.rank - 1) % w
    for dtype in ROOTED_DTYPES:
        for count in [0, 1, 1000, 2 ** 18 + 1]:
            x = inputs(job, dtype, count, "sum", ("p2p", str(dtype), count))
            want = inputs(job, dtype, count, "sum", ("p2p", str(dtype), count), rank=prev)
            got = poison(dtype, count)
            dist.send(x, dst=nxt)
            dist.recv(got, src=prev)
            job.check(same_bits(got, want), "send/recv %s count %d" % (dtype, count))
            got = poison(dtype, count)
            works = [dist.isend(x, dst=nxt), dist.irecv(got, src=prev)]
            for work in works:
                work.wait()
            job.check(same_bits(got, want), "isend/irecv %s count %d" % (dtype, count))


def test_batch_isend_irecv(job):
    """batch_isend_irecv: every rank sends to and receives from every rank (itself too) in one batch, messages
    far past any eager threshold, receives listed before sends on odd ranks, a non-contiguous receive; the same
    exchange over gloo's isend/irecv is the reference. A batch whose first op has a tag outside weft's range is
    refused, and weft's side of coalescing ends with it."""
    w = job.world
    for dtype in ROOTED_DTYPES:
        for count in [1, 2 ** 18 + 1]:
            xs = [inputs(job, dtype, count, "sum", ("batch", str(dtype), count, q)) for q in range(w)]

            got = [poison(dtype, count) for _ in range(w)]
            got[0] = poison(dtype, 2 * count)[::2]  # non-contiguous
            sends = [dist.P2POp(dist.isend, xs[q], q) for q in range(w)]
            recvs = [dist.P2POp(dist.irecv, got[q], q) for q in range(w)]
            for work in dist.batch_isend_irecv(recvs + sends if job.rank % 2 else sends + recvs):
                work.wait()
            # gloo: isend and irecv one by one, every rank's sends first; gloo cannot send to itself.
            want = [poison(dtype, count) for _ in range(w)]
            want[job.rank] = xs[job.rank]
            peers = [q for q in range(w) if q != job.rank]
            works = [dist.isend(xs[q], q, group=job.gloo) for q in peers]
            works += [dist.irecv(want[q], q, group=job.gloo) for q in peers]
            for work in works:
                work.wait()
            for q in range(w):
                job.check(same_bits(got[q].clone(memory_format=torch.contiguous_format), want[q].clone(memory_format=torch.contiguous_format)),
                          "batch_isend_irecv %s count %d from rank %d" % (dtype, count, q))
    # A refused batch, on a group of its own: torch leaves its Python coalescing state for the group set when
    # a batch raises (it never reaches endCoalescing), so that group is unusable through torch afterwards.
    # Clearing that state shows weft's backend ended its side, coalescing and the weft group, by itself.
    group = dist.new_group()
    peer, prev = (job.rank + 1) % w, (job.rank - 1) % w
    job.expect_raises(lambda: dist.batch_isend_irecv([dist.P2POp(dist.isend, torch.ones(4), peer, group, tag=-5),
                                                      dist.P2POp(dist.irecv, torch.ones(4), prev, group)]),
                      (ValueError,), ["send", "tag -5"], "batch_isend_irecv with a negative tag")
    dist.distributed_c10d._world.pg_coalesce_state.pop(group, None)
    x, got = torch.full((10,), float(job.rank + 1)), torch.zeros(10)
    for work in dist.batch_isend_irecv([dist.P2POp(dist.isend, x, peer, group),
                                        dist.P2POp(dist.irecv, got, prev, group)]):
        work.wait()
    job.check(bool((got == prev + 1).all().item()), "batch_isend_irecv after a refused batch")
    dist.all_reduce(x)
    job.check(bool((x == w * (w + 1) / 2).all().item()), "all_reduce after a refused batch")
    dist.destroy_process_group(group)


def test_refusals(job):
    """What weft cannot do is a clear exception naming the op, never a wrong result. (Tensors on the wrong
    device need a second device: tests/torch/test_cuda.py. torch itself serves meta tensors.)"""
    job.expect_raises(lambda: dist.all_reduce(torch.ones(4, dtype=torch.uint16)), (TypeError,),
                      ["all_reduce", "UInt16", "no weft reduction"], "uint16 all_reduce")
    job.expect_raises(lambda: dist.all_reduce(torch.ones(4, dtype=torch.int32), op=dist.ReduceOp.BAND),
                      (ValueError,), ["all_reduce", "BAND"], "BAND all_reduce")
    job.expect_raises(lambda: dist.all_reduce(torch.ones(4, dtype=torch.bool), op=dist.ReduceOp.AVG),
                      (ValueError,), ["all_reduce", "AVG", "bool"], "bool AVG")
    job.expect_raises(lambda: dist.all_gather_into_tensor(torch.ones(4 * job.world + 1), torch.ones(4)),
                      (ValueError,), ["all_gather_into_tensor", "elements"], "wrong output size")
    peer = (job.rank + 1) % job.world
    job.expect_raises(lambda: dist.send(torch.ones(4), dst=peer, tag=-3), (ValueError,), ["send", "tag -3"],
                      "send with a negative tag")
    job.expect_raises(lambda: dist.recv(torch.ones(4), tag=-1), (ValueError,), ["recv", "tag -1"],
                      "recv from any source with a negative tag")
    job.expect_raises(lambda: dist.all_to_all_single(torch.ones(job.world + 1), torch.ones(job.world + 1)),
                      (ValueError,), ["all_to_all_single", "evenly"], "all_to_all_single of uneven rows")
    job.check_still_works("after refusals")


def main():
    run_tests([("all_reduce", test_all_reduce), ("all_reduce forms", test_all_reduce_forms),
               ("broadcast", test_broadcast), ("all_gather", test_all_gather),
               ("reduce_scatter", test_reduce_scatter),
               ("uneven lists", test_uneven), ("async", test_async_returns_early),
               ("blocking calls run here", test_blocking_runs_here),
               ("streams follow the issuer", test_streams_follow_issuer),
               ("freed on the issuing thread", test_freed_on_issuing_thread),
               ("barrier and objects", test_barrier_and_objects),
               ("rooted", test_rooted), ("all_to_all", test_all_to_all), ("send/recv", test_send_recv),
               ("batch_isend_irecv", test_batch_isend_irecv), ("subgroups", test_subgroups),
               ("split_group", test_split_group),
               ("refusals", test_refusals)])


if __name__ == "__main__":
    main()
