#!/usr/bin/env python3
"""Median bytes/s of each kernel and its ratio to memcpy of the same tensors,
from weft-kernels-bench JSON output (--benchmark_out=F --benchmark_out_format=json,
with --benchmark_repetitions so medians exist), as a Markdown table.

A file may hold one list or several; give the same list in several files
(repeated runs) and each run's ratio is printed, in file order, with the GB/s
of the first run.

Usage: bench/kernels/ratios.py run1.json [run2.json ...]
"""
import json
import sys

TARGETS = {"flatten_f32_f32": 0.9, "flatten_f32_bf16_scaled": 0.8, "unflatten_acc_bf16_f32": 0.7}
TARGETS.update({k + "_planned": v for k, v in list(TARGETS.items())})
ORDER = ["memcpy", "flatten_f32_f32", "flatten_f32_f32_planned", "flatten_f32_bf16_scaled",
         "flatten_f32_bf16_scaled_planned", "unflatten_acc_bf16_f32", "unflatten_acc_bf16_f32_planned",
         "unscale_f32", "l2norm_f32"]


def main():
    runs = {}  # tensors -> list of {kernel: bytes/s}, one per file holding that list
    for path in sys.argv[1:]:
        with open(path) as f:
            found = {}
            for b in json.load(f)["benchmarks"]:
                if b.get("aggregate_name") != "median":
                    continue
                kernel, tensors = b["run_name"].split("/")[:2]
                found.setdefault(tensors, {})[kernel] = b["bytes_per_second"]
        for tensors, kernels in found.items():
            runs.setdefault(tensors, []).append(kernels)
    print("| tensors | kernel | median GB/s | x memcpy | target |")
    print("|---|---|---:|---:|---:|")
    for tensors, per_run in runs.items():
        names = sorted({k for r in per_run for k in r}, key=lambda k: (ORDER.index(k) if k in ORDER else 99, k))
        for kernel in names:
            ratios = []
            for r in per_run:
                base = r.get("memcpy")
                ratios.append(f"{r[kernel] / base:.2f}" if base and kernel in r else "-")
            first = next(r[kernel] for r in per_run if kernel in r)
            target = f">= {TARGETS[kernel]}" if kernel in TARGETS else ""
            print(f"| {tensors} | {kernel} | {first / 1e9:.1f} | {' / '.join(ratios)} | {target} |")


if __name__ == "__main__":
    main()
