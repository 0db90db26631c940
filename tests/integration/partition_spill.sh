#!/usr/bin/env bash
# Partitioned queues, producer side, on one redis-server (partitions need
# no cluster).
#  1. A queue of 2 partitions with a budget of 4 batches each, a job of 8
#     tasks of 6 batches (4 per partition), no consumer yet. The first
#     producer fills the partition of its first task, hands that task back
#     with its resume point (batches 0..3 stored) instead of waiting, and
#     fills the other partition with a task of its own: both partitions end
#     at their budget while the producer waits. A second producer started
#     then waits too, without spinning. The first one's metrics show the
#     queue's depth and budget summed over the partitions (8 of 8). Two
#     consumers then drain everything:
#     every record of every shard arrives exactly once (records and
#     checksum), all 8 tasks are done once, nothing is left in the queue.
#  2. Files mode: two files pushed into a partitioned queue go to different
#     partitions.
# shellcheck source=tests/lib/integration.sh
. "$(dirname "$0")/../lib/integration.sh"
need_bin sluice-ctl sluice-producer sluice-consume gen-tfrecord

redis_tmp_start
q=spill
shards=8 per=24

sums=()
for ((i = 0; i < shards; i++)); do
    line=$(gen "$T/shard-$i.tfrecord" "$per" $((700 + i)) 1 300)
    sums+=("$(kv checksum "$line")")
    echo "tfrecord shard-$i.tfrecord"
done >"$T/job.manifest"
want_sum=$(hexsum "${sums[@]}")
want_recs=$((shards * per))

ctl create "$q" --partitions 2 --max-batches 4 --max-bytes 64M >/dev/null ||
    fail "create --partitions 2 failed"
out=$(ctl submit "$q" --manifest "$T/job.manifest" --epochs 1 --batch-size 4) ||
    fail "submit: $out"
note "$out"

part_held() { held "$q#$1"; }

# 1. One producer, no consumer: it must not stop at the first full partition.
mport=$(redis_tmp_free_port)
bg "$T/a.out" "$T/a.err" "$BUILD/sluice-producer" --redis "$REDIS_URL" --queue "$q" \
    --id pa --summary --metrics-addr "127.0.0.1:$mport"
pa=$BG_PID
for ((i = 0; i < 200; i++)); do
    [[ $(part_held 0) == 4 && $(part_held 1) == 4 ]] && break
    kill -0 "$pa" 2>/dev/null || fail "producer a exited early: $(cat "$T/a.err")"
    sleep 0.05
done
[[ $(part_held 0) == 4 && $(part_held 1) == 4 ]] ||
    fail "both partitions should be at their budget of 4, hold $(part_held 0) and $(part_held 1): $(cat "$T/a.err")"
kill -0 "$pa" 2>/dev/null || fail "producer a should wait for room, it exited: $(cat "$T/a.err")"
grep -q "handed back (it resumes at batch 4): its partition is at its budget while another partition has room" "$T/a.err" ||
    fail "producer a handed no task back: $(cat "$T/a.err")"
# The task handed back resumes after the 4 batches stored.
resumes=$(for p in 0 1; do redis_tmp_cli HVALS "sluice:{$q#$p}:tresume"; done | grep . | tr '\n' ' ')
[[ $resumes == "4 " ]] || fail "expected one task handed back with resume point 4, got '$resumes'"

# Its metrics: the sums over both partitions (refreshed every second).
metric() {
    "$PY" -c 'import sys, urllib.request
for l in urllib.request.urlopen(sys.argv[1], timeout=5).read().decode().splitlines():
    if l.startswith(sys.argv[2] + "{"):
        print(l.split()[-1])' "http://127.0.0.1:$mport/metrics" "$1"
}
for ((i = 0; i < 60; i++)); do
    [[ $(metric sluice_queue_depth_batches) == 8 ]] && break
    sleep 0.1
done
[[ $(metric sluice_queue_depth_batches) == 8 && $(metric sluice_queue_max_batches) == 8 ]] ||
    fail "metrics: depth $(metric sluice_queue_depth_batches) of $(metric sluice_queue_max_batches), expected 8 of 8"

# A second producer finds no room anywhere: it waits, without spinning.
bg "$T/b.out" "$T/b.err" "$BUILD/sluice-producer" --redis "$REDIS_URL" --queue "$q" \
    --id pb --summary
pb=$BG_PID
sleep 0.5
t0=$(cpu_ticks "$pb")
sleep 1.5
t1=$(cpu_ticks "$pb")
kill -0 "$pb" 2>/dev/null || fail "producer b should wait for room, it exited: $(cat "$T/b.err")"
((t1 - t0 <= 20)) || fail "producer b used $((t1 - t0)) ticks of CPU in 1.5 s while waiting"
[[ $(part_held 0) == 4 && $(part_held 1) == 4 ]] || fail "the budgets were exceeded: $(part_held 0) and $(part_held 1)"

# 2 consumers drain everything.
cons=()
for k in 1 2; do
    bg "$T/c$k.out" "$T/c$k.err" "$BUILD/sluice-consume" --redis "$REDIS_URL" --queue "$q" \
        --summary --quiet
    cons+=("$BG_PID")
done
tasks=0
for n in a b; do
    pid=$pa
    [[ $n == b ]] && pid=$pb
    rc=0; wait_pid "$pid" 60 || rc=$?
    ((rc == 0)) || fail "producer $n exit $rc: $(cat "$T/$n.err")"
    note "producer $n: $(cat "$T/$n.out")"
    tasks=$((tasks + $(kv tasks "$(cat "$T/$n.out")")))
done
((tasks == shards)) || fail "producers report $tasks tasks done, expected $shards"
recs=0 csums=()
for k in 1 2; do
    rc=0; wait_pid "${cons[k - 1]}" 60 || rc=$?
    ((rc == 0)) || fail "consumer $k exit $rc: $(cat "$T/c$k.err")"
    line=$(cat "$T/c$k.out")
    note "consumer $k: $line"
    recs=$((recs + $(kv records "$line")))
    csums+=("$(kv checksum "$line")")
done
((recs == want_recs)) || fail "consumers got $recs records, expected $want_recs"
got=$(hexsum "${csums[@]}")
[[ $got == "$want_sum" ]] || fail "consumers' checksums add up to $got, expected $want_sum"
info=$(ctl info "$q") || fail "info: $info"
note "$info"
grep -qx "job: finished" <<<"$info" || fail "job not finished"
grep -qx "tasks_done: $shards" <<<"$info" || fail "tasks_done is not $shards"
grep -qx "tasks_failed: 0" <<<"$info" || fail "a task failed"
grep -qx "batches: 0" <<<"$info" || fail "batches left in the queue"

# 2. Files mode: each file to the next partition.
ctl create fq --partitions 2 --max-batches 100 --max-bytes 64M >/dev/null ||
    fail "create fq failed"
gen "$T/f1.tfrecord" 12 1 >/dev/null
gen "$T/f2.tfrecord" 20 2 >/dev/null
out=$("$BUILD/sluice-producer" --redis "$REDIS_URL" --queue fq --batch-size 4 --quiet \
    --summary "$T/f1.tfrecord" "$T/f2.tfrecord") || fail "files mode: $out"
[[ $(kv batches "$out") == 8 ]] || fail "files mode pushed: $out"
split="$(held 'fq#0') $(held 'fq#1')"
[[ $split == "3 5" || $split == "5 3" ]] ||
    fail "the two files (3 and 5 batches) should go to different partitions, got '$split'"
echo "ok: a full partition did not stop the producer (resume point ${resumes% }), $want_recs records exactly once, files spread over partitions ($split)"
