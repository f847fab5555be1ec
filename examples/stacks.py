"""What the training-stack examples share: their common flags, setup, checkpoint helpers and the JSON report
each run writes.

    import stacks
    ap = argparse.ArgumentParser(); stacks.add_args(ap); args = ap.parse_args()
    rank, world, device = stacks.start(args, dist.init_process_group)   # the stack's own init call
    report = stacks.Report(args, first_step=first)
    for step in range(first, args.steps):
        with report.step(step) as s:
            ...; s.loss = stacks.global_mean(loss)   # the loss of the whole global batch
    stacks.finish(args, report, full_state_dict)

Every example trains the same global batches whatever the world size (each rank takes its slice), so a run
over weft and one over gloo, or one resumed at another world size, see the same losses. `--save DIR --save-at
K` writes a checkpoint after K steps and goes on; `--load DIR` resumes from it in a fresh process.

The report (`--out FILE`) is what tests/stacks/parity.py compares: {"backend", "dist_backend" (what
torch.distributed says it ran on), "world_size", "first_step", "losses" (one per step), "step_time_s" (the
median), "param_bytes_per_rank" and "model_bytes" (sharded runs), "final_params" (a torch.save file of the
full state dict)}.
"""

import contextlib
import json
import os
import statistics
import sys
import time

_ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
# From a checkout: the weft package in python/ (an installed weft needs nothing).
sys.path.insert(0, os.path.join(_ROOT, "python"))


def add_args(ap, steps=8, global_batch=8, lr=1e-3):
    ap.add_argument("--device", default="cpu", choices=("cpu", "cuda"))
    ap.add_argument("--backend", default="weft", choices=("weft", "gloo", "nccl"),
                    help="the torch.distributed backend (gloo, or nccl on GPUs: the baseline for parity)")
    ap.add_argument("--steps", type=int, default=steps)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", help="write the run's report (JSON) here")
    ap.add_argument("--save", metavar="DIR", help="write a checkpoint here after --save-at steps")
    ap.add_argument("--save-at", type=int, default=None, help="default: half of --steps")
    ap.add_argument("--load", metavar="DIR", help="resume from the checkpoint in DIR")
    ap.add_argument("--global-batch", type=int, default=global_batch, help="samples per step over all ranks")
    ap.add_argument("--lr", type=float, default=lr)


def start(args, init):
    """Checks the flags, makes "weft" known, makes the default group with init(backend) (the stack's own
    call: dist.init_process_group, deepspeed.init_distributed) and returns (rank, world size, device)."""
    import torch
    import torch.distributed as dist
    check_steps(args)
    register_weft(args.backend)
    init(args.backend)
    rank, world = dist.get_rank(), dist.get_world_size()
    check_batch(args, world)
    if args.device == "cpu":
        return rank, world, torch.device("cpu")
    device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", 0)))
    torch.cuda.set_device(device)
    return rank, world, device


def check_batch(args, world):
    if args.global_batch % world:
        raise SystemExit("--global-batch %d is not a multiple of the world size %d" % (args.global_batch, world))


def global_mean(loss):
    """The mean over ranks of each rank's loss (a collective: every rank calls it): with equal slices, the loss of
    the whole global batch, the same figure at any world size. A world of one, or none, is the loss itself."""
    import torch.distributed as dist
    total = loss.detach().float().reshape(1).clone()  # on the loss's device: the group's backend reduces it there
    if dist.is_initialized() and dist.get_world_size() > 1:
        dist.all_reduce(total)
        total /= dist.get_world_size()
    return total.item()


def save_torch(args, report, step, model, opt):
    """After the step --save-at names, a plain torch checkpoint (DDP: every rank holds the same state, rank 0
    writes it)."""
    import torch
    import torch.distributed as dist
    if not report.wants_save(step):
        return
    if dist.get_rank() == 0:
        os.makedirs(args.save, exist_ok=True)
        torch.save({"model": model.state_dict(), "opt": opt.state_dict(), "step": step + 1},
                   os.path.join(args.save, "ckpt.pt"))
    dist.barrier()


def load_torch(args, model, opt, device):
    """Loads save_torch's checkpoint into model and opt; returns the step to go on from (0 without --load)."""
    import torch
    if not args.load:
        return 0
    state = torch.load(os.path.join(args.load, "ckpt.pt"), map_location=device)
    model.load_state_dict(state["model"])
    opt.load_state_dict(state["opt"])
    return state["step"]


def save_final(args, state):
    """Rank 0 writes the full state dict `state` beside --out; returns the path (None without --out)."""
    import torch
    import torch.distributed as dist
    path = final_params_path(args)
    if path and dist.get_rank() == 0:
        torch.save({k: v.detach().float().cpu() if v.is_floating_point() else v.detach().cpu()
                    for k, v in state.items()}, path)
    return path


def register_weft(backend):
    """Makes "weft" a torch.distributed backend name in this process (the one line weft needs)."""
    if backend == "weft":
        import weft.torch  # noqa: F401


def save_step(args):
    return args.steps // 2 if args.save_at is None else args.save_at


def check_steps(args):
    if args.steps < 1:
        raise SystemExit("--steps must be at least 1, not %d" % args.steps)
    if args.save and not 0 < save_step(args) <= args.steps:
        raise SystemExit("--save-at must be in 1..--steps (%d), not %d" % (args.steps, save_step(args)))


class _Step:
    loss = None


class Report:
    def __init__(self, args, first_step=0):
        import torch.distributed as dist
        self.args = args
        self.first_step = first_step
        self.rank = dist.get_rank()
        self.world_size = dist.get_world_size()
        self.dist_backend = str(dist.get_backend())
        self.losses = []
        self.times = []

    @contextlib.contextmanager
    def step(self, step):
        s = _Step()
        t0 = time.perf_counter()
        yield s
        self.times.append(time.perf_counter() - t0)
        if s.loss is None:
            raise RuntimeError("step %d recorded no loss" % step)
        loss = float(s.loss)
        self.losses.append(loss)
        if self.rank == 0:
            print("step %d loss %.6f" % (step, loss), flush=True)

    def wants_save(self, step):
        """True once `step` (0-based) ends the steps to save after."""
        return bool(self.args.save) and step + 1 == save_step(self.args)

    def write(self, final_params=None, param_bytes_per_rank=None, model_bytes=None):
        """Rank 0 writes the report; param_bytes_per_rank is this rank's (every rank's, gathered)."""
        import torch.distributed as dist
        per_rank = None
        if param_bytes_per_rank is not None:
            everyone = [None] * self.world_size
            dist.all_gather_object(everyone, int(param_bytes_per_rank))
            per_rank = [int(b) for b in everyone]
        if self.rank != 0 or not self.args.out:
            return
        report = {
            "backend": self.args.backend,
            "dist_backend": self.dist_backend,
            "world_size": self.world_size,
            "first_step": self.first_step,
            "losses": self.losses,
            "step_time_s": statistics.median(self.times) if self.times else None,
            "param_bytes_per_rank": per_rank,
            "model_bytes": model_bytes,
            "final_params": os.path.abspath(final_params) if final_params else None,
        }
        with open(self.args.out, "w") as f:
            json.dump(report, f, indent=1)


def final_params_path(args):
    """Where the run's full final state dict goes: beside --out."""
    return (os.path.splitext(args.out)[0] + ".params.pt") if args.out else None


def model_bytes(module):
    return sum(p.numel() * p.element_size() for p in module.parameters())


def tiny_llama(seed, vocab=256, hidden=64, layers=2, heads=4, seq=32):
    """A Llama-architecture causal LM from a small LlamaConfig: no weights are downloaded."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM
    config = LlamaConfig(vocab_size=vocab, hidden_size=hidden, intermediate_size=2 * hidden,
                         num_hidden_layers=layers, num_attention_heads=heads, num_key_value_heads=heads,
                         max_position_embeddings=seq, tie_word_embeddings=False)
    torch.manual_seed(seed)
    return LlamaForCausalLM(config)


def lm_batch(step, size, seq=32, vocab=256):
    """One global batch of token ids, the same on every rank: a slice of it is each rank's."""
    import torch
    g = torch.Generator().manual_seed(2000 + step)
    return torch.randint(0, vocab, (size, seq), generator=g)


def finish(args, report, state, **sizes):
    """Writes the final parameters (`state`, a full state dict) and the report, and ends the process group."""
    import torch.distributed as dist
    report.write(final_params=save_final(args, state), **sizes)
    dist.destroy_process_group()


def rank_slice(args):
    """This rank's slice of each global batch."""
    import torch.distributed as dist
    per = args.global_batch // dist.get_world_size()
    return slice(dist.get_rank() * per, (dist.get_rank() + 1) * per)
