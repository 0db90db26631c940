#!/usr/bin/python3
"""The peer's producer: what a user would write instead of sluice.

Packs each batch with msgpack ({"id": [task, seq], "records": [bytes...]})
and RPUSHes it to one Redis list with Debian's python3-redis. Backpressure
polls: when the length RPUSH returns reaches the budget, it sleeps 1 ms and
re-reads LLEN until the consumers made room. Prints one line of key=value
pairs like bench-produce: t0_us/t1_us wall clock, maxrss_kb = VmHWM, cpu_us
from getrusage counted from just before the first push (the interpreter's
start-up is not billed), hiredis=1 when redis-py parsed replies with
python3-hiredis. --duration-ms T stops pushing after T ms (--count is then a
cap); batches= and payload= say what was pushed.

Plain (the default): one RPUSH per round trip, redis-py's pure-Python reply
parser even when python3-hiredis is installed (Debian's python3-redis only
suggests it, so a first version runs without it). --strong: what a user
who tuned it would write: the hiredis parser when python3-hiredis is
installed, PIPELINE RPUSHes per round trip (backpressure on the length the
last of them returned, so the list may pass the budget by PIPELINE - 1);
bench.py also raises glibc's malloc thresholds for it (environment).
"""
import argparse
import os
import time

import msgpack

from peer_common import connect, cpu_us, peak_rss_kb

PIPELINE = 16   # RPUSHes per round trip of the strong peer


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--key", required=True)
    ap.add_argument("--size", type=int, required=True)
    ap.add_argument("--count", type=int, required=True)
    ap.add_argument("--records", type=int, default=1)
    ap.add_argument("--budget", type=int, required=True, help="max batches in the list")
    ap.add_argument("--task", type=int, default=1)
    ap.add_argument("--duration-ms", type=int, default=0,
                    help="stop pushing after this long (--count is then a cap)")
    ap.add_argument("--strong", action="store_true",
                    help="hiredis parser when installed, %d RPUSHes per round trip" % PIPELINE)
    a = ap.parse_args()

    r, hiredis = connect(a.port, a.strong)
    payload = os.urandom(a.size)
    each = a.size // a.records
    records = [payload[i * each:(i + 1) * each] for i in range(a.records - 1)]
    records.append(payload[(a.records - 1) * each:])

    c0 = cpu_us()
    t0 = time.time()
    waits = 0
    pipe = r.pipeline(transaction=False)
    step = PIPELINE if a.strong else 1
    pushed = 0
    for first in range(0, a.count, step):
        if a.duration_ms and first and time.time() - t0 >= a.duration_ms / 1000.0:
            break
        if a.strong:
            for seq in range(first, min(first + step, a.count)):
                pipe.rpush(a.key, msgpack.packb({"id": [a.task, seq], "records": records}))
            replies = pipe.execute()
            n = replies[-1]
            pushed += len(replies)
        else:
            n = r.rpush(a.key, msgpack.packb({"id": [a.task, first], "records": records}))
            pushed += 1
        while n >= a.budget:
            waits += 1
            time.sleep(0.001)
            n = r.llen(a.key)
    t1 = time.time()
    print("produce batches=%d payload=%d t0_us=%d t1_us=%d cpu_us=%d maxrss_kb=%d full_waits=%d "
          "hiredis=%d" % (pushed, pushed * a.size, t0 * 1e6, t1 * 1e6, cpu_us() - c0,
                          peak_rss_kb(), waits, hiredis), flush=True)


if __name__ == "__main__":
    main()
