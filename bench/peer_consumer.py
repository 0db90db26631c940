#!/usr/bin/python3
"""The peer's consumer: BLPOPs batches from the list the peer producer
fills, unpacks each with msgpack and hands its records on (here: sums their
lengths). Prints "ready", then, when --expect batches came (or, with
--expect 0, at the first --idle-ms without one after SIGUSR1, which the
driver sends once the producers are done), a line like bench-consume.

Plain (the default): one BLPOP per batch, redis-py's pure-Python reply
parser even when python3-hiredis is installed. --strong: the hiredis parser
when installed, and `BLMPOP T 1 key LEFT COUNT 16` (one key; T is BLPOP's
timeout, --idle-ms or --start-ms): up to 16 batches per round trip, oldest
first, as the producer RPUSHes them.
"""
import argparse
import signal
import sys
import time

import msgpack

from peer_common import connect, cpu_us, peak_rss_kb

COUNT = 16   # batches per BLMPOP of the strong peer


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--key", required=True)
    ap.add_argument("--expect", type=int, default=0)
    ap.add_argument("--idle-ms", type=int, default=500)
    ap.add_argument("--start-ms", type=int, default=60000)
    ap.add_argument("--strong", action="store_true",
                    help="hiredis parser when installed, BLMPOP ... COUNT %d" % COUNT)
    a = ap.parse_args()

    done = []
    signal.signal(signal.SIGUSR1, lambda *_: done.append(1))
    r, hiredis = connect(a.port, a.strong)
    r.ping()
    print("ready", flush=True)
    c0 = cpu_us()
    n = payload = frames = 0
    t_first = t_last = 0.0
    while a.expect == 0 or n < a.expect:
        timeout = (a.idle_ms if n else a.start_ms) / 1000.0
        if a.strong:
            got = r.blmpop(timeout, 1, a.key, direction="LEFT", count=COUNT)
            frames_got = got[1] if got else None
        else:
            got = r.blpop(a.key, timeout=timeout)
            frames_got = [got[1]] if got else None
        if frames_got is None:
            if done or n == 0:
                break
            continue
        for frame in frames_got:
            for rec in msgpack.unpackb(frame)["records"]:
                payload += len(rec)
            frames += len(frame)
        t_last = time.time()
        if n == 0:
            t_first = t_last
        n += len(frames_got)
    if n == 0:
        print("peer_consumer: no batch arrived", file=sys.stderr)
        sys.exit(1)
    print("consume batches=%d payload=%d frame_bytes=%d t_first_us=%d t_last_us=%d cpu_us=%d "
          "maxrss_kb=%d hiredis=%d" % (n, payload, frames, t_first * 1e6, t_last * 1e6,
                                       cpu_us() - c0, peak_rss_kb(), hiredis), flush=True)


if __name__ == "__main__":
    main()
