#!/usr/bin/env bash
# Redis at maxmemory (noeviction) during a job: the queue's budgets
# are far above what Redis may hold, so pushes are refused with OOM. 2
# producers read 4 TFRecord shards (batches of ~64 KiB, ~7 MB per epoch)
# with nobody consuming (task lease 3 s: with 1 s, a producer waiting for
# room loses its task now and then, which lease_wait.sh shows): checked that Redis refused pushes (errorstat OOM),
# that the producers wait instead of failing (alive, no task failed, the
# job still running). Then 2 consumers start: every process
# finishes; every batch id of both epochs exactly once and acknowledged;
# per-epoch record counts and checksums equal the shards'; nothing left.
# One epoch: with budgets above maxmemory, producers running an epoch ahead
# can fill Redis with batches nobody may take yet and stall the current
# epoch (README, limits: keep the byte budget below maxmemory).
# shellcheck source=tests/lib/faults.sh
. "$(dirname "$0")/../lib/faults.sh"
need_bin sluice-ctl sluice-producer sluice-consume gen-tfrecord

redis_tmp_start
q=faultoom
shards=4 per=400 bsize=14 epochs=1
make_shards "$shards" "$per" "$T/job.manifest" 1024 8192   # ~1.8 MB per shard
ctl create "$q" --max-batches 100000 --max-bytes 4G --lease-ms 1000 >/dev/null
ctl submit "$q" --manifest "$T/job.manifest" --epochs "$epochs" --batch-size "$bsize" \
    --shuffle-seed "$SEED" >/dev/null || fail "submit failed"

used=$(rcli INFO memory | tr -d '\r' | sed -n 's/^used_memory://p')
rand 2 4; extra=$RAND
limit=$((used + extra * 1024 * 1024))
rcli CONFIG SET maxmemory-policy noeviction >/dev/null
rcli CONFIG SET maxmemory "$limit" >/dev/null
echo "used_memory $used, maxmemory $limit (+$extra MiB)"

pids=() names=() cons=()
for k in 1 2; do
    start_producer "$T/p$k" "$q" --id "p$k" --lease-ms 3000
    pids+=("$BG_PID"); names+=("p$k")
done
rand 3 5; wait_s=$RAND
sleep "$wait_s"
for i in 0 1; do
    kill -0 "${pids[i]}" 2>/dev/null || fail "${names[i]} exited at maxmemory: $(tail -n 3 "$T/${names[i]}.err")"
done
ooms=$(rcli INFO errorstats | tr -d '\r' | sed -n 's/^errorstat_OOM:count=\([0-9]*\).*/\1/p')
held=$(info_field "$q" batches)
peak=$(rcli INFO memory | tr -d '\r' | sed -n 's/^used_memory_peak://p')
echo "after $wait_s s: ${ooms:-0} OOM refusals, $held batches held, used_memory_peak $peak"
(( ${ooms:-0} > 0 )) || fail "Redis never refused a push with OOM: maxmemory was not reached"
[[ $(rcli HGET "sluice:{$q}:jrun" state) == running ]] || fail "the job is not running any more"
[[ $(rcli LLEN "sluice:{$q}:failed") == 0 ]] || fail "a task failed at maxmemory: $(ctl info "$q")"
grep -qi 'fail\|error' "$T/p1.err" "$T/p2.err" && note "producer messages: $(cat "$T/p1.err" "$T/p2.err")"

for k in 1 2; do
    start_consumer "$T/c$k" "$q" --quiet
    pids+=("$BG_PID"); names+=("c$k"); cons+=("$T/c$k")
done
for i in "${!pids[@]}"; do
    rc=0; wait_pid "${pids[i]}" 90 || rc=$?
    ((rc == 0)) || fail "${names[i]} exit $rc: $(tail -n 3 "$T/${names[i]}.err")"
done
ooms=$(rcli INFO errorstats | tr -d '\r' | sed -n 's/^errorstat_OOM:count=\([0-9]*\).*/\1/p')
echo "job done: ${ooms:-0} OOM refusals in all; $(grep -h 'pushed' "$T/p1.err" "$T/p2.err" | paste -sd'|')"
check_ids "$q" "$epochs" "$(batches_per_shard "$shards" "$per" "$bsize")" --exact "${cons[@]}"
epoch_sums_match "$epochs" "${cons[@]}"
echo "ok: maxmemory $limit (seed $SEED): producers waited through OOM, every record exactly once"
