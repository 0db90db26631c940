#!/usr/bin/env bash
# Python reads tensors equal to what C produced: a C producer
# (tests/tools/push-tensors) pushes image/label/value batches; the Python
# Consumer sees the same values, dtypes and shapes, as numpy arrays that
# share memory with the received batch (no copy) and stay valid after
# release(); everything is acknowledged in the end.
# shellcheck source=tests/lib/integration.sh
. "$(dirname "$0")/../lib/integration.sh"
# shellcheck source=tests/lib/python.sh
. "$ROOT/tests/lib/python.sh"
need_bin sluice-ctl push-tensors

redis_tmp_start
q=pyt
ctl create "$q" --max-batches 100 --max-bytes 64M >/dev/null
cline=$("$BUILD/push-tensors" --redis "$REDIS_URL" --queue "$q" --batches 12 --batch-size 16) ||
    fail "push-tensors failed"
note "C producer: $cline"
pyline=$(py "$ROOT/tests/integration/python_tensors.py" "$REDIS_URL" "$q" 12 16) ||
    fail "python_tensors.py failed"
note "python: $pyline"
[[ $(kv checksum "$pyline") == $(kv checksum "$cline") ]] ||
    fail "python checksum $(kv checksum "$pyline") != C producer's $(kv checksum "$cline")"
[[ $(kv records "$pyline") == $(kv records "$cline") ]] || fail "records differ"
[[ $(info_field "$q" batches) == 0 ]] || fail "batches left: $(info_field "$q" batches)"
[[ $(info_field "$q" acked) == 12 ]] || fail "acked: $(info_field "$q" acked), expected 12"
echo "ok: $pyline"
