#!/usr/bin/env bash
# A trainer slower than the queue (docs/PROTOCOL.md, "Windows"): with the
# FIFO full, the consumer's loop takes again only once next() has drained
# it to its low-water mark, and sends the acknowledgements released
# meanwhile in groups, one call per 10 ms at most, instead of a take and
# an ack call for every batch or two the trainer finishes. Counted on the
# server (MONITOR), not timed: 3000 batches of 1 KiB (more than the first
# window of 1 MiB holds) consumed with a 300 µs training step (a busy
# loop, as a step keeps its core busy) take a few takes and at most one
# ack call per 5 batches; every batch is acknowledged and the queue holds
# nothing at the end.
# shellcheck source=tests/lib/integration.sh
. "$(dirname "$0")/../lib/integration.sh"
need_bin sluice-ctl next-latency

redis_tmp_start
n=3000
ctl create slow --max-batches 100000 --max-bytes 1G >/dev/null
take_sha=$("$BUILD/sluice-ctl" script take | sha1sum | cut -d' ' -f1)
ack_sha=$("$BUILD/sluice-ctl" script ack | sha1sum | cut -d' ' -f1)

bg "$T/monitor" "$T/monitor.err" redis-cli -h 127.0.0.1 -p "$REDIS_PORT" monitor
mon=$BG_PID
wait_for 10 in_file "$T/monitor" OK || fail "redis-cli monitor did not start"
"$BUILD/next-latency" --redis "$REDIS_URL" --queue slow --batches "$n" --records 1 \
    --record-bytes 1024 --prefetch 1024 --step-us 300 >"$T/lat.out" 2>"$T/lat.err" ||
    fail "next-latency: $(cat "$T/lat.err")"
rcli PING >/dev/null   # the last line MONITOR writes is this one's
wait_for 10 in_file "$T/monitor" '"PING"' || fail "MONITOR missed the last command"
kill "$mon"

count() { grep -c -- "\"EVALSHA\" \"$1\"" "$T/monitor" || true; }
takes=$(count "$take_sha")
acks=$(count "$ack_sha")
note "$n batches at a 300 µs step: $takes takes, $acks ack calls ($(head -n 1 "$T/lat.out"))"
# A loop that takes and acknowledges as each batch leaves makes about 750
# takes and 1500 ack calls here.
((takes <= 30)) || fail "$takes takes for $n batches: the loop takes before the low-water mark"
((acks >= 1 && acks <= n / 5)) || fail "$acks ack calls for $n batches: acks are not grouped"

[[ $(rcli HGET sluice:{slow}:stats acked) == "$n" ]] ||
    fail "acked $(rcli HGET sluice:{slow}:stats acked) of $n"
[[ $(held 'slow') == 0 ]] || fail "the queue still holds $(held 'slow') batches"
echo "ok: a slow trainer's $n batches took $takes takes and $acks ack calls; all acknowledged"
