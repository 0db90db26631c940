#!/usr/bin/env bash
# Runs the unit tests ($BUILD/unit-tests), then every integration test
# (tests/integration/*.sh) and fault scenario (tests/faults/*.sh; their
# shell helpers live in tests/lib).
# Ends with one line "N passed, N failed" (unit cases + integration tests)
# and exits non-zero when anything failed.
#
#   BUILD=build tests/run.sh              # everything
#   tests/run.sh backpressure oom         # only integration tests whose name
#                                         # contains one of the words (no unit tests)
#   TEST_TIMEOUT=300 tests/run.sh         # per-test timeout in seconds (default 120)
set -uo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root" || exit 1
export BUILD=${BUILD:-build}
case $BUILD in /*) ;; *) BUILD=$root/$BUILD ;; esac
timeout_s=${TEST_TIMEOUT:-120}
filters=("$@")

passed=0
failed=0
failed_names=()

if ((${#filters[@]} == 0)); then
    echo "== unit tests ($BUILD/unit-tests)"
    if [[ ! -x $BUILD/unit-tests ]]; then
        echo "FAIL unit-tests: $BUILD/unit-tests not built (make unit)"
        failed=$((failed + 1))
        failed_names+=(unit-tests)
    else
        out=$(timeout "$timeout_s" "$BUILD/unit-tests" 2>&1)
        rc=$?
        last=$(printf '%s\n' "$out" | tail -n 1)
        if [[ $last =~ ^([0-9]+)\ passed,\ ([0-9]+)\ failed$ ]]; then
            p=${BASH_REMATCH[1]} f=${BASH_REMATCH[2]}
            # A crash after the summary, or a non-zero exit with 0 failures,
            # is still a failure.
            if ((rc != 0 && f == 0)); then f=1; fi
        else
            p=0 f=1
            echo "unit-tests: no summary line (exit $rc); crashed or timed out?"
        fi
        passed=$((passed + p))
        failed=$((failed + f))
        if ((f > 0)); then
            printf '%s\n' "$out"
            failed_names+=(unit-tests)
        else
            echo "unit tests: $p passed"
        fi
    fi
fi

log=$(mktemp "${TMPDIR:-/tmp}/sluice-run.XXXXXX")
trap 'rm -f "$log"' EXIT
# The fault scenarios (tests/faults) run here too, as "faults/NAME", with
# one seed for the whole run (printed: FAULT_SEED=N replays it).
export FAULT_SEED=${FAULT_SEED:-$(( (RANDOM << 15 | RANDOM) % 1000000 ))}
echo "== integration tests and fault scenarios (FAULT_SEED=$FAULT_SEED)"
shopt -s nullglob
for t in tests/integration/*.sh tests/faults/*.sh; do
    name=$(basename "$t" .sh)
    [[ $name == _* || $t == tests/faults/run.sh ]] && continue
    [[ $t == tests/faults/* ]] && name=faults/$name
    if ((${#filters[@]})); then
        match=0
        for f in "${filters[@]}"; do [[ $name == *"$f"* ]] && match=1; done
        ((match)) || continue
    fi
    start=$(date +%s.%N)
    # timeout runs the test in a process group of its own and signals the
    # whole group, so on a timeout everything it started stops too.
    # Output goes to a file, not a pipe: a process the test leaked cannot
    # keep the runner waiting for end-of-file.
    rc=0
    timeout -k 10 "$timeout_s" bash "$t" </dev/null >"$log" 2>&1 || rc=$?
    out=$(<"$log")
    secs=$(awk -v a="$start" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }')
    if ((rc == 0)); then
        printf 'PASS %-24s (%ss)\n' "$name" "$secs"
        passed=$((passed + 1))
    else
        why="exit $rc"
        ((rc == 124 || rc == 137)) && why="timed out after ${timeout_s}s"
        printf 'FAIL %-24s (%ss, %s)\n' "$name" "$secs" "$why"
        printf '%s\n' "$out" | sed 's/^/    | /'
        failed=$((failed + 1))
        failed_names+=("$name")
    fi
done

((failed)) && echo "failed: ${failed_names[*]}"
echo "$passed passed, $failed failed"
((failed == 0))
