#!/bin/bash
# A real Slurm on this machine: munge, slurmctld and slurmd started on
# localhost as a one-node cluster with 4 CPUs' worth of task slots (the node
# is declared with 4 CPUs whatever it has, so 4 ranks share fewer cores),
# then weft launched by srun as an operator would:
#
#   tests/slurm/slurm_test.sh --bench build/bench/weft-bench --mpi-test build/tests/mpi/mpi_test \
#       [--check build/bench/check/weft-check] [--light]
#
#   1. srun -n 4 weft-bench all_reduce      (weft's own bootstrap from Slurm's variables, every element checked;
#                                            traced with WEFT_TRACE, the ranks' timelines merged)
#   2. srun --mpi=pmix -n 4 mpi_test        (the MPI conformance suite, ranks wired by Slurm's PMIx server;
#                                            --light: not its many-small-rounds cases)
#   3. srun -n 4 weft-check                 (only when that binary exists; said so otherwise)
#
# Everything lives in one temporary directory (configuration, munge key and
# socket, state, logs) with free ports, so the machine's own Slurm or munge,
# if any, is untouched. As root the cluster runs in a PID namespace of its
# own, so no daemon or job step can outlive the test; a trap stops the jobs
# and the daemons and removes the directory on every exit. Exit 0 when every
# step passed, 77 (meson's skip) with the reason when Slurm, munge or PMIx is
# missing, 1 otherwise, after printing the daemons' logs.
set -u

SKIP=77
bench= mpi_test= check= light=
while [ $# -gt 0 ]; do
  case "$1" in
    --bench) bench=$2; shift 2 ;;
    --mpi-test) mpi_test=$2; shift 2 ;;
    --check) check=$2; shift 2 ;;
    --light) light=1; shift ;;
    --in-namespace) in_ns=1; shift ;;
    --dir) given_dir=$2; shift 2 ;;
    *) echo "slurm_test: unknown argument '$1'" >&2; exit 2 ;;
  esac
done
if [ -z "$bench" ] || [ ! -x "$bench" ]; then
  echo "slurm_test: --bench '$bench' is not an executable weft-bench" >&2
  exit 2
fi

# What Slurm needs, with the Debian packages that provide it.
need() {
  if ! command -v "$1" >/dev/null 2>&1 && [ ! -x "/usr/sbin/$1" ]; then
    echo "SKIP: $1 not found (install Debian's $2)"
    exit $SKIP
  fi
}
need munged munge
need slurmctld slurmctld
need slurmd slurmd
need srun slurm-client
need sinfo slurm-client
PATH=$PATH:/usr/sbin
plugins=$(dirname "$(find /usr/lib /usr/lib64 -name 'select_cons_tres.so' -path '*slurm*' 2>/dev/null | head -1)")
if [ ! -e "$plugins/mpi_pmix.so" ] && [ ! -e "$plugins/mpi_pmix_v4.so" ]; then
  echo "SKIP: Slurm's PMIx plugin (mpi_pmix.so) not found next to its other plugins in '$plugins' (install Debian's slurm-wlm-basic-plugins)"
  exit $SKIP
fi
if [ "$(id -u)" != 0 ]; then
  echo "SKIP: slurmd starts job steps as their users, which needs root (running as uid $(id -u))"
  exit $SKIP
fi

# Everything lives in one directory; made here, so that it is removed even when the namespace below is
# killed from outside.
if [ -n "${given_dir:-}" ]; then
  dir=$given_dir
else
  dir=$(mktemp -d "${TMPDIR:-/tmp}/weft-slurm.XXXXXX") || exit 1
  chmod 711 "$dir"  # munge wants its socket's directory searchable
fi

# A PID namespace whose init is a second run of this script: when that ends, or is killed, the kernel ends
# every process left inside (daemons, job steps). This run waits for it and removes the directory.
if [ -z "${in_ns:-}" ] && command -v unshare >/dev/null 2>&1 && unshare --pid --fork --mount-proc true 2>/dev/null; then
  args=(--bench "$bench" --dir "$dir")
  [ -n "$mpi_test" ] && args+=(--mpi-test "$mpi_test")
  [ -n "$check" ] && args+=(--check "$check")
  [ -n "$light" ] && args+=(--light)
  unshare --pid --fork --mount-proc --kill-child "$0" "${args[@]}" --in-namespace &
  inner=$!
  # unshare ignores INT and TERM while it waits: tell its child, the namespace's init, which cleans up.
  stop_inner() {
    for c in $(cat "/proc/$inner/task/$inner/children" 2>/dev/null); do kill -TERM "$c" 2>/dev/null; done
    wait "$inner"
    rm -rf "$dir"
    exit 1
  }
  trap stop_inner INT TERM
  wait "$inner"
  rc=$?
  rm -rf "$dir"
  exit $rc
fi
pids=()
cleanup() {
  local rc=$?
  if [ -n "${SLURM_CONF:-}" ] && [ -f "$SLURM_CONF" ]; then
    scancel --quiet --full --user=root 2>/dev/null
  fi
  [ -n "${step_pid:-}" ] && kill "$step_pid" 2>/dev/null
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null; done
  for p in "${pids[@]}"; do
    for _ in $(seq 50); do kill -0 "$p" 2>/dev/null || break; sleep 0.1; done
    kill -9 "$p" 2>/dev/null
  done
  rm -rf "$dir"
  exit $rc
}
trap cleanup EXIT
trap 'exit 1' INT TERM

logs() {
  for f in "$dir"/*.log; do
    echo "----- $(basename "$f") (last 40 lines)"
    tail -n 40 "$f"
  done
}
fail() {
  echo "FAIL: $*"
  logs
  exit 1
}

# A long step in the background, waited for: bash runs a trap only once the foreground command ends, so a
# TERM would otherwise wait out the step's timeout.
step() {
  "$@" &
  step_pid=$!
  wait $step_pid
}

free_port() { python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }

# munge: its own key and socket.
dd if=/dev/urandom of="$dir/munge.key" bs=1024 count=1 status=none
chmod 400 "$dir/munge.key"
munged --force --foreground --key-file="$dir/munge.key" --socket="$dir/munge.sock" --pid-file="$dir/munged.pid" \
  --log-file="$dir/munged.log" --seed-file="$dir/munge.seed" 2>/dev/null &
pids+=($!)
for _ in $(seq 50); do [ -S "$dir/munge.sock" ] && break; sleep 0.1; done
[ -S "$dir/munge.sock" ] || fail "munged did not create its socket"

# The node is this host, by its name, as on a real cluster: weft finds its bootstrap root by the first
# node's name in SLURM_NODELIST.
node=$(hostname -s)
mkdir -p "$dir/state" "$dir/spool"
cat > "$dir/slurm.conf" <<EOF
ClusterName=weft
SlurmctldHost=$(hostname -s)(127.0.0.1)
SlurmctldPort=$(free_port)
SlurmdPort=$(free_port)
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$dir/munge.sock
StateSaveLocation=$dir/state
SlurmdSpoolDir=$dir/spool
SlurmctldPidFile=$dir/slurmctld.pid
SlurmdPidFile=$dir/slurmd.pid
SlurmctldLogFile=$dir/slurmctld.log
SlurmdLogFile=$dir/slurmd.log
SlurmctldDebug=info
SlurmdDebug=info
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
SchedulerType=sched/builtin
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
MpiDefault=none
ReturnToService=2
SlurmdParameters=config_overrides
NodeName=$node NodeAddr=127.0.0.1 CPUs=4 State=UNKNOWN
PartitionName=weft Nodes=$node Default=YES MaxTime=10 State=UP
EOF
export SLURM_CONF=$dir/slurm.conf

slurmctld -D -i -f "$SLURM_CONF" >/dev/null 2>&1 &  # it logs to SlurmctldLogFile
pids+=($!)
slurmd -D -N "$node" -f "$SLURM_CONF" >/dev/null 2>&1 &
pids+=($!)

state=
for _ in $(seq 300); do
  state=$(sinfo -h -n "$node" -o %T 2>/dev/null)
  [ "$state" = idle ] && break
  sleep 0.1
done
[ "$state" = idle ] || fail "node $node is '$state', not idle, 30 s after the daemons started"
echo "slurm: one node, $(sinfo -h -n "$node" -o %c) CPUs, idle"

# Step 1: weft-bench, launched by srun alone (Slurm's variables -> weft's socket bootstrap).
echo "== srun -n 4 weft-bench all_reduce"
# With WEFT_TRACE: four timelines, ranks 1-3 aligned to rank 0's clock over that world, merged into one.
step timeout 120 srun -n 4 -t 2 --export=ALL,WEFT_TRACE="$dir/trace" "$bench" all_reduce -b 4K -e 1M -f 4 -n 5 -w 1 -c 1 \
  || fail "srun weft-bench all_reduce"
merge=$(dirname "$0")/../../tools/trace-merge
if [ -f "$merge" ]; then
  python3 "$merge" "$dir/trace" -o "$dir/merged.json" || fail "tools/trace-merge of the srun ranks' timelines"
  python3 - "$dir/merged.json" <<'PY' || fail "the srun ranks' merged timeline"
import json, sys
inputs = json.load(open(sys.argv[1]))["otherData"]["inputs"]
ranks = sorted(i["rank"] for i in inputs)
assert ranks == [0, 1, 2, 3], f"timelines of ranks {ranks}, expected 0-3"
for i in inputs:
    if i["rank"]:
        assert "min-RTT" in i["clock"]["method"], f"rank {i['rank']} did not align its clock: {i['clock']}"
print("trace: 4 timelines merged, clocks aligned:", [round(i["clock"]["offset_us"], 3) for i in inputs])
PY
fi

# Step 2: the MPI conformance suite, its ranks wired by Slurm's PMIx server. Without the big matrix and
# the tests that wait out timeouts (MismatchedCalls alone took 88 s at 4 ranks here): the mpi suite runs
# those under mpiexec; this step checks that an srun-launched MPI job forms its worlds and moves bytes.
if [ -n "$mpi_test" ]; then
  echo "== srun --mpi=pmix -n 4 mpi_test"
  # --light: not the cases that take many small rounds, which the mpiexec runs cover.
  filter='-*CollectiveMatrix:*TimesOut*:*AbortEndsAWait*:*Mismatched*'
  [ -n "$light" ] && filter+=':*AllReduceReady*:*AllReducePieces*:*SmallSegments*:*SmallRounds*'
  step timeout 150 srun --mpi=pmix -n 4 -t 3 --export=ALL,WEFT_TEST_LIMIT_S=120 \
    "$mpi_test" "--gtest_filter=$filter" || fail "srun --mpi=pmix mpi_test"
else
  echo "== MPI conformance suite: not built (no MPI), not run"
fi

# Step 3: weft-check, the cluster check, where this build has it.
if [ -n "$check" ] && [ -x "$check" ]; then
  echo "== srun -n 4 weft-check"
  step timeout 120 srun -n 4 -t 2 "$check" --plan quick || fail "srun weft-check"
else
  echo "== weft-check: '${check:-build/bench/check/weft-check}' does not exist in this build, not run"
fi
echo "PASS: weft under a real Slurm (srun, 4 tasks on one node)"
