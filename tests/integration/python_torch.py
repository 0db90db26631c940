#!/usr/bin/python3
"""sluice.torch over the real PyTorch (tests/integration/python_torch.sh
creates the queues: pt free, co2 coordinated over 2 ranks, co4 over 4,
pc2 over 2 in 2 partitions).

  python_torch.py URL notorch   `import torch` made to fail: import
                                sluice.torch works, BatchDataset() raises a
                                clear ImportError
  python_torch.py URL           everything else; prints "pushed=N ..."

What "everything else" checks:
  * the library tells a free queue from a coordinated one (and how many
    ranks), also partitioned; a missing queue, a server that is not
    there, a bad name are errors at once;
  * items: tensors as torch tensors (copied: writable; shared), records,
    transform, with_id;
  * BatchDataset pickles, and a DataLoader over a free queue with
    num_workers 0, 1 and 2 under fork, spawn and forkserver yields every
    pushed batch exactly once, with the right content;
  * rank and world from RANK/WORLD_SIZE on a coordinated queue of 2 ranks:
    two rank processes (one reading in the process, one in a DataLoader
    worker started by spawn) get equal counts, every batch exactly once;
  * num_workers=2 on that queue fails at once with a message naming
    num_workers, the rank and what to do, taking nothing;
  * a queue of world x num_workers = 4 ranks: 2 ranks with 2 workers each
    get equal counts, every batch exactly once;
  * wrong or missing rank/world: errors naming what is wrong;
  * state_dict()/load_state_dict(): the items after the checkpoint come
    again, first, and the "model" holds every batch once.
"""
import os
import pickle
import sys
import time
import warnings

import numpy as np

import sluice

# How long a reader waits for a batch before its iteration ends (every
# batch is pushed before the readers start, so only the end waits this).
IDLE_MS = 700


def fail(msg):
    sys.exit("python_torch: " + msg)


def no_torch():
    sys.modules["torch"] = None          # `import torch` now raises ImportError
    import sluice.torch
    try:
        sluice.torch.BatchDataset("redis://127.0.0.1:1", "q")
    except ImportError as e:
        if "PyTorch" not in str(e) or "import torch" not in str(e):
            fail("unclear ImportError: %s" % e)
        print("notorch: %s" % e)
        return
    fail("BatchDataset without PyTorch did not raise")


def ident(batch):
    """A transform (module level: it must pickle for spawn workers)."""
    return (batch.id, bytes(batch.records[0]) if batch.num_records else None)


def push(url, queue, task, n, epoch=0):
    """n tensor batches with ids (epoch, task, 0..n-1), each x = its seq."""
    with sluice.Producer(url, queue) as p:
        p.set_task(epoch, task)
        for s in range(n):
            p.push_tensors({"x": np.full((2, 3), s, dtype=np.int32)})
    return {(epoch, task, s) for s in range(n)}


def collect(loader):
    """The (epoch, task, seq) ids of a loader's items; checks each item's
    content against its id and that no id comes twice."""
    seen = []
    for bid, t in loader:
        if not (t["x"] == bid.seq).all() or tuple(t["x"].shape) != (2, 3):
            fail("batch %s holds %r" % (tuple(bid), t["x"]))
        seen.append(tuple(bid))
    if len(set(seen)) != len(seen):
        fail("a batch came twice: %s" % sorted(seen))
    return seen


def check_queue_ranks(url):
    """sluice_queue_ranks, which the dataset asks before a consumer opens."""
    from sluice.torch import _queue_ranks
    got = {q: _queue_ranks(url, q, None) for q in ("pt", "co2", "co4", "pc2")}
    if got != {"pt": 0, "co2": 2, "co4": 4, "pc2": 2}:
        fail("sluice_queue_ranks: %s" % got)
    for q, where, code in (("nosuch", url, "NOQUEUE"), ("pt", "redis://127.0.0.1:1", "IO"),
                           ("bad name", url, "INVALID")):
        t0 = time.monotonic()
        try:
            _queue_ranks(where, q, 2000)
            fail("sluice_queue_ranks(%s, %r) did not fail" % (where, q))
        except sluice.Error as e:
            if e.code != code or q not in e.message:
                fail("sluice_queue_ranks(%s, %r): %r, expected %s naming the queue"
                     % (where, q, e, code))
        if time.monotonic() - t0 > 2.5:
            fail("sluice_queue_ranks(%s, %r) took %.1f s to fail"
                 % (where, q, time.monotonic() - t0))


def check_items(url, BatchDataset, torch):
    with sluice.Producer(url, "pt") as p:
        for k in range(3):
            p.push_tensors({"x": np.full((4, 2), k, dtype=np.int16)})
        p.push_records([b"a", b"bc"])
    items = list(BatchDataset(url, "pt", idle_timeout_ms=300))
    if len(items) != 4:
        fail("%d items, expected 4" % len(items))
    for k, it in enumerate(items[:3]):
        x = it["x"]
        if not isinstance(x, torch.Tensor) or x.dtype != torch.int16 or x.shape != (4, 2) \
                or not (x == k).all():
            fail("item %d: %r" % (k, it))
        x += 1                            # copy=True: memory torch owns, writable
    if items[3] != [b"a", b"bc"]:
        fail("records item %r" % (items[3],))

    with sluice.Producer(url, "pt") as p:
        p.push_tensors({"x": np.arange(6, dtype=np.float32).reshape(3, 2)})
        p.push_records([b"xyz"])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")   # torch warns that shared memory is read-only
        shared = list(BatchDataset(url, "pt", idle_timeout_ms=300, copy=False, with_id=True))
    if len(shared) != 2:
        fail("%d items with copy=False, expected 2" % len(shared))
    (bid, t), (_, rec) = shared
    if not isinstance(bid, sluice.BatchId) or not (t["x"] == torch.arange(6.).reshape(3, 2)).all() \
            or rec != [b"xyz"]:
        fail("copy=False items %r" % (shared,))

    with sluice.Producer(url, "pt") as p:
        p.push_records([b"r1"])
    got = list(BatchDataset(url, "pt", idle_timeout_ms=300, transform=ident))
    if len(got) != 1 or got[0][1] != b"r1":
        fail("transform items %r" % (got,))
    return 7


def check_loaders(url, BatchDataset, DataLoader):
    """Every start method and num_workers 0, 1, 2 on the free queue pt."""
    ds = BatchDataset(url, "pt", idle_timeout_ms=IDLE_MS, with_id=True)
    back = pickle.loads(pickle.dumps(ds))
    if type(back) is not BatchDataset or (back.url, back.queue) != (url, "pt"):
        fail("BatchDataset did not survive pickling: %r" % back.__dict__)
    runs = [(None, 0)] + [(m, n) for m in ("fork", "spawn", "forkserver") for n in (1, 2)]
    pushed = 0
    report = []
    for task, (method, nw) in enumerate(runs, start=100):
        want = push(url, "pt", task, 12)
        pushed += len(want)
        t0 = time.monotonic()
        loader = DataLoader(ds, batch_size=None, num_workers=nw,
                            multiprocessing_context=method if nw else None)
        seen = collect(loader)
        if set(seen) != want:
            fail("%s, num_workers=%d: missing %s, unexpected %s"
                 % (method, nw, sorted(want - set(seen)), sorted(set(seen) - want)))
        report.append("%s/%d:%.1fs" % (method or "main", nw, time.monotonic() - t0))
    print("loaders: " + " ".join(report))
    return pushed


def rank_main(url, queue, rank, world, nw, method, conn):
    """A rank process (forked): RANK/WORLD_SIZE in its environment, the
    dataset without rank or world; sends back the ids it read."""
    os.environ["RANK"], os.environ["WORLD_SIZE"] = str(rank), str(world)
    from sluice.torch import BatchDataset
    from torch.utils.data import DataLoader
    try:
        ds = BatchDataset(url, queue, idle_timeout_ms=IDLE_MS, with_id=True)
        loader = DataLoader(ds, batch_size=None, num_workers=nw,
                            multiprocessing_context=method if nw else None)
        conn.send(("ok", collect(loader)))
    except Exception as e:      # noqa: BLE001 - reported to the parent
        conn.send(("error", "%s: %s" % (type(e).__name__, e)))


def run_ranks(url, queue, world, nw_method):
    """Runs `world` rank processes; nw_method[r] = (num_workers, method)."""
    import multiprocessing as mp
    ctx = mp.get_context("fork")
    procs = []
    for r in range(world):
        a, b = ctx.Pipe()
        nw, method = nw_method[r]
        p = ctx.Process(target=rank_main, args=(url, queue, r, world, nw, method, b))
        p.start()
        procs.append((p, a))
    out = []
    for r, (p, a) in enumerate(procs):
        if not a.poll(60):
            fail("rank %d sent nothing in 60 s" % r)
        status, what = a.recv()
        p.join(10)
        if status != "ok":
            fail("rank %d of %d on %s: %s" % (r, world, queue, what))
        out.append(what)
    return out


def expect_error(what, fn, *needles):
    t0 = time.monotonic()
    try:
        fn()
    except (ValueError, RuntimeError) as e:
        msg = str(e)
        for n in needles:
            if n not in msg:
                fail("%s: the error does not say %r: %s" % (what, n, msg))
        return time.monotonic() - t0, msg
    fail("%s: no error" % what)


def check_state_dict(url, BatchDataset):
    """state_dict()/load_state_dict() on the free queue pt: 3 items, a
    checkpoint, 2 more; loaded back, the next pass gives those 2 again,
    first, then the rest: every batch once in the 'model'."""
    want = push(url, "pt", 500, 6)
    expect_error("state_dict without checkpoints", BatchDataset(url, "pt").state_dict,
                 "checkpoints=K")
    ds = BatchDataset(url, "pt", idle_timeout_ms=IDLE_MS, with_id=True, checkpoints=2)
    expect_error("load_state_dict of another thing", lambda: ds.load_state_dict({"x": 1}),
                 "sluice_token")
    it = iter(ds)
    model = [tuple(next(it)[0]) for _ in range(3)]
    state = ds.state_dict()
    if not state["sluice_token"].startswith("sluice-ckpt/1/pt/") or state["queue"] != "pt":
        fail("state_dict: %r" % (state,))
    after = [tuple(next(it)[0]) for _ in range(2)]      # trained, then a crash: lost
    it.close()
    ds.load_state_dict(state)
    again = [tuple(bid) for bid, _ in ds]
    if again[:2] != after:
        fail("after load_state_dict the first items are %s, not %s (trained after the "
             "checkpoint)" % (again[:2], after))
    model += again
    if sorted(model) != sorted(want):
        fail("the model holds %s, want each of %s once" % (sorted(model), sorted(want)))
    return len(want)


def check_coordinated(url, BatchDataset, DataLoader):
    for k in ("RANK", "WORLD_SIZE", "LOCAL_RANK"):
        os.environ.pop(k, None)
    # Wrong or missing rank/world, in the process.
    expect_error("rank/world on a free queue",
                 lambda: iter(BatchDataset(url, "pt", rank=0, world=2)),
                 "free queue", "rank 0 of world 2")
    expect_error("world 3 on a queue of 2 ranks",
                 lambda: iter(BatchDataset(url, "co2", rank=0, world=3)),
                 "coordinated over 2 ranks", "rank 0 of world 3")
    expect_error("no rank on a coordinated queue", lambda: iter(BatchDataset(url, "co2")),
                 "coordinated over 2 ranks", "RANK and WORLD_SIZE")
    os.environ["RANK"], os.environ["WORLD_SIZE"] = "0", "3"
    expect_error("WORLD_SIZE 3 on a queue of 2 ranks", lambda: iter(BatchDataset(url, "co2")),
                 "coordinated over 2 ranks", "rank 0 of world 3 (RANK/WORLD_SIZE)")
    # A free queue ignores them.
    want = push(url, "pt", 200, 4)
    if set(collect(BatchDataset(url, "pt", idle_timeout_ms=300, with_id=True))) != want:
        fail("RANK/WORLD_SIZE on a free queue: not every batch came")
    pushed = len(want)

    # num_workers=2 on a queue of 2 ranks: fails at once, takes nothing.
    want = push(url, "co2", 300, 8)
    os.environ["RANK"], os.environ["WORLD_SIZE"] = "0", "2"
    loader = DataLoader(BatchDataset(url, "co2", idle_timeout_ms=IDLE_MS, with_id=True),
                        batch_size=None, num_workers=2, multiprocessing_context="fork")
    secs, msg = expect_error("num_workers=2 on a queue of 2 ranks", lambda: next(iter(loader)),
                             "num_workers=2", "rank 0 of world 2", "--consumers 4")
    if secs > 10:
        fail("num_workers=2 on a queue of 2 ranks took %.1f s to fail" % secs)
    for k in ("RANK", "WORLD_SIZE"):
        os.environ.pop(k)
    print("num_workers=2 on 2 ranks: failed after %.1f s: %s"
          % (secs, msg.strip().splitlines()[-1]))

    # RANK/WORLD_SIZE: rank 0 reads in its process, rank 1 in a spawned worker.
    r0, r1 = run_ranks(url, "co2", 2, [(0, None), (1, "spawn")])
    if len(r0) != len(r1) or set(r0) | set(r1) != want or set(r0) & set(r1):
        fail("2 ranks from RANK/WORLD_SIZE: rank 0 got %s, rank 1 got %s, pushed %s"
             % (sorted(r0), sorted(r1), sorted(want)))
    pushed += len(want)
    print("RANK/WORLD_SIZE over 2 ranks: %d + %d batches" % (len(r0), len(r1)))

    # world 2 x num_workers 2 = a queue of 4 ranks.
    want = push(url, "co4", 400, 16)
    r0, r1 = run_ranks(url, "co4", 2, [(2, "fork"), (2, "fork")])
    if len(r0) != len(r1) or set(r0) | set(r1) != want or set(r0) & set(r1):
        fail("2 ranks x 2 workers: rank 0 got %s, rank 1 got %s, pushed %s"
             % (sorted(r0), sorted(r1), sorted(want)))
    pushed += len(want)
    print("2 ranks x 2 workers over 4 ranks: %d + %d batches" % (len(r0), len(r1)))
    return pushed


def main():
    url = sys.argv[1]
    if sys.argv[2:] == ["notorch"]:
        return no_torch()
    if "torch" in sys.modules:
        fail("import sluice imported torch")
    import torch
    from torch.utils.data import DataLoader
    from sluice.torch import BatchDataset
    check_queue_ranks(url)
    pushed = check_items(url, BatchDataset, torch)
    pushed += check_loaders(url, BatchDataset, DataLoader)
    pushed += check_coordinated(url, BatchDataset, DataLoader)
    pushed += check_state_dict(url, BatchDataset)
    print("pushed=%d" % pushed)


if __name__ == "__main__":
    main()
