#!/usr/bin/env python3
"""weft's Python package and PyTorch adapters on CUDA tensors: one rank on one
GPU over NCCL (NCCL cannot put two ranks of a communicator on one GPU).

  - collectives on CUDA tensors of every dtype, out of place into poisoned
    outputs, against torch.distributed's NCCL backend on the same one-rank
    world (when it starts) and against the one-rank identity;
  - stream order: the input is produced late on a non-default stream
    (torch.cuda._sleep first), and the collective is issued on that stream,
    explicitly or as torch's current stream: a collective enqueued anywhere
    else reads the stale input; and the call returns before that stream
    has run (asynchronous, as torch's NCCL backend);
  - wrong memory kinds are ValueErrors naming the tensor, never a crash;
  - weft.torch.DistributedDataParallel on a small MLP for 20 SGD steps equals
    plain torch training on the same batches (one rank: the average is the
    identity) within fp32 rounding, with separate gradients and with
    gradient-as-bucket-view, several buckets, no_sync accumulation, and on a
    non-default stream whose backward starts late;
  - weft.torch.FullyShardedDataParallel (stages 1, 2, 3; fp32 and bf16
    MixedPrecision; SGD with momentum and AdamW) on a small transformer
    equals plain training within fp32 rounding (bf16: bf16 tolerance), its
    .parameters() are CUDA shards, stage 3 holds no gathered parameters
    between steps, full_state_dict returns CPU tensors; and the same on a
    non-default stream whose backward starts late.

Exits 77 (meson: skipped) with the reason printed where there is no torch or
torch has no usable CUDA device. Run from a checkout (python/ is found from
here) with WEFT_LIBRARY pointing at a libweft built with NCCL.
"""

import os
import sys
import tempfile
import unittest


def skip(reason):
    print("SKIP: %s" % reason, flush=True)
    sys.exit(77)


try:
    import torch
except ImportError as e:
    skip("no torch in %s (%s)" % (sys.executable, e))
if not torch.cuda.is_available():
    skip("torch %s has no usable CUDA device (built for CUDA %s)" % (torch.__version__, torch.version.cuda))

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python"))
import weft  # noqa: E402
import weft.torch  # noqa: E402

torch.backends.cuda.matmul.allow_tf32 = False  # the reference and the wrapped runs compute alike
torch.backends.cudnn.allow_tf32 = False
DEV = torch.device("cuda", 0)
torch.cuda.set_device(DEV)
WORLD = weft.init(device=0)
# About 0.1 s on an H100/H200 SM clock: longer than any kernel queued behind it here.
SLEEP_CYCLES = int(os.environ.get("WEFT_TEST_SLEEP_CYCLES", "200000000"))
print("weft %d, torch %s (CUDA %s), %s, world %r" % (weft.library_version(), torch.__version__, torch.version.cuda,
                                                   torch.cuda.get_device_name(DEV), WORLD), flush=True)


def max_diff(a, b):
    return (a.detach().float().cpu() - b.detach().float().cpu()).abs().max().item() if a.numel() else 0.0


def close(tc, got, want, tol, what):
    """got/want: name -> tensor. Within tol relative to max(1, |want|); prints whether bitwise equal."""
    tc.assertEqual(sorted(got), sorted(want), what)
    worst, equal = 0.0, True
    for k in want:
        d = max_diff(got[k], want[k])
        scale = max(1.0, want[k].detach().float().abs().max().item() if want[k].numel() else 0.0)
        tc.assertLessEqual(d, tol * scale, "%s: %s differs by %g (tolerance %g)" % (what, k, d, tol * scale))
        worst = max(worst, d)
        equal = equal and torch.equal(got[k].detach().cpu(), want[k].detach().cpu())
    print("  %s: max |diff| %g%s" % (what, worst, " (bitwise equal)" if equal else ""), flush=True)


# ---------------------------------------------------------------- collectives

def torch_world():
    """torch.distributed over NCCL on the same one-rank world, or None (then the identity is the reference)."""
    try:
        import torch.distributed as dist
        if not dist.is_initialized():
            path = os.path.join(tempfile.mkdtemp(), "store")
            dist.init_process_group("nccl", init_method="file://" + path, rank=0, world_size=1)
        return dist
    except Exception as e:  # noqa: BLE001 - a missing reference is reported, not fatal
        print("  note: torch.distributed NCCL unavailable (%s); comparing with the one-rank identity" % e)
        return None


DTYPES = (torch.float32, torch.float16, torch.bfloat16, torch.float64, torch.int32, torch.int64, torch.int8,
          torch.uint8)


class Collectives(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.dist = torch_world()

    def inputs(self, dtype, n=4099, seed=0):
        g = torch.Generator().manual_seed(seed)
        low = 0 if dtype == torch.uint8 else -60
        return torch.randint(low, 60, (n,), generator=g).to(dtype).to(DEV)  # exact in every dtype

    def poison(self, like, n=None):
        n = like.numel() if n is None else n
        fill = float("nan") if like.is_floating_point() else 77
        return torch.full((n,), fill, dtype=like.dtype, device=DEV)

    def test_every_dtype_against_torch(self):
        dist = self.dist
        for dtype in DTYPES:
            x = self.inputs(dtype)
            for op in ("sum", "max", "min", "prod", "avg"):
                if op == "avg" and not dtype.is_floating_point:
                    continue
                out = WORLD.all_reduce(x, op=op, out=self.poison(x))
                want = x.clone()
                if dist is not None:
                    dist.all_reduce(want, op=getattr(dist.ReduceOp, op.upper()))
                torch.cuda.synchronize()
                self.assertTrue(torch.equal(out, want), "all_reduce %s %s" % (op, dtype))
                self.assertTrue(torch.equal(out, x), "one rank: all_reduce %s %s is the identity" % (op, dtype))
            out = WORLD.all_gather(self.poison(x), x)
            want = [torch.empty_like(x)]
            if dist is not None:
                dist.all_gather(want, x)
            else:
                want = [x.clone()]
            torch.cuda.synchronize()
            self.assertTrue(torch.equal(out, torch.cat(want)), "all_gather %s" % dtype)
            out = WORLD.reduce_scatter(self.poison(x), x)
            torch.cuda.synchronize()
            self.assertTrue(torch.equal(out, x), "reduce_scatter %s" % dtype)
            y = x.clone()
            WORLD.broadcast(y, root=0)
            torch.cuda.synchronize()
            self.assertTrue(torch.equal(y, x), "broadcast %s" % dtype)

    def late_input(self, stream):
        """x: -1 now; 3 once `stream` has slept. Returns x and a poisoned output."""
        x = torch.full((1 << 20,), -1.0, device=DEV)
        out = torch.full_like(x, float("nan"))
        torch.cuda.synchronize()
        with torch.cuda.stream(stream):
            torch.cuda._sleep(SLEEP_CYCLES)
            x.fill_(3.0)
        return x, out

    def test_collective_is_ordered_on_the_current_stream(self):
        s = torch.cuda.Stream(DEV)
        x, out = self.late_input(s)
        with torch.cuda.stream(s):
            WORLD.all_reduce(x, out=out)  # torch's current stream: s
            done = s.query()
            twice = out * 2  # a consumer queued behind it on s
        s.synchronize()
        self.assertFalse(done, "all_reduce returned only once its stream had run: it should be asynchronous")
        self.assertTrue(bool((out == 3).all()), "all_reduce read the input before its producer ran: %s" %
                        out[:4].tolist())
        self.assertTrue(bool((twice == 6).all()))

    def test_collective_is_ordered_on_an_explicit_stream(self):
        s = torch.cuda.Stream(DEV)
        x, out = self.late_input(s)
        WORLD.all_reduce(x, out=out, stream=s)  # the default stream is current here
        gathered = WORLD.all_gather(torch.full_like(x, float("nan")), x, stream=s.cuda_stream)
        s.synchronize()
        self.assertTrue(bool((out == 3).all()), "stream=s was not used: %s" % out[:4].tolist())
        self.assertTrue(bool((gathered == 3).all()), "stream=<int> was not used")

    def test_wrong_memory_kind_is_a_value_error(self):
        with self.assertRaises(ValueError) as cm:
            WORLD.all_reduce(torch.ones(4))
        self.assertIn("host", str(cm.exception))
        self.assertIn("CUDA", str(cm.exception))
        with self.assertRaises(ValueError):
            WORLD.all_reduce(torch.ones(4, device=DEV), out=torch.ones(4))
        host = weft.init_in_process(1)[0]
        with self.assertRaises(ValueError) as cm:
            host.all_reduce(torch.ones(4, device=DEV))
        self.assertIn("cuda:0", str(cm.exception))
        host.destroy()
        with self.assertRaises(ValueError):
            weft.init(backend="mpi")  # the world exists already, on CUDA memory
        self.assertEqual(WORLD.memory, "cuda")
        self.assertEqual(WORLD.backend, "nccl")


# ---------------------------------------------------------------- DDP

class MLP(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.net = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 64),
                                       torch.nn.ReLU(), torch.nn.Linear(64, 8))

    def forward(self, x):
        return self.net(x)


def mlp_batches(steps, micro=1):
    g = torch.Generator().manual_seed(7)
    return [[(torch.randn(16, 32, generator=g).to(DEV), torch.randn(16, 8, generator=g).to(DEV))
             for _ in range(micro)] for _ in range(steps)]


def mlp_initial():
    torch.manual_seed(0)
    return MLP().state_dict()


def train_mlp(wrap, steps=20, micro=1, stream=None, late=False):
    """20 SGD steps; with micro > 1 the first micro-batches accumulate under no_sync.
    stream: run everything on it; late: delay each backward on it."""
    net = MLP().to(DEV)
    net.load_state_dict(INITIAL_MLP)
    if stream is not None:
        stream.wait_stream(torch.cuda.current_stream(DEV))  # the initial values were copied on this one
    ctx = torch.cuda.stream(stream) if stream is not None else _null()
    with ctx:
        model = wrap(net) if wrap is not None else net
        opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
        for mbs in mlp_batches(steps, micro):
            opt.zero_grad()
            for k, (x, y) in enumerate(mbs):
                sync = k == len(mbs) - 1 or wrap is None
                with (_null() if sync else model.no_sync()):
                    loss = torch.nn.functional.mse_loss(model(x), y)
                    if late:
                        torch.cuda._sleep(SLEEP_CYCLES // 4)
                    loss.backward()
            opt.step()
    torch.cuda.synchronize()
    return {k: v.detach().clone() for k, v in net.state_dict().items()}


class _null:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


INITIAL_MLP = mlp_initial()


class Ddp(unittest.TestCase):
    def ddp(self, **kw):
        return lambda net: weft.torch.DistributedDataParallel(net, bucket_cap_mb=0.01, first_bucket_cap_mb=0.004, **kw)

    def test_matches_plain_training(self):
        want = train_mlp(None)
        for view in (False, True):
            got = train_mlp(self.ddp(gradient_as_bucket_view=view))
            close(self, got, want, 1e-6, "DDP gradient_as_bucket_view=%s" % view)

    def test_no_sync_accumulation(self):
        want = train_mlp(None, micro=2)
        for view in (False, True):
            got = train_mlp(self.ddp(gradient_as_bucket_view=view), micro=2)
            close(self, got, want, 1e-6, "DDP no_sync, gradient_as_bucket_view=%s" % view)

    def test_late_backward_on_a_side_stream(self):
        want = train_mlp(None, steps=6)
        for view in (False, True):
            got = train_mlp(self.ddp(gradient_as_bucket_view=view), steps=6, stream=torch.cuda.Stream(DEV), late=True)
            close(self, got, want, 1e-6, "DDP on a side stream, late backward, gradient_as_bucket_view=%s" % view)

    def test_bucket_views_are_cuda_tensors_in_weft_memory(self):
        net = MLP().to(DEV)
        net.load_state_dict(INITIAL_MLP)
        model = weft.torch.DistributedDataParallel(net, gradient_as_bucket_view=True, bucket_cap_mb=0.01,
                                                   first_bucket_cap_mb=0.004)
        self.assertGreater(model.reducer.bucket_count, 1)
        (x, y), = mlp_batches(1)[0]
        for _ in range(2):  # the second backward uses the rebuilt buckets
            net.zero_grad(set_to_none=True)
            torch.nn.functional.mse_loss(model(x), y).backward()
            for i, p in enumerate(model._params):
                self.assertTrue(p.grad.is_cuda)
                self.assertEqual(p.grad.data_ptr(), model.reducer.grad_slot(i)[0], "grad %d is its slot" % i)


# ---------------------------------------------------------------- FSDP

class Block(torch.nn.Module):
    def __init__(self, dim, heads):
        super().__init__()
        self.ln1 = torch.nn.LayerNorm(dim)
        self.attn = torch.nn.MultiheadAttention(dim, heads, batch_first=True)
        self.ln2 = torch.nn.LayerNorm(dim)
        self.mlp = torch.nn.Sequential(torch.nn.Linear(dim, 4 * dim), torch.nn.GELU(), torch.nn.Linear(4 * dim, dim))

    def forward(self, x):
        n = x.shape[1]
        causal = torch.triu(torch.full((n, n), float("-inf"), dtype=x.dtype, device=x.device), diagonal=1)
        h = self.ln1(x)
        x = x + self.attn(h, h, h, attn_mask=causal, need_weights=False)[0]
        return x + self.mlp(self.ln2(x))


class Transformer(torch.nn.Module):
    def __init__(self, vocab=256, dim=64, heads=4, layers=2, seq=16):
        super().__init__()
        self.tok = torch.nn.Embedding(vocab, dim)
        self.pos = torch.nn.Parameter(torch.randn(seq, dim) / 8)
        self.blocks = torch.nn.ModuleList(Block(dim, heads) for _ in range(layers))
        self.norm = torch.nn.LayerNorm(dim)
        self.head = torch.nn.Linear(dim, vocab)

    def forward(self, tokens):
        x = self.tok(tokens) + self.pos[: tokens.shape[1]]
        for b in self.blocks:
            x = b(x)
        return self.head(self.norm(x))


def lm_batches(steps):
    g = torch.Generator().manual_seed(11)
    out = []
    for _ in range(steps):
        t = torch.randint(0, 256, (8, 17), generator=g).to(DEV)
        out.append((t[:, :-1], t[:, 1:]))
    return out


def lm_initial():
    torch.manual_seed(1)
    return Transformer().state_dict()


INITIAL_LM = lm_initial()


def make_opt(kind, params):
    if kind == "sgd":
        return torch.optim.SGD(params, lr=0.05, momentum=0.9)
    return torch.optim.AdamW(params, lr=3e-3, weight_decay=0.01)


def train_lm(steps, opt_kind, stage=None, mp=None, stream=None, late=False, report=None):
    """stage None: plain torch (fp32). Returns the full state (CPU tensors for FSDP)."""
    net = Transformer().to(DEV)
    net.load_state_dict(INITIAL_LM)
    if stream is not None:
        stream.wait_stream(torch.cuda.current_stream(DEV))  # the initial values were copied on this one
    with (torch.cuda.stream(stream) if stream is not None else _null()):
        model = net if stage is None else weft.torch.FullyShardedDataParallel(
            net, zero_stage=stage, mixed_precision=mp, wrap_classes=[Block])
        opt = make_opt(opt_kind, model.parameters())
        for tokens, target in lm_batches(steps):
            opt.zero_grad()
            logits = model(tokens)
            loss = torch.nn.functional.cross_entropy(logits.float().reshape(-1, 256), target.reshape(-1))
            if late:
                torch.cuda._sleep(SLEEP_CYCLES // 4)
            loss.backward()
            opt.step()
        if report is not None:
            report["params"] = list(model.parameters())
            report["memory"] = model.memory() if stage is not None else None
        state = model.full_state_dict() if stage is not None else \
            {k: v.detach().cpu().clone() for k, v in net.state_dict().items()}
    torch.cuda.synchronize()
    return state


class Fsdp(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.want_sgd = train_lm(10, "sgd")

    def test_every_stage_matches_plain_training(self):
        for stage in (1, 2, 3):
            report = {}
            got = train_lm(10, "sgd", stage, report=report)
            close(self, got, self.want_sgd, 2e-5, "FSDP stage %d, SGD with momentum" % stage)
            for k, v in got.items():
                self.assertEqual(v.device.type, "cpu", "full_state_dict %s" % k)
            for p in report["params"]:
                self.assertTrue(p.is_cuda and p.dtype == torch.float32, "the shards are fp32 CUDA tensors")
            if stage == 3:
                self.assertEqual(report["memory"]["full_bytes"], 0, "stage 3 holds no gathered parameters")

    def test_adamw(self):
        want = train_lm(10, "adamw")
        got = train_lm(10, "adamw", 3)
        close(self, got, want, 1e-3, "FSDP stage 3, AdamW")

    def test_bf16_mixed_precision(self):
        mp = weft.torch.MixedPrecision(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
        want = train_lm(5, "sgd")
        for stage in (1, 2, 3):
            got = train_lm(5, "sgd", stage, mp=mp)
            close(self, got, want, 3e-2, "FSDP stage %d, bf16 compute, fp32 master" % stage)

    def test_late_backward_on_a_side_stream(self):
        want = train_lm(4, "sgd")
        for stage in (2, 3):
            got = train_lm(4, "sgd", stage, stream=torch.cuda.Stream(DEV), late=True)
            close(self, got, want, 2e-5, "FSDP stage %d on a side stream, late backward" % stage)

    def test_forward_on_another_stream_is_refused(self):
        net = Transformer().to(DEV)
        model = weft.torch.FullyShardedDataParallel(net, zero_stage=3, wrap_classes=[Block])
        tokens, _ = lm_batches(1)[0]
        with torch.cuda.stream(torch.cuda.Stream(DEV)):
            with self.assertRaises(ValueError) as cm:
                model(tokens)
        self.assertIn("stream", str(cm.exception))


if __name__ == "__main__":
    result = unittest.main(verbosity=2, exit=False).result
    WORLD.async_error()  # raises if a NCCL kernel failed behind the host's back
    sys.exit(0 if result.wasSuccessful() else 1)
