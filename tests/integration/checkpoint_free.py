"""Checkpoints of a free consumer on a partitioned queue, for checkpoint_resume.sh.

    checkpoint_free.py URL QUEUE STATE phase1|phase2

phase1: opens a free consumer with checkpoints, trains 6 batches, takes a
checkpoint (saved to STATE with the model), trains 5 more (recorded in
STATE.after) and kills itself (SIGKILL). phase2: checks the errors of bad
tokens, then resumes from STATE under another consumer id: the 5 batches
trained after the checkpoint come again (first, in the order they came,
on a plain queue: ORDERED=1), and
the whole job is then read; prints "ok" and the counts when the final
model holds every batch once.
"""
import json
import os
import signal
import sys

import sluice

url, queue, state, phase = sys.argv[1:5]


def ident(b):
    return "%d:%d:%d" % (b.id.epoch, b.id.task, b.id.seq)


if phase == "phase1":
    c = sluice.Consumer(url, queue, checkpoints=3, consumer_id="first", timeout_ms=30000)
    model = []
    for _ in range(6):
        b = c.next_batch()
        model.append(ident(b))
        b.release()
    tok = c.checkpoint(timeout_ms=30000)
    with open(state, "w") as f:
        json.dump({"token": tok, "model": model}, f)
    after = []
    for _ in range(5):
        b = c.next_batch()
        after.append(ident(b))
        b.release()
    # Acknowledged (and confirmed) before the crash.
    c.checkpoint(timeout_ms=30000)
    with open(state + ".after", "w") as f:
        json.dump(after, f)
    os.kill(os.getpid(), signal.SIGKILL)

saved = json.load(open(state))
after = json.load(open(state + ".after"))
tok = saved["token"]


def refused(token, words):
    try:
        sluice.Consumer(url, queue, resume=token, timeout_ms=1000).close()
    except sluice.Error as e:
        if words not in str(e):
            sys.exit("resume %r: error %r lacks %r" % (token, str(e), words))
        return
    sys.exit("resume %r was not refused" % token)


refused("not-a-token", "is not a checkpoint token")
refused(tok.replace("/" + queue + "/", "/other/", 1), "not '%s'" % queue)
parts = tok.split("/")
refused("/".join(parts[:4] + ["99"] + parts[5:]), "is not kept (it keeps")
refused("/".join(parts[:5] + ["0000-1"]), "another job")

c = sluice.Consumer(url, queue, resume=tok, consumer_id="second", timeout_ms=3000)
model = list(saved["model"])
first = []
while not c.finished:
    try:
        for b in c:
            if len(first) < len(after):
                first.append(ident(b))
            model.append(ident(b))
    except sluice.Timeout:
        break
c.close()
# A plain queue gives them back in their order, first; a partitioned one
# first in each partition (the group reads its home partition first).
if os.environ.get("ORDERED") == "1" and first != after:
    sys.exit("the batches after the checkpoint did not come first: %r, want %r" % (first, after))
if not set(after) <= set(model[len(saved["model"]):]):
    sys.exit("batches trained after the checkpoint did not come again: %r" % after)
dups = len(model) - len(set(model))
print("ok batches=%d distinct=%d dups=%d" % (len(model), len(set(model)), dups))
