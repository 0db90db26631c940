"""sluice for PyTorch: BatchDataset, an IterableDataset over a sluice queue.

    from sluice.torch import BatchDataset
    ds = BatchDataset("redis://127.0.0.1:6379", "train", epochs=1)
    loader = torch.utils.data.DataLoader(ds, batch_size=None)   # one item per batch
    for epoch in range(3):                   # each pass: one epoch of the job
        for tensors in loader:
            loss = model(tensors["image"]).loss(tensors["label"])

PyTorch: `import sluice` never imports it; `import sluice.torch` does, when
it is installed. Without PyTorch `import sluice.torch` still works, and
creating a BatchDataset raises ImportError saying why.

BatchDataset is a plain module-level class: it pickles, so it works with
DataLoader workers started by fork, spawn or forkserver (a `transform`
must then be picklable too: a module-level function, not a lambda).

Rank and world. On a coordinated queue (sluice-ctl create Q --consumers N
--coordinated) every rank must open its own consumer as rank r of N. When
rank and world are not given they come from torch.distributed (when its
process group is initialized: get_rank(), get_world_size()), else from the
environment variables RANK and WORLD_SIZE (which torchrun sets). They are
used only for a coordinated queue: on a free queue every process, and
every DataLoader worker, is simply a free consumer. Which kind the queue
is, the library tells (sluice_queue_ranks()) before the consumer opens.
rank and world given on a free queue, or a world that does not fit the
queue, are a ValueError naming both.

DataLoader workers. Each worker opens a consumer of its own (in the worker
process). On a free queue any num_workers works: the workers share the
batches, each batch reaches one of them once. On a coordinated queue a
rank has one consumer, so num_workers must be 0 or 1, unless the queue was
created with world x num_workers ranks: then worker w of rank r reads rank
r * num_workers + w of the queue, every worker gets the same number of
batches per epoch, and so does every rank. Any other num_workers fails at
once with a ValueError naming num_workers, the rank and what to do.
"""
import ctypes
import os

import numpy as _np

from . import Consumer, Timeout
from . import _lib

try:
    import torch as _torch
    from torch.utils.data import IterableDataset as _Base
    from torch.utils.data import get_worker_info as _worker_info
    _NO_TORCH = None
except ImportError as e:
    _torch = None
    _Base = object
    _NO_TORCH = str(e)

__all__ = ["BatchDataset"]

# Where rank and world came from, when they were passed (in messages).
_GIVEN = "passed to BatchDataset"


class BatchDataset(_Base):
    """Yields one item per batch of a sluice queue, until the job ends
    (or `epochs` epochs ended, or nothing came for idle_timeout_ms).

    BatchDataset(url, queue, rank=None, world=None, epochs=None,
                 transform=None, copy=True, idle_timeout_ms=None,
                 with_id=False, **consumer_options)

    An item is transform(batch) when transform is given (called before
    the batch is released: copy what you keep of .records), else the
    batch's tensors as a dict name -> torch.Tensor, or its records as a
    list of bytes. copy=True (default) copies tensors into memory torch
    owns (writable; the batch is acknowledged at once); copy=False shares
    the received memory (read-only; zero copy; the memory lives as long
    as the torch tensor, see the lifetime rule in python/README.md).
    with_id=True makes each item a pair (batch.id, item): the BatchId
    (epoch, task, seq) tells the epoch and which batch it was.

    Each iteration (each pass of a DataLoader) opens its consumers afresh
    and goes on where the queue is: with epochs=1 every pass is one epoch
    of the job, and a pass after the job's end yields nothing. With
    checkpoints, the consumer stays open in its process from one pass to
    the next (its checkpoints go with it).

    Checkpoints (num_workers=0: the consumer is in the process that trains):
    BatchDataset(..., checkpoints=K) keeps the last K; state_dict() takes a
    checkpoint and returns {"queue", "sluice_token"}, to save with the
    model's state; load_state_dict(saved) before iterating makes the next
    pass resume from it (the batches acknowledged after it come again
    first, none before). In DDP every rank calls state_dict() at the same
    step, and every rank loads the one rank 0 saved.

    rank/world: this process's rank of `world` on a coordinated queue;
    None: from torch.distributed or RANK/WORLD_SIZE (see the module's
    doc). consumer_options are those of sluice.Consumer (prefetch,
    consumer_id, ...); with num_workers > 1 a consumer_id gets the
    suffix ".w<worker>", one id per worker."""

    def __init__(self, url, queue, rank=None, world=None, epochs=None, transform=None,
                 copy=True, idle_timeout_ms=None, with_id=False, **consumer_opts):
        if _NO_TORCH is not None:
            raise ImportError("sluice.torch.BatchDataset needs PyTorch, which cannot be imported "
                              "(import torch: %s); on Debian: apt-get install python3-torch"
                              % _NO_TORCH)
        super().__init__()
        if (rank is None) != (world is None):
            raise ValueError("rank and world go together (rank %r of world %r)" % (rank, world))
        if world is not None and not (isinstance(rank, int) and isinstance(world, int)
                                      and 0 <= rank < world):
            raise ValueError("rank must be in 0..world-1, got rank %r of world %r" % (rank, world))
        self.url, self.queue = url, queue
        self.rank, self.world = rank, world
        self.epochs, self.transform, self.copy = epochs, transform, copy
        self.idle_timeout_ms = idle_timeout_ms
        self.with_id = with_id
        self.consumer_opts = consumer_opts
        # (rank, world, where from) of the process group of the process
        # that pickled this dataset (see __getstate__).
        self._group = None
        self._resume = None     # a token load_state_dict() gave, for the next open
        self._live = None       # (pid, Consumer) open in that process
        self._finished = False  # this process's consumer saw the job's end

    def __getstate__(self):
        # A DataLoader worker started by spawn or forkserver receives the
        # dataset pickled, and a process group does not cross into it (the
        # environment does): take the group's rank and world along.
        state = dict(self.__dict__)
        if self.world is None and state.get("_group") is None:
            state["_group"] = _from_process_group()
        state["_live"] = None   # a consumer belongs to its process
        return state

    def _consumer(self, rank, world, opts):
        """This process's consumer: the one open already, else a new one
        (resuming the token load_state_dict() gave, once)."""
        live = self.__dict__.get("_live")
        if live is not None and live[0] == os.getpid() and not live[1].closed:
            return live[1]
        resume = self.__dict__.get("_resume")
        c = Consumer(self.url, self.queue, rank=rank, world=world,
                     timeout_ms=self.idle_timeout_ms, resume=resume, **opts)
        self._resume = None
        self._live = (os.getpid(), c)
        return c

    @property
    def finished(self):
        """True once an iteration in this process reached the end of the job's
        last epoch: a pass that yields nothing because the job is over, not
        because it resumed at the end of an epoch. Only the process that
        reads knows: with DataLoader workers it stays False here."""
        live = self.__dict__.get("_live")
        if live is not None and live[0] == os.getpid() and not live[1].closed:
            return live[1].finished
        return self.__dict__.get("_finished", False)

    def state_dict(self):
        """Takes a checkpoint of this process's place in the queue (every item
        yielded so far counts as trained) and returns {"queue": ...,
        "sluice_token": ...}; before the first pass it opens the consumer
        (a checkpoint at step 0). Needs BatchDataset(checkpoints=K) and the
        dataset read in this process (DataLoader num_workers=0)."""
        if _worker_info() is not None:
            raise RuntimeError("BatchDataset.state_dict() inside a DataLoader worker: take "
                               "checkpoints in the training process, with num_workers=0")
        if not self.consumer_opts.get("checkpoints"):
            raise ValueError("BatchDataset.state_dict(): the dataset was made without "
                             "checkpoints: pass checkpoints=K (K checkpoints kept, e.g. 2)")
        live = self.__dict__.get("_live")
        if live is None or live[0] != os.getpid() or live[1].closed:
            rank, world = self._placement(0, 0)
            c = self._consumer(rank, world, self.consumer_opts)
        else:
            c = live[1]
        return {"queue": self.queue, "sluice_token": c.checkpoint()}

    def load_state_dict(self, state):
        """Makes the next pass resume from the checkpoint state_dict()
        returned (a consumer open in this process is closed first: what it
        took is handed back)."""
        if not isinstance(state, dict) or "sluice_token" not in state:
            raise ValueError("BatchDataset.load_state_dict(): not a state of "
                             "BatchDataset.state_dict() (no 'sluice_token'): %r" % (state,))
        if state.get("queue", self.queue) != self.queue:
            raise ValueError("BatchDataset.load_state_dict(): the state is of queue %r, this "
                             "dataset reads %r" % (state.get("queue"), self.queue))
        live = self.__dict__.get("_live")
        if live is not None and live[0] == os.getpid():
            live[1].close()
        self._live = None
        self._resume = state["sluice_token"]

    def __iter__(self):
        info = _worker_info()
        worker, workers = (info.id, info.num_workers) if info is not None else (0, 0)
        rank, world = self._placement(worker, workers)
        opts = dict(self.consumer_opts)
        if workers > 1 and opts.get("consumer_id"):
            opts["consumer_id"] = "%s.w%d" % (opts["consumer_id"], worker)
        return _iterate(self, rank, world, opts)

    def _placement(self, worker, workers):
        """(rank, world) that DataLoader worker `worker` of `workers` (0 of
        0: the process itself) opens the queue with; (None, None): a free
        consumer. Raises ValueError when they do not fit the queue."""
        readers = max(workers, 1)
        ranks = _queue_ranks(self.url, self.queue, self.consumer_opts.get("connect_timeout_ms"))
        if self.world is not None:
            rank, world, where = self.rank, self.world, _GIVEN
        elif ranks == 0:
            return None, None   # a free queue: whatever the environment says
        else:
            got = _from_process_group() or self._group or _from_env()
            rank, world, where = got if got else (None, None, None)
        if ranks is None:
            # A libsluice without sluice_queue_ranks: only what was given
            # (open() refuses what does not fit the queue).
            if where is None:
                return None, None
            if where == _GIVEN and readers == 1:
                return rank, world
            raise ValueError("queue '%s': this libsluice (%s) cannot tell whether the queue is "
                             "coordinated (no sluice_queue_ranks), so rank %s of world %s (%s)%s "
                             "cannot be applied; use a newer libsluice, or pass rank and world "
                             "with num_workers 0 or 1"
                             % (self.queue, _lib.lib._name, rank, world, where,
                                " with num_workers=%d" % workers if workers > 1 else ""))
        if ranks == 0:
            if where == _GIVEN:
                raise ValueError("queue '%s' is a free queue (not coordinated), but rank %d of "
                                 "world %d was given: leave rank and world out, or create the "
                                 "queue with --consumers %d --coordinated"
                                 % (self.queue, rank, world, world))
            return None, None
        if world is None:
            raise ValueError("queue '%s' is coordinated over %d ranks, and this process's rank "
                             "is unknown: pass rank and world, initialize torch.distributed "
                             "first, or set RANK and WORLD_SIZE (torchrun does)"
                             % (self.queue, ranks))
        if ranks == world * readers:
            return rank * readers + worker, ranks
        if ranks == world:
            raise ValueError("DataLoader num_workers=%d on rank %d of world %d: queue '%s' is "
                             "coordinated over %d ranks, one consumer per rank, and every "
                             "worker opens one. Use num_workers 0 or 1, or create the queue "
                             "with --consumers %d (world x num_workers): worker w of rank r "
                             "then reads rank r*%d+w"
                             % (workers, rank, world, self.queue, ranks, world * readers,
                                readers))
        hint = ""
        if ranks % world == 0 and ranks > world:
            hint = ("; a queue of world x num_workers ranks wants DataLoader num_workers=%d"
                    % (ranks // world))
        raise ValueError("queue '%s' is coordinated over %d ranks, but this is rank %d of world "
                         "%d (%s)%s, which takes a queue of %d ranks%s"
                         % (self.queue, ranks, rank, world, where,
                            " with DataLoader num_workers=%d" % workers if workers else "",
                            world * readers, hint))


def _from_process_group():
    """(rank, world, "torch.distributed") when this process's default
    process group is initialized, else None."""
    if _torch is None:
        return None
    import torch.distributed as dist
    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size(), "torch.distributed"
    return None


def _from_env():
    """(rank, world, "RANK/WORLD_SIZE") from the environment, None when
    neither is set. Raises ValueError when they are not a rank of a world."""
    r, w = os.environ.get("RANK"), os.environ.get("WORLD_SIZE")
    if r is None and w is None:
        return None
    try:
        rank, world = int(r), int(w)
    except (TypeError, ValueError):
        raise ValueError("RANK=%r and WORLD_SIZE=%r: both must be set, to integers (torchrun "
                         "sets both), or pass rank and world" % (r, w)) from None
    if not 0 <= rank < world:
        raise ValueError("RANK=%d is not a rank of WORLD_SIZE=%d (0..%d)"
                         % (rank, world, world - 1))
    return rank, world, "RANK/WORLD_SIZE"


def _queue_ranks(url, queue, connect_timeout_ms):
    """The queue's ranks (0: a free queue), or None when the library cannot
    tell. Raises sluice.Error when the queue cannot be read (NOQUEUE...)."""
    fn = getattr(_lib.lib, "sluice_queue_ranks", None)
    if fn is None:
        return None
    n = ctypes.c_int(0)
    err = ctypes.create_string_buffer(512)
    rc = fn(_lib.cstr(url, "url"), _lib.cstr(queue, "queue"), connect_timeout_ms or 0,
            ctypes.byref(n), err, len(err))
    _lib.check(rc, err.value)
    return n.value


def _convert(batch, copy):
    if batch.num_tensors:
        if copy:
            return {k: _torch.from_numpy(_np.array(v)) for k, v in batch.tensors.items()}
        # Shared memory: the torch tensor holds the numpy array, which holds
        # the received frame (the lifetime rule), so it stays valid after the
        # batch is released. It is read-only memory: do not write to it.
        return {k: _torch.from_numpy(v) for k, v in batch.tensors.items()}
    return [bytes(r) for r in batch.records]


def _iterate(ds, rank, world, opts):
    """The batches of ds as items (the generator behind BatchDataset). A
    consumer with checkpoints stays open for the next pass; any other is
    closed at the end of this one."""
    c = ds._consumer(rank, world, opts)
    try:
        done = 0
        while not c.finished and (ds.epochs is None or done < ds.epochs):
            try:
                for batch in c:
                    with batch:
                        item = ds.transform(batch) if ds.transform else _convert(batch, ds.copy)
                        if ds.with_id:
                            item = (batch.id, item)
                    yield item
            except Timeout:
                return
            done += 1
    finally:
        # (A consumer closed meanwhile: at exit, or by load_state_dict().)
        ds._finished = not c.closed and c.finished
        if not opts.get("checkpoints"):
            c.close()
            ds._live = None
