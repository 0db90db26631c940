#!/usr/bin/python3
"""Reads the batches of tests/tools/push-tensors and checks them against the
same formula; prints "batches=N records=R checksum=<16 hex> zero_copy=T".

usage: python_tensors.py URL QUEUE BATCHES BATCH_SIZE
"""
import gc
import sys

import numpy as np

import sluice
from sluice._lib import lib   # only to ask C where a tensor's data lies

MASK = (1 << 64) - 1


def fnv1a64(data):
    h = 0xCBF29CE484222325
    for b in data:
        h = ((h ^ b) * 0x100000001B3) & MASK
    return h


def expected(rows):
    g = np.arange(rows.start, rows.stop, dtype=np.uint64)
    y = np.arange(28, dtype=np.uint64)
    image = ((g[:, None, None] * 31 + y[None, :, None] * 7 + y[None, None, :] * 13) & 0xFF)
    return {"image": image.astype(np.uint8), "label": (g % 10).astype(np.uint8),
            "value": (g[:, None].astype(np.float32) + np.arange(4, dtype=np.float32) / 4)}


def c_pointers(batch):
    out = {}
    for i in range(batch.num_tensors):
        t = lib.sluice_batch_tensor(batch._ptr, i).contents
        out[t.name.decode()] = t.data
    return out


def fail(msg):
    sys.exit("python_tensors: " + msg)


def main():
    url, queue, nbatches, bsize = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
    csum, records, seen = 0, 0, set()
    kept = None
    zero_copy = 0
    with sluice.Consumer(url, queue, timeout_ms=5000) as c:
        for batch in c:
            t = batch.tensors
            if batch.records != [] or batch.num_records != bsize:
                fail("a tensor batch has %d rows and records %r" % (batch.num_records, batch.records))
            if sorted(t) != ["image", "label", "value"]:
                fail("tensors %s" % sorted(t))
            if batch.dtypes != {"image": "uint8", "label": "uint8", "value": "float32"}:
                fail("dtypes %r" % batch.dtypes)
            seen.add(batch.id)
            k = batch.id.seq
            exp = expected(range(k * bsize, (k + 1) * bsize))
            ptrs = c_pointers(batch)
            for name, arr in t.items():
                if arr.dtype != exp[name].dtype or arr.shape != exp[name].shape:
                    fail("%s: %s %s, expected %s %s" % (name, arr.dtype, arr.shape,
                                                       exp[name].dtype, exp[name].shape))
                if not np.array_equal(arr, exp[name]):
                    fail("batch %d: %s differs from what C pushed" % (k, name))
                if arr.flags.writeable:
                    fail("%s is writable: it must be a read-only view of the frame" % name)
                # No copy: the array's data is the very buffer C decoded.
                if arr.__array_interface__["data"][0] != ptrs[name]:
                    fail("%s: array data at %#x, C tensor data at %#x (a copy)"
                         % (name, arr.__array_interface__["data"][0], ptrs[name]))
                zero_copy += 1
                csum = (csum + fnv1a64(arr.tobytes())) & MASK
            records += batch.num_records
            if kept is None:
                # Kept past release(): must stay valid while other batches
                # come and go (ASan would catch a read of freed memory).
                kept = (dict(t), exp, batch)
            del t, arr
            # The loop releases a batch when it asks for the next one; a
            # queue fed without a job never ends its epoch, so the last
            # one is released here.
            if len(seen) == nbatches:
                batch.release()
                break
        if len(seen) != nbatches:
            fail("%d distinct batches, expected %d" % (len(seen), nbatches))
        arrays, exp, first = kept
        if not first.released:
            fail("iteration did not release the first batch")
        try:
            first.tensors
            fail("tensors of a released batch were handed out")
        except ValueError:
            pass
        for name, arr in arrays.items():
            if not np.array_equal(arr, exp[name]):
                fail("%s of the first batch changed after its release" % name)
        s = c.stats()
        if s["batches"] != nbatches or s["records"] != records:
            fail("stats %r" % s)
        # The last arrays gone: the frame is freed (and, with a library
        # without sluice_batch_ack, only now acknowledged) before close().
        del kept, arrays, first, arr
        gc.collect()
    print("batches=%d records=%d checksum=%016x zero_copy=%d ack=%s"
          % (len(seen), records, csum, zero_copy, "now" if sluice.HAVE_ACK else "at-free"))


if __name__ == "__main__":
    main()
