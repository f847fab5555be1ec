#!/usr/bin/env python3
"""torch's nn.TransformerEncoder through weft's own FSDP (ZeRO-1, 2, 3, bfloat16 compute) and DDP, against
one process training on the whole batch.

The encoder keeps its blocks in an nn.ModuleList (`layers`): FSDP's default units recurse into it, one unit
per TransformerEncoderLayer, each of whose MultiheadAttention reads its out_proj's parameters directly (so
the layer, not its linears, must be the unit). The causal mask is a bool tensor. 2 ranks as threads over the
in-process backend; SGD with momentum; fp32 runs agree within 1e-4 of each tensor's scale (reduction
order), bfloat16 within 5e-2. Exits 77 without torch."""

import sys
import unittest

try:
    import torch
except ImportError as e:
    print("skip: needs .venv/bin/python (tools/setup) with torch (%s)" % e)
    sys.exit(77)

import parity  # noqa: E402 - after the torch check
import weft.torch  # noqa: E402

WORLD, STEPS, SEQ, DIM = 2, 3, 6, 16


def encoder():
    torch.manual_seed(0)
    layer = torch.nn.TransformerEncoderLayer(DIM, nhead=2, dim_feedforward=32, dropout=0.0, batch_first=True)
    return torch.nn.TransformerEncoder(layer, num_layers=2, norm=torch.nn.LayerNorm(DIM), enable_nested_tensor=False)


MASK = torch.ones(SEQ, SEQ, dtype=torch.bool).triu(1)  # True: may not attend (a later position)


def batches():
    g = torch.Generator().manual_seed(1)
    return [(torch.randn(WORLD * 2, SEQ, DIM, generator=g), torch.randn(WORLD * 2, SEQ, DIM, generator=g))
            for _ in range(STEPS)]


def loss_fn(model, batch):
    x, y = batch
    out = model(x, mask=MASK)
    return torch.nn.functional.mse_loss(out.float(), y)


class EncoderThroughWeft(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.model, cls.data = encoder(), batches()
        cls.want, cls.want_losses = parity.reference(cls.model, cls.data, loss_fn, lr=0.05)

    def check(self, got, losses, tol, what):
        parity.assert_close(self, got, self.want, tol, what)
        for step, want in enumerate(self.want_losses):
            mean = sum(r[step] for r in losses) / len(losses)
            self.assertLessEqual(abs(mean - want), tol * max(abs(want), 1.0), "%s: step %d loss" % (what, step))

    def test_units_are_the_blocks(self):
        [units] = parity.on_ranks(1, lambda r, comm: [
            u.name for u in weft.torch.FullyShardedDataParallel(encoder(), comm=comm)._units])
        self.assertEqual(units, ["layers.0", "layers.1", "norm"], "the ModuleList is recursed into")

    def test_fsdp_every_stage(self):
        for stage in (1, 2, 3):
            got, losses = parity.train_fsdp(self.model, self.data, loss_fn, 0.05, WORLD, stage)
            self.check(got, losses, 1e-4, "FSDP ZeRO-%d" % stage)

    def test_fsdp_block_class(self):
        got, losses = parity.train_fsdp(self.model, self.data, loss_fn, 0.05, WORLD, 3,
                                        wrap_classes=[torch.nn.TransformerEncoderLayer])
        self.check(got, losses, 1e-4, "FSDP wrap_classes=[TransformerEncoderLayer]")

    def test_fsdp_bf16(self):
        mp = weft.torch.MixedPrecision(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
        got, losses = parity.train_fsdp(self.model, self.data, loss_fn, 0.05, WORLD, 3, mixed_precision=mp)
        self.check(got, losses, 5e-2, "FSDP ZeRO-3 bf16")

    def test_ddp(self):
        for view in (False, True):
            got, losses = parity.train_ddp(self.model, self.data, loss_fn, 0.05, WORLD, gradient_as_bucket_view=view)
            self.check(got, losses, 1e-4, "DDP gradient_as_bucket_view=%s" % view)


if __name__ == "__main__":
    unittest.main(verbosity=2)
