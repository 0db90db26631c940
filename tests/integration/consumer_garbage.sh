#!/usr/bin/env bash
# Hostile values in a queue: not msgpack, a truncated frame, a frame over
# the queue's frame limit, format version 2, an allocation bomb, a frame
# stored under another batch's id, and an id that is no batch id at all.
# Each goes to the dead-letter list with its reason; the consumer carries
# on and the valid batches behind them arrive intact.
# shellcheck source=tests/lib/integration.sh
. "$(dirname "$0")/../lib/integration.sh"
need_bin sluice-ctl sluice-consume

redis_tmp_start
q=garbage
ctl create "$q" --max-batches 100 --max-bytes 64M --max-frame-bytes 2000 >/dev/null
good=$(
"$PY" - "$REDIS_PORT" "$q" "$BUILD/sluice-ctl" "$ROOT/tests/integration" <<'PYEOF'
import sys
sys.path.insert(0, sys.argv[4])
from consumer_jobtool import Job, frame, fnv1a64, MASK
j = Job(sys.argv[1], sys.argv[2], sys.argv[3])
ok = frame(0, 1, 5, [b"x" * 10])
j.raw("0:1:0", b"hello, this is not msgpack")
j.raw("0:1:1", frame(0, 1, 1, [b"truncated" * 20])[:-7])
j.raw("0:1:2", frame(0, 1, 2, [b"y" * 3000]))            # over --max-frame-bytes 2000
j.raw("0:1:3", frame(0, 1, 3, [b"v2"], version=2))
j.raw("0:1:4", b"\xdd\x20\x00\x00\x00")                  # array of 2^29 elements in 5 bytes
j.raw("0:1:5", frame(0, 1, 99, [b"mismatch"]))           # carries 0:1:99
j.raw("not-a-batch-id", ok)
recs, csum = 0, 0
for seq in range(3):
    rs = [bytes([65 + seq]) * (seq + 1) * 7, b"tail"]
    j.push(0, 2, seq, rs)
    recs += len(rs)
    for r in rs:
        csum = (csum + fnv1a64(r)) & MASK
print("records=%d checksum=%016x" % (recs, csum))
PYEOF
) || fail "pushing the test values failed"
note "valid: $good"

# A consumer whose own limit is below the queue's would dead-letter what
# producers may push: refused at open.
rc=0
err=$("$BUILD/sluice-consume" --redis "$REDIS_URL" --queue "$q" --max-batch-bytes 1000 \
    --timeout-ms 100 2>&1 >/dev/null) || rc=$?
((rc == 2)) && [[ $err == *"admits frames of up to 2000 bytes"* ]] ||
    fail "a consumer limit below the queue's frame limit: exit $rc, $err"

out=$("$BUILD/sluice-consume" --redis "$REDIS_URL" --queue "$q" --summary --quiet \
    --timeout-ms 1500 2>"$T/err") || fail "consumer failed: $out $(cat "$T/err")"
note "consumer: $out"
note "stderr: $(cat "$T/err")"
[[ $(kv batches "$out") == 3 ]] || fail "consumer got $(kv batches "$out") batches, expected the 3 valid ones"
[[ $(kv records "$out") == $(kv records "$good") ]] || fail "records differ: $out vs $good"
[[ $(kv checksum "$out") == $(kv checksum "$good") ]] || fail "checksums differ: $out vs $good"
n=$(grep -c 'dead letters' "$T/err" || true)
((n >= 1)) || fail "the consumer reported no invalid batch on stderr"

ndead=$(redis_tmp_cli LLEN "sluice:{$q}:dead")
((ndead == 7)) || fail "$ndead dead letters, expected 7: $(redis_tmp_cli LRANGE "sluice:{$q}:dead" 0 -1 | tr '\n' ' ')"
for id in 0:1:0 0:1:1 0:1:2 0:1:3 0:1:4 0:1:5 not-a-batch-id; do
    info=$(redis_tmp_cli HGET "sluice:{$q}:deadinfo" "$id")
    reason=${info#* * }
    note "$id: $reason"
    [[ -n $info && -n $reason && $reason != "$info" ]] || fail "$id has no dead-letter reason: '$info'"
done
[[ $(redis_tmp_cli HGET "sluice:{$q}:deadinfo" 0:1:5) == *"0:1:99"* ]] || fail "the id mismatch is not explained"
[[ $(held "$q") == 0 ]] || fail "data left in the queue"
[[ $(redis_tmp_cli GET "sluice:{$q}:bytes") == 0 ]] || fail "byte budget not returned: $(redis_tmp_cli GET "sluice:{$q}:bytes")"
echo "ok: 7 hostile values dead-lettered with reasons, 3 valid batches delivered intact"
