#!/usr/bin/python3
"""Data-parallel training with PyTorch DDP (gloo, CPU) on Fashion-MNIST
batches read from a coordinated sluice queue through
sluice.torch.BatchDataset.

Each rank is one process; its BatchDataset learns its rank and world from
torch.distributed, and the coordinated queue gives every rank the same
number of batches per epoch, so DDP's gradient allreduce never waits on a
rank that ran out. A DataLoader pass is one epoch of the job (epochs=1);
the dataset says when the job is over (BatchDataset.finished; with
DataLoader workers, a pass that yields nothing on every rank). Rank 0
prints each epoch's mean loss and, at the end, the accuracy on the 10,000
test images, read straight from the IDX file.

Started by torchrun (Debian: python3 -m torch.distributed.run; Debian 12's
needs --redirects and --tee other than 0 on Python 3.11):

    PYTHONPATH=python /usr/bin/python3 -m torch.distributed.run --nproc_per_node 2 \\
        --redirects 2 --tee 2 \\
        examples/torch/ddp_train.py --redis redis://127.0.0.1:6379 --queue fashion

or starting its own 2 processes (torch.multiprocessing.spawn):

    PYTHONPATH=python examples/torch/ddp_train.py --nproc 2 --redis ... --queue fashion

The queue must exist and be fed: examples/torch/run.sh creates it
(coordinated over 2 ranks, or 2 x --workers), submits the job and starts
the producers. Options: --help.
"""
import argparse
import gzip
import os
import signal
import socket
import struct
import sys
import time

import numpy as np
import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader

try:
    from sluice.torch import BatchDataset
except ImportError as e:
    sys.exit("ddp_train: cannot import sluice (%s): set PYTHONPATH to the python/ folder of "
             "the sluice tree" % e)

DATA = "/usr/share/datasets/fashion-mnist"


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--redis", required=True, help="Redis URL of the queue")
    p.add_argument("--queue", default="fashion", help="the queue (default: fashion)")
    p.add_argument("--nproc", type=int, default=0,
                   help="start this many processes (ranks) here; without it, torchrun's "
                        "RANK/WORLD_SIZE/MASTER_ADDR/MASTER_PORT are used")
    p.add_argument("--workers", type=int, default=0,
                   help="DataLoader workers per rank (default 0: read in the rank's process). "
                        "More than 1 needs a queue of world x workers ranks")
    p.add_argument("--start-method", default="spawn", choices=("spawn", "fork", "forkserver"),
                   help="how DataLoader workers start (default spawn)")
    p.add_argument("--hidden", type=int, default=128, help="hidden units (default 128)")
    p.add_argument("--lr", type=float, default=2e-3,
                   help="Adam learning rate (default 0.002), halved after every epoch")
    p.add_argument("--seed", type=int, default=1, help="weight initialization seed")
    p.add_argument("--threads", type=int, default=1, help="torch threads per rank (default 1)")
    p.add_argument("--data", default=DATA, help="folder of t10k-images-idx3-ubyte.gz and "
                                                "t10k-labels-idx1-ubyte.gz (default %s)" % DATA)
    p.add_argument("--ids-out", metavar="PREFIX",
                   help="each rank writes the batch ids it trained on, one 'epoch task seq' "
                        "line per batch, to PREFIX.<rank>")
    p.add_argument("--checkpoint", metavar="FILE",
                   help="resume from FILE at start when it exists (the model, the optimizer "
                        "and the place of every rank in the queue); rank 0 saves it before "
                        "the first step, every --checkpoint-every steps and at the end")
    p.add_argument("--checkpoint-every", type=int, default=100, metavar="K",
                   help="steps between checkpoints (default 100)")
    p.add_argument("--die-at", type=int, default=0, metavar="STEP",
                   help="rank 0 kills itself (SIGKILL) right after training step STEP, to "
                        "show (and test) resuming: run it again with the same --checkpoint")
    a = p.parse_args(argv)
    if a.checkpoint and a.workers:
        p.error("--checkpoint needs --workers 0: the queue's place is checkpointed in the "
                "process that trains (BatchDataset.state_dict())")
    for name, least in (("nproc", 0), ("workers", 0), ("hidden", 1), ("threads", 1),
                        ("checkpoint_every", 1)):
        if getattr(a, name) < least:
            p.error("--%s must be at least %d, got %d"
                    % (name.replace("_", "-"), least, getattr(a, name)))
    return a


# ---- the model -----------------------------------------------------------

def make_model(hidden):
    return torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(784, hidden),
                               torch.nn.ReLU(), torch.nn.Linear(hidden, 10))


# Mean and standard deviation of Fashion-MNIST's training pixels (0..1).
PIXEL_MEAN, PIXEL_STD = 0.2860, 0.3530


def inputs(tensors):
    """A batch's tensors (image uint8 [B,28,28], label uint8 [B]) as the
    model's input (standardized pixels) and target."""
    x = tensors["image"].float().div_(255.0).sub_(PIXEL_MEAN).div_(PIXEL_STD)
    return x, tensors["label"].long()


# ---- the checkpoint --------------------------------------------------------
# Everything a checkpoint holds is put in by checkpoint_state() and taken
# back by restore_checkpoint(); both get the dataset, so that the position
# in the queue joins the model, the optimizer and the step there (and only
# there). Rank 0 writes the file (save_checkpoint: to a temporary name,
# then renamed over the old one, so a crash never leaves half a file);
# every rank reads it at start (load_checkpoint).

def checkpoint_state(model, optimizer, scheduler, step, dataset, ids):
    """Called by every rank at the same step (it is collective): each
    rank's dataset takes a checkpoint of its place in the queue, behind
    everything it trained; rank 0 gets the state to save (the others
    None). Rank 0's dataset state resumes every rank (each its own
    checkpoint of that number). ids: the rank's file of trained batch ids,
    whose length goes in too, so that a resumed run forgets the ids of
    batches trained after the checkpoint (they are trained again)."""
    sluice_state = dataset.state_dict()
    if ids:
        ids.flush()
    mine = ids.tell() if ids else 0
    lengths = [None] * dist.get_world_size()
    dist.all_gather_object(lengths, mine)      # also: every rank has its checkpoint now
    if dist.get_rank() != 0:
        return None
    return {"model": model.state_dict(), "optimizer": optimizer.state_dict(),
            "scheduler": scheduler.state_dict(), "step": step, "sluice": sluice_state,
            "ids_lengths": lengths}


def restore_checkpoint(state, model, optimizer, scheduler, dataset, ids):
    """Restores what checkpoint_state() saved; returns the step."""
    model.load_state_dict(state["model"])
    optimizer.load_state_dict(state["optimizer"])
    scheduler.load_state_dict(state["scheduler"])
    dataset.load_state_dict(state["sluice"])
    if ids:
        ids.truncate(state["ids_lengths"][dist.get_rank()])
        ids.seek(0, os.SEEK_END)
    return state["step"]


def save_checkpoint(path, state):
    tmp = "%s.tmp%d" % (path, os.getpid())
    torch.save(state, tmp)
    os.replace(tmp, path)


def load_checkpoint(path):
    """The saved state, or None when there is no checkpoint yet."""
    if not path or not os.path.exists(path):
        return None
    return torch.load(path, map_location="cpu")


# ---- evaluation ------------------------------------------------------------

def read_idx(path):
    """An IDX file of unsigned bytes (gzip or not) as a numpy array."""
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rb") as f:
        data = f.read()
    if len(data) < 4 or data[:3] != b"\0\0\x08":
        raise ValueError("%s: not an IDX file of unsigned bytes" % path)
    ndim = data[3]
    dims = struct.unpack(">%dI" % ndim, data[4:4 + 4 * ndim])
    arr = np.frombuffer(bytearray(data), np.uint8, offset=4 + 4 * ndim)
    if arr.size != int(np.prod(dims)):
        raise ValueError("%s: %d bytes of data for dimensions %s" % (path, arr.size, dims))
    return arr.reshape(dims)


TEST_FILES = ("t10k-images-idx3-ubyte.gz", "t10k-labels-idx1-ubyte.gz")


def accuracy_on_test_set(model, folder):
    images, labels = (read_idx(os.path.join(folder, name)) for name in TEST_FILES)
    model.eval()
    with torch.no_grad():
        x, y = inputs({"image": torch.from_numpy(images), "label": torch.from_numpy(labels)})
        right = (model(x).argmax(1) == y).sum().item()
    return right / len(labels)


# ---- one rank ----------------------------------------------------------------

def run_rank(rank, world, args):
    dist.init_process_group("gloo", rank=rank, world_size=world)
    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    model = make_model(args.hidden)
    optimizer = torch.optim.Adam(model.parameters(), lr=args.lr)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=1, gamma=0.5)
    # Rank and world: from torch.distributed. Each DataLoader pass is one
    # epoch of the job.
    # With --checkpoint the dataset keeps its last 2 checkpoints.
    dataset = BatchDataset(args.redis, args.queue, epochs=1, with_id=True,
                           **({"checkpoints": 2} if args.checkpoint else {}))
    step = 0
    state = load_checkpoint(args.checkpoint)
    ids = None
    if args.ids_out:
        path = "%s.%d" % (args.ids_out, rank)
        ids = open(path, "r+" if state is not None and os.path.exists(path) else "w")
    if state is not None:
        step = restore_checkpoint(state, model, optimizer, scheduler, dataset, ids)
        if rank == 0:
            print("resumed from %s at step %d" % (args.checkpoint, step), flush=True)
    elif args.checkpoint:
        # A first checkpoint before any step: whenever it crashes, there
        # is one to resume from, taken by every rank.
        first = checkpoint_state(model, optimizer, scheduler, step, dataset, ids)
        if rank == 0:
            save_checkpoint(args.checkpoint, first)
    ddp = DistributedDataParallel(model)
    loader = DataLoader(dataset, batch_size=None, num_workers=args.workers,
                        multiprocessing_context=args.start_method if args.workers else None,
                        persistent_workers=args.workers > 0)
    t_start = time.monotonic()
    trained = 0
    while True:
        t0 = time.monotonic()
        batches, loss_sum, epoch, waited = 0, 0.0, None, 0.0
        ddp.train()
        it = iter(loader)
        while True:
            tw = time.monotonic()
            try:
                bid, tensors = next(it)
            except StopIteration:
                break
            waited += time.monotonic() - tw
            x, y = inputs(tensors)
            loss = F.cross_entropy(ddp(x), y)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            step += 1
            batches += 1
            loss_sum += loss.item()
            epoch = bid.epoch
            if ids:
                ids.write("%d %d %d\n" % bid)
            if args.die_at and step == args.die_at and rank == 0:
                print("rank 0: killing itself after step %d (--die-at)" % step, flush=True)
                os.kill(os.getpid(), signal.SIGKILL)
            if args.checkpoint and step % args.checkpoint_every == 0:
                saved = checkpoint_state(model, optimizer, scheduler, step, dataset, ids)
                if rank == 0:
                    save_checkpoint(args.checkpoint, saved)
        # Every rank had as many batches as the others (a coordinated
        # queue): none is left waiting in this allreduce.
        totals = torch.tensor([loss_sum, batches, waited, float(dataset.finished)],
                              dtype=torch.float64)
        dist.all_reduce(totals)
        # The job is over: the datasets say so. Read in DataLoader workers
        # (no checkpoints: no pass can start at an epoch's very end), an
        # empty pass says it.
        if totals[1] == 0 and (args.workers or totals[3] == world):
            break
        scheduler.step()
        if totals[1] == 0:
            continue     # resumed at the very end of an epoch: only its end was left
        trained += int(totals[1])
        if rank == 0:
            print("epoch %d: %d batches over %d ranks, mean loss %.4f, %.1f s (ranks waited "
                  "%.1f s for data on average)"
                  % (epoch, totals[1], world, totals[0] / totals[1], time.monotonic() - t0,
                     totals[2] / world), flush=True)
    train_s = time.monotonic() - t_start
    if args.checkpoint:
        saved = checkpoint_state(model, optimizer, scheduler, step, dataset, ids)
        if rank == 0:
            save_checkpoint(args.checkpoint, saved)
    if rank == 0:
        acc = accuracy_on_test_set(model, args.data)
        print("rank 0: test accuracy %.4f on 10000 images" % acc, flush=True)
        print("test_accuracy=%.4f train_s=%.1f batches=%d world=%d step=%d"
              % (acc, train_s, trained, world, step), flush=True)
    if ids:
        ids.close()
    # Torch 1.13's gloo can deadlock when the process group goes with the
    # DDP model while a worker thread of it still frees the tensors of the
    # last collective (it needs the GIL, which the freeing thread holds):
    # the barrier waits (without the GIL) until every rank is here and the
    # earlier collectives' tensors are gone; then the model and the group
    # go, the model first.
    dist.barrier()
    del ddp
    dist.destroy_process_group()


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main(argv):
    args = parse_args(argv)
    for name in TEST_FILES:
        if not os.access(os.path.join(args.data, name), os.R_OK):
            sys.exit("ddp_train: cannot read %s in %s (--data; Debian: dataset-fashion-mnist)"
                     % (name, args.data))
    if args.nproc:
        if "RANK" in os.environ:
            sys.exit("ddp_train: started by torchrun (RANK is set) and given --nproc: "
                     "use one or the other")
        os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
        os.environ.setdefault("MASTER_PORT", str(free_port()))
        torch.multiprocessing.spawn(run_rank, args=(args.nproc, args), nprocs=args.nproc)
        return
    try:
        rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    except (KeyError, ValueError):
        sys.exit("ddp_train: no RANK/WORLD_SIZE in the environment: start it with torchrun "
                 "(python3 -m torch.distributed.run --nproc_per_node 2 --redirects 2 --tee 2 ...) "
                 "or pass --nproc 2")
    run_rank(rank, world, args)


if __name__ == "__main__":
    main(sys.argv[1:])
