"""Point-to-point with tags and from any source on weft's torch backend against gloo in the same job, bit for bit.

    .venv/bin/torchrun --standalone --nproc_per_node 3 tests/torch/test_p2p.py

Every rank sends to the next rank several messages on different tags and receives them from the previous rank in
another order than they were sent: blocking send/recv, isend/irecv, irecv before isend (every rank's receives
posted, then an all_reduce, then the sends; then a later irecv whose message comes first), and batch_isend_irecv
with a tag per pair and per message; rank 0 receives from any source (irecv and recv without a src), reporting each
sender. gloo does the same exchange in the same job, and weft's results must equal gloo's exactly (and the inputs,
which name sender, tag and message). Receive buffers are poisoned first. A tag outside [0, WEFT_TAG_MAX] is a
ValueError naming it, and the group goes on.
"""

import torch
import torch.distributed as dist

from common import Job, same_bits

# (tag, dtype, count): the messages each rank sends to the next, in this order; received in reverse.
MESSAGES = [(3, torch.float32, 1000), (1, torch.bfloat16, 7), (2, torch.int64, 2 ** 18 + 1), (0, torch.uint8, 33)]
TAG_MAX = 32767


def message(sender, tag, dtype, count, k=0):
    """What `sender` sends on `tag` (its k-th message there): small integers naming where it came from."""
    v = (torch.arange(count) % 50 + sender * 7 + tag * 3 + k) % 100
    return v.to(dtype)


def poison(dtype, count):
    return torch.full((count,), 77, dtype=dtype)


def exchange(job, group, blocking, receives_first=False):
    """Sends MESSAGES to the next rank and takes them from the previous one in reverse order; the received list.
    receives_first: every rank posts its irecvs, then an all_reduce, and only then its isends (MPI's halo
    exchange): no receive may hold back the calls after it."""
    w = job.world
    nxt, prev = (job.rank + 1) % w, (job.rank - 1) % w
    got = [poison(dtype, count) for _, dtype, count in MESSAGES]
    if receives_first:
        recvs = [dist.irecv(got[i], prev, group=group, tag=MESSAGES[i][0]) for i in reversed(range(len(MESSAGES)))]
        total = torch.full((5,), job.rank + 1, dtype=torch.int64)
        dist.all_reduce(total, group=group)
        job.check(bool((total == w * (w + 1) // 2).all()), "all_reduce between the irecvs and the isends: %s" %
                  total.tolist())
        sends = [dist.isend(message(job.rank, tag, dtype, count), nxt, group=group, tag=tag)
                 for tag, dtype, count in MESSAGES]
        for work in recvs + sends:
            work.wait()
        # A later irecv whose message comes first: rank r sends tag 9 and waits for its own tag 9 message
        # before it sends tag 8, which its peer posted a receive for earlier.
        late = [poison(torch.float32, 100), poison(torch.int32, 9)]
        first = dist.irecv(late[0], prev, group=group, tag=8)
        second = dist.irecv(late[1], prev, group=group, tag=9)
        sends = [dist.isend(message(job.rank, 9, torch.int32, 9), nxt, group=group, tag=9)]
        second.wait()
        sends.append(dist.isend(message(job.rank, 8, torch.float32, 100), nxt, group=group, tag=8))
        for work in [first] + sends:
            work.wait()
        job.check(same_bits(late[0], message(prev, 8, torch.float32, 100)) and
                  same_bits(late[1], message(prev, 9, torch.int32, 9)), "an irecv completed before an earlier one")
        return got
    # gloo's blocking send waits for its receiver: the sends go first.
    sends = [dist.isend(message(job.rank, tag, dtype, count), nxt, group=group, tag=tag)
             for tag, dtype, count in MESSAGES]
    if blocking:
        for i in reversed(range(len(MESSAGES))):
            dist.recv(got[i], prev, group=group, tag=MESSAGES[i][0])
    else:
        recvs = [dist.irecv(got[i], prev, group=group, tag=MESSAGES[i][0]) for i in reversed(range(len(MESSAGES)))]
        for work in recvs:
            work.wait()
    for work in sends:
        work.wait()
    return got


def test_tagged_send_recv(job):
    prev = (job.rank - 1) % job.world
    for blocking, first in ((True, False), (False, False), (False, True)):
        form = "send/recv" if blocking else "irecv before isend" if first else "isend/irecv"
        got = exchange(job, None, blocking, first)
        want = exchange(job, job.gloo, blocking, first)
        for (tag, dtype, count), g, r in zip(MESSAGES, got, want):
            job.check(same_bits(g, r), "%s tag %d %s count %d: weft differs from gloo" % (form, tag, dtype, count))
            job.check(same_bits(g, message(prev, tag, dtype, count)), "%s tag %d: not rank %d's message" %
                      (form, tag, prev))
    # weft's blocking send of a tagged message the receiver takes only after a later one: eager, no wait.
    if job.world > 1:
        nxt = (job.rank + 1) % job.world
        dist.send(message(job.rank, 5, torch.float32, 10), nxt, tag=5)
        dist.send(message(job.rank, 6, torch.float32, 10), nxt, tag=6)
        b, a = poison(torch.float32, 10), poison(torch.float32, 10)
        dist.recv(b, prev, tag=6)
        dist.recv(a, prev, tag=5)
        job.check(same_bits(a, message(prev, 5, torch.float32, 10)) and
                  same_bits(b, message(prev, 6, torch.float32, 10)), "blocking sends taken in reverse by tag")


def batch(job, group):
    """batch_isend_irecv with every other rank: two messages per pair on tags 10 + sender and 20 + sender,
    each rank listing its receives (second tag first) before its sends; the received tensors by (peer, tag)."""
    ops, got = [], {}
    peers = [q for q in range(job.world) if q != job.rank]
    for q in peers:
        for base in (20, 10):
            got[(q, base)] = poison(torch.float32, 3000)
            ops.append(dist.P2POp(dist.irecv, got[(q, base)], q, group, tag=base + q))
    for q in peers:
        for base in (10, 20):
            ops.append(dist.P2POp(dist.isend, message(job.rank, base + job.rank, torch.float32, 3000), q, group,
                                  tag=base + job.rank))
    for work in dist.batch_isend_irecv(ops):
        work.wait()
    return got


def test_batch_isend_irecv_tags(job):
    got = batch(job, None)
    want = batch(job, job.gloo)
    for (q, base), g in got.items():
        job.check(same_bits(g, want[(q, base)]), "batch_isend_irecv tag %d from rank %d: weft differs from gloo" %
                  (base + q, q))
        job.check(same_bits(g, message(q, base + q, torch.float32, 3000)), "batch_isend_irecv tag %d from rank %d"
                  % (base + q, q))


def from_anyone(job, group):
    """Every rank sends rank 0 two messages, on tags 0 and 7; rank 0 takes tag 7's by irecv without a src and
    tag 0's by recv without one: {(sender, tag): tensor}, each sender as the Work (or recv) reported it."""
    got, sends = {}, []
    if job.rank != 0 or job.world == 1:  # isend: gloo's blocking send would wait for rank 0 to take tag 0 first
        sends = [dist.isend(message(job.rank, tag, torch.int32, 500), 0, group=group, tag=tag) for tag in (0, 7)]
    if job.rank != 0:
        for work in sends:
            work.wait()
        return got
    peers = job.world - 1 if job.world > 1 else 1
    boxes = [poison(torch.int32, 500) for _ in range(peers)]
    works = [dist.irecv(b, group=group, tag=7) for b in boxes]
    for b, work in zip(boxes, works):
        work.wait()
        got[(work._source_rank(), 7)] = b
    for _ in range(peers):
        b = poison(torch.int32, 500)
        got[(dist.recv(b, group=group), 0)] = b
    for work in sends:
        work.wait()
    return got


def test_recv_any_source(job):
    got = from_anyone(job, None)
    want = from_anyone(job, job.gloo) if job.world > 1 else got  # gloo cannot send to itself
    if job.rank != 0:
        return
    senders = [q for q in range(1, job.world)] or [0]
    job.check(sorted(got) == sorted((q, t) for q in senders for t in (0, 7)), "recv from any source: senders %s"
              % sorted(got))
    job.check(sorted(got) == sorted(want), "recv from any source: weft's senders %s, gloo's %s" %
              (sorted(got), sorted(want)))
    for (q, tag), g in got.items():
        job.check(same_bits(g, message(q, tag, torch.int32, 500)), "recv from any source: rank %d's tag %d" % (q, tag))
        job.check((q, tag) in want and same_bits(g, want[(q, tag)]), "recv from any source: rank %d's tag %d differs "
                  "from gloo's" % (q, tag))


def test_refusals(job):
    peer = (job.rank + 1) % job.world
    for tag in (-1, TAG_MAX + 1):
        job.expect_raises(lambda: dist.send(torch.ones(4), dst=peer, tag=tag), (ValueError,),
                          ["send", "tag %d" % tag, "WEFT_TAG_MAX"], "send with tag %d" % tag)
        job.expect_raises(lambda: dist.recv(torch.ones(4), src=peer, tag=tag), (ValueError,),
                          ["recv", "tag %d" % tag, "WEFT_TAG_MAX"], "recv with tag %d" % tag)
    x = torch.full((10,), float(job.rank + 1))
    dist.all_reduce(x)
    job.check(bool((x == job.world * (job.world + 1) / 2).all().item()), "all_reduce after refusals")


def main():
    job = Job()
    for name, fn in [("tagged send/recv", test_tagged_send_recv), ("batch with tags", test_batch_isend_irecv_tags),
                     ("recv from any source", test_recv_any_source), ("refusals", test_refusals)]:
        job.run(name, fn)
    job.finish()


if __name__ == "__main__":
    main()
