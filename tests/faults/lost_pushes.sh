#!/usr/bin/env bash
# Redis comes back without pushes that it had answered, while the task
# they belong to stays claimed (its claim is older than the lost writes).
# One shard of 60 records, batch size 1, one producer that sends a record
# every 50 ms, no consumer yet. Once 10 batches are stored the size of the
# AOF's incr file is noted; once 10 more are, the producer is stopped
# (SIGSTOP), redis-server is killed with -9 and the file cut back to that
# size (appendfsync everysec and a crash of its host lose about that
# much), Redis restarts and the producer goes on (SIGCONT). It
# reconnects and goes on with the task; before task_done it checks that
# every batch it pushed is there (task_check), finds the lost ones missing,
# hands the task back with its resume point at the first of them, claims
# it again and pushes them anew. Checked: Redis really lost stored
# batches; the producer said why it handed the task back and exits 0; the
# job finishes; a consumer then gets every record once (count and
# checksum), with nothing left in the queue.
# shellcheck source=tests/lib/faults.sh
. "$(dirname "$0")/../lib/faults.sh"
need_bin sluice-ctl sluice-producer sluice-consume

redis_tmp_start --appendonly yes --appendfsync everysec --aof-load-truncated yes
q=lost
stored() { rcli HGET "sluice:{$q}:stats" pushed; }
stored_at_least() {
    local n
    n=$(stored)
    ((${n:-0} >= $1))
}

make_line_shards 1 60 "$T/job.manifest"
ctl create "$q" --max-batches 64 --max-bytes 64M >/dev/null
ctl submit "$q" --manifest "$T/job.manifest" --epochs 1 --batch-size 1 >/dev/null || fail "submit failed"
start_producer "$T/p" "$q" --id p --lease-ms 5000 --exec "$(slow_exec 50)"
p=$BG_PID

wait_for 20 stored_at_least 10 || fail "the producer did not store 10 batches: $(cat "$T/p.err")"
aof_mark
before=$(stored)
wait_for 20 stored_at_least $((before + 10)) || fail "the producer stalled: $(cat "$T/p.err")"
# The producer is held still across the crash (SIGSTOP, well inside its
# 5 s lease), so that what is counted after the load is what the AOF
# kept, not also what it pushed once it reconnected.
kill -STOP "$p"
aof_crash_back
after=$(stored)
kill -CONT "$p"
echo "cut $(basename "$AOF_MARK_FILE") from $AOF_CUT_FROM to $AOF_CUT_TO bytes: stored batches $before+10 or more before the kill, ${after:-0} after the load"
(( ${after:-0} < before + 10 )) || fail "the cut lost no push (stored ${after:-0})"
[[ $(rcli HGET "sluice:{$q}:towner" 0:0) == p ]] || fail "the task's claim did not survive the cut"

rc=0; wait_pid "$p" 60 || rc=$?
((rc == 0)) || fail "producer exit $rc: $(cat "$T/p.err")"
grep -q "task 0:0 .*handed back (it resumes at batch [0-9]*): Redis came back without its last writes" "$T/p.err" ||
    fail "the producer did not hand the task back for its lost pushes: $(cat "$T/p.err")"
note "producer: $(tr '\n' '|' <"$T/p.err")"
grep -qx "job: finished" <<<"$(ctl jobs "$q")" || fail "the job did not finish: $(ctl jobs "$q")"

start_consumer "$T/c" "$q" --quiet
rc=0; wait_pid "$BG_PID" 30 || rc=$?
((rc == 0)) || fail "consumer exit $rc: $(cat "$T/c.err")"
epoch_sums_match 1 "$T/c"
[[ $(info_field "$q" batches) == 0 ]] || fail "batches left in the queue: $(ctl info "$q")"
echo "ok: the pushes Redis lost were pushed again; every record arrived once"
