#!/usr/bin/env bash
# Survives a Redis restart: with AOF and appendfsync always, Redis is
# killed with -9 in the middle of a stream and started again on the same
# port and dir about a second later. Producer and consumer reconnect and
# finish; every record arrives exactly once (counts and checksum match).
# shellcheck source=tests/lib/integration.sh
. "$(dirname "$0")/../lib/integration.sh"
need_bin sluice-ctl sluice-producer sluice-consume gen-tfrecord

redis_tmp_start --appendonly yes --appendfsync always
q=restart
nrec=${RESTART_RECORDS:-6000}
bsize=10
nbatches=$(( (nrec + bsize - 1) / bsize ))
line=$(gen "$T/in.tfrecord" "$nrec" 5 500 4000)
gen_sum=$(kv checksum "$line")
# A small batch budget keeps the producer and the consumer in lockstep, so
# the kill lands while both are busy.
ctl create "$q" --max-batches 8 --max-bytes 64M >/dev/null

bg "$T/c.out" "$T/c.err" "$BUILD/sluice-consume" --redis "$REDIS_URL" --queue "$q" \
    --summary --quiet --timeout-ms 5000
c=$BG_PID
bg "$T/p.out" "$T/p.err" "$BUILD/sluice-producer" --redis "$REDIS_URL" --queue "$q" \
    --format tfrecord --batch-size "$bsize" --summary --quiet "$T/in.tfrecord"
p=$BG_PID

# Kill once a tenth of the batches went through.
acked=0
for ((i = 0; i < 400; i++)); do
    acked=$(redis_tmp_cli HGET "sluice:{$q}:stats" acked)
    (( ${acked:-0} >= nbatches / 10 )) && break
    kill -0 "$p" 2>/dev/null || break
    sleep 0.02
done
kill -0 "$p" 2>/dev/null || fail "producer finished before the kill (acked $acked of $nbatches): raise RESTART_RECORDS"
kill -0 "$c" 2>/dev/null || fail "consumer exited before the kill: $(cat "$T/c.err")"
redis_tmp_kill9
note "killed redis -9 at acked=$acked of $nbatches batches"
sleep 1
kill -0 "$p" 2>/dev/null || fail "producer exited while Redis was down: $(cat "$T/p.err")"
kill -0 "$c" 2>/dev/null || fail "consumer exited while Redis was down: $(cat "$T/c.err")"
redis_tmp_restart
note "redis restarted; acked after AOF load: $(redis_tmp_cli HGET "sluice:{$q}:stats" acked)"

rc=0; wait_pid "$p" 90 || rc=$?
((rc == 0)) || fail "producer exit $rc: $(cat "$T/p.err")"
rc=0; wait_pid "$c" 60 || rc=$?
((rc == 0)) || fail "consumer exit $rc: $(cat "$T/c.err")"
pline=$(cat "$T/p.out"); cline=$(cat "$T/c.out")
note "producer: $pline"; note "consumer: $cline"
[[ $(kv records "$pline") == "$nrec" ]] || fail "producer pushed $(kv records "$pline") records, expected $nrec"
[[ $(kv checksum "$pline") == "$gen_sum" ]] || fail "producer checksum $(kv checksum "$pline") != $gen_sum"
crec=$(kv records "$cline")
(( crec >= nrec )) || fail "consumer got $crec records, expected $nrec: records lost"
(( crec == nrec )) || fail "consumer got $crec records, expected $nrec: duplicates"
[[ $(kv checksum "$cline") == "$gen_sum" ]] || fail "consumer checksum $(kv checksum "$cline") != $gen_sum"
[[ $(info_field "$q" batches) == 0 ]] || fail "batches left in Redis: $(info_field "$q" batches)"
echo "ok: $nrec records exactly once across a Redis kill -9 + restart (dup_dropped $(info_field "$q" dup_dropped))"
