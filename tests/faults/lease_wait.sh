#!/usr/bin/env bash
# A producer waiting for room keeps its task, whatever the lease: with
# --lease-ms 1000 (the suite's short lease) a producer is blocked by
# backpressure (queue budget 4 batches, nobody consuming) for 4 s while a
# reaper runs the protocol's reap script back to back (as the consumers
# and the other producers do, at any moment). Checked: the task is never
# reaped from the live producer (its lease renewed in time through the
# whole wait, not only most of it); then consumers drain the job and every
# record arrives exactly once.
# shellcheck source=tests/lib/faults.sh
. "$(dirname "$0")/../lib/faults.sh"
need_bin sluice-ctl sluice-producer sluice-consume gen-tfrecord

redis_tmp_start
q=faultlease
make_shards 1 200 "$T/job.manifest"
ctl create "$q" --max-batches 4 --max-bytes 64M --lease-ms 1000 >/dev/null
ctl submit "$q" --manifest "$T/job.manifest" --epochs 1 --batch-size 10 >/dev/null ||
    fail "submit failed"
start_producer "$T/p" "$q" --id P --lease-ms 1000
p=$BG_PID
queue_full() { [[ $(info_field "$q" batches) == 4 ]]; }
wait_for 10 queue_full || fail "the producer did not fill the queue"

# The reaper: the reap script, as fast as Redis answers, for 4 s; prints
# how often it ran and, if it reaped the task, how late the lease was.
"$PY" - "$REDIS_PORT" "$q" "$BUILD/sluice-ctl" <<'PYEOF' || fail "the live producer lost its task (seed $SEED)"
import subprocess, sys, time
import redis
port, q, ctl = sys.argv[1:4]
r = redis.Redis(host="127.0.0.1", port=int(port))
src = subprocess.run([ctl, "script", "reap"], check=True, stdout=subprocess.PIPE).stdout
sha = r.script_load(src)
meta, lease = "sluice:{%s}:meta" % q, "sluice:{%s}:tlease" % q
runs, late, t0 = 0, [], time.time()
while time.time() - t0 < 4:
    score = r.zscore(lease, "0:0")
    now = int(time.time() * 1000)
    n = r.evalsha(sha, 1, meta, now)[1]
    runs += 1
    if n:
        late.append("%d ms" % (now - score) if score else "(no lease entry read)")
print("reap ran %d times in 4 s while the producer waited for room" % runs)
if late:
    print("FAIL: the task of the live producer was reaped %d times; its lease was over by: %s"
          % (len(late), ", ".join(late)))
    sys.exit(1)
PYEOF
kill -0 "$p" 2>/dev/null || fail "the producer exited while it waited: $(cat "$T/p.err")"
[[ $(rcli HGET "sluice:{$q}:towner" 0:0) == P ]] || fail "the producer no longer owns its task"
echo "the producer kept task 0:0 through 4 s of waiting with a 1 s lease"

start_consumer "$T/c" "$q" --quiet
rc=0; wait_pid "$p" 30 || rc=$?
((rc == 0)) || fail "producer exit $rc: $(cat "$T/p.err")"
rc=0; wait_pid "$BG_PID" 30 || rc=$?
((rc == 0)) || fail "consumer exit $rc: $(cat "$T/c.err")"
check_ids "$q" 1 "$(batches_per_shard 1 200 10)" --exact "$T/c"
epoch_sums_match 1 "$T/c"
echo "ok: a producer blocked by backpressure kept its 1 s lease (seed $SEED)"
