#!/usr/bin/python3
"""Drives a sluice job from the protocol's own scripts, for the consumer
tests: submit a job, play a producer (claim a task, push its batches, mark
it done), push garbage. The scripts' text comes from `sluice-ctl script
NAME`, so this needs no producer daemon.

usage: consumer_jobtool.py PORT QUEUE SLUICE_CTL COMMAND ARGS...
  submit EPOCHS NTASKS            submit a job (task order 0..NTASKS-1)
  task NBATCHES [--no-done]       claim the next task, push NBATCHES batches of
                                  it, mark it done; prints
                                  "task e:s batches=B records=R checksum=X"
  done E:S NBATCHES               mark a task claimed by "task --no-done" done
The tests also import it (Job) to do the same from Python.

Batches are frames built as in docs/PROTOCOL.md: {"v":1, "id":[e,t,s],
"p", "t", "n", "r": records}; each holds 1..5 random records.
"""
import random
import subprocess
import sys
import time

import msgpack
import redis

PRODUCER = "jobtool"
FNV_OFFSET = 0xCBF29CE484222325
FNV_PRIME = 0x100000001B3
MASK = (1 << 64) - 1


def fnv1a64(data):
    h = FNV_OFFSET
    for b in data:
        h ^= b
        h = (h * FNV_PRIME) & MASK
    return h


def frame(epoch, task, seq, records, version=1):
    return msgpack.packb({
        "v": version,
        "id": [epoch, task, seq],
        "p": PRODUCER,
        "t": int(time.time() * 1e6),
        "n": len(records),
        "r": records,
    }, use_bin_type=True)


class Job:
    def __init__(self, port, queue, ctl):
        self.r = redis.Redis(host="127.0.0.1", port=int(port))
        self.q = queue
        self.meta = "sluice:{%s}:meta" % queue
        self.ctl = ctl
        self.src = {}

    def key(self, name):
        return "sluice:{%s}:%s" % (self.q, name)

    def source(self, name):
        if name not in self.src:
            self.src[name] = subprocess.run([self.ctl, "script", name], check=True,
                                            stdout=subprocess.PIPE).stdout.decode()
        return self.src[name]

    def script(self, name, *args):
        return self.r.eval(self.source(name), 1, self.meta, *args)

    def submit(self, epochs, ntasks):
        """The submit script's steps (docs/PROTOCOL.md): begin, clear what
        a previous job left, the definitions, each epoch's tasks, commit."""
        tok = "jobtool-%d" % time.time_ns()
        left = self.script("submit", "begin", tok, epochs, ntasks, 4, "", 3, 20)
        while left:
            left = self.script("submit", "clear", tok)
        defs = []
        for s in range(ntasks):
            defs += [s, "lines\t\t\t/dev/null-%d" % s]
        self.script("submit", "defs", tok, *defs)
        for e in range(epochs):
            self.script("submit", "tasks", tok, e, *["%d:%d" % (e, s) for s in range(ntasks)])
        return self.script("submit", "commit", tok)

    def claim(self):
        res = self.script("task_claim", PRODUCER, 60000)
        if res[0] != b"task":
            raise SystemExit("task_claim: %r" % (res,))
        return res[1].decode()

    def push(self, epoch, task, seq, records, version=1):
        """Pushes one batch as docs/PROTOCOL.md says: in one MULTI, SET the
        frame as in:<id>, then the push script."""
        bid = "%d:%d:%d" % (epoch, task, seq)
        f = frame(epoch, task, seq, records, version)
        while True:
            tx = self.r.pipeline(transaction=True)
            tx.set(self.key("in:" + bid), f)
            tx.eval(self.source("push"), 1, self.meta, epoch, task, seq)
            res = tx.execute()[-1][0]
            if res in (1, 2):
                return res
            if res != 0:
                raise SystemExit("push %s: %r" % (bid, res))
            self.r.blpop(self.key("room"), 1)

    def done(self, t, nbatches):
        res = self.script("task_done", PRODUCER, t, nbatches)
        if res != 1:
            raise SystemExit("task_done %s: %r" % (t, res))

    def task(self, nbatches, done=True, seed=None):
        """Claims a task, pushes its batches; returns (task, records, checksum)."""
        t = self.claim()
        e, s = (int(x) for x in t.split(":"))
        rng = random.Random(seed if seed is not None else hash(t) & 0xFFFF)
        nrec = 0
        csum = 0
        for seq in range(nbatches):
            recs = [rng.randbytes(rng.randint(1, 200)) for _ in range(rng.randint(1, 5))]
            self.push(e, s, seq, recs)
            nrec += len(recs)
            for x in recs:
                csum = (csum + fnv1a64(x)) & MASK
        if done:
            self.done(t, nbatches)
        return t, nrec, csum

    def raw(self, bid, value, epoch=0):
        """Stores any value under any id and queues it, as push would."""
        self.r.set(self.key("b:" + bid), value)
        self.r.hset(self.key("dlv"), bid, 0)
        self.r.incrby(self.key("bytes"), len(value))
        self.r.lpush(self.key("ready:%d" % epoch), bid)


def main():
    port, queue, ctl, cmd = sys.argv[1:5]
    args = sys.argv[5:]
    j = Job(port, queue, ctl)
    if cmd == "submit":
        print(j.submit(int(args[0]), int(args[1])))
    elif cmd == "task":
        t, nrec, csum = j.task(int(args[0]), done="--no-done" not in args)
        print("task %s batches=%s records=%d checksum=%016x" % (t, args[0], nrec, csum))
    elif cmd == "done":
        j.done(args[0], int(args[1]))
    else:
        raise SystemExit("unknown command %s" % cmd)


if __name__ == "__main__":
    main()
