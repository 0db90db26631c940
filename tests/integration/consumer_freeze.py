#!/usr/bin/python3
"""A slow trainer for consumer_freeze.sh: takes batches with the Python
Consumer (prefetch 4) and holds each for DELAY_MS before releasing it, so
that at any moment its application holds one batch and the library has up
to 4 more prefetched.

usage: consumer_freeze.py URL QUEUE CONSUMER_ID DELAY_MS IDLE_MS

Prints, flushed line by line, "id <epoch>:<task>:<seq> deliveries=<d>" as
each batch reaches the application, and "idle" when no batch came within
IDLE_MS; then exits 0.
"""
import sys
import time

import sluice


def main():
    url, queue, cid = sys.argv[1:4]
    delay, idle = int(sys.argv[4]) / 1000.0, int(sys.argv[5])
    with sluice.Consumer(url, queue, consumer_id=cid, prefetch=4) as c:
        while True:
            b = c.next_batch(idle)
            if b is None:
                break
            print("id %d:%d:%d deliveries=%d" % (b.id.epoch, b.id.task, b.id.seq, b.deliveries),
                  flush=True)
            time.sleep(delay)
            b.release()
    print("idle", flush=True)


if __name__ == "__main__":
    main()
