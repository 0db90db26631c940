"""Loading libsluice.so and declaring its C API for ctypes.

Everything here mirrors common/include/sluice/{common,batch,consumer,producer}.h;
when a header changes, this file changes with it.

Where the library comes from, first match wins:
  1. $SLUICE_LIB (a path),
  2. build/libsluice.so of the source tree this package sits in
     (python/sluice/../../build), i.e. what `make` built,
  3. ctypes.util.find_library("sluice"), then "libsluice.so.0" (installed).
"""
import ctypes
import ctypes.util
import os

__all__ = ["lib", "Error", "Timeout", "EndOfEpoch", "PartialEpoch", "check", "ERR_NAMES"]

# ---- errors (sluice_err) ---------------------------------------------------

# Index = the C enum value; the names drop the SLUICE_ / SLUICE_ERR_ prefix.
ERR_NAMES = ("OK", "EOF", "TIMEOUT", "IO", "PROTOCOL", "INVALID", "NOMEM", "AUTH",
             "NOQUEUE", "EXISTS", "FULL", "TOOBIG", "FORMAT", "REDIS", "SYS", "PARTIAL", "BUSY")
OK, EOF, TIMEOUT, PARTIAL = 0, 1, 2, 15


class Error(Exception):
    """A sluice call failed. .code is the name of the sluice_err ("NOQUEUE",
    "IO", ...), .value its number, .message the library's detail."""

    def __init__(self, code, message=""):
        if isinstance(code, int):
            value = code
            name = ERR_NAMES[code] if 0 <= code < len(ERR_NAMES) else "UNKNOWN"
        else:
            name = code
            value = ERR_NAMES.index(code) if code in ERR_NAMES else -1
        self.code = name
        self.value = value
        self.message = message or (strerror(value) if value >= 0 else "")
        super().__init__("%s: %s" % (name, self.message))

    def __reduce__(self):   # pickling (DataLoader workers pass errors on)
        return (Error, (self.value if self.value >= 0 else self.code, self.message))


class Timeout(Error):
    """Nothing arrived within the timeout (code "TIMEOUT")."""

    def __init__(self, message="no batch arrived within the timeout"):
        super().__init__(TIMEOUT, message)

    def __reduce__(self):
        return (Timeout, (self.message,))


class EndOfEpoch(Error):
    """The consumer's current epoch ended (code "EOF"). .epoch is the epoch
    that ended; .finished is True when it was the job's last one."""

    def __init__(self, epoch, finished):
        self.epoch = epoch
        self.finished = finished
        super().__init__(EOF, "end of epoch %d%s" % (epoch, " (job finished)" if finished else ""))

    def __reduce__(self):
        return (EndOfEpoch, (self.epoch, self.finished))


class PartialEpoch(Error):
    """An epoch ended without the records of tasks of it that failed (their
    reader, command or plugin kept failing, or their producers kept dying;
    code "PARTIAL"). The epoch is over all the same: the consumer goes on
    with the next one. .epoch is the epoch, .failed_tasks how many tasks
    failed, .failed which ("epoch:shard (error); ..."), .finished True when
    it was the job's last epoch. Consumer(accept_partial=True) takes such
    an end like any other instead."""

    def __init__(self, epoch, finished, failed_tasks, failed):
        self.epoch = epoch
        self.finished = finished
        self.failed_tasks = failed_tasks
        self.failed = failed
        super().__init__(PARTIAL, "epoch %d ended without the records of %d failed task%s: %s"
                         % (epoch, failed_tasks, "" if failed_tasks == 1 else "s", failed))

    def __reduce__(self):
        return (PartialEpoch, (self.epoch, self.finished, self.failed_tasks, self.failed))


def _error_class(code):
    return {TIMEOUT: Timeout}.get(code)


# ---- C types ---------------------------------------------------------------

MAX_DIMS = 8


class BatchId(ctypes.Structure):
    _fields_ = [("epoch", ctypes.c_uint32), ("task", ctypes.c_uint64), ("seq", ctypes.c_uint32)]


class Record(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("len", ctypes.c_size_t)]


class Tensor(ctypes.Structure):
    _fields_ = [("name", ctypes.c_char_p), ("dtype", ctypes.c_int), ("ndim", ctypes.c_int),
                ("shape", ctypes.c_uint64 * MAX_DIMS), ("data", ctypes.c_void_p),
                ("nbytes", ctypes.c_size_t)]


class ConsumerOpts(ctypes.Structure):
    _fields_ = [("redis_url", ctypes.c_char_p), ("queue", ctypes.c_char_p),
                ("max_batch_bytes", ctypes.c_size_t), ("prefetch", ctypes.c_int),
                ("connect_timeout_ms", ctypes.c_int), ("reconnect_timeout_ms", ctypes.c_int),
                ("consumer_id", ctypes.c_char_p), ("world", ctypes.c_int), ("rank", ctypes.c_int),
                ("ack_mode", ctypes.c_int), ("accept_partial", ctypes.c_int)]


class EpochReport(ctypes.Structure):
    _fields_ = [("epoch", ctypes.c_uint32), ("failed_tasks", ctypes.c_uint32),
                ("failed", ctypes.c_char * 512)]


ACK_EXPLICIT, ACK_NONE = 0, 1

CONSUMER_STATS = ("batches", "records", "bytes", "redelivered", "duplicates", "padding",
                  "invalid", "reconnects", "blocked_us", "epochs_ended")


class ConsumerStats(ctypes.Structure):
    _fields_ = [(n, ctypes.c_uint64) for n in CONSUMER_STATS]


class ProducerOpts(ctypes.Structure):
    _fields_ = [("redis_url", ctypes.c_char_p), ("queue", ctypes.c_char_p),
                ("producer_id", ctypes.c_char_p), ("max_inflight", ctypes.c_int),
                ("connect_timeout_ms", ctypes.c_int), ("reconnect_timeout_ms", ctypes.c_int),
                ("stop", ctypes.POINTER(ctypes.c_int)), ("log", ctypes.c_void_p),
                ("log_arg", ctypes.c_void_p)]


PRODUCER_STATS = ("batches", "records", "bytes", "duplicates", "full_waits", "blocked_us",
                  "reconnects", "tasks_done", "tasks_failed")


class ProducerStats(ctypes.Structure):
    _fields_ = [(n, ctypes.c_uint64) for n in PRODUCER_STATS]


# sluice_dtype, by enum value: (wire name, numpy type string). numpy has no
# bfloat16: those tensors are shown as their raw 16-bit patterns (uint16).
DTYPES = (None, ("bool", "|b1"), ("uint8", "|u1"), ("int8", "|i1"), ("uint16", "<u2"),
          ("int16", "<i2"), ("uint32", "<u4"), ("int32", "<i4"), ("uint64", "<u8"),
          ("int64", "<i8"), ("float16", "<f2"), ("bfloat16", "<u2"), ("float32", "<f4"),
          ("float64", "<f8"))
DTYPE_BY_NAME = {d[0]: i for i, d in enumerate(DTYPES) if d}


# ---- loading ---------------------------------------------------------------

def _candidates():
    env = os.environ.get("SLUICE_LIB")
    if env:
        return [env]   # an explicit choice is not second-guessed
    here = os.path.dirname(os.path.abspath(__file__))
    out = [os.path.join(here, os.pardir, os.pardir, "build", "libsluice.so")]
    found = ctypes.util.find_library("sluice")
    if found:
        out.append(found)
    out.append("libsluice.so.0")
    return out


def _load():
    tried = []
    for path in _candidates():
        if os.sep in path and not os.path.exists(path):
            tried.append("%s (missing)" % path)
            continue
        try:
            return ctypes.CDLL(path)
        except OSError as e:
            tried.append("%s (%s)" % (path, e))
    raise ImportError("sluice: cannot load libsluice.so; tried: %s. Build it with `make` "
                      "or set SLUICE_LIB to its path." % "; ".join(tried))


def _declare(lib):
    c_void_p, c_int, c_size_t, c_char_p = ctypes.c_void_p, ctypes.c_int, ctypes.c_size_t, ctypes.c_char_p
    P = ctypes.POINTER
    protos = {
        "sluice_strerror": (c_char_p, [c_int]),
        "sluice_version": (c_char_p, []),
        "sluice_dtype_size": (c_size_t, [c_int]),
        # consumer.h
        "sluice_consumer_open": (c_int, [P(c_void_p), P(ConsumerOpts), ctypes.c_char_p, c_size_t]),
        "sluice_consumer_next": (c_int, [c_void_p, P(c_void_p), c_int]),
        "sluice_batch_release": (None, [c_void_p]),
        "sluice_consumer_close": (None, [c_void_p]),
        "sluice_consumer_stats_get": (None, [c_void_p, P(ConsumerStats)]),
        "sluice_consumer_errstr": (c_char_p, [c_void_p]),
        "sluice_consumer_id": (c_char_p, [c_void_p]),
        "sluice_consumer_epoch_report": (None, [c_void_p, P(EpochReport)]),
        "sluice_consumer_wait_status": (ctypes.c_int64, [c_void_p, ctypes.c_char_p, c_size_t]),
        # batch.h
        "sluice_batch_get_id": (BatchId, [c_void_p]),
        "sluice_batch_producer": (c_char_p, [c_void_p]),
        "sluice_batch_created_us": (ctypes.c_uint64, [c_void_p]),
        "sluice_batch_frame_bytes": (c_size_t, [c_void_p]),
        "sluice_batch_num_records": (c_size_t, [c_void_p]),
        "sluice_batch_record": (Record, [c_void_p, c_size_t]),
        "sluice_batch_num_tensors": (c_size_t, [c_void_p]),
        "sluice_batch_tensor": (P(Tensor), [c_void_p, c_size_t]),
        "sluice_batch_deliveries": (ctypes.c_uint32, [c_void_p]),
        # producer.h
        "sluice_producer_open": (c_int, [P(c_void_p), P(ProducerOpts), ctypes.c_char_p, c_size_t]),
        "sluice_producer_set_task": (c_int, [c_void_p, ctypes.c_uint32, ctypes.c_uint64]),
        "sluice_producer_push_records": (c_int, [c_void_p, P(Record), c_size_t]),
        "sluice_producer_push_tensors": (c_int, [c_void_p, ctypes.c_uint64, P(Tensor), c_size_t]),
        "sluice_producer_flush": (c_int, [c_void_p]),
        "sluice_producer_close": (None, [c_void_p]),
        "sluice_producer_stats_get": (None, [c_void_p, P(ProducerStats)]),
        "sluice_producer_errstr": (c_char_p, [c_void_p]),
        "sluice_producer_id": (c_char_p, [c_void_p]),
    }
    # Newer calls: a library built before them still works without them
    # (callers test hasattr(lib, name)).
    optional = {
        "sluice_batch_ack": (None, [c_void_p]),
        "sluice_batch_is_padding": (c_int, [c_void_p]),
        "sluice_consumer_epoch": (ctypes.c_uint32, [c_void_p]),
        "sluice_consumer_finished": (c_int, [c_void_p]),
        "sluice_queue_ranks": (c_int, [c_char_p, c_char_p, c_int, P(c_int), c_char_p, c_size_t]),
    }
    for table, required in ((protos, True), (optional, False)):
        for name, (res, args) in table.items():
            try:
                fn = getattr(lib, name)
            except AttributeError:
                if required:
                    raise ImportError("sluice: %s lacks %s (library too old?)" % (lib._name, name))
                continue
            fn.restype = res
            fn.argtypes = args
    return lib


lib = _declare(_load())


def strerror(code):
    return lib.sluice_strerror(code).decode("utf-8", "replace")


def check(code, detail=b""):
    """Raises the Error for a non-OK sluice_err; detail is the handle's errstr."""
    if code == OK:
        return
    if isinstance(detail, bytes):
        detail = detail.decode("utf-8", "replace")
    cls = _error_class(code)
    if cls is not None:
        raise cls(detail or strerror(code))
    raise Error(code, detail or strerror(code))


def cstr(s, what):
    """s as NUL-terminated UTF-8 bytes for a const char * argument."""
    if s is None:
        return None
    if isinstance(s, str):
        s = s.encode("utf-8")
    if not isinstance(s, bytes):
        raise TypeError("%s must be a str, got %s" % (what, type(s).__name__))
    if b"\0" in s:
        raise ValueError("%s must not contain NUL" % what)
    return s
