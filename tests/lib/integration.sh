# Shared helpers of the integration tests (sourced; every shell helper of
# the tests lives in tests/lib). Each test runs in its own bash with
#   . "$(dirname "$0")/../lib/integration.sh"
# which gives it: strict mode, ROOT, BUILD (absolute), a scratch dir $T,
# scripts/redis-tmp.sh, SLUICE_DATA_ROOTS=$T exported (the data root of the
# producers it starts), the helpers below (fail, note, rcli, wait_for...,
# skew_env/skewed), and an EXIT trap that stops every background process
# the test started (bg) and every redis-server, and removes $T.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
BUILD=${BUILD:-build}
case $BUILD in /*) ;; *) BUILD=$ROOT/$BUILD ;; esac
PY=/usr/bin/python3
. "$ROOT/scripts/redis-tmp.sh"

T=$(mktemp -d "${TMPDIR:-/tmp}/sluice-test.XXXXXX")
_BG_PIDS=()
# A job-mode producer reads only under its data roots; every test keeps its
# data in $T. A test about the roots sets its own (--data-root wins).
export SLUICE_DATA_ROOTS=$T

_test_cleanup() {
    local rc=$? p
    trap - EXIT
    for p in "${_BG_PIDS[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
    # No `wait` here: bash may have dropped its jobs when the trap runs.
    for p in "${_BG_PIDS[@]}"; do
        for _ in 1 2 3 4 5 6 7 8 9 10; do kill -0 "$p" 2>/dev/null || break; sleep 0.1; done
        kill -KILL "$p" 2>/dev/null || true
    done
    redis_tmp_cleanup_all
    rm -rf "$T"
    exit "$rc"
}
trap _test_cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# fail MESSAGE...: prints why the test failed and exits 1.
fail() { echo "FAIL: $*" >&2; exit 1; }
# note MESSAGE...: progress (shown by tests/run.sh only when the test fails).
note() { echo "-- $*"; }

# rcli ARGS...: redis-cli on the test's server, raw output.
rcli() { redis_tmp_cli --raw "$@"; }
# held Q: the batches queue Q holds, the fields of its dlv hash but the
# pin '~' (docs/PROTOCOL.md, section 2).
held() {
    rcli EVAL "return redis.call('HLEN', KEYS[1]) - redis.call('HEXISTS', KEYS[1], '~')" \
        1 "sluice:{$1}:dlv"
}
# now_ms: the wall clock in milliseconds.
now_ms() { echo $(($(date +%s%N) / 1000000)); }
# wait_for SECONDS CMD...: polls CMD every 50 ms until it succeeds.
wait_for() {
    local secs=$1 i
    shift
    for ((i = 0; i < secs * 20; i++)); do
        "$@" && return 0
        sleep 0.05
    done
    return 1
}
# in_file FILE TEXT: FILE exists and holds TEXT.
in_file() { grep -q -- "$2" "$1" 2>/dev/null; }
# owner_is Q TASK ID: TASK of queue Q is claimed by producer ID.
owner_is() { [[ $(rcli HGET "sluice:{$1}:towner" "$2") == "$3" ]]; }
# held_is Q N: queue Q holds N batches.
held_is() { [[ $(held "$1") == "$2" ]]; }

# consumers_are Q N: N consumers of queue Q are registered (have opened).
# A consumer that opens once an epoch is over and drained starts at the
# next one (docs/PROTOCOL.md): a test that wants every consumer to see
# every epoch waits for this before it starts the producers.
consumers_are() { [[ $(rcli HLEN "sluice:{$1}:consumers") == "$2" ]]; }

# need_bin NAME...: the test needs these programs in $BUILD.
need_bin() {
    local b
    for b in "$@"; do
        [[ -x $BUILD/$b ]] || fail "$BUILD/$b is not built (make all unit)"
    done
}

# bg OUTFILE ERRFILE CMD...: runs CMD in the background with stdout/stderr
# in the files; sets BG_PID. The EXIT trap stops it if it still runs.
bg() {
    local out=$1 err=$2
    shift 2
    "$@" >"$out" 2>"$err" </dev/null &
    BG_PID=$!
    _BG_PIDS+=("$BG_PID")
}

# wait_pid PID SECONDS: waits for a background job; returns its exit status,
# or 124 (after killing it) if it runs longer than SECONDS.
wait_pid() {
    local pid=$1 secs=$2 i rc
    for ((i = 0; i < secs * 20; i++)); do
        kill -0 "$pid" 2>/dev/null || break
        sleep 0.05
    done
    if kill -0 "$pid" 2>/dev/null; then
        kill -KILL "$pid" 2>/dev/null || true
        wait "$pid" 2>/dev/null || true
        return 124
    fi
    rc=0
    wait "$pid" || rc=$?
    return "$rc"
}

# kv KEY TEXT: prints the value of KEY=value in TEXT (first match), or
# fails the test when it is missing.
kv() {
    local v
    v=$(printf '%s\n' "$2" | grep -o "\\b$1=[^ ]*" | head -n 1 | cut -d= -f2-) || true
    [[ -n $v ]] || fail "no '$1=' in: $2"
    printf '%s\n' "$v"
}

# hexsum HEX...: sum of 64-bit hex values modulo 2^64, as 16 hex digits.
hexsum() {
    "$PY" -c 'import sys; print("%016x" % (sum(int(x, 16) for x in sys.argv[1:]) % (1 << 64)))' "$@"
}

# lines_sum: the --summary checksum of the lines read on stdin (the sum
# modulo 2^64 of the FNV-1a 64 hash of each line, without its newline).
lines_sum() {
    "$PY" -c '
import sys
h = 0
for line in sys.stdin.buffer.read().splitlines():
    x = 0xcbf29ce484222325
    for b in line:
        x = ((x ^ b) * 0x100000001b3) % (1 << 64)
    h = (h + x) % (1 << 64)
print("%016x" % h)'
}

# ctl ARGS...: sluice-ctl against the current server.
ctl() { "$BUILD/sluice-ctl" --redis "$REDIS_URL" "$@"; }

# info_field QUEUE FIELD: one value from `sluice-ctl info`.
info_field() {
    local out v
    out=$(ctl info "$1") || fail "sluice-ctl info $1 failed: $out"
    v=$(printf '%s\n' "$out" | sed -n "s/^$2: *//p" | head -n 1)
    [[ -n $v ]] || fail "sluice-ctl info $1 has no '$2:' line: $out"
    printf '%s\n' "$v"
}

# cpu_ticks PID: user + system CPU time of a process, in clock ticks.
cpu_ticks() {
    # Fields after the "(comm)" field: utime and stime are fields 14 and 15
    # of the whole line, i.e. 12 and 13 after the closing parenthesis.
    local stat
    stat=$(<"/proc/$1/stat") || return 1
    stat=${stat##*) }
    local f
    read -ra f <<<"$stat"
    echo $((f[11] + f[12]))
}

# gen FILE RECORDS SEED [MIN MAX]: writes a TFRecord file; prints its
# "records=N checksum=X" line.
gen() {
    local args=(--records "$2" --seed "$3")
    [[ -n ${4:-} ]] && args+=(--min-size "$4")
    [[ -n ${5:-} ]] && args+=(--max-size "$5")
    "$BUILD/gen-tfrecord" "${args[@]}" "$1" || fail "gen-tfrecord ${args[*]} $1 failed"
}

# skew_env MS: sets SKEW to the command prefix (an array: env ...) that
# runs a program with its wall clock MS milliseconds off (may be negative)
# through the LD_PRELOAD shim $BUILD/libskew.so (tests/tools/skew.c):
#   bg OUT ERR "${SKEW[@]}" "$BUILD/sluice-producer" ...   # BG_PID is the program's
# Under ASan (make asan) the sanitizer runtime must come first in the
# preload list, and Python then runs without leak detection (as PYCMD).
skew_env() {
    local asan
    asan=$(ldd "$BUILD/libsluice.so" 2>/dev/null | awk '/libasan/ && !n++ { print $3 }')
    SKEW=(env "SLUICE_SKEW_MS=$1" "LD_PRELOAD=${asan:+$asan:}$BUILD/libskew.so")
    [[ -z $asan ]] || SKEW+=("ASAN_OPTIONS=detect_leaks=0${ASAN_OPTIONS:+:$ASAN_OPTIONS}")
}
# skewed MS CMD...: runs CMD (in the foreground) with its clock MS ms off.
skewed() {
    local SKEW
    skew_env "$1"
    shift
    "${SKEW[@]}" "$@"
}
