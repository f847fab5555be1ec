#!/bin/sh
# Runs a weft-bench command that must find wrong values: it has to exit with
# status 1 and print nccl-tests' "# Out of bounds values : N FAILED" footer.
out=$("$@")
rc=$?
printf '%s\n' "$out"
if [ "$rc" -ne 1 ]; then
  echo "expect_wrong: expected exit status 1 (wrong values found), got $rc" >&2
  exit 1
fi
if ! printf '%s\n' "$out" | grep -q '^# Out of bounds values : [1-9][0-9]* FAILED$'; then
  echo "expect_wrong: no '# Out of bounds values : N FAILED' footer" >&2
  exit 1
fi
