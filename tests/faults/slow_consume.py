#!/usr/bin/python3
"""A slow trainer for the fault suite: reads a job's epochs with the Python
binding (libsluice) and spends a random "step" on each batch before
releasing it, so that it always holds batches unacknowledged (the one in
its hands and the prefetched ones) when it is killed.

usage: slow_consume.py URL QUEUE SEED MIN_MS MAX_MS [RANK WORLD]

(RANK WORLD: read a coordinated queue as that rank.)

Prints, line by line (flushed), the same lines as sluice-consume
--print-ids: "id <epoch>:<task>:<seq> deliveries=<d> padding=<0|1>" when it
receives a batch (before its step and its release), "eof epoch=<e>" at the
end of each epoch, "finished" at the end. Exits 0 when the job is finished.
"""
import random
import sys
import time

import sluice


def main():
    url, queue, seed = sys.argv[1], sys.argv[2], int(sys.argv[3])
    lo, hi = int(sys.argv[4]), int(sys.argv[5])
    rank = world = None
    if len(sys.argv) > 7:
        rank, world = int(sys.argv[6]), int(sys.argv[7])
    rng = random.Random(seed)
    out = sys.stdout
    with sluice.Consumer(url, queue, rank=rank, world=world, auto_release=False) as c:
        for epoch, batches in c.epochs():
            for b in batches:
                i = b.id
                out.write("id %d:%d:%d deliveries=%d padding=%d\n"
                          % (i.epoch, i.task, i.seq, b.deliveries, int(b.padding)))
                out.flush()
                time.sleep(rng.randint(lo, hi) / 1000.0)
                b.release()
            out.write("eof epoch=%d\n" % epoch)
            out.flush()
    out.write("finished\n")


if __name__ == "__main__":
    main()
