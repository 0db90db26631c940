#!/usr/bin/env bash
# Redis drops every connection, then stops answering for 3 s, during a
# 2-epoch job: CLIENT KILL TYPE normal 3 times (a random 0.1-0.4 s apart),
# later DEBUG SLEEP 3. 3 producers (throttled --exec source) and 2
# consumers (sluice-consume --print-ids --summary --epochs). Leases are 6 s,
# longer than the sleep plus a renewal period (lease/3): no lease runs out
# while Redis sleeps, so what is timed is how soon every part is back, not
# the redo of a reaped task from its start (which takes as long as the task
# had run; redone tasks are kill_random.sh's and lease_wait.sh's).
# Checked (tests/faults/progress.py): after the last kill, and after Redis
# answers again at the end of the sleep, every consumer delivers batches
# fetched anew, every producer renews its lease and the queue's pushed and
# acked counters grow, each within 2 s: no stall. Then: every process
# finishes, every batch id of both epochs exactly once and acknowledged,
# per-epoch record counts and checksums equal the shards', nothing left.
# test: long
# shellcheck source=tests/lib/faults.sh
. "$(dirname "$0")/../lib/faults.sh"
need_bin sluice-ctl sluice-producer sluice-consume

redis_tmp_start --enable-debug-command local
q=faultclients
shards=9 per=400 bsize=10 epochs=2
make_line_shards "$shards" "$per" "$T/job.manifest"
ctl create "$q" --max-batches 16 --max-bytes 64M --lease-ms 6000 >/dev/null
ctl submit "$q" --manifest "$T/job.manifest" --epochs "$epochs" --batch-size "$bsize" \
    --shuffle-seed "$SEED" >/dev/null || fail "submit failed"

pids=() names=() cons=() pargs=()
for k in 1 2 3; do
    start_producer "$T/p$k" "$q" --id "p$k" --lease-ms 6000 --exec "$(slow_exec 4)"
    pids+=("$BG_PID"); names+=("p$k"); pargs+=(--producer "p$k")
done
for k in 1 2; do
    start_consumer "$T/c$k" "$q" --quiet
    pids+=("$BG_PID"); names+=("c$k"); cons+=("$T/c$k"); pargs+=(--consumer "$T/c$k")
done
all_alive() {
    local i
    for i in "${!pids[@]}"; do
        kill -0 "${pids[i]}" 2>/dev/null || fail "${names[i]} exited $1: $(tail -n 3 "$T/${names[i]}.err")"
    done
}

rand 1500 3000; t_kill=$RAND
rand 100 400; gap=$RAND
rand 500 1500; t_sleep=$RAND
ms_sleep "$t_kill"
all_alive "before the kills"
"$PY" "$FAULTS/progress.py" --port "$REDIS_PORT" --queue "$q" --action kill --times 3 \
    --interval-ms "$gap" "${pargs[@]}" || fail "no prompt progress after CLIENT KILL (seed $SEED)"
all_alive "after CLIENT KILL"
ms_sleep "$t_sleep"
"$PY" "$FAULTS/progress.py" --port "$REDIS_PORT" --queue "$q" --action sleep --seconds 3 \
    "${pargs[@]}" || fail "no prompt progress after DEBUG SLEEP 3 (seed $SEED)"
all_alive "after DEBUG SLEEP"

for i in "${!pids[@]}"; do
    rc=0; wait_pid "${pids[i]}" 60 || rc=$?
    ((rc == 0)) || fail "${names[i]} exit $rc: $(tail -n 3 "$T/${names[i]}.err")"
done
grep -h 'reconnect' "$T"/*.err | head -n 5 | sed 's/^/  /' || true
check_ids "$q" "$epochs" "$(batches_per_shard "$shards" "$per" "$bsize")" --exact "${cons[@]}"
epoch_sums_match "$epochs" "${cons[@]}"
echo "ok: CLIENT KILL and DEBUG SLEEP (seed $SEED): progress within 2 s, every record exactly once"
