#!/usr/bin/env bash
# A Redis OOM reply is backpressure: with maxmemory only ~2 MB above what an
# empty server uses and queue budgets far larger, a producer with ~20 MB to
# push waits through the OOM refusals instead of failing, and once a
# consumer drains the queue everything arrives.
# shellcheck source=tests/lib/integration.sh
. "$(dirname "$0")/../lib/integration.sh"
need_bin sluice-ctl sluice-producer sluice-consume gen-tfrecord

redis_tmp_start
q=oom
line=$(gen "$T/in.tfrecord" 4400 11 1024 8192)
gen_sum=$(kv checksum "$line")
ctl create "$q" --max-batches 100000 --max-bytes 4G >/dev/null

used=$(redis_tmp_cli INFO memory | tr -d '\r' | sed -n 's/^used_memory://p')
limit=$((used + 2 * 1024 * 1024))
redis_tmp_cli CONFIG SET maxmemory-policy noeviction >/dev/null
redis_tmp_cli CONFIG SET maxmemory "$limit" >/dev/null
note "used_memory $used, maxmemory $limit"

# ~14 records of 1-8 KiB: batches of ~64 KiB.
bg "$T/p.out" "$T/p.err" "$BUILD/sluice-producer" --redis "$REDIS_URL" --queue "$q" \
    --format tfrecord --batch-size 14 --summary --quiet "$T/in.tfrecord"
p=$BG_PID

sleep 4
kill -0 "$p" 2>/dev/null || fail "producer exited under OOM (expected it to wait): $(cat "$T/p.err")"
ooms=$(redis_tmp_cli INFO errorstats | tr -d '\r' | sed -n 's/^errorstat_OOM:count=\([0-9]*\).*/\1/p')
note "OOM refusals so far: ${ooms:-0}; batches held: $(held "$q")"
(( ${ooms:-0} > 0 )) || fail "Redis never refused a push with OOM: the test did not reach maxmemory"

bg "$T/c.out" "$T/c.err" "$BUILD/sluice-consume" --redis "$REDIS_URL" --queue "$q" \
    --summary --quiet --timeout-ms 5000
c=$BG_PID
rc=0; wait_pid "$p" 100 || rc=$?
((rc == 0)) || fail "producer exit $rc: $(cat "$T/p.err")"
rc=0; wait_pid "$c" 60 || rc=$?
((rc == 0)) || fail "consumer exit $rc: $(cat "$T/c.err")"
pline=$(cat "$T/p.out"); cline=$(cat "$T/c.out")
note "producer: $pline"; note "consumer: $cline"
[[ $(kv records "$pline") == 4400 ]] || fail "producer pushed $(kv records "$pline") records, expected 4400"
[[ $(kv records "$cline") == 4400 ]] || fail "consumer got $(kv records "$cline") records, expected 4400"
[[ $(kv checksum "$pline") == "$gen_sum" ]] || fail "producer checksum $(kv checksum "$pline") != $gen_sum"
[[ $(kv checksum "$cline") == "$gen_sum" ]] || fail "consumer checksum $(kv checksum "$cline") != $gen_sum"
[[ $(info_field "$q" batches) == 0 ]] || fail "batches left: $(info_field "$q" batches)"
echo "ok: 4400 records through a Redis with maxmemory $limit (${ooms} OOM refusals seen)"
