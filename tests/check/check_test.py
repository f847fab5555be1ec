#!/usr/bin/env python3
"""weft-check's tests: each injected fault is named and nothing else is.

  check_test.py WEFT_CHECK MODE [--mpiexec PATH] [--launch LAUNCH_PY] [--cluster CLUSTER_PY]
                [--schema FILE]

MODE:
  faults    4 in-process ranks: corrupt and flip at every rank, delay and stop
            at two; the report names exactly the injected rank
  nofault   20 runs of 4 in-process ranks: every one passes and names nothing
  bisect    corrupt at every position of 4 and of 8 ranks (8 oversubscribed on
            this machine), flip and delay at every position of 4: bisection
            isolates the rank in log2(n) levels
  mpi       4 ranks under mpiexec (the MPI backend, and UCX with --backend ucx):
            a fault of each kind, and none; --plan matrix without a fault,
            and flip in reduce, gather, scatter, all_to_all and send_recv
  launched  4 ranks with torchrun's variables (UCX, no MPI): each fault but stop
  matrix    4 in-process ranks, --plan matrix (every collective x dtype x op):
            passes without a fault; flip at every rank in each of reduce,
            gather, scatter, all_to_all and send_recv, and corrupt at every
            rank in reduce, name that rank and nothing else
  cuda      --memory cuda on one rank (NCCL): a build without CUDA refuses it
            naming the option and why, then skips; a CUDA build skips where
            the runtime finds no driver or device, and passes on a GPU
  nodes     2 namespaced nodes x 2 ranks (tests/nodes/cluster.py: no shared
            /dev/shm, other host names): a pass, a corrupt rank, and stop at a
            rank of each node, whose hang report names it as never joined
            with every rank's last completed call, read over rank 0's TCP
            heartbeat
  schema    reports of a pass, a wrong value, a slow rank and a hang validate
            against the schema (needs jsonschema)
  plots     --plot writes non-empty PNGs (needs matplotlib)
  errors    a bad WEFT_FAULT or flag is an error naming the value, exit 2; a
            build without CUDA refuses --memory cuda saying why

Exits 77 (skip) with the reason when something a mode needs is missing.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

SKIP = 77
failures = []


def run(cmd, env_extra=None, timeout=120):
    env = dict(os.environ)
    env.pop("WEFT_FAULT", None)
    env.update(env_extra or {})
    return subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout)


def check(args, fault, ranks=4, extra=(), launcher=(), expect=None, what=None, inert=False):
    """Runs weft-check with WEFT_FAULT=fault and returns its report (inert: a fault the run cannot see)."""
    with tempfile.TemporaryDirectory() as d:
        out = os.path.join(d, "report.json")
        cmd = list(launcher) + [args.weft_check, "--json", out, "--timeout-ms", "1500"] + list(extra)
        if not launcher:
            cmd += ["--ranks", str(ranks)]
        p = run(cmd, {"WEFT_FAULT": fault} if fault else {})
        label = what or f"{fault or 'no fault'} on {ranks} ranks"
        if not os.path.exists(out):
            failures.append(f"{label}: no report (exit {p.returncode})\n{p.stdout}\n{p.stderr}")
            return None
        with open(out) as f:
            report = json.load(f)
    want_code = 0 if report["result"] == "pass" else 1
    if p.returncode != want_code and not launcher:
        failures.append(f"{label}: exit {p.returncode}, but the report says {report['result']}")
    if expect is not None:
        got = {k: report[k] for k in expect}
        if got != expect:
            failures.append(f"{label}: expected {expect}, got {got}\n" + "\n".join(report["summary"]))
    if fault and not inert and report["result"] == "pass":
        failures.append(f"{label}: passed with a fault injected")
    if fault and "fault injection is ON" not in p.stderr:
        failures.append(f"{label}: no warning on stderr")
    return report


def named(bad=(), slow=(), links=()):
    return {"bad_ranks": list(bad), "slow_ranks": list(slow), "bad_links": [list(l) for l in links]}


def mode_faults(args):
    for r in range(4):
        check(args, f"corrupt:{r}", expect=named(bad=[r]))
        check(args, f"flip:{r}", expect=named(bad=[r]))
    for r in (1, 3):
        check(args, f"delay:{r}:20", expect=named(slow=[r]))
    for r, n in ((0, 12), (2, 40)):
        rep = check(args, f"stop:{r}:{n}", expect=named(bad=[r]))
        if rep is not None and (rep["hang"] is None or rep["hang"]["never_joined"] != [r]):
            failures.append(f"stop:{r}:{n}: hang section {rep['hang']}")


def mode_nofault(args):
    for i in range(20):
        check(args, None, expect={"result": "pass", **named()}, what=f"run {i} without a fault")


def bisected(args, fault, n, r, trigger):
    rep = check(args, fault, ranks=n)
    if rep is None:
        return
    b = rep["bisection"]
    levels = max(s["level"] for s in b["steps"]) if b["steps"] else 0
    want_levels = (n - 1).bit_length()
    if b["trigger"] != trigger or b["isolated"] != [r] or levels != want_levels:
        failures.append(f"{fault} on {n} ranks: bisection {trigger} should isolate [{r}] in {want_levels} levels, "
                        f"got {b['trigger']} {b['isolated']} in {levels}\n" + "\n".join(rep["summary"]))
    for s in b["steps"]:
        if (s["result"] == "bad") != (r in s["ranks"]):
            failures.append(f"{fault} on {n} ranks: step {s} is {s['result']}, but rank {r} is "
                            f"{'in' if r in s['ranks'] else 'not in'} it")


def mode_bisect(args):
    for n in (4, 8):
        for r in range(n):
            bisected(args, f"corrupt:{r}", n, r, "wrong")
    for r in range(4):
        bisected(args, f"flip:{r}", 4, r, "wrong")
        bisected(args, f"delay:{r}:20", 4, r, "slow")


def mode_matrix(args):
    rep = check(args, None, extra=["--plan", "matrix"], expect={"result": "pass", **named()},
                what="no fault, --plan matrix")
    if rep is not None:
        got = {(c["collective"], c["dtype"], c["op"]) for c in rep["correctness"]}
        for coll in ("all_reduce", "reduce_scatter", "reduce"):
            for dtype in ("float32", "float16", "bfloat16", "float64", "int8", "uint8", "int16", "int32", "int64"):
                for op in ("sum", "prod", "max", "min", "avg"):
                    if (coll, dtype, op) not in got:
                        failures.append(f"--plan matrix has no {coll} {dtype} {op}")
        for coll in ("all_gather", "broadcast", "gather", "scatter", "all_to_all", "send_recv"):
            if sum(1 for c in got if c[0] == coll) != 9:
                failures.append(f"--plan matrix does not have {coll} in all 9 dtypes")
    for coll in ("reduce", "gather", "scatter", "all_to_all", "send_recv"):
        for r in range(4):
            check(args, f"flip:{r}", extra=["--plan", "matrix", "--collectives", coll], expect=named(bad=[r]),
                  what=f"flip:{r} in {coll}")
    for r in range(4):
        check(args, f"corrupt:{r}", extra=["--plan", "matrix", "--collectives", "reduce"], expect=named(bad=[r]),
              what=f"corrupt:{r} in reduce")
    # corrupt damages reductions only: the data movers stay right.
    check(args, "corrupt:2", extra=["--collectives", "gather,scatter,all_to_all,send_recv"],
          expect={"result": "pass", **named()}, what="corrupt:2 beside collectives that reduce nothing", inert=True)


def mode_cuda(args):
    with tempfile.TemporaryDirectory() as d:
        out = os.path.join(d, "report.json")
        p = run([args.weft_check, "--memory", "cuda", "--json", out, "--timeout-ms", "20000"], timeout=300)
        if "built without CUDA" in p.stderr:
            if p.returncode != 2 or "--memory cuda" not in p.stderr or os.path.exists(out):
                failures.append(f"a build without CUDA: exit {p.returncode}, stderr {p.stderr!r}: not a refusal "
                                "naming --memory cuda")
            elif not failures:
                print(f"skip: weft-check was built without CUDA and refuses --memory cuda as it should "
                      f"({p.stderr.strip()}); the CUDA path needs a -Dcuda=enabled -Dnccl=enabled build and a GPU")
                sys.exit(SKIP)
            return
        if "no usable CUDA device" in p.stderr and p.returncode == 2:
            print(f"skip: {p.stderr.strip()}")
            sys.exit(SKIP)
        if p.returncode != 0 or not os.path.exists(out):
            failures.append(f"--memory cuda on one rank: exit {p.returncode}\n{p.stdout}\n{p.stderr}")
            return
        with open(out) as f:
            rep = json.load(f)
        if rep["result"] != "pass" or rep["memory"] != "cuda" or rep["backend"] != "nccl" or \
                not rep["ranks"][0]["device"].startswith("cuda:"):
            failures.append(f"--memory cuda: {rep['result']}, memory {rep['memory']}, backend {rep['backend']}, "
                            f"device {rep['ranks'][0]['device']}\n" + "\n".join(rep["summary"]))


def mode_mpi(args):
    if not args.mpiexec:
        sys.exit(SKIP)
    mpi = [args.mpiexec, "-n", "4", "--oversubscribe"]
    for backend in (["--backend", b] for b in args.backends.split(",")):
        tag = backend[1]
        check(args, None, extra=backend, launcher=mpi, expect={"result": "pass", **named()},
              what=f"no fault, mpiexec -n 4, {tag}")
        check(args, "corrupt:1", extra=backend, launcher=mpi, expect=named(bad=[1]), what=f"corrupt:1, {tag}")
        check(args, "flip:2", extra=backend, launcher=mpi, expect=named(bad=[2]), what=f"flip:2, {tag}")
        check(args, "delay:3:20", extra=backend, launcher=mpi, expect=named(slow=[3]), what=f"delay:3:20, {tag}")
        check(args, None, extra=backend + ["--plan", "matrix"], launcher=mpi, expect={"result": "pass", **named()},
              what=f"no fault, --plan matrix, {tag}")
        check(args, "flip:1", extra=backend + ["--collectives", "reduce,gather,scatter,all_to_all,send_recv"],
              launcher=mpi, expect=named(bad=[1]), what=f"flip:1 in the rooted and personalised collectives, {tag}")
        rep = check(args, "stop:0:30", extra=backend, launcher=mpi, expect=named(bad=[0]), what=f"stop:0:30, {tag}")
        if rep is not None and (rep["hang"] is None or rep["hang"]["never_joined"] != [0]):
            failures.append(f"stop:0:30 under mpiexec, {tag}: hang section {rep['hang']}")


def mode_launched(args):
    if not args.launch:
        sys.exit(SKIP)
    launcher = [sys.executable, args.launch, "--np", "4", "--as", "torchrun", "--timeout", "120", "--"]
    check(args, None, launcher=launcher, expect={"result": "pass", **named()}, what="no fault, torchrun-style")
    check(args, "corrupt:3", launcher=launcher, expect=named(bad=[3]), what="corrupt:3, torchrun-style")
    check(args, "flip:0", launcher=launcher, expect=named(bad=[0]), what="flip:0, torchrun-style")
    check(args, "delay:1:20", launcher=launcher, expect=named(slow=[1]), what="delay:1:20, torchrun-style")


def mode_nodes(args):
    if not args.cluster:
        sys.exit(SKIP)
    cluster = [sys.executable, args.cluster, "--nodes", "2", "--per-node", "2", "--timeout", "120", "--"]
    probe = run(cluster + ["true"], timeout=150)
    if probe.returncode == SKIP:
        print(f"skip: {probe.stdout.strip()} {probe.stderr.strip()}")
        sys.exit(SKIP)
    extra = ["--timeout-ms", "3000"]
    rep = check(args, None, launcher=cluster, extra=extra, expect={"result": "pass", **named()},
                what="no fault, 2 nodes x 2 ranks")
    if rep is not None and len({r["node"] for r in rep["ranks"]}) != 2:
        failures.append(f"2 nodes x 2 ranks: the report sees nodes {[r['node'] for r in rep['ranks']]}")
    check(args, "corrupt:2", launcher=cluster, extra=extra, expect=named(bad=[2]), what="corrupt:2, 2 nodes")
    for r, n in ((3, 30), (0, 24)):
        rep = check(args, f"stop:{r}:{n}", launcher=cluster, extra=extra, expect=named(bad=[r]),
                    what=f"stop:{r}:{n}, 2 nodes")
        if rep is None:
            continue
        h = rep["hang"]
        if h is None or h["never_joined"] != [r] or h["no_heartbeat"] or not h["heartbeat"].startswith("tcp:"):
            failures.append(f"stop:{r}:{n} across nodes: hang section {h}")
            continue
        # Every rank's last completed call is known; the stopped rank's is its N-th.
        last = {b["rank"]: b["last_completed"] for b in h["ranks"]}
        if sorted(last) != [0, 1, 2, 3] or any(not b["heartbeat"] for b in h["ranks"]) or \
                any(v != last[r] + 1 for q, v in last.items() if q != r):
            failures.append(f"stop:{r}:{n} across nodes: last completed calls {last}")


def mode_schema(args):
    try:
        import jsonschema
    except ImportError:
        print("skip: jsonschema is not installed in this Python (tools/setup installs it into .venv)")
        sys.exit(SKIP)
    with open(args.schema) as f:
        schema = json.load(f)
    jsonschema.Draft202012Validator.check_schema(schema)
    for fault, n, plan in ((None, 4, "quick"), ("corrupt:1", 4, "quick"), ("delay:2:20", 3, "quick"),
                           ("stop:1:20", 4, "quick"), (None, 2, "quick"), (None, 1, "quick"), ("flip:3", 4, "matrix")):
        rep = check(args, fault, ranks=n, extra=["--plan", plan])
        if rep is None:
            continue
        try:
            jsonschema.validate(rep, schema)
        except jsonschema.ValidationError as e:
            failures.append(f"{fault} on {n} ranks: the report does not validate: {e.message} at {list(e.path)}")
    # The schema is not decorative: a report without its verdict fails it.
    rep = check(args, None)
    if rep is not None:
        del rep["bad_ranks"]
        try:
            jsonschema.validate(rep, schema)
            failures.append("a report without bad_ranks validated")
        except jsonschema.ValidationError:
            pass


def mode_plots(args):
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        print("skip: matplotlib is not installed in this Python (tools/setup installs it into .venv)")
        sys.exit(SKIP)
    with tempfile.TemporaryDirectory() as d:
        p = run([args.weft_check, "--ranks", "4", "--plot", d], {"WEFT_FAULT": "delay:2:20",
                                                                  "WEFT_CHECK_PYTHON": sys.executable})
        if p.returncode != 1:
            failures.append(f"--plot with a slow rank: exit {p.returncode}\n{p.stdout}\n{p.stderr}")
        for name in ("busbw.png", "ranks.png"):
            path = os.path.join(d, name)
            if not os.path.exists(path):
                failures.append(f"--plot wrote no {name}")
                continue
            with open(path, "rb") as f:
                data = f.read()
            if len(data) < 1000 or not data.startswith(b"\x89PNG\r\n\x1a\n"):
                failures.append(f"{name}: not a PNG with a plot in it ({len(data)} bytes)")


def mode_errors(args):
    for value in ("corrupt", "corrupt:x", "flip:-1", "delay:1", "delay:1:0", "stop:1", "stop:1:-2", "melt:1",
                  "corrupt:9"):
        p = run([args.weft_check, "--ranks", "4"], {"WEFT_FAULT": value})
        if p.returncode != 2 or value not in p.stderr or "WEFT_FAULT" not in p.stderr:
            failures.append(f"WEFT_FAULT={value}: exit {p.returncode}, stderr {p.stderr!r}: not an init error "
                            "naming the value")
    # A build without CUDA refuses --memory cuda, naming the option and why (a CUDA build: mode cuda).
    p = run([args.weft_check, "--memory", "cuda"])
    refused = p.returncode == 2 and "--memory cuda" in p.stderr and \
        ("built without CUDA" in p.stderr or "no usable CUDA device" in p.stderr)
    if not refused and p.returncode != 0:  # 0: a CUDA build on a GPU ran it
        failures.append(f"--memory cuda: exit {p.returncode}, stderr {p.stderr!r}: neither a run nor a refusal "
                        "naming the option and why")
    for flags, word in ((["--plan", "slow"], "slow"), (["--memory", "gpu"], "gpu"), (["--ranks", "0"], "0"),
                        (["--collectives", "all_reduce,allreduce"], "allreduce"),
                        (["--slow-ratio", "0.5"], "0.5"), (["--bogus", "1"], "--bogus")):
        p = run([args.weft_check] + flags)
        if p.returncode != 2 or word not in p.stderr:
            failures.append(f"{flags}: exit {p.returncode}, stderr {p.stderr!r}")


def main():
    p = argparse.ArgumentParser()
    p.add_argument("weft_check")
    p.add_argument("mode")
    p.add_argument("--mpiexec")
    p.add_argument("--launch")
    p.add_argument("--schema")
    p.add_argument("--cluster")
    p.add_argument("--backends", default="mpi,ucx", help="mpi: the backends to run under mpiexec")
    args = p.parse_args()
    globals()["mode_" + args.mode](args)
    for f in failures:
        print("FAIL:", f)
    print(f"{args.mode}: {len(failures)} failures")
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
