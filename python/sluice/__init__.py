"""sluice: feed training from Redis. Python binding over libsluice.so (ctypes).

    import sluice
    with sluice.Consumer("redis://127.0.0.1:6379", "train") as c:
        for epoch, batches in c.epochs():
            for batch in batches:                  # one epoch
                step(batch.tensors["image"], batch.tensors["label"])

Consumer, Batch, Producer and the errors are documented on the classes;
python/README.md has the lifetime rule of a batch's memory. sluice.torch
holds a torch IterableDataset (`import sluice` never imports PyTorch).
"""
import atexit

from ._lib import Error, Timeout, EndOfEpoch, PartialEpoch, lib as _clib
from ._lib import VERSION as __version__, LIBRARY_PATH as _library_path
from ._consumer import Consumer, Batch, BatchId, HAVE_ACK
from ._consumer import close_all as _close_consumers
from ._producer import Producer
from ._producer import close_all as _close_producers

__all__ = ["Consumer", "Batch", "BatchId", "Producer", "Error", "Timeout", "EndOfEpoch",
           "PartialEpoch", "HAVE_ACK", "version", "library_path"]


def version():
    """SLUICE_VERSION of the loaded libsluice (the import checked that it is
    this package's, __version__)."""
    return _clib.sluice_version().decode()


def library_path():
    """The file libsluice was loaded from."""
    return _library_path


# At exit, hand back what open consumers hold at once (instead of after
# their lease expires) and flush open producers.
atexit.register(_close_producers)
atexit.register(_close_consumers)
