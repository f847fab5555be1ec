#!/usr/bin/env python3
"""Runs one training-stack example over weft and over gloo and checks that the two trained alike, for the
stacks that launch their own ranks (Lightning, Ray, Composer's launcher; tests/stacks/parity.py knows
torchrun, accelerate and deepspeed by name).

    parity_command.py --world 2 --resume-world 1 --rtol 1e-5 --steps 8 --save-at 4 [--sharded] \\
        [--needs lightning] -- .venv/bin/python examples/lightning/two_tower.py --devices {world}

The command after `--` is the stack's own launch of the example (torchrun, Lightning's launch, Ray, Composer's
launcher ...), with `{world}` where it names the number of ranks: runs 1 and 2 launch --world ranks, run 3
--resume-world (default: --world). parity_command.py appends `--backend B --out FILE --steps S` and the
checkpoint flags of examples/stack_report.py to it and reads the JSON report each run writes. Three runs:
  1. over weft, saving a checkpoint after --save-at steps;
  2. over gloo, the same seeds and data;
  3. over weft again in fresh processes at --resume-world ranks, resumed from run 1's checkpoint.
Checks: run 1's group really was weft (`dist.get_backend()` inside the job) and run 2's gloo, both of the
launched world size, and run 3's weft at --resume-world; at every step the losses of 1 and 2 agree within the
row's tolerance, and so do their final parameters; the model trained (the loss moved); run 3 starts at
--save-at and repeats run 1's losses and final parameters (at another world size too: the examples train the
same global batches at any); with --sharded, each rank held about 1/N of the parameter bytes.
A loss pair agrees when |weft - gloo| <= rtol * |gloo| + atol; a parameter tensor when its largest difference
is at most rtol (--params-rtol where a row sets it) times its largest magnitude plus atol (float32 sums in
another order differ relative to the tensor's scale, not each element's).
Exits 0 when all checks pass, 1 when one fails, 77 (a skip) naming what is missing when a --needs module
cannot be imported or --needs-cuda finds fewer GPUs than ranks. Prints one line per run with its step time and the
weft/gloo step-time ratio.
"""

import argparse
import importlib
import json
import math
import os
import signal
import subprocess
import sys
import tempfile
import time

from parity import GLOO_EXIT_ABORT  # beside this file: gloo's exit-abort line


WORLD = "{world}"  # in the launch command: each run's number of ranks


def at_world(cmd, world):
    return [a.replace(WORLD, str(world)) for a in cmd]


def skip(reason):
    print("skip: " + reason, flush=True)
    sys.exit(77)


def check_needs(modules, cuda, world):
    if cuda:
        import torch
        count = torch.cuda.device_count() if torch.cuda.is_available() else 0
        if count < world:
            skip("needs %d CUDA devices (one a rank), torch sees %d on this machine" % (world, count))
    for name in modules:
        try:
            importlib.import_module(name)
        except Exception as e:  # noqa: BLE001  any failure to import is a reason to skip, said as it was
            skip("%s is not importable by %s (%s: %s); tools/setup --full installs every stack" %
                 (name, sys.executable, type(e).__name__, str(e).splitlines()[0] if str(e) else ""))


def launch(cmd, what, timeout_s, log_dir):
    """Runs cmd in its own process group (so a timeout ends every rank it started); returns its wall time. The
    gloo run that aborts in gloo's teardown race (see parity.py) runs once more; weft's runs never."""
    rc, text, wall = launch_once(cmd, what, timeout_s, log_dir)
    if rc != 0 and what == "gloo" and GLOO_EXIT_ABORT in text:
        print("the %s run aborted at exit (%r): gloo's worker-thread teardown race, not a result; once more" %
              (what, GLOO_EXIT_ABORT), flush=True)
        rc, text, wall = launch_once(cmd, what + "-again", timeout_s, log_dir)
    if rc != 0:
        print("FAIL: the %s run (%s) exited %s; its output ends:\n%s" % (what, " ".join(cmd), rc, text[-6000:]),
              flush=True)
        raise SystemExit(1)
    return wall


def launch_once(cmd, what, timeout_s, log_dir):
    """One run, its output in <log_dir>/<what>.log: (exit status or a timeout's text, that output, wall time)."""
    log = os.path.join(log_dir, what + ".log")
    t0 = time.monotonic()
    with open(log, "w") as f:
        proc = subprocess.Popen(cmd, stdout=f, stderr=subprocess.STDOUT, start_new_session=True)
        try:
            rc = proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            rc = "timeout after %d s" % timeout_s
    wall = time.monotonic() - t0
    with open(log, errors="replace") as f:
        return rc, f.read(), wall


class Checks:
    def __init__(self):
        self.passed = 0
        self.failed = 0

    def check(self, ok, what):
        if ok:
            self.passed += 1
        else:
            self.failed += 1
            print("FAIL: " + what, flush=True)
        return ok


def close(a, b, rtol, atol):
    return math.isfinite(a) and math.isfinite(b) and abs(a - b) <= rtol * abs(b) + atol


def compare_losses(c, name, got, want, rtol, atol):
    c.check(len(got) == len(want), "%s: %d losses, expected %d" % (name, len(got), len(want)))
    worst = 0.0
    for step, (a, b) in enumerate(zip(got, want)):
        worst = max(worst, abs(a - b) / max(abs(b), 1e-30))
        c.check(close(a, b, rtol, atol), "%s: step %d loss %.9g against %.9g (rtol %g, atol %g)" %
                (name, step, a, b, rtol, atol))
    return worst


def compare_params(c, name, got_path, want_path, rtol, atol):
    import torch
    got, want = torch.load(got_path, weights_only=True), torch.load(want_path, weights_only=True)
    c.check(sorted(got) == sorted(want), "%s: parameter names differ: %s" % (name, sorted(set(got) ^ set(want))[:8]))
    worst = 0.0
    for key in sorted(set(got) & set(want)):
        a, b = got[key], want[key]
        if not c.check(a.shape == b.shape and a.dtype == b.dtype, "%s: %s is %s %s against %s %s" %
                       (name, key, a.dtype, tuple(a.shape), b.dtype, tuple(b.shape))):
            continue
        if not a.is_floating_point():
            c.check(torch.equal(a, b), "%s: %s (%s) differs" % (name, key, a.dtype))
            continue
        diff = (a.double() - b.double()).abs().max().item() if a.numel() else 0.0
        scale = b.double().abs().max().item() if b.numel() else 0.0
        worst = max(worst, diff / max(scale, 1e-30))
        c.check(diff <= rtol * scale + atol and math.isfinite(diff),
                "%s: %s differs by %.3g, scale %.3g (rtol %g, atol %g)" % (name, key, diff, scale, rtol, atol))
    c.check(len(got) > 0, "%s: no parameters in %s" % (name, got_path))
    return worst


def main():
    ap = argparse.ArgumentParser(description="weft against gloo for one training-stack example")
    ap.add_argument("--world", type=int, required=True, help="the world size of runs 1 and 2: {world} in the command")
    ap.add_argument("--resume-world", type=int, help="the world size of the resumed run (default: --world)")
    ap.add_argument("--rtol", type=float, required=True, help="1e-5 for SGD-style rows, 1e-3 for Adam")
    ap.add_argument("--params-rtol", type=float,
                    help="the final parameters' tolerance (default: --rtol), where a row states why it needs another")
    ap.add_argument("--atol", type=float, default=1e-7)
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--save-at", type=int, default=4, help="the checkpoint's step (0: no checkpoint check)")
    ap.add_argument("--sharded", action="store_true", help="also check each rank held about 1/N of the bytes")
    ap.add_argument("--needs", action="append", default=[], help="a module the example imports (else skip)")
    ap.add_argument("--needs-cuda", action="store_true", help="a GPU a rank (else skip)")
    ap.add_argument("--timeout", type=int, default=300, help="seconds for each run")
    ap.add_argument("--keep", help="keep the reports and logs in this folder")
    ap.add_argument("cmd", nargs=argparse.REMAINDER, help="-- then the launch command of the example")
    args = ap.parse_args()
    cmd = args.cmd[1:] if args.cmd[:1] == ["--"] else args.cmd
    if not cmd:
        ap.error("no command: give the example's launch command after --")
    if args.world < 1:
        ap.error("--world must be at least 1, not %d" % args.world)
    if args.resume_world is None:
        args.resume_world = args.world
    if args.resume_world < 1:
        ap.error("--resume-world must be at least 1, not %d" % args.resume_world)
    if not any(WORLD in a for a in cmd):
        ap.error("the launch command names no %s (where it takes the number of ranks): %s" % (WORLD, " ".join(cmd)))
    if not 0 <= args.save_at < args.steps:
        ap.error("--save-at must be in [0, --steps=%d), not %d" % (args.steps, args.save_at))
    check_needs(args.needs, args.needs_cuda, max(args.world, args.resume_world))

    if args.keep:
        os.makedirs(args.keep, exist_ok=True)
        run_all(args, cmd, args.keep)
    else:
        with tempfile.TemporaryDirectory(prefix="weft-parity-") as work:
            run_all(args, cmd, work)


def run_all(args, cmd, work):
    ckpt = os.path.join(work, "checkpoint")
    os.makedirs(ckpt, exist_ok=True)
    out = {name: os.path.join(work, name + ".json") for name in ("weft", "gloo", "resumed")}
    common = ["--steps", str(args.steps)]
    save = ["--save-at", str(args.save_at), "--checkpoint-dir", ckpt] if args.save_at else []
    runs = [("weft", args.world, ["--backend", "weft", "--out", out["weft"]] + common + save),
            ("gloo", args.world, ["--backend", "gloo", "--out", out["gloo"]] + common)]
    if args.save_at:
        runs.append(("resumed", args.resume_world,
                     ["--backend", "weft", "--out", out["resumed"], "--resume", "--checkpoint-dir", ckpt] + common))
    walls = {}
    for name, world, extra in runs:
        walls[name] = launch(at_world(cmd, world) + extra, name, args.timeout, work)
    reports = {}
    for name, _, _ in runs:
        with open(out[name]) as f:
            reports[name] = json.load(f)

    c = Checks()
    w, g = reports["weft"], reports["gloo"]
    for name, want in (("weft", "weft"), ("gloo", "gloo")):
        r = reports[name]
        c.check(r["backend"] == want, "the %s run's default group is %r, not %r" % (name, r["backend"], want))
        c.check(r["world_size"] == args.world, "the %s run's world size is %s, not %d" %
                (name, r["world_size"], args.world))
        c.check(len(r["losses"]) == args.steps, "the %s run has %d losses for %d steps" %
                (name, len(r["losses"]), args.steps))
    c.check(len(w["losses"]) > 1 and abs(w["losses"][-1] - w["losses"][0]) > 1e-6 * abs(w["losses"][0]),
            "the loss did not move: %s" % w["losses"])
    params_rtol = args.rtol if args.params_rtol is None else args.params_rtol
    loss_worst = compare_losses(c, "weft vs gloo", w["losses"], g["losses"], args.rtol, args.atol)
    param_worst = compare_params(c, "weft vs gloo final parameters", w["final_params"], g["final_params"],
                                 params_rtol, args.atol)
    if args.sharded:
        per_rank, full = w["param_bytes_per_rank"], w["param_bytes_full"]
        c.check(len(per_rank) == args.world, "param_bytes_per_rank has %d entries for %d ranks" %
                (len(per_rank), args.world))
        # A flat shard pads to a multiple of N elements, and small parameters may stay whole: allow 15%.
        for rank, b in enumerate(per_rank):
            c.check(b <= 1.15 * full / args.world, "rank %d holds %d parameter bytes, more than ~1/%d of %d" %
                    (rank, b, args.world, full))
        c.check(sum(per_rank) >= full, "the ranks hold %d bytes in all, less than the model's %d" %
                (sum(per_rank), full))
    if args.save_at:
        r = reports["resumed"]
        c.check(r["backend"] == "weft", "the resumed run's group is %r, not 'weft'" % r["backend"])
        c.check(r["world_size"] == args.resume_world, "the resumed run's world size is %s, not %d" %
                (r["world_size"], args.resume_world))
        c.check(r["first_step"] == args.save_at, "the resumed run starts at step %s, not %d" %
                (r["first_step"], args.save_at))
        name = "resumed at %d ranks vs uninterrupted at %d" % (args.resume_world, args.world)
        resumed_losses = compare_losses(c, name, r["losses"], w["losses"][args.save_at:], args.rtol, args.atol)
        resumed_params = compare_params(c, name + ": final parameters", r["final_params"], w["final_params"],
                                        params_rtol, args.atol)
    ratio = (w["step_time_s"] / g["step_time_s"]) if w.get("step_time_s") and g.get("step_time_s") else float("nan")
    print("runs (wall s): %s" % ", ".join("%s %.1f" % kv for kv in walls.items()))
    print("worst relative difference weft vs gloo: losses %.3g (rtol %g), parameters %.3g (rtol %g)" %
          (loss_worst, args.rtol, param_worst, params_rtol))
    if args.save_at:
        print("resumed at step %d on %d ranks (saved on %d): worst relative difference losses %.3g, parameters %.3g" %
              (args.save_at, args.resume_world, args.world, resumed_losses, resumed_params))
    print("median step time: weft %.4g s, gloo %.4g s, weft/gloo %.2f" %
          (w.get("step_time_s") or float("nan"), g.get("step_time_s") or float("nan"), ratio))
    print("%d passed, %d failed" % (c.passed, c.failed), flush=True)
    sys.exit(1 if c.failed else 0)


if __name__ == "__main__":
    main()
