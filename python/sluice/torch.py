"""sluice for PyTorch: BatchDataset, an IterableDataset over a sluice queue.

PyTorch is imported when BatchDataset is first used, not when this module
is: `import sluice.torch` works without it, and using BatchDataset without
PyTorch raises ImportError.

    from sluice.torch import BatchDataset
    ds = BatchDataset("redis://127.0.0.1:6379", "train", epochs=3)
    for tensors in torch.utils.data.DataLoader(ds, batch_size=None):
        loss = model(tensors["image"]).loss(tensors["label"])

Each item is one sluice batch (so DataLoader(batch_size=None)). Use it with
num_workers 0 or 1 on a coordinated queue: every worker opens a consumer of
its own, and a rank must have exactly one.
"""
import numpy as _np

from . import Consumer, Timeout

__all__ = ["BatchDataset"]

_cls = None


def _convert(batch, copy):
    import torch
    if batch.num_tensors:
        if copy:
            return {k: torch.from_numpy(_np.array(v)) for k, v in batch.tensors.items()}
        # Shared memory: the torch tensor holds the numpy array, which holds
        # the received frame (the lifetime rule), so it stays valid after the
        # batch is released. It is read-only memory: do not write to it.
        return {k: torch.from_numpy(v) for k, v in batch.tensors.items()}
    return [bytes(r) for r in batch.records]


def _make_class():
    try:
        import torch.utils.data
    except ImportError as e:
        raise ImportError("sluice.torch.BatchDataset needs PyTorch, which is not installed "
                          "(import torch failed: %s)" % e) from e

    class BatchDataset(torch.utils.data.IterableDataset):
        """Yields one item per batch of a sluice queue, until the job ends
        (or `epochs` epochs ended, or nothing came for idle_timeout_ms).

        An item is transform(batch) when transform is given (called before
        the batch is released: copy what you keep of .records), else the
        batch's tensors as a dict name -> torch.Tensor, or its records as a
        list of bytes. copy=True (default) copies tensors into memory torch
        owns (writable; the batch is acknowledged at once); copy=False shares
        the received memory (read-only; zero copy; the memory lives as long
        as the torch tensor, see the lifetime rule in python/README.md).

        Each worker of a DataLoader opens its own consumer."""

        def __init__(self, url, queue, rank=None, world=None, epochs=None, transform=None,
                     copy=True, idle_timeout_ms=None, **consumer_opts):
            super().__init__()
            self.url, self.queue = url, queue
            self.rank, self.world = rank, world
            self.epochs, self.transform, self.copy = epochs, transform, copy
            self.idle_timeout_ms = idle_timeout_ms
            self.consumer_opts = consumer_opts

        def __iter__(self):
            return _iterate(self)

    return BatchDataset


def _iterate(ds):
    """The batches of ds as items (the generator behind BatchDataset)."""
    with Consumer(ds.url, ds.queue, rank=ds.rank, world=ds.world,
                  timeout_ms=ds.idle_timeout_ms, **ds.consumer_opts) as c:
        done = 0
        while not c.finished and (ds.epochs is None or done < ds.epochs):
            try:
                for batch in c:
                    with batch:
                        item = ds.transform(batch) if ds.transform else _convert(batch, ds.copy)
                    yield item
            except Timeout:
                return
            done += 1


def __getattr__(name):
    global _cls
    if name == "BatchDataset":
        if _cls is None:
            _cls = _make_class()
        return _cls
    raise AttributeError("module %r has no attribute %r" % (__name__, name))
