#!/usr/bin/env bash
# Failures are loud (README, guarantee 8): each case below used to be a
# silent loss, a hang or a wait nobody explained.
#  (a) A batch over the queue's frame limit (--max-frame-bytes 4K, a record
#      of 8 KB) is refused by the producer with an error naming the limit.
#      In a job its task fails after the job's max attempts; the consumer's
#      end of that epoch names the task (exit 3), and the job says
#      "finished with 1 failed task". The records of the good shard arrive.
#  (b) A second consumer on a coordinated rank a live consumer holds is
#      refused at open (exit 1) within about the lease, naming the holder;
#      after kill -9 of the holder, a new consumer on that rank waits for
#      the dead holder's lease and then gets the rank's batches.
#  (c) A consumer that waits says what for, after about 5 s: a queue with
#      no job and no producer; a job whose producers are all gone.
#  (d) A consumer whose ACL user may not run BITFIELD (its acknowledgements
#      need it) fails with an error naming the permission instead of
#      retrying for ever.
#  (e) A producer blocked on a full queue says after about 5 s that the
#      queue is at its budget.
# (c) and (e) wait the 5 s side by side, while (d) runs.
# shellcheck source=tests/lib/integration.sh
. "$(dirname "$0")/../lib/integration.sh"
need_bin sluice-ctl sluice-producer sluice-consume

# lines FILE N [SIZE]: N lines of SIZE characters (default: "line <k>").
lines() {
    "$PY" -c 'import sys
n, size = int(sys.argv[2]), int(sys.argv[3])
with open(sys.argv[1], "w") as f:
    for k in range(n):
        f.write(("%d" % k).rjust(size, "x") if size else "line %d" % k)
        f.write("\n")' "$1" "$2" "${3:-0}"
}

redis_tmp_start

# ---- (c), (e): start the waits ---------------------------------------------
ctl create nojob --max-batches 10 --max-bytes 64M >/dev/null
bg "$T/c1.out" "$T/c1.err" "$BUILD/sluice-consume" --redis "$REDIS_URL" --queue nojob \
    --timeout-ms 7000
c1=$BG_PID
lines "$T/small.txt" 20
echo "lines small.txt" >"$T/small.manifest"
ctl create noprod --max-batches 10 --max-bytes 64M >/dev/null
ctl submit noprod --manifest "$T/small.manifest" --epochs 1 --batch-size 5 >/dev/null ||
    fail "c: submit failed"
bg "$T/c2.out" "$T/c2.err" "$BUILD/sluice-consume" --redis "$REDIS_URL" --queue noprod \
    --timeout-ms 7000
c2=$BG_PID
ctl create full --max-batches 2 --max-bytes 64M >/dev/null
bg "$T/e.out" "$T/e.err" "$BUILD/sluice-producer" --redis "$REDIS_URL" --queue full \
    --format lines --batch-size 2 "$T/small.txt"
pe=$BG_PID
t_waits=$(now_ms)

# ---- (d) a permission the consumer lacks -----------------------------------
q=perm
ctl create "$q" --max-batches 10 --max-bytes 64M --lease-ms 1000 >/dev/null
"$BUILD/sluice-producer" --redis "$REDIS_URL" --queue "$q" --format lines --batch-size 5 \
    --quiet "$T/small.txt" || fail "d: producer failed"
rcli ACL SETUSER u on '>pw' '~*' '&*' +@all -bitfield >/dev/null || fail "d: ACL SETUSER failed"
bg "$T/d.out" "$T/d.err" "$BUILD/sluice-consume" --redis "redis://u:pw@127.0.0.1:$REDIS_PORT" \
    --queue "$q" --quiet
cd_=$BG_PID
rc=0; wait_pid "$cd_" 15 || rc=$?
note "d: exit $rc: $(cat "$T/d.err")"
((rc != 124)) || fail "d: the consumer without the BITFIELD permission hung (still running after 15 s)"
((rc == 1)) || fail "d: exit $rc, expected 1: $(cat "$T/d.err")"
grep -qi 'permission' "$T/d.err" || fail "d: the error does not mention a permission: $(cat "$T/d.err")"
# Nothing was lost: the batches are still in the queue.
[[ $(held "$q") == 4 ]] || fail "d: the queue holds $(held "$q") batches, expected 4"

# ---- (c), (e): what the waits said ------------------------------------------
rc=0; wait_pid "$c1" 20 || rc=$?
((rc == 0)) || fail "c: consumer of a queue without a job: exit $rc: $(cat "$T/c1.err")"
note "c, no job: $(cat "$T/c1.err")"
grep -q "queue 'nojob' has no job .*no producer is alive" "$T/c1.err" ||
    fail "c: the consumer did not say it waits for a job: $(cat "$T/c1.err")"
rc=0; wait_pid "$c2" 20 || rc=$?
((rc == 0)) || fail "c: consumer of a job without producers: exit $rc: $(cat "$T/c2.err")"
note "c, no producer: $(cat "$T/c2.err")"
grep -q "no producer of queue 'noprod' is alive" "$T/c2.err" ||
    fail "c: the consumer did not say that no producer is alive: $(cat "$T/c2.err")"
wait_for 15 in_file "$T/e.err" "is at its budget" ||
    fail "e: the blocked producer said nothing within 15 s: $(cat "$T/e.err")"
ms=$(($(now_ms) - t_waits))
note "e: after $ms ms: $(cat "$T/e.err")"
grep -q "queue 'full' is at its budget" "$T/e.err" || fail "e: $(cat "$T/e.err")"
kill -0 "$pe" 2>/dev/null || fail "e: the producer exited: $(cat "$T/e.err")"
kill -TERM "$pe"
wait_pid "$pe" 10 || true

# ---- (a) a batch over the frame limit ---------------------------------------
q=frame
ctl create "$q" --max-batches 10 --max-bytes 64M --max-frame-bytes 4K --lease-ms 1000 >/dev/null
[[ $(rcli HGET "sluice:{$q}:meta" max_frame) == 4096 ]] ||
    fail "a: max_frame is $(rcli HGET "sluice:{$q}:meta" max_frame), expected 4096"
lines "$T/big.txt" 1 8192
rc=0
"$BUILD/sluice-producer" --redis "$REDIS_URL" --queue "$q" --format lines --batch-size 1 \
    "$T/big.txt" >"$T/a0.out" 2>"$T/a0.err" || rc=$?
note "a, files mode: exit $rc: $(cat "$T/a0.err")"
((rc == 1)) || fail "a: files mode: exit $rc, expected 1"
grep -q "exceeds the frame limit of queue '$q', 4096 bytes" "$T/a0.err" ||
    fail "a: files mode: the error does not name the limit: $(cat "$T/a0.err")"
[[ $(held "$q") == 0 ]] || fail "a: the oversized batch reached Redis"

# Job mode: shard 0 fits, shard 1 holds the 8 KB record.
printf 'lines small.txt\nlines big.txt\n' >"$T/a.manifest"
ctl submit "$q" --manifest "$T/a.manifest" --epochs 1 --batch-size 5 --max-attempts 2 >/dev/null ||
    fail "a: submit failed"
bg "$T/ac.out" "$T/ac.err" "$BUILD/sluice-consume" --redis "$REDIS_URL" --queue "$q" \
    --summary --epochs --quiet
ca=$BG_PID
rc=0
"$BUILD/sluice-producer" --redis "$REDIS_URL" --queue "$q" --summary \
    >"$T/ap.out" 2>"$T/ap.err" || rc=$?
note "a, producer: exit $rc: $(tr '\n' '|' <"$T/ap.err")"
((rc == 0)) || fail "a: a failed task is the job's problem, the producer should exit 0 (exit $rc)"
grep -q "task 0:1 .*exceeds the frame limit of queue '$q', 4096 bytes" "$T/ap.err" ||
    fail "a: the producer did not report the task's oversized batch: $(cat "$T/ap.err")"
rc=0; wait_pid "$ca" 30 || rc=$?
note "a, consumer: exit $rc: $(tr '\n' '|' <"$T/ac.out") / $(cat "$T/ac.err")"
((rc == 3)) || fail "a: consumer exit $rc, expected 3 (an epoch lost records): $(cat "$T/ac.err")"
grep -q "epoch 0 ended without the records of 1 failed task: 0:1 .*frame limit" "$T/ac.err" ||
    fail "a: the consumer did not name the failed task: $(cat "$T/ac.err")"
line=$(grep '^epoch=0 ' "$T/ac.out") || fail "a: no end of epoch 0: $(cat "$T/ac.out")"
[[ $(kv records "$line") == 20 && $(kv failed_tasks "$line") == 1 ]] ||
    fail "a: epoch 0: $line, expected the 20 records of the good shard and failed_tasks=1"
jobs=$(ctl jobs "$q") || fail "a: sluice-ctl jobs failed: $jobs"
note "a, jobs: $(tr '\n' '|' <<<"$jobs")"
grep -qx "job: finished with 1 failed task" <<<"$jobs" || fail "a: sluice-ctl jobs: $jobs"
[[ $(rcli HGET "sluice:{$q}:tattempts" 0:1) == 2 ]] ||
    fail "a: task 0:1 was tried $(rcli HGET "sluice:{$q}:tattempts" 0:1) times, expected 2 (--max-attempts)"

# ---- (b) two consumers on one rank -------------------------------------------
q=rank
ctl create "$q" --max-batches 20 --max-bytes 64M --consumers 2 --coordinated --lease-ms 1000 \
    >/dev/null
bg "$T/b1.out" "$T/b1.err" "$BUILD/sluice-consume" --redis "$REDIS_URL" --queue "$q" \
    --rank 0 --world 2 --consumer-id first --print-ids
b1=$BG_PID
wait_for 10 eval '[[ $(rcli HGET "sluice:{$q}:rholder" 0) == first ]]' ||
    fail "b: the first consumer did not take rank 0: $(cat "$T/b1.err")"
t0=$(now_ms)
rc=0
"$BUILD/sluice-consume" --redis "$REDIS_URL" --queue "$q" --rank 0 --world 2 \
    --consumer-id second --timeout-ms 1000 >"$T/b2.out" 2>"$T/b2.err" || rc=$?
ms=$(($(now_ms) - t0))
note "b: second consumer on rank 0: exit $rc after $ms ms: $(cat "$T/b2.err")"
((rc == 1)) || fail "b: a second consumer on a held rank: exit $rc, expected 1"
grep -q "rank 0 is held by consumer first" "$T/b2.err" ||
    fail "b: the refusal does not name the holder: $(cat "$T/b2.err")"
((ms < 6000)) || fail "b: the refusal took $ms ms, expected about the lease (1 s)"
kill -0 "$b1" 2>/dev/null || fail "b: the holder exited: $(cat "$T/b1.err")"
[[ $(rcli HGET "sluice:{$q}:rholder" 0) == first ]] || fail "b: rank 0 changed hands"

kill -9 "$b1"
wait "$b1" 2>/dev/null || true
# 4 batches: 2 rounds, 2 batches for each rank.
"$BUILD/sluice-producer" --redis "$REDIS_URL" --queue "$q" --format lines --batch-size 5 \
    --quiet "$T/small.txt" || fail "b: producer failed"
t0=$(now_ms)
rc=0
"$BUILD/sluice-consume" --redis "$REDIS_URL" --queue "$q" --rank 0 --world 2 \
    --consumer-id third --print-ids --timeout-ms 2000 >"$T/b3.out" 2>"$T/b3.err" || rc=$?
ms=$(($(now_ms) - t0))
note "b: after kill -9 of the holder: exit $rc after $ms ms: $(tr '\n' '|' <"$T/b3.out") $(cat "$T/b3.err")"
((rc == 0)) || fail "b: a consumer on the rank of a dead holder: exit $rc, expected 0"
(($(grep -c '^id ' "$T/b3.out") == 2)) || fail "b: it got $(grep -c '^id ' "$T/b3.out") batches, expected rank 0's 2"
echo "ok: oversized batch refused and its task failed loudly; held rank refused, dead holder's rank taken over; waits and a missing permission told"
