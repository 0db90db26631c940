#!/usr/bin/env bash
# Jobs: 4 producers share 20 tasks x 2 epochs (20 TFRecord shards) through
# task leases, 2 consumers read them. Every record arrives exactly once per
# epoch: the consumers' per-epoch record counts and checksums add up to the
# shards' own, in both epochs; every task is done once (no task failed or
# was redone), every producer exits 0 when the job is finished, and
# sluice-ctl info reports the job finished with both epoch ends posted.
# shellcheck source=tests/lib/integration.sh
. "$(dirname "$0")/../lib/integration.sh"
need_bin sluice-ctl sluice-producer sluice-consume gen-tfrecord

redis_tmp_start
q=jobonce
shards=20 per=60

sums=()
for ((i = 0; i < shards; i++)); do
    line=$(gen "$T/shard-$i.tfrecord" "$per" $((500 + i)) 1 600)
    sums+=("$(kv checksum "$line")")
    echo "tfrecord shard-$i.tfrecord"
done >"$T/train.manifest"
want_sum=$(hexsum "${sums[@]}")
want_recs=$((shards * per))
note "shards: $want_recs records, checksum $want_sum"

# A small budget: producers wait for room, and run ahead into epoch 1.
ctl create "$q" --max-batches 12 --max-bytes 64M >/dev/null
out=$(ctl submit "$q" --manifest "$T/train.manifest" --epochs 2 --batch-size 8 --shuffle-seed 11) ||
    fail "submit: $out"
[[ $out == "submitted 40 tasks (20 shards"*"2 epochs) to queue '$q'" ]] || fail "submit said: $out"

cons=()
for k in 1 2; do
    bg "$T/c$k.out" "$T/c$k.err" "$BUILD/sluice-consume" --redis "$REDIS_URL" --queue "$q" \
        --summary --epochs --quiet
    cons+=("$BG_PID")
done
# Both open before any batch exists, so each is there for both epochs.
wait_for 30 consumers_are "$q" 2 || fail "the consumers did not open: $(cat "$T"/c*.err)"
prods=()
for k in 1 2 3 4; do
    bg "$T/p$k.out" "$T/p$k.err" "$BUILD/sluice-producer" --redis "$REDIS_URL" --queue "$q" \
        --id "p$k" --summary
    prods+=("$BG_PID")
done

tasks=0
for k in 1 2 3 4; do
    rc=0; wait_pid "${prods[k - 1]}" 90 || rc=$?
    ((rc == 0)) || fail "producer $k exit $rc: $(cat "$T/p$k.err")"
    line=$(cat "$T/p$k.out")
    note "producer $k: $line"
    tasks=$((tasks + $(kv tasks "$line")))
    grep -q "done: .* batches in" "$T/p$k.err" || note "producer $k did no task"
done
((tasks == 40)) || fail "producers report $tasks tasks done, expected 40"
for k in 1 2; do
    rc=0; wait_pid "${cons[k - 1]}" 60 || rc=$?
    ((rc == 0)) || fail "consumer $k exit $rc: $(cat "$T/c$k.err")"
    note "consumer $k: $(tr '\n' '|' <"$T/c$k.out")"
done

for e in 0 1; do
    recs=0 epsums=()
    for k in 1 2; do
        line=$(grep "^epoch=$e " "$T/c$k.out") || fail "consumer $k printed no epoch=$e line"
        recs=$((recs + $(kv records "$line")))
        epsums+=("$(kv checksum "$line")")
    done
    ((recs == want_recs)) || fail "epoch $e: consumers got $recs records, expected $want_recs"
    got=$(hexsum "${epsums[@]}")
    [[ $got == "$want_sum" ]] || fail "epoch $e: consumers' checksums add up to $got, expected $want_sum"
done

info=$(ctl info "$q") || fail "info: $info"
note "$info"
grep -qx "job: finished" <<<"$info" || fail "job not finished"
grep -qx "tasks_done: 40" <<<"$info" || fail "tasks_done is not 40"
grep -qx "tasks_failed: 0" <<<"$info" || fail "a task failed"
grep -qx "tasks_reaped: 0" <<<"$info" || fail "a task was reaped"
grep -qx "batches: 0" <<<"$info" || fail "batches left in the queue"
[[ $(grep -c "^epoch [01]: .*tasks_finished=20/20 .*end=posted" <<<"$info") == 2 ]] ||
    fail "both epochs should be finished with their end posted"
# Producers publish their counters; the four together did the 40 tasks.
# All four have exited: they left the list, their counters added up in the
# "producers left" line.
grep -q '^producers left: 4;' <<<"$info" || fail "info does not show the 4 producers that left"
done_pub=$(sed -n 's/^producers left: 4;.* tasks_done=\([0-9]*\).*/\1/p' <<<"$info")
((done_pub == 40)) || fail "producers' published tasks_done add up to '$done_pub', expected 40"
json=$(ctl info "$q" --json) || fail "info --json failed"
"$PY" -c 'import json, sys
d = json.loads(sys.argv[1])
j = d["job"]
assert j["state"] == "finished" and j["tasks"]["done"] == 40, j
assert [e["end_posted"] for e in j["per_epoch"]] == [True, True], j
assert d["producers"] == [], d["producers"]
assert d["producers_left"]["left"] == 4 and d["producers_left"]["tasks_done"] == 40, d' "$json" ||
    fail "info --json is wrong: $json"
echo "ok: 2 epochs x $want_recs records exactly once through 4 producers, checksum $want_sum"
