#!/usr/bin/env bash
# Windows sized by the round trip (docs/PROTOCOL.md, "Windows"): through a
# proxy that delays each direction by 5 ms, a producer and a consumer with
# default settings move many batches per round trip. Counted on the
# server (MONITOR), not timed: 4000 small batches go in far fewer push
# transactions and frame reads than a window of a few batches would need,
# and 480 batches of 64 KiB come in fewer takes than a window stuck at its
# first 1 MiB would take (it doubles while the consumer waits). Every
# record arrives once.
# shellcheck source=tests/lib/integration.sh
. "$(dirname "$0")/../lib/integration.sh"
need_bin sluice-ctl sluice-producer sluice-consume gen-tfrecord delay-proxy

redis_tmp_start
bg "$T/proxy.out" "$T/proxy.err" "$BUILD/delay-proxy" --listen 127.0.0.1:0 \
    --to "127.0.0.1:$REDIS_PORT" --delay-us 5000
wait_for 10 in_file "$T/proxy.out" '^listening ' || fail "proxy: $(cat "$T/proxy.err")"
far="redis://127.0.0.1:$(awk '{print $2}' "$T/proxy.out")"
take_sha=$("$BUILD/sluice-ctl" script take | sha1sum | cut -d' ' -f1)

# monitor_start / monitor_stop: the commands Redis ran meanwhile, one per
# line, in $T/monitor.
monitor_start() {
    bg "$T/monitor" "$T/monitor.err" redis-cli -h 127.0.0.1 -p "$REDIS_PORT" monitor
    MON_PID=$BG_PID
    wait_for 10 in_file "$T/monitor" OK || fail "redis-cli monitor did not start"
}
monitor_stop() {
    rcli PING >/dev/null   # the last line MONITOR writes is this one's
    wait_for 10 in_file "$T/monitor" '"PING"' || fail "MONITOR missed the last command"
    kill "$MON_PID"
}
count() { grep -c -- "$1" "$T/monitor" || true; }

# run NAME RECORDS MIN MAX: pushes RECORDS records of MIN..MAX bytes, one
# per batch, then consumes them, both through the proxy with defaults.
run() {
    local name=$1 n=$2 line sum got
    line=$(gen "$T/$name.tfrecord" "$n" 7 "$3" "$4")
    sum=$(kv checksum "$line")
    ctl create "$name" --max-batches 100000 --max-bytes 1G >/dev/null
    monitor_start
    "$BUILD/sluice-producer" --redis "$far" --queue "$name" --format tfrecord --batch-size 1 \
        --quiet "$T/$name.tfrecord" || fail "$name: producer failed"
    monitor_stop
    PUSHES=$(count '"EXEC"')
    monitor_start
    got=$("$BUILD/sluice-consume" --redis "$far" --queue "$name" --count "$n" --summary) ||
        fail "$name: consumer failed"
    monitor_stop
    [[ $(kv batches "$got") == "$n" && $(kv checksum "$got") == "$sum" ]] ||
        fail "$name: consumed '$got', pushed $n batches with checksum $sum"
    FETCHES=$(($(count '"MGET"') + $(count '"GET" "sluice:')))
    TAKES=$(count "\"EVALSHA\" \"$take_sha\"")
}

run small 4000 200 800
note "4000 batches of 200-800 bytes: $PUSHES push transactions, $TAKES takes, $FETCHES frame reads"
# A window of 4 batches: 2000 transactions of 2, 1000 takes and reads.
((PUSHES <= 200)) || fail "$PUSHES push transactions for 4000 batches (groups of 64: about 63)"
((TAKES <= 40)) || fail "$TAKES takes for 4000 batches (up to 1024 each)"
((FETCHES <= 120)) || fail "$FETCHES frame reads for 4000 batches (about 1 MiB each)"

run big 480 65536 65536
note "480 batches of 64 KiB: $PUSHES push transactions, $TAKES takes, $FETCHES frame reads"
# At a window of 1 MiB, 16 a take: 30 takes; doubling: 16, 32, 64... 8.
((TAKES <= 15)) || fail "$TAKES takes for 480 batches of 64 KiB: the window did not grow"
