#!/usr/bin/env bash
# sluice.torch with the real PyTorch (python3-torch): BatchDataset pickles
# and feeds DataLoaders under fork, spawn and forkserver with 0, 1 and 2
# workers, every batch exactly once; rank and world from RANK/WORLD_SIZE
# on a coordinated queue (equal counts); num_workers > 1 on it fails at
# once, unless the queue has world x num_workers ranks; and without
# PyTorch, BatchDataset says so. Every batch pushed ends acknowledged.
# Alone (tests/run.sh): it bounds how long errors take (2.5 s) and ends
# iterations on 700 ms of idleness, and PyTorch is heavy on the CPU.
# test: serial
# shellcheck source=tests/lib/integration.sh
. "$(dirname "$0")/../lib/integration.sh"
# shellcheck source=tests/lib/python.sh
. "$ROOT/tests/lib/python.sh"
need_bin sluice-ctl
py -c 'import torch' 2>/dev/null ||
    fail "PyTorch is missing for $PY (Debian: python3-torch; make test installs it)"

redis_tmp_start
ctl create pt --max-batches 32 --max-bytes 16M >/dev/null
ctl create co2 --max-batches 32 --max-bytes 16M --consumers 2 --coordinated >/dev/null
ctl create co4 --max-batches 32 --max-bytes 16M --consumers 4 --coordinated >/dev/null
ctl create pc2 --max-batches 32 --max-bytes 16M --consumers 2 --coordinated --partitions 2 >/dev/null

out=$(py "$ROOT/tests/integration/python_torch.py" "$REDIS_URL" notorch) ||
    fail "without PyTorch: $out"
note "$out"
out=$(py "$ROOT/tests/integration/python_torch.py" "$REDIS_URL") || fail "python_torch.py failed"
note "$out"
pushed=$(kv pushed "$out")
acked=0
for q in pt co2 co4; do
    [[ $(info_field "$q" batches) == 0 ]] || fail "queue $q still holds $(info_field "$q" batches) batches"
    acked=$((acked + $(info_field "$q" acked)))
done
[[ $acked == "$pushed" ]] || fail "acked $acked batches, pushed $pushed"
echo "ok: $pushed batches, each read once and acknowledged"
