#!/usr/bin/python3
"""Pushes v1 batches built only from docs/PROTOCOL.md: frames packed here
with msgpack and pushed as the document says (one MULTI: SET of the frame
as sluice:{Q}:in:<id>, then the push script, whose text is read from the
document's `### push` block and run with EVAL). Prints one line
    records=R batches=B checksum=<16 hex> script=<doc|ctl>
for the shell test to compare with sluice-consume --summary.

usage: python_push.py REDIS_PORT QUEUE PROTOCOL_MD SLUICE_CTL [BATCHES]
"""
import random
import subprocess
import sys
import time

import msgpack
import redis

FNV_OFFSET = 0xCBF29CE484222325
FNV_PRIME = 0x100000001B3
MASK = (1 << 64) - 1


def fnv1a64(data):
    h = FNV_OFFSET
    for b in data:
        h ^= b
        h = (h * FNV_PRIME) & MASK
    return h


def script_from_doc(path, name):
    """The fenced block directly under the heading line '### NAME', or None
    when the document has none (or still holds a placeholder)."""
    try:
        lines = open(path, encoding="utf-8").read().split("\n")
    except OSError:
        return None
    for i, line in enumerate(lines):
        if line.strip() != "### " + name:
            continue
        j = i + 1
        while j < len(lines) and not lines[j].strip():
            j += 1
        if j >= len(lines) or not lines[j].startswith("```"):
            return None
        body = []
        for line2 in lines[j + 1:]:
            if line2.startswith("```"):
                text = "\n".join(body) + "\n"
                return text if "redis.call" in text else None
            body.append(line2)
        return None
    return None


def frame(epoch, task, seq, records):
    # Key order matters: "v" must come first (PROTOCOL.md, section 1);
    # dicts keep insertion order and msgpack packs bytes as bin.
    return msgpack.packb({
        "v": 1,
        "id": [epoch, task, seq],
        "p": "python-test",
        "t": int(time.time() * 1e6),
        "n": len(records),
        "r": records,
    }, use_bin_type=True)


def main():
    port, queue, doc, ctl = sys.argv[1:5]
    nbatches = int(sys.argv[5]) if len(sys.argv) > 5 else 25
    src = script_from_doc(doc, "push")
    origin = "doc"
    if src is None:
        src = subprocess.run([ctl, "script", "push"], check=True,
                             stdout=subprocess.PIPE).stdout.decode()
        origin = "ctl"
    r = redis.Redis(host="127.0.0.1", port=int(port))
    meta = "sluice:{%s}:meta" % queue
    room = "sluice:{%s}:room" % queue

    def push(bid, f, epoch, task, seq):
        tx = r.pipeline(transaction=True)           # MULTI ... EXEC
        tx.set("sluice:{%s}:in:%s" % (queue, bid), f)
        tx.eval(src, 1, meta, epoch, task, seq)
        return tx.execute()[-1][0]                  # the script's result for this batch
    rng = random.Random(42)
    total = 0
    csum = 0
    epoch, task = 0, (1 << 32) + 5      # a task id above 2^32 on purpose
    for seq in range(nbatches):
        records = [rng.randbytes(rng.randint(0, 3000)) for _ in range(rng.randint(1, 40))]
        if seq == 3:
            records.append(b"")         # an empty record is a record too
        f = frame(epoch, task, seq, records)
        bid = "%d:%d:%d" % (epoch, task, seq)
        while True:
            res = push(bid, f, epoch, task, seq)
            if res == 1:
                break
            if res == 0:                # full: wait for a room token
                r.blpop(room, 1)
                continue
            sys.exit("push %s returned %r" % (bid, res))
        total += len(records)
        for rec in records:
            csum = (csum + fnv1a64(rec)) & MASK
    # Pushing a stored id again is a duplicate: dropped, reported as 2.
    bid = "%d:%d:%d" % (epoch, task, 0)
    res = push(bid, frame(epoch, task, 0, [b"dup"]), epoch, task, 0)
    if res != 2:
        sys.exit("re-push of %s returned %r, expected 2 (duplicate)" % (bid, res))
    print("records=%d batches=%d checksum=%016x script=%s" % (total, nbatches, csum, origin))


if __name__ == "__main__":
    main()
