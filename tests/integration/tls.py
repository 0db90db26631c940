#!/usr/bin/python3
"""The Python binding over rediss:// (tests/integration/tls.sh): reads
BATCHES batches of QUEUE and prints "records=R batches=B checksum=<16 hex>".

On the way, with a consumer open (its TLS tunnels in this process), a
fork()ed child opens a consumer of its own over rediss:// and reads one
batch of CHILD_QUEUE: the relay of the parent is not the child's, and the
child's works. After the last consumer is closed the process has the
threads and descriptors it had before the first: the relay thread ended,
no socket stayed open.

usage: tls.py URL QUEUE BATCHES CHILD_QUEUE
"""
import os
import sys
import time

import sluice

MASK = (1 << 64) - 1


def fail(msg):
    sys.exit("tls.py: " + msg)


def fnv1a64(data):
    h = 0xCBF29CE484222325
    for b in data:
        h = ((h ^ b) * 0x100000001B3) & MASK
    return h


def fds():
    return sorted(os.listdir("/proc/self/fd"))


def threads():
    return len(os.listdir("/proc/self/task"))


def wait_until(what, cond, secs=10):
    end = time.monotonic() + secs
    while not cond():
        if time.monotonic() > end:
            fail("timed out waiting for " + what)
        time.sleep(0.05)


def child(url, queue):
    """Runs in the forked child: a consumer of its own, one batch."""
    try:
        with sluice.Consumer(url, queue) as c:
            b = c.next_batch(10000)
            if b is None:
                os._exit(3)
            with b:
                n = len(b.records)
        os._exit(0 if n > 0 else 4)
    except BaseException as e:   # noqa: B902 (any failure is the child's exit status)
        sys.stderr.write("tls.py child: %r\n" % (e,))
        os._exit(5)


def main():
    url, queue, nbatches, child_queue = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
    fds0, threads0 = fds(), threads()

    csum, records, seen = 0, 0, set()
    with sluice.Consumer(url, queue) as c:
        forked = False
        while len(seen) < nbatches:
            batch = c.next_batch(10000)
            if batch is None:
                fail("only %d of %d batches arrived" % (len(seen), nbatches))
            if batch.id in seen:
                fail("batch %s delivered twice" % (batch.id,))
            seen.add(batch.id)
            with batch:
                for r in batch.records:
                    csum = (csum + fnv1a64(r)) & MASK
                    records += 1
            if not forked:
                forked = True
                pid = os.fork()
                if pid == 0:
                    child(url, child_queue)
                _, status = os.waitpid(pid, 0)
                if not os.WIFEXITED(status) or os.WEXITSTATUS(status) != 0:
                    fail("the forked child's consumer failed: status %r" % (status,))
        if c.next_batch(300) is not None:
            fail("a batch beyond the %d pushed" % nbatches)

    # The relay thread ends after the last tunnel closes (a moment later).
    wait_until("the relay thread to end (threads %d, before %d)" % (threads(), threads0),
               lambda: threads() == threads0)
    wait_until("the descriptors to close (now %s, before %s)" % (fds(), fds0),
               lambda: fds() == fds0)
    print("records=%d batches=%d checksum=%016x" % (records, len(seen), csum))


if __name__ == "__main__":
    main()
