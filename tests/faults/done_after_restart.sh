#!/usr/bin/env bash
# A task whose done arrives after Redis restarted is checked first
# (task_done.lua answers 2, task_check.lua, docs/PROTOCOL.md "When Redis
# loses its last writes"). The producer's own reconnect count cannot see
# this case: its connection broke inside the task_done call, which it sent
# again on the new connection. Played at the level of the scripts, so the
# order is exact. A producer claims a 5-batch task and pushes batches 0-2;
# in what the crash will lose, it pushes 3 and 4. Redis is killed with -9
# and its AOF cut back to before those two.
#   1. task_done answers 2 and changes nothing; task_check finds batch 3
#      missing and hands the task back with resume point 3; the next claim
#      of it says so.
#   2. Redis restarts again, this time losing nothing: task_done answers 2;
#      task_check over every batch confirms the task on this server (its
#      run_id; in one chunk, or in two when the first saw the same server),
#      and task_done then marks it done.
# shellcheck source=tests/lib/faults.sh
. "$(dirname "$0")/../lib/faults.sh"
need_bin sluice-ctl

redis_tmp_start --appendonly yes --appendfsync always --aof-load-truncated yes
q=donecheck
ctl create "$q" --max-batches 16 --max-bytes 1M --lease-ms 2000 >/dev/null

# py STEP: one step of the scenario (the Python below), against the
# current server.
py() {
    "$PY" - "$REDIS_PORT" "$q" "$BUILD/sluice-ctl" "$ROOT/tests/integration" "$@" <<'PYEOF'
import sys
sys.path.insert(0, sys.argv[4])
from consumer_jobtool import Job, PRODUCER
j = Job(sys.argv[1], sys.argv[2], sys.argv[3])
step = sys.argv[5]

def push(seqs):
    for s in seqs:
        assert j.push(0, 0, s, [b"record %d" % s]) == 1, "push 0:0:%d not stored" % s

def done():
    return j.script("task_done", PRODUCER, "0:0", 5)

def check(frm, to, rid=None):
    args = [PRODUCER, "0:0", frm, to] + ([rid] if rid is not None else [])
    return j.script("task_check", *args)

if step == "setup":
    j.submit(1, 1)
    t = j.claim()
    assert t == "0:0", "claimed %s" % t
    push(range(3))
    print("claimed 0:0, pushed batches 0-2")
elif step == "lost":
    push(range(3, 5))
    print("pushed batches 3-4 (the crash loses them)")
elif step == "after-loss":
    res = done()
    assert res == 2, "task_done after the restart answered %r, not 2 (check first)" % res
    assert j.r.hget(j.key("towner"), "0:0") == PRODUCER.encode(), "task_done changed the owner"
    assert not j.r.hexists(j.key("tbatches"), "0:0"), "task_done marked the task done"
    res = check(0, 5, "")
    assert res == [0, 3], "task_check answered %r, not [0, 3] (batch 3 lost)" % res
    assert j.r.hget(j.key("tresume"), "0:0") == b"3", "resume point %r" % j.r.hget(j.key("tresume"), "0:0")
    assert j.r.hget(j.key("towner"), "0:0") is None, "the task is still the producer's"
    res = j.script("task_claim", PRODUCER, 60000)
    assert res[0] == b"task" and res[1] == b"0:0" and res[6] == 3, "claim: %r" % res
    print("task_done answered 2; task_check handed the task back at batch 3; claimed again from 3")
elif step == "redo":
    push(range(3, 5))
    print("pushed batches 3-4 again")
elif step == "after-restart":
    res = done()
    assert res == 2, "task_done after a lossless restart answered %r, not 2" % res
    # In two chunks, the last naming a server other than the first's: no
    # confirmation.
    first = check(0, 3)
    assert first[0] == 1 and first[1], "task_check 0-3: %r" % first
    res = check(3, 5, "0" * 40)
    assert res == [1, first[1]], "task_check 3-5: %r" % res
    assert done() == 2, "task_done took a check confirmed across two servers"
    # In two chunks on one server, and in one (the first is the last).
    res = check(3, 5, first[1].decode())
    assert res == [1, first[1]], "task_check 3-5: %r" % res
    assert j.r.hget(j.key("trun"), "0:0") == first[1], "the check did not confirm the task"
    j.r.hset(j.key("trun"), "0:0", "0" * 40)
    res = check(0, 5, "")
    assert res == [1, first[1]], "task_check 0-5: %r" % res
    assert j.r.hget(j.key("trun"), "0:0") == first[1], "a check in one chunk did not confirm the task"
    res = done()
    assert res == 1, "task_done after the check answered %r" % res
    assert j.r.hget(j.key("tbatches"), "0:0") == b"5", "tbatches %r" % j.r.hget(j.key("tbatches"), "0:0")
    assert j.r.hget(j.key("jrun"), "state") == b"finished", "the job is not finished"
    print("task_done answered 2; task_check confirmed all 5 batches on the new server; task_done then 1")
PYEOF
}

py setup || fail "setup failed"
aof_mark
py lost || fail "the lost pushes failed"
aof_crash_back
py after-loss || fail "a task_done after Redis lost pushes was not checked first"
py redo || fail "the redone pushes failed"
redis_tmp_kill9
redis_tmp_restart || fail "Redis did not come back: $(tail -n 5 "$REDIS_DIR/redis.log")"
py after-restart || fail "a task_done after a lossless restart did not go through its check"
echo "ok: after a restart, task_done waits for the task's pushes to be checked on the new server"
