#!/usr/bin/env bash
# An epoch that lost records to a failed task is loud in Python too. A job
# of 2 epochs over 2 shards whose second shard's file is gone by the time
# the producer reads it (its task fails in both epochs): the Python
# Consumer's epochs() loop raises sluice.PartialEpoch at each epoch's end
# (.epoch, .failed_tasks == 1, .failed naming the task), and goes on with
# the next epoch once it is caught; with Consumer(accept_partial=True) each
# epoch ends normally and consumer.epoch_report["failed_tasks"] == 1.
# The good shard's 20 records arrive in every epoch either way.
# shellcheck source=tests/lib/integration.sh
. "$(dirname "$0")/../lib/integration.sh"
# shellcheck source=tests/lib/python.sh
. "$ROOT/tests/lib/python.sh"
need_bin sluice-ctl sluice-producer
pyp=$ROOT/tests/integration/python_partial.py

redis_tmp_start
for k in $(seq 0 19); do echo "good $k"; done >"$T/good.txt"
echo "soon gone" >"$T/gone.txt"
printf 'lines good.txt\nlines gone.txt\n' >"$T/job.manifest"

for mode in default accept; do
    q=partial-$mode
    ctl create "$q" --max-batches 8 --max-bytes 64M >/dev/null
    ctl submit "$q" --manifest "$T/job.manifest" --epochs 2 --batch-size 5 --max-attempts 1 \
        >/dev/null || fail "$mode: submit failed"
done
rm "$T/gone.txt"

for mode in default accept; do
    q=partial-$mode
    bg "$T/$mode.out" "$T/$mode.err" "${PYCMD[@]}" "$pyp" "$REDIS_URL" "$q" "$mode"
    c=$BG_PID
    # The consumer opens before the producer starts: one that opens after
    # epoch 0 ended starts at epoch 1.
    for ((i = 0; i < 200; i++)); do
        [[ $(redis_tmp_cli HLEN "sluice:{$q}:consumers") == 1 ]] && break
        kill -0 "$c" 2>/dev/null || fail "$mode: python exited: $(cat "$T/$mode.err")"
        sleep 0.05
    done
    [[ $(redis_tmp_cli HLEN "sluice:{$q}:consumers") == 1 ]] || fail "$mode: the consumer did not open"
    rc=0
    "$BUILD/sluice-producer" --redis "$REDIS_URL" --queue "$q" >"$T/p-$mode.out" \
        2>"$T/p-$mode.err" || rc=$?
    ((rc == 0)) || fail "$mode: producer exit $rc: $(cat "$T/p-$mode.err")"
    rc=0; wait_pid "$c" 60 || rc=$?
    out=$(cat "$T/$mode.out")
    note "$mode: $(tr '\n' '|' <<<"$out") $(cat "$T/$mode.err")"
    ((rc == 0)) || fail "$mode: python exit $rc: $(cat "$T/$mode.err")"
    want=partial
    [[ $mode == accept ]] && want=normal
    for e in 0 1; do
        line=$(grep "^epoch=$e " <<<"$out") || fail "$mode: no line for epoch $e: $out"
        [[ $(kv records "$line") == 20 ]] || fail "$mode: epoch $e: $line, expected 20 records"
        [[ $(kv end "$line") == "$want" ]] || fail "$mode: epoch $e ended $(kv end "$line"), expected $want"
        [[ $(kv failed "$line") == "$e:1_("*gone.txt* ]] ||
            fail "$mode: epoch $e does not name task $e:1 and its missing file: $line"
    done
    grep -qx finished=1 <<<"$out" || fail "$mode: not finished: $out"
    grep -qx "job: finished with 2 failed tasks" <<<"$(ctl jobs "$q")" ||
        fail "$mode: sluice-ctl jobs: $(ctl jobs "$q")"
done
echo "ok: PartialEpoch raised at each partial epoch's end; accept_partial ends it normally with the report"
