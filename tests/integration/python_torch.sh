#!/usr/bin/env bash
# sluice.torch: imports without PyTorch, says so clearly when BatchDataset
# is used without it, and (over a stand-in torch module) yields one item
# per batch until the queue stays idle; everything is acknowledged.
# shellcheck source=tests/lib/integration.sh
. "$(dirname "$0")/../lib/integration.sh"
# shellcheck source=tests/lib/python.sh
. "$ROOT/tests/lib/python.sh"
need_bin sluice-ctl

redis_tmp_start
ctl create pt --max-batches 10 --max-bytes 16M >/dev/null
out=$(py "$ROOT/tests/integration/python_torch.py" "$REDIS_URL" pt) || fail "python_torch.py failed"
note "$out"
# The shared (copy=False) array outlived the consumer: a library without
# sluice_batch_ack acknowledges only when that memory is freed, so there
# close() handed its batch back instead.
want_left=0
[[ $(kv ack "$out") == now ]] || want_left=1
[[ $(info_field pt batches) == "$want_left" ]] ||
    fail "batches left: $(info_field pt batches), expected $want_left"
[[ $(info_field pt acked) == $((6 - want_left)) ]] ||
    fail "acked: $(info_field pt acked), expected $((6 - want_left))"
echo "ok: $out"
