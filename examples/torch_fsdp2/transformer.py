#!/usr/bin/env python3
"""A decoder-only transformer (tiny by default; --size tutorial is ~12M parameters, the FSDP tutorials'
scale) under torch FSDP2 `fully_shard`, on weft, with a torch.distributed.checkpoint (DCP) checkpoint.

    torchrun --standalone --nproc_per_node 2 examples/torch_fsdp2/transformer.py --backend weft --out weft.json
    torchrun --nproc_per_node 8 examples/torch_fsdp2/transformer.py --device cuda --size tutorial

Each block is its own FSDP unit, then the root; the DeviceMesh is made over the default group, so its
collectives run on weft (`init_process_group("weft")`, the one weft line). A DCP checkpoint saved at N ranks
loads at any other world size. Each step trains one global batch, each rank its slice, with SGD.
"""

import argparse
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
import torch.distributed.checkpoint as dcp  # noqa: E402
from torch.distributed.checkpoint.state_dict import (StateDictOptions, get_model_state_dict,  # noqa: E402
                                                     get_state_dict, set_state_dict)
from torch.distributed.device_mesh import init_device_mesh  # noqa: E402
from torch.distributed.fsdp import fully_shard  # noqa: E402

import stacks  # noqa: E402

SIZES = {"tiny": dict(vocab=256, dim=64, layers=2, heads=4, seq=32),
         "tutorial": dict(vocab=8192, dim=256, layers=10, heads=8, seq=256)}


class Transformer(torch.nn.Module):
    def __init__(self, vocab, dim, layers, heads, seq):
        super().__init__()
        self.tok = torch.nn.Embedding(vocab, dim)
        self.pos = torch.nn.Embedding(seq, dim)
        self.layers = torch.nn.ModuleList(
            torch.nn.TransformerEncoderLayer(dim, heads, 4 * dim, dropout=0.0, batch_first=True, norm_first=True)
            for _ in range(layers))
        self.norm = torch.nn.LayerNorm(dim)
        self.out = torch.nn.Linear(dim, vocab, bias=False)
        self.register_buffer("mask", torch.nn.Transformer.generate_square_subsequent_mask(seq), persistent=False)

    def forward(self, ids):
        n = ids.shape[1]
        h = self.tok(ids) + self.pos(torch.arange(n, device=ids.device))
        for layer in self.layers:
            h = layer(h, src_mask=self.mask[:n, :n], is_causal=True)
        return self.out(self.norm(h))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    stacks.add_args(ap, steps=6, global_batch=8, lr=0.05)
    ap.add_argument("--size", default="tiny", choices=sorted(SIZES))
    args = ap.parse_args()
    _, world, device = stacks.start(args, dist.init_process_group)  # <- "weft": the one weft line
    mesh = init_device_mesh(args.device, (world,))

    size = SIZES[args.size]
    torch.manual_seed(args.seed)
    model = Transformer(**size).to(device)
    full_bytes = stacks.model_bytes(model)
    for layer in model.layers:
        fully_shard(layer, mesh=mesh)
    fully_shard(model, mesh=mesh)
    opt = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)
    first = 0
    if args.load:  # DCP reshards to this world size
        msd, osd = get_state_dict(model, opt)
        state = {"model": msd, "opt": osd, "step": torch.zeros((), dtype=torch.int64)}
        dcp.load(state, checkpoint_id=args.load)
        set_state_dict(model, opt, model_state_dict=state["model"], optim_state_dict=state["opt"])
        first = int(state["step"])

    report = stacks.Report(args, first_step=first)
    mine = stacks.rank_slice(args)
    for step in range(first, args.steps):
        with report.step(step) as s:
            ids = stacks.lm_batch(step, args.global_batch, size["seq"], size["vocab"])
            ids = ids[mine].to(device)
            opt.zero_grad()
            logits = model(ids[:, :-1])
            loss = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), ids[:, 1:].reshape(-1))
            loss.backward()
            opt.step()
            s.loss = stacks.global_mean(loss)
        if report.wants_save(step):
            msd, osd = get_state_dict(model, opt)
            dcp.save({"model": msd, "opt": osd, "step": torch.tensor(step + 1)}, checkpoint_id=args.save)

    full = get_model_state_dict(model, options=StateDictOptions(full_state_dict=True, cpu_offload=True))
    local = sum(p.to_local().numel() * p.element_size() for p in model.parameters())
    stacks.finish(args, report, full, param_bytes_per_rank=local, model_bytes=full_bytes)


if __name__ == "__main__":
    main()
