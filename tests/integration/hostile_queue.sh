#!/usr/bin/env bash
# More hostile values in a queue than consumer_garbage.sh's seven: other
# allocation bombs (a map32, str32 and bin32 that claim 4 GiB in 5 bytes),
# nesting 100000 deep, an undefined type byte (0xc1), trailing bytes after
# a valid frame, an empty value, msgpack that is not a map, "v" not first,
# a record count that disagrees with the records, a bad id, and tensors
# whose shape lies: a product that overflows 64 bits down to the data's
# real size (2^61+1 float64s in 8 bytes; 2^32 x 2^32 bytes in none), more
# than 8 dimensions, shape[0] != n, an unknown dtype; plus an id queued
# with no frame at all. Each goes to the dead-letter list with a reason;
# the consumer goes on and the valid batches queued behind them arrive
# intact; nothing of them is left in the queue.
# shellcheck source=tests/lib/integration.sh
. "$(dirname "$0")/../lib/integration.sh"
need_bin sluice-ctl sluice-consume

redis_tmp_start
q=hostile
ctl create "$q" --max-batches 100 --max-bytes 64M >/dev/null
good=$(
"$PY" - "$REDIS_PORT" "$q" "$BUILD/sluice-ctl" "$ROOT/tests/integration" "$T/ids" <<'PYEOF'
import struct, sys
sys.path.insert(0, sys.argv[4])
import msgpack
from consumer_jobtool import Job, frame, fnv1a64, MASK
j = Job(sys.argv[1], sys.argv[2], sys.argv[3])
pk = lambda o: msgpack.packb(o, use_bin_type=True)

def tensor_frame(seq, n, dtype, shape, data):
    return pk({"v": 1, "id": [0, 1, seq], "n": n,
               "x": {"t": {"dtype": dtype, "shape": shape, "data": data}}})

bad = {
    "map32 bomb": b"\xdf\xff\xff\xff\xff",
    "str32 bomb": b"\xdb\x7f\xff\xff\xff",
    "bin32 bomb": b"\x85\xa1v\x01\xa2id\x93\x00\x01\x07\xa1n\x01\xa1r\x91\xc6\xff\xff\xff\xf0ab",
    # A valid frame plus an unknown key (which readers skip) whose value
    # nests 100000 arrays deep.
    "deep nesting": (b"\x85\xa1v\x01\xa2id\x93\x00\x01\x03\xa1n\x01\xa1r\x91\xc4\x01a"
                     b"\xa2zz" + b"\x91" * 100000 + b"\x00"),
    "type byte c1": b"\xc1",
    "trailing bytes": frame(0, 1, 9, [b"ok"]) + b"\x00junk",
    "empty value": b"",
    "not a map": pk([1, 2, 3]),
    "v not first": pk({"id": [0, 1, 12], "v": 1, "n": 1, "r": [b"a"]}),
    "n disagrees": pk({"v": 1, "id": [0, 1, 13], "n": 5, "r": [b"a", b"b"]}),
    "bad id": pk({"v": 1, "id": [-1, "x", 0], "n": 1, "r": [b"a"]}),
    "shape overflow 8 bytes": tensor_frame(15, 1, "float64", [1, 2**61 + 1], b"\x00" * 8),
    "shape overflow 0 bytes": tensor_frame(16, 2**32, "uint8", [2**32, 2**32], b""),
    "9 dimensions": tensor_frame(17, 1, "uint8", [1] * 9, b"\x00"),
    "shape[0] != n": tensor_frame(18, 2, "uint8", [3, 1], b"\x00" * 3),
    "unknown dtype": tensor_frame(19, 1, "complex128", [1], b"\x00" * 16),
}
ids = []
for k, (what, value) in enumerate(bad.items()):
    bid = "0:1:%d" % k
    j.raw(bid, value)
    ids.append(bid + " " + what.replace(" ", "_"))
# An id with no frame behind it.
j.r.lpush(j.key("ready:0"), "0:1:99")
ids.append("0:1:99 an_id_without_a_frame")
with open(sys.argv[5], "w") as f:
    f.write("\n".join(ids) + "\n")
recs, csum = 0, 0
for seq in range(3):
    rs = [bytes([97 + seq]) * (seq + 5), b"end"]
    j.push(0, 2, seq, rs)
    recs += len(rs)
    for r in rs:
        csum = (csum + fnv1a64(r)) & MASK
print("records=%d checksum=%016x" % (recs, csum))
PYEOF
) || fail "pushing the test values failed"
nbad=$(wc -l <"$T/ids")
note "valid: $good; $nbad hostile values"

rc=0
out=$(timeout 30 "$BUILD/sluice-consume" --redis "$REDIS_URL" --queue "$q" --summary --quiet \
    --timeout-ms 1500 2>"$T/err") || rc=$?
note "consumer stderr: $(cat "$T/err")"
((rc == 0)) || fail "consumer exit $rc: $out $(cat "$T/err")"
[[ $(kv batches "$out") == 3 ]] || fail "consumer got $(kv batches "$out") batches, expected the 3 valid ones"
[[ $(kv records "$out") == $(kv records "$good") ]] || fail "records differ: $out vs $good"
[[ $(kv checksum "$out") == $(kv checksum "$good") ]] || fail "checksums differ: $out vs $good"

failures=0
while read -r id what; do
    info=$(redis_tmp_cli --raw HGET "sluice:{$q}:deadinfo" "$id")
    reason=${info#* * }
    if [[ -z $info || -z $reason || $reason == "$info" ]]; then
        echo "FAIL ${what//_/ } ($id): not dead-lettered with a reason (deadinfo '$info')"
        failures=$((failures + 1))
    else
        echo "ok   ${what//_/ } ($id): $reason"
    fi
done <"$T/ids"
((failures == 0)) || fail "$failures hostile values were not dead-lettered with a reason"
[[ $(info_field "$q" batches) == 0 ]] || fail "batches left in the queue: $(ctl info "$q")"
[[ $(info_field "$q" bytes) == 0 ]] || fail "byte budget not returned: $(ctl info "$q")"
left=$(redis_tmp_cli --raw LRANGE "sluice:{$q}:ready:0" 0 -1 | paste -sd' ')
[[ -z $left ]] || fail "ids left in the ready list: $left"
echo "ok: $nbad hostile values dead-lettered with reasons, 3 valid batches intact behind them"
