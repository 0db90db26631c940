#!/usr/bin/env bash
# Record shuffle and drop_remainder (submit --shuffle-buffer 50
# --drop-remainder): 6 tasks of 130..203 lines, batches of 16, 2 epochs.
#
# A task is produced in three pieces by three producers: A stores its
# batches 0..3 (a queue of 4 batches, nobody reading) and is stopped
# (SIGTERM: handed back, resume point 4, inside the second shuffle window
# of 50 records); B claims it, skips 0..3, stores 4 and 5 once a consumer
# takes two batches, and is killed (kill -9) in the middle of it; after
# B's lease the task is redone from batch 4 (4 and 5 again: dropped as
# duplicates) by one of three more producers. A recording consumer
# (job_shuffle.py consume) then reads both epochs.
#
# Checked (job_shuffle.py check, which redoes the shuffle from its
# description in docs/PROTOCOL.md): every batch the consumer got is the
# one the description gives for its id, so byte-identical whoever pushed
# it; every batch holds 16 records; every record of each epoch came once
# but the short tails (11+6+12+2+6+6 = 43 per epoch), with the side
# consumer's counts and checksum; batches are out of file order and differ
# between the epochs. sluice-ctl jobs (--json) shows the options and 43
# dropped records per epoch, counted once despite the redone task. Then
# the same job through --exec, in records and in msgpack format.
# shellcheck source=tests/lib/integration.sh
. "$(dirname "$0")/../lib/integration.sh"
# shellcheck source=tests/lib/python.sh
. "$ROOT/tests/lib/python.sh"
need_bin sluice-ctl sluice-producer sluice-consume
helper=$ROOT/tests/integration/job_shuffle.py

redis_tmp_start
q=shuf
B=16 W=50

mk() { seq -f "$1-%05g" 0 $(($2 - 1)) >"$T/$1.txt"; }
mk a 203
mk b 150
mk c 140
mk d 130
mk e 300
printf 'lines a.txt\nlines b.txt\nlines c.txt\nlines d.txt\nlines e.txt split=2\n' >"$T/m"
spec() {   # spec EPOCHS SEED
    cat <<EOF
{"batch_size": $B, "window": $W, "seed": $2, "epochs": $1, "drop_remainder": true,
 "tasks": [[0, "$T/a.txt", 0, 203], [1, "$T/b.txt", 0, 150], [2, "$T/c.txt", 0, 140],
           [3, "$T/d.txt", 0, 130], [4, "$T/e.txt", 0, 150], [5, "$T/e.txt", 150, 300]]}
EOF
}
spec 2 5 >"$T/spec.json"

ctl create "$q" --max-batches 4 --max-bytes 64M >/dev/null
out=$(ctl submit "$q" --manifest "$T/m" --epochs 2 --batch-size $B --shuffle-buffer $W \
    --drop-remainder --shuffle-seed 5) || fail "submit: $out"
jobs=$(ctl jobs "$q")
grep -qx "shuffle_buffer: $W" <<<"$jobs" || fail "jobs shows no 'shuffle_buffer: $W': $jobs"
grep -qx "drop_remainder: yes" <<<"$jobs" || fail "jobs shows no 'drop_remainder: yes': $jobs"

# ---- A: batches 0..3 of a task, then SIGTERM: handed back at 4 -------------
bg "$T/a.out" "$T/a.err" "$BUILD/sluice-producer" --redis "$REDIS_URL" --queue "$q" --id A \
    --lease-ms 2000
a=$BG_PID
wait_for 10 held_is "$q" 4 || fail "A did not fill the queue: $(cat "$T/a.err")"
task=$(rcli HKEYS "sluice:{$q}:towner")
[[ $task == 0:? ]] || fail "A holds '$task', expected one task of epoch 0"
kill -TERM "$a"
rc=0; wait_pid "$a" 10 || rc=$?
((rc == 0)) || fail "A exit $rc after SIGTERM: $(cat "$T/a.err")"
resume=$(rcli HGET "sluice:{$q}:tresume" "$task")
[[ $resume == 4 ]] ||
    fail "task $task handed back with resume point '$resume', expected 4: $(cat "$T/a.err")"
note "A handed $task back at batch 4 (record 64, inside window 1 of records 50..99)"

# ---- B: resumes at 4, stores 4 and 5, killed in the middle -----------------
bg "$T/b.out" "$T/b.err" "$BUILD/sluice-producer" --redis "$REDIS_URL" --queue "$q" --id B \
    --lease-ms 2000
b=$BG_PID
wait_for 10 owner_is "$q" "$task" B || fail "B did not claim $task: $(cat "$T/b.err")"
side=$("$BUILD/sluice-consume" --redis "$REDIS_URL" --queue "$q" --count 2 --prefetch 1 \
    --summary --quiet) || fail "side consumer failed: $side"
note "side consumer: $side"
[[ $(kv batches "$side") == 2 && $(kv records "$side") == $((2 * B)) ]] ||
    fail "the side consumer took other than 2 full batches: $side"
wait_for 10 bash -c "[[ \$(redis-cli -p $REDIS_PORT HEXISTS 'sluice:{$q}:dlv' $task:5) == 1 ]]" ||
    fail "B did not store batch $task:5: $(cat "$T/b.err")"
kill -KILL "$b"
wait "$b" 2>/dev/null || true
owner_is "$q" "$task" B || fail "B no longer held $task when killed"

# ---- the rest: three producers, a recording consumer ------------------------
bg "$T/c.out" "$T/c.err" "${PYCMD[@]}" "$helper" consume "$REDIS_URL" "$q" "$T/got.jsonl"
c=$BG_PID
prods=()
for k in C D E; do
    bg "$T/$k.out" "$T/$k.err" "$BUILD/sluice-producer" --redis "$REDIS_URL" --queue "$q" \
        --id "$k" --lease-ms 2000
    prods+=("$BG_PID")
done
for p in "${prods[@]}"; do
    rc=0; wait_pid "$p" 60 || rc=$?
    ((rc == 0)) || fail "a producer exit $rc: $(cat "$T"/[CDE].err)"
done
rc=0; wait_pid "$c" 60 || rc=$?
((rc == 0)) || fail "consumer exit $rc: $(cat "$T/c.err")"
grep -q "task $task .* done" "$T"/[CDE].err || fail "nobody redid $task: $(cat "$T"/[CDE].err)"

out=$(py "$helper" check "$T/spec.json" "$T/got.jsonl" "$(kv records "$side")" \
    "$(kv checksum "$side")") || fail "check: $out"
note "consumed: $out"
[[ $(kv dropped "$out") == 43,43 ]] || fail "the description drops $(kv dropped "$out"), not 43,43"

[[ $(rcli HGET "sluice:{$q}:stats" tasks_reaped) == 1 ]] || fail "B's task was not reaped once"
dups=$(rcli HGET "sluice:{$q}:stats" dup_dropped)
((${dups:-0} >= 2)) || fail "the redo of $task pushed $dups duplicates, expected batches 4 and 5"
jobs=$(ctl jobs "$q")
note "$jobs"
[[ $(grep -c "^epoch [01]: .* pushed=55 .* dropped_records=43 .*end=posted" <<<"$jobs") == 2 ]] ||
    fail "jobs: epochs without 55 batches and 43 dropped records: $jobs"
json=$(ctl jobs "$q" --json) || fail "jobs --json failed"
"$PY" -c 'import json, sys
j = json.loads(sys.argv[1])["job"]
assert j["shuffle_buffer"] == 50 and j["drop_remainder"] is True, j
assert [e["dropped_records"] for e in j["per_epoch"]] == [43, 43], j["per_epoch"]
assert [e["pushed"] for e in j["per_epoch"]] == [55, 55], j["per_epoch"]' "$json" ||
    fail "jobs --json is wrong: $json"

# The metrics export has them per epoch too.
port=$(redis_tmp_free_port)
bg "$T/m.out" "$T/m.err" "$BUILD/sluice-ctl" --redis "$REDIS_URL" metrics "$q" \
    --addr "127.0.0.1:$port" --interval-ms 100
m=""
for _ in $(seq 100); do
    m=$("$PY" -c 'import sys, urllib.request
print(urllib.request.urlopen(sys.argv[1], timeout=5).read().decode())' \
        "http://127.0.0.1:$port/metrics" 2>/dev/null) && break
    sleep 0.05
done
for e in 0 1; do
    grep -qx "sluice_epoch_dropped_records_total{queue=\"$q\",epoch=\"$e\"} 43" <<<"$m" ||
        fail "metrics: no dropped records 43 for epoch $e: $(grep dropped_records <<<"$m")"
done

# ---- --exec: the command's records are shuffled and cut the same way -------
spec 1 9 >"$T/spec1.json"
for fmt in records msgpack; do
    ctl create "x$fmt" --max-batches 64 --max-bytes 64M >/dev/null
    ctl submit "x$fmt" --manifest "$T/m" --epochs 1 --batch-size $B --shuffle-buffer $W \
        --drop-remainder --shuffle-seed 9 >/dev/null || fail "submit x$fmt failed"
    "$BUILD/sluice-producer" --redis "$REDIS_URL" --queue "x$fmt" --quiet --exec-format "$fmt" \
        --exec "'$PY' '$helper' emit $fmt {path} {start} '{end}'" 2>"$T/x.err" ||
        fail "--exec-format $fmt producer failed: $(cat "$T/x.err")"
    py "$helper" consume "$REDIS_URL" "x$fmt" "$T/x$fmt.jsonl" >/dev/null ||
        fail "consumer of x$fmt failed"
    out=$(py "$helper" check "$T/spec1.json" "$T/x$fmt.jsonl") || fail "--exec-format $fmt: $out"
    note "--exec-format $fmt: $out"
    [[ $(info_field "x$fmt" tasks_done) == 6 ]] || fail "x$fmt: not every task done"
done
echo "ok: shuffled windows of $W, full batches of $B, 43 records dropped per epoch, counted" \
    "once; a task resumed inside a window and redone after kill -9 gave the same batches"
