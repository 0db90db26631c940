#!/usr/bin/env bash
# A master dies in the middle of an epoch: 3 masters with a replica each, a
# queue of 6 partitions, a job of 24 shards x 2 epochs (the producers read
# the shards slowly, through --exec, so the job lasts a few seconds), 2
# producers, 3 consumers. Once some batches of epoch 0 went through, the
# master serving the busiest partition is killed with -9; its replica is promoted
# (cluster-node-timeout 1000); the killed node is started again and rejoins
# as a replica. The producers and consumers ride it out: all exit 0, and
# every record arrives exactly once per epoch (no batch lost, none
# delivered twice to the application), every consumer sees each epoch end.
# test: long
# shellcheck source=tests/lib/integration.sh
. "$(dirname "$0")/../lib/integration.sh"
# shellcheck source=tests/lib/cluster.sh
. "$(dirname "$0")/../lib/cluster.sh"
# shellcheck source=tests/lib/cluster_job.sh
. "$(dirname "$0")/../lib/cluster_job.sh"
need_bin sluice-ctl sluice-producer sluice-consume

cluster_start 3 1 || fail "cluster_start 3 1"
note "cluster: $CLUSTER_URL"
CJOB_Q=cfail
np=6 shards=24 lines=120 bs=10 epochs=2
per_epoch=$((shards * ((lines + bs - 1) / bs)))
cjob_job "$np" "$shards" "$lines" "$bs" "$epochs"

cjob_consumers 3
cjob_producers 2 0.02
cjob_wait_delivered 40 30
# The producers wait while the victim is chosen: the epoch cannot end
# before the kill, whatever else the machine is doing.
cjob_pause

# The victim: the master of the busiest partition (the most keys in its
# slot: batches stored, held, acknowledged ids), so that batches are in
# flight there when it dies; FAILOVER_PARTITION=p picks partition p instead.
cjob_busiest "$np"
best=$CJOB_BUSY most=$CJOB_BUSY_KEYS
slot=$(cluster_slot_of "{$CJOB_Q#$best}")
victim=$(cluster_node_of_slot "$slot")
replica=$(cluster_replica_of "$victim") || fail "master $victim has no replica"
got=$(cjob_delivered 0)
((got < per_epoch)) || fail "epoch 0 was over ($got batches) before the kill"
why=$(cjob_alive) || fail "before the kill: $why"
cjob_resume
cluster_kill_port "$victim"
note "killed master $victim (kill -9) of partition $best (slot $slot, $most keys), replica $replica;" \
    "$got of $per_epoch batches of epoch 0 delivered"

for ((i = 0; i < 200; i++)); do
    now=$(cluster_node_of_slot "$slot") && [[ $now != "$victim" ]] && break
    sleep 0.1
done
[[ ${now:-} == "$replica" ]] ||
    fail "slot $slot is served by '${now:-nobody}' 20 s after the kill, expected the replica $replica"
cluster_wait_ok || fail "the cluster did not recover after the failover"
note "replica $replica promoted; $(cjob_delivered) batches delivered"
why=$(cjob_alive) || fail "after the failover: $why"

cluster_restart_port "$victim" || fail "could not restart $victim"
for ((i = 0; i < 200; i++)); do
    [[ $(cluster_cli "$victim" ROLE 2>/dev/null | head -n 1) == slave ]] && break
    sleep 0.1
done
[[ $(cluster_cli "$victim" ROLE | head -n 1) == slave ]] ||
    fail "restarted $victim did not rejoin as a replica: $(cluster_cli "$victim" ROLE | tr '\n' ' ')"
cluster_wait_ok || fail "the cluster is not ok after $victim rejoined"
[[ $(cluster_node_of_slot "$slot") == "$replica" ]] ||
    fail "slot $slot moved away from $replica after $victim rejoined"
note "$victim rejoined as a replica; $(cjob_delivered) batches delivered"

cjob_wait 80
note "producers report $CJOB_TASKS tasks done (of $((shards * epochs)))"
cjob_check "$epochs" "$bs"
echo "ok: master of partition $best killed mid-epoch, replica promoted, node rejoined;" \
    "$epochs epochs x $CJOB_RECS records exactly once"
