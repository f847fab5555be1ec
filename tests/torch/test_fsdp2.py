"""FSDP2 (torch.distributed.fsdp.fully_shard) over "weft" against the same training over gloo.

    .venv/bin/torchrun --standalone --nproc_per_node 2 tests/torch/test_fsdp2.py

A small transformer (blocks in an nn.ModuleList, each block sharded, then the root) trains 10 AdamW steps on
per-rank batches over a DeviceMesh of the weft group and over one of a gloo group; the full parameters must agree
within 1e-5. FSDP2 moves everything with all_gather_into_tensor and reduce_scatter_tensor (coalesced).

The same again with mixed precision (bfloat16 parameters, float32 gradient reduction: bfloat16 all-gathers); with
tensor parallelism (each MLP split by columns then rows with parallelize_module: DTensor's functional collectives
on the group); and, on an even world of 4 or more, on 2-D meshes made by init_device_mesh (their groups made by
torch on the default backend): HSDP (replicas x shards: gradients reduce-scattered within a replica, all-reduced
across them) and FSDP2 x TP (blocks sharded over one dimension, MLPs split over the other). And a sharded
checkpoint: torch.distributed.checkpoint saves a trained model and loads it into a fresh one, bit for bit.
"""

import shutil
import tempfile

import torch
import torch.distributed.checkpoint as dcp
import torch.nn as nn
from torch.distributed.checkpoint.state_dict import (StateDictOptions, get_model_state_dict,
                                                     set_model_state_dict)
from torch.distributed.device_mesh import DeviceMesh, init_device_mesh
from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard
from torch.distributed.tensor import DTensor
from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module

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


def fsdp(mesh, mp=None):
    """Shards each block, then the root, over `mesh` (1-D: FSDP; 2-D: HSDP, replicas x shards)."""
    policy = {} if mp is None else {"mp_policy": mp}

    def apply(model):
        for block in model.blocks:
            fully_shard(block, mesh=mesh, **policy)
        fully_shard(model, mesh=mesh, **policy)
    return apply


def tensor_parallel(tp_mesh, dp_mesh=None):
    """Each block's MLP split over `tp_mesh` (its first Linear by columns, its second by rows), then, with
    `dp_mesh`, every block and the root sharded over that: the 2-D layout of TorchTitan and the like."""
    def apply(model):
        for block in model.blocks:
            parallelize_module(block.mlp, tp_mesh, {"0": ColwiseParallel(), "2": RowwiseParallel()})
        if dp_mesh is not None:
            fsdp(dp_mesh)(model)
    return apply


def train(parallelize, batch_seed):
    torch.manual_seed(4321)
    model = Transformer()
    parallelize(model)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2, weight_decay=0.01)
    gen = torch.Generator().manual_seed(7 + batch_seed)
    loss_fn = nn.CrossEntropyLoss()
    for _ in range(STEPS):
        tokens = torch.randint(0, VOCAB, (4, SEQ), generator=gen)
        loss = loss_fn(model(tokens).reshape(-1, VOCAB), tokens.roll(1, dims=1).reshape(-1))
        opt.zero_grad()
        loss.backward()
        opt.step()
    # Tensor parallelism alone leaves the parameters outside the MLPs plain tensors.
    return {n: (p.full_tensor() if isinstance(p, DTensor) else p).detach().clone()
            for n, p in model.named_parameters()}


def compare(job, what, on_weft, on_gloo, batch_seed=None):
    """Trains with `on_weft`, then `on_gloo` (each a function that parallelises the model); the parameters must
    agree within 1e-5, and have moved. Each rank draws its own batches unless given `batch_seed`."""
    seed = job.rank if batch_seed is None else batch_seed
    weft_params, gloo_params = train(on_weft, seed), train(on_gloo, seed)
    worst = max((weft_params[n] - gloo_params[n]).abs().max().item() for n in weft_params)
    torch.manual_seed(4321)
    start = dict(Transformer().named_parameters())
    moved = max((weft_params[n] - start[n]).abs().max().item() for n in weft_params)
    job.check(worst <= 1e-5, "%s: weft and gloo parameters differ by %.3g" % (what, worst))
    job.check(moved > 1e-3, "%s: the parameters did not train (moved %.3g)" % (what, moved))


def check_backends(job, what, weft_mesh, gloo_mesh):
    for name in weft_mesh.mesh_dim_names:
        for mesh, backend in ((weft_mesh, "weft"), (gloo_mesh, "gloo")):
            got = torch.distributed.get_backend(mesh.get_group(name))
            job.check(got == backend, "%s: the %s dimension's group is %s's, not %s's" % (what, name, got, backend))


def main():
    job = Job()
    world = torch.distributed.group.WORLD
    weft_1d, gloo_1d = DeviceMesh.from_group(world, "cpu"), DeviceMesh.from_group(job.gloo, "cpu")

    def meshes(shape, names):
        """The same 2-D mesh twice, its groups made by init_device_mesh: on the default backend, then gloo."""
        return (init_device_mesh("cpu", shape, mesh_dim_names=names),
                init_device_mesh("cpu", shape, mesh_dim_names=names, backend_override={n: "gloo" for n in names}))

    def fsdp2(job):
        compare(job, "FSDP2", fsdp(weft_1d), fsdp(gloo_1d))

    def mixed_precision(job):
        mp = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
        compare(job, "FSDP2 bf16", fsdp(weft_1d, mp), fsdp(gloo_1d, mp))

    def hsdp(job):
        weft_mesh, gloo_mesh = meshes((2, job.world // 2), ("replicate", "shard"))
        check_backends(job, "HSDP", weft_mesh, gloo_mesh)
        compare(job, "HSDP", fsdp(weft_mesh), fsdp(gloo_mesh))

    def tp(job):
        # Every rank of a tensor-parallel group must see the same batch.
        compare(job, "TP", tensor_parallel(weft_1d), tensor_parallel(gloo_1d), batch_seed=0)

    def fsdp_tp(job):
        weft_mesh, gloo_mesh = meshes((2, job.world // 2), ("dp", "tp"))
        check_backends(job, "FSDP2 x TP", weft_mesh, gloo_mesh)
        compare(job, "FSDP2 x TP", tensor_parallel(weft_mesh["tp"], weft_mesh["dp"]),
                tensor_parallel(gloo_mesh["tp"], gloo_mesh["dp"]), batch_seed=weft_mesh.get_local_rank("dp"))

    def checkpoint(job):
        # torch.distributed.checkpoint: each rank writes its shards, the planner agrees through the group's
        # object collectives and a fresh sharded model loads them back; the full state dict is all-gathered.
        torch.manual_seed(4321)
        model = Transformer()
        fsdp(weft_1d)(model)
        opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
        tokens = torch.randint(0, VOCAB, (4, SEQ), generator=torch.Generator().manual_seed(job.rank))
        model(tokens).sum().backward()
        opt.step()
        where = [tempfile.mkdtemp(prefix="weft-dcp-") if job.rank == 0 else None]
        torch.distributed.broadcast_object_list(where, src=0)
        try:
            dcp.save({"model": get_model_state_dict(model)}, checkpoint_id=where[0])
            torch.manual_seed(99)
            fresh = Transformer()
            fsdp(weft_1d)(fresh)
            state = {"model": get_model_state_dict(fresh)}
            dcp.load(state, checkpoint_id=where[0])
            set_model_state_dict(fresh, state["model"])
        finally:
            torch.distributed.barrier()
            if job.rank == 0:
                shutil.rmtree(where[0], ignore_errors=True)
        full = get_model_state_dict(model, options=StateDictOptions(full_state_dict=True))
        for (name, p), (_, q) in zip(model.named_parameters(), fresh.named_parameters()):
            job.check(torch.equal(p.to_local(), q.to_local()), "DCP: %s differs after save and load" % name)
            job.check(torch.equal(full[name], p.full_tensor()), "DCP: the full state dict's %s differs" % name)

    job.run("FSDP2", fsdp2)
    job.run("FSDP2 checkpoint", checkpoint)
    job.run("FSDP2 mixed precision", mixed_precision)
    if (4 * DIM) % job.world == 0:  # the MLP's hidden width split evenly
        job.run("TP", tp)
    if job.world >= 4 and job.world % 2 == 0:
        job.run("HSDP", hsdp)
        job.run("FSDP2 x TP", fsdp_tp)
    job.finish()


if __name__ == "__main__":
    main()
