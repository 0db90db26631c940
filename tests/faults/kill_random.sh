#!/usr/bin/env bash
# Seeded random kill -9 of producers and consumers during a 2-epoch job.
# 3 producers (task lease 1 s) and 3 consumers (queue lease 1 s) run a job
# of 12 shards x 2 epochs; the producers read through a throttled --exec
# source (tests/faults/slow_emit.py) so the job lasts ~20 s. One consumer is
# sluice-consume --print-ids, two are slow trainers on the Python binding
# (tests/faults/slow_consume.py: a random 2-25 ms step per batch), which
# hold the batch in hand (and any prefetched) unacknowledged while they
# work, so a kill leaves batches to hand back. Every round
# waits a random 0.2-0.9 s, kills one random live process with -9 and
# starts a replacement; at least KILL_ROUNDS (default 20) rounds, and on
# until the job is finished (at most 80).
# Checked (tests/faults/check_ids.py, over the --print-ids output of every
# consumer, killed ones included): every batch id of both epochs delivered
# and acknowledged; a duplicate only where an earlier copy went to a killed
# consumer, carrying deliveries >= 2; nothing left in Redis; job finished.
# test: long
# shellcheck source=tests/lib/faults.sh
. "$(dirname "$0")/../lib/faults.sh"
# shellcheck source=tests/lib/python.sh
. "$ROOT/tests/lib/python.sh"
need_bin sluice-ctl sluice-producer sluice-consume

redis_tmp_start
q=faultkill
shards=12 per=300 bsize=10 epochs=2
rounds=${KILL_ROUNDS:-20}
delay_ms=${KILL_EMIT_DELAY_MS:-5}
make_line_shards "$shards" "$per" "$T/job.manifest"
# --max-attempts / --max-deliveries 1000: a task whose producer is killed
# three times is not a failed task here, and a batch held by several killed
# consumers in a row is not poison: this scenario wants both delivered.
ctl create "$q" --max-batches 16 --max-bytes 64M --lease-ms 1000 --max-deliveries 1000 >/dev/null
ctl submit "$q" --manifest "$T/job.manifest" --epochs "$epochs" --batch-size "$bsize" \
    --shuffle-seed "$SEED" --max-attempts 1000 >/dev/null || fail "submit failed"
exec_cmd=$(slow_exec "$delay_ms")

# Slots 0-2 are producers, 3-5 consumers; pid[] and out[] are the current
# process of each slot; killed_out lists the outputs of killed consumers.
pid=() out=() killed_out=() all_cons=()
nstarted=0
start_slot() {
    local s=$1
    nstarted=$((nstarted + 1))
    if ((s < 3)); then
        out[s]=$T/p$nstarted
        start_producer "${out[s]}" "$q" --id "p$nstarted" --lease-ms 1000 \
            --exec "$exec_cmd"
    elif ((s == 3)); then
        out[s]=$T/c$nstarted
        start_consumer "${out[s]}" "$q" --quiet
        all_cons+=("${out[s]}")
    else
        out[s]=$T/c$nstarted
        bg "${out[s]}" "${out[s]}.err" "${PYCMD[@]}" "$FAULTS/slow_consume.py" "$REDIS_URL" "$q" \
            "$((SEED + nstarted))" 2 25
        all_cons+=("${out[s]}")
    fi
    pid[s]=$BG_PID
}
for s in 0 1 2 3 4 5; do start_slot "$s"; done

t0=$(now_ms)
kills_p=0 kills_c=0
job_state() { rcli HGET "sluice:{$q}:jrun" state; }
# At least $rounds rounds, and on until the job is finished (the end of the
# last epoch is posted), so that kills also land near its end.
for ((r = 1; r <= rounds || r <= 80; r++)); do
    if ((r > rounds)) && [[ $(job_state) == finished ]]; then break; fi
    rand 200 900
    ms_sleep "$RAND"
    rand 0 5
    s=$RAND
    # The chosen slot's process may have finished: take the next live one.
    for ((j = 0; j < 6; j++)); do
        kill -0 "${pid[s]}" 2>/dev/null && break
        s=$(( (s + 1) % 6 ))
    done
    if ! kill -0 "${pid[s]}" 2>/dev/null; then
        ((r > rounds)) && break
        fail "round $r: every process has exited: the job ended before $rounds rounds (slow it down: KILL_EMIT_DELAY_MS)"
    fi
    { kill -KILL "${pid[s]}"; wait "${pid[s]}"; } 2>/dev/null || true
    at=$(( $(now_ms) - t0 ))
    if ((s < 3)); then
        kills_p=$((kills_p + 1)); what="producer $(basename "${out[s]}")"
    else
        kills_c=$((kills_c + 1)); what="consumer $(basename "${out[s]}")"
        killed_out+=("${out[s]}")
    fi
    note "round $r at $at ms: kill -9 $what ($(grep -c '^id ' "${out[s]}" || true) ids printed; job $(job_state))"
    start_slot "$s"
done
rounds=$((r - 1))
echo "killed $kills_p producers and $kills_c consumers in $rounds rounds over $(( $(now_ms) - t0 )) ms"

for s in 0 1 2 3 4 5; do
    rc=0; wait_pid "${pid[s]}" 90 || rc=$?
    ((rc == 0)) || fail "$(basename "${out[s]}") exit $rc after the rounds: $(tail -n 3 "${out[s]}.err")"
done
echo "all processes finished $(( $(now_ms) - t0 )) ms after the first round began"

live=()
for f in "${all_cons[@]}"; do
    [[ " ${killed_out[*]} " == *" $f "* ]] || live+=("$f")
done
info=$(ctl info "$q")
grep -qx "tasks_failed: 0" <<<"$info" || fail "a task failed: $info"
kargs=()
for f in "${killed_out[@]}"; do kargs+=(--killed "$f"); done
check_ids "$q" "$epochs" "$(batches_per_shard "$shards" "$per" "$bsize")" "${kargs[@]}" "${live[@]}"
info=$(ctl info "$q")
echo "tasks reaped: $(sed -n 's/^tasks_reaped: //p' <<<"$info"), batches requeued:" \
    "$(sed -n 's/^requeued: //p' <<<"$info"), duplicate pushes dropped: $(sed -n 's/^dup_dropped: //p' <<<"$info")"
echo "ok: $rounds kill -9 rounds (seed $SEED): every batch of both epochs delivered and acknowledged"
