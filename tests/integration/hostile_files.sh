#!/usr/bin/env bash
# Corrupt input files, in a job and in files mode. TFRecord: a flipped data
# byte (data CRC), a file cut inside a record, a garbage header (length
# CRC), a length of 2^60 with a valid length CRC (an allocation bomb in a
# file). IDX: a bad magic, a file cut short, a damaged gzip stream, image
# and label counts that disagree, a dimension of 2^32-1, trailing bytes.
# Job mode (--max-attempts 1, one good shard among them): every bad shard's
# task fails with an error naming its file and where (offset / record /
# header / the counts), shown by sluice-ctl info; the good shard's task is
# done; the producer goes on and exits 0; no batch of any task is partial
# (only a task's last batch may be short, and a failed task has none).
# Files mode: for each bad file sluice-producer exits 1 with one line (with
# --quiet, nothing else) naming the file and where.
# shellcheck source=tests/lib/integration.sh
. "$(dirname "$0")/../lib/integration.sh"
need_bin sluice-ctl sluice-producer sluice-consume gen-tfrecord

redis_tmp_start
bsize=10
line=$(gen "$T/good.tfrecord" 95 1 16 300)
good_recs=$(kv records "$line")
for i in 1 2 3 4; do gen "$T/tf$i.tfrecord" 100 $((10 + i)) 16 300 >/dev/null; done
# Damage the copies and write the IDX files; prints "NAME READER PATHS..."
# per bad shard.
"$PY" - "$T" >"$T/bad.list" <<'PYEOF'
import gzip, struct, sys
T = sys.argv[1]

def crc32c(data):
    crc = 0xFFFFFFFF
    for b in data:
        crc ^= b
        for _ in range(8):
            crc = (crc >> 1) ^ (0x82F63B78 & -(crc & 1))
    return crc ^ 0xFFFFFFFF

def masked(data):
    c = crc32c(data)
    return ((((c >> 15) | (c << 17)) & 0xFFFFFFFF) + 0xA282EAD8) & 0xFFFFFFFF

def record_offset(buf, index):
    off = 0
    for _ in range(index):
        (n,) = struct.unpack_from("<Q", buf, off)
        off += 12 + n + 4
    return off

def tf(name):
    return bytearray(open("%s/%s.tfrecord" % (T, name), "rb").read())

def put(name, data):
    open("%s/%s" % (T, name), "wb").write(data)

b = tf("tf1")                                   # data CRC: record 42
off = record_offset(b, 42)
(n,) = struct.unpack_from("<Q", b, off)
b[off + 12 + n // 2] ^= 0x5A
put("crc.tfrecord", b)
print("crc.tfrecord tfrecord crc.tfrecord")
b = tf("tf2")                                   # cut inside record 61
put("cut.tfrecord", b[:record_offset(b, 61) + 20])
print("cut.tfrecord tfrecord cut.tfrecord")
b = tf("tf3")                                   # garbage header at record 30
off = record_offset(b, 30)
b[off:off + 12] = b"\xff" * 12
put("header.tfrecord", b)
print("header.tfrecord tfrecord header.tfrecord")
b = tf("tf4")                                   # record 10 claims 2^60 bytes
off = record_offset(b, 10)
ln = struct.pack("<Q", 1 << 60)
b[off:off + 12] = ln + struct.pack("<I", masked(ln))
put("bomb.tfrecord", b)
print("bomb.tfrecord tfrecord bomb.tfrecord")

img = struct.pack(">BBBBIII", 0, 0, 8, 3, 50, 4, 4) + bytes(range(200)) * 4
lab = struct.pack(">BBBBI", 0, 0, 8, 1, 50) + bytes(range(50))
put("labels.idx", lab)
put("magic.idx", b"\x01\x02" + img[2:])
print("magic.idx idx magic.idx labels.idx")
put("short.idx", img[:16 + 16 * 30 + 5])
print("short.idx idx short.idx labels.idx")
g = bytearray(gzip.compress(img))
g[len(g) // 2] ^= 0xFF
put("damaged.idx.gz", g)
print("damaged.idx.gz idx damaged.idx.gz labels.idx")
put("images.idx", img)
put("labels40.idx", struct.pack(">BBBBI", 0, 0, 8, 1, 40) + bytes(40))
print("labels40.idx idx images.idx labels40.idx")
put("dims.idx", struct.pack(">BBBBIII", 0, 0, 8, 3, 50, 0xFFFFFFFF, 4) + bytes(800))
print("dims.idx idx dims.idx labels.idx")
put("trailing.idx", img + b"junk")
print("trailing.idx idx trailing.idx labels.idx")
PYEOF
nbad=$(wc -l <"$T/bad.list")

# ---- job mode ----------------------------------------------------------------
q=hostfiles
{
    echo "tfrecord good.tfrecord"
    while read -r name reader paths; do echo "$reader $paths"; done <"$T/bad.list"
} >"$T/job.manifest"
ctl create "$q" --max-batches 1000 --max-bytes 64M >/dev/null
ctl submit "$q" --manifest "$T/job.manifest" --epochs 1 --batch-size "$bsize" --max-attempts 1 \
    >/dev/null || fail "submit refused the manifest: the files are only read by the producers"
rc=0
timeout 60 "$BUILD/sluice-producer" --redis "$REDIS_URL" --queue "$q" --quiet >"$T/p.out" 2>"$T/p.err" || rc=$?
((rc == 0)) || fail "job-mode producer exit $rc (a failed task is not the producer's failure): $(cat "$T/p.err")"
info=$(ctl info "$q")
note "$info"
grep -qx "job: finished with 10 failed tasks" <<<"$info" || fail "the job did not finish with 10 failed tasks"
grep -qx "tasks_done: 1" <<<"$info" || fail "the good shard's task is not done"
grep -qx "tasks_failed: $nbad" <<<"$info" || fail "expected $nbad failed tasks: $info"
failures=0
k=0
while read -r name reader paths; do
    k=$((k + 1))
    err=$(sed -n "s/^failed 0:$k: attempts 1: //p" <<<"$info")
    if [[ -z $err ]]; then
        echo "FAIL job $name: task 0:$k is not listed as failed with its error"
        failures=$((failures + 1))
    elif [[ $err != *"$T/"* || $err != *"${name%%.*}"* ]] ||
        ! grep -qE 'offset [0-9]+|record [0-9]+|image [0-9]+|header|holds [0-9]+|has [0-9]+' <<<"$err"; then
        echo "FAIL job $name: the error does not name the file and where: $err"
        failures=$((failures + 1))
    else
        echo "ok   job $name: $err"
    fi
done <"$T/bad.list"

# No partial batch: only a task's last batch may be short, and a failed
# task's batches (those before the damage) are all full.
# The consumer is told the epoch lost the records of 10 failed tasks (exit 3).
rc=0
"$BUILD/sluice-consume" --redis "$REDIS_URL" --queue "$q" --quiet >"$T/c.out" 2>"$T/c.err" || rc=$?
((rc == 3)) && grep -q "epoch 0 ended without the records of 10 failed tasks: 0:1 (" "$T/c.err" ||
    fail "consumer exit $rc, expected 3 and the failed tasks named: $(cat "$T/c.err")"
"$PY" - "$T/c.out" "$bsize" "$good_recs" <<'PYEOF' || failures=$((failures + 1))
import collections, re, sys
bsize, good = int(sys.argv[2]), int(sys.argv[3])
tasks = collections.defaultdict(dict)
for ln in open(sys.argv[1]):
    m = re.match(r"batch (\d+):(\d+):(\d+) records=(\d+)", ln)
    if m:
        tasks[int(m.group(2))][int(m.group(3))] = int(m.group(4))
bad = []
for t, seqs in sorted(tasks.items()):
    if sorted(seqs) != list(range(len(seqs))):
        bad.append("task %d: batches %s are not 0..%d" % (t, sorted(seqs), len(seqs) - 1))
    last = max(seqs)
    for s, n in seqs.items():
        if n != bsize and (t != 0 or s != last):
            bad.append("task %d: batch %d holds %d records (batch size %d)" % (t, s, n, bsize))
if sum(tasks[0].values()) != good:
    bad.append("the good shard delivered %d records, not %d" % (sum(tasks[0].values()), good))
print("batches per task: %s" % {t: len(s) for t, s in sorted(tasks.items())})
for b in bad:
    print("FAIL " + b)
sys.exit(1 if bad else 0)
PYEOF

# ---- files mode --------------------------------------------------------------
ctl create adhoc --max-batches 1000 --max-bytes 64M >/dev/null
while read -r name reader paths; do
    read -ra files <<<"$paths"
    rc=0
    (cd "$T" && timeout 30 "$BUILD/sluice-producer" --redis "$REDIS_URL" --queue adhoc --quiet \
        --format "$reader" --batch-size "$bsize" "${files[@]}") >"$T/a.out" 2>"$T/a.err" || rc=$?
    first=$(head -n 1 "$T/a.err")
    if ((rc != 1)); then
        echo "FAIL files $name: exit $rc, expected 1: $(cat "$T/a.err")"
        failures=$((failures + 1))
    elif [[ $(grep -c . "$T/a.err") != 1 ]]; then
        echo "FAIL files $name: more than one line with --quiet: $(cat "$T/a.err")"
        failures=$((failures + 1))
    elif [[ $first != "sluice-producer: "*"${name%%.*}"* ]] ||
        ! grep -qE 'offset [0-9]+|record [0-9]+|image [0-9]+|header|holds [0-9]+|has [0-9]+' <<<"$first"; then
        echo "FAIL files $name: the line does not name the file and where: $first"
        failures=$((failures + 1))
    else
        echo "ok   files $name: $first"
    fi
done <"$T/bad.list"
((failures == 0)) || fail "$failures corrupt-file cases misbehaved"
echo "ok: $nbad corrupt files: failed tasks with file and place in sluice-ctl info, one line in files mode, no partial batch"
