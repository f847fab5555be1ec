"""What the training-stack examples (examples/<stack>/*.py) share: their common flags and the JSON report that
tests/stacks/parity.py compares between a run over weft and the same run over gloo.

    import stack_report                       # also puts the checkout's python/ on sys.path
    ap = argparse.ArgumentParser()
    stack_report.add_args(ap, steps=8, global_batch=32, lr=0.1)  # and --device --backend --out --seed ...
    args = stack_report.parse(ap)             # (batch_size=16 instead: --batch-size, samples per rank)
    per_rank = stack_report.per_rank_batch(args, world)   # each rank's slice of --global-batch
    log = stack_report.Log(first_step=0)
    log.step(stack_report.global_mean(loss), seconds)   # once a step, on every rank: the global batch's loss
    log.write(args.out, backend=dist.get_backend(), world_size=..., state_dict=..., param_bytes_per_rank=[...])

The report: {"backend", "world_size", "first_step", "losses" (one a step from first_step), "step_time_s" (the
median, the first step left out: it includes warm-up), "param_bytes_per_rank" (the bytes of parameters each
rank holds), "param_bytes_full" (the whole model's), "final_params" (a torch.save file of the full state dict
beside the report, compared element by element)}.
"""

import json
import os
import statistics
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# From a checkout: the weft package in python/ (an installed weft needs nothing).
if os.path.isdir(os.path.join(ROOT, "python", "weft")) and os.path.join(ROOT, "python") not in sys.path:
    sys.path.insert(0, os.path.join(ROOT, "python"))

import stacks  # noqa: E402  (beside this file: the batch check and the global loss are the examples' own)


def add_args(ap, steps, batch_size=None, lr=None, global_batch=None):
    """The common flags; with global_batch (instead of batch_size) the batch is --global-batch, a step's samples
    over all ranks, so that the same batches train at any world size (a checkpoint resumed at another world size
    then continues the same run)."""
    if (batch_size is None) == (global_batch is None):
        raise ValueError("add_args takes one of batch_size and global_batch, not %r and %r" %
                         (batch_size, global_batch))
    if global_batch is None:
        ap.add_argument("--batch-size", type=int, default=batch_size, help="samples per rank and step")
    else:
        ap.add_argument("--global-batch", type=int, default=global_batch,
                        help="samples per step over all ranks (each rank takes 1/N of them)")
    ap.add_argument("--lr", type=float, default=lr)
    ap.add_argument("--device", default="cpu", choices=("cpu", "cuda"))
    ap.add_argument("--backend", default="weft", choices=("weft", "gloo"),
                    help="the torch.distributed backend of the default group (gloo: the baseline)")
    ap.add_argument("--out", help="write the JSON report here (and the final parameters beside it)")
    ap.add_argument("--steps", type=int, default=steps, help="optimizer steps in all, a resumed run's included")
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--save-at", type=int, default=0, help="save a checkpoint after this many steps (0: none)")
    ap.add_argument("--checkpoint-dir", help="where --save-at saves and --resume loads")
    ap.add_argument("--resume", action="store_true", help="load the checkpoint in --checkpoint-dir and go on")


def parse(ap, argv=None):
    args = ap.parse_args(argv)
    batch_flag, batch = (("--global-batch", args.global_batch) if hasattr(args, "global_batch") else
                         ("--batch-size", args.batch_size))
    if args.steps < 1 or batch < 1:
        ap.error("--steps and %s must be at least 1, not %d and %d" % (batch_flag, args.steps, batch))
    if args.save_at < 0 or args.save_at >= args.steps:
        ap.error("--save-at must be in [0, --steps=%d), not %d" % (args.steps, args.save_at))
    if (args.save_at or args.resume) and not args.checkpoint_dir:
        ap.error("--save-at and --resume need --checkpoint-dir")
    if args.save_at and args.resume:
        ap.error("--save-at and --resume are two runs: give one of them")
    if args.resume and not os.path.isdir(args.checkpoint_dir):
        ap.error("--resume: --checkpoint-dir %s does not exist" % args.checkpoint_dir)
    return args


def per_rank_batch(args, world):
    """Each rank's share of --global-batch at world size `world` (a clear error where it does not divide)."""
    stacks.check_batch(args, world)
    return args.global_batch // world


global_mean = stacks.global_mean


def param_bytes(params):
    return sum(p.numel() * p.element_size() for p in params)


class Log:
    def __init__(self, first_step=0):
        self.first_step = first_step
        self.losses = []
        self.times = []

    def step(self, loss, seconds):
        self.losses.append(float(loss))
        self.times.append(float(seconds))

    def write(self, out, backend, world_size, state_dict, param_bytes_per_rank, param_bytes_full, **extra):
        """Writes the report to `out` (nothing when out is None) and the state dict to `out`.params.pt."""
        if not out:
            return
        import torch
        params_path = out + ".params.pt"
        torch.save({k: v.detach().cpu().clone() for k, v in state_dict.items()}, params_path)
        timed = self.times[1:] or self.times
        report = {"backend": backend, "world_size": world_size, "first_step": self.first_step,
                  "losses": self.losses, "step_time_s": statistics.median(timed) if timed else None,
                  "param_bytes_per_rank": list(param_bytes_per_rank), "param_bytes_full": param_bytes_full,
                  "final_params": params_path}
        report.update(extra)
        with open(out, "w") as f:
            json.dump(report, f, indent=1)


def require(modules, device, gpu_only=None):
    """Exits 77 (a skip), saying why, where a module cannot be imported, where `gpu_only` (the reason a stack
    needs a GPU) is given and --device is not cuda, or where --device cuda finds no CUDA device."""
    import importlib
    if gpu_only and device != "cuda":
        print("skip: %s: run with --device cuda" % gpu_only, flush=True)
        sys.exit(77)
    for name in modules:
        try:
            module = importlib.import_module(name)
            if getattr(module, "__file__", None) is None:  # examples/<stack>/ itself, as a namespace package
                raise ImportError("only folders named %s were found: %s" % (name, list(module.__path__)))
        except Exception as e:  # noqa: BLE001  any import failure is the reason, said as it was
            print("skip: %s is not importable (%s: %s)" % (name, type(e).__name__, str(e).splitlines()[0]
                                                            if str(e) else ""), flush=True)
            sys.exit(77)
    import torch
    if device == "cuda" and not torch.cuda.is_available():
        print("skip: needs a CUDA device: torch.cuda.is_available() is False on this machine", flush=True)
        sys.exit(77)


def init_first(backend, device):
    """Makes the default group over `backend` before the stack starts, so the stack (Accelerate's state,
    underneath Unsloth's and Axolotl's trainers) adopts it; without a launcher's variables, a world of one."""
    import socket
    import torch
    import torch.distributed as dist
    if "RANK" not in os.environ:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        os.environ.update(RANK="0", LOCAL_RANK="0", WORLD_SIZE="1", LOCAL_WORLD_SIZE="1",
                          MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    if device == "cuda":
        torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    dist.init_process_group(backend)  # <- weft: init_process_group("weft")
    return dist.get_rank(), dist.get_world_size()


def hf_callback(log):
    """A Hugging Face TrainerCallback that fills `log` (a Log): each step's time and its logged loss
    (logging_steps=1), from the step a resumed run starts at."""
    import time
    from transformers import TrainerCallback

    class Steps(TrainerCallback):
        t0 = 0.0

        def on_train_begin(self, targs, state, control, **kwargs):
            log.first_step = state.global_step  # the checkpoint's step, when resumed

        def on_step_begin(self, targs, state, control, **kwargs):
            self.t0 = time.perf_counter()

        def on_step_end(self, targs, state, control, **kwargs):
            log.times.append(time.perf_counter() - self.t0)

        def on_log(self, targs, state, control, logs=None, **kwargs):
            if logs and "loss" in logs:
                log.losses.append(float(logs["loss"]))

    return Steps()
