#!/usr/bin/env python3
"""A ResNet on FashionMNIST-shaped images (1x28x28, 10 classes) trained data-parallel by Ray Train's
TorchTrainer on a local Ray cluster, over weft.

    .venv/bin/python examples/ray_train/resnet_fashionmnist.py --workers 2                   # over weft
    .venv/bin/python examples/ray_train/resnet_fashionmnist.py --workers 2 --backend gloo    # over gloo
    python examples/ray_train/resnet_fashionmnist.py --device cuda --workers 8               # a GPU a worker

Ray makes each worker's process group before the training function runs, so "weft" must be registered in
the worker process first: `ray.init(runtime_env={"worker_process_setup_hook": "weft._backend.register"})`
does it in every worker (an installed weft needs no hook: `import torch` registers it). The backend is then
named by the one marked line, `TorchConfig(backend="weft")`. The images are synthetic (no download): each class
is a fixed random pattern plus noise, drawn from the seed, so every run sees the same data. Each step trains one
global batch (--global-batch), each worker its 1/N slice, so a checkpoint resumes at another --workers.
"""

import argparse
import os
import sys
import tempfile
import time

EXAMPLES = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, EXAMPLES)
import stack_report  # noqa: E402  (puts the checkout's python/ on sys.path)

import ray  # noqa: E402
import ray.train  # noqa: E402
import ray.train.torch  # noqa: E402
import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
import torch.nn as nn  # noqa: E402
import torchvision  # noqa: E402
from ray.train import Checkpoint, RunConfig, ScalingConfig  # noqa: E402
from ray.train.torch import TorchConfig, TorchTrainer  # noqa: E402


def norm(channels):
    """GroupNorm, not BatchNorm: under DDP BatchNorm normalises over each rank's own slice (SyncBatchNorm runs only
    on accelerators), so the model would change with the world size; GroupNorm normalises each image alone."""
    return nn.GroupNorm(min(8, channels), channels)


def resnet(width):
    """A CIFAR-style ResNet-8 for 28x28 inputs: a 3x3 stem, three stages of one torchvision BasicBlock each
    (width, 2x and 4x channels, the last two halving the resolution), global pooling, a linear head."""
    block = torchvision.models.resnet.BasicBlock

    def stage(cin, cout, stride):
        down = None if stride == 1 and cin == cout else nn.Sequential(
            nn.Conv2d(cin, cout, 1, stride=stride, bias=False), norm(cout))
        return block(cin, cout, stride=stride, downsample=down, norm_layer=norm)

    return nn.Sequential(
        nn.Conv2d(1, width, 3, padding=1, bias=False), norm(width), nn.ReLU(inplace=True),
        stage(width, width, 1), stage(width, 2 * width, 2), stage(2 * width, 4 * width, 2),
        nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(4 * width, 10))


def batch(step, rank, world, global_batch, seed):
    """Rank `rank`'s slice (of `world`) of step `step`'s global batch: labels and images of their class's pattern.
    The global batch is drawn from the seed and the step alone, so it is the same at any world size."""
    patterns = torch.randn(10, 1, 28, 28, generator=torch.Generator().manual_seed(seed))
    g = torch.Generator().manual_seed(seed * 1000003 + step * 1009)
    labels = torch.randint(0, 10, (global_batch,), generator=g)
    images = patterns[labels] + 0.5 * torch.randn(global_batch, 1, 28, 28, generator=g)
    mine = slice(rank * global_batch // world, (rank + 1) * global_batch // world)
    return images[mine], labels[mine]


def train_loop(config):
    torch.set_num_threads(1)
    args = config["args"]
    ctx = ray.train.get_context()
    rank, world = ctx.get_world_rank(), ctx.get_world_size()
    torch.manual_seed(args["seed"])
    model = ray.train.torch.prepare_model(resnet(args["width"]))  # DDP over the worker group's default process group
    plain = getattr(model, "module", model)  # prepare_model wraps in DDP only where there are 2 workers or more
    opt = torch.optim.SGD(model.parameters(), lr=args["lr"], momentum=0.9)
    first = 0
    # Ray Train's way to resume: the checkpoint a run reported, handed to the new run's training function.
    checkpoint = Checkpoint.from_directory(config["resume"]) if config["resume"] else None
    if checkpoint:
        with checkpoint.as_directory() as d:
            state = torch.load(os.path.join(d, "state.pt"), weights_only=True)
        plain.load_state_dict(state["model"])
        opt.load_state_dict(state["opt"])
        first = state["step"]
    device = ray.train.torch.get_device()
    log = stack_report.Log(first)
    for step in range(first, args["steps"]):
        t0 = time.perf_counter()
        images, labels = (t.to(device) for t in batch(step, rank, world, args["global_batch"], args["seed"]))
        opt.zero_grad()
        loss = nn.functional.cross_entropy(model(images), labels)
        loss.backward()
        opt.step()
        log.step(stack_report.global_mean(loss), time.perf_counter() - t0)
        if args["save_at"] and step + 1 == args["save_at"]:
            # Ray's idiom: rank 0 reports the checkpoint, the others report metrics alone.
            with tempfile.TemporaryDirectory() as d:
                if rank == 0:
                    torch.save({"model": plain.state_dict(), "opt": opt.state_dict(), "step": step + 1},
                               os.path.join(d, "state.pt"))
                ray.train.report({"step": step + 1}, checkpoint=Checkpoint.from_directory(d) if rank == 0 else None)
    per_rank = [None] * world
    dist.all_gather_object(per_rank, stack_report.param_bytes(model.parameters()))
    if rank == 0:
        log.write(args["out"], backend=dist.get_backend(), world_size=dist.get_world_size(),
                  state_dict=plain.state_dict(), param_bytes_per_rank=per_rank, param_bytes_full=per_rank[0],
                  stack="ray", stack_version=ray.__version__)
    ray.train.report({"step": args["steps"]})


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[1])
    stack_report.add_args(ap, steps=8, global_batch=32, lr=0.1)
    ap.add_argument("--workers", type=int, default=2, help="Ray Train workers (ranks)")
    ap.add_argument("--width", type=int, default=16, help="the first stage's channels (the others: 2x, 4x)")
    args = stack_report.parse(ap)
    if args.workers < 1 or args.width < 1:
        ap.error("--workers and --width must be at least 1, not %d and %d" % (args.workers, args.width))
    stack_report.per_rank_batch(args, args.workers)  # refuses a --global-batch the workers cannot split evenly
    if args.out:
        args.out = os.path.abspath(args.out)
    ckpt_dir = os.path.abspath(args.checkpoint_dir) if args.checkpoint_dir else None
    resume = None
    if args.resume:
        with open(os.path.join(ckpt_dir, "latest")) as f:
            resume = f.read().strip()

    path = os.pathsep.join(p for p in [EXAMPLES, stack_report.ROOT + "/python", os.environ.get("PYTHONPATH")] if p)
    ray.init(num_cpus=args.workers + 1, include_dashboard=False, logging_level="WARNING",
             runtime_env={"worker_process_setup_hook": "weft._backend.register",  # <- weft in every worker
                          "env_vars": {"PYTHONPATH": path, "OMP_NUM_THREADS": "1"}})
    scratch = tempfile.TemporaryDirectory(prefix="ray-train-")  # Ray's run folder when nothing is kept
    try:
        trainer = TorchTrainer(
            train_loop, train_loop_config={"args": vars(args), "resume": resume},
            torch_config=TorchConfig(backend=args.backend),  # <- weft: TorchConfig(backend="weft")
            scaling_config=ScalingConfig(num_workers=args.workers, use_gpu=args.device == "cuda"),
            run_config=RunConfig(storage_path=ckpt_dir or scratch.name, name="resume" if resume else "resnet"))
        result = trainer.fit()
        if args.save_at:
            with open(os.path.join(ckpt_dir, "latest"), "w") as f:
                f.write(result.checkpoint.path)
    finally:
        ray.shutdown()
        scratch.cleanup()


if __name__ == "__main__":
    main()
