#!/usr/bin/python3
"""Reads a job whose shard 1 fails in every epoch with the Python Consumer.

usage: python_partial.py URL QUEUE default|accept

default: each epoch's `for batch in batches` must raise sluice.PartialEpoch
at the epoch's end, naming the epoch and the failed task; the loop goes on
with the next epoch once it is caught.
accept: Consumer(accept_partial=True): each epoch ends like any other, and
consumer.epoch_report says which task failed.

Prints one line per epoch: "epoch=E records=R end=partial|normal
failed_tasks=F failed=<what the end named>", then "finished=1".
"""
import sys

import sluice


def fail(msg):
    sys.exit("python_partial: " + msg)


def main():
    url, queue, mode = sys.argv[1:4]
    accept = mode == "accept"
    seen = []
    with sluice.Consumer(url, queue, timeout_ms=30000, accept_partial=accept) as c:
        for epoch, batches in c.epochs():
            n = 0
            end = "normal"
            try:
                for b in batches:
                    if b.id.epoch != epoch or b.id.task != 0:
                        fail("batch %s in epoch %d: only shard 0 has records" % (b.id, epoch))
                    n += b.num_records
            except sluice.PartialEpoch as e:
                if accept:
                    fail("PartialEpoch with accept_partial=True: %s" % e)
                end = "partial"
                got = (e.epoch, e.failed_tasks, e.code)
                if got != (epoch, 1, "PARTIAL"):
                    fail("epoch %d: PartialEpoch(epoch, failed_tasks, code) = %r" % (epoch, got))
                if not e.failed.startswith("%d:1 (" % epoch):
                    fail("epoch %d: .failed does not name task %d:1: %r" % (epoch, epoch, e.failed))
                if e.finished != (epoch == 1):
                    fail("epoch %d: .finished is %r" % (epoch, e.finished))
                failed_tasks, failed = e.failed_tasks, e.failed
            else:
                if not accept:
                    fail("epoch %d ended without PartialEpoch, although task %d:1 failed"
                         % (epoch, epoch))
                rep = c.epoch_report
                if rep["epoch"] != epoch or rep["failed_tasks"] != 1:
                    fail("epoch %d: epoch_report %r" % (epoch, rep))
                if not rep["failed"].startswith("%d:1 (" % epoch):
                    fail("epoch %d: epoch_report does not name task %d:1: %r" % (epoch, epoch, rep))
                failed_tasks, failed = rep["failed_tasks"], rep["failed"]
            print("epoch=%d records=%d end=%s failed_tasks=%d failed=%s"
                  % (epoch, n, end, failed_tasks, failed.replace(" ", "_")), flush=True)
            seen.append(epoch)
        if seen != [0, 1]:
            fail("epochs seen: %r" % seen)
        if not c.finished:
            fail("the loop ended but the consumer is not finished")
    print("finished=1")


if __name__ == "__main__":
    main()
