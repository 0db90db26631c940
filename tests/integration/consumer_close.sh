#!/usr/bin/env bash
# Close hands back at once what the consumer prefetched but never returned
# (their delivery does not count); a running consumer publishes its
# counters with its heartbeat; at-most-once mode acknowledges as it fetches.
# shellcheck source=tests/lib/integration.sh
. "$(dirname "$0")/../lib/integration.sh"
need_bin sluice-ctl sluice-producer sluice-consume gen-tfrecord hold

redis_tmp_start
q=close
gen "$T/in.tfrecord" 120 8 10 300 >/dev/null
ctl create "$q" --max-batches 100 --max-bytes 64M >/dev/null
push() {
    "$BUILD/sluice-producer" --redis "$REDIS_URL" --queue "$q" --format tfrecord --batch-size 10 \
        --quiet "$T/in.tfrecord" || fail "producer failed"
}
push

# 1. One batch taken with prefetch 4: the rest is back in ready:0 at exit.
out=$("$BUILD/sluice-consume" --redis "$REDIS_URL" --queue "$q" --count 1 --prefetch 4 --summary --quiet)
[[ $(kv batches "$out") == 1 ]] || fail "consumer: $out"
ready=$(redis_tmp_cli LLEN "sluice:{$q}:ready:0")
[[ $ready == 11 ]] || fail "ready:0 holds $ready after close, expected 11 (prefetched batches not handed back?)"
[[ -z $(redis_tmp_cli --scan --pattern "sluice:{$q}:pending:*") ]] || fail "a pending list is left after close"
[[ -z $(redis_tmp_cli HGETALL "sluice:{$q}:consumers") ]] || fail "the closed consumer is still registered"
maxd=$(redis_tmp_cli HVALS "sluice:{$q}:dlv" | grep -x "[0-9]*" | sort -n | tail -n 1)
[[ ${maxd:-0} == 0 ]] || fail "a batch handed back unseen has a delivery count of $maxd"
note "requeued on close: $(redis_tmp_cli HGET "sluice:{$q}:stats" requeued)"

# 2. At most once: batches are acknowledged as they are fetched.
out=$("$BUILD/sluice-consume" --redis "$REDIS_URL" --queue "$q" --at-most-once --summary --quiet \
    --timeout-ms 1000)
[[ $(kv batches "$out") == 11 ]] || fail "at-most-once consumer: $out"
[[ $(info_field "$q" batches) == 0 ]] || fail "batches left: $(info_field "$q" batches)"
[[ $(info_field "$q" acked) == 12 ]] || fail "acked: $(info_field "$q" acked)"

# 3. Heartbeat counters of a live consumer (lease 10 s: beats every 3.3 s,
# and one at connect).
push
bg "$T/h.out" "$T/h.err" "$BUILD/hold" --redis "$REDIS_URL" --queue "$q" --count 3 --prefetch 2
h=$BG_PID
for ((i = 0; i < 200; i++)); do
    grep -q '^held 3' "$T/h.out" 2>/dev/null && break
    sleep 0.05
done
grep -q '^held 3' "$T/h.out" || fail "hold: $(cat "$T/h.err")"
cid=$(redis_tmp_cli HKEYS "sluice:{$q}:consumers")
[[ -n $cid ]] || fail "the consumer is not registered"
stats=
for ((i = 0; i < 100; i++)); do
    stats=$(redis_tmp_cli HGETALL "sluice:{$q}:cstats:$cid" | paste -sd' ')
    [[ $stats == *"batches 3 "* ]] && break
    sleep 0.1
done
note "cstats:$cid: $stats"
[[ $stats == *"batches 3 "* && $stats == *blocked_us* && $stats == *epoch* ]] ||
    fail "published counters: '$stats'"
kill -9 "$h"
echo "ok: close hands back prefetched batches unseen; at-most-once acks on fetch; counters published"
