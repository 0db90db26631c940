#!/usr/bin/python3
"""Disturbs Redis and measures how long the job's processes take to make
progress again (the fault suite's client_kill.sh).

usage: progress.py --port P --queue Q --action kill|sleep [--times K]
                   [--interval-ms I] [--seconds S] [--limit-ms L]
                   [--producer ID]... [--consumer FILE]...

--action kill: CLIENT KILL TYPE normal (every client connection but this
  one), K times, I ms apart. --action sleep: DEBUG SLEEP S (Redis answers
  nobody for S seconds). The reference time is the moment the last kill
  was done, or DEBUG SLEEP returned (Redis answers again).
Progress after the reference time:
  * a consumer (FILE: its --print-ids output) has made progress once it
    printed a batch that came through Redis after it: after a kill it may
    still return up to its prefetch (4) batches it held, so 5 new lines are
    needed; after the sleep its prefetched batches are long gone (they are
    returned at once), so 1 new line;
  * a producer (ID) once it renewed its liveness (the producers hash, set
    by its task lease renewal every lease/3 and its heartbeat) after it;
  * the queue once the pushed and acked counters grew.
Prints each delay; exits 1 when any exceeds L ms (default 2000) or nothing
happened within 10 s.
"""
import argparse
import sys
import time

import redis


def lines(path):
    with open(path, "rb") as f:
        return sum(1 for ln in f if ln.startswith(b"id "))


def stat(r, pre, field):
    return int(r.hget(pre + "stats", field) or 0)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--queue", required=True)
    ap.add_argument("--action", choices=["kill", "sleep"], required=True)
    ap.add_argument("--times", type=int, default=1)
    ap.add_argument("--interval-ms", type=int, default=200)
    ap.add_argument("--seconds", type=int, default=3)
    ap.add_argument("--limit-ms", type=int, default=2000)
    ap.add_argument("--producer", action="append", default=[])
    ap.add_argument("--consumer", action="append", default=[])
    a = ap.parse_args()
    pre = "sluice:{%s}:" % a.queue
    r = redis.Redis(host="127.0.0.1", port=a.port, socket_timeout=a.seconds + 10)

    if a.action == "kill":
        killed = []
        for i in range(a.times):
            if i:
                time.sleep(a.interval_ms / 1000.0)
            killed.append(r.execute_command("CLIENT", "KILL", "TYPE", "normal", "SKIPME", "yes"))
        what = "CLIENT KILL TYPE normal x%d (%s connections closed)" % (
            a.times, "+".join(str(k) for k in killed))
        need = 5
    else:
        r.execute_command("DEBUG", "SLEEP", a.seconds)
        what = "DEBUG SLEEP %d" % a.seconds
        need = 1
    t_ref = time.monotonic()
    wall_ref = int(time.time() * 1000)
    base = {f: lines(f) for f in a.consumer}
    pushed0, acked0 = stat(r, pre, "pushed"), stat(r, pre, "acked")

    delay = {}
    names = (["consumer %s" % f.rsplit("/", 1)[-1] for f in a.consumer] +
             ["producer %s" % p for p in a.producer] + ["queue pushed", "queue acked"])
    while len(delay) < len(names) and time.monotonic() - t_ref < 10:
        now = int((time.monotonic() - t_ref) * 1000)
        for f in a.consumer:
            n = "consumer %s" % f.rsplit("/", 1)[-1]
            if n not in delay and lines(f) >= base[f] + need:
                delay[n] = now
        try:
            seen = r.hmget(pre + "producers", a.producer) if a.producer else []
            for p, s in zip(a.producer, seen):
                if "producer " + p not in delay and s is not None and int(s) > wall_ref:
                    delay["producer " + p] = now
            if "queue pushed" not in delay and stat(r, pre, "pushed") > pushed0:
                delay["queue pushed"] = now
            if "queue acked" not in delay and stat(r, pre, "acked") > acked0:
                delay["queue acked"] = now
        except redis.ConnectionError:
            pass   # the next poll reconnects
        time.sleep(0.01)

    worst = max(delay.values()) if delay else None
    print("%s: progress again after %s (slowest %s ms, limit %d ms)" % (
        what, ", ".join("%s %d ms" % (n, delay[n]) for n in names if n in delay) or "nothing",
        worst, a.limit_ms))
    fails = [n for n in names if n not in delay]
    if fails:
        print("FAIL: no progress within 10 s: " + ", ".join(fails))
        return 1
    if worst > a.limit_ms:
        print("FAIL: %s took %d ms to make progress again, over %d ms" % (
            max(delay, key=delay.get), worst, a.limit_ms))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
