"""Stock torch.nn.parallel.DistributedDataParallel over "weft" against the same training over gloo.

    .venv/bin/torchrun --standalone --nproc_per_node 2 tests/torch/test_ddp.py

Each configuration trains two copies of one model for 10 steps on the same per-rank batches, one with
process_group=weft (the default group) and one with a gloo group; their parameters must agree within 1e-6.
Small buckets give several all-reduces per step, so async works and their order matter. One model has an embedding
with sparse gradients, which DDP all-reduces as sparse tensors.
"""

import torch
import torch.nn as nn
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
from torch.nn.parallel import DistributedDataParallel as DDP

from common import Job

STEPS = 10


class Net(nn.Module):
    def __init__(self, unused_branch=False):
        super().__init__()
        self.a = nn.Linear(32, 64)
        self.b = nn.Linear(64, 64)
        self.c = nn.Linear(64, 8)
        self.unused = nn.Linear(64, 64) if unused_branch else None

    def forward(self, x):
        return self.c(torch.relu(self.b(torch.relu(self.a(x)))))


class SparseNet(nn.Module):
    """An embedding with sparse gradients (a recommender's, nn.EmbeddingBag(sparse=True)) before Net's layers:
    DDP all-reduces its gradient as a sparse tensor."""

    def __init__(self):
        super().__init__()
        self.emb = nn.EmbeddingBag(200, 32, mode="sum", sparse=True)
        self.net = Net()

    def forward(self, x):
        return self.net(self.emb(x))


def train(job, group, config):
    torch.manual_seed(1234)
    sparse = config.get("sparse", False)
    model = SparseNet() if sparse else Net(unused_branch=config.get("find_unused_parameters", False))
    kwargs = {k: v for k, v in config.items() if k not in ("hook", "no_sync", "sparse")}
    ddp = DDP(model, process_group=group, bucket_cap_mb=0.01, **kwargs)
    if config.get("hook"):
        ddp.register_comm_hook(group, default_hooks.bf16_compress_hook)
    opt = torch.optim.SGD(ddp.parameters(), lr=0.05, momentum=0.0 if sparse else 0.9)
    gen = torch.Generator().manual_seed(99 + job.rank)
    for _ in range(STEPS):
        opt.zero_grad()
        if sparse:
            ddp(torch.randint(0, 200, (16, 5), generator=gen)).square().mean().backward()
            opt.step()
            continue
        if config.get("no_sync"):
            with ddp.no_sync():  # accumulate one micro-batch locally, reduce with the next
                ddp(torch.randn(16, 32, generator=gen)).square().mean().backward()
        ddp(torch.randn(16, 32, generator=gen)).square().mean().backward()
        opt.step()
    return [p.detach().clone() for p in model.parameters()]


def main():
    job = Job()
    configs = {"default": {}, "no_sync": {"no_sync": True},
               "find_unused_parameters": {"find_unused_parameters": True},
               "static_graph": {"static_graph": True}, "gradient_as_bucket_view": {"gradient_as_bucket_view": True},
               "bf16_compress_hook": {"hook": True}, "sparse_embedding": {"sparse": True}}
    for name, config in configs.items():
        def one(job, name=name, config=config):
            weft_params = train(job, None, config)
            gloo_params = train(job, job.gloo, config)
            worst = max((a - b).abs().max().item() for a, b in zip(weft_params, gloo_params))
            torch.manual_seed(1234)
            start = SparseNet() if config.get("sparse") else Net(config.get("find_unused_parameters", False))
            moved = any((a - b).abs().max().item() > 1e-3 for a, b in zip(weft_params, start.parameters()))
            # The bf16 hook all-reduces bf16 buckets: weft sums them in float32 and rounds once, gloo rounds
            # every partial sum to bf16, so beyond 2 ranks (where both round one sum once) their gradients
            # differ by bf16 roundings (2^-8 relative), and the parameters by lr times that.
            tol = 1e-6 if not config.get("hook") or job.world == 2 else 2e-4
            job.check(worst <= tol, "DDP %s: weft and gloo parameters differ by %.3g (> %g)" % (name, worst, tol))
            job.check(moved, "DDP %s: the parameters did not train" % name)
        job.run("DDP " + name, one)
    job.finish()


if __name__ == "__main__":
    main()
