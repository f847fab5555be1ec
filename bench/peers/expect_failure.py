#!/usr/bin/env python3
"""Runs a bench/peers/run command that must fail on wrong values: exit 1,
and the corrupted peer (--corrupt NAME) named with its wrong values."""
import subprocess
import sys

cmd = sys.argv[1:]
peer = cmd[cmd.index("--corrupt") + 1]
done = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
sys.stdout.write(done.stdout)
if done.returncode != 1:
    sys.exit(f"expect_failure: expected exit status 1, got {done.returncode}")
if f"run: FAILED at 2 ranks: {peer}: " not in done.stdout or "wrong values" not in done.stdout:
    sys.exit(f"expect_failure: no line naming {peer} and its wrong values")
