"""Reads what each peer's launch wrote, and prints bench/peers/run's tables.

Every peer's time at a size is per call and the mean over ranks (as
weft-bench's -a 1); bus bandwidth uses weft-bench's (nccl-tests') factors.
A table cell is the median over the repeats; a ratio is weft's busbw over
the peer's within one repeat (the same job, minutes apart), then the median
and range of those per-repeat ratios.
"""
import glob
import json
import statistics

WEFT = "weft-mpi"   # the backend weft picks under mpirun; weft-ucx is shown beside it


def human(size):
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if size >= scale and size % scale == 0:
            return f"{size // scale} {unit}"
    return f"{size} B"


def busbw(collective, size, seconds, n):
    factor = {"all_reduce": 2 * (n - 1) / n, "broadcast": 1.0}.get(collective, (n - 1) / n)
    return size / seconds / 1e9 * factor


def received(collective, size, n):
    """Elements one rank receives from one call of `size` bytes (what a check compares)."""
    elements = size // 4
    if collective in ("all_reduce", "broadcast"):
        return elements
    return elements // n if collective == "reduce_scatter" else elements // n * n


def load_weft(path, nranks):
    """weft-bench's --json: out-of-place time, except broadcast, where every peer runs in place."""
    with open(path) as f:
        doc = json.load(f)
    rows = []
    for r in doc["rows"]:
        mode = "in_place" if doc["collective"] == "broadcast" else "out_of_place"
        modes = [m for m in ("out_of_place", "in_place") if r.get(m)]
        rows.append({"collective": doc["collective"], "size": r["size"], "seconds": r[mode]["time_us"] / 1e6,
                     "wrong": sum(r[m].get("wrong", 0) for m in modes),
                     "checked": received(doc["collective"], r["size"], nranks) * nranks * len(modes)})
    return rows


def load_ranks(prefix, nranks):
    """bench/peers' own programs: one file per rank; mean time, summed checks."""
    files = sorted(glob.glob(f"{prefix}.rank*.json"))
    if len(files) != nranks:
        raise RuntimeError(f"{prefix}: {len(files)} rank files of {nranks}")
    per_rank = []
    for path in files:
        with open(path) as f:
            per_rank.append(json.load(f)["rows"])
    rows = []
    for cells in zip(*per_rank):
        rows.append({"collective": cells[0]["collective"], "size": cells[0]["size"],
                     "seconds": statistics.mean(c["seconds"] for c in cells),
                     "wrong": sum(c["wrong"] for c in cells), "checked": sum(c["checked"] for c in cells)})
    return rows


class Results:
    """rows[(peer, collective, size)] = one row per repeat."""

    def __init__(self, nranks, repeats):
        self.nranks, self.repeats, self.rows, self.loads = nranks, repeats, {}, []

    def add(self, peer, rows):
        for r in rows:
            r["busbw"] = busbw(r["collective"], r["size"], r["seconds"], self.nranks)
            self.rows.setdefault((peer, r["collective"], r["size"]), []).append(r)

    def cell(self, peer, collective, size, key):
        rows = self.rows.get((peer, collective, size))
        return statistics.median(r[key] for r in rows) if rows else None

    def ratios(self, peer, collective, size):
        mine, theirs = self.rows.get((WEFT, collective, size)), self.rows.get((peer, collective, size))
        if not mine or not theirs:
            return []
        return [a["busbw"] / b["busbw"] for a, b in zip(mine, theirs)]

    def validation(self, peer):
        rows = [r for (p, _, _), rs in self.rows.items() if p == peer for r in rs]
        return sum(r["checked"] for r in rows), sum(r["wrong"] for r in rows)

    def as_json(self):
        return {"nranks": self.nranks, "repeats": self.repeats, "loads": self.loads,
                "rows": [dict(peer=p, runs=rs) for (p, _, _), rs in sorted(self.rows.items())]}


def fmt(v, digits=2):
    return "n/a" if v is None else f"{v:.{digits}f}"


def print_tables(res, peers, collectives, sizes, out):
    others = [p for p in peers if p != WEFT]
    for c in collectives:
        ran = [p for p in peers if any((p, c, s) in res.rows for s in sizes)]
        if WEFT not in ran:
            continue
        out(f"\n### {c}, {res.nranks} ranks: busbw (GB/s), median of {res.repeats}\n")
        out("| size | " + " | ".join(ran) + " |")
        out("| ---: |" + " ---: |" * len(ran))
        for s in sizes:
            out(f"| {human(s)} | " + " | ".join(fmt(res.cell(p, c, s, "busbw")) for p in ran) + " |")
        out(f"\n{c}, {res.nranks} ranks: time per call (us), median of {res.repeats}\n")
        out("| size | " + " | ".join(ran) + " |")
        out("| ---: |" + " ---: |" * len(ran))
        for s in sizes:
            cells = [res.cell(p, c, s, "seconds") for p in ran]
            out(f"| {human(s)} | " + " | ".join(fmt(None if v is None else v * 1e6, 1) for v in cells) + " |")
        vs = [p for p in others if p in ran]
        out(f"\n{c}, {res.nranks} ranks: {WEFT} busbw / peer busbw, median (min-max) of per-repeat ratios\n")
        out("| size | " + " | ".join(f"weft/{p}" for p in vs) + " |")
        out("| ---: |" + " ---: |" * len(vs))
        for s in sizes:
            cells = []
            for p in vs:
                r = res.ratios(p, c, s)
                cells.append(f"{statistics.median(r):.2f} ({min(r):.2f}-{max(r):.2f})" if r else "n/a")
            out(f"| {human(s)} | " + " | ".join(cells) + " |")
    out(f"\nValidated, {res.nranks} ranks: every element every rank received, after every size of every repeat "
        "(nccl-tests' exact small-integer inputs, outputs poisoned first)\n")
    out("| peer | values checked | wrong |")
    out("| --- | ---: | ---: |")
    for p in peers:
        checked, wrong = res.validation(p)
        out(f"| {p} | {checked} | {wrong} |")
