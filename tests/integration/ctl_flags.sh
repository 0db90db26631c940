#!/usr/bin/env bash
# sluice-ctl's valued flags take "--opt value" and "--opt=value" alike, in
# every command: create (--max-batches=8 --max-bytes=64M ...), submit
# (--shuffle-seed=7 ...: the same task orders as "--shuffle-seed 7";
# --shuffle-buffer=6, and --drop-remainder, a flag without value), stat
# (--interval-ms=...), metrics (--addr=... --interval-ms=...) and --redis=.
# A bad value is still a usage error (exit 2) whose message names the flag,
# written either way; zero stays refused where it is refused.
# shellcheck source=tests/lib/integration.sh
. "$(dirname "$0")/../lib/integration.sh"
need_bin sluice-ctl

redis_tmp_start
url=redis://127.0.0.1:$REDIS_PORT
ctl() { "$BUILD/sluice-ctl" --redis "$url" "$@"; }
seq 1 40 >"$T/a.txt"
printf 'lines %s split=5\n' "$T/a.txt" >"$T/m"

failures=0
bad() { echo "FAIL $*"; failures=$((failures + 1)); }
# field OUT NAME VALUE: info's text OUT has the line "NAME: VALUE".
field() { grep -qx -- "$2: $3" <<<"$1" || bad "info has no '$2: $3': $1"; }

# ---- create ---------------------------------------------------------------
ctl create eq --max-batches=8 --max-bytes=64M --lease-ms=2000 --max-deliveries=5 \
    --max-frame-bytes=1M >/dev/null || bad "create with --opt=value failed"
out=$(ctl info eq)
field "$out" max_batches 8
field "$out" max_bytes 67108864
field "$out" lease_ms 2000
field "$out" max_deliveries 5
[[ $(rcli HGET 'sluice:{eq}:meta' max_frame) == 1048576 ]] || bad "--max-frame-bytes=1M not stored"
ctl create co --max-batches=4 --max-bytes=256KiB --coordinated --consumers=2 --remainder=pad \
    >/dev/null || bad "coordinated create with --opt=value failed"
out=$(ctl info co)
field "$out" max_bytes 262144
field "$out" coordinated "2 ranks, remainder pad"
ctl create pq --max-batches 4 --max-bytes=1G --partitions=2 >/dev/null ||
    bad "partitioned create with --partitions=2 failed"
out=$(ctl info pq)
field "$out" partitions 2
field "$out" max_bytes $((2 << 30))

# ---- submit: --shuffle-seed=7 gives the orders "--shuffle-seed 7" gives ----
ctl create s1 --max-batches 4 --max-bytes 1M >/dev/null
ctl create s2 --max-batches 4 --max-bytes 1M >/dev/null
ctl submit s1 --manifest "$T/m" --epochs 2 --batch-size 4 --shuffle-seed 7 --max-attempts 2 \
    --max-crashes 3 >/dev/null || bad "submit with spaces failed"
ctl submit s2 --manifest="$T/m" --epochs=2 --batch-size=4 --shuffle-seed=7 --max-attempts=2 \
    --max-crashes=3 --shuffle-buffer=6 --drop-remainder >/dev/null ||
    bad "submit with --opt=value failed"
for e in 0 1; do
    a=$(rcli LRANGE "sluice:{s1}:tasks:$e" 0 -1 | tr '\n' ' ')
    b=$(rcli LRANGE "sluice:{s2}:tasks:$e" 0 -1 | tr '\n' ' ')
    [[ -n $a && $a == "$b" ]] || bad "epoch $e: order '$b' with --shuffle-seed=7, '$a' with a space"
done
out=$(ctl jobs s2)
field "$out" shuffle_seed 7
field "$out" max_attempts 2
field "$out" max_crashes 3
field "$out" batch_size 4
field "$out" shuffle_buffer 6
field "$out" drop_remainder yes
out=$(ctl jobs s1)
field "$out" shuffle_buffer 0
field "$out" drop_remainder no

# ---- stat, metrics, --redis= ------------------------------------------------
n=$(timeout -k 3 -s INT 2 "$BUILD/sluice-ctl" --redis="$url" stat eq --watch --interval-ms=200 --json |
    grep -c '"queue":"eq"' || true)
((n >= 3)) || bad "stat --watch --interval-ms=200 gave $n snapshots in 2 s"
port=$(redis_tmp_free_port)
bg "$T/metrics.out" "$T/metrics.err" "$BUILD/sluice-ctl" --redis "$url" metrics eq \
    --addr="127.0.0.1:$port" --interval-ms=200
metrics_pid=$BG_PID
wait_for 10 curl -sf -o "$T/metrics.txt" "http://127.0.0.1:$port/metrics" ||
    bad "metrics --addr=127.0.0.1:$port serves nothing: $(cat "$T/metrics.err")"
grep -q '^sluice_queue_max_batches{queue="eq"} 8$' "$T/metrics.txt" ||
    bad "metrics: no max_batches 8: $(head -c 300 "$T/metrics.txt")"
kill -INT "$metrics_pid"
rc=0
wait_pid "$metrics_pid" 10 || rc=$?
((rc == 0)) || bad "metrics ended with $rc after SIGINT"

# ---- bad values: exit 2, the flag named --------------------------------------
# refused CODE REGEX ARGS...: sluice-ctl ARGS exits 2 (usage) with a first
# stderr line matching REGEX, and Redis is unchanged.
refused() {
    local re=$1 rc=0 before after first
    shift
    before=$(rcli --scan | sort)
    ctl "$@" >"$T/out" 2>"$T/err" </dev/null || rc=$?
    after=$(rcli --scan | sort)
    first=$(head -n 1 "$T/err")
    if ((rc != 2)); then
        bad "[$*]: exit $rc, expected 2: $(cat "$T/err")"
    elif ! grep -qE -- "$re" <<<"$first"; then
        bad "[$*]: first stderr line does not match /$re/: '$first'"
    elif [[ $before != "$after" ]]; then
        bad "[$*]: refused, but Redis changed"
    else
        echo "ok   [$*] -> 2: $first"
    fi
}
refused "^sluice-ctl: --max-batches 'abc' is not a positive integer" \
    create x --max-batches=abc --max-bytes 1M
refused "^sluice-ctl: --max-batches '0' is not a positive integer" \
    create x --max-batches=0 --max-bytes 1M
refused "^sluice-ctl: --max-bytes '0' is not a positive size" create x --max-batches 1 --max-bytes 0
refused "^sluice-ctl: --max-bytes '12X' is not a positive size" \
    create x --max-batches 1 --max-bytes=12X
refused "^sluice-ctl: --max-batches '' is not a positive integer" \
    create x --max-batches= --max-bytes 1M
refused "^sluice-ctl: --max-bytes needs a value" create x --max-batches 1 --max-bytes
refused "^sluice-ctl: --remainder 'up' is not 'drop' or 'pad'" \
    create x --max-batches 1 --max-bytes 1M --coordinated --consumers 2 --remainder=up
refused "^sluice-ctl: create: --lease-ms 999 is below the minimum" \
    create x --max-batches 1 --max-bytes 1M --lease-ms=999
refused "^sluice-ctl: create: --partitions 2000 is more than 1024" \
    create x --max-batches 1 --max-bytes 1M --partitions=2000
refused "^sluice-ctl: --epochs '0' is not an integer in 1\.\.1000000" \
    submit x --manifest "$T/m" --epochs=0 --batch-size 1
refused "^sluice-ctl: --shuffle-seed '-1' is not an integer" \
    submit x --manifest "$T/m" --epochs 1 --batch-size 1 --shuffle-seed=-1
refused "^sluice-ctl: --shuffle-buffer '1048577' is not an integer in 0\.\.1048576" \
    submit x --manifest "$T/m" --epochs 1 --batch-size 1 --shuffle-buffer=1048577
refused "^sluice-ctl: submit: unknown argument '--drop-remainder=1'" \
    submit x --manifest "$T/m" --epochs 1 --batch-size 1 --drop-remainder=1
refused "^sluice-ctl: --interval-ms '5' is not an integer in 50\.\.3600000" \
    stat eq --watch --interval-ms=5
refused "^sluice-ctl: stat: --interval-ms goes with --watch" stat eq --interval-ms=100
refused "^sluice-ctl: --interval-ms 'x' is not an integer" metrics eq --addr=127.0.0.1:1 \
    --interval-ms=x
refused "^sluice-ctl: metrics: --addr HOST:PORT is required" metrics eq --interval-ms=100
refused "^sluice-ctl: --addr needs a value" metrics eq --addr
refused "--addr" metrics eq --addr=nowhere
refused "^sluice-ctl: submit: unknown argument '--epoch=1'" \
    submit x --manifest "$T/m" --epoch=1 --batch-size 1

# ---- --version ---------------------------------------------------------------
v=$("$BUILD/sluice-ctl" --version) || bad "--version failed"
[[ $v =~ ^sluice-ctl\ [0-9][^\ ]*\ \(libsluice\ .*wire\ format\ [0-9]+\)$ ]] ||
    bad "--version printed '$v'"

((failures == 0)) || fail "$failures flag cases misbehaved"
echo "ok: every flag takes --opt=value"
