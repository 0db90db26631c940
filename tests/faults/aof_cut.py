#!/usr/bin/python3
"""Where to cut an AOF file so that Redis loads what a crash left of it.

usage: aof_cut.py FILE SIZE

FILE is an incr file of a multi-part AOF (commands in the Redis protocol),
SIZE the byte at which a crash cut it. Prints the size to truncate FILE to:
SIZE itself, unless the cut falls inside a MULTI/EXEC block (a script's
effects, a transaction) whose EXEC it loses; then a byte inside the
MULTI command itself (which one depends on SIZE), so that Redis still
finds a command cut short, and drops it and everything after it.

Why: Redis drops a transaction whose EXEC is missing, but with
aof-load-truncated it then truncates the file after the last whole command,
inside the transaction (redis 7.0; valkey-io/valkey#4342 fixed it). The
next load of that file, after the next crash, replays the orphaned
commands together with what was appended after them: the state it rebuilds
is not one Redis ever had. A fixed Redis truncates before the MULTI; so
does Redis 7.0 when the MULTI command itself is cut short. Every load then
gives the state Redis really had, and loaded the first time, from SIZE.
"""
import sys


def main():
    path, size = sys.argv[1], int(sys.argv[2])
    with open(path, "rb") as f:
        data = f.read(size)
    pos, multi, multi_len = 0, None, 0
    while True:
        # One command: *N\r\n then N bulk strings $L\r\n<L bytes>\r\n.
        p = pos
        try:
            if data[p:p + 1] != b"*":
                break
            eol = data.index(b"\r\n", p)
            n, p = int(data[p + 1:eol]), eol + 2
            first = None
            for _ in range(n):
                if data[p:p + 1] != b"$":
                    raise ValueError
                eol = data.index(b"\r\n", p)
                ln = int(data[p + 1:eol])
                p = eol + 2
                if p + ln + 2 > len(data):
                    raise ValueError
                if first is None:
                    first = data[p:p + ln].upper()
                p += ln + 2
        except ValueError:
            break   # the command the cut goes through
        if first == b"MULTI":
            multi, multi_len = pos, p - pos
        elif first == b"EXEC":
            multi = None
        pos = p
    print(size if multi is None else multi + 1 + size % (multi_len - 1))


if __name__ == "__main__":
    main()
