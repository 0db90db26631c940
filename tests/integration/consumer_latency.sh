#!/usr/bin/env bash
# What next() costs when the batch is already prefetched: 3000 batches of
# 16 x 1 KiB, a "training step" of 300 µs between calls (time for the
# background thread to refill), every next() and release() timed. Prints the
# median and tail; fails only if the median is far from microseconds.
# Alone (tests/run.sh): it times next() in microseconds.
# test: serial
# shellcheck source=tests/lib/integration.sh
. "$(dirname "$0")/../lib/integration.sh"
need_bin sluice-ctl next-latency

redis_tmp_start
ctl create lat --max-batches 100000 --max-bytes 1G >/dev/null
out=$("$BUILD/next-latency" --redis "$REDIS_URL" --queue lat --batches 3000 --step-us 300) ||
    fail "next-latency failed: $out"
echo "-- $out" | tr "\n" " "; echo
out=$(printf "%s\n" "$out" | head -n 1)
med=$(kv median "$out")
awk -v m="$med" 'BEGIN { exit !(m < 100) }' || fail "median next() of ${med} µs on prefetched batches"
[[ $(info_field lat acked) == 3000 ]] || fail "acked $(info_field lat acked) of 3000"
echo "ok: next() on a prefetched batch: median ${med} µs ($out)"
