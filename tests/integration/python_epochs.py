#!/usr/bin/python3
"""Reads a job's epochs with the Python Consumer; prints one line
    epochs=E records=<per epoch, comma-separated> checksums=<per epoch>
        batches=<per epoch> padding=P finished=1
Each epoch's iteration must end at that epoch's end (batch ids carry the
epoch being iterated), and after the last one the consumer is finished.

usage: python_epochs.py URL QUEUE [RANK WORLD [READY_FILE]]
READY_FILE is created once the consumer is open.
"""
import sys

import sluice

MASK = (1 << 64) - 1


def fnv1a64(data):
    h = 0xCBF29CE484222325
    for b in data:
        h = ((h ^ b) * 0x100000001B3) & MASK
    return h


def fail(msg):
    sys.exit("python_epochs: " + msg)


def main():
    url, queue = sys.argv[1:3]
    rank = world = None
    if len(sys.argv) > 4:
        rank, world = int(sys.argv[3]), int(sys.argv[4])
    recs, sums, nbatches = [], [], []
    padding = 0
    with sluice.Consumer(url, queue, rank=rank, world=world, timeout_ms=30000) as c:
        if len(sys.argv) > 5:
            open(sys.argv[5], "w").close()
        for epoch, batches in c.epochs():
            if epoch != len(recs):
                fail("epoch %d came after %d epochs" % (epoch, len(recs)))
            n = s = b = 0
            for batch in batches:
                if batch.id.epoch != epoch:
                    fail("batch %s in the iteration of epoch %d" % (batch.id, epoch))
                b += 1
                if batch.padding:
                    padding += 1
                    continue   # a repeat: not counted in the records
                for r in batch.records:
                    n += 1
                    s = (s + fnv1a64(r)) & MASK
            recs.append(n)
            sums.append(s)
            nbatches.append(b)
        if not c.finished:
            fail("epochs() ended but the consumer is not finished")
        if list(c) != []:
            fail("a finished consumer yielded batches")
        try:
            c.next_batch(0)
            fail("next_batch on a finished consumer did not raise EndOfEpoch")
        except sluice.EndOfEpoch as e:
            if not e.finished:
                fail("EndOfEpoch after the job says finished=False")
        if c.stats()["epochs_ended"] < len(recs):
            fail("stats %r" % c.stats())
    print("epochs=%d records=%s checksums=%s batches=%s padding=%d finished=1"
          % (len(recs), ",".join(map(str, recs)), ",".join("%016x" % x for x in sums),
             ",".join(map(str, nbatches)), padding))


if __name__ == "__main__":
    main()
