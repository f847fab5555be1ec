#!/usr/bin/env python3
"""Starts one process per rank with a launcher's variables, as torchrun,
srun or weft's own variables would, and no MPI.

  launch.py --np 4 --as torchrun [--world env|uid|store] [--timeout S]
            [--kill RANK@SECONDS] -- PROGRAM ARGS...

Every rank also gets WEFT_TEST_RANK, WEFT_TEST_NP, WEFT_TEST_WORLD and a
shared scratch WEFT_TEST_DIR, and the bootstrap listens on loopback only.
The run passes when every rank that was not killed exits 0; a rank still
running at --timeout fails it (every rank is then stopped), and so does any
rank's failure, which stops the others. The scratch directory is removed.
"""
import argparse
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "common"))
from ports import free_port  # noqa: E402

LAUNCHER_VARS = ("OMPI_", "PMIX_", "PMI_", "MPI_LOCALNRANKS", "MV2_", "SLURM_", "RANK", "WORLD_SIZE", "LOCAL_RANK",
                 "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "WEFT_RANK", "WEFT_WORLD_SIZE", "WEFT_ROOT",
                 "WEFT_MASTER_PORT", "TORCHELASTIC_")


def stop(procs, grace_s=5):
    """Gives the ranks a moment to finish (they may be reporting the same
    failure), kills those still running, and returns every exit code."""
    grace = time.monotonic() + grace_s
    while time.monotonic() < grace and any(pr.poll() is None for pr in procs):
        time.sleep(0.05)
    for pr in procs:
        if pr.poll() is None:
            pr.kill()
    return [pr.wait() for pr in procs]


def rank_env(args, rank, port, scratch, job):
    env = {k: v for k, v in os.environ.items() if not k.startswith(LAUNCHER_VARS)}
    env.update(WEFT_TEST_RANK=str(rank), WEFT_TEST_NP=str(args.np), WEFT_TEST_WORLD=args.world,
               WEFT_TEST_DIR=scratch, WEFT_SOCKET_IFNAME="lo")
    if args.launcher == "torchrun":
        # torch's store would listen on MASTER_PORT; weft takes MASTER_PORT + 1.
        env.update(RANK=str(rank), WORLD_SIZE=str(args.np), LOCAL_RANK=str(rank), LOCAL_WORLD_SIZE=str(args.np),
                   MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port - 1), TORCHELASTIC_RUN_ID=job)
    elif args.launcher == "slurm":
        env.update(SLURM_PROCID=str(rank), SLURM_LOCALID=str(rank), SLURM_NTASKS=str(args.np),
                   SLURM_STEP_NUM_TASKS=str(args.np), SLURM_STEP_NODELIST="localhost", SLURM_NODELIST="localhost",
                   SLURM_JOB_ID=job, SLURM_STEP_ID="0", WEFT_MASTER_PORT=str(port))
    elif args.launcher == "weft":
        env.update(WEFT_RANK=str(rank), WEFT_WORLD_SIZE=str(args.np), WEFT_ROOT=f"127.0.0.1:{port}")
    return env


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--np", type=int, required=True)
    p.add_argument("--as", dest="launcher", choices=["torchrun", "slurm", "weft", "none"], default="torchrun")
    p.add_argument("--world", choices=["env", "uid", "store"], default="env")
    p.add_argument("--timeout", type=float, default=600)
    p.add_argument("--kill", default=None, help="RANK@SECONDS: SIGKILL that rank after that long")
    p.add_argument("cmd", nargs=argparse.REMAINDER)
    args = p.parse_args()
    cmd = args.cmd[1:] if args.cmd[:1] == ["--"] else args.cmd
    if not cmd:
        p.error("no program to launch")
    # weft's bootstrap listens on `port`; the one below it is what a torchrun
    # store would take.
    port = free_port(also_below=1)
    scratch = tempfile.mkdtemp(prefix="weft-launch-")
    job = str(random.randrange(1, 1 << 30))
    procs = []
    try:
        for r in range(args.np):
            procs.append(subprocess.Popen(cmd, env=rank_env(args, r, port, scratch, job)))
        kill_rank, kill_at = (None, None)
        if args.kill:
            k, s = args.kill.split("@")
            kill_rank, kill_at = int(k), time.monotonic() + float(s)
        deadline = time.monotonic() + args.timeout
        codes = [None] * args.np
        while any(c is None for c in codes):
            for r, pr in enumerate(procs):
                if codes[r] is None:
                    codes[r] = pr.poll()
            if kill_rank is not None and time.monotonic() >= kill_at and codes[kill_rank] is None:
                procs[kill_rank].kill()
                print(f"launch.py: killed rank {kill_rank}", file=sys.stderr)
                kill_rank = None
            failed = [r for r, c in enumerate(codes) if c not in (None, 0) and not (args.kill and
                                                                                  r == int(args.kill.split("@")[0]))]
            if failed or time.monotonic() > deadline:
                why = f"rank(s) {failed} failed" if failed else f"ranks still running after {args.timeout} s"
                codes = stop(procs)
                print(f"launch.py: {why}; exit codes {codes}", file=sys.stderr)
                return 1
            time.sleep(0.02)
        print(f"launch.py: {args.np} ranks ({args.launcher}, world {args.world}) exit codes {codes}",
              file=sys.stderr)
        survivors = [c for r, c in enumerate(codes) if not (args.kill and r == int(args.kill.split("@")[0]))]
        return 0 if all(c == 0 for c in survivors) else 1
    finally:
        for pr in procs:
            if pr.poll() is None:
                pr.send_signal(signal.SIGKILL)
                pr.wait()
        shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
