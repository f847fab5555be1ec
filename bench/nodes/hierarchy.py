#!/usr/bin/python3
"""Flat against hierarchical collectives across namespaced nodes, medians.

Starts the nodes with tests/nodes/cluster.py (network namespaces joined by a
bridge, each node's link capped by tbf at --rate, or uncapped), runs
weft-bench once with WEFT_HIER=off and once with each --hier value (the
default table when none is given), --runs times alternately, and prints per
size the median time of each, the median of the per-run ratios
flat/hierarchical (> 1: the hierarchy is faster) and, with a rate, the bound
an all-reduce of S bytes across two nodes cannot beat: S bytes each way over
the node's link (S / rate), and the hierarchical time as a multiple of it.
Several --hier values compare tables in the same runs (one table a value).
Needs root (network namespaces).

  bench/nodes/hierarchy.py --nodes 2 --per-node 2 --rate 1gbit --runs 5 -- all_reduce -b 16M -e 64M -f 2
  bench/nodes/hierarchy.py --rate 1gbit --hier auto --hier auto,piece=off -- all_reduce -b 16M -e 64M -f 4
"""
import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
CLUSTER = os.path.join(HERE, "..", "..", "tests", "nodes", "cluster.py")


def human(size):
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if size >= scale and size % scale == 0:
            return f"{size // scale} {unit}"
    return f"{size} B"


def rate_bytes_per_s(rate):
    m = re.fullmatch(r"(\d+(?:\.\d+)?)([kmg]?)bit", rate.lower())
    if not m:
        sys.exit(f"hierarchy.py: --rate {rate}: expected a tc rate such as 1gbit or 500mbit")
    scale = {"": 1, "k": 1e3, "m": 1e6, "g": 1e9}[m.group(2)]
    return float(m.group(1)) * scale / 8


def run_once(args, mode, path):
    cmd = [sys.executable, CLUSTER, "--nodes", str(args.nodes), "--per-node", str(args.per_node),
           "--timeout", "600"] + (["--rate", args.rate] if args.rate else []) + \
          ["--", args.bench] + args.bench_args + ["-c", "0", "--json", path]
    # Namespaces of its own, apart from the tests' (which tear theirs down).
    env = dict(os.environ, WEFT_HIER=mode)
    env.setdefault("WEFT_TEST_CLUSTER", "weftbench")
    done = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if done.returncode != 0:
        sys.stderr.write(done.stdout)
        sys.exit(f"hierarchy.py: WEFT_HIER={mode} {' '.join(cmd)} exited with {done.returncode}")
    with open(path) as f:
        return json.load(f)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--nodes", type=int, default=2)
    p.add_argument("--per-node", type=int, default=2)
    p.add_argument("--rate", default=None, help="tbf rate of every node's link, e.g. 1gbit (default: uncapped)")
    p.add_argument("--runs", type=int, default=5)
    p.add_argument("--hier", action="append", default=None,
                   help="WEFT_HIER of the hierarchical runs (default auto; on: every size); may be repeated")
    p.add_argument("--bench", default="build/bench/weft-bench")
    p.add_argument("bench_args", nargs=argparse.REMAINDER, help="-- then weft-bench's collective and flags")
    args = p.parse_args()
    if args.bench_args[:1] == ["--"]:
        args.bench_args = args.bench_args[1:]
    if not args.bench_args:
        p.error("give weft-bench's collective and flags after --")

    modes = args.hier or ["auto"]
    if "off" in modes or len(set(modes)) != len(modes):
        p.error("--hier values must differ from each other and from off (the flat baseline)")
    runs = {m: [] for m in ["off"] + modes}
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(args.runs):
            for k, mode in enumerate(runs):
                runs[mode].append(run_once(args, mode, os.path.join(tmp, f"{k}.{i}.json")))
            print(f"run {i + 1}/{args.runs} done", file=sys.stderr)

    first = runs["off"][0]
    rate = rate_bytes_per_s(args.rate) if args.rate else None
    print(f"{first['collective']}, {args.nodes} nodes x {args.per_node} ranks, link "
          f"{args.rate or 'uncapped'}, median of {args.runs} runs of each mode, alternated "
          f"(iters {first['iters']})\n")
    for mode in modes:
        print(f"WEFT_HIER=off against WEFT_HIER={mode}:\n")
        head = "| size | flat (us) | hierarchical (us) | flat/hierarchical (median) | (min..max) |"
        if rate:
            head += " S/rate (us) | hierarchical / (S/rate) |"
        print(head)
        print("| ---: | ---: | ---: | ---: | ---: |" + (" ---: | ---: |" if rate else ""))
        for k, row in enumerate(first["rows"]):
            t = {m: [r["rows"][k]["out_of_place"]["time_us"] for r in runs[m]] for m in ("off", mode)}
            ratios = [f / h for f, h in zip(t["off"], t[mode])]
            line = (f"| {human(row['size'])} | {statistics.median(t['off']):.0f} | {statistics.median(t[mode]):.0f} "
                    f"| {statistics.median(ratios):.2f} | {min(ratios):.2f}..{max(ratios):.2f} |")
            if rate:
                bound = row["size"] / rate * 1e6
                line += f" {bound:.0f} | {statistics.median(t[mode]) / bound:.2f} |"
            print(line)
        print()
    return 0


if __name__ == "__main__":
    sys.exit(main())
