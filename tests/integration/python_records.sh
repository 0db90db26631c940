#!/usr/bin/env bash
# Python Consumer over raw records: sluice-producer pushes a TFRecord file;
# Python reads every record once (same checksum as gen-tfrecord), a record
# memoryview used after release() raises ValueError, a batch dropped
# without release() comes back after close(), and `with batch:` acks (the
# queue is empty in the end).
# shellcheck source=tests/lib/integration.sh
. "$(dirname "$0")/../lib/integration.sh"
# shellcheck source=tests/lib/python.sh
. "$ROOT/tests/lib/python.sh"
need_bin sluice-ctl sluice-producer gen-tfrecord

redis_tmp_start
q=pyr
line=$(gen "$T/in.tfrecord" 300 11 0 1500)
note "gen-tfrecord: $line"
ctl create "$q" --max-batches 100 --max-bytes 64M >/dev/null
pline=$("$BUILD/sluice-producer" --redis "$REDIS_URL" --queue "$q" --batch-size 16 --summary \
    --quiet "$T/in.tfrecord") || fail "sluice-producer failed"
note "producer: $pline"
nb=$(kv batches "$pline")
pyline=$(py "$ROOT/tests/integration/python_records.py" "$REDIS_URL" "$q" "$nb") ||
    fail "python_records.py failed"
note "python: $pyline"
[[ $(kv records "$pyline") == $(kv records "$line") ]] ||
    fail "python read $(kv records "$pyline") records, gen-tfrecord wrote $(kv records "$line")"
[[ $(kv checksum "$pyline") == $(kv checksum "$line") ]] ||
    fail "python checksum $(kv checksum "$pyline") != gen-tfrecord's $(kv checksum "$line")"
[[ $(info_field "$q" batches) == 0 ]] || fail "batches left: $(info_field "$q" batches)"
[[ $(info_field "$q" acked) == "$nb" ]] || fail "acked: $(info_field "$q" acked), expected $nb"
echo "ok: $pyline"
