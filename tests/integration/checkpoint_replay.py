"""Two coordinated ranks resumed again and again from one checkpoint, each
time killed holding the batches of the step after it, for
checkpoint_replay.sh.

    checkpoint_replay.py URL QUEUE STATE first|crash|finish

first: trains 5 steps (one batch per rank a step), takes a checkpoint
(saved to STATE with the model), takes the batches of step 6 and kills
itself (SIGKILL) before acknowledging them. crash: resumes from STATE,
takes the batches of the step after the checkpoint and kills itself the
same way. finish: resumes from STATE and trains the rest of the job in
lock step; prints "ok" and the counts when the model holds every batch
once and the ranks the same number, else what is wrong (exit 1).
"""
import collections
import json
import os
import signal
import sys

import sluice

url, queue, state, phase = sys.argv[1:5]
saved = {"token": None, "model": []}
if phase != "first":
    with open(state) as f:
        saved = json.load(f)
ranks = [sluice.Consumer(url, queue, rank=r, world=2, checkpoints=2, resume=saved["token"],
                         timeout_ms=30000) for r in (0, 1)]
model = [tuple(m) for m in saved["model"]]


def step():
    """The batches of one step, one per rank; None at the end of an epoch."""
    got = []
    for c in ranks:
        try:
            got.append(c.next_batch())
        except sluice.EndOfEpoch:
            got.append(None)
    if got.count(None) == 1:
        sys.exit("ranks out of step at step %d: %r" % (
            len(model) // 2, [b and "%d:%d:%d" % (b.id.epoch, b.id.task, b.id.seq) for b in got]))
    return None if got[0] is None else got


def train(got):
    for r, b in enumerate(got):
        model.append(("%d:%d:%d" % (b.id.epoch, b.id.task, b.id.seq), r))
        b.release()


if phase == "first":
    for _ in range(5):
        train(step())
    tokens = [c.checkpoint(timeout_ms=30000) for c in ranks]
    with open(state, "w") as f:
        json.dump({"token": tokens[0], "model": model}, f)
if phase in ("first", "crash"):
    held = step()     # received, never acknowledged: the crash comes first
    os.kill(os.getpid(), signal.SIGKILL)
while not ranks[0].finished:
    got = step()
    if got:
        train(got)
for c in ranks:
    c.close()
seen = collections.Counter(b for b, _ in model)
per_rank = collections.Counter(r for _, r in model)
bad = [b for b, n in seen.items() if n > 1]
print("%s batches=%d distinct=%d rank0=%d rank1=%d%s" % (
    "bad" if bad or per_rank[0] != per_rank[1] else "ok", len(model), len(seen), per_rank[0],
    per_rank[1], " twice: %s" % bad[:5] if bad else ""))
