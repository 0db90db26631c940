#!/usr/bin/env bash
# Hostile input gets a clear error: a TFRecord file with a flipped data byte
# (CRC mismatch) and one truncated in the middle of a record. The producer
# exits 1 with one line naming the file and the offset; the batches before
# the bad record are in the queue, complete (no partial batch).
# shellcheck source=tests/lib/integration.sh
. "$(dirname "$0")/../lib/integration.sh"
need_bin sluice-ctl sluice-producer sluice-consume gen-tfrecord

redis_tmp_start
bsize=10

# damage FILE MODE INDEX KEEP: flips a byte in the middle of record INDEX's
# data (MODE=flip) or cuts the file 7 bytes into that record's data
# (MODE=cut). Prints "<offset of the record> <checksum of the first KEEP
# records>" (records are numbered from 0).
damage() {
    "$PY" - "$@" <<'PYEOF'
import os, struct, sys
path, mode, index, keep = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
buf = bytearray(open(path, "rb").read())
off, i, csum = 0, 0, 0
while i < index:
    (n,) = struct.unpack_from("<Q", buf, off)
    h = 0xcbf29ce484222325
    for b in buf[off + 12 : off + 12 + n]:
        h = ((h ^ b) * 0x100000001b3) & ((1 << 64) - 1)
    if i < keep:
        csum = (csum + h) & ((1 << 64) - 1)
    off += 12 + n + 4
    i += 1
(n,) = struct.unpack_from("<Q", buf, off)
assert n >= 16, n
if mode == "flip":
    buf[off + 12 + n // 2] ^= 0x5A
    open(path, "wb").write(buf)
else:
    os.truncate(path, off + 12 + 7)
print(off, "%016x" % csum)
PYEOF
}

for mode in flip cut; do
    q=bad-$mode
    f=$T/data-$mode.tfrecord
    gen "$f" 300 3 16 2000 >/dev/null
    idx=$([[ $mode == flip ]] && echo 105 || echo 205)
    want=$(( idx / bsize * bsize ))
    read -r off want_sum < <(damage "$f" "$mode" "$idx" "$want")
    note "$mode: record $idx at offset $off damaged; expect $want records queued"
    ctl create "$q" --max-batches 1000 --max-bytes 256M >/dev/null

    rc=0
    "$BUILD/sluice-producer" --redis "$REDIS_URL" --queue "$q" --format tfrecord \
        --batch-size "$bsize" --quiet "$f" >"$T/p.out" 2>"$T/p.err" || rc=$?
    note "producer stderr: $(cat "$T/p.err")"
    ((rc == 1)) || fail "$mode: producer exit $rc, expected 1"
    grep -qF -- "$f" "$T/p.err" || fail "$mode: stderr does not name the file $f: $(cat "$T/p.err")"
    grep -qE "offset [0-9]+" "$T/p.err" || fail "$mode: stderr has no 'offset N': $(cat "$T/p.err")"
    grep -q "offset $off\\b" "$T/p.err" ||
        note "($mode: the reported offset is not the record start $off; fine if it points inside the record)"

    held=$(held "$q")
    (( held > 0 )) || fail "$mode: no batch before the bad record reached the queue"
    rc=0
    cline=$("$BUILD/sluice-consume" --redis "$REDIS_URL" --queue "$q" --summary --quiet \
        --timeout-ms 1000 2>"$T/c.err") || rc=$?
    ((rc == 0)) || fail "$mode: consumer exit $rc: $(cat "$T/c.err")"
    note "$mode: consumer: $cline"
    got=$(kv records "$cline")
    (( got % bsize == 0 )) || fail "$mode: $got records queued: a partial batch was pushed"
    (( got == want )) || fail "$mode: $got records queued, expected the $want before the bad record"
    [[ $(kv checksum "$cline") == "$want_sum" ]] ||
        fail "$mode: checksum $(kv checksum "$cline") of queued records != $want_sum"
done
echo "ok: corrupt and truncated files rejected with file + offset; complete batches kept"
