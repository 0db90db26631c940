"""A hostile Redis for hostile_redis.sh: a proxy in front of a real server
(--upstream HOST:PORT) or in front of nothing, which passes replies
through until a client command matches --trigger (a regular expression
over the command's RESP text), then answers that connection with a reply
of absurd size followed by endless bytes, until the client hangs up.

  --mode bulk      $9999999999 and endless bytes of the string
  --mode array     *2147483647 and endless :1 elements
  --mode elements  *10000000 and endless :1 elements (each one small)
  --mode line      a status line that never ends
  --mode nested    *1 *1 ... an array nested 100 deep
  --mode spurious  +OK again and again, replies to nothing

Writes the port it listens on to --port-file; logs every hostile answer
(connection, bytes sent before the client hung up) to stderr.
"""
import argparse
import os
import re
import select
import socket
import sys
import threading

HEADS = {
    "bulk": (b"$9999999999\r\n", b"x" * 65536),
    "array": (b"*2147483647\r\n", b":1\r\n" * 16384),
    "elements": (b"*10000000\r\n", b":1\r\n" * 16384),
    "line": (b"+", b"y" * 65536),
    "nested": (b"*1\r\n" * 100, b":1\r\n" * 16384),
    "spurious": (b"", b"+OK\r\n" * 16384),
}


def reply_end(buf, i=0):
    """Where the complete RESP2 reply that starts at buf[i] ends, or -1."""
    if i >= len(buf):
        return -1
    nl = buf.find(b"\r\n", i)
    if nl < 0:
        return -1
    kind = buf[i:i + 1]
    if kind in (b"+", b"-", b":"):
        return nl + 2
    n = int(buf[i + 1:nl])
    if kind == b"$":
        end = nl + 2 if n < 0 else nl + 2 + n + 2
        return end if len(buf) >= end else -1
    if kind == b"*":
        j = nl + 2
        for _ in range(max(n, 0)):
            j = reply_end(buf, j)
            if j < 0:
                return -1
        return j
    raise ValueError("upstream sent reply type %r" % kind)


class Conn:
    def __init__(self, client, args, cid):
        self.client, self.args, self.cid = client, args, cid
        self.fired = threading.Event()
        self.closed = False
        self.up = None
        if args.upstream:
            host, port = args.upstream.rsplit(":", 1)
            self.up = socket.create_connection((host, int(port)))

    def from_client(self):
        tail = b""
        try:
            while True:
                data = self.client.recv(65536)
                if not data:
                    break
                seen = tail + data
                if self.args.trigger.search(seen):
                    self.fired.set()
                    return
                tail = seen[-128:]
                if self.up:
                    self.up.sendall(data)
        except OSError:
            pass
        self.closed = True
        self.fired.set()

    def to_client(self):
        buf = b""
        while not self.fired.is_set():
            if not self.up:
                self.fired.wait(0.05)
                continue
            r, _, _ = select.select([self.up], [], [], 0.05)
            if not r:
                continue
            data = self.up.recv(65536)
            if not data:
                break
            buf += data
            # Whole replies only: the hostile one starts where a reply ends.
            end, last = 0, 0
            while (end := reply_end(buf, last)) >= 0:
                last = end
            if last:
                self.client.sendall(buf[:last])
                buf = buf[last:]
        head, body = HEADS[self.args.mode]
        sent = 0
        if self.closed:
            # The client hung up before any command matched.
            head, body = b"", None
        try:
            self.client.sendall(head)
            sent += len(head)
            while body:
                self.client.sendall(body)
                sent += len(body)
        except OSError:
            pass
        if body:
            print("connection %d: %s reply, %d bytes sent before the client hung up"
                  % (self.cid, self.args.mode, sent), file=sys.stderr, flush=True)
        for s in (self.client, self.up):
            if s:
                s.close()

    def run(self):
        threading.Thread(target=self.from_client, daemon=True).start()
        self.to_client()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--mode", choices=sorted(HEADS), required=True)
    ap.add_argument("--trigger", default=".")
    ap.add_argument("--upstream")
    ap.add_argument("--port-file", required=True)
    args = ap.parse_args()
    args.trigger = re.compile(args.trigger.encode(), re.S)
    ls = socket.socket()
    ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    ls.bind(("127.0.0.1", 0))
    ls.listen(64)
    with open(args.port_file + ".tmp", "w") as f:
        f.write("%d\n" % ls.getsockname()[1])
    os.rename(args.port_file + ".tmp", args.port_file)
    cid = 0
    while True:
        client, _ = ls.accept()
        cid += 1
        try:
            conn = Conn(client, args, cid)
        except OSError as e:
            print("connection %d: upstream: %s" % (cid, e), file=sys.stderr, flush=True)
            client.close()
            continue
        threading.Thread(target=conn.run, daemon=True).start()


if __name__ == "__main__":
    main()
