#!/usr/bin/env python3
"""weft's own adapters at their edges: memory lifetimes, module state of every dtype and layout, errors
from callbacks, how FSDP cuts a module into units and what it refuses. Ranks are threads over the
in-process backend. Exits 77 without torch."""

import gc
import sys
import unittest
import weakref

try:
    import torch
except ImportError as e:
    print("skip: needs .venv/bin/python (tools/setup) with torch (%s)" % e)
    sys.exit(77)

from parity import on_ranks  # noqa: E402 - after the torch check
import weft  # noqa: E402
import weft.torch  # noqa: E402
from weft._units import plan_units  # noqa: E402

nn = torch.nn


def mlp():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(5, 7), nn.Tanh(), nn.Linear(7, 3))


def churn():
    """Allocates and writes memory, so that freed memory handed out again shows as changed values."""
    junk = [torch.full((1 << 16,), 7.0) for _ in range(64)]
    for _ in range(8):
        weft.Reducer(weft.init_in_process(1)[0], [(1 << 14, torch.float32)]).destroy()
    return sum(float(j[0]) for j in junk)


class Lifetimes(unittest.TestCase):
    """Tensors over weft's memory hold the object that frees it: dropping every other reference and
    collecting leaves them valid; dropping them too frees it (nothing leaks)."""

    # The ranks only build and drop; the main thread collects, once they are done (a gc.collect() while
    # another thread's is running returns at once, having collected nothing).

    def keeps(self, tensors, alive, what):
        want = [t.detach().clone() for t in tensors]
        gc.collect()
        self.assertTrue(all(a() is not None for a in alive), "%s did not keep weft's object alive" % what)
        churn()
        for t, w in zip(tensors, want):
            self.assertTrue(torch.equal(t.detach(), w), "%s changed once the wrapper was collected" % what)
        with torch.no_grad():
            for t in tensors:
                t.mul_(2.0)  # still writable memory
        del t
        tensors.clear()
        gc.collect()
        self.assertTrue(all(a() is None for a in alive), "weft's object outlived the last of %s" % what)

    def test_bucket_view_gradients_keep_the_reducer(self):
        def body(rank, comm):
            model = mlp()
            ddp = weft.torch.DistributedDataParallel(model, comm=comm, gradient_as_bucket_view=True)
            ddp(torch.randn(4, 5)).sum().backward()
            return [p.grad for p in model.parameters()], [weakref.ref(ddp.reducer)]
        [(grads, alive)] = on_ranks(1, body)
        self.keeps(grads, alive, "gradient_as_bucket_view gradients")

    def test_bucket_view_gradient_taken_in_the_first_backward_stays_valid(self):
        # The forward runs the layers in the reverse of their registration, so the first backward's ready
        # order re-plans the (tiny) buckets and frees the first layout: a .grad taken inside that backward
        # (here by a hook on the input's gradient, which runs after the later layers' gradients are in) must
        # not be a view of it.
        class Reordered(nn.Module):
            def __init__(self):
                super().__init__()
                self.a, self.b, self.c = nn.Linear(6, 6), nn.Linear(6, 6), nn.Linear(6, 6)

            def forward(self, x):
                return self.a(torch.tanh(self.b(torch.tanh(self.c(x)))))

        def body(rank, comm):
            torch.manual_seed(0)
            model = Reordered()
            ddp = weft.torch.DistributedDataParallel(model, comm=comm, gradient_as_bucket_view=True,
                                                     bucket_cap_mb=0.0002, first_bucket_cap_mb=0.0001)
            version = ddp.reducer.layout_version
            held = []
            x = torch.randn(4, 6, generator=torch.Generator().manual_seed(rank)).requires_grad_()
            x.register_hook(lambda g: held.extend(p.grad for p in model.parameters() if p.grad is not None))
            ddp(x).square().sum().backward()
            first = [p.grad.clone() for p in model.parameters()]
            replanned = ddp.reducer.layout_version != version
            slots = [ddp.reducer.grad_slot(i)[0] for i in range(len(first))]
            later = []
            for step in range(2):
                for p in model.parameters():
                    p.grad = None
                ddp(torch.randn(4, 6)).square().sum().backward()
                later.append([p.grad.data_ptr() for p in model.parameters()])
            return held, first, replanned, slots, later

        for rank, (held, first, replanned, slots, later) in enumerate(on_ranks(2, body)):
            self.assertTrue(replanned, "rank %d: the buckets were not re-planned, so this shows nothing" % rank)
            self.assertGreater(len(held), 0, "rank %d: the hook saw no .grad in the first backward" % rank)
            for step in later:  # views after the first iteration, as torch documents
                self.assertEqual(step, slots, "rank %d: a .grad after the first step is not its bucket slot" % rank)
            churn()
            by_ptr = {t.data_ptr(): t for t in held}
            for t in held:
                self.assertNotIn(t.data_ptr(), slots, "rank %d: a .grad held from the first backward is a "
                                 "bucket slot" % rank)
                # It holds the first step's average: some parameter's first gradient, unchanged by the churn.
                self.assertTrue(any(t.shape == f.shape and torch.equal(t, f) for f in first),
                                "rank %d: a .grad held from the first backward no longer holds the first "
                                "step's average (%s)" % (rank, t.flatten()[:4].tolist()))
            self.assertEqual(len(by_ptr), len(held))

    def test_shard_parameters_keep_their_group(self):
        def body(rank, comm):
            model = weft.torch.FullyShardedDataParallel(mlp(), comm=comm, zero_stage=3)
            return list(model.parameters()), [weakref.ref(u.group) for u in model._units]
        for params, alive in on_ranks(2, body):
            self.keeps(params, alive, "FSDP shard parameters")


class Stateful(nn.Module):
    """Buffers of every kind a model carries: a bool causal mask, uint8, int16, a 0-d step, a transposed
    (non-contiguous) float table."""

    def __init__(self, rank):
        super().__init__()
        self.lin = nn.Linear(4, 4)
        g = torch.Generator().manual_seed(rank)
        self.register_buffer("mask", torch.rand(6, 6, generator=g) > 0.5)
        self.register_buffer("codes", torch.randint(0, 255, (9,), generator=g, dtype=torch.uint8))
        self.register_buffer("small", torch.randint(-999, 999, (5,), generator=g).to(torch.int16))
        self.register_buffer("step", torch.tensor(float(rank)))
        self.register_buffer("table", torch.randn(3, 8, generator=g).t())

    def forward(self, x):
        return self.lin(x)


class Buffers(unittest.TestCase):
    WORLD = 3

    def synced(self, wrap, then=None):
        """Each rank's buffers after wrapping its own Stateful(rank), and what then(wrapper, module) returns."""
        def body(rank, comm):
            m = Stateful(rank)
            strides, ptr = m.table.stride(), m.table.data_ptr()
            w = wrap(m, comm)
            state = {k: v.clone() for k, v in m.named_buffers()}
            kept = (m.table.stride(), m.table.data_ptr()) == (strides, ptr)
            return state, kept, then(rank, w, m) if then else None
        results = on_ranks(self.WORLD, body)
        want = dict(Stateful(0).named_buffers())
        for rank, (state, kept, _) in enumerate(results):
            self.assertTrue(kept, "the transposed buffer was replaced instead of written")
            for k, v in want.items():
                self.assertEqual(state[k].dtype, v.dtype, k)
                self.assertTrue(torch.equal(state[k], v), "rank %d: buffer %s is not rank 0's" % (rank, k))
        return [r[2] for r in results]

    def test_ddp_broadcasts_every_buffer(self):
        def diverge_then_forward(rank, ddp, m):  # forward syncs them again (broadcast_buffers)
            if rank == 1:
                m.mask.logical_not_()
                m.table.add_(1.0)
            ddp(torch.randn(2, 4))
            return m.mask.clone(), m.table.clone()
        out = self.synced(lambda m, comm: weft.torch.DistributedDataParallel(m, comm=comm), diverge_then_forward)
        for mask, table in out[1:]:
            self.assertTrue(torch.equal(mask, out[0][0]), "forward did not broadcast the bool mask")
            self.assertTrue(torch.equal(table, out[0][1]), "forward did not broadcast the transposed table")

    def test_fsdp_broadcasts_every_buffer(self):
        self.synced(lambda m, comm: weft.torch.FullyShardedDataParallel(m, comm=comm))


class CallbackErrors(unittest.TestCase):
    """What a shard schedule's acquire or release raises is what the call that ran it raises."""

    def run_step(self, acquire, release):
        def body(rank, comm):
            g = weft.ShardGroup(comm, [(4, 3)])
            s = weft.ShardSchedule(acquire=acquire, release=release)
            try:
                s.begin_step()
                s.pre_forward(g)
                s.post_forward(g)
                s.pre_backward(g)
                s.post_backward(g, [torch.ones(12)])
                s.end_step()
            except Exception as e:  # noqa: BLE001 - what the test looks at
                return e
            return None
        return on_ranks(1, body)[0]

    def test_acquire_raises(self):
        def acquire(group, nbytes):
            raise MemoryError("no room for %d bytes of this group" % nbytes)
        e = self.run_step(acquire, lambda group, address: None)
        self.assertIsInstance(e, MemoryError)
        self.assertIn("no room for 48 bytes", str(e))
        self.assertIsInstance(e.__cause__, weft.WeftError, "weft's own error is kept as the cause")

    def test_acquire_returns_no_address(self):
        e = self.run_step(lambda group, nbytes: "here", lambda group, address: None)
        self.assertIsInstance(e, TypeError)
        self.assertIn("'here'", str(e))

    def test_release_raises(self):
        buf = torch.empty(12)

        def release(group, address):
            raise KeyError("unknown buffer 0x%x" % address)
        e = self.run_step(lambda group, nbytes: buf.data_ptr(), release)
        self.assertIsInstance(e, KeyError)
        self.assertIn("unknown buffer 0x%x" % buf.data_ptr(), str(e))


    def test_fsdp_gather_in_backward_raises(self):
        def body(rank, comm):
            f = weft.torch.FullyShardedDataParallel(mlp(), comm=comm, zero_stage=3)
            out = f(torch.randn(3, 5))

            def no_room():
                raise MemoryError("no room to gather unit 0 again")
            f._units[0].alloc = no_room  # the schedule's acquire, as backward gathers the unit again
            try:
                out.sum().backward()
            except MemoryError as e:
                return str(e)
            return None
        self.assertEqual(on_ranks(1, body)[0], "no room to gather unit 0 again",
                         "backward did not raise what the acquire callback raised")


class Holder(nn.Module):
    """Blocks kept in containers of every kind: a ModuleDict of Sequentials, a ModuleList, a ParameterList,
    and a holder class without a forward."""

    def __init__(self):
        super().__init__()
        self.stages = nn.ModuleDict({"a": nn.Sequential(nn.Linear(4, 4), nn.ReLU(), nn.Linear(4, 4))})
        self.blocks = nn.ModuleList([nn.Linear(4, 4), nn.LayerNorm(4)])
        self.scales = nn.ParameterList([nn.Parameter(torch.ones(4))])
        self.extra = nn.Module()
        self.extra.proj = nn.Linear(4, 4)

    def forward(self, x):
        x = self.stages["a"](x)
        for b in self.blocks:
            x = b(x)
        return self.extra.proj(x) * self.scales[0]


class Units(unittest.TestCase):
    def test_containers_are_recursed_into(self):
        units, params = plan_units(Holder())
        self.assertEqual([q for q, _ in units], ["stages.a.0", "stages.a.2", "blocks.0", "blocks.1", "extra.proj"])
        homes = {names[0][2]: home for home, names, _ in params}
        self.assertIsNone(homes["scales.0"], "a ParameterList's parameters are the parent's (the root unit)")
        self.assertEqual(homes["blocks.1.weight"], 3)

    def test_holder_trains_as_one_process(self):
        torch.manual_seed(0)
        base = Holder()
        x, y = torch.randn(4, 4), torch.randn(4, 4)
        ref = Holder()
        ref.load_state_dict(base.state_dict())
        torch.nn.functional.mse_loss(ref(x), y).backward()
        want = {k: p.grad for k, p in ref.named_parameters()}

        def body(rank, comm):
            m = Holder()
            m.load_state_dict(base.state_dict())
            f = weft.torch.FullyShardedDataParallel(m, comm=comm, zero_stage=3)
            torch.nn.functional.mse_loss(f(x[rank * 2:rank * 2 + 2]), y[rank * 2:rank * 2 + 2]).backward()
            opt = torch.optim.SGD(f.parameters(), lr=1.0)
            opt.step()
            return f.full_state_dict()
        got = on_ranks(2, body)[0]
        for k, g in want.items():
            self.assertTrue(torch.allclose(got[k], base.state_dict()[k] - g, atol=1e-6), k)

    def test_shared_and_repeated_blocks(self):
        """A block registered under two names and called at each, and a block called twice: the shared
        block's parameters go to the root unit under both names; both step as one process does."""
        class Shared(nn.Module):
            def __init__(self):
                super().__init__()
                self.first = nn.Linear(4, 4)
                self.again = self.first
                self.twice = nn.Linear(4, 4)
                self.head = nn.Linear(4, 2)

            def forward(self, x):
                return self.head(self.twice(torch.tanh(self.twice(self.again(torch.tanh(self.first(x)))))))
        torch.manual_seed(0)
        base, x = Shared(), torch.randn(4, 4)
        ref = Shared()
        ref.load_state_dict(base.state_dict())
        ref(x).square().mean().backward()
        want = {k: v - dict(ref.named_parameters(remove_duplicate=False))[k].grad
                for k, v in ref.state_dict().items()}

        def body(rank, comm):
            m = Shared()
            m.load_state_dict(base.state_dict())
            f = weft.torch.FullyShardedDataParallel(m, comm=comm, zero_stage=3)
            f(x[rank * 2:rank * 2 + 2]).square().mean().backward()
            torch.optim.SGD(f.parameters(), lr=1.0).step()
            return [u.name for u in f._units], f.full_state_dict()
        names, got = on_ranks(2, body)[0]
        self.assertEqual(names, ["twice", "head", ""], "first's parameters are also again's: the root unit's")
        self.assertEqual(sorted(got), sorted(want))
        for k, w in want.items():
            self.assertLessEqual((got[k] - w).abs().max().item(), 1e-6, k)

    def refused(self, module, wrap_classes, *words):
        with self.assertRaises(ValueError) as ctx:
            on_ranks(1, lambda r, comm: weft.torch.FullyShardedDataParallel(module, comm=comm,
                                                                           wrap_classes=wrap_classes))
        for w in words:
            self.assertIn(w, str(ctx.exception))

    def test_refusals_name_the_module(self):
        self.refused(Holder(), [nn.ModuleList], "blocks (ModuleList)", "no forward")
        self.refused(Holder(), ["NoSuchBlock"], "'NoSuchBlock'", "Holder")
        self.refused(Holder(), [42], "42")
        self.refused(mlp().double(), None, "0.weight", "torch.float64", "MixedPrecision")

    def test_multihead_attention_children_are_refused(self):
        layer = nn.TransformerEncoderLayer(8, nhead=2, dim_feedforward=16, dropout=0.0, batch_first=True)
        self.refused(layer, [nn.Linear], "self_attn.out_proj (NonDynamicallyQuantizableLinear)",
                     "self_attn (MultiheadAttention)")
        self.refused(nn.MultiheadAttention(8, 2), None, "out_proj", "the root")

    def test_parameters_read_outside_their_unit_are_named(self):
        class Reads(nn.Module):
            def __init__(self):
                super().__init__()
                self.inner = nn.Linear(4, 4)
                self.other = nn.Linear(4, 4)

            def forward(self, x):  # inner's weight without inner's forward: it is not gathered
                return torch.nn.functional.linear(x, self.inner.weight) + self.other(x)

        def body(rank, comm):
            f = weft.torch.FullyShardedDataParallel(Reads(), comm=comm)
            try:
                f(torch.randn(2, 4))
            except RuntimeError as e:
                return str(e)
            return None
        msg = on_ranks(1, body)[0]
        self.assertIsNotNone(msg, "the forward ran on parameters that were never gathered")
        self.assertIn("inner (Linear)", msg)


class CommArguments(unittest.TestCase):
    def test_output_first(self):
        def body(rank, comm):
            x = torch.full((3,), float(rank + 1))
            gathered = comm.all_gather(torch.full((6,), -1.0), x)
            reduced = comm.reduce_scatter(torch.full((3,), -1.0), torch.arange(6.0))
            try:
                comm.all_gather(x, torch.zeros(6))  # the input where the output goes
            except ValueError as e:
                return gathered, reduced, str(e)
            return gathered, reduced, None
        for rank, (gathered, reduced, msg) in enumerate(on_ranks(2, body)):
            self.assertEqual(gathered.tolist(), [1.0] * 3 + [2.0] * 3)
            self.assertEqual(reduced.tolist(), [2.0 * v for v in range(3 * rank, 3 * rank + 3)])
            self.assertIn("output has 3 elements", msg)


if __name__ == "__main__":
    unittest.main(verbosity=2)
