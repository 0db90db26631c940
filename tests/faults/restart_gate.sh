#!/usr/bin/env bash
# After Redis restarts without its last second, no consumer takes a batch
# that another one had acknowledged in that second before that one's
# restore put the acknowledgement back (restore.lua, take.lua). Played at
# the level of the scripts, so that the order is exact: consumers A and B
# register (restore); then, in what the crash will lose, B takes the 3
# batches of the queue and acknowledges one. Redis is killed with -9 and
# its AOF cut back to before that. A comes back first: its restore
# notices the restart (run_id), and its takes are answered RECOVERING. B
# restores (the acknowledged batch and the two it holds): A's takes stay
# RECOVERING for 3 s from the restart, and after that A gets nothing: the
# acknowledged batch is acknowledged again, the held ones are B's again.
# Without the pause A would have taken all three, unflagged.
# shellcheck source=tests/lib/faults.sh
. "$(dirname "$0")/../lib/faults.sh"
need_bin sluice-ctl

redis_tmp_start --appendonly yes --appendfsync everysec --aof-load-truncated yes
q=gate
ctl create "$q" --max-batches 16 --max-bytes 1M --lease-ms 2000 >/dev/null

# py STEP: one step of the scenario (the Python below), against the
# current server.
py() {
    "$PY" - "$REDIS_PORT" "$q" "$BUILD/sluice-ctl" "$ROOT/tests/integration" "$T" "$@" <<'PYEOF'
import json, os, sys, time
sys.path.insert(0, sys.argv[4])
from consumer_jobtool import Job
import redis
j = Job(sys.argv[1], sys.argv[2], sys.argv[3])
state = os.path.join(sys.argv[5], "state.json")
step = sys.argv[6]

def restore(cid, fresh, *pairs):
    return j.script("restore", cid, "tok" + cid, fresh, "", "", *pairs)

def take(cid):
    return j.script("take", cid, "tok" + cid, "0", 16, 0, "")

if step == "setup":
    j.submit(1, 1)
    j.task(3)
    restore("A", "1")
    restore("B", "1")
    print("A and B registered; run_id %s" % j.r.get(j.key("runid")).decode())
elif step == "lost":
    got = take("B")
    ids = [got[i].decode() for i in range(0, len(got), 2)]
    assert len(ids) == 3, "B took %r" % got
    e, t, s = ids[0].split(":")
    n = j.script("ack", "B", "", ids[0], e, t, s)
    assert n == 1, "ack: %r" % n
    json.dump({"acked": ids[0], "held": ids[1:]}, open(state, "w"))
    print("B took %s and acknowledged %s" % (" ".join(ids), ids[0]))
elif step == "after":
    st = json.load(open(state))
    ready = [x.decode() for x in j.r.lrange(j.key("ready:0"), 0, -1)]
    assert sorted(ready) == sorted([st["acked"]] + st["held"]), \
        "after the cut the list holds %r: the cut lost nothing" % ready
    t0 = time.monotonic()
    restore("A", "0")
    try:
        got = take("A")
        sys.exit("A took %r right after the restart, before B restored" % got)
    except redis.ResponseError as e:
        assert str(e).startswith("RECOVERING"), "take: %s" % e
        print("A's take: %s" % e)
    restore("B", "0", "acked", st["acked"], "held", st["held"][0], "held", st["held"][1])
    waited = None
    while time.monotonic() - t0 < 10:
        try:
            got = take("A")
            waited = time.monotonic() - t0
            break
        except redis.ResponseError as e:
            assert str(e).startswith("RECOVERING"), "take: %s" % e
            time.sleep(0.05)
    assert waited is not None, "A still RECOVERING 10 s after the restart"
    assert waited >= 2.5, "A took after %.2f s, before the 3 s pause ended" % waited
    assert got == [], "A took %r: B's batches" % got
    acked = j.r.getbit(j.key("acked:0:0"), int(st["acked"].split(":")[2]))
    assert acked == 1, "the acknowledgement was not made again"
    pend = sorted(x.decode() for x in j.r.lrange(j.key("pending:B"), 0, -1))
    assert pend == sorted(st["held"]), "pending:B %r" % pend
    assert j.r.llen(j.key("ready:0")) == 0, "batches left in the list"
    print("A took nothing after %.1f s; B's acknowledgement made again, its 2 batches its own" % waited)
PYEOF
}

py setup || fail "setup failed"
aof_mark
py lost || fail "the lost second failed"
aof_crash_back
py after || fail "the restart was not held back until B restored"
echo "ok: no consumer took what another had acknowledged in the lost second before it restored"
