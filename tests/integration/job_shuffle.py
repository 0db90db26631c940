#!/usr/bin/python3
"""Helpers of job_shuffle.sh: a recording consumer, a checker that redoes
the record shuffle from its description in docs/PROTOCOL.md ("Record
shuffle"), and an --exec command.

  job_shuffle.py consume URL QUEUE OUT
      reads the queue's job epoch by epoch (sluice.Consumer) and writes one
      JSON line per batch to OUT: {"e", "t", "s", "r": [records]}
  job_shuffle.py check SPEC OUT [SIDE_RECORDS SIDE_CHECKSUM]
      SPEC (JSON): batch_size, window, seed, epochs, drop_remainder, and
      tasks: [[shard, path, start, end], ...] (lines files). Checks what
      OUT holds against the batches the description gives, and every
      record of every epoch once (those a second consumer took counted by
      SIDE_RECORDS and SIDE_CHECKSUM, as sluice-consume --summary prints
      them); prints one line of figures, or exits non-zero with why.
  job_shuffle.py emit records|msgpack PATH START END
      writes lines [START, END) of PATH to stdout as --exec records
      (4-byte little-endian length, bytes) or as msgpack batch frames of
      7 records (their ids are the producer's business)
"""
import json
import struct
import sys

MASK = (1 << 64) - 1


def fail(msg):
    sys.exit("job_shuffle: " + msg)


def fnv1a64(data):
    h = 0xCBF29CE484222325
    for b in data:
        h = ((h ^ b) * 0x100000001B3) & MASK
    return h


# ---- the record shuffle, as docs/PROTOCOL.md describes it -------------------

def mix64(z):
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK
    return z ^ (z >> 31)


def window_perm(n, seed, epoch, shard, window):
    state = mix64(mix64(mix64(mix64(seed) ^ epoch) ^ shard) ^ window)

    def below(bound):
        nonlocal state
        threshold = ((1 << 64) - bound) % bound
        while True:
            state = (state + 0x9E3779B97F4A7C15) & MASK
            x = mix64(state)
            if x >= threshold:
                return x % bound

    perm = list(range(n))
    for i in range(n, 1, -1):
        j = below(i)
        perm[i - 1], perm[j] = perm[j], perm[i - 1]
    return perm


def task_batches(records, spec, epoch, shard):
    """The batches of a task (a list of lists of records) and the records
    it drops."""
    w = spec["window"]
    stream = []
    if w > 1:
        for k in range(0, len(records), w):
            win = records[k:k + w]
            stream += [win[i] for i in window_perm(len(win), spec["seed"], epoch, shard, k // w)]
    else:
        stream = list(records)
    b = spec["batch_size"]
    batches = [stream[i:i + b] for i in range(0, len(stream), b)]
    dropped = 0
    if spec["drop_remainder"] and batches and len(batches[-1]) < b:
        dropped = len(batches.pop())
    return batches, dropped


def read_lines(path, start, end):
    with open(path, "rb") as f:
        lines = f.read().split(b"\n")
    if lines and lines[-1] == b"":
        lines.pop()
    return lines[start:end]


# ---- subcommands --------------------------------------------------------

def consume(url, queue, out):
    import sluice
    n = 0
    with sluice.Consumer(url, queue, timeout_ms=60000) as c, open(out, "w") as f:
        for _epoch, batches in c.epochs():
            for batch in batches:
                i = batch.id
                recs = [bytes(r).decode() for r in batch.records]
                f.write(json.dumps({"e": i.epoch, "t": i.task, "s": i.seq, "r": recs}) + "\n")
                n += 1
        if not c.finished:
            fail("the consumer is not finished after the last epoch")
    print("batches=%d" % n)


def check(spec_path, out, side_records=0, side_sum=0):
    spec = json.load(open(spec_path))
    b = spec["batch_size"]
    want = {}           # (epoch, shard, seq) -> records
    kept = {}           # epoch -> set of records
    dropped = {}        # epoch -> records dropped
    for e in range(spec["epochs"]):
        kept[e], dropped[e] = set(), 0
        for shard, path, start, end in spec["tasks"]:
            recs = [r.decode() for r in read_lines(path, start, end)]
            batches, d = task_batches(recs, spec, e, shard)
            dropped[e] += d
            for s, bt in enumerate(batches):
                want[(e, shard, s)] = bt
                kept[e].update(bt)
    seen = {}
    for line in open(out):
        x = json.loads(line)
        key = (x["e"], x["t"], x["s"])
        if key in seen:
            fail("batch %d:%d:%d came twice" % key)
        if key not in want:
            fail("batch %d:%d:%d is no batch of the job" % key)
        if len(x["r"]) != b:
            fail("batch %d:%d:%d holds %d records, not %d" % (key + (len(x["r"]), b)))
        if x["r"] != want[key]:
            fail("batch %d:%d:%d is %s, the shuffle gives %s" % (key + (x["r"][:4], want[key][:4])))
        seen[key] = x["r"]
    # Every record once per epoch: the recorded ones are distinct batches of
    # distinct records; the side consumer took the rest (its counts).
    got_recs, got_sum = 0, 0
    for e in kept:
        recs = [r for k, v in seen.items() if k[0] == e for r in v]
        if len(set(recs)) != len(recs):
            fail("epoch %d: a record came twice" % e)
        got_recs += len(recs)
        got_sum = (got_sum + sum(fnv1a64(r.encode()) for r in recs)) & MASK
    want_recs = sum(len(v) for v in kept.values())
    want_sum = sum(fnv1a64(r.encode()) for v in kept.values() for r in v) & MASK
    if got_recs + side_records != want_recs:
        fail("%d + %d records consumed, the epochs hold %d" % (got_recs, side_records, want_recs))
    if (got_sum + side_sum) & MASK != want_sum:
        fail("the checksums of what was consumed do not add up to the epochs' records")
    if len(seen) * b + side_records != want_recs:
        fail("batches missing: %d recorded" % len(seen))
    # Not file order, and another order in every epoch (seen as consumed).
    unordered = sum(1 for v in seen.values() if v != sorted(v))
    if unordered < len(seen) // 2:
        fail("only %d of %d batches are out of file order" % (unordered, len(seen)))
    tasks = sorted({(k[1], k[2]) for k in seen})
    same = [t for t in tasks if (0, ) + t in seen and (1, ) + t in seen and
            seen[(0, ) + t] == seen[(1, ) + t]]
    both = [t for t in tasks if (0, ) + t in seen and (1, ) + t in seen]
    if spec["epochs"] > 1 and (not both or same):
        fail("batches the same in both epochs: %s (of %d seen in both)" % (same, len(both)))
    print("batches=%d records=%d dropped=%s unordered=%d" % (
        len(seen), got_recs, ",".join(str(dropped[e]) for e in sorted(dropped)), unordered))


def emit(fmt, path, start, end):
    recs = read_lines(path, int(start), int(end) if end else None)
    w = sys.stdout.buffer
    if fmt == "records":
        for r in recs:
            w.write(struct.pack("<I", len(r)) + r)
        return
    import msgpack
    for k in range(0, len(recs), 7):
        part = recs[k:k + 7]
        w.write(msgpack.packb({"v": 1, "id": [0, 0, k // 7], "p": "emit", "t": 0,
                               "n": len(part), "r": part}, use_bin_type=True))


def main():
    if len(sys.argv) < 2:
        fail(__doc__)
    cmd, args = sys.argv[1], sys.argv[2:]
    if cmd == "consume" and len(args) == 3:
        consume(*args)
    elif cmd == "check" and len(args) in (2, 4):
        check(args[0], args[1], *(int(a, 16) if i else int(a) for i, a in enumerate(args[2:])))
    elif cmd == "emit" and len(args) in (3, 4):
        emit(*args)
    else:
        fail("usage: see the head of this file")


if __name__ == "__main__":
    main()
