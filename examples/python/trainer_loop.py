#!/usr/bin/python3
"""A trainer loop over a sluice queue: every epoch of the job, then stop.
usage: PYTHONPATH=python trainer_loop.py redis://127.0.0.1:6379 train"""
import sys

import sluice

with sluice.Consumer(sys.argv[1], sys.argv[2]) as consumer:
    for epoch, batches in consumer.epochs():
        for batch in batches:           # released (acked) when the loop moves on
            x = batch.tensors           # dict of read-only numpy arrays, no copy
            print(epoch, batch.id, {k: v.shape for k, v in x.items()})  # train_step(x)
