#!/usr/bin/env python3
"""Runs one training-stack example over weft and over a baseline (gloo, or nccl), the way that stack launches,
and compares them.

    parity.py --launcher torchrun --nproc 2 --rtol 1e-5 --resume examples/torch_ddp/mlp.py -- --steps 10

Checks, each a failure with the numbers when it does not hold:
- the weft run really ran on weft (the report's dist_backend, from dist.get_backend()) at the launched world
  size, and the baseline run (--baseline, gloo by default) on its backend;
- every step's loss and every final parameter agree within --rtol (relative to the larger magnitude; a
  tensor is compared by its largest element difference against its largest magnitude); --params-rtol
  sets the parameters' tolerance apart where a row states why its final parameters need another;
- with --sharded, each rank holds about 1/N of the model's parameter bytes;
- with --cuda-only WHY, the row runs only where there is a GPU per rank (and skips, printing WHY, elsewhere);
- with --resume, the weft run saves a checkpoint half way, a fresh job (--resume-nproc ranks) loads it, and
  its losses continue the first run's within --rtol; with --resume-params-rtol R, its final parameters also
  match the first run's within R (at another world size a row's sums run in another order); with
  --resume-universal (DeepSpeed), between the jobs DeepSpeed's converter (python -m
  deepspeed.checkpoint.ds_to_universal) turns the saved checkpoint into a universal one, which the fresh job
  loads (the example's --load-universal) at any world size.

The example writes the JSON report of examples/stacks.py (--out). The stacks' Python is $WEFT_STACKS_PYTHON,
or this interpreter. --needs lists the modules the example imports: a missing one is a skip (exit 77) naming
it. Prints "weft/gloo step time R" (medians of each run's steps, measured in this one job).
"""

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time

SKIP = 77
HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(HERE, "..", "common"))
from ports import free_port  # noqa: E402


def python():
    return os.environ.get("WEFT_STACKS_PYTHON") or sys.executable


def launch_cmd(launcher, nproc, script, port):
    py = python()
    if launcher == "torchrun":
        return [py, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", str(nproc), script]
    if launcher == "accelerate":
        # --multi_gpu is Accelerate's torchrun path (its --cpu path launches one process, or mpirun).
        return [py, "-m", "accelerate.commands.launch", "--multi_gpu", "--num_processes", str(nproc),
                "--num_machines", "1", "--main_process_port", str(port), script]
    if launcher == "deepspeed":
        # DeepSpeed's own runner; --num_gpus is its "processes on this node" (the CPU accelerator's too).
        return [py, "-m", "deepspeed.launcher.runner", "--num_gpus", str(nproc), "--master_port", str(port), script]
    raise SystemExit("--launcher must be torchrun, accelerate or deepspeed, not %r" % launcher)


# torch's ProcessGroupGloo lets its worker threads drop a finished collective's tensors after the caller has
# moved on; when the interpreter is finalizing by then, releasing their Python objects ends the thread inside
# a noexcept frame and libstdc++ aborts with this line (both cases seen here were all_gather_object's
# AsyncAllgatherWork, after the report was written; DeepSpeed's ZeRO-3 job over gloo once ended so twice in a
# row). A baseline job that ends so after its report was written is taken; one that ends so before runs once
# more. weft's never.
GLOO_EXIT_ABORT = "terminate called without an active exception"


def read_report(out):
    """The report a job wrote, or None if there is none or it is not whole."""
    try:
        with open(out) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def run_job(args, backend, out, nproc, extra):
    t0 = time.monotonic()
    for attempt in (1, 2):
        rc, log = launch_job(args, backend, out, nproc, extra)
        if rc == 0:
            break
        if backend != "weft" and GLOO_EXIT_ABORT in log:
            if read_report(out) is not None:
                print("  the %s job aborted at exit (%r) after writing its report: gloo's worker-thread teardown "
                      "race, not a result; the report is taken" % (backend, GLOO_EXIT_ABORT), flush=True)
                break
            if attempt == 1:
                print("  the %s job aborted at exit (%r): gloo's worker-thread teardown race, not a result; once "
                      "more" % (backend, GLOO_EXIT_ABORT), flush=True)
                continue
        raise SystemExit("FAIL: %s job over %s exited %d" % (args.launcher, backend, rc))
    if not os.path.exists(out):
        raise SystemExit("FAIL: the %s run wrote no report %s" % (backend, out))
    report = read_report(out)
    if report is None:
        raise SystemExit("FAIL: the %s run's report %s is not whole JSON" % (backend, out))
    print("  %s: %d steps in %.1f s" % (backend, len(report["losses"]), time.monotonic() - t0), flush=True)
    return report


def launch_job(args, backend, out, nproc, extra):
    """One job; its output is printed when it ends (kept in a log beside the report, read for the exit abort)."""
    # The launchers' master port and weft's (MASTER_PORT + 1) must both be free.
    port = free_port(also_below=1) - 1
    cmd = launch_cmd(args.launcher, nproc, args.script, port) + ["--backend", backend, "--out", out] + extra
    env = dict(os.environ, WEFT_SOCKET_IFNAME=os.environ.get("WEFT_SOCKET_IFNAME", "lo"),
               OMP_NUM_THREADS="1", PYTHONUNBUFFERED="1")
    if args.launcher == "deepspeed" and "cuda" not in extra:
        env.setdefault("DS_ACCELERATOR", "cpu")  # DeepSpeed would look for a GPU accelerator first
    env["PYTHONPATH"] = os.pathsep.join(p for p in (os.path.join(ROOT, "python"), env.get("PYTHONPATH")) if p)
    print("+ " + " ".join(cmd), flush=True)
    if os.path.exists(out):
        os.remove(out)  # a failed try's report is not this one's
    log_path = out + ".log"
    with open(log_path, "w") as log:
        proc = subprocess.Popen(cmd, env=env, start_new_session=True, cwd=os.path.dirname(out), stdout=log,
                                stderr=subprocess.STDOUT)
        try:
            rc = proc.wait(timeout=args.timeout)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            rc = None
    with open(log_path, errors="replace") as f:
        text = f.read()
    sys.stdout.write(text)
    if rc is None:
        raise SystemExit("FAIL: %s job over %s did not end within %d s" % (args.launcher, backend, args.timeout))
    return rc, text


def to_universal(args, ckpt):
    """Runs DeepSpeed's converter on the checkpoint saved half way, as a user does between the jobs: the tag in
    a `latest` file under ckpt (the fewest steps where the stack saved again at the end, as TRL's Trainer does)
    becomes <tag>_universal beside it, and the converter names it in latest_universal there."""
    import re
    saved = []
    for folder, _, files in os.walk(ckpt):
        if "latest" in files:
            with open(os.path.join(folder, "latest")) as f:
                tag = f.read().strip()
            m = re.fullmatch(r"global_step(\d+)", tag)
            if m:
                saved.append((int(m.group(1)), folder, tag))
    if not saved:
        raise SystemExit("FAIL: no DeepSpeed checkpoint (a latest file naming global_stepN) under %s" % ckpt)
    _, folder, tag = min(saved)
    src = os.path.join(folder, tag)
    # One worker each: the converter's process pools only add start-up time on a tiny model. ZeRO-1/2
    # checkpoints carry universal_checkpoint_info only where the model sets it (Megatron's do), and the
    # converter refuses them without it; --inject_missing_state is its flag for the others (ZeRO-3 ignores it).
    cmd = [python(), "-m", "deepspeed.checkpoint.ds_to_universal", "--input_folder", src,
           "--output_folder", src + "_universal", "--num_extract_workers", "1", "--num_merge_workers", "1",
           "--inject_missing_state"]
    env = dict(os.environ, OMP_NUM_THREADS="1")
    env.setdefault("DS_ACCELERATOR", "cpu")
    print("+ " + " ".join(cmd), flush=True)
    t0 = time.monotonic()
    try:
        out = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=args.timeout)
    except subprocess.TimeoutExpired:
        raise SystemExit("FAIL: ds_to_universal did not end within %d s" % args.timeout)
    if out.returncode != 0:
        print(out.stdout + out.stderr, flush=True)
        raise SystemExit("FAIL: ds_to_universal exited %d on %s" % (out.returncode, src))
    latest = os.path.join(folder, "latest_universal")
    if not os.path.isfile(latest):
        raise SystemExit("FAIL: ds_to_universal wrote no %s" % latest)
    print("  universal checkpoint %s_universal in %.1f s" % (src, time.monotonic() - t0), flush=True)


def rel(a, b):
    return abs(a - b) / max(abs(a), abs(b), 1e-12)


class Checks:
    def __init__(self):
        self.failures = []

    def check(self, ok, what):
        if not ok:
            self.failures.append(what)
            print("FAIL: " + what, flush=True)


def compare_losses(c, name, got, want, rtol):
    c.check(len(got) == len(want) and len(want) > 0,
            "%s: %d losses against %d" % (name, len(got), len(want)))
    worst = 0.0
    for i, (a, b) in enumerate(zip(got, want)):
        worst = max(worst, rel(a, b))
        c.check(rel(a, b) <= rtol, "%s: step %d loss %.9g against %.9g (relative %.3g > %.3g)" %
                (name, i, a, b, rel(a, b), rtol))
    return worst


def compare_params(c, got_path, want_path, rtol, name="final params"):
    import torch
    got, want = torch.load(got_path), torch.load(want_path)
    c.check(sorted(got) == sorted(want), "%s: the two runs have different keys" % name)
    worst = 0.0
    for k in sorted(set(got) & set(want)):
        a, b = got[k].double(), want[k].double()
        if a.shape != b.shape:
            c.check(False, "%s: %s has shape %s against %s" % (name, k, tuple(a.shape), tuple(b.shape)))
            continue
        scale = max(a.abs().max().item(), b.abs().max().item(), 1e-12) if a.numel() else 1.0
        err = (a - b).abs().max().item() / scale if a.numel() else 0.0
        worst = max(worst, err)
        c.check(err <= rtol, "%s: %s differs by %.3g of its largest magnitude (> %.3g)" % (name, k, err, rtol))
    return worst


def missing_modules(names):
    code = "import importlib.util, sys\nprint(' '.join(m for m in sys.argv[1:] if not importlib.util.find_spec(m)))"
    out = subprocess.run([python(), "-c", code] + names, capture_output=True, text=True)
    return out.stdout.split() if out.returncode == 0 else names


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--launcher", required=True, choices=("torchrun", "accelerate", "deepspeed"))
    ap.add_argument("--nproc", type=int, default=2)
    ap.add_argument("--rtol", type=float, required=True)
    ap.add_argument("--params-rtol", type=float, help="the final parameters' tolerance (default: --rtol)")
    ap.add_argument("--sharded", action="store_true", help="check each rank holds about 1/N of the parameters")
    ap.add_argument("--resume", action="store_true", help="checkpoint on weft, resume in a fresh job")
    ap.add_argument("--resume-nproc", type=int, help="ranks of the resumed job (default: --nproc)")
    ap.add_argument("--resume-universal", action="store_true",
                    help="DeepSpeed: convert the checkpoint with ds_to_universal between the jobs and resume from "
                    "the universal one (the example's --load-universal)")
    ap.add_argument("--resume-params-rtol", type=float,
                    help="also compare the resumed job's final parameters with the first run's, at this tolerance")
    ap.add_argument("--baseline", default="gloo", choices=("gloo", "nccl"), help="the backend weft is compared with")
    ap.add_argument("--needs", default="", help="comma-separated modules the example imports")
    ap.add_argument("--cuda-only", metavar="WHY", help="the row needs a GPU per rank (WHY it cannot run on a CPU): "
                    "skip unless this machine has --nproc CUDA devices")
    ap.add_argument("--timeout", type=int, default=240, help="seconds per job")
    ap.add_argument("script")
    ap.add_argument("script_args", nargs=argparse.REMAINDER)
    args = ap.parse_args()
    if args.nproc < 1:
        raise SystemExit("--nproc must be at least 1, not %d" % args.nproc)
    if args.resume_nproc is not None and args.resume_nproc < 1:
        raise SystemExit("--resume-nproc must be at least 1, not %d" % args.resume_nproc)
    if args.resume_universal and not args.resume:
        raise SystemExit("--resume-universal needs --resume (it converts the checkpoint that run saves)")
    extra = [a for a in args.script_args if a != "--"]
    args.script = os.path.abspath(args.script)

    missing = missing_modules([m for m in args.needs.split(",") if m])
    if missing:
        print("SKIP: %s cannot import %s (tools/setup --full installs every stack, or name "
              "an interpreter that has them in WEFT_STACKS_PYTHON)" % (python(), ", ".join(missing)), flush=True)
        return SKIP

    if args.cuda_only:
        probe = subprocess.run([python(), "-c", "import torch; print(torch.cuda.device_count())"],
                               capture_output=True, text=True)
        have = int(probe.stdout.strip() or 0) if probe.returncode == 0 else 0
        if have < args.nproc:
            print("SKIP: needs %d CUDA devices, this machine has %d: %s" % (args.nproc, have, args.cuda_only),
                  flush=True)
            return SKIP

    c = Checks()
    with tempfile.TemporaryDirectory(prefix="weft-stacks-") as tmp:
        ckpt = os.path.join(tmp, "ckpt")
        w = run_job(args, "weft", os.path.join(tmp, "weft.json"), args.nproc,
                    extra + (["--save", ckpt] if args.resume else []))
        g = run_job(args, args.baseline, os.path.join(tmp, "baseline.json"), args.nproc, extra)
        for r, want in ((w, "weft"), (g, args.baseline)):
            c.check(r["dist_backend"] == want, "the %s run's dist.get_backend() is %r" % (want, r["dist_backend"]))
            c.check(r["world_size"] == args.nproc, "the %s run has world size %s, launched %d" %
                    (want, r["world_size"], args.nproc))
        loss_err = compare_losses(c, "weft against " + args.baseline, w["losses"], g["losses"], args.rtol)
        params_rtol = args.rtol if args.params_rtol is None else args.params_rtol
        param_err = compare_params(c, w["final_params"], g["final_params"], params_rtol)
        print("losses: %d steps, largest relative difference %.3g (rtol %.3g); final params: %.3g (rtol %.3g)" %
              (len(w["losses"]), loss_err, args.rtol, param_err, params_rtol))
        if args.sharded:
            per, total = w["param_bytes_per_rank"], w.get("model_bytes")
            c.check(bool(per) and len(per) == args.nproc and bool(total),
                    "sharded: the report has param_bytes_per_rank %s, model_bytes %s" % (per, total))
            if per and total:
                share = total / args.nproc
                for rank, b in enumerate(per):
                    c.check(0.75 * share <= b <= 1.25 * share,
                            "sharded: rank %d holds %d parameter bytes, not about %d (1/%d of %d)" %
                            (rank, b, share, args.nproc, total))
                print("sharded: parameter bytes per rank %s of %d" % (per, total))
        if args.resume:
            n = args.resume_nproc or args.nproc
            load = ["--load", ckpt]
            if args.resume_universal:
                to_universal(args, ckpt)
                load.append("--load-universal")
            r = run_job(args, "weft", os.path.join(tmp, "resumed.json"), n, extra + load)
            c.check(r["dist_backend"] == "weft" and r["world_size"] == n,
                    "the resumed run is %s at world size %s, not weft at %d" % (r["dist_backend"], r["world_size"], n))
            k = r["first_step"]
            c.check(0 < k < len(w["losses"]), "the resumed run starts at step %s of %d" % (k, len(w["losses"])))
            err = compare_losses(c, "resumed at %d ranks against the first run" % n, r["losses"], w["losses"][k:],
                                 args.rtol)
            print("resumed at step %d on %d ranks%s: largest relative loss difference %.3g" %
                  (k, n, " from the universal checkpoint" if args.resume_universal else "", err))
            if args.resume_params_rtol is not None:
                perr = compare_params(c, r["final_params"], w["final_params"], args.resume_params_rtol,
                                      "final params resumed at %d ranks" % n)
                print("resumed at %d ranks: final params %.3g (rtol %.3g)" % (n, perr, args.resume_params_rtol))
        if w["step_time_s"] and g["step_time_s"]:
            print("weft/%s step time %.3f (median %.4g s against %.4g s)" %
                  (args.baseline, w["step_time_s"] / g["step_time_s"], w["step_time_s"], g["step_time_s"]))
    if c.failures:
        print("%d checks failed" % len(c.failures))
        return 1
    print("OK")
    return 0


if __name__ == "__main__":
    sys.exit(main())
