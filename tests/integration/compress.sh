#!/usr/bin/env bash
# Compressed frames (docs/PROTOCOL.md, "Compressed frames"): the same
# compressible lines pushed by sluice-producer into a plain queue, an lz4
# one and a zstd:5 one (partitioned) arrive intact at sluice-consume (counts
# and checksums of every record), while Redis holds fewer bytes for the
# compressed queues; the queues' meta and `info` show the setting. Hostile
# envelopes pushed by hand (a bomb that claims a small u and would give
# far more, u above the frame limit, u that disagrees, an unknown codec,
# keys out of order, an envelope inside an envelope) land in the dead
# letters with their reasons while the consumer goes on to the valid
# batches behind them. A Python producer (through libsluice) compresses
# as sluice-producer does, and its stats count the bytes before and after.
# sluice-ctl refuses bad --compress values before it writes anything, and
# the create script refuses them too.
# shellcheck source=tests/lib/integration.sh
. "$(dirname "$0")/../lib/integration.sh"
need_bin sluice-ctl sluice-producer sluice-consume

redis_tmp_start

# ---- bad settings: usage errors, nothing written -------------------------
for bad in lz4:5 zstd:0 zstd:20 zstd:x gzip ''; do
    rc=0
    out=$(ctl create bad --max-batches 10 --max-bytes 1M --compress "$bad" 2>&1) || rc=$?
    ((rc == 2)) || fail "create --compress '$bad': exit $rc, expected 2 (usage): $out"
    [[ $out == *"--compress"* ]] ||
        fail "create --compress '$bad': the message does not name the flag: $out"
    note "--compress '$bad': $(head -n 1 <<<"$out")"
done
[[ $(rcli EXISTS 'sluice:{bad}:meta') == 0 ]] || fail "a refused create wrote the queue"
src=$(ctl script create) || fail "sluice-ctl script create"
for bad in lz4:5 zstd:0 zstd:20 zstd:03 zstd gzip; do
    out=$(rcli EVAL "$src" 1 'sluice:{bad}:meta' 10 1048576 1 0 '' 10000 3 65536 '' '' "$bad" 2>&1)
    [[ $out == *"INVALID compress"* ]] || fail "create.lua accepted compress '$bad': $out"
done
[[ $(rcli EXISTS 'sluice:{bad}:meta') == 0 ]] || fail "a refused create.lua call wrote the queue"

# ---- the same data through three queues ----------------------------------
"$PY" - "$T/words.txt" <<'PYEOF'
import random, sys
rng = random.Random(7)
words = ["sluice", "batch", "frame", "tensor", "epoch", "redis", "queue", "record",
         "producer", "consumer", "lease", "budget"]
with open(sys.argv[1], "w") as f:
    for i in range(6000):
        f.write("%06d %s\n" % (i, " ".join(rng.choice(words) for _ in range(rng.randint(5, 40)))))
PYEOF
want=$(lines_sum <"$T/words.txt")
nlines=$(wc -l <"$T/words.txt")

ctl create plain --max-batches 1000 --max-bytes 64M >/dev/null
out=$(ctl create fast --max-batches 1000 --max-bytes 64M --compress lz4) || fail "create lz4: $out"
[[ $out == *"compressed with lz4"* ]] || fail "create lz4 says: $out"
ctl create small --max-batches 1000 --max-bytes 64M --compress zstd:5 --partitions 2 >/dev/null
[[ $(rcli HGET 'sluice:{fast}:meta' compress) == lz4 ]] || fail "meta compress of fast"
for p in 0 1; do
    [[ $(rcli HGET "sluice:{small#$p}:meta" compress) == zstd:5 ]] ||
        fail "meta compress of small#$p"
done
[[ $(rcli HEXISTS 'sluice:{plain}:meta' compress) == 0 ]] || fail "plain queue has a compress field"
for qz in fast:lz4 small:zstd:5 plain:none; do
    got=$(info_field "${qz%%:*}" compress)
    [[ $got == "${qz#*:}" ]] || fail "info ${qz%%:*}: compress $got, expected ${qz#*:}"
done

for q in plain fast small; do
    "$BUILD/sluice-producer" --redis "$REDIS_URL" --queue "$q" --format lines --batch-size 200 \
        --summary --quiet "$T/words.txt" >"$T/p-$q.out" 2>"$T/p-$q.err" ||
        fail "producer into $q: $(cat "$T/p-$q.err")"
    [[ $(kv checksum "$(cat "$T/p-$q.out")") == "$want" ]] ||
        fail "producer $q: $(cat "$T/p-$q.out")"
done
bytes_of() {
    local q=$1 n=0 k
    for k in $(rcli --scan --pattern "sluice:{$q*}:bytes"); do n=$((n + $(rcli GET "$k"))); done
    echo "$n"
}
b_plain=$(bytes_of plain) b_fast=$(bytes_of fast) b_small=$(bytes_of small)
note "bytes held: plain $b_plain, lz4 $b_fast, zstd:5 $b_small"
((b_plain > 0)) || fail "the plain queue holds no bytes"
((b_fast * 2 < b_plain)) || fail "the lz4 queue holds $b_fast bytes, plain $b_plain"
((b_small * 2 < b_plain)) || fail "the zstd queue holds $b_small bytes, plain $b_plain"
((b_small < b_fast)) || note "zstd:5 ($b_small) is not smaller than lz4 ($b_fast)"
# What Redis stores is envelopes: {"v": 1, "z": ...} (84 a1 76 01 a1 7a).
first=$(rcli --scan --pattern 'sluice:{fast}:b:*' | head -n 1)
head=$(rcli GETRANGE "$first" 0 5 | head -c 6 | od -An -tx1 | tr -d ' \n')
[[ $head == 84a17601a17a ]] || fail "the frame in $first starts with $head, not an envelope"

for q in plain fast small; do
    out=$(timeout 60 "$BUILD/sluice-consume" --redis "$REDIS_URL" --queue "$q" --summary \
        --quiet --timeout-ms 1500 2>"$T/c-$q.err") || fail "consumer of $q: $(cat "$T/c-$q.err")"
    note "$q: $out"
    [[ $(kv records "$out") == "$nlines" ]] || fail "$q: $(kv records "$out") records of $nlines"
    [[ $(kv checksum "$out") == "$want" ]] || fail "$q: checksum $(kv checksum "$out"), want $want"
    [[ $(bytes_of "$q") == 0 ]] || fail "$q: bytes left after consuming: $(bytes_of "$q")"
    [[ $(rcli LLEN "sluice:{$q}:dead") == 0 ]] || fail "$q: dead letters: $(ctl dead "$q")"
done

# ---- the Python producer (libsluice) compresses too, and counts it -------
. "$ROOT/tests/lib/python.sh"
ctl create pyz --max-batches 100 --max-bytes 64M --compress zstd >/dev/null
pyline=$(py - "$REDIS_URL" <<'PYEOF'
import sys
import sluice
MASK = (1 << 64) - 1
def fnv1a64(data):
    h = 0xCBF29CE484222325
    for b in data:
        h = ((h ^ b) * 0x100000001B3) & MASK
    return h
csum, n = 0, 0
with sluice.Producer(sys.argv[1], "pyz") as p:
    for k in range(20):
        recs = [(b"row %d of batch %d; " % (i, k)) * 20 for i in range(50)]
        p.push_records(recs)
        n += len(recs)
        for r in recs:
            csum = (csum + fnv1a64(r)) & MASK
    p.flush()
    st = p.stats()
print("records=%d checksum=%016x bytes=%d raw_bytes=%d" % (n, csum, st["bytes"], st["raw_bytes"]))
PYEOF
) || fail "the Python producer failed"
note "python: $pyline"
(($(kv raw_bytes "$pyline") > 4 * $(kv bytes "$pyline"))) ||
    fail "the Python producer's stats show no compression: $pyline"
[[ $(held 'pyz') == 20 ]] || fail "pyz holds $(held 'pyz')"
(($(rcli GET 'sluice:{pyz}:bytes') == $(kv bytes "$pyline"))) ||
    fail "pyz holds $(rcli GET 'sluice:{pyz}:bytes') bytes, its producer stored: $pyline"
out=$(timeout 30 "$BUILD/sluice-consume" --redis "$REDIS_URL" --queue pyz --summary --quiet \
    --timeout-ms 1500 2>"$T/err") || fail "consumer of pyz: $(cat "$T/err")"
[[ $(kv checksum "$out") == $(kv checksum "$pyline") ]] || fail "pyz: $out vs python $pyline"

# ---- hostile envelopes ---------------------------------------------------
# The consumer's frame limit is the queue's max_frame: 1 MiB here.
ctl create hostile --max-batches 100 --max-bytes 64M --max-frame-bytes 1M --compress lz4 >/dev/null
good=$(
"$PY" - "$REDIS_PORT" hostile "$BUILD/sluice-ctl" "$ROOT/tests/integration" "$T/ids" <<'PYEOF'
import sys
sys.path.insert(0, sys.argv[4])
import msgpack
from consumer_jobtool import Job, frame, fnv1a64, MASK
j = Job(sys.argv[1], sys.argv[2], sys.argv[3])

def env(z, u, c, order="vzuc"):
    vals = {"v": 1, "z": z, "u": u, "c": c}
    m = b"\x84"
    for k in order:
        m += msgpack.packb(k) + msgpack.packb(vals[k], use_bin_type=True)
    return m

def lz4_literals(data):
    """An LZ4 block of literals only (no match): valid, and as long as data."""
    n = len(data)
    out = bytearray([min(n, 15) << 4])
    if n >= 15:
        r = n - 15
        while r >= 255:
            out.append(255)
            r -= 255
        out.append(r)
    return bytes(out) + data

# A bomb: one literal, then one match of 15 + 4 + 255 x 60000 bytes (15 MiB)
# from 60 KB, claiming u = 100 bytes.
bomb = b"\x1fA\x01\x00" + b"\xff" * 60000 + b"\x00\x50AAAAA"
inner = frame(0, 1, 7, [b"inside"])
nested = env("lz4", len(inner), lz4_literals(inner))
bad = {
    "bomb, u small": env("lz4", 100, bomb),
    "u above the frame limit": env("lz4", 1 << 40, bomb),
    "u larger than the data": env("lz4", len(inner) + 5, lz4_literals(inner)),
    "u smaller than the data": env("lz4", len(inner) - 1, lz4_literals(inner)),
    "unknown codec": env("brotli", len(inner), inner),
    "keys out of order": env("lz4", len(inner), lz4_literals(inner), order="vzcu"),
    "c cut short": env("lz4", len(inner), lz4_literals(inner))[:-3],
    "nested envelope": env("lz4", len(nested), lz4_literals(nested)),
}
ids = []
for k, (what, value) in enumerate(bad.items()):
    bid = "0:1:%d" % k
    j.raw(bid, value)
    ids.append(bid + " " + what.replace(" ", "_"))
with open(sys.argv[5], "w") as f:
    f.write("\n".join(ids) + "\n")
# Valid batches behind them: one compressed by hand, two plain.
recs, csum = 0, 0
for seq in range(3):
    rs = [bytes([97 + seq]) * (seq + 5), b"end"]
    if seq == 0:
        f = frame(0, 2, seq, rs)
        j.raw("0:2:0", env("lz4", len(f), lz4_literals(f)))
    else:
        j.push(0, 2, seq, rs)
    recs += len(rs)
    for r in rs:
        csum = (csum + fnv1a64(r)) & MASK
print("records=%d checksum=%016x" % (recs, csum))
PYEOF
) || fail "pushing the hostile envelopes failed"
nbad=$(wc -l <"$T/ids")
out=$(timeout 30 "$BUILD/sluice-consume" --redis "$REDIS_URL" --queue hostile --summary --quiet \
    --timeout-ms 1500 2>"$T/err") || fail "consumer of hostile: $(cat "$T/err")"
[[ $(kv batches "$out") == 3 ]] || fail "the consumer got $out, expected 3 batches"
[[ $(kv checksum "$out") == $(kv checksum "$good") ]] || fail "checksums differ: $out vs $good"
declare -A want_reason=(
    [bomb,_u_small]="decompression failed: lz4"
    [u_above_the_frame_limit]="more than the maximum of 1048576"
    [u_larger_than_the_data]="decompression failed: lz4 gives"
    [u_smaller_than_the_data]="decompression failed: lz4"
    [unknown_codec]='unknown codec "brotli"'
    [keys_out_of_order]='the third key is not "u"'
    [c_cut_short]='field "c" is cut short'
    [nested_envelope]="compressed frames do not nest"
)
failures=0
while read -r id what; do
    info=$(rcli HGET "sluice:{hostile}:deadinfo" "$id")
    reason=${info#* * }
    if [[ -z $info || $reason != *"${want_reason[$what]}"* ]]; then
        echo "FAIL ${what//_/ } ($id): deadinfo '$info'," \
             "expected a reason with '${want_reason[$what]}'"
        failures=$((failures + 1))
    else
        echo "ok   ${what//_/ } ($id): $reason"
    fi
done <"$T/ids"
((failures == 0)) || fail "$failures hostile envelopes were not dead-lettered with their reason"
[[ $(rcli LLEN 'sluice:{hostile}:dead') == "$nbad" ]] || fail "dead letters: $(ctl dead hostile)"
[[ $(info_field hostile batches) == 0 ]] || fail "batches left in hostile: $(ctl info hostile)"
echo "ok: $nlines lines through lz4 and zstd:5 queues intact ($b_fast and $b_small bytes held" \
     "against $b_plain plain); $nbad hostile envelopes dead-lettered; bad settings refused"
