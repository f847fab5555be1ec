#!/usr/bin/env python3
"""Writes bench/data/bert_base.tensors in the format of bench/data/make_tensor_lists.py.

Hugging Face BertModel (bert-base-uncased) in named_parameters() order:
199 tensors, 109,482,240 parameters (embeddings, 12 encoder layers, pooler).
Usage: bench/reducer/make_bert_list.py [output dir]
"""
import os
import sys


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


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "data")
    tensors = bert_base()
    total = 0
    for _, shape in tensors:
        n = 1
        for s in shape:
            n *= s
        total += n
    with open(os.path.join(out, "bert_base.tensors"), "w") as f:
        f.write(f"# bert_base: {len(tensors)} tensors, {total} parameters (bench/reducer/make_bert_list.py)\n")
        for name, shape in tensors:
            f.write(f"{name} {'x'.join(str(s) for s in shape)}\n")
    print(f"bert_base: {len(tensors)} tensors, {total} parameters")


if __name__ == "__main__":
    main()
