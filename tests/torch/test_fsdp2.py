"""FSDP2 (torch.distributed.fsdp.fully_shard) over "weft" against the same training over gloo.

    .venv/bin/torchrun --standalone --nproc_per_node 2 tests/torch/test_fsdp2.py

A small transformer (blocks in an nn.ModuleList, each block sharded, then the root) trains 10 AdamW steps on
per-rank batches over a DeviceMesh of the weft group and over one of a gloo group; the full parameters must agree
within 1e-5. FSDP2 moves everything with all_gather_into_tensor and reduce_scatter_tensor (coalesced).
"""

import torch
import torch.nn as nn
from torch.distributed.device_mesh import DeviceMesh
from torch.distributed.fsdp import fully_shard

from common import Job

STEPS = 10
DIM, HEADS, LAYERS, VOCAB, SEQ = 32, 4, 3, 64, 12


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.norm1 = nn.LayerNorm(DIM)
        # No bias: the key projection's bias has no gradient (softmax ignores it), so its gradient is rounding
        # noise, which AdamW normalises into full-size steps that differ with any change of summation order.
        self.attn = nn.MultiheadAttention(DIM, HEADS, bias=False, batch_first=True)
        self.norm2 = nn.LayerNorm(DIM)
        self.mlp = nn.Sequential(nn.Linear(DIM, 4 * DIM), nn.GELU(), nn.Linear(4 * DIM, DIM))

    def forward(self, x):
        h = self.norm1(x)
        x = x + self.attn(h, h, h, need_weights=False)[0]
        return x + self.mlp(self.norm2(x))


class Transformer(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(VOCAB, DIM)
        self.blocks = nn.ModuleList(Block() for _ in range(LAYERS))
        self.head = nn.Linear(DIM, VOCAB)

    def forward(self, tokens):
        x = self.embed(tokens)
        for block in self.blocks:
            x = block(x)
        return self.head(x)


def train(job, mesh):
    torch.manual_seed(4321)
    model = Transformer()
    for block in model.blocks:
        fully_shard(block, mesh=mesh)
    fully_shard(model, mesh=mesh)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2, weight_decay=0.01)
    gen = torch.Generator().manual_seed(7 + job.rank)
    loss_fn = nn.CrossEntropyLoss()
    for _ in range(STEPS):
        tokens = torch.randint(0, VOCAB, (4, SEQ), generator=gen)
        loss = loss_fn(model(tokens).reshape(-1, VOCAB), tokens.roll(1, dims=1).reshape(-1))
        opt.zero_grad()
        loss.backward()
        opt.step()
    return {n: p.full_tensor().detach().clone() for n, p in model.named_parameters()}


def main():
    job = Job()

    def compare(job):
        weft_mesh = DeviceMesh.from_group(torch.distributed.group.WORLD, "cpu")
        gloo_mesh = DeviceMesh.from_group(job.gloo, "cpu")
        weft_params = train(job, weft_mesh)
        gloo_params = train(job, gloo_mesh)
        worst = max((weft_params[n] - gloo_params[n]).abs().max().item() for n in weft_params)
        torch.manual_seed(4321)
        start = dict(Transformer().named_parameters())
        moved = max((weft_params[n] - start[n]).abs().max().item() for n in weft_params)
        job.check(worst <= 1e-5, "FSDP2: weft and gloo parameters differ by %.3g" % worst)
        job.check(moved > 1e-3, "FSDP2: the parameters did not train (moved %.3g)" % moved)

    job.run("FSDP2", compare)
    job.finish()


if __name__ == "__main__":
    main()
