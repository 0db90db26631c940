"""A stand-in for a DDP trainer of 2 coordinated ranks, for checkpoint_resume.sh.

    checkpoint_trainer.py URL QUEUE STATE EVERY DIE_AT [READY]

One process drives rank 0 and rank 1 in lock step, as DDP ranks go: each
step takes one batch per rank and "trains" it (appends its id to the model,
a list). Every EVERY steps it takes a checkpoint of both ranks and saves
{step, token, model} to STATE atomically (write, fsync, rename): the model
and the queue's place go together, as a trainer saves them. Rank 0's token
is the one saved; rank 1 resumes from it too (each rank resumes its own
checkpoint of that number). At start it loads STATE when it exists and
resumes from it (the model is what was saved: everything trained after it
is lost, as a crash loses it). At step DIE_AT it kills itself with SIGKILL
(0: never). When the job is finished it prints the model, one line per
batch "epoch:task:seq rank", after the line "model".
"""
import json
import os
import signal
import sys

import sluice

url, queue, state = sys.argv[1], sys.argv[2], sys.argv[3]
every, die_at = int(sys.argv[4]), int(sys.argv[5])
ready = sys.argv[6] if len(sys.argv) > 6 else None

saved = {"step": 0, "token": None, "model": []}
if os.path.exists(state):
    with open(state) as f:
        saved = json.load(f)
step, model = saved["step"], [tuple(m) for m in saved["model"]]
ranks = [sluice.Consumer(url, queue, rank=r, world=2, checkpoints=2, resume=saved["token"],
                         timeout_ms=60000) for r in (0, 1)]
if ready:
    open(ready, "w").close()
print("start step=%d token=%s epoch=%d" % (step, saved["token"], ranks[0].epoch), flush=True)


def save():
    tokens = [c.checkpoint(timeout_ms=30000) for c in ranks]
    # The ranks take their checkpoints at the same step: the same number.
    assert tokens[0].split("/")[4] == tokens[1].split("/")[4], tokens
    tmp = state + ".tmp"
    with open(tmp, "w") as f:
        json.dump({"step": step, "token": tokens[0], "model": model}, f)
        f.flush()
        os.fsync(f.fileno())
    os.rename(tmp, state)


while not ranks[0].finished:
    got = []
    for c in ranks:
        try:
            b = c.next_batch()
        except sluice.EndOfEpoch:
            got.append(None)
            continue
        got.append("%d:%d:%d" % (b.id.epoch, b.id.task, b.id.seq))
        b.release()
    if got.count(None) == 1:
        sys.exit("ranks out of step: %r at step %d" % (got, step))
    if got[0] is None:
        continue      # the end of an epoch, for both
    step += 1
    for r, bid in enumerate(got):
        model.append((bid, r))
    if die_at and step == die_at:
        os.kill(os.getpid(), signal.SIGKILL)
    if step % every == 0:
        save()
for c in ranks:
    c.close()
print("model")
for bid, r in model:
    print(bid, r)
