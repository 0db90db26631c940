#!/usr/bin/env bash
# Every replica is down: 3 masters whose replicas were killed, a queue of 6
# partitions, a job of 24 shards x 2 epochs, 2 producers, 2 consumers.
# Writes are followed by WAIT for a replica when the master has one; with
# the replica gone a WAIT can only time out (1 s), so the clients ask the
# node which replicas it has connected (ROLE) and wait for those only.
# Counted on the masters: at most one WAIT per client connection (the one
# that may go out before the ROLE answer), where waiting after every write
# would send one per task and per push group and take (hundreds). Every
# record still arrives exactly once per epoch.
# shellcheck source=tests/lib/integration.sh
. "$(dirname "$0")/../lib/integration.sh"
# shellcheck source=tests/lib/cluster.sh
. "$(dirname "$0")/../lib/cluster.sh"
# shellcheck source=tests/lib/cluster_job.sh
. "$(dirname "$0")/../lib/cluster_job.sh"
need_bin sluice-ctl sluice-producer sluice-consume

cluster_start 3 1 || fail "cluster_start 3 1"
CJOB_Q=creplica
np=6 shards=24 lines=60 bs=10 epochs=2
cjob_job "$np" "$shards" "$lines" "$bs" "$epochs" 8

# The clients read the slot map while the replicas still count as healthy
# (the cluster marks them failed only after cluster-node-timeout), so they
# start out waiting for one replica per master.
killed=0
for ((i = 0; i < 3; i++)); do
    r=$(cluster_replica_of "${CLUSTER_PORTS[i]}") || fail "master ${CLUSTER_PORTS[i]} has no replica"
    cluster_kill_port "$r"
    killed=$((killed + 1))
done
note "killed the $killed replicas"

cjob_consumers 2
cjob_producers 2
cjob_wait 60
cjob_check "$epochs" "$bs"

waits=0
for ((i = 0; i < 3; i++)); do
    n=$(cluster_cli "${CLUSTER_PORTS[i]}" INFO commandstats | tr -d '\r' |
        sed -n 's/^cmdstat_wait:calls=\([0-9]*\),.*/\1/p')
    waits=$((waits + ${n:-0}))
done
conns=$(((2 + 2) * np))
note "WAIT calls on the masters: $waits (client connections: $conns)"
((waits <= conns)) ||
    fail "$waits WAITs reached masters without replicas: the clients kept waiting for a" \
        "replica ROLE showed gone (at most $conns expected, one per connection)"
echo "ok: every replica down, $epochs epochs x $CJOB_RECS records exactly once, $waits WAITs"
