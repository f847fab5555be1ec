#!/usr/bin/env python3
"""weft-check's plots from its JSON report:

  plot.py report.json DIR

writes DIR/busbw.png (the world's all-reduce bus bandwidth by size) and
DIR/ranks.png (each rank's bandwidth in its fastest pair, and in the world's
largest all-reduce), the ranks the report names as slow or bad marked red.
"""
import json
import os
import sys

import matplotlib

matplotlib.use("Agg")  # no display on a cluster node
import matplotlib.pyplot as plt  # noqa: E402


def size_label(b):
    for unit, shift in (("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if b >= 1 << shift and b % (1 << shift) == 0:
            return f"{b >> shift} {unit}"
    return f"{b} B"


def busbw(report, path):
    rows = report["speed"]
    fig, ax = plt.subplots(figsize=(7, 4))
    if rows:
        x = [r["bytes"] for r in rows]
        ax.plot(x, [r["busbw_gbs"] for r in rows], marker="o", label="busbw (slowest rank)")
        ax.set_xscale("log", base=2)
        ax.set_xticks(x, [size_label(b) for b in x], rotation=45)
        ax.legend()
    else:
        ax.text(0.5, 0.5, "no speed measurements", ha="center", transform=ax.transAxes)
    ax.set_xlabel("message size")
    ax.set_ylabel("GB/s")
    ax.set_title(f"all_reduce bus bandwidth, {report['nranks']} ranks ({report['backend']})")
    ax.grid(True, alpha=0.3)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def ranks(report, path):
    n = report["nranks"]
    named = set(report["slow_ranks"]) | set(report["bad_ranks"])
    colors = ["tab:red" if r in named else "tab:blue" for r in range(n)]
    fig, axes = plt.subplots(1, 2, figsize=(10, 4))
    pair_us = report["rank_pair_time_us"]
    ax = axes[0]
    if pair_us and report["pairs"]:
        bw = [report["pair_bytes"] / t / 1e3 if t > 0 else 0 for t in pair_us]
        median = report["pair_median_us"]
        ax.bar(range(n), bw, color=colors)
        if median > 0:
            ax.axhline(report["pair_bytes"] / median / 1e3, color="gray", linestyle="--", label="median rank")
            ax.legend()
        ax.set_ylabel("GB/s (algbw, higher is better)")
    else:
        ax.text(0.5, 0.5, "pairs need 3 or more ranks", ha="center", transform=ax.transAxes)
    ax.set_xlabel("rank")
    ax.set_title(f"each rank's fastest pair, all_reduce of {size_label(report['pair_bytes'])}")
    ax = axes[1]
    if report["speed"]:
        last = report["speed"][-1]
        bw = [last["bytes"] / t / 1e3 if t > 0 else 0 for t in last["rank_time_us"]]
        ax.bar(range(n), bw, color=colors)
        ax.set_ylabel("GB/s (algbw, higher is better)")
        ax.set_title(f"per-rank all_reduce bandwidth at {size_label(last['bytes'])}")
    else:
        ax.text(0.5, 0.5, "no speed measurements", ha="center", transform=ax.transAxes)
    ax.set_xlabel("rank")
    for a in axes:
        a.set_xticks(range(n))
        a.grid(True, axis="y", alpha=0.3)
    fig.suptitle("red: named slow or bad by weft-check")
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    with open(sys.argv[1]) as f:
        report = json.load(f)
    os.makedirs(sys.argv[2], exist_ok=True)
    busbw(report, os.path.join(sys.argv[2], "busbw.png"))
    ranks(report, os.path.join(sys.argv[2], "ranks.png"))


if __name__ == "__main__":
    main()
