#!/usr/bin/env python3
"""The median step time of a training-stack example over weft against gloo, runs alternated.

    bench/stacks/step_time.py --rounds 3 --steps 40 -- .venv/bin/python examples/lightning/two_tower.py --devices 2

Each round runs the command (an example of examples/<stack>/, launched as its stack launches) once with
`--backend weft` and once with `--backend gloo`, in alternating order, each with `--steps` and `--out`; each
run's report gives its median step time (the first step left out). Prints every run's figure, then the median
over rounds of each round's weft/gloo ratio: a ratio measured within one round shares that round's machine load.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile


def main():
    ap = argparse.ArgumentParser(description="weft/gloo step time of one training-stack example")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("cmd", nargs=argparse.REMAINDER, help="-- then the example's launch command")
    args = ap.parse_args()
    cmd = args.cmd[1:] if args.cmd[:1] == ["--"] else args.cmd
    if not cmd or args.rounds < 1 or args.steps < 2:
        ap.error("give --rounds >= 1, --steps >= 2 and the launch command after --")
    with tempfile.TemporaryDirectory(prefix="weft-step-time-") as work:
        ratios = rounds(args, cmd, work)
    print("median weft/gloo over %d rounds: %.2f (range %.2f-%.2f)" %
          (len(ratios), statistics.median(ratios), min(ratios), max(ratios)))


def rounds(args, cmd, work):
    ratios = []
    for r in range(args.rounds):
        times = {}
        for backend in (("weft", "gloo") if r % 2 == 0 else ("gloo", "weft")):
            out = os.path.join(work, "%s-%d.json" % (backend, r))
            done = subprocess.run(cmd + ["--backend", backend, "--steps", str(args.steps), "--out", out],
                                  stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
            if done.returncode != 0:
                print("the %s run exited %d:\n%s" % (backend, done.returncode, done.stderr[-3000:]))
                sys.exit(1)
            with open(out) as f:
                times[backend] = json.load(f)["step_time_s"]
        ratios.append(times["weft"] / times["gloo"])
        print("round %d: weft %.4g s, gloo %.4g s, weft/gloo %.2f" % (r, times["weft"], times["gloo"], ratios[-1]),
              flush=True)
    return ratios


if __name__ == "__main__":
    main()
