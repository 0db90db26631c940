#!/usr/bin/python3
"""Checks what the consumers of a fault scenario received against the job.

usage: check_ids.py --port P --queue Q --epochs E --batches N0,N1,...
                    [--exact | --lost-writes] [--killed FILE]...
                    [--frozen FILE:N]... [--max-deliveries K] [FILE]...

FILE / --killed FILE: the stdout of one sluice-consume --print-ids process
(or of slow_consume.py, or of tests/tools/hold)
(--killed: one that was killed with -9, or stopped by a signal while
its application held batches; its output may end anywhere).
--frozen FILE:N: a consumer frozen (SIGSTOP) past its lease and resumed:
its first N id lines (those printed before its last freeze) count as a
killed consumer's (their batches were handed back), the later ones as a
live consumer's; FILE is not given again as a plain FILE.
Several consumers may share one FILE when each line ends in " by=NAME"
(NAME: the consumer that printed it).
--batches: batches per shard (task), shard 0 first, the same every epoch.

Checked, and each printed:
  * every batch id e:t:s of the job (E epochs x shards x batches) was
    delivered to some consumer, and no other id was;
  * every one of them is acknowledged in Redis (its bit in acked:<e>:<t>);
  * an id delivered more than once: its delivery counts are distinct, and
    every delivery but the last went to a killed consumer (a batch it held
    unacknowledged), so the application saw the duplicate flagged with
    deliveries >= 2; with --exact no id may arrive twice at all;
    with --lost-writes (Redis lost its last writes, and with them what
    it knew of some deliveries: tests/faults/aof_truncate.sh) a duplicate
    needs no killed consumer, but every copy after the first, in the order
    of the lines (one FILE that every consumer appends to gives the order
    across consumers), carries deliveries >= 2;
  * Redis holds nothing of the job any more: no pending list, no dead
    letter, and the job is finished (the caller checks with sluice-ctl
    info that no batch is stored). With --max-deliveries K (the queue's),
    a dead letter is no failure when killed consumers received it K times
    or more (the poison rule did what it says); it is then not counted as
    missing either, and is reported.
Exit 0 when all hold, 1 (with every failure explained) otherwise.
"""
import argparse
import re
import sys

import redis

# sluice-consume --print-ids and slow_consume.py lines; tests/tools/hold
# prints them without the padding field. " by=NAME": see the usage.
LINE = re.compile(r"^id (\d+):(\d+):(\d+) deliveries=(\d+)( padding=[01])?( by=(\S+))?$")


def read_ids(path, killed, got, bad, names, upto=None):
    """Adds path's deliveries to got: id -> [(deliveries, where, killed)],
    in the order of the lines; where is path, or "NAME, line N" for a
    line of consumer NAME in a shared file. Adds the consumers to names.
    upto (a frozen consumer): its first upto id lines count as killed,
    the later ones as live."""
    n, shared = 0, False
    with open(path, errors="replace") as f:
        for no, line in enumerate(f, 1):
            line = line.rstrip("\n")
            if not line.startswith("id "):
                continue   # epoch=/records= summary lines
            m = LINE.match(line)
            if not m:
                bad.append("%s: malformed line %r" % (path, line))
                continue
            e, t, s, d = (int(m.group(i)) for i in range(1, 5))
            src = path
            if upto is not None:
                killed = n < upto
                src = "%s (%s)" % (path, "before its freeze" if killed else "after its resume")
            if m.group(7):
                src, shared = "%s, line %d" % (m.group(7), no), True
                names.add(m.group(7))
            got.setdefault((e, t, s), []).append((d, src, killed))
            n += 1
    if not shared:
        names.add(path)
    return n


def where(r, q, ident):
    """Says where a missing batch is in Redis, for the failure message."""
    pre = "sluice:{%s}:" % q
    bits = []
    if r.exists(pre + "b:" + ident):
        bits.append("its frame is still stored (b:%s)" % ident)
    dlv = r.hget(pre + "dlv", ident)
    if dlv is not None:
        bits.append("deliveries=%s" % dlv.decode())
    info = r.hget(pre + "deadinfo", ident)
    if info is not None:
        bits.append("dead-lettered: %s" % info.decode())
    for key in r.scan_iter(match=pre + "*", count=1000):
        k = key.decode()
        if r.type(key) == b"list" and r.lpos(key, ident) is not None:
            bits.append("in list %s" % k[len(pre):])
    e, t = ident.split(":")[:2]
    task = "%s:%s" % (e, t)
    bits.append("task %s: tbatches=%s tattempts=%s terr=%s" % (
        task, r.hget(pre + "tbatches", task), r.hget(pre + "tattempts", task),
        r.hget(pre + "terr", task)))
    return "; ".join(bits)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--queue", required=True)
    ap.add_argument("--epochs", type=int, required=True)
    ap.add_argument("--batches", required=True)
    ap.add_argument("--exact", action="store_true")
    ap.add_argument("--lost-writes", action="store_true")
    ap.add_argument("--killed", action="append", default=[])
    ap.add_argument("--frozen", action="append", default=[])
    ap.add_argument("--max-deliveries", type=int)
    ap.add_argument("files", nargs="*")
    a = ap.parse_args()
    per_shard = [int(x) for x in a.batches.split(",")]
    q = a.queue
    pre = "sluice:{%s}:" % q
    r = redis.Redis(host="127.0.0.1", port=a.port)

    got, bad = {}, []
    lines = 0
    names, knames = set(), set()
    for path in a.files:
        lines += read_ids(path, False, got, bad, names)
    for path in a.killed:
        lines += read_ids(path, True, got, bad, knames)
    for spec in a.frozen:
        path, _, upto = spec.rpartition(":")
        lines += read_ids(path, True, got, bad, knames, int(upto))
    fails = list(bad)

    expected = [(e, t, s) for e in range(a.epochs)
                for t, nb in enumerate(per_shard) for s in range(nb)]
    exp_set = set(expected)
    fmt = lambda k: "%d:%d:%d" % k

    # Dead letters that the poison rule explains: received K times or more
    # by consumers that then died (or froze) without acknowledging them.
    dead = [x.decode() for x in r.lrange(pre + "dead", 0, -1)]
    poisoned = set()
    for ident in dead:
        try:
            k = tuple(int(x) for x in ident.split(":"))
        except ValueError:
            continue
        if a.max_deliveries and len(k) == 3 and sum(
                1 for _, _, kl in got.get(k, []) if kl) >= a.max_deliveries:
            poisoned.add(k)

    missing = [k for k in expected if k not in got and k not in poisoned]
    for k in missing[:10]:
        fails.append("id %s never delivered (%s)" % (fmt(k), where(r, q, fmt(k))))
    if len(missing) > 10:
        fails.append("... and %d more ids never delivered" % (len(missing) - 10))
    extra = sorted(k for k in got if k not in exp_set)
    for k in extra[:10]:
        fails.append("id %s delivered but not part of the job" % fmt(k))

    # Acknowledged: one GETBIT per id, pipelined.
    p = r.pipeline(transaction=False)
    for e, t, s in expected:
        p.getbit(pre + "acked:%d:%d" % (e, t), s)
    unacked = [k for k, b in zip(expected, p.execute()) if b != 1 and k not in poisoned]
    for k in unacked[:10]:
        fails.append("id %s not acknowledged (%s)" % (fmt(k), where(r, q, fmt(k))))
    if len(unacked) > 10:
        fails.append("... and %d more ids not acknowledged" % (len(unacked) - 10))

    dups = flagged = redelivered = 0
    for k, occ in sorted(got.items()):
        redelivered += sum(1 for d, _, _ in occ if d >= 2)
        if len(occ) == 1:
            continue
        dups += len(occ) - 1
        if a.lost_writes and not a.exact:
            # In the order delivered: only the first copy may be unflagged.
            desc = ", ".join("deliveries=%d (%s)" % (d, p_) for d, p_, _ in occ)
            if any(d < 2 for d, _, _ in occ[1:]):
                fails.append("id %s delivered again without a flag: %s" % (fmt(k), desc))
            else:
                flagged += len(occ) - 1
            continue
        occ.sort()
        ds = [d for d, _, _ in occ]
        desc = ", ".join("deliveries=%d in %s%s" % (d, p_, " (killed)" if kl else "")
                         for d, p_, kl in occ)
        if a.exact:
            fails.append("id %s delivered %d times: %s" % (fmt(k), len(occ), desc))
        elif len(set(ds)) != len(ds):
            fails.append("id %s delivered twice with the same count: %s" % (fmt(k), desc))
        elif not all(kl for _, _, kl in occ[:-1]):
            fails.append("id %s: a duplicate not explained by a killed consumer: %s"
                         % (fmt(k), desc))
        else:
            flagged += len(occ) - 1

    per_epoch = []
    for e in range(a.epochs):
        want = sum(per_shard)
        have = sum(1 for k in expected if k[0] == e and k in got)
        per_epoch.append("epoch %d: %d/%d ids" % (e, have, want))

    # Nothing of the job left behind (the batches still stored are counted
    # by the caller, through sluice-ctl info).
    pend = [k.decode() for k in r.scan_iter(match=pre + "pending:*") if r.llen(k)]
    if pend:
        fails.append("pending lists left: %s" % ", ".join(
            "%s (%d)" % (k[len(pre):], r.llen(k)) for k in pend))
    unexplained = [i for i in dead if i not in set(map(fmt, poisoned))]
    if unexplained:
        fails.append("%d dead letters: %s" % (len(unexplained), [
            "%s (%s)" % (i, (r.hget(pre + "deadinfo", i) or b"?").decode())
            for i in unexplained][:5]))
    state = r.hget(pre + "jrun", "state")
    if state != b"finished":
        fails.append("job state %r, not finished" % state)

    why = ("a later copy" if a.lost_writes else
           "earlier copy held by a killed consumer")
    print("checked %d delivery lines from %d consumers (%d killed): %s; "
          "%d duplicate deliveries, %d of them flagged (deliveries>=2, %s); "
          "%d deliveries with deliveries>=2; all %d ids acknowledged: %s"
          % (lines, len(names | knames), len(knames), ", ".join(per_epoch),
             dups, flagged, why, redelivered, len(expected), "yes" if not unacked else "NO"))
    if poisoned:
        print("dead-lettered after %d or more deliveries to killed consumers (the poison rule): %s"
              % (a.max_deliveries, ", ".join(map(fmt, sorted(poisoned)))))
    for f in fails:
        print("FAIL: " + f)
    return 1 if fails else 0


if __name__ == "__main__":
    sys.exit(main())
