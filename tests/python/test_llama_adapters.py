#!/usr/bin/env python3
"""A Hugging Face Llama-architecture causal LM (transformers' LlamaForCausalLM from a tiny LlamaConfig, no
weights downloaded) through weft's own FSDP (ZeRO-1, 2, 3, bfloat16 compute) and DDP, against one process
training on the whole batch.

Units: `wrap_classes=[LlamaDecoderLayer]` (one unit per block of `model.model.layers`, the embeddings, the
final norm and the head in the root unit, as Accelerate's FSDP config does) and, with tied input and output
embeddings, the default units (`model` and `lm_head`, the tied weight moved to the root unit because two
units hold it). 2 ranks as threads over the in-process backend; SGD with momentum; the loss is HF's mean
over tokens; fp32 runs agree within 1e-4 of each tensor's scale (reduction order), bfloat16 within 5e-2.
Exits 77 without torch or transformers (python/requirements-stacks.txt pins it)."""

import copy
import sys
import unittest

try:
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM
    from transformers.models.llama.modeling_llama import LlamaDecoderLayer
except ImportError as e:
    print("skip: needs .venv/bin/python with torch and transformers (python/requirements-stacks.txt): %s" % e)
    sys.exit(77)

import parity  # noqa: E402 - after the imports that may skip
import weft.torch  # noqa: E402

WORLD, STEPS, SEQ, VOCAB = 2, 3, 8, 64


def llama(tied=False):
    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=VOCAB, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=2 * SEQ,
                      tie_word_embeddings=tied, attn_implementation="eager")
    return LlamaForCausalLM(cfg)


def batches():
    g = torch.Generator().manual_seed(1)
    return [(torch.randint(0, VOCAB, (WORLD * 2, SEQ), generator=g),) for _ in range(STEPS)]


def loss_fn(model, batch):
    (ids,) = batch
    return model(input_ids=ids, labels=ids).loss.float()


class LlamaThroughWeft(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.data = batches()
        cls.models, cls.wants = {}, {}
        for tied in (False, True):
            cls.models[tied] = llama(tied)
            cls.wants[tied] = parity.reference(cls.models[tied], cls.data, loss_fn, lr=0.05)

    def check(self, tied, got, losses, tol, what):
        want, want_losses = self.wants[tied]
        parity.assert_close(self, got, want, tol, what)
        for step, w in enumerate(want_losses):
            mean = sum(r[step] for r in losses) / len(losses)
            self.assertLessEqual(abs(mean - w), tol * max(abs(w), 1.0), "%s: step %d loss" % (what, step))

    def test_units(self):
        def names(r, comm):
            blocks = weft.torch.FullyShardedDataParallel(llama(), comm=comm, wrap_classes=[LlamaDecoderLayer])
            tied = weft.torch.FullyShardedDataParallel(llama(tied=True), comm=comm)
            root = [q for _, _, q, _ in tied._units[-1].entries]
            return [u.name for u in blocks._units], [u.name for u in tied._units], root
        [(blocks, tied, root)] = parity.on_ranks(1, names)
        self.assertEqual(blocks, ["model.layers.0", "model.layers.1", ""])
        self.assertEqual(tied, ["model", ""], "lm_head holds only the tied weight, which goes to the root")
        self.assertEqual(root, ["model.embed_tokens.weight"])

    def test_bare_model_default_units(self):
        """LlamaModel keeps its blocks in the ModuleList `layers`: each is a unit of its own, and a step
        through them gives one process's gradients."""
        base = llama().model
        ids = self.data[0][0][:2]
        want = {k: v for k, v in base.state_dict().items()}
        ref = copy.deepcopy(base)
        ref(input_ids=ids).last_hidden_state.square().mean().backward()
        with torch.no_grad():
            for p in ref.parameters():
                p.sub_(p.grad)

        def step(r, comm):
            f = weft.torch.FullyShardedDataParallel(copy.deepcopy(base), comm=comm, zero_stage=3)
            f(input_ids=ids).last_hidden_state.square().mean().backward()
            torch.optim.SGD(f.parameters(), lr=1.0).step()
            return [u.name for u in f._units], f.full_state_dict()
        [(names, got)] = parity.on_ranks(1, step)
        self.assertEqual(names, ["embed_tokens", "layers.0", "layers.1", "norm"])
        parity.assert_close(self, got, ref.state_dict(), 1e-5, "LlamaModel, default units")
        self.assertFalse(torch.equal(got["layers.0.mlp.up_proj.weight"], want["layers.0.mlp.up_proj.weight"]))

    def test_fsdp_decoder_layers_every_stage(self):
        for stage in (1, 2, 3):
            got, losses = parity.train_fsdp(self.models[False], self.data, loss_fn, 0.05, WORLD, stage,
                                            wrap_classes=[LlamaDecoderLayer])
            self.check(False, got, losses, 1e-4, "FSDP ZeRO-%d, LlamaDecoderLayer units" % stage)

    def test_fsdp_tied_default_units(self):
        got, losses = parity.train_fsdp(self.models[True], self.data, loss_fn, 0.05, WORLD, 3)
        self.assertTrue(torch.equal(got["lm_head.weight"], got["model.embed_tokens.weight"]))
        self.check(True, got, losses, 1e-4, "FSDP ZeRO-3, tied embeddings, default units")

    def test_fsdp_bf16(self):
        mp = weft.torch.MixedPrecision(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
        got, losses = parity.train_fsdp(self.models[False], self.data, loss_fn, 0.05, WORLD, 3, mixed_precision=mp,
                                        wrap_classes=["LlamaDecoderLayer"])
        self.check(False, got, losses, 5e-2, "FSDP ZeRO-3 bf16, units by class name")

    def test_ddp(self):
        for view in (False, True):
            got, losses = parity.train_ddp(self.models[False], self.data, loss_fn, 0.05, WORLD,
                                           gradient_as_bucket_view=view)
            self.check(False, got, losses, 1e-4, "DDP gradient_as_bucket_view=%s" % view)


if __name__ == "__main__":
    unittest.main(verbosity=2)
