#!/usr/bin/env python3
"""weft.torch.FullyShardedDataParallel against a single-process run.

Ranks are threads over the in-process backend (ctypes releases the GIL).
Each rank trains a wrapped copy of the same model on its slice of every
batch; a plain model trains on the concatenated batches. With averaged
gradients the two are the same computation, so after the steps the full
state must agree: within fp32 rounding for SGD with momentum, within 1e-3
for AdamW (it amplifies rounding noise of gradients that are mathematically
zero), within bfloat16 tolerance with bfloat16 compute. Stages 1, 2, 3; 2 and
3 ranks (3 divides nothing here: padding). Exits 77 without torch."""

import os
import sys
import unittest

try:
    import torch
except ImportError as e:
    print("skip: needs .venv/bin/python (tools/setup) with torch (%s)" % e)
    sys.exit(77)

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python"))
import weft  # noqa: E402
import weft.torch  # noqa: E402
from parity import on_ranks  # noqa: E402 - ranks as threads

torch.set_num_threads(1)


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.l1 = torch.nn.Linear(7, 13)
        self.ln = torch.nn.LayerNorm(13)
        self.l2 = torch.nn.Linear(13, 5)
        self.scale = torch.nn.Parameter(torch.ones(5))  # the root unit's

    def forward(self, x):
        return self.l2(torch.relu(self.ln(self.l1(x)))) * self.scale


def batches(steps, world, per_rank=4):
    g = torch.Generator().manual_seed(1)
    return [(torch.randn(world * per_rank, 7, generator=g), torch.randn(world * per_rank, 5, generator=g))
            for _ in range(steps)]


def make_opt(kind, params):
    if kind == "sgd":
        return torch.optim.SGD(params, lr=0.05, momentum=0.9)
    return torch.optim.AdamW(params, lr=0.01, weight_decay=0.01)


def initial_state():
    # Made once on the main thread: torch's default generator is process-wide,
    # so ranks seeding and drawing from it concurrently would interleave.
    torch.manual_seed(0)
    return Net().state_dict()


INITIAL = initial_state()


def fresh_net():
    net = Net()
    net.load_state_dict(INITIAL)
    return net


def reference(steps, world, opt_kind):
    net = fresh_net()
    opt = make_opt(opt_kind, net.parameters())
    for x, y in batches(steps, world):
        opt.zero_grad()
        torch.nn.functional.mse_loss(net(x), y).backward()
        opt.step()
    return {k: v.detach().clone() for k, v in net.state_dict().items()}


def train_fsdp(steps, world, opt_kind, zero_stage, mp=None, layout="flat"):
    def body(rank, comm):
        model = weft.torch.FullyShardedDataParallel(fresh_net(), comm=comm, zero_stage=zero_stage, mixed_precision=mp,
                                                    layout=layout)
        opt = make_opt(opt_kind, model.parameters())
        held = sum(p.numel() for p in model.parameters())
        for x, y in batches(steps, world):
            n = x.shape[0] // world
            opt.zero_grad()
            out = model(x[rank * n:(rank + 1) * n])
            torch.nn.functional.mse_loss(out.float(), y[rank * n:(rank + 1) * n]).backward()
            opt.step()
        return model.full_state_dict(), held, model.memory()
    return on_ranks(world, body)


class FsdpMatchesOneProcess(unittest.TestCase):
    def check(self, world, opt_kind, zero_stage, tol, mp=None, layout="flat", steps=10):
        want = reference(steps, world, opt_kind)
        results = train_fsdp(steps, world, opt_kind, zero_stage, mp, layout)
        state, held, _ = results[0]
        self.assertEqual(list(state.keys()), list(want.keys()))
        for k in want:
            diff = (state[k] - want[k]).abs().max().item()
            self.assertLessEqual(diff, tol, "%s: max |diff| %g (stage %d, %d ranks, %s)" %
                                 (k, diff, zero_stage, world, opt_kind))
        for r in range(1, world):
            self.assertEqual(results[r][0], {}, "full_state_dict is rank 0's")
        return results

    def test_sgd_momentum_every_stage(self):
        for zero_stage in (1, 2, 3):
            for world in (2, 3):
                self.check(world, "sgd", zero_stage, 2e-5)

    def test_sgd_per_param_layout(self):
        self.check(3, "sgd", 3, 2e-5, layout="per_param")

    def test_adamw(self):
        for zero_stage in (2, 3):
            self.check(3, "adamw", zero_stage, 1e-3)

    def test_bf16_compute_fp32_master(self):
        mp = weft.torch.MixedPrecision(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
        self.check(2, "sgd", 3, 3e-2, mp=mp, steps=5)

    def test_stage3_holds_a_shard(self):
        total = sum(p.numel() for p in Net().parameters())
        results = train_fsdp(1, 2, "sgd", 3)
        for _, held, mem in results:
            # Each unit pads to a multiple of the world: at most one element per unit per rank.
            self.assertLessEqual(held, total / 2 + 5)
            self.assertGreaterEqual(held, total / 2)
            self.assertEqual(mem["full_bytes"], 0, "stage 3 holds no gathered parameters between steps")


def run_steps(model, opt, data, world, rank):
    for x, y in data:
        n = x.shape[0] // world
        opt.zero_grad()
        out = model(x[rank * n:(rank + 1) * n])
        torch.nn.functional.mse_loss(out.float(), y[rank * n:(rank + 1) * n]).backward()
        opt.step()


def wrap(comm, zero_stage, layout):
    model = weft.torch.FullyShardedDataParallel(fresh_net(), comm=comm, zero_stage=zero_stage, layout=layout)
    return model, make_opt("adamw", model.parameters())


class Prefetch(unittest.TestCase):
    """The adapter drives weft's shard schedule: from the second step (the order recorded in the first)
    the next unit's all-gather is started while a unit computes, two units gathered at most; with
    prefetch=False one at a time. Either way nothing stays gathered after a stage-3 step."""

    def test_two_units_gathered_from_the_second_step(self):
        for prefetch, most in ((True, 2), (False, 1)):
            def body(rank, comm):
                model = weft.torch.FullyShardedDataParallel(fresh_net(), comm=comm, zero_stage=3, prefetch=prefetch)
                opt = make_opt("sgd", model.parameters())
                states = []
                for data in batches(3, 2):
                    run_steps(model, opt, [data], 2, rank)
                    states.append(model._schedule.state())
                return states
            for states in on_ranks(2, body):
                self.assertEqual([s["order_length"] for s in states], [3, 3, 3], "l1, ln, l2 (the root is apart)")
                self.assertEqual([s["gathered"] for s in states], [0, 0, 0])
                self.assertEqual([s["max_gathered"] for s in states], [1, most, most], "prefetch=%s" % prefetch)


class KeptGroup(unittest.TestCase):
    """weft.ShardSchedule.set_reshard_after_forward(group, False), FSDP's treatment of its root: the group
    stays gathered from its forward until its backward is done, and the step still ends with nothing
    gathered; a bad value or a call during a step is refused."""

    def test_kept_from_forward_to_backward(self):
        def body(rank, comm):
            root, block = weft.ShardGroup(comm, [(5, 3)]), weft.ShardGroup(comm, [(4,)])
            s = weft.ShardSchedule()
            s.set_reshard_after_forward(root, False)
            seen = []
            s.begin_step()
            for g in (root, block):
                s.pre_forward(g)
                s.post_forward(g)
                seen.append(s.state()["gathered"])
            with self.assertRaises(weft.WeftError):
                s.set_reshard_after_forward(block, False)  # during a step
            for g in (block, root):
                s.pre_backward(g)
                s.post_backward(g, [torch.ones(g.numels[0])])
            s.end_step()
            seen.append(s.state()["gathered"])
            s.destroy()
            return seen
        for seen in on_ranks(2, body):
            self.assertEqual(seen, [1, 1, 0], "the root stays after its forward, the block does not")


class FullOptimState(unittest.TestCase):
    """full_optim_state_dict / load_full_optim_state_dict with load_full_state_dict: the gathered state
    is the single-process optimizer's, a save-load round trip gives back the same bits, and a run resumed
    from a checkpoint in a fresh wrapper ends exactly where the uninterrupted run does."""

    CASES = ((2, 3, "flat"), (3, 3, "flat"), (3, 2, "flat"), (3, 3, "per_param"))

    def test_gathered_state_is_the_single_process_state(self):
        steps, world = 4, 3
        net = fresh_net()
        ref_opt = make_opt("adamw", net.parameters())
        for x, y in batches(steps, world):
            ref_opt.zero_grad()
            torch.nn.functional.mse_loss(net(x), y).backward()
            ref_opt.step()
        names = {id(p): k for k, p in net.named_parameters()}
        want = {names[id(p)]: st for p, st in ref_opt.state.items()}

        def body(rank, comm):
            model, opt = wrap(comm, 3, "flat")
            run_steps(model, opt, batches(steps, world), world, rank)
            return model.full_optim_state_dict(opt)
        results = on_ranks(world, body)
        got = results[0]
        self.assertEqual(sorted(got["state"]), sorted(want))
        for name, st in want.items():
            for key in ("exp_avg", "exp_avg_sq"):
                self.assertEqual(got["state"][name][key].shape, st[key].shape, name)
                diff = (got["state"][name][key] - st[key]).abs().max().item()
                scale = st[key].abs().max().item()
                self.assertLessEqual(diff, 1e-4 * max(scale, 1e-3), "%s %s" % (name, key))
            self.assertEqual(float(got["state"][name]["step"]), float(st["step"]))
        self.assertEqual(got["param_groups"][0]["lr"], 0.01)
        self.assertEqual(sorted(got["param_groups"][0]["params"]), sorted(want))
        for r in range(1, world):
            self.assertEqual(results[r], {})

    def test_round_trip_and_resume(self):
        for world, zero_stage, layout in self.CASES:
            data = batches(6, world)

            def uninterrupted(rank, comm):
                model, opt = wrap(comm, zero_stage, layout)
                run_steps(model, opt, data, world, rank)
                return model.full_state_dict()

            def resumed(rank, comm):
                model, opt = wrap(comm, zero_stage, layout)
                run_steps(model, opt, data[:3], world, rank)
                sd, osd = model.full_state_dict(), model.full_optim_state_dict(opt)
                # A fresh wrapper from other values; only rank 0 holds the checkpoint.
                torch.manual_seed(100 + rank)
                model2, opt2 = wrap(comm, zero_stage, layout)
                with torch.no_grad():
                    for p in model2.parameters():
                        p.add_(1.0)
                model2.load_full_state_dict(sd if rank == 0 else None)
                model2.load_full_optim_state_dict(opt2, osd if rank == 0 else None)
                again_sd, again_osd = model2.full_state_dict(), model2.full_optim_state_dict(opt2)
                run_steps(model2, opt2, data[3:], world, rank)
                return (sd, osd, again_sd, again_osd), model2.full_state_dict()

            want = on_ranks(world, uninterrupted)[0]
            (sd, osd, again_sd, again_osd), got = on_ranks(world, resumed)[0]
            what = "%d ranks, stage %d, %s" % (world, zero_stage, layout)
            for k in sd:
                self.assertTrue(torch.equal(sd[k], again_sd[k]), "round trip %s: %s" % (what, k))
            self.assertEqual(sorted(osd["state"]), sorted(again_osd["state"]))
            for name, st in osd["state"].items():
                for key, v in st.items():
                    self.assertTrue(torch.equal(v, again_osd["state"][name][key]),
                                    "round trip %s: %s %s" % (what, name, key))
            self.assertEqual(osd["param_groups"], again_osd["param_groups"])
            for k in want:
                self.assertTrue(torch.equal(got[k], want[k]),
                                "resumed %s: %s differs by %g" % (what, k, (got[k] - want[k]).abs().max().item()))

    def test_refused_state_fails_every_rank(self):
        def body(rank, comm):
            model, opt = wrap(comm, 3, "flat")
            run_steps(model, opt, batches(1, 2), 2, rank)
            osd = model.full_optim_state_dict(opt)
            if rank == 0:
                del osd["state"]["l1.bias"]  # l1's unit has l1.weight but not l1.bias
            try:
                model.load_full_optim_state_dict(opt, osd if rank == 0 else None)
            except ValueError as e:
                return str(e)
            return None
        for msg in on_ranks(2, body):
            self.assertIsNotNone(msg)
            self.assertIn("l1.bias", msg)


if __name__ == "__main__":
    unittest.main(verbosity=2)
