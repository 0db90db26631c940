"""Consumer and Batch: sluice_consumer_* and sluice_batch_* for Python.

Lifetime of a batch's memory (the rule the README states):
  * A Batch owns one received frame (a C sluice_batch) through a _Frame.
    Its record memoryviews and tensor arrays point into that frame: no copy.
  * Batch.release() acknowledges the batch. From then on the memoryviews
    handed out by .records are released (using one raises ValueError), and
    .records / .tensors refuse to make new ones.
  * Every numpy array (and any memoryview sliced from a record) holds the
    _Frame alive; the C batch is freed when the last of them is gone AND
    release() was called. So nothing ever points at freed memory.
  * A Batch dropped without release() is not acknowledged: its memory stays
    with the consumer, and close() hands it back to the queue (it is
    delivered again, to this or another consumer).

Threads: the C consumer is used by one thread at a time, and freeing a
batch touches the consumer. Every C call on a consumer runs under its lock;
a release or free that happens while another thread is inside the library
for that consumer (a blocking next(), say, or a garbage collection on
another thread) is queued and done by the next call that holds the lock.
"""
import collections
import ctypes
import logging
import threading
import time
import weakref

from . import _lib
from ._lib import lib, Error, Timeout, EndOfEpoch, PartialEpoch

__all__ = ["Consumer", "Batch", "BatchId"]

# With sluice_batch_ack the acknowledgement goes out at release(), and the
# C batch is freed later, when the memory is no longer used. A library
# without it can only acknowledge by freeing (sluice_batch_release), so
# there the acknowledgement waits until the last array of the batch is
# gone: a batch whose arrays are kept is acknowledged late (and handed back
# by close() if they outlive the consumer).
HAVE_ACK = hasattr(lib, "sluice_batch_ack")
_HAVE_EPOCH = hasattr(lib, "sluice_consumer_epoch")
_HAVE_FINISHED = hasattr(lib, "sluice_consumer_finished")
_HAVE_PADDING = hasattr(lib, "sluice_batch_is_padding")

# Longest single wait inside the library: Python handles signals (Ctrl-C)
# only between C calls, so long waits are cut into slices.
_SLICE_MS = 500
# A wait for a batch this long is logged (logger "sluice"), with what it
# waits for; again when the reason changes, and once a minute.
_WAIT_LOG_S = 5.0

_log = logging.getLogger("sluice")

BatchId = collections.namedtuple("BatchId", "epoch task seq")

_open_consumers = weakref.WeakSet()


class _Core:
    """The part of a consumer its batches need: the handle, the lock, and the
    work deferred while another thread held the lock. Batches refer to this,
    not to the Consumer, so that a Consumer can be collected (and closed)
    while arrays of its batches live on."""

    def __init__(self, handle):
        self.handle = handle          # sluice_consumer *, None once closed
        self.lock = threading.RLock()
        self.deferred = collections.deque()   # (fn, ptr), run in order
        self.abandoned = []           # batches dropped unreleased: freed after close

    def drain(self):
        """Runs the deferred calls; the caller holds the lock."""
        while self.deferred:
            fn, ptr = self.deferred.popleft()
            fn(ptr)

    def run(self, fn, ptr):
        """fn(ptr) now if no other thread is inside the library for this
        consumer, else as soon as one leaves it."""
        self.deferred.append((fn, ptr))
        self.try_drain()

    def try_drain(self):
        # Without blocking: called from finalizers, which must never wait.
        # Repeats because a call deferred just before the holder's unlock
        # would otherwise wait for the next call on the consumer.
        while self.deferred and self.lock.acquire(blocking=False):
            try:
                self.drain()
            finally:
                self.lock.release()

    def abandon(self, ptr):
        """A batch garbage-collected without release(). Holding the lock."""
        if self.handle is None:
            lib.sluice_batch_release(ptr)   # detached by close(): only frees
        else:
            self.abandoned.append(ptr)


class _Frame:
    """Owns one C batch. Freed (by the finalizer) once nothing refers to it:
    not the Batch (which lets go at release()), nor any array or view."""

    __slots__ = ("core", "ptr", "released", "__weakref__")

    def __init__(self, core, ptr):
        self.core = core
        self.ptr = ptr
        self.released = False

    def __del__(self):
        ptr, self.ptr = self.ptr, None
        if not ptr:
            return
        try:
            if self.released:
                self.core.run(lib.sluice_batch_release, ptr)
            else:
                self.core.run(self.core.abandon, ptr)
        except Exception:   # interpreter shutdown: the process frees it anyway
            pass


class _TensorView:
    """What numpy wraps (its __array_interface__) to make an array over a
    frame without copying; the array's .base, holding the frame alive."""

    __slots__ = ("__array_interface__", "frame")

    def __init__(self, frame, addr, shape, typestr):
        self.frame = frame
        self.__array_interface__ = {"version": 3, "data": (addr, True),   # read-only
                                    "shape": shape, "typestr": typestr}


class Batch:
    """One batch taken from a queue, held under this consumer's lease until
    release() (or the end of a `with batch:` block) acknowledges it.

    .id          BatchId(epoch, task, seq)
    .deliveries  1 on first delivery, more when it was delivered before
    .padding     True when it repeats a batch to fill a coordinated round
    .producer    id of the producer that pushed it
    .created_us  creation time, microseconds since the Unix epoch
    .frame_bytes size of the received frame
    .records     list of read-only memoryviews, one per record (no copy)
    .tensors     dict name -> read-only numpy array over the frame (no copy)
    .dtypes      dict name -> sluice dtype name (tells bfloat16 apart: numpy
                 has no bfloat16, so such a tensor is shown as uint16 bits)
    """

    def __init__(self, core, ptr):
        self._frame = _Frame(core, ptr)
        self._ptr = ptr
        i = lib.sluice_batch_get_id(ptr)
        self.id = BatchId(i.epoch, i.task, i.seq)
        self.deliveries = lib.sluice_batch_deliveries(ptr)
        self.padding = bool(lib.sluice_batch_is_padding(ptr)) if _HAVE_PADDING else False
        self.producer = lib.sluice_batch_producer(ptr).decode("utf-8", "replace")
        self.created_us = lib.sluice_batch_created_us(ptr)
        self.frame_bytes = lib.sluice_batch_frame_bytes(ptr)
        self.num_records = lib.sluice_batch_num_records(ptr)
        self.num_tensors = lib.sluice_batch_num_tensors(ptr)
        self._records = None
        self._tensors = None
        self._dtypes = None

    def __repr__(self):
        return "<sluice.Batch %d:%d:%d %s=%d%s>" % (
            self.id.epoch, self.id.task, self.id.seq,
            "tensors" if self.num_tensors else "records",
            self.num_tensors or self.num_records, " released" if self.released else "")

    @property
    def released(self):
        return self._frame is None

    def _live(self):
        if self._frame is None:
            raise ValueError("batch %d:%d:%d was released" % self.id)
        return self._frame

    @property
    def records(self):
        frame = self._live()
        if self._records is None:
            self._records = [] if self.num_tensors else self._make_records(frame)
        return self._records

    def _make_records(self, frame):
        recs = [lib.sluice_batch_record(self._ptr, i) for i in range(self.num_records)]
        spans = [(r.data, r.len) for r in recs if r.len and r.data]
        if not spans:
            return [memoryview(b"") for _ in recs]
        lo = min(a for a, _ in spans)
        hi = max(a + n for a, n in spans)
        # One ctypes array over the records' extent of the frame, carrying the
        # frame: every view sliced from it (also later by the caller) keeps
        # the frame, hence the memory, alive.
        area = (ctypes.c_ubyte * (hi - lo)).from_address(lo)
        area.frame = frame
        raw = memoryview(area)
        flat = raw.cast("B")
        base = flat.toreadonly()
        out = [base[r.data - lo:r.data - lo + r.len] if r.len and r.data else memoryview(b"")
               for r in recs]
        for v in (raw, flat, base):
            v.release()   # the slices hold the underlying buffer themselves
        return out

    @property
    def tensors(self):
        frame = self._live()
        if self._tensors is None:
            self._tensors, self._dtypes = self._make_tensors(frame)
        return self._tensors

    @property
    def dtypes(self):
        self.tensors
        return self._dtypes

    def _make_tensors(self, frame):
        import numpy as np
        out, dtypes = {}, {}
        for i in range(self.num_tensors):
            t = lib.sluice_batch_tensor(self._ptr, i).contents
            name = t.name.decode("utf-8", "replace")
            if not 0 < t.dtype < len(_lib.DTYPES):
                raise Error("PROTOCOL", "tensor %r has an unknown dtype %d" % (name, t.dtype))
            dname, typestr = _lib.DTYPES[t.dtype]
            shape = tuple(int(t.shape[d]) for d in range(t.ndim))
            if t.nbytes == 0 or not t.data:
                a = np.zeros(shape, dtype=typestr)   # nothing to share
                a.flags.writeable = False
            else:
                a = np.asarray(_TensorView(frame, t.data, shape, typestr))
            out[name] = a
            dtypes[name] = dname
        return out, dtypes

    def release(self):
        """Acknowledges the batch. Idempotent. Memoryviews from .records stop
        working at once; numpy arrays from .tensors stay valid (they keep
        the memory until they are garbage-collected)."""
        frame = self._frame
        if frame is None:
            return
        self._frame = None
        for v in self._records or ():
            try:
                v.release()
            except BufferError:
                pass   # exported further (np.frombuffer...): that holds the frame
        self._records = None
        self._tensors = None
        frame.released = True
        if HAVE_ACK:
            frame.core.run(lib.sluice_batch_ack, frame.ptr)
        # Dropping the last reference here frees the C batch unless arrays
        # or views still use it (then their collection does).
        del frame

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.release()
        return False


class _EpochIter:
    """The batches of the consumer's current epoch, ending at its end."""

    def __init__(self, consumer):
        self.consumer = consumer
        self.epoch = consumer.epoch
        self.prev = None
        self.done = False

    def __iter__(self):
        return self

    def __next__(self):
        c = self.consumer
        if self.prev is not None:
            if c.auto_release:
                self.prev.release()
            self.prev = None
        if self.done:
            raise StopIteration
        try:
            b = c.next_batch(c.timeout_ms)
        except EndOfEpoch:
            self.done = True
            raise StopIteration from None
        if b is None:
            raise Timeout("no batch of queue '%s' within %d ms" % (c.queue, c.timeout_ms))
        self.prev = b
        return b


class Consumer:
    """Takes batches from a sluice queue (sluice_consumer_open).

    Consumer(url, queue, rank=None, world=None, prefetch=None,
             max_batch_bytes=None, at_most_once=False, timeout_ms=None,
             consumer_id=None, connect_timeout_ms=None,
             reconnect_timeout_ms=None, auto_release=True,
             accept_partial=False, checkpoints=None, resume=None,
             prefetch_bytes=None)

    rank/world: this consumer's rank of `world` on a coordinated queue.
    prefetch/prefetch_bytes: at most this many batches and about this many
    bytes held ahead (None: 1024 batches and a window that grows to what
    the link's round trips need, up to 64 MiB).
    at_most_once: batches are removed as they are taken (no ack, lost if
    the process dies). timeout_ms: how long iteration waits for a batch
    before raising sluice.Timeout (None: forever). auto_release: iteration
    releases each batch when the loop asks for the next one. An epoch that
    ended without the records of failed tasks raises sluice.PartialEpoch
    where its end is reached (iteration goes on with the next epoch
    afterwards); with accept_partial it ends like any other, and
    consumer.epoch_report says what failed. checkpoints=K: checkpoints on,
    keeping the last K (consumer.checkpoint() takes one and returns its
    token); resume=token: starts from that checkpoint (the batches
    acknowledged after it come again first; see checkpoint()).

    `for batch in consumer:` runs over the batches of the current epoch and
    ends at its end; iterate again for the next epoch. consumer.finished
    tells that the job's last epoch ended. consumer.epochs() gives
    (epoch, batches) pairs until then. next_batch() is the call underneath.
    Raises sluice.Error (e.g. code "NOQUEUE") when the queue cannot be
    opened."""

    def __init__(self, url, queue, rank=None, world=None, prefetch=None, max_batch_bytes=None,
                 at_most_once=False, timeout_ms=None, consumer_id=None, connect_timeout_ms=None,
                 reconnect_timeout_ms=None, auto_release=True, accept_partial=False,
                 checkpoints=None, resume=None, prefetch_bytes=None):
        self._core = None
        if (rank is None) != (world is None):
            raise ValueError("rank and world go together (rank %r of world %r)" % (rank, world))
        if world is not None and not 0 <= rank < world:
            raise ValueError("rank must be in 0..world-1, got %r of %r" % (rank, world))
        self.queue = queue
        self.rank, self.world = rank, world
        self._said, self._said_at = "", 0.0
        self.timeout_ms = timeout_ms
        self.auto_release = auto_release
        o = _lib.ConsumerOpts()
        o.redis_url = _lib.cstr(url, "url")
        o.queue = _lib.cstr(queue, "queue")
        o.max_batch_bytes = max_batch_bytes or 0
        o.prefetch = prefetch or 0
        o.prefetch_bytes = prefetch_bytes or 0
        o.connect_timeout_ms = connect_timeout_ms or 0
        o.reconnect_timeout_ms = reconnect_timeout_ms or 0
        o.consumer_id = _lib.cstr(consumer_id, "consumer_id")
        o.world = world or 0
        o.rank = rank or 0
        o.ack_mode = _lib.ACK_NONE if at_most_once else _lib.ACK_EXPLICIT
        o.accept_partial = 1 if accept_partial else 0
        o.checkpoint_keep = checkpoints or 0
        o.resume = _lib.cstr(resume, "resume")
        h = ctypes.c_void_p()
        err = ctypes.create_string_buffer(512)
        rc = lib.sluice_consumer_open(ctypes.byref(h), ctypes.byref(o), err, len(err))
        _lib.check(rc, err.value)
        self._core = _Core(h.value)
        _open_consumers.add(self)

    def _handle(self):
        h = self._core.handle if self._core else None
        if h is None:
            raise Error("INVALID", "the consumer is closed")
        return h

    @property
    def closed(self):
        return self._core is None or self._core.handle is None

    @property
    def id(self):
        with self._core.lock:
            return lib.sluice_consumer_id(self._handle()).decode()

    @property
    def errstr(self):
        """Detail of the library's last failure or skipped frame ("" if none)."""
        with self._core.lock:
            return lib.sluice_consumer_errstr(self._handle()).decode("utf-8", "replace")

    @property
    def epoch(self):
        """The epoch the next batch comes from (0 for a queue without a job)."""
        if not _HAVE_EPOCH:
            return 0
        with self._core.lock:
            return lib.sluice_consumer_epoch(self._handle())

    @property
    def finished(self):
        """True once the job's last epoch ended: no batch will come."""
        if not _HAVE_FINISHED:
            return False
        with self._core.lock:
            return bool(lib.sluice_consumer_finished(self._handle()))

    def checkpoint(self, timeout_ms=None):
        """Takes a checkpoint of this consumer's place in the job and
        returns its token (a str): save it with the model's checkpoint and
        pass it as Consumer(resume=token) after a crash. Every batch
        returned before the call counts as trained (one still held is
        acknowledged). Waits until Redis confirms it, up to timeout_ms (None:
        no limit; raises sluice.Timeout). Needs Consumer(checkpoints=K) or
        resume=."""
        buf = ctypes.create_string_buffer(_lib.CHECKPOINT_TOKEN_MAX)
        with self._core.lock:
            h = self._handle()
            rc = lib.sluice_consumer_checkpoint(h, buf, len(buf),
                                                -1 if timeout_ms is None else int(timeout_ms))
            detail = lib.sluice_consumer_errstr(h) if rc else b""
            self._core.drain()
        _lib.check(rc, detail)
        return buf.value.decode()

    def next_batch(self, timeout_ms=None):
        """The next batch of the current epoch; waits up to timeout_ms (None:
        forever, 0: no wait). Returns None on timeout. Raises EndOfEpoch
        when the epoch ended (the next call starts the next one; after the
        job's last epoch it raises EndOfEpoch with .finished True for good),
        sluice.Error on a failure (a lost connection not regained...). The
        caller must release() the batch (or use `with batch:`)."""
        core = self._core
        deadline = None if timeout_ms is None else time.monotonic() + timeout_ms / 1000.0
        out = ctypes.c_void_p()
        try:
            with core.lock:
                core.drain()
                h = self._handle()
                while True:
                    if deadline is None:
                        wait = _SLICE_MS
                    else:
                        wait = max(0, min(_SLICE_MS, int((deadline - time.monotonic()) * 1000)))
                    epoch = lib.sluice_consumer_epoch(h) if _HAVE_EPOCH else 0
                    rc = lib.sluice_consumer_next(h, ctypes.byref(out), wait)
                    core.drain()
                    if rc == _lib.OK:
                        return Batch(core, out.value)
                    if rc == _lib.EOF:
                        fin = bool(lib.sluice_consumer_finished(h)) if _HAVE_FINISHED else False
                        raise EndOfEpoch(epoch, fin)
                    if rc == _lib.PARTIAL:
                        rep = _lib.EpochReport()
                        lib.sluice_consumer_epoch_report(h, ctypes.byref(rep))
                        raise PartialEpoch(rep.epoch, bool(lib.sluice_consumer_finished(h)),
                                           rep.failed_tasks,
                                           rep.failed.decode("utf-8", "replace"))
                    if rc != _lib.TIMEOUT:
                        _lib.check(rc, lib.sluice_consumer_errstr(h))
                    self._log_wait(h)
                    if deadline is not None and time.monotonic() >= deadline:
                        return None
        finally:
            core.try_drain()

    def _log_wait(self, h):
        buf = ctypes.create_string_buffer(600)
        waited = lib.sluice_consumer_wait_status(h, buf, len(buf)) / 1000.0
        why = buf.value.decode("utf-8", "replace")
        if waited < _WAIT_LOG_S or not why:
            return
        if why != self._said or waited - self._said_at >= 60.0:
            _log.warning("queue %s: waited %.0f s: %s", self.queue, waited, why)
            self._said, self._said_at = why, waited

    @property
    def epoch_report(self):
        """What the last epoch end said: a dict of epoch, failed_tasks and
        failed (which: "epoch:shard (error); ...")."""
        rep = _lib.EpochReport()
        with self._core.lock:
            lib.sluice_consumer_epoch_report(self._handle(), ctypes.byref(rep))
        return {"epoch": rep.epoch, "failed_tasks": rep.failed_tasks,
                "failed": rep.failed.decode("utf-8", "replace")}

    @property
    def waiting(self):
        """(seconds waited, what for) while next_batch waits without a
        batch ("no producer of queue 'train' is alive..."); (0.0, "") while
        batches come."""
        buf = ctypes.create_string_buffer(600)
        h = self._handle()   # the call is thread-safe: no lock, next_batch may hold it
        ms = lib.sluice_consumer_wait_status(h, buf, len(buf))
        return ms / 1000.0, buf.value.decode("utf-8", "replace")

    def __iter__(self):
        return _EpochIter(self)

    def epochs(self):
        """Yields (epoch, batches) until the job is finished; run each
        `batches` iterator to its end before taking the next pair."""
        while not self.finished:
            it = _EpochIter(self)
            yield it.epoch, it

    def stats(self):
        """sluice_consumer_stats as a dict (batches, records, bytes,
        redelivered, duplicates, padding, invalid, reconnects, blocked_us,
        epochs_ended)."""
        st = _lib.ConsumerStats()
        with self._core.lock:
            lib.sluice_consumer_stats_get(self._handle(), ctypes.byref(st))
        return {n: getattr(st, n) for n in _lib.CONSUMER_STATS}

    def close(self):
        """Hands back every batch not acknowledged, flushes the acks and
        disconnects. Arrays of its batches stay valid. Idempotent."""
        core = self._core
        if core is None or core.handle is None:
            return
        with core.lock:
            core.drain()
            h, core.handle = core.handle, None
            lib.sluice_consumer_close(h)
            # Detached now: releasing them only frees.
            for ptr in core.abandoned:
                lib.sluice_batch_release(ptr)
            core.abandoned = []
            core.drain()
        _open_consumers.discard(self)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass


def close_all():
    """Closes every open consumer (at exit: hands their batches back now
    rather than after their lease expires)."""
    for c in list(_open_consumers):
        try:
            c.close()
        except Exception:
            pass
