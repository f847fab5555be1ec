#!/usr/bin/env python3
"""Fault injection: one world of fault_rank processes, started as a launcher
would, and what every process printed and left behind.

  faults.py --launcher mpirun|launch|none --np N --backend mpi|ucx|auto
            --scenario kill|late|soak|steps [--timeout-ms MS] -- FAULT_RANK [LAUNCH_PY]

kill: rank 1 kills itself with SIGKILL in the middle of a long all-reduce
loop; every other rank must print PASS (an error naming rank 1 as dead,
within the timeout, its communicator destroyed). late: every rank prints
PASS (the waiting ones checked the hang report). soak: every rank prints
PASS (10,000 collectives, results checked, resident set flat). steps: the
same for 1,000 reducer and 1,000 shard-group steps; --launcher none runs
them on in-process ranks (threads of one fault_rank). Either way no rank's
process may outlive the launcher and no shared-memory segment of theirs may
be left in /dev/shm. mpirun runs with --enable-recovery, so a dead rank does
not take its job down before the survivors have seen it.
"""
import argparse
import glob
import os
import re
import signal
import subprocess
import sys
import tempfile
import time


def rank_processes(exe):
    """Processes still running `exe` (any rank left behind)."""
    found = []
    real = os.path.realpath(exe)
    for d in glob.glob("/proc/[0-9]*"):
        try:
            if os.path.realpath(os.path.join(d, "exe")) == real:
                found.append(int(os.path.basename(d)))
        except OSError:
            pass
    return found


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--launcher", choices=["mpirun", "launch", "none"], required=True)
    p.add_argument("--np", type=int, required=True)
    p.add_argument("--backend", default="auto")
    p.add_argument("--scenario", choices=["kill", "late", "soak", "steps"], required=True)
    p.add_argument("--timeout-ms", type=int, default=4000)
    p.add_argument("rest", nargs=argparse.REMAINDER)
    a = p.parse_args()
    rest = a.rest[1:] if a.rest[:1] == ["--"] else a.rest
    exe = rest[0]
    env = dict(os.environ, WEFT_TIMEOUT_MS=str(a.timeout_ms), WEFT_HANG_WARN_MS=str(a.timeout_ms // 4))
    if a.launcher == "none":
        cmd = [exe, "inproc", a.scenario, str(a.np)]
    elif a.launcher == "mpirun":
        cmd = ["mpiexec", "-n", str(a.np), "--oversubscribe", "--enable-recovery", exe, a.backend, a.scenario]
    else:
        cmd = [sys.executable, rest[1], "--np", str(a.np), "--as", "torchrun", "--timeout", "120", "--", exe,
               a.backend, a.scenario]
    if rank_processes(exe):
        print(f"faults.py: SKIP processes of {exe} are already running (another run of this test)")
        return 77
    t0 = time.monotonic()
    with tempfile.TemporaryFile("w+") as out_f, tempfile.TemporaryFile("w+") as err_f:
        proc = subprocess.Popen(cmd, env=env, stdout=out_f, stderr=err_f, text=True, start_new_session=True)
        launcher_note = ""
        ranks_gone_at = None
        while proc.poll() is None:
            time.sleep(0.2)
            now = time.monotonic()
            if now - t0 > 120:
                left = rank_processes(exe)
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
                out_f.seek(0)
                err_f.seek(0)
                print(out_f.read(), err_f.read(), sep="\n")
                print(f"faults.py: FAIL the world was still running after 120 s; rank processes alive: {left}")
                return 1
            # Every rank gone but the launcher still up: Open MPI 4.1.4's mpiexec
            # sometimes hangs in PMIx_server_finalize once a job lost a rank
            # (tests/mpi/meson.build). The ranks did what they must; stop it.
            if a.launcher == "mpirun" and not rank_processes(exe):
                ranks_gone_at = ranks_gone_at or now
                if now - ranks_gone_at > 10:
                    os.killpg(proc.pid, signal.SIGKILL)
                    proc.wait()
                    launcher_note = " (mpiexec hung after every rank had exited; stopped)"
            else:
                ranks_gone_at = None
        out_f.seek(0)
        err_f.seek(0)
        out, err = out_f.read(), err_f.read()
    elapsed = time.monotonic() - t0
    print(out)
    print(err, file=sys.stderr)
    if "SKIP" in out and "PASS" not in out:
        return 77
    failures = []
    passed = {int(m.group(1)): int(m.group(2)) for m in re.finditer(r"fault_rank (\d+): PASS pid (\d+)", out)}
    want = [r for r in range(a.np) if not (a.scenario == "kill" and r == 1)]
    missing = [r for r in want if r not in passed]
    if missing:
        failures.append(f"rank(s) {missing} did not pass")
    if "FAIL" in out:
        failures.append("a rank failed")
    if a.scenario == "late":
        # Each waiting rank logged the report once, at WEFT_HANG_WARN_MS.
        warned = len(re.findall(r"hang report \(WEFT_HANG_WARN_MS", err))
        if warned < a.np - 1:
            failures.append(f"{warned} hang warnings on stderr, expected {a.np - 1} (one per waiting rank)")
    time.sleep(0.2)
    left = rank_processes(exe)
    if left:
        failures.append(f"processes left behind: {left}")
        for pid in left:
            os.kill(pid, signal.SIGKILL)
    segments = [s for pid in passed.values() for s in glob.glob(f"/dev/shm/weft-{pid}-*")]
    if segments:
        failures.append(f"shared-memory segments left behind: {segments}")
    verdict = "FAIL " + "; ".join(failures) if failures else "PASS"
    print(f"faults.py: {a.launcher} np {a.np} {a.backend} {a.scenario}: {verdict} ({elapsed:.1f} s){launcher_note}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
