#!/usr/bin/python3
"""The Python Producer, in three modes; each prints one summary line.

  python_producer.py push URL QUEUE
      20 record batches and 10 tensor batches; prints
      "records=R batches=B checksum=<16 hex>" counted as sluice-consume
      --summary counts (a tensor batch: its rows, and each tensor's data
      buffer as one record for the checksum).
  python_producer.py roundtrip URL QUEUE
      tensors of every numpy dtype sluice knows (and bfloat16, a
      non-contiguous and a big-endian array) pushed and read back with the
      Python Consumer; prints "roundtrip=N".
  python_producer.py flood URL QUEUE BATCHES
      BATCHES record batches into a queue with a small budget; prints
      "records=R batches=B checksum=<16 hex> full_waits=W".
"""
import random
import sys

import numpy as np

import sluice

MASK = (1 << 64) - 1


def fnv1a64(data):
    h = 0xCBF29CE484222325
    for b in bytes(data):
        h = ((h ^ b) * 0x100000001B3) & MASK
    return h


def fail(msg):
    sys.exit("python_producer: " + msg)


def records_for(rng, k):
    recs = [rng.randbytes(rng.randint(0, 400)) for _ in range(rng.randint(1, 30))]
    # Every bytes-like kind push_records takes.
    if k % 4 == 1:
        recs[0] = bytearray(recs[0])
    elif k % 4 == 2:
        recs[0] = memoryview(recs[0])
    elif k % 4 == 3:
        recs[0] = np.frombuffer(recs[0], dtype=np.uint8)
    return recs


def push(url, queue):
    rng = random.Random(7)
    csum = records = 0
    with sluice.Producer(url, queue, producer_id="py-test") as p:
        if p.id != "py-test":
            fail("producer id %r" % p.id)
        p.set_task(0, 77)
        for k in range(20):
            recs = records_for(rng, k)
            p.push_records(recs)
            records += len(recs)
            for r in recs:
                csum = (csum + fnv1a64(r)) & MASK
        for k in range(10):
            n = 8 + k
            t = {"x": np.arange(n * 6, dtype=np.float32).reshape(n, 6) * (k + 1),
                 "y": np.arange(n, dtype=np.int64) - 3}
            p.push_tensors(t)
            records += n
            for a in t.values():
                csum = (csum + fnv1a64(a.tobytes())) & MASK
        p.flush()
        st = p.stats()
        if st["batches"] != 30 or st["duplicates"] != 0:
            fail("producer stats %r" % st)
    print("records=%d batches=30 checksum=%016x" % (records, csum))


def roundtrip(url, queue):
    rng = np.random.default_rng(3)
    n = 5
    sent = {
        "b": rng.integers(0, 2, (n, 3)).astype(bool),
        "u8": rng.integers(0, 255, (n,), dtype=np.uint8),
        "i8": rng.integers(-128, 127, (n, 2), dtype=np.int8),
        "u16": rng.integers(0, 65535, (n,), dtype=np.uint16),
        "i16": rng.integers(-30000, 30000, (n,), dtype=np.int16),
        "u32": rng.integers(0, 2**32 - 1, (n,), dtype=np.uint32),
        "i32": rng.integers(-2**31, 2**31 - 1, (n, 2, 2), dtype=np.int32),
        "u64": rng.integers(0, 2**63, (n,), dtype=np.uint64),
        "i64": rng.integers(-2**62, 2**62, (n,), dtype=np.int64),
        "f16": rng.standard_normal((n, 4)).astype(np.float16),
        "f32": rng.standard_normal((n, 4)).astype(np.float32),
        "f64": rng.standard_normal((n,)).astype(np.float64),
        "transposed": np.arange(4 * n, dtype=np.int32).reshape(4, n).T,   # not C-contiguous
        "bigendian": np.arange(n, dtype=">i4") * 1000,
    }
    bf16 = rng.integers(0, 65535, (n, 2), dtype=np.uint16)
    with sluice.Producer(url, queue) as p:
        p.push_tensors(dict(sent, bf=(bf16, "bfloat16")))
        for bad, why in ((dict(a=np.zeros((2,)), b=np.zeros((3,))), "rows"),
                         (dict(a=np.zeros(2, dtype=np.complex64)), "dtype"),
                         (dict(a=(np.zeros(2, dtype=np.uint8), "bfloat16")), "size")):
            try:
                p.push_tensors(bad)
                fail("push_tensors accepted a bad batch (%s)" % why)
            except (ValueError, TypeError):
                pass
    with sluice.Consumer(url, queue) as c:
        with c.next_batch(5000) as b:
            got = b.tensors
            for name, a in sent.items():
                g = got[name]
                if g.dtype.newbyteorder("=") != a.dtype.newbyteorder("=") or g.shape != a.shape \
                        or not np.array_equal(g, a):
                    fail("%s: sent %s %s %r, got %s %s %r"
                         % (name, a.dtype, a.shape, a, g.dtype, g.shape, g))
            if b.dtypes["bf"] != "bfloat16" or got["bf"].dtype != np.uint16 \
                    or not np.array_equal(got["bf"], bf16):
                fail("bfloat16: %s %r" % (b.dtypes["bf"], got["bf"]))
            if b.dtypes["f16"] != "float16" or got["f16"].dtype != np.float16:
                fail("float16 came back as %s" % got["f16"].dtype)
            del got, g
    print("roundtrip=%d" % (len(sent) + 1))


def flood(url, queue, nbatches):
    rng = random.Random(9)
    csum = records = 0
    with sluice.Producer(url, queue, max_inflight=2) as p:
        for k in range(nbatches):
            recs = records_for(rng, k)
            p.push_records(recs)
            records += len(recs)
            for r in recs:
                csum = (csum + fnv1a64(r)) & MASK
        p.flush()
        st = p.stats()
    print("records=%d batches=%d checksum=%016x full_waits=%d"
          % (records, st["batches"], csum, st["full_waits"]))


def main():
    mode, url, queue = sys.argv[1:4]
    if mode == "push":
        push(url, queue)
    elif mode == "roundtrip":
        roundtrip(url, queue)
    elif mode == "flood":
        flood(url, queue, int(sys.argv[4]))
    else:
        fail("unknown mode " + mode)


if __name__ == "__main__":
    main()
