#!/usr/bin/env bash
# Redis killed with -9 and restarted during a 2-epoch job, with AOF and
# appendfsync always. 2 producers (task lease 1 s, throttled --exec source
# so the job lasts ~8 s) and 2 consumers (sluice-consume --print-ids
# --summary --epochs) run the job; Redis is killed twice, at seeded random
# moments (one in each half of the job), stays down a random 0.3-2 s and
# comes back on the same port and dir.
# Checked: no producer or consumer exits while Redis is down; all of them
# finish; every batch id of both epochs delivered exactly once and
# acknowledged (nobody was killed, so no duplicate at all); the consumers'
# per-epoch record counts and checksums equal the shards'; nothing left.
# test: long
# shellcheck source=tests/lib/faults.sh
. "$(dirname "$0")/../lib/faults.sh"
need_bin sluice-ctl sluice-producer sluice-consume

redis_tmp_start --appendonly yes --appendfsync always
q=faultredis
shards=6 per=300 bsize=10 epochs=2
make_line_shards "$shards" "$per" "$T/job.manifest"
ctl create "$q" --max-batches 16 --max-bytes 64M --lease-ms 1000 >/dev/null
ctl submit "$q" --manifest "$T/job.manifest" --epochs "$epochs" --batch-size "$bsize" \
    --shuffle-seed "$SEED" >/dev/null || fail "submit failed"

pids=() names=() cons=()
for k in 1 2; do
    start_producer "$T/p$k" "$q" --id "p$k" --lease-ms 1000 --exec "$(slow_exec 4)"
    pids+=("$BG_PID"); names+=("producer p$k")
done
for k in 1 2; do
    start_consumer "$T/c$k" "$q" --quiet
    pids+=("$BG_PID"); names+=("consumer c$k"); cons+=("$T/c$k")
done
all_alive() {
    local i
    for i in "${!pids[@]}"; do
        kill -0 "${pids[i]}" 2>/dev/null || fail "${names[i]} exited while $1: $(tail -n 3 "$T/${names[i]#* }.err")"
    done
}

t0=$(now_ms)
rand 1000 3000; at1=$RAND
rand 4000 6000; at2=$RAND
for at in "$at1" "$at2"; do
    while (( $(now_ms) - t0 < at )); do sleep 0.05; done
    acked=$(rcli HGET "sluice:{$q}:stats" acked)
    all_alive "the job ran"
    redis_tmp_kill9
    rand 300 2000; down=$RAND
    echo "at $at ms (acked ${acked:-0}): kill -9 redis-server, down for $down ms"
    ms_sleep "$down"
    all_alive "Redis was down"
    redis_tmp_restart
    echo "  restarted: acked ${acked:-0} before the kill, $(rcli HGET "sluice:{$q}:stats" acked) after the AOF load"
done

for i in "${!pids[@]}"; do
    rc=0; wait_pid "${pids[i]}" 60 || rc=$?
    ((rc == 0)) || fail "${names[i]} exit $rc: $(tail -n 3 "$T/${names[i]#* }.err")"
done
echo "all processes finished $(( $(now_ms) - t0 )) ms after the start"
grep -h 'reconnect' "$T"/*.err | head -n 4 | sed 's/^/  /' || true
check_ids "$q" "$epochs" "$(batches_per_shard "$shards" "$per" "$bsize")" --exact "${cons[@]}"
epoch_sums_match "$epochs" "${cons[@]}"
echo "ok: 2 Redis kill -9 + restarts (seed $SEED): every record of both epochs exactly once"
