#!/usr/bin/env bash
# Epochs: a job of 2 epochs x 2 tasks, read by 3 consumers. Every consumer
# sees the end of epoch 0 exactly once, and within 100 ms of the marker
# being posted (by the task_done of the epoch's last task, while all three
# wait for more); none gets a batch of epoch 1 before its EOF of epoch 0,
# although epoch 1 batches were queued early (a producer running ahead);
# after epoch 1 every consumer is finished and exits 0. Every batch is
# delivered exactly once overall.
# shellcheck source=tests/lib/integration.sh
. "$(dirname "$0")/../lib/integration.sh"
need_bin sluice-ctl sluice-consume

redis_tmp_start
q=epochs
ctl create "$q" --max-batches 1000 --max-bytes 64M >/dev/null
"$PY" - "$REDIS_PORT" "$q" "$BUILD/sluice-ctl" "$ROOT/tests/integration" "$BUILD/sluice-consume" \
    "$REDIS_URL" <<'PYEOF' || fail "see above"
import subprocess, sys, threading, time
sys.path.insert(0, sys.argv[4])
from consumer_jobtool import Job
port, q, ctl, _, consume, url = sys.argv[1:7]
j = Job(port, q, ctl)
j.submit(2, 2)

procs, lines = [], []
def reader(p, out):
    for line in p.stdout:
        out.append((time.monotonic(), line.strip()))
for k in range(3):
    p = subprocess.Popen([consume, "--redis", url, "--queue", q, "--print-ids", "--quiet",
                          "--timeout-ms", "20000"], stdout=subprocess.PIPE, text=True)
    out = []
    threading.Thread(target=reader, args=(p, out), daemon=True).start()
    procs.append(p)
    lines.append(out)

def fail(msg):
    for p in procs:
        p.kill()
    print("FAIL:", msg)
    for k, out in enumerate(lines):
        print("consumer %d:" % k, " | ".join(l for _, l in out))
    sys.exit(1)

# Epoch 0: task 0:0 done, task 0:1 pushed but not done yet; epoch 1's first
# task already produced (running ahead).
t00 = j.task(6)[0]
t01 = j.task(6, done=False)[0]
t10 = j.task(6)[0]
if (t00, t01, t10) != ("0:0", "0:1", "1:0"):
    fail("unexpected task order %s %s %s" % (t00, t01, t10))
deadline = time.monotonic() + 10
while sum(1 for out in lines for _, l in out if l.startswith("id 0:")) < 12:
    if time.monotonic() > deadline:
        fail("the 12 batches of epoch 0 did not arrive")
    time.sleep(0.01)
time.sleep(0.3)          # every consumer now waits for more of epoch 0
t0 = time.monotonic()
j.done(t01, 6)           # the last task of epoch 0: the marker is posted
lat = []
deadline = time.monotonic() + 5
for k, out in enumerate(lines):
    while not any(l == "eof epoch=0" for _, l in out):
        if time.monotonic() > deadline:
            fail("consumer %d saw no end of epoch 0" % k)
        time.sleep(0.001)
    lat.append(min(t for t, l in out if l == "eof epoch=0") - t0)
t11 = j.task(6)[0]
for p in procs:
    try:
        rc = p.wait(20)
    except subprocess.TimeoutExpired:
        fail("a consumer did not finish")
    if rc != 0:
        fail("a consumer exited %d" % rc)
time.sleep(0.1)

seen = []
for k, out in enumerate(lines):
    ls = [l for _, l in out]
    if ls.count("eof epoch=0") != 1 or ls.count("eof epoch=1") != 1:
        fail("consumer %d: EOF not exactly once per epoch" % k)
    if ls[-1] != "finished" or ls.count("finished") != 1:
        fail("consumer %d does not end with 'finished'" % k)
    e0 = ls.index("eof epoch=0")
    e1 = ls.index("eof epoch=1")
    for i, l in enumerate(ls):
        if l.startswith("id 1:") and i < e0:
            fail("consumer %d got a batch of epoch 1 before its EOF of epoch 0" % k)
        if l.startswith("id 0:") and i > e0:
            fail("consumer %d got a batch of epoch 0 after its EOF of epoch 0" % k)
        if l.startswith("id ") and i > e1:
            fail("consumer %d got a batch after the last epoch ended" % k)
    seen += [l.split()[1] for l in ls if l.startswith("id ")]
want = sorted("%d:%d:%d" % (e, s, n) for e in (0, 1) for s in (0, 1) for n in range(6))
if sorted(seen) != want:
    fail("batches delivered %d times in all (%d distinct), expected each of 24 once"
         % (len(seen), len(set(seen))))
worst = max(lat)
print("-- EOF latency after the marker (ms): " + " ".join("%.1f" % (x * 1000) for x in lat))
if worst >= 0.1:
    fail("EOF took %.1f ms to reach a consumer (limit 100 ms)" % (worst * 1000))
print("ok: 3 consumers x 2 epochs: EOF once per epoch, worst EOF latency %.1f ms, "
      "24 batches exactly once, all finished" % (worst * 1000))
PYEOF
