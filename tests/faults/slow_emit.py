#!/usr/bin/python3
"""Throttled record source for the fault suite (sluice-producer --exec).

usage: slow_emit.py DELAY_MS PATH [START [END]]

Writes the lines START..END-1 of PATH (all of them by default; END may be
empty) to stdout as records in the --exec "records" framing: a 4-byte
little-endian length, then the bytes (the line without its newline). It
sleeps DELAY_MS after every record, so that a task lasts long enough for
the fault scenarios to kill its producer in the middle of it.
"""
import struct
import sys
import time


def main():
    delay = int(sys.argv[1]) / 1000.0
    path = sys.argv[2]
    start = int(sys.argv[3]) if len(sys.argv) > 3 and sys.argv[3] else 0
    end = int(sys.argv[4]) if len(sys.argv) > 4 and sys.argv[4] else None
    with open(path, "rb") as f:
        lines = f.read().split(b"\n")
    if lines and lines[-1] == b"":
        lines.pop()
    out = sys.stdout.buffer
    for rec in lines[start:end]:
        out.write(struct.pack("<I", len(rec)) + rec)
        out.flush()
        time.sleep(delay)


if __name__ == "__main__":
    try:
        main()
    except BrokenPipeError:
        # The producer was killed: nobody reads any more.
        sys.exit(1)
