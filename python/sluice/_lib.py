"""Loading libsluice.so and declaring its C API for ctypes.

Everything here mirrors common/include/sluice/{common,batch,consumer,producer}.h;
when a header changes, this file changes with it.

Where the library comes from, first match wins:
  1. $SLUICE_LIB (a path; nothing else is tried when it is set),
  2. build/libsluice.so of the source tree this package sits in
     (python/sluice/../../build), i.e. what `make` built,
  3. LIBDIR/libsluice.so.MAJOR, where `make install` put the library
     (LIBDIR is recorded in _installed.py),
  4. libsluice.so.MAJOR through the dynamic loader (ld.so.cache after
     ldconfig, LD_LIBRARY_PATH): the library installed on the system.

The library that loads is then checked against this package (_check_abi):
its version must be the package's, and every struct mirrored here must
have the size ctypes gives it (sluice_struct_size()); anything else is an
ImportError that says what differs.
"""
import ctypes
import os
import re

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
                ("ack_mode", ctypes.c_int), ("accept_partial", ctypes.c_int),
                ("checkpoint_keep", ctypes.c_int), ("resume", ctypes.c_char_p),
                ("prefetch_bytes", ctypes.c_size_t)]


class EpochReport(ctypes.Structure):
    _fields_ = [("epoch", ctypes.c_uint32), ("failed_tasks", ctypes.c_uint32),
                ("failed", ctypes.c_char * 512)]


ACK_EXPLICIT, ACK_NONE = 0, 1

CONSUMER_STATS = ("batches", "records", "bytes", "redelivered", "duplicates", "padding",
                  "invalid", "reconnects", "blocked_us", "epochs_ended")


class ConsumerStats(ctypes.Structure):
    _fields_ = [(n, ctypes.c_uint64) for n in CONSUMER_STATS]


CHECKPOINT_TOKEN_MAX = 320   # SLUICE_CHECKPOINT_TOKEN_MAX


class ProducerOpts(ctypes.Structure):
    _fields_ = [("redis_url", ctypes.c_char_p), ("queue", ctypes.c_char_p),
                ("producer_id", ctypes.c_char_p), ("max_inflight", ctypes.c_int),
                ("connect_timeout_ms", ctypes.c_int), ("reconnect_timeout_ms", ctypes.c_int),
                ("stop", ctypes.POINTER(ctypes.c_int)), ("log", ctypes.c_void_p),
                ("log_arg", ctypes.c_void_p)]


PRODUCER_STATS = ("batches", "records", "bytes", "duplicates", "full_waits", "blocked_us",
                  "reconnects", "tasks_done", "tasks_failed", "raw_bytes")


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

# The C structs mirrored above. _check_abi compares ctypes.sizeof of each
# with the library's sluice_struct_size(): a field added on both sides keeps
# them equal, a field added on one side only does not.
STRUCTS = {
    "sluice_batch_id": BatchId,
    "sluice_record": Record,
    "sluice_tensor": Tensor,
    "sluice_consumer_opts": ConsumerOpts,
    "sluice_consumer_stats": ConsumerStats,
    "sluice_epoch_report": EpochReport,
    "sluice_producer_opts": ProducerOpts,
    "sluice_producer_stats": ProducerStats,
}

PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__))
# The source tree this package sits in (python/sluice/../..), or None when
# it is installed.
_tree = os.path.dirname(os.path.dirname(PACKAGE_DIR))
SOURCE_TREE = _tree if os.path.isfile(os.path.join(_tree, "common", "include", "sluice",
                                                     "common.h")) else None

FIX = ("Set SLUICE_LIB to the path of a libsluice.so of sluice %s, or install the library "
       "with `make install` from the sluice source tree (run as root, it also runs ldconfig; "
       "otherwise run ldconfig or add the library's folder to LD_LIBRARY_PATH).")


def _package_version():
    """(version, libdir) of this package: what pip or `make install` recorded
    in _installed.py, else SLUICE_VERSION of the source tree it sits in."""
    try:
        from . import _installed
        return _installed.VERSION, getattr(_installed, "LIBDIR", None)
    except ImportError:
        pass
    if SOURCE_TREE:
        header = os.path.join(SOURCE_TREE, "common", "include", "sluice", "common.h")
        with open(header, encoding="utf-8") as f:
            m = re.search(r'^#define SLUICE_VERSION "([^"]+)"', f.read(), re.M)
        if m:
            return m.group(1), None
        raise ImportError("sluice: %s defines no SLUICE_VERSION" % header)
    raise ImportError("sluice: the package in %s does not know its version: it has no "
                      "_installed.py and is not in a sluice source tree. Install it from the "
                      "source tree: `pip install ./python` or `make install`." % PACKAGE_DIR)


VERSION, _LIBDIR = _package_version()
_MAJOR = VERSION.split(".")[0]


def _candidates():
    env = os.environ.get("SLUICE_LIB")
    if env:
        return [env]   # an explicit choice is not second-guessed
    out = []
    if SOURCE_TREE:
        out.append(os.path.join(SOURCE_TREE, "build", "libsluice.so"))
    if _LIBDIR:
        out.append(os.path.join(_LIBDIR, "libsluice.so." + _MAJOR))
    out.append("libsluice.so." + _MAJOR)   # a bare name: the dynamic loader searches
    return out


def _load():
    """(the loaded CDLL, where it was found)."""
    tried = []
    if not os.environ.get("SLUICE_LIB"):
        tried.append("$SLUICE_LIB (not set)")
    for path in _candidates():
        if os.sep in path and not os.path.exists(path):
            tried.append("%s (missing)" % path)
            continue
        try:
            lib = ctypes.CDLL(path)
        except OSError as e:
            tried.append("%s (%s)" % (path, e))
            continue
        return lib, _file_of(lib, path)
    raise ImportError("sluice: cannot load libsluice; tried: %s. %s"
                      % ("; ".join(tried), FIX % VERSION))


class _DlInfo(ctypes.Structure):
    _fields_ = [("dli_fname", ctypes.c_char_p), ("dli_fbase", ctypes.c_void_p),
                ("dli_sname", ctypes.c_char_p), ("dli_saddr", ctypes.c_void_p)]


def _file_of(lib, name):
    """The file the dynamic loader mapped for lib (dladdr), so that a library
    loaded by its soname is named by its path; name when that fails."""
    try:
        dladdr = ctypes.CDLL(None).dladdr
        dladdr.argtypes = [ctypes.c_void_p, ctypes.POINTER(_DlInfo)]
        dladdr.restype = ctypes.c_int
        info = _DlInfo()
        if dladdr(ctypes.cast(lib.sluice_version, ctypes.c_void_p), ctypes.byref(info)) \
                and info.dli_fname:
            return os.fsdecode(info.dli_fname)
    except (AttributeError, OSError):
        pass
    return name


def _version_number(version):
    """SLUICE_VERSION_NUMBER of "MAJOR.MINOR.PATCH", None for another form."""
    m = re.match(r"(\d+)\.(\d+)\.(\d+)$", version)
    if not m:
        return None
    major, minor, patch = (int(x) for x in m.groups())
    return (major << 24) | (minor << 16) | (patch << 8)


def _check_abi(lib, path):
    """Raises ImportError unless the library at path is the version of this
    package and every struct in STRUCTS has the size ctypes gives it."""
    wrong = []
    try:
        lib.sluice_version.restype = ctypes.c_char_p
        lib.sluice_version.argtypes = []
        found = (lib.sluice_version() or b"?").decode("utf-8", "replace")
        lib.sluice_version_number.restype = ctypes.c_uint32
        lib.sluice_version_number.argtypes = []
        number = lib.sluice_version_number()
    except AttributeError as e:
        found, number = None, None
        wrong.append("no sluice_version/sluice_version_number (%s): not a libsluice" % e)
    if found is not None:
        expected = _version_number(VERSION)
        if found != VERSION:
            wrong.append("version %s (expected %s)" % (found, VERSION))
        elif expected is not None and number != expected:
            wrong.append("version number 0x%08x (expected 0x%08x)" % (number, expected))
    try:
        size = lib.sluice_struct_size
        size.restype = ctypes.c_size_t
        size.argtypes = [ctypes.c_char_p]
    except AttributeError:
        size = None
        wrong.append("no sluice_struct_size(): built from older sources, its structs "
                     "cannot be checked")
    if size is not None:
        for name, cls in STRUCTS.items():
            got, want = size(name.encode()), ctypes.sizeof(cls)
            if got != want:
                wrong.append("sizeof(%s) %s (expected %d)"
                             % (name, got if got else "unknown to it", want))
    if wrong:
        raise ImportError("sluice: %s does not match this Python package (sluice %s, %s):\n  %s\n"
                          "Rebuild/reinstall the library and the package from the same sluice "
                          "version (`make`, `make install`, `pip install ./python`), or point "
                          "SLUICE_LIB at a libsluice.so of sluice %s."
                          % (path, VERSION, PACKAGE_DIR, "\n  ".join(wrong), VERSION))


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
        "sluice_consumer_checkpoint": (c_int, [c_void_p, ctypes.c_char_p, c_size_t, c_int]),
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
                    raise ImportError("sluice: %s lacks %s (library too old?)"
                                      % (LIBRARY_PATH, name))
                continue
            fn.restype = res
            fn.argtypes = args
    return lib


lib, LIBRARY_PATH = _load()
_check_abi(lib, LIBRARY_PATH)
_declare(lib)


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
