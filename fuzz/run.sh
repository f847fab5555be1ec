#!/bin/sh
# Runs one libFuzzer target for a bounded time: first every input of its
# committed corpus (the seeds and the regressions), then new inputs until the
# time is up. New coverage goes to a scratch directory, not the source tree;
# a crashing input is kept in the build directory (fuzz/crash-*) and named.
# Usage: run.sh TARGET CORPUS SECONDS [libFuzzer flags...]
# WEFT_FUZZ_SECONDS, where set, overrides SECONDS (tools/sanitize: 4 s a
# target in the default run, 15 s in the full one).
set -eu
target="$1"; corpus="$2"; seconds="${WEFT_FUZZ_SECONDS:-$3}"
shift 3
[ -d "$corpus" ] || { echo "run.sh: no corpus directory $corpus"; exit 1; }
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
artifacts="$(dirname "$target")/$(basename "$target")-"
# -rss_limit_mb: under ASan the targets stay far below it; a leak or an
# allocation sized by a fuzzed count shows as a failure instead of a swap storm.
if "$target" -max_total_time="$seconds" -timeout=20 -rss_limit_mb=2048 -print_final_stats=1 \
     -artifact_prefix="$artifacts" "$@" "$scratch" "$corpus"; then
  exit 0
fi
echo "run.sh: $(basename "$target") failed; the input is at ${artifacts}crash-* (or leak-*, timeout-*, oom-*)"
echo "run.sh: replay it with: $target <file>"
exit 1
