#!/usr/bin/env bash
# A consumer that opens after producers ended epochs still gets their
# batches: a job of 2 epochs is produced completely (both ends posted)
# before any consumer exists; the late consumer reads every batch of epoch
# 0, its EOF, every batch of epoch 1, its EOF, and finishes.
# shellcheck source=tests/lib/integration.sh
. "$(dirname "$0")/../lib/integration.sh"
need_bin sluice-ctl sluice-consume

redis_tmp_start
q=late
ctl create "$q" --max-batches 1000 --max-bytes 64M >/dev/null
"$PY" - "$REDIS_PORT" "$q" "$BUILD/sluice-ctl" "$ROOT/tests/integration" <<'PYEOF' >"$T/tasks" ||
import sys
sys.path.insert(0, sys.argv[4])
from consumer_jobtool import Job
j = Job(sys.argv[1], sys.argv[2], sys.argv[3])
j.submit(2, 2)
for _ in range(4):
    print(j.task(5)[0])
PYEOF
    fail "could not produce the job"
[[ $(redis_tmp_cli HGET "sluice:{$q}:jrun" state) == finished ]] || fail "the job did not finish producing"

"$BUILD/sluice-consume" --redis "$REDIS_URL" --queue "$q" --quiet --timeout-ms 5000 >"$T/out" ||
    fail "sluice-consume exit $?: $(cat "$T/out")"
grep -c '^batch 0:' "$T/out" | grep -qx 10 || fail "epoch 0: $(grep -c '^batch 0:' "$T/out") batches, expected 10"
grep -c '^batch 1:' "$T/out" | grep -qx 10 || fail "epoch 1: $(grep -c '^batch 1:' "$T/out") batches, expected 10"
grep -qx 'eof epoch=0' "$T/out" || fail "no EOF of epoch 0"
grep -qx 'eof epoch=1' "$T/out" || fail "no EOF of epoch 1"
tail -n 1 "$T/out" | grep -qx finished || fail "the consumer did not finish: $(tail -n 3 "$T/out")"
# Epoch order: no batch of epoch 1 before the EOF of epoch 0.
first1=$(grep -m 1 -n '^batch 1:' "$T/out" | cut -d: -f1)
eof0=$(grep -n '^eof epoch=0' "$T/out" | cut -d: -f1)
((eof0 < first1)) || fail "a batch of epoch 1 came before the EOF of epoch 0"
echo "ok: a late consumer read both ended epochs (20 batches) and finished"
