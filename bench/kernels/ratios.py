#!/usr/bin/env python3
"""Median bytes/s of each kernel and its ratio to memcpy of the same tensors,
from weft-kernels-bench JSON output (--benchmark_out=F --benchmark_out_format=json,
with --benchmark_repetitions so medians exist), as a Markdown table.

Usage: bench/kernels/ratios.py run1.json [run2.json ...]
"""
import json
import sys

TARGETS = {"flatten_f32_f32": 0.9, "flatten_f32_bf16_scaled": 0.8, "unflatten_acc_bf16_f32": 0.7}
TARGETS.update({k + "_planned": v for k, v in list(TARGETS.items())})


def main():
    rows = {}
    for path in sys.argv[1:]:
        with open(path) as f:
            for b in json.load(f)["benchmarks"]:
                if b.get("aggregate_name") != "median":
                    continue
                kernel, tensors = b["run_name"].split("/")[:2]
                rows.setdefault(tensors, {})[kernel] = (b["bytes_per_second"], b["real_time"], b["cpu_time"])
    print("| tensors | kernel | median GB/s | x memcpy | target |")
    print("|---|---|---:|---:|---:|")
    for tensors, kernels in rows.items():
        base = kernels.get("memcpy", (None,))[0]
        for kernel, (bps, _, _) in kernels.items():
            ratio = f"{bps / base:.2f}" if base else "-"
            target = f">= {TARGETS[kernel]}" if kernel in TARGETS else ""
            print(f"| {tensors} | {kernel} | {bps / 1e9:.1f} | {ratio} | {target} |")


if __name__ == "__main__":
    main()
