"""Producer: sluice_producer_* for Python, so that an existing Python
pipeline can feed a sluice queue."""
import ctypes
import threading
import weakref

from . import _lib
from ._lib import lib, Error

__all__ = ["Producer"]

_open_producers = weakref.WeakSet()

# numpy dtype (kind, itemsize) -> sluice dtype name.
_NUMPY_KINDS = {("b", 1): "bool", ("u", 1): "uint8", ("i", 1): "int8", ("u", 2): "uint16",
                ("i", 2): "int16", ("u", 4): "uint32", ("i", 4): "int32", ("u", 8): "uint64",
                ("i", 8): "int64", ("f", 2): "float16", ("f", 4): "float32", ("f", 8): "float64"}


def _address(obj, keep):
    """(address, length) of a bytes-like object's contiguous bytes, without
    copying when possible; keep receives whatever must outlive the call."""
    if isinstance(obj, bytes):
        keep.append(obj)
        return ctypes.cast(obj, ctypes.c_void_p).value, len(obj)
    if isinstance(obj, str):
        raise TypeError("records are bytes-like, not str (encode it first)")
    mv = memoryview(obj)
    if not mv.c_contiguous:
        mv = memoryview(mv.tobytes())
    mv = mv.cast("B") if mv.format != "B" or mv.ndim != 1 else mv
    n = mv.nbytes
    if n == 0:
        return None, 0
    if mv.readonly:
        if isinstance(mv.obj, bytes) and len(mv.obj) == n:
            keep.append(mv.obj)
            return ctypes.cast(mv.obj, ctypes.c_void_p).value, n
        b = mv.tobytes()   # a read-only buffer ctypes cannot address: copy it
        keep.append(b)
        return ctypes.cast(b, ctypes.c_void_p).value, n
    arr = (ctypes.c_char * n).from_buffer(mv)
    keep.append(arr)
    return ctypes.addressof(arr), n


class Producer:
    """Pushes batches into a sluice queue (sluice_producer_open).

    Producer(url, queue, producer_id=None, max_inflight=None,
             connect_timeout_ms=None, reconnect_timeout_ms=None)

    push_records() and push_tensors() wait while the queue is at its budget
    (backpressure); stop() (from another thread) ends such a wait with
    sluice.Error("IO"). flush() waits until every push is stored. Use as a
    context manager, or close()."""

    def __init__(self, url, queue, producer_id=None, max_inflight=None, connect_timeout_ms=None,
                 reconnect_timeout_ms=None):
        self._h = None
        self.queue = queue
        self._lock = threading.Lock()
        self._stop = ctypes.c_int(0)   # the C producer keeps this pointer
        o = _lib.ProducerOpts()
        o.redis_url = _lib.cstr(url, "url")
        o.queue = _lib.cstr(queue, "queue")
        o.producer_id = _lib.cstr(producer_id, "producer_id")
        o.max_inflight = max_inflight or 0
        o.connect_timeout_ms = connect_timeout_ms or 0
        o.reconnect_timeout_ms = reconnect_timeout_ms or 0
        o.stop = ctypes.pointer(self._stop)
        h = ctypes.c_void_p()
        err = ctypes.create_string_buffer(512)
        rc = lib.sluice_producer_open(ctypes.byref(h), ctypes.byref(o), err, len(err))
        _lib.check(rc, err.value)
        self._h = h.value
        _open_producers.add(self)

    def _handle(self):
        if self._h is None:
            raise Error("INVALID", "the producer is closed")
        return self._h

    def _check(self, rc):
        if rc != _lib.OK:
            _lib.check(rc, lib.sluice_producer_errstr(self._h))

    @property
    def id(self):
        with self._lock:
            return lib.sluice_producer_id(self._handle()).decode()

    def set_task(self, epoch, task):
        """Numbers the next batches (epoch, task, 0), (epoch, task, 1)...
        Flushes first."""
        with self._lock:
            self._check(lib.sluice_producer_set_task(self._handle(), epoch, task))

    def push_records(self, records):
        """Pushes one batch of records (an iterable of bytes-like objects;
        they are copied into the frame before the call returns)."""
        records = records if isinstance(records, (list, tuple)) else list(records)
        keep = []
        arr = (_lib.Record * max(1, len(records)))()
        for i, r in enumerate(records):
            arr[i].data, arr[i].len = _address(r, keep)
        with self._lock:
            self._check(lib.sluice_producer_push_records(self._handle(), arr, len(records)))

    def push_tensors(self, tensors):
        """Pushes one batch of named tensors: a dict (or list of pairs) name ->
        numpy array, all with the same leading dimension (the batch's rows).
        A value may be (array, "bfloat16") to send 16-bit patterns as
        bfloat16. Arrays are sent little-endian and C-ordered (converted,
        i.e. copied, only when they are not already)."""
        import numpy as np
        items = list(tensors.items()) if isinstance(tensors, dict) else list(tensors)
        if not items:
            raise ValueError("push_tensors needs at least one tensor")
        arr = (_lib.Tensor * len(items))()
        keep = []
        rows = None
        for i, (name, a) in enumerate(items):
            dname = None
            if isinstance(a, tuple):
                a, dname = a
            a = np.asarray(a)
            if dname is None:
                dname = _NUMPY_KINDS.get((a.dtype.kind, a.dtype.itemsize))
                if dname is None:
                    raise TypeError("tensor %r: numpy dtype %s has no sluice dtype" % (name, a.dtype))
            code = _lib.DTYPE_BY_NAME.get(dname)
            if code is None:
                raise ValueError("tensor %r: unknown dtype %r" % (name, dname))
            if lib.sluice_dtype_size(code) != a.dtype.itemsize:
                raise TypeError("tensor %r: %s elements are %d bytes, the array's %d"
                                % (name, dname, lib.sluice_dtype_size(code), a.dtype.itemsize))
            if not 1 <= a.ndim <= _lib.MAX_DIMS:
                raise ValueError("tensor %r: needs 1 to %d dimensions, has %d"
                                 % (name, _lib.MAX_DIMS, a.ndim))
            if rows is None:
                rows = a.shape[0]
            elif a.shape[0] != rows:
                raise ValueError("tensor %r has %d rows, the first tensor %d" % (name, a.shape[0], rows))
            a = np.ascontiguousarray(a, dtype=a.dtype.newbyteorder("<"))
            bname = _lib.cstr(name, "tensor name")
            keep += [a, bname]
            t = arr[i]
            t.name = bname
            t.dtype = code
            t.ndim = a.ndim
            for d, s in enumerate(a.shape):
                t.shape[d] = s
            t.data = a.ctypes.data
            t.nbytes = a.nbytes
        with self._lock:
            self._check(lib.sluice_producer_push_tensors(self._handle(), rows, arr, len(items)))

    def flush(self):
        """Waits until every push so far is stored in Redis."""
        with self._lock:
            self._check(lib.sluice_producer_flush(self._handle()))

    def stop(self):
        """Makes a push or flush waiting for room give up with
        sluice.Error("IO"), now and from then on. Safe from any thread."""
        self._stop.value = 1

    def stats(self):
        """sluice_producer_stats as a dict (batches, records, bytes, duplicates,
        full_waits, blocked_us, reconnects, tasks_done, tasks_failed,
        raw_bytes)."""
        st = _lib.ProducerStats()
        with self._lock:
            lib.sluice_producer_stats_get(self._handle(), ctypes.byref(st))
        return {n: getattr(st, n) for n in _lib.PRODUCER_STATS}

    def close(self):
        """Flushes (best effort), disconnects. Idempotent."""
        if self._h is None:
            return
        with self._lock:
            h, self._h = self._h, None
            lib.sluice_producer_close(h)
        _open_producers.discard(self)

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
    for p in list(_open_producers):
        try:
            p.close()
        except Exception:
            pass
