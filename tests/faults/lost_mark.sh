#!/usr/bin/env bash
# A restart of Redis can lose the mark of a batch an application received
# (lib.lua: handed) even with appendfsync always: no reply confirms a
# mark, so one on its way dies with the connection. A consumer that comes
# back restores it; one that dies first must not have what it held come
# back unflagged (lib.lua: notice_restart, give_back). Played at the level
# of the scripts, so that the order is exact. Consumer A takes 3 batches:
# one marked (its mark reached Redis), one received whose mark was lost
# (left unmarked), one prefetched only. Redis is killed with -9 and
# restarted (AOF, appendfsync always). A never comes back; B registers
# (its restore notices the restart) and, once A's lease ran out and the
# pause is over, takes all three: each must come with deliveries 2. Then
# the same with the restart noticed by the reap that gives A's batches
# back (no restore came first), with --max-deliveries 1: the marked batch
# is dead-lettered, the two unsure ones come back flagged but not
# dead-lettered. Last, a consumer that restored after the restart is sure
# again: what it only prefetched comes back uncounted.
# shellcheck source=tests/lib/faults.sh
. "$(dirname "$0")/../lib/faults.sh"
need_bin sluice-ctl

redis_tmp_start --appendonly yes --appendfsync always

# py QUEUE STEP: one step of the scenario (the Python below) on QUEUE,
# against the current server.
py() {
    "$PY" - "$REDIS_PORT" "$1" "$BUILD/sluice-ctl" "$ROOT/tests/integration" "$T" "${@:2}" <<'PYEOF'
import json, os, sys, time
sys.path.insert(0, sys.argv[4])
from consumer_jobtool import Job
import redis
j = Job(sys.argv[1], sys.argv[2], sys.argv[3])
state = os.path.join(sys.argv[5], sys.argv[2] + ".json")
step = sys.argv[6]
FOREVER = 253402300799000   # the mark's expiry (lib.lua: handed)

def restore(cid, fresh, *pairs):
    return j.script("restore", cid, "tok" + cid, fresh, "", "", *pairs)

def take(cid, fresh="0"):
    """Takes until the pause after a restart is over (10 s at most)."""
    t0 = time.monotonic()
    while True:
        try:
            got = j.script("take", cid, "tok" + cid, fresh, 16, 0, "")
            return {got[i].decode(): int(got[i + 1]) for i in range(0, len(got), 2)}
        except redis.ResponseError as e:
            assert str(e).startswith("RECOVERING"), "take: %s" % e
            assert time.monotonic() - t0 < 10, "still RECOVERING after 10 s"
            time.sleep(0.05)

def reaped(cid):
    """Runs reap until cid's lease ran out and it was reaped (10 s at most)."""
    t0 = time.monotonic()
    while j.r.hexists(j.key("consumers"), cid):
        assert time.monotonic() - t0 < 10, "%s not reaped after 10 s" % cid
        j.script("reap")
        time.sleep(0.05)

if step == "setup":
    j.submit(1, 1)
    j.task(3)
    restore("A", "1")
    got = take("A")
    ids = sorted(got)
    assert len(ids) == 3 and all(d == 1 for d in got.values()), "A took %r" % got
    marked, lost, prefetched = ids
    j.r.pexpireat(j.key("b:" + marked), FOREVER)
    json.dump({"marked": marked, "lost": lost, "prefetched": prefetched}, open(state, "w"))
    print("A took %s: %s marked, %s received with its mark lost, %s prefetched"
          % (" ".join(ids), marked, lost, prefetched))
elif step == "restore-first":
    st = json.load(open(state))
    restore("B", "1")
    assert j.r.sismember(j.key("unsure"), "A"), "B's restore did not put A in unsure"
    assert not j.r.sismember(j.key("unsure"), "B"), "B, restoring, is unsure"
    reaped("A")
    assert not j.r.sismember(j.key("unsure"), "A"), "A reaped, still in unsure"
    got = take("B")
    assert got == {st[k]: 2 for k in ("marked", "lost", "prefetched")}, \
        "B took %r: each should come with deliveries 2" % got
    print("B took %r: all flagged" % got)
elif step == "reap-first":
    st = json.load(open(state))
    # Nobody restored yet: the reap that gives A's batches back notices.
    reaped("A")
    assert j.r.exists(j.key("recover_pause")), "the reap did not notice the restart"
    dead = [x.decode() for x in j.r.lrange(j.key("dead"), 0, -1)]
    assert dead == [st["marked"]], "dead letters %r: only the marked batch had max 1" % dead
    got = take("B", "1")
    assert got == {st["lost"]: 2, st["prefetched"]: 2}, \
        "B took %r: the unsure ones should come flagged, not dead-lettered" % got
    print("dead-lettered %s; B took %r: flagged" % (dead[0], got))
elif step == "restored":
    st = json.load(open(state))
    restore("B", "1")
    assert j.r.sismember(j.key("unsure"), "A"), "B's restore did not put A in unsure"
    # A comes back: its restore marks again what its application holds.
    restore("A", "0", "held", st["marked"], "held", st["lost"])
    assert not j.r.sismember(j.key("unsure"), "A"), "A restored, still unsure"
    j.r.hset(j.key("consumers"), "A", 0)   # then dies: its lease is over
    reaped("A")
    got = take("B")
    assert got == {st["marked"]: 2, st["lost"]: 2, st["prefetched"]: 1}, \
        "B took %r: after A's restore only what it held counts" % got
    print("B took %r" % got)
PYEOF
}

restart() {
    redis_tmp_kill9
    redis_tmp_restart || fail "Redis did not come back: $(tail -n 5 "$REDIS_DIR/redis.log")"
}

ctl create a --max-batches 16 --max-bytes 1M --lease-ms 1000 >/dev/null || fail "create a failed"
ctl create b --max-batches 16 --max-bytes 1M --lease-ms 1000 --max-deliveries 1 >/dev/null ||
    fail "create b failed"
ctl create c --max-batches 16 --max-bytes 1M --lease-ms 1000 >/dev/null || fail "create c failed"
for q in a b c; do
    py "$q" setup || fail "setup of $q failed"
done
restart
py a restore-first || fail "A's batches did not all come back flagged (restart noticed by a restore)"
py b reap-first || fail "A's batches did not come back as they should (restart noticed by the reap)"
py c restored || fail "after A's restore, its batches did not come back as they should"
echo "ok: a consumer that died before it restored after a restart of Redis has all it held come back flagged"
