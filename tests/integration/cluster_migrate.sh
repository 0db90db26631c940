#!/usr/bin/env bash
# A partition's slot migrates while the job runs: 3 masters, a queue of 6
# partitions, a job of 24 shards x 2 epochs read slowly by 2 producers
# (--exec), 3 consumers. Once batches flow, the slot of the partition
# holding the most keys is moved (keys and all, SETSLOT IMPORTING/MIGRATING,
# MIGRATE, SETSLOT NODE) to another master; later it is moved back. The
# clients follow (ASK/TRYAGAIN during the move, MOVED after it): every
# record arrives exactly once per epoch, every consumer sees each epoch end,
# all exit 0, and no producer or consumer prints an error.
# test: long
# shellcheck source=tests/lib/integration.sh
. "$(dirname "$0")/../lib/integration.sh"
# shellcheck source=tests/lib/cluster.sh
. "$(dirname "$0")/../lib/cluster.sh"
# shellcheck source=tests/lib/cluster_job.sh
. "$(dirname "$0")/../lib/cluster_job.sh"
need_bin sluice-ctl sluice-producer sluice-consume

cluster_start 3 0 || fail "cluster_start 3 0"
note "cluster: $CLUSTER_URL"
CJOB_Q=cmig
np=6 shards=24 lines=120 bs=10 epochs=2
total=$((epochs * shards * ((lines + bs - 1) / bs)))
cjob_job "$np" "$shards" "$lines" "$bs" "$epochs"

cjob_consumers 3
cjob_producers 2 0.02
cjob_wait_delivered $((total / 8)) 30
# The producers wait while the test looks at the cluster (so that the job
# cannot get ahead of it on a slow machine); they go on during each move.
cjob_pause

# The busiest partition: the one whose slot holds the most keys now.
FAILOVER_PARTITION='' cjob_busiest "$np"
best=$CJOB_BUSY most=$CJOB_BUSY_KEYS
slot=$(cluster_slot_of "{$CJOB_Q#$best}")
from=$(cluster_node_of_slot "$slot")
for to in "${CLUSTER_PORTS[@]}"; do [[ $to != "$from" ]] && break; done

# move SLOT TO: migrates, then checks that the partition's keys are on TO.
move() {
    local n
    why=$(cjob_alive) || fail "before moving slot $1 to $2: $why"
    cjob_resume
    cluster_migrate_slot "$1" "$2" || fail "cluster_migrate_slot $1 $2 failed"
    cluster_wait_ok || fail "the cluster is not ok after moving slot $1"
    [[ $(cluster_node_of_slot "$1") == "$2" ]] || fail "slot $1 is not on $2 after the migration"
    [[ $(cluster_cli "$2" EXISTS "sluice:{$CJOB_Q#$best}:meta") == 1 ]] ||
        fail "partition $best's meta is not on $2 after the migration"
    n=$(cluster_cli "$2" CLUSTER COUNTKEYSINSLOT "$1")
    note "slot $1 (partition $best) moved to $2 with $n keys; $(cjob_delivered) of $total batches delivered"
}
note "partition $best (slot $slot, $most keys) on $from: moving it to $to"
move "$slot" "$to"
cjob_wait_delivered $((total / 2)) 60
cjob_pause
move "$slot" "$from"

cjob_wait 80
((CJOB_TASKS == shards * epochs)) ||
    fail "producers report $CJOB_TASKS tasks done, expected $((shards * epochs))"
cjob_check "$epochs" "$bs"
cjob_no_errors
echo "ok: slot of partition $best moved $from -> $to -> $from mid-job;" \
    "$epochs epochs x $CJOB_RECS records exactly once, no errors"
