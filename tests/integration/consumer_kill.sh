#!/usr/bin/env bash
# kill -9 of a consumer holding unacknowledged batches: once its lease
# (1 s here) runs out, another consumer's reaping hands them back and that
# consumer gets every one of them, flagged as redelivered (deliveries 2);
# nothing is lost (records and checksum add up) and nothing is left over.
# shellcheck source=tests/lib/integration.sh
. "$(dirname "$0")/../lib/integration.sh"
need_bin sluice-ctl sluice-producer sluice-consume gen-tfrecord hold

redis_tmp_start
q=kill
line=$(gen "$T/in.tfrecord" 120 21 10 400)
gen_sum=$(kv checksum "$line")
ctl create "$q" --max-batches 100 --max-bytes 64M --lease-ms 1000 >/dev/null
"$BUILD/sluice-producer" --redis "$REDIS_URL" --queue "$q" --format tfrecord --batch-size 10 \
    --quiet "$T/in.tfrecord" || fail "producer failed"
[[ $(info_field "$q" batches) == 12 ]] || fail "expected 12 batches queued, got $(info_field "$q" batches)"

bg "$T/h.out" "$T/h.err" "$BUILD/hold" --redis "$REDIS_URL" --queue "$q" --count 4 --prefetch 1
h=$BG_PID
for ((i = 0; i < 200; i++)); do
    grep -q '^held 4' "$T/h.out" 2>/dev/null && break
    kill -0 "$h" 2>/dev/null || fail "hold exited: $(cat "$T/h.err")"
    sleep 0.05
done
grep -q '^held 4' "$T/h.out" || fail "hold did not take 4 batches: $(cat "$T/h.out" "$T/h.err")"
held=$(awk '$1 == "id" { print $2 }' "$T/h.out" | sort)
npending=$(redis_tmp_cli EVAL "local n = 0 for _, k in ipairs(redis.call('KEYS', 'sluice:{$q}:pending:*')) do n = n + redis.call('LLEN', k) end return n" 0)
note "hold took $(echo $held) and holds $npending in its pending list"
(( npending >= 4 )) || fail "only $npending batches pending under the holder"
kill -9 "$h"
t0=$(date +%s.%N)

out=$("$BUILD/sluice-consume" --redis "$REDIS_URL" --queue "$q" --print-ids --summary --quiet \
    --count 12 --timeout-ms 10000) || fail "consumer failed: $out"
t1=$(date +%s.%N)
note "$out"
sum=$(printf '%s\n' "$out" | tail -n 1)
[[ $(kv batches "$sum") == 12 ]] || fail "got $(kv batches "$sum") batches, expected 12"
[[ $(kv records "$sum") == 120 ]] || fail "got $(kv records "$sum") records, expected 120"
[[ $(kv checksum "$sum") == "$gen_sum" ]] || fail "checksum $(kv checksum "$sum") != $gen_sum"
for id in $held; do
    d=$(printf '%s\n' "$out" | awk -v id="$id" '$1 == "id" && $2 == id { print $3 }')
    [[ $d == deliveries=2 ]] || fail "held batch $id came back with '$d', expected deliveries=2"
done
redelivered=$(printf '%s\n' "$out" | grep -c 'deliveries=2' || true)
(( redelivered >= 4 && redelivered <= npending )) ||
    fail "$redelivered batches flagged redelivered, expected 4..$npending"
[[ $(info_field "$q" batches) == 0 ]] || fail "batches left in Redis: $(info_field "$q" batches)"
[[ $(info_field "$q" acked) == 12 ]] || fail "acked $(info_field "$q" acked), expected 12"
secs=$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.1f", b - a }')
echo "ok: the killed consumer's $npending batches came back in ${secs} s (lease 1 s), 4 held ones with deliveries=2, checksum $gen_sum"
