#!/usr/bin/env bash
# Runs each named libFuzzer target ($BUILD/fuzz/fuzz-NAME) for FUZZ_TIME
# seconds on a scratch copy of tests/fuzz/corpus/NAME, so that the seed
# corpus in the repository stays small. A crash, or an input that takes
# longer than 10 s (libFuzzer's -timeout; its default is 20 minutes), stops
# the run; keep its input in tests/fuzz/regress/NAME/ once fixed. Ends
# with "N passed, N failed".
set -uo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
BUILD=${BUILD:-build}
case $BUILD in /*) ;; *) BUILD=$root/$BUILD ;; esac
time_s=${FUZZ_TIME:-60}
passed=0 failed=0
for name in "$@"; do
    work=$(mktemp -d)
    cp -r "$root/tests/fuzz/corpus/$name/." "$work/" 2>/dev/null || true
    [[ -d $root/tests/fuzz/regress/$name ]] && cp -r "$root/tests/fuzz/regress/$name/." "$work/"
    echo "== fuzz $name for ${time_s}s"
    if (cd "$work" && "$BUILD/fuzz/fuzz-$name" -max_total_time="$time_s" -max_len=65536 \
            -timeout=10 -print_final_stats=1 -artifact_prefix="$work/found-" . >"$work/log" 2>&1); then
        grep -E '^stat::number_of_executed_runs|^stat::new_units_added' "$work/log" | sed 's/^/   /'
        echo "PASS fuzz $name"
        passed=$((passed + 1))
        rm -rf "$work"
    else
        tail -n 40 "$work/log"
        found=$(ls "$work"/found-* 2>/dev/null | head -n 1)
        if [[ -n $found ]]; then
            echo "FAIL fuzz $name: input kept as $found (copy it to tests/fuzz/regress/$name/ once fixed)"
        else
            echo "FAIL fuzz $name: the fuzzer did not run to its end (log: $work/log)"
        fi
        failed=$((failed + 1))
    fi
done
echo "$passed passed, $failed failed"
((failed == 0))
