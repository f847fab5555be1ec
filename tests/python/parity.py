"""Training through weft's own adapters against one process, for the model tests (test_llama_adapters.py,
test_encoder_adapters.py) and ranks as threads over the in-process backend.

    want = reference(model, batches, loss_fn, lr)                      # one process, the whole batch
    got = train_fsdp(model, batches, loss_fn, lr, world=2, zero_stage=3)   # rank 0's full state
    assert_close(self, got, want, tol)

Each rank trains its own copy of `model` on its slice of every batch (the
first dimension), and SGD with momentum steps on the averaged gradients: as
long as loss_fn is a mean over the batch, the same computation as the one
process on the whole batch, up to reduction order.
"""

import copy
import os
import sys
import threading

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python"))
import weft  # noqa: E402
import weft.torch  # noqa: E402

torch.set_num_threads(1)


def on_ranks(world, body, timeout=120):
    """body(rank, comm) on `world` threads, one in-process rank each; their results, or the first error."""
    comms = weft.init_in_process(world, timeout_ms=30000)
    results, errors = [None] * world, []

    def run(r):
        try:
            results[r] = body(r, comms[r])
        except BaseException as e:  # noqa: B902 - re-raised on the main thread
            errors.append(e)

    threads = [threading.Thread(target=run, args=(r,)) for r in range(world)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout)
        if t.is_alive():
            raise TimeoutError("a rank did not finish within %d s" % timeout)
    if errors:
        raise errors[0]
    return results


def _opt(params, lr):
    return torch.optim.SGD(params, lr=lr, momentum=0.9)


def _slice(batch, rank, world):
    return tuple(t[rank * (t.shape[0] // world):(rank + 1) * (t.shape[0] // world)] for t in batch)


def reference(model, batches, loss_fn, lr):
    """The state dict after training one copy of `model` on the whole batches, and the losses."""
    net = copy.deepcopy(model)
    opt = _opt(net.parameters(), lr)
    losses = []
    for batch in batches:
        opt.zero_grad()
        loss = loss_fn(net, batch)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return {k: v.detach().clone() for k, v in net.state_dict().items()}, losses


def _train(wrap, finish, model, batches, loss_fn, lr, world):
    """[(finish(wrapper), losses)] per rank; finish runs on the rank's thread (it may be collective)."""
    copies = [copy.deepcopy(model) for _ in range(world)]  # made here, not on the ranks' threads

    def body(rank, comm):
        wrapped = wrap(copies[rank], comm)
        opt = _opt(wrapped.parameters(), lr)
        losses = []
        for batch in batches:
            opt.zero_grad()
            loss = loss_fn(wrapped, _slice(batch, rank, world))
            loss.backward()
            opt.step()
            losses.append(loss.item())
        return finish(wrapped), losses
    return on_ranks(world, body)


def train_fsdp(model, batches, loss_fn, lr, world, zero_stage, mixed_precision=None, wrap_classes=None):
    """Rank 0's full_state_dict after training through weft's FSDP, and every rank's losses."""
    results = _train(lambda m, comm: weft.torch.FullyShardedDataParallel(
        m, comm=comm, zero_stage=zero_stage, mixed_precision=mixed_precision, wrap_classes=wrap_classes),
        lambda w: w.full_state_dict(), model, batches, loss_fn, lr, world)
    return results[0][0], [r[1] for r in results]


def train_ddp(model, batches, loss_fn, lr, world, **options):
    """Rank 0's state dict after training through weft's DDP, and every rank's losses."""
    results = _train(lambda m, comm: weft.torch.DistributedDataParallel(m, comm=comm, **options),
                     lambda w: {k: v.detach().clone() for k, v in w.module.state_dict().items()},
                     model, batches, loss_fn, lr, world)
    return results[0][0], [r[1] for r in results]


def assert_close(case, got, want, tol, what):
    """Every key of want in got, within tol relative to the largest magnitude of the reference tensor."""
    case.assertEqual(sorted(got), sorted(want), what)
    for k, w in want.items():
        g = got[k].to(w.dtype)
        if not w.is_floating_point():
            case.assertTrue(torch.equal(g, w), "%s: %s differs" % (what, k))
            continue
        diff = (g - w).abs().max().item() if w.numel() else 0.0
        scale = max(w.abs().max().item() if w.numel() else 0.0, 1e-3)
        case.assertLessEqual(diff, tol * scale, "%s: %s max |diff| %g (scale %g)" % (what, k, diff, scale))
