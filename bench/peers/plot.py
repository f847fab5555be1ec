"""bench/peers/run --plot: one PNG per collective, busbw against size, one line per peer.

  .venv/bin/python bench/peers/plot.py RESULTS.json OUTDIR     # RESULTS: run's --json form
"""
import json
import os
import statistics
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from PIL import Image  # noqa: E402  (matplotlib's own dependency)


def main():
    with open(sys.argv[1]) as f:
        doc = json.load(f)
    series = {}  # collective -> peer -> [(size, median busbw)]
    for entry in doc["rows"]:
        runs = entry["runs"]
        series.setdefault(runs[0]["collective"], {}).setdefault(entry["peer"], []).append(
            (runs[0]["size"], statistics.median(r["busbw"] for r in runs)))
    for collective, peers in series.items():
        fig, ax = plt.subplots(figsize=(6, 3.6), dpi=80)
        for peer, points in sorted(peers.items()):
            points.sort()
            ax.plot([p[0] for p in points], [p[1] for p in points], marker="o", markersize=3,
                    linewidth=2.2 if peer.startswith("weft") else 1.2, label=peer)
        ax.set_xscale("log", base=2)
        ax.set_xlabel("size (bytes)")
        ax.set_ylabel("busbw (GB/s)")
        ax.set_title(f"{collective}, {doc['nranks']} ranks, median of {doc['repeats']}")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
        fig.tight_layout()
        path = os.path.join(sys.argv[2], f"{collective}-np{doc['nranks']}.png")
        fig.savefig(path)
        plt.close(fig)
        # A 64-colour palette keeps each PNG near 15 KB, small enough to keep in bench/results.
        Image.open(path).convert("RGB").quantize(64).save(path, optimize=True)
        print(f"wrote {path}", file=sys.stderr)


if __name__ == "__main__":
    main()
