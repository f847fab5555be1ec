#!/usr/bin/env python3
"""torchvision's RetinaNet (object detection) under stock torch DistributedDataParallel, on weft.

    torchrun --standalone --nproc_per_node 2 examples/torch_ddp/retinanet.py --backend weft --out weft.json
    torchrun --nproc_per_node 8 examples/torch_ddp/retinanet.py --device cuda --size full

Tiny by default (a ResNet-18 FPN backbone, 96-pixel images, 3 classes); --size full is
retinanet_resnet50_fpn at 512 pixels. No weights are downloaded: the images are synthetic, each with
one or two boxes of a bright class-coloured square. Each step draws one global batch and each rank trains
on its slice; the backbone's BatchNorm normalises each rank's own slice (as DDP does without SyncBatchNorm),
so a run resumes at the world size it was saved at. The only weft line is `init_process_group("weft")`.

`--grad-sum` (DDP communication hooks) tells a backend's float32 summation order from a different result
(docs/frameworks.md, the RetinaNet row): `fp64` sums the gradients in float64 and rounds once, so the
average no longer depends on the order the ranks are added in (the reference); `fp32-reversed` gathers
every rank's bucket and adds them in float32 from the last rank to the first (another order, any backend).
"""

import argparse
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
from torch.nn.parallel import DistributedDataParallel as DDP  # noqa: E402

import stacks  # noqa: E402


def build(size, classes):
    from torchvision.models import resnet18
    from torchvision.models.detection import RetinaNet, retinanet_resnet50_fpn
    from torchvision.models.detection.backbone_utils import BackboneWithFPN
    from torchvision.ops.feature_pyramid_network import LastLevelP6P7
    if size == "full":
        return retinanet_resnet50_fpn(weights=None, weights_backbone=None, num_classes=classes, min_size=512,
                                      max_size=512), 512
    # RetinaNet's own layout (C3-C5 into the FPN, P6 and P7 from P5) on a ResNet-18 with 64 FPN channels.
    backbone = BackboneWithFPN(resnet18(weights=None), return_layers={"layer2": "0", "layer3": "1", "layer4": "2"},
                               in_channels_list=[128, 256, 512], out_channels=64, extra_blocks=LastLevelP6P7(64, 64))
    return RetinaNet(backbone, num_classes=classes, min_size=96, max_size=96), 96


def batch(step, n, side, classes):
    """n synthetic images with their targets: 1-2 filled squares whose colour channel is their class."""
    g = torch.Generator().manual_seed(3000 + step)
    images, targets = [], []
    for _ in range(n):
        img = 0.1 * torch.rand(3, side, side, generator=g)
        boxes, labels = [], []
        for _ in range(int(torch.randint(1, 3, (1,), generator=g))):
            w = int(torch.randint(side // 6, side // 3, (1,), generator=g))
            x, y = (int(v) for v in torch.randint(0, side - w, (2,), generator=g))
            c = int(torch.randint(1, classes, (1,), generator=g))
            img[c % 3, y:y + w, x:x + w] = 1.0
            boxes.append([x, y, x + w, y + w])
            labels.append(c)
        images.append(img)
        targets.append({"boxes": torch.tensor(boxes, dtype=torch.float32), "labels": torch.tensor(labels)})
    return images, targets


def fp64_sum(state, bucket):
    """A DDP communication hook: the bucket's average, summed in float64 and rounded once."""
    flat = bucket.buffer()
    wide = flat.double().div_(dist.get_world_size())  # a power of two: exact
    done = dist.all_reduce(wide, async_op=True).get_future()

    def narrow(fut):
        flat.copy_(fut.value()[0])
        return flat
    return done.then(narrow)


def fp32_reversed_sum(state, bucket):
    """A DDP communication hook: the bucket's average, added in float32 from the last rank to the first."""
    flat = bucket.buffer()
    parts = [torch.empty_like(flat) for _ in range(dist.get_world_size())]
    dist.all_gather(parts, flat.div_(dist.get_world_size()))
    total = parts[-1].clone()
    for part in reversed(parts[:-1]):
        total += part
    fut = torch.futures.Future()
    fut.set_result(flat.copy_(total))
    return fut


HOOKS = {"fp32": None, "fp64": fp64_sum, "fp32-reversed": fp32_reversed_sum}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    stacks.add_args(ap, steps=4, global_batch=4, lr=0.01)
    ap.add_argument("--size", default="tiny", choices=("tiny", "full"))
    ap.add_argument("--grad-sum", default="fp32", choices=tuple(HOOKS),
                    help="fp64: gradients summed in float64 (the order-independent reference); fp32-reversed: "
                    "in float32, last rank first")
    args = ap.parse_args()
    _, _, device = stacks.start(args, dist.init_process_group)  # <- "weft": the one weft line

    classes, mine = 3, stacks.rank_slice(args)
    torch.manual_seed(args.seed)
    model, side = build(args.size, classes)
    model.to(device)
    ddp = DDP(model, device_ids=[device.index] if device.type == "cuda" else None)
    if HOOKS[args.grad_sum]:
        ddp.register_comm_hook(None, HOOKS[args.grad_sum])
    opt = torch.optim.SGD(ddp.parameters(), lr=args.lr, momentum=0.9)
    first = stacks.load_torch(args, model, opt, device)

    report = stacks.Report(args, first_step=first)
    for step in range(first, args.steps):
        with report.step(step) as s:
            images, targets = batch(step, args.global_batch, side, classes)
            images = [i.to(device) for i in images[mine]]
            targets = [{k: v.to(device) for k, v in t.items()} for t in targets[mine]]
            opt.zero_grad()
            loss = sum(ddp(images, targets).values())  # classification + box regression
            loss.backward()
            s.loss = stacks.global_mean(loss)
            opt.step()
        stacks.save_torch(args, report, step, model, opt)

    stacks.finish(args, report, model.state_dict())


if __name__ == "__main__":
    main()
