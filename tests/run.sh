#!/usr/bin/env bash
# Runs the unit tests ($BUILD/unit-tests), then every integration test
# (tests/integration/*.sh) and fault scenario (tests/faults/*.sh; their
# shell helpers live in tests/lib), several at a time.
# Ends with one line "N passed, N failed" (unit cases + integration tests)
# and exits non-zero when anything failed.
#
#   BUILD=build tests/run.sh              # everything
#   tests/run.sh backpressure oom         # only integration tests whose name
#                                         # contains one of the words (no unit tests)
#   TEST_TIMEOUT=300 tests/run.sh         # per-test timeout in seconds (default 120)
#   TEST_JOBS=1 tests/run.sh              # one test at a time (default 4)
#
# Most tests spend their time waiting (leases, back-offs, conditions), so
# TEST_JOBS of them run at once, each on its own redis-server. Each test's
# output is kept and printed, whole, when it ends (in the order they end):
# one PASS line, or a FAIL line and all it printed. A test with the line
# "# test: serial" runs with no other test beside it (it measures time or
# CPU, or needs both cores); these run first. The others start longest
# first, by their times in the last run ($BUILD/test-times), else those with
# the line "# test: long" first, so that the last to end are short ones.
set -uo pipefail

if [[ ${1:-} == -h || ${1:-} == --help ]]; then
    sed -n '2,/^set /{/^set /d;s/^# \{0,1\}//;p}' "${BASH_SOURCE[0]}"
    exit 0
fi

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root" || exit 1
export BUILD=${BUILD:-build}
case $BUILD in /*) ;; *) BUILD=$root/$BUILD ;; esac
timeout_s=${TEST_TIMEOUT:-120}
jobs_n=${TEST_JOBS:-4}
bad_env() { echo "tests/run.sh: $1 must be a whole number > 0, not '$2'" >&2; exit 2; }
[[ $timeout_s =~ ^[1-9][0-9]*$ ]] || bad_env "TEST_TIMEOUT (seconds)" "$timeout_s"
[[ $jobs_n =~ ^[1-9][0-9]*$ ]] || bad_env TEST_JOBS "$jobs_n"
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

logs=$(mktemp -d "${TMPDIR:-/tmp}/sluice-run.XXXXXX")
declare -A running=()      # pid of a test's timeout -> the test's index
# On an interrupt the tests still running are stopped too: each runs in a
# process group of its own (timeout's), out of reach of the terminal's ^C.
stop_all() {
    local pid
    for pid in "${!running[@]}"; do kill -TERM "$pid" 2>/dev/null; done
    wait
}
trap 'rm -rf "$logs"' EXIT
trap 'stop_all; exit 130' INT
trap 'stop_all; exit 143' TERM

# The fault scenarios (tests/faults) run here too, as "faults/NAME", with
# one seed for the whole run (printed: FAULT_SEED=N replays it).
export FAULT_SEED=${FAULT_SEED:-$(( (RANDOM << 15 | RANDOM) % 1000000 ))}

# The tests, with what their "# test:" line says and their last times.
times_file=$BUILD/test-times
declare -A last_secs=()
if [[ -r $times_file ]]; then
    while read -r n s; do [[ $s =~ ^[0-9.]+$ ]] && last_secs[$n]=$s; done <"$times_file"
fi
names=() paths=() serial=() order=()
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
    marks=" $(sed -n 's/^# test: //p' "$t" | tr '\n' ' ') "
    i=${#names[@]}
    names+=("$name") paths+=("$t")
    serial[i]=0
    [[ $marks == *" serial "* ]] && serial[i]=1
    # The expected time: the last run's, else a guess from the marker.
    est=${last_secs[$name]:-}
    if [[ -z $est ]]; then
        est=5
        [[ $marks == *" long "* ]] && est=60
    fi
    # Serial tests first (they wait for nothing), then longest first; with
    # one job at a time, in the order of their names.
    if ((jobs_n == 1)); then
        order+=("$i")
    else
        order+=("$(awk -v s="${serial[i]}" -v e="$est" -v i="$i" \
            'BEGIN { printf "%d %012.1f %d", 1 - s, 1e6 - e, i }')")
    fi
done
if ((jobs_n > 1 && ${#order[@]})); then
    mapfile -t order < <(printf '%s\n' "${order[@]}" | sort | awk '{ print $3 }')
fi
echo "== integration tests and fault scenarios (FAULT_SEED=$FAULT_SEED, TEST_JOBS=$jobs_n)"

declare -A t_start=() secs_of=()
# finish_one: waits for any running test to end and prints its result.
finish_one() {
    local pid rc i name secs why
    rc=0
    wait -n -p pid || rc=$?
    if [[ -z ${pid:-} ]]; then
        # No child left to wait for, yet some are listed: should not be.
        ((rc == 127)) || return 0
        for pid in "${!running[@]}"; do
            echo "FAIL ${names[${running[$pid]}]}: the runner lost track of it"
            failed=$((failed + 1))
            failed_names+=("${names[${running[$pid]}]}")
        done
        running=()
        return 0
    fi
    [[ -n ${running[$pid]:-} ]] || return 0
    i=${running[$pid]}
    unset "running[$pid]"
    name=${names[i]}
    secs=$(awk -v a="${t_start[$i]}" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }')
    secs_of[$name]=$secs
    if ((rc == 0)); then
        printf 'PASS %-24s (%ss)\n' "$name" "$secs"
        passed=$((passed + 1))
    else
        why="exit $rc"
        ((rc == 124 || rc == 137)) && why="timed out after ${timeout_s}s"
        printf 'FAIL %-24s (%ss, %s)\n' "$name" "$secs" "$why"
        sed 's/^/    | /' "$logs/$i.log"
        failed=$((failed + 1))
        failed_names+=("$name")
    fi
}

t_all=$(date +%s.%N)
for i in "${order[@]}"; do
    # A serial test waits until nothing runs; anything waits for a free slot.
    if ((serial[i])); then
        while ((${#running[@]})); do finish_one; done
    fi
    while ((${#running[@]} >= jobs_n)); do finish_one; done
    t_start[$i]=$(date +%s.%N)
    # timeout runs the test in a process group of its own and signals the
    # whole group, so on a timeout everything it started stops too.
    # Output goes to a file, not a pipe: a process the test leaked cannot
    # keep the runner waiting for end-of-file.
    timeout -k 10 "$timeout_s" bash "${paths[i]}" </dev/null >"$logs/$i.log" 2>&1 &
    running[$!]=$i
    if ((serial[i])); then
        while ((${#running[@]})); do finish_one; done
    fi
done
while ((${#running[@]})); do finish_one; done
secs=$(awk -v a="$t_all" -v b="$(date +%s.%N)" 'BEGIN { printf "%.0f", b - a }')
echo "== ${#order[@]} tests in $secs s"

# This run's times (merged into the last ones) order the next run.
if ((${#secs_of[@]})); then
    for n in "${!secs_of[@]}"; do last_secs[$n]=${secs_of[$n]}; done
    for n in "${!last_secs[@]}"; do echo "$n ${last_secs[$n]}"; done |
        sort >"$times_file.$$" 2>/dev/null && mv "$times_file.$$" "$times_file"
fi

((failed)) && echo "failed: ${failed_names[*]}"
echo "$passed passed, $failed failed"
((failed == 0))
