#!/usr/bin/env bash
# A trainer of 2 coordinated ranks resumed again and again from the same
# checkpoint, each time killed (SIGKILL) holding, unacknowledged, the
# batches of the step after it, with Redis restarted from its AOF between
# two of the kills: more times than the queue's max_deliveries. Those
# batches count a delivery at each death, yet a consumer with checkpoints
# trains them again after its resume, so none may be dead-lettered: the
# finished model holds every batch of the epoch once, 24 per rank, and
# the dead-letter list stays empty (checkpoint_replay.py).
# shellcheck source=tests/lib/integration.sh
. "$(dirname "$0")/../lib/integration.sh"
# shellcheck source=tests/lib/python.sh
. "$ROOT/tests/lib/python.sh"
need_bin sluice-ctl sluice-producer gen-tfrecord
replay=$ROOT/tests/integration/checkpoint_replay.py

# 4 shards of 120 records, batches of 10: 48 batches, 24 per rank.
gen "$T/in.tfrecord" 480 7 10 200
echo "tfrecord $T/in.tfrecord split=4" >"$T/job.manifest"
redis_tmp_start --appendonly yes --appendfsync always
ctl create ck --max-batches 64 --max-bytes 64M --consumers 2 --coordinated --lease-ms 1000 \
    --max-deliveries 3 >/dev/null || fail "create failed"
ctl submit ck --manifest "$T/job.manifest" --epochs 1 --batch-size 10 >/dev/null ||
    fail "submit failed"
"$BUILD/sluice-producer" --redis "$REDIS_URL" --queue ck --quiet || fail "the producer failed"

state=$T/state.json
round=0
for phase in first crash crash crash; do
    round=$((round + 1))
    rc=0
    "${PYCMD[@]}" "$replay" "$REDIS_URL" ck "$state" $phase 2>"$T/r.err" || rc=$?
    ((rc == 137)) || fail "round $round ($phase): exit $rc, not killed: $(tail -3 "$T/r.err")"
    ((round == 2)) && redis_tmp_restart
done
out=$("${PYCMD[@]}" "$replay" "$REDIS_URL" ck "$state" finish 2>"$T/r.err") ||
    fail "finish failed: $(tail -3 "$T/r.err")"
note "$out"
[[ $(rcli LLEN "sluice:{ck}:dead") == 0 ]] ||
    fail "dead-lettered: $(rcli HGETALL "sluice:{ck}:deadinfo" | tr '\n' ' ')"
[[ $out == "ok batches=48 distinct=48 rank0=24 rank1=24" ]] || fail "$out"
echo "ok: resumed 4 times from one checkpoint, the batches after it held at each kill: none lost"
