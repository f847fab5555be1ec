#!/usr/bin/env python3
"""The small transformer language model of the FSDP tutorials, trained
fully sharded (ZeRO-3) with weft and AdamW.

    mpirun -np 4 --oversubscribe .venv/bin/python examples/transformer_fsdp.py
    mpirun -np 4 --oversubscribe .venv/bin/python examples/transformer_fsdp.py --check --steps 3 --layers 2
    mpirun -np 8 python3 examples/transformer_fsdp.py --device cuda   # a GPU per rank, NCCL
    mpirun -np 4 --oversubscribe .venv/bin/python examples/transformer_fsdp.py --backend ucx  # host, over UCX

Each transformer block is one shard group (weft gathers it just before its
forward and backward and reduce-scatters its gradients after); the embedding,
final norm and head are units of their own. Each step draws one global batch
of synthetic token sequences (the same on every rank) and each rank trains
on its slice. With --check, rank 0 also trains a single-process copy on the
whole batch and asserts that the full state dicts agree within 1e-3 (AdamW
amplifies the rounding noise of gradients that are mathematically zero).
--save PATH writes the full model and optimizer state (rank 0, one unit
gathered at a time) and --resume PATH continues from it on any number of ranks.
Run from a checkout, it finds the package in python/ and libweft in build/.
"""

import argparse
import copy
import math
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))

import torch  # noqa: E402

import weft  # noqa: E402
import weft.torch  # noqa: E402


class Block(torch.nn.Module):
    def __init__(self, dim, heads):
        super().__init__()
        self.ln1 = torch.nn.LayerNorm(dim)
        self.attn = torch.nn.MultiheadAttention(dim, heads, batch_first=True)
        self.ln2 = torch.nn.LayerNorm(dim)
        self.mlp = torch.nn.Sequential(torch.nn.Linear(dim, 4 * dim), torch.nn.GELU(), torch.nn.Linear(4 * dim, dim))

    def forward(self, x):
        n = x.shape[1]
        causal = torch.triu(torch.full((n, n), float("-inf"), dtype=x.dtype), diagonal=1)
        h = self.ln1(x)
        x = x + self.attn(h, h, h, attn_mask=causal, need_weights=False)[0]
        return x + self.mlp(self.ln2(x))


class Transformer(torch.nn.Module):
    def __init__(self, vocab, dim, heads, layers, seq):
        super().__init__()
        self.tok = torch.nn.Embedding(vocab, dim)
        self.pos = torch.nn.Parameter(torch.randn(seq, dim) / math.sqrt(dim))
        self.blocks = torch.nn.ModuleList(Block(dim, heads) for _ in range(layers))
        self.norm = torch.nn.LayerNorm(dim)
        self.head = torch.nn.Linear(dim, vocab)

    def forward(self, tokens):
        x = self.tok(tokens) + self.pos[: tokens.shape[1]]
        for b in self.blocks:
            x = b(x)
        return self.head(self.norm(x))


def batch(step, size, seq, vocab):
    g = torch.Generator().manual_seed(2000 + step)
    t = torch.randint(0, vocab, (size, seq + 1), generator=g)
    return t[:, :-1], t[:, 1:]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--layers", type=int, default=8)
    ap.add_argument("--dim", type=int, default=256)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--vocab", type=int, default=8192)
    ap.add_argument("--seq", type=int, default=32)
    ap.add_argument("--batch-per-rank", type=int, default=4)
    ap.add_argument("--zero-stage", type=int, default=3)
    ap.add_argument("--check", action="store_true", help="compare with a single-process run on rank 0")
    ap.add_argument("--device", default="cpu", choices=("cpu", "cuda"),
                    help="cuda: one GPU per rank (the local rank's), shards and collectives on it over NCCL")
    ap.add_argument("--save", help="after training, rank 0 writes the full model and AdamW state here")
    ap.add_argument("--resume", help="before training, load a checkpoint written by --save (read on rank 0)")
    ap.add_argument("--backend", default="auto", choices=("auto", "mpi", "ucx"),
                    help="host memory (--device cpu): auto is MPI under mpirun; ucx moves the bytes over UCX")
    args = ap.parse_args()
    if args.check and args.resume:
        ap.error("--check compares with a fresh single-process run: leave out --resume")
    torch.set_num_threads(1)

    if args.device == "cuda":
        comm = weft.init(device="cuda")  # weft picks the local rank's GPU
        device = torch.device("cuda", comm.device)
        torch.cuda.set_device(device)
    else:
        comm, device = weft.init(backend=args.backend), torch.device("cpu")
    launched = weft.launched_world_size()
    if args.check and launched is not None and comm.size != launched:
        sys.exit("check: the world has %d ranks, but the launcher started %d" % (comm.size, launched))
    torch.manual_seed(comm.rank)  # different on each rank: FSDP must broadcast rank 0's
    model = Transformer(args.vocab, args.dim, args.heads, args.layers, args.seq).to(device)
    nparams = sum(p.numel() for p in model.parameters())
    reference = None
    fsdp = weft.torch.FullyShardedDataParallel(model, comm=comm, zero_stage=args.zero_stage,
                                               wrap_classes=[Block, torch.nn.Embedding, torch.nn.LayerNorm,
                                                             torch.nn.Linear])
    if args.check and comm.rank == 0:
        reference = Transformer(args.vocab, args.dim, args.heads, args.layers, args.seq).to(device)
        reference.load_state_dict(fsdp.full_state_dict())
    elif args.check:
        fsdp.full_state_dict()  # collective: every rank takes part
    opt = torch.optim.AdamW(fsdp.parameters(), lr=1e-3)
    ref_opt = torch.optim.AdamW(reference.parameters(), lr=1e-3) if reference is not None else None
    if args.resume:
        # Full tensors are only read on rank 0; every rank takes part (one unit at a time).
        ckpt = torch.load(args.resume) if comm.rank == 0 else {"model": None, "optim": None}
        fsdp.load_full_state_dict(ckpt["model"])
        fsdp.load_full_optim_state_dict(opt, ckpt["optim"])
    held = sum(p.numel() for p in fsdp.parameters())
    if comm.rank == 0:
        print("transformer: %d parameters, %d ranks over %s, ZeRO-%d; rank 0 holds %d (%.2f of them)" %
              (nparams, comm.size, comm.backend, args.zero_stage, held, held / nparams))

    n = args.batch_per_rank
    for step in range(args.steps):
        x, y = (t.to(device) for t in batch(step, n * comm.size, args.seq, args.vocab))
        opt.zero_grad()
        logits = fsdp(x[comm.rank * n:(comm.rank + 1) * n])
        loss = torch.nn.functional.cross_entropy(logits.reshape(-1, args.vocab),
                                                 y[comm.rank * n:(comm.rank + 1) * n].reshape(-1))
        loss.backward()
        opt.step()
        if ref_opt is not None:
            ref_opt.zero_grad()
            torch.nn.functional.cross_entropy(reference(x).reshape(-1, args.vocab), y.reshape(-1)).backward()
            ref_opt.step()
        if comm.rank == 0:
            print("step %d: loss %.4f (rank 0's slice)" % (step, loss.item()))

    state = fsdp.full_state_dict()
    if args.save:
        optim_state = fsdp.full_optim_state_dict(opt)  # collective
        if comm.rank == 0:
            torch.save({"model": state, "optim": optim_state}, args.save)
            print("saved %s" % args.save)
    if reference is not None:
        # full_state_dict() returns CPU tensors, on CUDA too.
        worst = max((state[k] - v.cpu()).abs().max().item() for k, v in reference.state_dict().items())
        print("check: max |fsdp - single process| over the full state = %.2e" % worst)
        if worst > 1e-3:
            sys.exit("check FAILED: the sharded run drifted from the single-process run")
        print("check passed")


if __name__ == "__main__":
    main()
