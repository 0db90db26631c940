#!/usr/bin/env python3
"""Side by side: the same sluice runs of bench.py (1 producer and 1
consumer, acknowledgements on, then at-most-once) with two builds against
one private redis-server, interleaved run by run (A, B, A, B...), so that
the machine's load falls on both alike. Prints per size the median
batches/s of each build, their ratio, and the medians of Redis CPU per GB.

    bench/compare.sh REV        # builds REV in a scratch worktree, then runs this
    bench/compare.py --port P --a build-old --b build --sizes 1024,65536 --reps 5
"""
import argparse
import os
import statistics
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import bench  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--a", required=True, help="build folder of the tree before")
    ap.add_argument("--b", required=True, help="build folder of the tree after")
    ap.add_argument("--sizes", default="1024,65536,1048576")
    ap.add_argument("--reps", type=int, default=5)
    a = ap.parse_args()
    a.clusters = ""
    a.redis_args = ""
    runs = {}
    for size in [int(s) for s in a.sizes.split(",")]:
        if size not in bench.PARAMS:
            ap.error("size %d: the sizes are %s" % (size, ",".join(map(str, bench.SIZES))))
        for ack in ("explicit", "none"):
            for rep in range(a.reps):
                sides = (("a", a.a), ("b", a.b))
                for side, build in sides if rep % 2 == 0 else sides[::-1]:
                    a.build = build
                    r = bench.Bench(a).sluice(size, ack, 1, 1)
                    runs.setdefault((size, ack, side), []).append(r)
                    print("%s %-8s %s rep %d: %.0f batches/s"
                          % (bench.human(size), ack, side, rep, r["bps"]), file=sys.stderr,
                          flush=True)
    print("| batch | mode | A batches/s | B batches/s | B/A | A Redis CPU s/GB | "
          "B Redis CPU s/GB |")
    print("|---|---|--:|--:|--:|--:|--:|")
    for (size, ack, side) in sorted(k for k in runs if k[2] == "a"):
        ra, rb = runs[(size, ack, "a")], runs[(size, ack, "b")]
        ma = statistics.median(r["bps"] for r in ra)
        mb = statistics.median(r["bps"] for r in rb)
        print("| %s | %s | %.0f | %.0f | %.2f | %.2f | %.2f |" % (
            bench.human(size), "acks" if ack == "explicit" else "at-most-once", ma, mb, mb / ma,
            statistics.median(r["rcpu"] for r in ra), statistics.median(r["rcpu"] for r in rb)))


if __name__ == "__main__":
    main()
