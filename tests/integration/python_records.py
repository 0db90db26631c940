#!/usr/bin/python3
"""Reads a queue of record batches with sluice.Consumer and checks the
binding's rules on the way; prints "records=R batches=B checksum=<16 hex>".

usage: python_records.py URL QUEUE BATCHES
"""
import gc
import sys
import time

import sluice

MASK = (1 << 64) - 1


def fnv1a64(data):
    h = 0xCBF29CE484222325
    for b in data:
        h = ((h ^ b) * 0x100000001B3) & MASK
    return h


def fail(msg):
    sys.exit("python_records: " + msg)


def expect_value_error(what, fn):
    try:
        fn()
    except ValueError:
        return
    fail("%s did not raise ValueError" % what)


def main():
    url, queue, nbatches = sys.argv[1], sys.argv[2], int(sys.argv[3])

    # A queue that does not exist: the library's error, by its code name.
    try:
        sluice.Consumer(url, "no-such-queue")
        fail("opening a missing queue succeeded")
    except sluice.Error as e:
        if e.code != "NOQUEUE" or "no-such-queue" not in e.message:
            fail("missing queue: %r %r" % (e.code, e.message))

    # A batch dropped without release() is not acknowledged: close() hands
    # it back and it is delivered again.
    with sluice.Consumer(url, queue, prefetch=1) as a:
        b = a.next_batch(5000)
        if b is None:
            fail("no batch within 5 s")
        dropped = b.id
        b.records
        del b
        gc.collect()

    csum, records, seen = 0, 0, set()
    redelivered = False
    with sluice.Consumer(url, queue) as c:
        while len(seen) < nbatches:
            batch = c.next_batch(5000)
            if batch is None:
                fail("only %d of %d batches arrived" % (len(seen), nbatches))
            if batch.id in seen:
                fail("batch %s delivered twice" % (batch.id,))
            seen.add(batch.id)
            if batch.id == dropped:
                redelivered = True
                if batch.deliveries < 2:
                    fail("the handed-back batch says deliveries=%d" % batch.deliveries)
            if batch.tensors != {} or len(batch.records) != batch.num_records:
                fail("a record batch: tensors %r, %d records for num_records %d"
                     % (batch.tensors, len(batch.records), batch.num_records))
            with batch:
                recs = batch.records
                for r in recs:
                    if not r.readonly or r.format != "B":
                        fail("record view: readonly=%s format=%s" % (r.readonly, r.format))
                    csum = (csum + fnv1a64(r)) & MASK
                records += len(recs)
                first = next((r for r in recs if len(r) > 1), None)
                if first is not None:
                    want = bytes(first)
                    tail = first[1:]      # sliced by the caller: keeps the memory
            if not batch.released:
                fail("`with batch:` did not release it")
            batch.release()                # idempotent
            expect_value_error("batch.records after release", lambda: batch.records)
            if first is not None:
                expect_value_error("a record memoryview after release", lambda: bytes(first))
                expect_value_error("len() of a released record", lambda: len(first))
                if bytes(tail) != want[1:]:
                    fail("a slice of a record changed after release")
                del tail
        if not redelivered:
            fail("the batch dropped unreleased (%s) never came back" % (dropped,))
        t0 = time.monotonic()
        if c.next_batch(300) is not None:
            fail("a batch beyond the %d pushed" % nbatches)
        waited = time.monotonic() - t0
        if not 0.25 <= waited < 3:
            fail("next_batch(300) on an empty queue returned after %.3f s" % waited)
        st = c.stats()
        if st["batches"] != nbatches or st["records"] != records:
            fail("stats %r" % st)
    print("records=%d batches=%d checksum=%016x" % (records, len(seen), csum))


if __name__ == "__main__":
    main()
