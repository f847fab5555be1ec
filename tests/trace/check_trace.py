#!/usr/bin/env python3
"""Runs a traced program (trace_run) and checks the timelines it wrote.

    check_trace.py --ranks N --merge tools/trace-merge [--events K] [--launched] -- CMD ...

CMD runs with WEFT_TRACE set to a fresh directory (and WEFT_TRACE_EVENTS=K). Then, for every rank's file:
it parses as JSON; its events carry the fields the trace-event format needs; the spans of each thread nest;
the collectives carry size, dtype, backend and engine; each reducer step launches its segments in bucket
order, every segment's copy-in, collective and copy-out run in that order, after a MarkReady of the bucket;
the shard group's gather, reshard and reduce-scatter appear with their collectives. With --launched (a
world made by a launcher) every rank but 0 has measured its clock offset to rank 0. Finally tools/trace-merge
joins the files (and one cut short) into one trace with every event of every rank.
Exit 0 when all holds, 77 when CMD skips, 1 with every failure listed.
"""
import argparse
import glob
import json
import os
import subprocess
import sys
import tempfile

TOL = 0.01  # us: timestamps and durations are written to 1 ns, so a child may end 2 ns after its parent


class Failures(list):
    def check(self, ok, what):
        if not ok:
            self.append(what)
        return ok


def nests(events, fail, where):
    """The complete (X) spans of one thread form a tree: none overlaps another partly."""
    spans = sorted((e for e in events if e["ph"] == "X"), key=lambda e: (e["ts"], -e["dur"]))
    stack = []
    for e in spans:
        end = e["ts"] + e["dur"]
        while stack and e["ts"] >= stack[-1][1] - TOL:
            stack.pop()
        if stack and not fail.check(end <= stack[-1][1] + TOL,
                                    f"{where}: {e['name']} at {e['ts']} ends at {end}, after its enclosing "
                                    f"{stack[-1][0]} ends at {stack[-1][1]}"):
            return
        stack.append((e["name"], end))


def check_file(path, rank, nranks, launched, fail):
    with open(path, encoding="utf-8") as f:
        events = json.load(f)
    where = os.path.basename(path)
    if not fail.check(isinstance(events, list) and events, f"{where}: not a non-empty JSON array"):
        return []
    meta = {e["name"]: e["args"] for e in events if e.get("ph") == "M" and e.get("tid") == 0}
    world = meta.get("weft_world", {})
    fail.check(world.get("rank") == rank and world.get("size") == nranks,
               f"{where}: weft_world says {world}, expected rank {rank} of {nranks}")
    fail.check("process_name" in meta, f"{where}: no process_name")
    clock = meta.get("weft_clock")
    if launched:
        if fail.check(clock is not None, f"{where}: no weft_clock although the world came from a launcher"):
            if rank == 0:
                fail.check(clock["offset_us"] == 0, f"{where}: rank 0's offset is {clock['offset_us']}, not 0")
            else:
                fail.check(clock["rounds"] > 0 and clock["rtt_us"] > 0 and "min-RTT" in clock["method"],
                           f"{where}: rank {rank} did not measure its offset: {clock}")
                # These ranks share one host's steady clock, so the true offset is 0 and the estimate must be
                # within its bound, half the round trip.
                fail.check(abs(clock["offset_us"]) <= clock["rtt_us"] / 2 + TOL,
                           f"{where}: offset {clock['offset_us']} us on one host exceeds half the round trip "
                           f"{clock['rtt_us']} us")
    timed = [e for e in events if e.get("ph") != "M"]
    for e in timed:
        for key in ("name", "cat", "ph", "ts", "pid", "tid"):
            if not fail.check(key in e, f"{where}: an event lacks '{key}': {e}"):
                return []
        fail.check(e["pid"] == rank, f"{where}: event {e['name']} has pid {e['pid']}, not the rank {rank}")
        if e["ph"] == "X":
            fail.check(e["dur"] >= 0, f"{where}: {e['name']} has a negative duration")
    by_tid = {}
    for e in timed:
        by_tid.setdefault(e["tid"], []).append(e)
    for tid, evs in by_tid.items():
        nests(evs, fail, f"{where} tid {tid}")
    begins = {e["id"]: e for e in timed if e["ph"] == "b"}
    ends = {e["id"]: e for e in timed if e["ph"] == "e"}
    fail.check(begins.keys() == ends.keys(), f"{where}: async begins and ends do not pair up")
    for i, b in begins.items():
        if i in ends:
            fail.check(ends[i]["ts"] >= b["ts"] - TOL, f"{where}: async {b['name']} {i} ends before it begins")
    fail.check(any(e["name"] == "queued" and e["cat"] == "host_stream" for e in timed),
               f"{where}: no host-stream queueing recorded")
    names = {e["name"] for e in timed if e["ph"] == "X" and e["cat"] == "collective"}
    for want in ("all_reduce", "all_gather", "broadcast", "split", "reduce_scatter"):
        fail.check(want in names, f"{where}: no {want} collective (have {sorted(names)})")
    for e in timed:
        if e["ph"] == "X" and e["cat"] == "collective" and e["name"] in ("all_reduce", "all_gather"):
            a = e["args"]
            if not fail.check(all(k in a for k in ("count", "bytes", "dtype", "backend", "engine")),
                              f"{where}: {e['name']} lacks size, dtype, backend or engine: {a}"):
                break
    # What trace_run called, as it called it: the stream's second all-reduce, the broadcast from rank 0, the
    # tagged send and receive, and the receive from any source.
    fail.check(any(e["name"] == "all_reduce" and e["ph"] == "X" and e["args"].get("count") == 4096
                   and e["args"].get("bytes") == 16384 and e["args"].get("dtype") == "float32"
                   and e["args"].get("op") == "max" for e in timed),
               f"{where}: no all_reduce of 4096 float32 with op max (the host stream's second call)")
    fail.check(any(e["name"] == "broadcast" and e["ph"] == "X" and e["args"].get("dtype") == "float64"
                   and e["args"].get("peer_or_root") == 0 for e in timed),
               f"{where}: no broadcast of float64 from root 0")
    for name in ("send", "recv"):
        fail.check(any(e["name"] == name and e["ph"] == "X" and e["args"].get("tag") == 5
                       and e["args"].get("dtype") == "int64" and "peer_or_root" in e["args"] for e in timed),
                   f"{where}: no {name} of int64 on tag 5 naming its peer")
    fail.check(any(e["name"] == "recv_any_source" and e["ph"] == "X" and e["args"].get("tag") == 6
                   and "peer_or_root" not in e["args"] for e in timed),
               f"{where}: no recv_any_source on tag 6 (without a peer)")
    check_reducer(timed, where, fail)
    check_shard(timed, where, fail)
    return events


def check_reducer(timed, where, fail):
    finals = sorted(e["ts"] + e["dur"] for e in timed if e["name"] == "finalize")
    if not fail.check(len(finals) == 2, f"{where}: {len(finals)} reducer finalize spans, expected 2 steps"):
        return
    start = 0.0
    for step, end in enumerate(finals):
        def within(e):
            return start <= e["ts"] <= end + TOL
        launches = [e for e in timed if e["name"] == "launch_segment" and within(e)]
        order = [(e["args"]["bucket"], e["args"]["segment"]) for e in launches]
        fail.check(len(order) > 2 and order == sorted(order) and len(set(order)) == len(order),
                   f"{where}: step {step} launched segments out of bucket order: {order}")
        fail.check(len({b for b, _ in order}) >= 3, f"{where}: step {step} has fewer than 3 buckets: {order}")
        marks = [e for e in timed if e["name"] == "mark_ready" and within(e)]
        for b, k in order:
            launch = next(e for e in launches if (e["args"]["bucket"], e["args"]["segment"]) == (b, k))
            fail.check(any(m["args"]["bucket"] == b and m["ts"] <= launch["ts"] for m in marks),
                       f"{where}: step {step} launched bucket {b} segment {k} before any MarkReady of bucket {b}")
            label = f"bucket {b} segment {k}"
            calls = [e for e in timed if e["ph"] == "X" and e["cat"] == "collective"
                     and e["args"].get("label") == label and within(e)]
            if not fail.check(len(calls) == 1, f"{where}: step {step}: {len(calls)} collectives for {label}"):
                continue
            call = calls[0]
            outs = [e for e in timed if e["name"] == "copy_out" and within(e)
                    and (e["args"]["bucket"], e["args"]["segment"]) == (b, k)]
            ins = [e for e in timed if e["name"] == "copy_in" and within(e)
                   and (e["args"]["bucket"], e["args"]["segment"]) == (b, k)]
            if fail.check(len(outs) == 1, f"{where}: step {step}: {len(outs)} copy-outs for {label}"):
                fail.check(outs[0]["ts"] >= call["ts"] + call["dur"] - TOL,
                           f"{where}: step {step}: {label}'s copy-out starts before its collective ends")
            for c in ins:
                fail.check(c["ts"] + c["dur"] <= call["ts"] + TOL,
                           f"{where}: step {step}: {label}'s copy-in ends after its collective starts")
        outs = [(e["args"]["bucket"], e["args"]["segment"]) for e in
                sorted((e for e in timed if e["name"] == "copy_out" and within(e)), key=lambda e: e["ts"])]
        fail.check(outs == order, f"{where}: step {step}: copy-outs ran in the order {outs}, launched {order}")
        start = end


def check_shard(timed, where, fail):
    for name in ("gather", "reshard", "reduce_scatter"):
        fail.check(any(e["name"] == name and e["cat"] == "shard_group" for e in timed),
                   f"{where}: no shard group {name} span")
    labels = [e["args"].get("label", "") for e in timed if e["ph"] == "X" and e["cat"] == "collective"]
    fail.check(any(l.startswith("shard group") and l.endswith("gather") for l in labels),
               f"{where}: no all_gather labelled with its shard group")
    fail.check(any(l.startswith("shard group") and l.endswith("reduce_scatter") for l in labels),
               f"{where}: no reduce_scatter labelled with its shard group")


def check_merge(merge, files, per_file, out_dir, fail):
    merged_path = os.path.join(out_dir, "merged.json")
    r = subprocess.run([sys.executable, merge, os.path.dirname(files[0]), "-o", merged_path],
                       capture_output=True, text=True)
    if not fail.check(r.returncode == 0, f"trace-merge failed: {r.stderr}"):
        return
    with open(merged_path, encoding="utf-8") as f:
        merged = json.load(f)
    events = merged["traceEvents"]
    fail.check(len(events) == sum(len(e) for e in per_file),
               f"merged trace has {len(events)} events, the files {sum(len(e) for e in per_file)}")
    fail.check({e["pid"] for e in events} == set(range(len(files))), "merged trace's pids are not the ranks")
    timed = [e["ts"] for e in events if "ts" in e]
    fail.check(min(timed) == 0 and timed == sorted(timed), "merged trace does not start at 0 in time order")
    # A rank that died mid-run leaves a file without its closing bracket and with a partial last event.
    with open(files[-1], encoding="utf-8") as f:
        text = f.read()
    cut_path = os.path.join(out_dir, "cut", os.path.basename(files[-1]))
    os.makedirs(os.path.dirname(cut_path))
    with open(cut_path, "w", encoding="utf-8") as f:
        f.write(text[:len(text) * 2 // 3])
    cut_out = os.path.join(out_dir, "cut.json")
    r = subprocess.run([sys.executable, merge, cut_path, "-o", cut_out], capture_output=True, text=True)
    if fail.check(r.returncode == 0, f"trace-merge refused a file cut short: {r.stderr}"):
        with open(cut_out, encoding="utf-8") as f:
            n = len(json.load(f)["traceEvents"])
        fail.check(0 < n < len(per_file[-1]), f"a file cut short merged into {n} events")
    r = subprocess.run([sys.executable, merge, os.path.join(out_dir, "cut", "none"), "-o", cut_out],
                       capture_output=True, text=True)
    fail.check(r.returncode == 1 and "no such file" in r.stderr, "trace-merge accepted a missing input")


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--ranks", type=int, required=True)
    p.add_argument("--merge", required=True)
    p.add_argument("--events", type=int)
    p.add_argument("--launched", action="store_true")
    p.add_argument("cmd", nargs=argparse.REMAINDER)
    a = p.parse_args()
    cmd = a.cmd[1:] if a.cmd[:1] == ["--"] else a.cmd
    with tempfile.TemporaryDirectory(prefix="weft-trace-test-") as tmp:
        trace_dir = os.path.join(tmp, "trace")
        env = dict(os.environ, WEFT_TRACE=trace_dir)
        if a.events:
            env["WEFT_TRACE_EVENTS"] = str(a.events)
        r = subprocess.run(cmd, env=env, timeout=240)
        if r.returncode == 77:
            return 77
        fail = Failures()
        fail.check(r.returncode == 0, f"{' '.join(cmd)} exited {r.returncode}")
        files = sorted(glob.glob(os.path.join(trace_dir, "weft-trace.rank*.json")),
                       key=lambda f: int(os.path.basename(f).split(".")[1][4:]))
        if fail.check(len(files) == a.ranks, f"{len(files)} trace files, expected {a.ranks}: {files}"):
            per_file = [check_file(f, r, a.ranks, a.launched, fail) for r, f in enumerate(files)]
            if a.events:
                fail.check(all(len(e) > a.events + 8 for e in per_file),
                           f"with WEFT_TRACE_EVENTS={a.events} each file should hold more than one buffer")
            if not fail:
                check_merge(a.merge, files, per_file, tmp, fail)
        for f in fail:
            print("FAIL:", f)
        if not fail:
            print(f"ok: {a.ranks} rank files checked and merged")
        return 1 if fail else 0


if __name__ == "__main__":
    sys.exit(main())
