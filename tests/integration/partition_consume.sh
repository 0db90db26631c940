#!/usr/bin/env bash
# Partitioned queues, consumer side, on one redis-server (partitions need
# no cluster). The producer side is played from the protocol's own scripts
# (consumer_jobtool.py), one partition at a time.
#  1. A free queue of 3 partitions, a job of 6 shards (2 per partition), 2
#     consumers (one of them at most once): every batch reaches exactly one
#     of them, both see the end of the epoch once and finish.
#  2. A coordinated queue of 3 partitions for 2 ranks, a job of 2 epochs
#     whose partitions hold odd numbers of batches: both ranks get the same
#     number of batches in each epoch (each partition drops its odd one),
#     no batch reaches both, and neither gets a batch of epoch 1 before its
#     EOF of epoch 0, although two partitions ended epoch 0 early and
#     epoch 1 was produced ahead in all three.
# shellcheck source=tests/lib/integration.sh
. "$(dirname "$0")/../lib/integration.sh"
need_bin sluice-ctl sluice-consume

redis_tmp_start
for s in 0 1 2 3 4 5; do printf 'a\nb\n' >"$T/shard$s.txt"; done
for s in 0 1 2 3 4 5; do echo "lines shard$s.txt"; done >"$T/job.manifest"

ctl create fq --max-batches 1000 --max-bytes 64M --partitions 3 >/dev/null ||
    fail "create --partitions 3 failed"
ctl submit fq --manifest "$T/job.manifest" --epochs 1 --batch-size 4 >/dev/null ||
    fail "submit to the partitioned queue failed"
ctl create cq --max-batches 1000 --max-bytes 64M --consumers 2 --coordinated \
    --remainder drop --partitions 3 >/dev/null || fail "create coordinated --partitions 3 failed"
ctl submit cq --manifest "$T/job.manifest" --epochs 2 --batch-size 4 >/dev/null ||
    fail "submit to the coordinated partitioned queue failed"

"$PY" - "$REDIS_PORT" "$BUILD/sluice-ctl" "$ROOT/tests/integration" "$BUILD/sluice-consume" \
    "$REDIS_URL" <<'PYEOF' || fail "see above"
import subprocess, sys, threading, time
sys.path.insert(0, sys.argv[3])
from consumer_jobtool import Job
port, ctl, _, consume, url = sys.argv[1:6]
procs, lines = [], []

def start(args):
    p = subprocess.Popen([consume, "--redis", url, "--print-ids", "--quiet",
                          "--timeout-ms", "20000"] + args, stdout=subprocess.PIPE, text=True)
    out = []
    def reader():
        for line in p.stdout:
            out.append(line.strip())
    threading.Thread(target=reader, daemon=True).start()
    procs.append(p)
    lines.append(out)
    return out

def fail(msg):
    for p in procs:
        p.kill()
    print("FAIL:", msg)
    for k, out in enumerate(lines):
        print("consumer %d:" % k, " | ".join(out))
    sys.exit(1)

def finish(outs, what):
    for p in procs[-len(outs):]:
        try:
            rc = p.wait(20)
        except subprocess.TimeoutExpired:
            fail("%s: a consumer did not finish" % what)
        if rc != 0:
            fail("%s: a consumer exited %d" % (what, rc))
    time.sleep(0.1)

def ids(out):
    return [l.split()[1] for l in out if l.startswith("id ")]

def ended(out, what, epochs):
    """Checks the EOF lines of a consumer's output: each epoch's once, in
    order, no batch of epoch e outside its stretch, and 'finished' last."""
    at = []
    for e in range(epochs):
        if out.count("eof epoch=%d" % e) != 1:
            fail("%s did not see the end of epoch %d exactly once" % (what, e))
        at.append(out.index("eof epoch=%d" % e))
    if at != sorted(at) or out[-1] != "finished" or out.count("finished") != 1:
        fail("%s: epoch ends out of order, or not 'finished' at the end" % what)
    for i, l in enumerate(out):
        if not l.startswith("id "):
            continue
        e = int(l.split()[1].split(":")[0])
        if e >= epochs or i > at[e] or (e > 0 and i < at[e - 1]):
            fail("%s: batch %s outside its epoch (a batch of a later epoch before the end "
                 "of an earlier one?)" % (what, l.split()[1]))

# ---- 1. free queue: every batch exactly once ----
a = start(["--queue", "fq"])
b = start(["--queue", "fq", "--at-most-once"])
want = []
for p in range(3):
    j = Job(port, "fq#%d" % p, ctl)
    for _ in range(2):
        t = j.task(5)[0]
        e, s = (int(x) for x in t.split(":"))
        if s % 3 != p:
            fail("partition %d was given shard %d" % (p, s))
        want += ["%d:%d:%d" % (e, s, n) for n in range(5)]
finish([a, b], "free")
got = ids(a) + ids(b)
if sorted(got) != sorted(want):
    fail("free: %d deliveries of %d distinct batches, expected each of %d once"
         % (len(got), len(set(got)), len(want)))
for k, out in enumerate((a, b)):
    ended(out, "free consumer %d" % k, 1)
print("-- free: %d + %d batches of %d, exactly once" % (len(ids(a)), len(ids(b)), len(want)))

# ---- 2. coordinated queue, 2 epochs: equal counts, EOF order ----
r0 = start(["--queue", "cq", "--world", "2", "--rank", "0"])
r1 = start(["--queue", "cq", "--world", "2", "--rank", "1"])
jobs = [Job(port, "cq#%d" % p, ctl) for p in range(3)]
held = None
for p, j in enumerate(jobs):
    for k in range(2):
        # Shard s brings 2 + s batches: partition p holds 7 + 2p per epoch,
        # an odd number, so each of them drops one.
        last = p == 0 and k == 1
        t = j.claim()
        e, s = (int(x) for x in t.split(":"))
        if e != 0 or s % 3 != p:
            fail("coordinated: partition %d claimed task %s" % (p, t))
        for n in range(2 + s):
            j.push(e, s, n, [b"x%d" % n])
        if last:
            held = (j, t, 2 + s)    # epoch 0 of partition 0 stays open
        else:
            j.done(t, 2 + s)
# Epoch 1, produced ahead in every partition.
for p, j in enumerate(jobs):
    for k in range(2):
        t = j.claim()
        e, s = (int(x) for x in t.split(":"))
        if e != 1:
            fail("coordinated: partition %d claimed task %s, expected epoch 1" % (p, t))
        for n in range(2 + s):
            j.push(e, s, n, [b"y%d" % n])
        j.done(t, 2 + s)
# Partitions 1 and 2 ended epoch 0, partition 0 has not. Every batch of
# epoch 0 that will be delivered is released already (full rounds of 2:
# 6 of partition 0's 7, 8 of 9, 10 of 11), but no rank may get past the
# end of epoch 0.
deadline = time.monotonic() + 10
while sum(1 for out in (r0, r1) for l in out if l.startswith("id 0:")) < 24:
    if time.monotonic() > deadline:
        fail("coordinated: the released batches of epoch 0 did not arrive")
    time.sleep(0.01)
time.sleep(0.5)
for k, out in enumerate((r0, r1)):
    if any(l.startswith("id 1:") or l.startswith("eof ") for l in out):
        fail("coordinated: rank %d went past epoch 0 while partition 0 had not ended it" % k)
j, t, n = held
j.done(t, n)
finish([r0, r1], "coordinated")
per_rank = []
for k, out in enumerate((r0, r1)):
    ended(out, "coordinated rank %d" % k, 2)
    counts = [sum(1 for x in ids(out) if x.startswith("%d:" % e)) for e in (0, 1)]
    per_rank.append(counts)
if per_rank[0] != per_rank[1] or per_rank[0] != [12, 12]:
    fail("coordinated: batches per epoch per rank %r, expected 12 and 12 for both" % per_rank)
both = ids(r0) + ids(r1)
if len(set(both)) != len(both):
    fail("coordinated: a batch reached both ranks")
for p, j in enumerate(jobs):
    d = [int(j.r.hget(j.key("estats"), "%d:dropped" % e) or 0) for e in (0, 1)]
    if d != [1, 1]:
        fail("coordinated: partition %d dropped %r per epoch, expected one each" % (p, d))
print("ok: free 3 partitions x 2 consumers: 30 batches exactly once; coordinated 3 partitions "
      "x 2 ranks x 2 epochs: 12 batches per rank per epoch, EOF of epoch 0 before epoch 1")
PYEOF
