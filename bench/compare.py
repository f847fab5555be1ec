#!/usr/bin/python3
"""Medians of repeated weft-bench runs against the raw-MPI baseline.

Runs `mpirun -np N weft-bench <collective> ... --baseline mpi --json` R times
and prints, per size, the median time and busbw of weft (out of place) and of
raw MPI measured in the same runs, and the median of the per-run ratios
weft/mpi (busbw; > 1 means weft is faster), as a Markdown table. This is the
command behind every figure in docs/performance.md.

  bench/compare.py --np 4 --runs 5 -- all_reduce -b 4K -e 256M -f 4
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile


def human(size):
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if size >= scale and size % scale == 0:
            return f"{size // scale} {unit}"
    return f"{size} B"


def run_once(args, path):
    env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    cmd = (["mpirun", "-np", str(args.np), "--oversubscribe", args.bench] + args.bench_args +
           ["--baseline", "mpi", "--json", path])
    done = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if done.returncode != 0:
        sys.stderr.write(done.stdout)
        sys.exit(f"compare.py: {' '.join(cmd)} exited with {done.returncode}")
    with open(path) as f:
        return json.load(f)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--np", type=int, default=4, help="MPI ranks (default 4)")
    p.add_argument("--runs", type=int, default=5, help="repetitions; medians over them (default 5)")
    p.add_argument("--bench", default="build/bench/weft-bench")
    p.add_argument("bench_args", nargs=argparse.REMAINDER, help="-- then weft-bench's collective and flags")
    args = p.parse_args()
    if args.bench_args and args.bench_args[0] == "--":
        args.bench_args = args.bench_args[1:]
    if not args.bench_args:
        p.error("give weft-bench's collective and flags after --")

    runs = []
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(args.runs):
            runs.append(run_once(args, os.path.join(tmp, f"run{i}.json")))
            print(f"run {i + 1}/{args.runs} done", file=sys.stderr)

    first = runs[0]
    keys = [(r["size"], r["type"], r["redop"]) for r in first["rows"] if "mpi" in r]
    print(f"{first['collective']}, {first['nranks']} ranks, backend {first['backend']}, "
          f"median of {args.runs} runs (iters {first['iters']} each)\n")
    print("| size | type | weft time (us) | weft busbw (GB/s) | MPI time (us) | MPI busbw (GB/s) "
          "| weft/MPI (median) | weft/MPI (min..max) |")
    print("| ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: |")
    for key in keys:
        rows = [next(r for r in run["rows"] if (r["size"], r["type"], r["redop"]) == key) for run in runs]
        med = lambda f: statistics.median(f(r) for r in rows)
        ratios = [r["ratio"] for r in rows]
        print(f"| {human(key[0])} | {key[1]} | {med(lambda r: r['out_of_place']['time_us']):.1f} "
              f"| {med(lambda r: r['out_of_place']['busbw']):.2f} | {med(lambda r: r['mpi']['time_us']):.1f} "
              f"| {med(lambda r: r['mpi']['busbw']):.2f} | {statistics.median(ratios):.2f} "
              f"| {min(ratios):.2f}..{max(ratios):.2f} |")
    wrong = sum(run["wrong"] for run in runs)
    print(f"\nwrong values over all runs: {wrong}")
    return 1 if wrong else 0


if __name__ == "__main__":
    sys.exit(main())
