#!/usr/bin/env bash
# The churn soak (make soak SEEDS=N): runs tests/faults/churn.sh once for
# each of N consecutive seeds, SOAK_SEED0 (default: a random one) and on,
# each with a timeout of SOAK_TIMEOUT (default 150) s, and prints per seed
# PASS/FAIL, its time and what it chose. The output of a failing seed (and,
# through CHURN_KEEP, its processes' outputs and Redis's dir) is kept in a
# directory it names (SOAK_DIR, default a new /tmp/sluice-soak.XXXXXX).
# Ends with one line "N passed, N failed"; exits non-zero on a failure.
#
#   make soak SEEDS=50                    # 50 seeds from a random one
#   SOAK_SEED0=1000 tests/soak.sh 20      # seeds 1000..1019
#   FAULT_SEED=1007 bash tests/faults/churn.sh   # replay one seed
set -uo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root" || exit 1
export BUILD=${BUILD:-build}
case $BUILD in /*) ;; *) BUILD=$root/$BUILD ;; esac
n=${1:-${SEEDS:-20}}
seed0=${SOAK_SEED0:-$(( (RANDOM << 15 | RANDOM) % 1000000 ))}
timeout_s=${SOAK_TIMEOUT:-150}
dir=${SOAK_DIR:-$(mktemp -d "${TMPDIR:-/tmp}/sluice-soak.XXXXXX")}
mkdir -p "$dir" || exit 1
echo "== churn soak: $n seeds from $seed0 (SOAK_SEED0=$seed0), failing logs in $dir"

passed=0 failed=0 failed_seeds=()
t_all=$(date +%s.%N)
for ((k = 0; k < n; k++)); do
    s=$((seed0 + k))
    log=$dir/seed-$s.log
    start=$(date +%s.%N)
    rc=0
    FAULT_SEED=$s CHURN_KEEP=$dir/seed-$s timeout -k 10 "$timeout_s" bash tests/faults/churn.sh \
        </dev/null >"$log" 2>&1 || rc=$?
    secs=$(awk -v a="$start" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }')
    chose=$(sed -n 's/^chose: //p' "$log" | cut -c1-110)
    if ((rc == 0)); then
        printf 'PASS seed %-8s (%5ss) %s\n' "$s" "$secs" "$chose"
        passed=$((passed + 1))
        rm -f "$log"
    else
        why="exit $rc"
        ((rc == 124 || rc == 137)) && why="timed out after ${timeout_s}s"
        printf 'FAIL seed %-8s (%5ss, %s) %s\n' "$s" "$secs" "$why" "$chose"
        grep '^FAIL' "$log" | head -n 5 | sed 's/^/    | /'
        echo "    | log: $log; replay: FAULT_SEED=$s bash tests/faults/churn.sh"
        failed=$((failed + 1))
        failed_seeds+=("$s")
    fi
done
echo "churn soak: $(awk -v a="$t_all" -v b="$(date +%s.%N)" 'BEGIN { printf "%.0f", b - a }') s," \
    "seeds $seed0..$((seed0 + n - 1))"
((failed)) && echo "failed seeds: ${failed_seeds[*]} (logs in $dir)"
((failed)) || rmdir "$dir" 2>/dev/null
echo "$passed passed, $failed failed"
((failed == 0))
