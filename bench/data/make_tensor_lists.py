#!/usr/bin/env python3
"""Writes the tensor lists the kernel benchmarks run on (bench/data/*.tensors).

Shapes come from the architectures themselves, in the order of PyTorch's
named_parameters(), so no model library is needed:
  resnet50      torchvision's ResNet-50: 161 tensors, 25,557,032 parameters
  gpt2_small    Hugging Face GPT2Model (124M): 148 tensors, 124,439,808 parameters
  llama_layer   one Llama-2-7B decoder layer: 9 tensors, 202,383,360 parameters
  tiny_10k      10,000 tensors of 1 to 512 elements (optimizer state of small layers)
  huge_3        3 tensors of 32 Mi elements each (embedding-sized)
Format: one tensor per line, "name dim0xdim1x...", '#' starts a comment.
tests/unit/bench_data_test.cc checks the counts and totals above.
Usage: bench/data/make_tensor_lists.py [output dir]
"""
import os
import sys


def resnet50():
    t = [("conv1.weight", (64, 3, 7, 7)), ("bn1.weight", (64,)), ("bn1.bias", (64,))]
    inplanes = 64
    for layer, (width, blocks) in enumerate(zip((64, 128, 256, 512), (3, 4, 6, 3)), start=1):
        for b in range(blocks):
            p = f"layer{layer}.{b}."
            t += [(p + "conv1.weight", (width, inplanes, 1, 1)), (p + "bn1.weight", (width,)), (p + "bn1.bias", (width,)),
                  (p + "conv2.weight", (width, width, 3, 3)), (p + "bn2.weight", (width,)), (p + "bn2.bias", (width,)),
                  (p + "conv3.weight", (4 * width, width, 1, 1)), (p + "bn3.weight", (4 * width,)),
                  (p + "bn3.bias", (4 * width,))]
            if b == 0:
                t += [(p + "downsample.0.weight", (4 * width, inplanes, 1, 1)),
                      (p + "downsample.1.weight", (4 * width,)), (p + "downsample.1.bias", (4 * width,))]
            inplanes = 4 * width
    return t + [("fc.weight", (1000, 2048)), ("fc.bias", (1000,))]


def gpt2_small(d=768, layers=12, vocab=50257, ctx=1024):
    t = [("wte.weight", (vocab, d)), ("wpe.weight", (ctx, d))]
    for i in range(layers):
        p = f"h.{i}."
        t += [(p + "ln_1.weight", (d,)), (p + "ln_1.bias", (d,)),
              (p + "attn.c_attn.weight", (d, 3 * d)), (p + "attn.c_attn.bias", (3 * d,)),
              (p + "attn.c_proj.weight", (d, d)), (p + "attn.c_proj.bias", (d,)),
              (p + "ln_2.weight", (d,)), (p + "ln_2.bias", (d,)),
              (p + "mlp.c_fc.weight", (d, 4 * d)), (p + "mlp.c_fc.bias", (4 * d,)),
              (p + "mlp.c_proj.weight", (4 * d, d)), (p + "mlp.c_proj.bias", (d,))]
    return t + [("ln_f.weight", (d,)), ("ln_f.bias", (d,))]


def llama_layer(d=4096, ffn=11008):
    p = "model.layers.0."
    return [(p + "self_attn.q_proj.weight", (d, d)), (p + "self_attn.k_proj.weight", (d, d)),
            (p + "self_attn.v_proj.weight", (d, d)), (p + "self_attn.o_proj.weight", (d, d)),
            (p + "mlp.gate_proj.weight", (ffn, d)), (p + "mlp.up_proj.weight", (ffn, d)),
            (p + "mlp.down_proj.weight", (d, ffn)), (p + "input_layernorm.weight", (d,)),
            (p + "post_attention_layernorm.weight", (d,))]


# Hugging Face BertModel (bert-base-uncased) in named_parameters() order:
# 199 tensors, 109,482,240 parameters (embeddings, 12 encoder layers, pooler).
def bert_base(d=768, layers=12, ffn=3072, vocab=30522, ctx=512, types=2):
    t = [("embeddings.word_embeddings.weight", (vocab, d)), ("embeddings.position_embeddings.weight", (ctx, d)),
         ("embeddings.token_type_embeddings.weight", (types, d)), ("embeddings.LayerNorm.weight", (d,)),
         ("embeddings.LayerNorm.bias", (d,))]
    for i in range(layers):
        p = f"encoder.layer.{i}."
        for proj in ("query", "key", "value"):
            t += [(p + f"attention.self.{proj}.weight", (d, d)), (p + f"attention.self.{proj}.bias", (d,))]
        t += [(p + "attention.output.dense.weight", (d, d)), (p + "attention.output.dense.bias", (d,)),
              (p + "attention.output.LayerNorm.weight", (d,)), (p + "attention.output.LayerNorm.bias", (d,)),
              (p + "intermediate.dense.weight", (ffn, d)), (p + "intermediate.dense.bias", (ffn,)),
              (p + "output.dense.weight", (d, ffn)), (p + "output.dense.bias", (d,)),
              (p + "output.LayerNorm.weight", (d,)), (p + "output.LayerNorm.bias", (d,))]
    return t + [("pooler.dense.weight", (d, d)), ("pooler.dense.bias", (d,))]


def tiny_10k():
    # A fixed linear congruential sequence, so the file never changes.
    x, t = 12345, []
    for i in range(10000):
        x = (1103515245 * x + 12345) % (1 << 31)
        t.append((f"tiny.{i}", (1 + x % 512,)))
    return t


def huge_3():
    return [(f"huge.{i}", (8192, 4096)) for i in range(3)]


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else os.path.dirname(os.path.abspath(__file__))
    for name, fn in [("resnet50", resnet50), ("gpt2_small", gpt2_small), ("llama_layer", llama_layer),
                     ("bert_base", bert_base),
                     ("tiny_10k", tiny_10k), ("huge_3", huge_3)]:
        tensors = fn()
        total = 0
        for _, shape in tensors:
            n = 1
            for s in shape:
                n *= s
            total += n
        with open(os.path.join(out, name + ".tensors"), "w") as f:
            f.write(f"# {name}: {len(tensors)} tensors, {total} parameters (bench/data/make_tensor_lists.py)\n")
            for tname, shape in tensors:
                f.write(f"{tname} {'x'.join(map(str, shape))}\n")
        print(f"{name}: {len(tensors)} tensors, {total:,} parameters")


if __name__ == "__main__":
    main()
