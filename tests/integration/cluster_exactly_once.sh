#!/usr/bin/env bash
# A partitioned queue in a Redis Cluster: 3 masters, a queue of 6
# partitions (sluice-ctl create --partitions 6 through a redis+cluster://
# address), a job of 12 shards x 2 epochs, 2 producers and 3 consumers.
# The partitions live on the masters that serve their slots, at least two
# masters hold some; every partition carries batches; every record arrives
# exactly once per epoch (batch ids and checksums), every consumer sees the
# end of each epoch once and in order, everybody exits 0, and sluice-ctl
# info reports the job finished with nothing left.
# shellcheck source=tests/lib/integration.sh
. "$(dirname "$0")/../lib/integration.sh"
# shellcheck source=tests/lib/cluster.sh
. "$(dirname "$0")/../lib/cluster.sh"
# shellcheck source=tests/lib/cluster_job.sh
. "$(dirname "$0")/../lib/cluster_job.sh"
need_bin sluice-ctl sluice-producer sluice-consume

cluster_start 3 0 || fail "cluster_start 3 0"
note "cluster: $CLUSTER_URL"
CJOB_Q=conce
np=6 shards=12 lines=50 bs=8 epochs=2
cjob_data "$shards" "$lines"

out=$(ctl create "$CJOB_Q" --max-batches 6 --max-bytes 16M --partitions "$np") ||
    fail "create --partitions $np: $out"
cjob_spread "$CJOB_Q" "$np"
out=$(ctl submit "$CJOB_Q" --manifest "$T/job.manifest" --epochs "$epochs" --batch-size "$bs" \
    --shuffle-seed 5) || fail "submit: $out"
note "$out"

cjob_consumers 3
cjob_producers 2
cjob_wait 60
((CJOB_TASKS == shards * epochs)) ||
    fail "producers report $CJOB_TASKS tasks done, expected $((shards * epochs))"
cjob_check "$epochs" "$bs"

# Every partition carried its share (2 shards each): its own acked counter,
# read on the master that serves it.
for ((p = 0; p < np; p++)); do
    port=$(cjob_node_of_partition "$CJOB_Q" "$p")
    acked=$(cluster_cli "$port" HGET "sluice:{$CJOB_Q#$p}:stats" acked)
    want=$((epochs * shards * ((lines + bs - 1) / bs) / np))
    [[ $acked == "$want" ]] || fail "partition $p (on $port) acked ${acked:-nothing}, expected $want"
done
cjob_no_errors
echo "ok: $np partitions on a 3-master cluster, $epochs epochs x $CJOB_RECS records exactly once"
