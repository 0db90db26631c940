#!/usr/bin/env bash
# The fault suite (make test-faults): runs every scenario tests/faults/*.sh
# (their helpers: tests/lib/faults.sh) against the programs in $BUILD,
# each on its own private redis-server. One seed for the whole run:
# $FAULT_SEED, else a random one; it is printed, and each scenario prints
# it again with what it checked. Ends with one line "N passed, N failed"
# and exits non-zero when a scenario failed.
#
#   BUILD=build tests/faults/run.sh              # every scenario
#   FAULT_SEED=1234 tests/faults/run.sh kill     # replay; only names containing "kill"
#   FAULT_TIMEOUT=300 tests/faults/run.sh        # per-scenario timeout (default 180 s)
set -uo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$root" || exit 1
export BUILD=${BUILD:-build}
case $BUILD in /*) ;; *) BUILD=$root/$BUILD ;; esac
export FAULT_SEED=${FAULT_SEED:-$(( (RANDOM << 15 | RANDOM) % 1000000 ))}
timeout_s=${FAULT_TIMEOUT:-180}
filters=("$@")
echo "== fault suite, seed $FAULT_SEED (replay: FAULT_SEED=$FAULT_SEED make test-faults)"

passed=0 failed=0 failed_names=()
log=$(mktemp "${TMPDIR:-/tmp}/sluice-faults.XXXXXX")
trap 'rm -f "$log"' EXIT
t_all=$(date +%s.%N)
shopt -s nullglob
for t in tests/faults/*.sh; do
    name=$(basename "$t" .sh)
    [[ $name == _* || $name == run ]] && continue
    if ((${#filters[@]})); then
        match=0
        for f in "${filters[@]}"; do [[ $name == *"$f"* ]] && match=1; done
        ((match)) || continue
    fi
    start=$(date +%s.%N)
    # As in tests/run.sh: a process group of its own that timeout signals as
    # a whole, and output to a file that a leaked process cannot hold open.
    rc=0
    timeout -k 10 "$timeout_s" bash "$t" </dev/null >"$log" 2>&1 || rc=$?
    secs=$(awk -v a="$start" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }')
    if ((rc == 0)); then
        printf 'PASS %-16s (%ss)\n' "$name" "$secs"
        # What it checked; the "-- " progress notes only when it fails.
        grep -v '^-- ' "$log" | sed 's/^/    | /'
        passed=$((passed + 1))
    else
        why="exit $rc"
        ((rc == 124 || rc == 137)) && why="timed out after ${timeout_s}s"
        printf 'FAIL %-16s (%ss, %s)\n' "$name" "$secs" "$why"
        sed 's/^/    | /' "$log"
        failed=$((failed + 1))
        failed_names+=("$name")
    fi
done
echo "fault suite: $(awk -v a="$t_all" -v b="$(date +%s.%N)" 'BEGIN { printf "%.0f", b - a }') s, seed $FAULT_SEED"
((failed)) && echo "failed: ${failed_names[*]}"
echo "$passed passed, $failed failed"
((failed == 0))
