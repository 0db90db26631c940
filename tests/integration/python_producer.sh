#!/usr/bin/env bash
# The Python Producer: record and tensor batches pushed from Python reach
# the C consumer intact (sluice-consume --summary agrees with Python's
# checksum); tensors of every dtype make the round trip through Python;
# and a Python producer waits on a full queue (backpressure) until a
# consumer started later frees room, with nothing lost.
# shellcheck source=tests/lib/integration.sh
. "$(dirname "$0")/../lib/integration.sh"
# shellcheck source=tests/lib/python.sh
. "$ROOT/tests/lib/python.sh"
need_bin sluice-ctl sluice-consume
pyp=$ROOT/tests/integration/python_producer.py

redis_tmp_start

# Python -> C.
ctl create mix --max-batches 100 --max-bytes 64M >/dev/null
pyline=$(py "$pyp" push "$REDIS_URL" mix) || fail "python push failed"
note "python: $pyline"
cline=$("$BUILD/sluice-consume" --redis "$REDIS_URL" --queue mix --summary --quiet \
    --timeout-ms 1000) || fail "sluice-consume failed"
note "sluice-consume: $cline"
for f in records batches checksum; do
    [[ $(kv $f "$cline") == $(kv $f "$pyline") ]] ||
        fail "$f: sluice-consume $(kv $f "$cline"), python $(kv $f "$pyline")"
done

# Python -> Python, every dtype.
ctl create rt --max-batches 10 --max-bytes 16M >/dev/null
rtline=$(py "$pyp" roundtrip "$REDIS_URL" rt) || fail "python roundtrip failed"
note "$rtline"

# Backpressure: 30 batches into a budget of 3, no consumer yet.
ctl create bp --max-batches 3 --max-bytes 64M >/dev/null
bg "$T/p.out" "$T/p.err" "${PYCMD[@]}" "$pyp" flood "$REDIS_URL" bp 30
p=$BG_PID
for ((i = 0; i < 100; i++)); do
    [[ $(held bp) == 3 ]] && break
    kill -0 "$p" 2>/dev/null || fail "python producer exited early: $(cat "$T/p.err")"
    sleep 0.05
done
[[ $(held bp) == 3 ]] || fail "the queue never reached its budget"
sleep 0.5
kill -0 "$p" 2>/dev/null || fail "python producer did not wait for room: $(cat "$T/p.out")"
[[ $(info_field bp pushed) == 3 ]] || fail "pushed $(info_field bp pushed) into a budget of 3"
cline=$("$BUILD/sluice-consume" --redis "$REDIS_URL" --queue bp --summary --quiet \
    --timeout-ms 3000) || fail "sluice-consume failed"
rc=0; wait_pid "$p" 30 || rc=$?
((rc == 0)) || fail "python producer exit $rc: $(cat "$T/p.err")"
pline=$(cat "$T/p.out")
note "python: $pline"; note "sluice-consume: $cline"
(($(kv full_waits "$pline") > 0)) || fail "the python producer never waited for room"
for f in records batches checksum; do
    [[ $(kv $f "$cline") == $(kv $f "$pline") ]] ||
        fail "$f: sluice-consume $(kv $f "$cline"), python $(kv $f "$pline")"
done
[[ $(info_field bp batches) == 0 ]] || fail "batches left in bp"
echo "ok: python push ($pyline), $rtline, backpressure ($pline)"
