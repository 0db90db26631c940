#!/usr/bin/python3
"""sluice.torch without PyTorch: importing it works, using BatchDataset
raises a clear ImportError. Then, with a stand-in `torch` module (the real
one is not installed here), BatchDataset yields what it should: dicts of
tensors (copied or shared) or lists of records, and transform's results.
Prints "items=N ack=now|at-free".

usage: python_torch.py URL QUEUE
"""
import sys
import types

import numpy as np

import sluice
import sluice.torch


def fail(msg):
    sys.exit("python_torch: " + msg)


def fake_torch():
    torch = types.ModuleType("torch")
    utils = types.ModuleType("torch.utils")
    data = types.ModuleType("torch.utils.data")

    class IterableDataset:
        pass

    data.IterableDataset = IterableDataset
    utils.data = data
    torch.utils = utils
    torch.from_numpy = lambda a: ("tensor", a)
    sys.modules.update({"torch": torch, "torch.utils": utils, "torch.utils.data": data})


def main():
    url, queue = sys.argv[1:3]
    try:
        import torch  # noqa: F401
        have_torch = True
    except ImportError:
        have_torch = False
    if not have_torch:
        try:
            sluice.torch.BatchDataset
            fail("BatchDataset without PyTorch did not raise")
        except ImportError as e:
            if "PyTorch" not in str(e):
                fail("unclear ImportError: %s" % e)
        fake_torch()

    with sluice.Producer(url, queue) as p:
        for k in range(3):
            p.push_tensors({"x": np.full((4, 2), k, dtype=np.int16)})
        p.push_records([b"a", b"bc"])
    ds_type = sluice.torch.BatchDataset
    items = list(ds_type(url, queue, idle_timeout_ms=300))
    if len(items) != 4:
        fail("%d items, expected 4" % len(items))
    for k, it in enumerate(items[:3]):
        kind, arr = it["x"]
        if kind != "tensor" or arr.shape != (4, 2) or not (arr == k).all():
            fail("item %d: %r" % (k, it))
        if not arr.flags.writeable:
            fail("copy=True gave a read-only (shared) array")
    if items[3] != [b"a", b"bc"]:
        fail("records item %r" % (items[3],))

    with sluice.Producer(url, queue) as p:
        p.push_tensors({"x": np.arange(6, dtype=np.float32).reshape(3, 2)})
        p.push_records([b"xyz"])
    shared = list(ds_type(url, queue, idle_timeout_ms=300, copy=False,
                          transform=lambda b: (b.id, b.tensors["x"] if b.num_tensors
                                               else bytes(b.records[0]))))
    if len(shared) != 2:
        fail("%d items with transform, expected 2" % len(shared))
    (_, arr), (_, rec) = shared
    if arr.flags.writeable or not (arr == np.arange(6).reshape(3, 2)).all() or rec != b"xyz":
        fail("transform items %r" % (shared,))
    print("items=%d ack=%s" % (len(items) + len(shared), "now" if sluice.HAVE_ACK else "at-free"))


if __name__ == "__main__":
    main()
