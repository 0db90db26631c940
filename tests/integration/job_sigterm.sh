#!/usr/bin/env bash
# SIGTERM in the middle of a task: the producer stops, hands its task back
# untried (not counted as an attempt: tattempts back to 0, the task at the
# front of the waiting list at once, no lease left) and exits 0 within a
# couple of seconds, although it was blocked on a full queue. Another
# producer then completes the job, and the consumer gets every record
# exactly once.
# shellcheck source=tests/lib/integration.sh
. "$(dirname "$0")/../lib/integration.sh"
need_bin sluice-ctl sluice-producer sluice-consume gen-tfrecord


redis_tmp_start
q=jobterm
sums=()
for i in 0 1 2; do
    line=$(gen "$T/s$i.tfrecord" 150 $((900 + i)) 1 200)
    sums+=("$(kv checksum "$line")")
    echo "tfrecord s$i.tfrecord"
done >"$T/m.manifest"
want_sum=$(hexsum "${sums[@]}")

ctl create "$q" --max-batches 4 --max-bytes 64M >/dev/null
ctl submit "$q" --manifest "$T/m.manifest" --epochs 1 --batch-size 10 >/dev/null || fail "submit failed"
# A window of 4 pushes keeps A in the middle of its task when the queue
# is full (the default window would take the whole task's 15 batches and
# wait at its end: D's case below).
bg "$T/a.out" "$T/a.err" "$BUILD/sluice-producer" --redis "$REDIS_URL" --queue "$q" --id A \
    --inflight 4
a=$BG_PID
wait_for 10 owner_is "$q" 0:0 A || fail "A did not claim task 0:0: $(cat "$T/a.err")"
wait_for 10 held_is "$q" 4 || fail "A did not fill the queue"
[[ $(rcli HGET "sluice:{$q}:tattempts" 0:0) == 1 ]] || fail "attempt count of 0:0 is not 1 while A holds it"

kill -TERM "$a"
rc=0; wait_pid "$a" 5 || rc=$?
((rc == 0)) || fail "A exit $rc after SIGTERM, expected 0 within 5 s: $(cat "$T/a.err")"
note "A: $(tr '\n' '|' <"$T/a.err")"
grep -q "task 0:0 .*handed back" "$T/a.err" || fail "A did not report handing task 0:0 back"
[[ $(rcli HGET "sluice:{$q}:tattempts" 0:0) == 0 ]] || fail "the handed-back task counted as an attempt"
[[ $(rcli LINDEX "sluice:{$q}:tasks:0" 0) == 0:0 ]] || fail "0:0 is not first in the waiting list: $(rcli LRANGE "sluice:{$q}:tasks:0" 0 -1)"
[[ $(rcli ZCARD "sluice:{$q}:tlease") == 0 ]] || fail "a lease is left after the hand-back"
[[ $(rcli HGET "sluice:{$q}:terr" 0:0) == "handed back by producer A" ]] ||
    fail "terr of 0:0: '$(rcli HGET "sluice:{$q}:terr" 0:0)'"

bg "$T/c.out" "$T/c.err" "$BUILD/sluice-consume" --redis "$REDIS_URL" --queue "$q" --summary --quiet
c=$BG_PID
bg "$T/b.out" "$T/b.err" "$BUILD/sluice-producer" --redis "$REDIS_URL" --queue "$q" --id B --summary
b=$BG_PID
rc=0; wait_pid "$b" 60 || rc=$?
((rc == 0)) || fail "B exit $rc: $(cat "$T/b.err")"
rc=0; wait_pid "$c" 30 || rc=$?
((rc == 0)) || fail "consumer exit $rc: $(cat "$T/c.err")"
line=$(cat "$T/c.out")
[[ $(kv records "$line") == 450 ]] || fail "consumer: $line, expected 450 records"
[[ $(kv checksum "$line") == "$want_sum" ]] || fail "consumer checksum $(kv checksum "$line"), expected $want_sum"
[[ $(kv tasks "$(cat "$T/b.out")") == 3 ]] || fail "B did not do all 3 tasks: $(cat "$T/b.out")"
[[ $(rcli HGET "sluice:{$q}:tattempts" 0:0) == 1 ]] || fail "0:0 should show B's single attempt"
info=$(ctl info "$q")
grep -qx "job: finished" <<<"$info" || fail "job not finished: $info"
grep -qx "tasks_failed: 0" <<<"$info" || fail "a task failed: $info"

# SIGTERM while the task's last batch waits for room, after its records
# ran out (the wait is the one that marks the task done): handed back
# untried too, from the first batch not stored; it used to count a failed
# attempt and exit 1.
q=jobterm2
gen "$T/t.tfrecord" 50 910 1 200 >/dev/null
echo "tfrecord t.tfrecord" >"$T/t.manifest"
ctl create "$q" --max-batches 4 --max-bytes 64M >/dev/null
ctl submit "$q" --manifest "$T/t.manifest" --epochs 1 --batch-size 10 >/dev/null || fail "submit 2 failed"
bg "$T/d.out" "$T/d.err" "$BUILD/sluice-producer" --redis "$REDIS_URL" --queue "$q" --id D
d=$BG_PID
wait_for 10 held_is "$q" 4 || fail "D did not fill the queue: $(cat "$T/d.err")"
wait_for 10 owner_is "$q" 0:0 D || fail "D does not hold 0:0"
kill -TERM "$d"
rc=0; wait_pid "$d" 5 || rc=$?
((rc == 0)) || fail "D exit $rc after SIGTERM with its last batch waiting for room: $(cat "$T/d.err")"
note "D: $(tr '\n' '|' <"$T/d.err")"
grep -q "task 0:0 .*handed back" "$T/d.err" || fail "D did not report handing task 0:0 back: $(cat "$T/d.err")"
[[ $(rcli HGET "sluice:{$q}:tattempts" 0:0) == 0 ]] || fail "D's hand-back counted as an attempt"
[[ $(rcli LINDEX "sluice:{$q}:tasks:0" 0) == 0:0 ]] || fail "0:0 is not back in the waiting list"
[[ $(rcli HGET "sluice:{$q}:terr" 0:0) == "handed back by producer D (shutting down)" ]] ||
    fail "terr of 0:0: '$(rcli HGET "sluice:{$q}:terr" 0:0)'"
[[ $(rcli LLEN "sluice:{$q}:failed") == 0 ]] || fail "a task is recorded failed"
echo "ok: SIGTERM handed task 0:0 back (no attempt counted); B finished the job, 450 records once; a task whose last batch waited for room was handed back untried too"
