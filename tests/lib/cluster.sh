# shellcheck shell=bash
# Private Redis Clusters for the integration tests and the benchmark
# (sourced after integration.sh, or after scripts/redis-tmp.sh).
#
#   cluster_start MASTERS REPLICAS     # e.g. cluster_start 3 1
#   echo "$CLUSTER_URL"                # redis+cluster://127.0.0.1:P1,...,127.0.0.1:Pn/
#   echo "${CLUSTER_PORTS[@]}"         # every node's port, masters first
#   cluster_node_of_slot "$(cluster_cli "$p" CLUSTER KEYSLOT '{Q#0}')"
#   cluster_kill_port PORT             # kill -9; the node stays down
#   cluster_restart_port PORT          # same port, dir and nodes.conf: it rejoins
#   cluster_migrate_slot SLOT TO_PORT  # moves a slot (and its keys) to that master
#   cluster_wait_ok                    # every live node says cluster_state:ok
#
# Every node is a scripts/redis-tmp.sh server (`--save '' --appendonly no`,
# its own `mktemp -d` dir holding nodes.conf), so the EXIT trap of integration.sh
# (redis_tmp_cleanup_all) stops them all, also when a test fails half way
# through cluster_start. When sourced without integration.sh and no EXIT trap is
# set, this file sets one.
#
# Nodes run with cluster-node-timeout 1000: a killed master is marked failed
# and its replica promoted within about 2 s. The cluster bus listens on a
# port of its own (cluster-port), so the client ports may be anywhere in the
# ephemeral range (the default bus port, port + 10000, may not exist).
# A failover needs a majority of the masters, so only clusters of 3 or more
# masters fail over; smaller ones are for routing and migration.
# The functions return non-zero with a message on stderr when something
# does not happen in time (CLUSTER_WAIT_S seconds, default 30).

if ! declare -F redis_tmp_start >/dev/null; then
    . "$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)/scripts/redis-tmp.sh"
fi
if [[ -z $(trap -p EXIT) ]]; then
    trap redis_tmp_cleanup_all EXIT
fi

CLUSTER_WAIT_S=${CLUSTER_WAIT_S:-30}
CLUSTER_URL=
CLUSTER_PORTS=()
# Extra redis-server arguments for every node (e.g. --maxmemory 1gb).
CLUSTER_REDIS_ARGS=(${CLUSTER_REDIS_ARGS[@]+"${CLUSTER_REDIS_ARGS[@]}"})
# TLS: when CLUSTER_TLS_ARGS holds the certificate arguments
# (--tls-cert-file F --tls-key-file F --tls-ca-cert-file F ...), every node
# also gets a TLS port of its own (CLUSTER_TLS_PORT[port]), the cluster bus
# and the replication speak TLS (--tls-cluster yes --tls-replication yes),
# and cluster_start sets CLUSTER_TLS_URL (rediss+cluster:// over the TLS
# ports). The plain ports stay, for redis-cli.
CLUSTER_TLS_ARGS=(${CLUSTER_TLS_ARGS[@]+"${CLUSTER_TLS_ARGS[@]}"})
CLUSTER_TLS_URL=
declare -gA CLUSTER_TLS_PORT=()

# cluster_cli PORT ARGS...: redis-cli against one node (no redirects followed).
cluster_cli() {
    local port=$1
    shift
    timeout 10 env -u REDISCLI_AUTH "$REDIS_TMP_CLI" -h 127.0.0.1 -p "$port" "$@"
}

# cluster_alive PORT: 0 when the node on PORT was started here and not killed.
cluster_alive() {
    [[ -n ${_REDIS_TMP_PID[$1]:-} && ${_REDIS_TMP_PID[$1]} != dead ]]
}

# _cluster_live_ports: the ports of the live nodes, one per line.
_cluster_live_ports() {
    local p
    for p in "${CLUSTER_PORTS[@]}"; do
        cluster_alive "$p" && echo "$p"
    done
    return 0
}

# _cluster_start_node: starts one cluster-enabled node (the current
# redis-tmp server: REDIS_PORT). Not in a subshell: redis-tmp.sh keeps its
# list of servers (for the cleanup) in this shell's variables.
_cluster_start_node() {
    local tls=()
    # The bus and TLS ports are picked by redis_tmp_start, so that a port
    # another test took meanwhile is picked again, not tried for ever.
    if ((${#CLUSTER_TLS_ARGS[@]})); then
        tls=(--tls-port '{free-port}' --tls-cluster yes --tls-replication yes "${CLUSTER_TLS_ARGS[@]}")
    fi
    redis_tmp_start --cluster-enabled yes --cluster-config-file nodes.conf \
        --cluster-node-timeout 1000 --cluster-port '{free-port}' \
        --cluster-replica-validity-factor 0 \
        --repl-diskless-sync yes --repl-diskless-sync-delay 0 \
        ${tls[@]+"${tls[@]}"} ${CLUSTER_REDIS_ARGS[@]+"${CLUSTER_REDIS_ARGS[@]}"} || return 1
    # The {free-port}s in order: the bus port, then the TLS port (if any).
    ((${#tls[@]} == 0)) || CLUSTER_TLS_PORT[$REDIS_PORT]=${REDIS_TMP_EXTRA_PORTS[1]}
}

# _cluster_bus_port PORT: the node's cluster bus port.
_cluster_bus_port() {
    cluster_cli "$1" CONFIG GET cluster-port | sed -n 2p
}

# _cluster_wait WHAT CMD...: runs CMD every 100 ms until it succeeds, for at
# most CLUSTER_WAIT_S seconds; then fails naming WHAT.
_cluster_wait() {
    local what=$1 i
    shift
    for ((i = 0; i < CLUSTER_WAIT_S * 10; i++)); do
        "$@" && return 0
        sleep 0.1
    done
    echo "cluster: timed out after ${CLUSTER_WAIT_S} s waiting for $what" >&2
    return 1
}

_cluster_all_ok() {
    local p
    for p in $(_cluster_live_ports); do
        [[ $(cluster_cli "$p" CLUSTER INFO 2>/dev/null | tr -d '\r' | sed -n 's/^cluster_state://p') == ok ]] ||
            return 1
    done
    return 0
}

# cluster_wait_ok: waits until every live node reports cluster_state:ok.
cluster_wait_ok() {
    _cluster_wait "cluster_state:ok on every live node ($(_cluster_live_ports | tr '\n' ' '))" \
        _cluster_all_ok
}

# _cluster_knows PORT NODEID: the node on PORT has NODEID in its table.
_cluster_knows() {
    cluster_cli "$1" CLUSTER NODES 2>/dev/null | grep -q "^$2 "
}

# _cluster_replicas_synced: every live replica's link to its master is up.
_cluster_replicas_synced() {
    local p info
    for p in $(_cluster_live_ports); do
        info=$(cluster_cli "$p" INFO replication 2>/dev/null | tr -d '\r') || return 1
        [[ $info == *role:slave* ]] || continue
        [[ $info == *master_link_status:up* ]] || return 1
    done
    return 0
}

# _cluster_nodes_agree: every live node sees every other live node
# (handshakes done) and no node is flagged fail or handshake.
_cluster_nodes_agree() {
    local p n=0 nodes
    n=$(_cluster_live_ports | wc -l)
    for p in $(_cluster_live_ports); do
        nodes=$(cluster_cli "$p" CLUSTER NODES 2>/dev/null) || return 1
        (($(printf '%s\n' "$nodes" | grep -cvE 'fail|handshake|noaddr') >= n)) || return 1
    done
    return 0
}

# cluster_start MASTERS REPLICAS_PER_MASTER: starts MASTERS * (1 + REPLICAS)
# nodes, makes them one cluster (16384 slots split evenly over the masters,
# in the order of CLUSTER_PORTS), and waits until every node says
# cluster_state:ok and every replica is in sync. Sets CLUSTER_PORTS (masters
# first, each master's replicas after all masters), CLUSTER_URL (every node
# as a seed, masters first) and REDIS_URL=CLUSTER_URL (so ctl() of integration.sh
# talks to the cluster); with CLUSTER_TLS_ARGS also CLUSTER_TLS_URL.
cluster_start() {
    local masters=$1 replicas=$2 n i p id bus first last ports=() ids=()
    ((masters >= 1 && replicas >= 0)) || { echo "cluster_start: bad shape $masters $replicas" >&2; return 1; }
    n=$((masters * (1 + replicas)))
    for ((i = 0; i < n; i++)); do
        _cluster_start_node || return 1
        ports+=("$REDIS_PORT")
    done
    CLUSTER_PORTS=("${ports[@]}")
    for p in "${ports[@]}"; do
        ids+=("$(cluster_cli "$p" CLUSTER MYID)") || return 1
    done
    if ((masters >= 3)); then
        local addrs=()
        for p in "${ports[@]}"; do addrs+=("127.0.0.1:$p"); done
        # The first MASTERS nodes given become the masters; redis-cli sets
        # distinct config epochs and attaches the replicas.
        if ! cluster_cli "${ports[0]}" --cluster create "${addrs[@]}" \
            --cluster-replicas "$replicas" --cluster-yes >"${TMPDIR:-/tmp}/cluster-create.$$" 2>&1; then
            echo "cluster_start: redis-cli --cluster create failed:" >&2
            tail -n 20 "${TMPDIR:-/tmp}/cluster-create.$$" >&2
            rm -f "${TMPDIR:-/tmp}/cluster-create.$$"
            return 1
        fi
        rm -f "${TMPDIR:-/tmp}/cluster-create.$$"
    else
        # redis-cli --cluster create wants 3 masters: do what it does by hand.
        for ((i = 0; i < masters; i++)); do
            first=$((i * 16384 / masters))
            last=$(((i + 1) * 16384 / masters - 1))
            cluster_cli "${ports[i]}" CLUSTER SET-CONFIG-EPOCH $((i + 1)) >/dev/null || return 1
            [[ $(cluster_cli "${ports[i]}" CLUSTER ADDSLOTSRANGE "$first" "$last") == OK ]] || {
                echo "cluster_start: CLUSTER ADDSLOTSRANGE $first $last failed on ${ports[i]}" >&2
                return 1
            }
        done
        for ((i = 1; i < n; i++)); do
            bus=$(_cluster_bus_port "${ports[i]}")
            cluster_cli "${ports[0]}" CLUSTER MEET 127.0.0.1 "${ports[i]}" "$bus" >/dev/null || return 1
        done
        _cluster_wait "every node to know every other" _cluster_nodes_agree || return 1
        # Replica j of master i is node masters + i * replicas + j.
        for ((i = 0; i < masters; i++)); do
            for ((j = 0; j < replicas; j++)); do
                p=${ports[masters + i * replicas + j]}
                _cluster_wait "node $p to learn of master ${ports[i]}" _cluster_knows "$p" "${ids[i]}" ||
                    return 1
                [[ $(cluster_cli "$p" CLUSTER REPLICATE "${ids[i]}") == OK ]] || {
                    echo "cluster_start: CLUSTER REPLICATE on $p failed" >&2
                    return 1
                }
            done
        done
    fi
    cluster_wait_ok || return 1
    _cluster_wait "the replicas to sync with their masters" _cluster_replicas_synced || return 1
    # Masters first (redis-cli chooses which replica goes with which master).
    local m=() r=()
    for p in "${ports[@]}"; do
        if [[ $(cluster_cli "$p" ROLE | head -n 1) == master ]]; then m+=("$p"); else r+=("$p"); fi
    done
    ((${#m[@]} == masters)) || { echo "cluster_start: ${#m[@]} masters, expected $masters" >&2; return 1; }
    CLUSTER_PORTS=("${m[@]}" ${r[@]+"${r[@]}"})
    CLUSTER_URL=redis+cluster://
    for p in "${CLUSTER_PORTS[@]}"; do CLUSTER_URL+=127.0.0.1:$p,; done
    CLUSTER_URL=${CLUSTER_URL%,}/
    REDIS_URL=$CLUSTER_URL
    if ((${#CLUSTER_TLS_ARGS[@]})); then
        CLUSTER_TLS_URL=rediss+cluster://
        for p in "${CLUSTER_PORTS[@]}"; do CLUSTER_TLS_URL+=127.0.0.1:${CLUSTER_TLS_PORT[$p]},; done
        CLUSTER_TLS_URL=${CLUSTER_TLS_URL%,}/
    fi
    return 0
}

# cluster_node_of_slot SLOT: prints the port of the master serving SLOT, as
# the live masters see themselves (when two claim it, e.g. a restarted old
# master that has not yet learnt of its demotion, the one with the higher
# config epoch). Prints nothing (and returns 1) when no live master claims it,
# e.g. between the death of a master and the promotion of its replica.
cluster_node_of_slot() {
    local slot=$1 p line best='' best_epoch=-1 epoch r lo hi f
    for p in $(_cluster_live_ports); do
        line=$(cluster_cli "$p" CLUSTER NODES 2>/dev/null | grep ' myself,master ') || continue
        # id addr flags master ping pong epoch link slot...
        read -ra f <<<"$line"
        epoch=${f[6]}
        for r in "${f[@]:8}"; do
            [[ $r == \[* ]] && continue             # [slot->-id] / [slot-<-id]: migrating
            lo=${r%-*} hi=${r#*-}
            if ((slot >= lo && slot <= hi && epoch > best_epoch)); then
                best=$p best_epoch=$epoch
            fi
        done
    done
    [[ -n $best ]] || return 1
    echo "$best"
}

# cluster_slot_of KEY: the slot of KEY (CLUSTER KEYSLOT on a live node).
cluster_slot_of() {
    local p
    for p in $(_cluster_live_ports); do
        cluster_cli "$p" CLUSTER KEYSLOT "$1" 2>/dev/null && return 0
    done
    return 1
}

# cluster_replica_of PORT: prints the port of a live replica of the master
# on PORT (nothing, and status 1, when it has none).
cluster_replica_of() {
    local id p
    id=$(cluster_cli "$1" CLUSTER MYID) || return 1
    for p in $(_cluster_live_ports); do
        cluster_cli "$p" CLUSTER NODES 2>/dev/null | grep ' myself,slave ' | grep -q " $id " &&
            { echo "$p"; return 0; }
    done
    return 1
}

# cluster_kill_port PORT: kill -9 of one node; it stays down.
cluster_kill_port() {
    redis_tmp_kill9 "$1"
}

# cluster_restart_port PORT: starts a killed node again on the same port,
# dir and arguments. Its nodes.conf makes it rejoin the cluster (a master
# that was failed over comes back as a replica of its successor).
# REDIS_URL stays CLUSTER_URL (redis_tmp_restart would point it at the node).
cluster_restart_port() {
    local rc=0
    redis_tmp_restart "$1" || rc=$?
    # shellcheck disable=SC2034  # REDIS_URL is for the caller (ctl of integration.sh)
    [[ -z $CLUSTER_URL ]] || REDIS_URL=$CLUSTER_URL
    return "$rc"
}

# cluster_migrate_slot SLOT TO_PORT: moves SLOT, with its keys, to the
# master on TO_PORT, as `redis-cli --cluster reshard` does: SETSLOT
# IMPORTING on the target, MIGRATING on the source, MIGRATE the keys 10 at
# a time until none is left, then SETSLOT NODE on the target, the source
# and every other master. Clients see ASK/TRYAGAIN during the move and
# MOVED after it. A no-op when TO_PORT serves SLOT already.
cluster_migrate_slot() {
    local slot=$1 to=$2 from src_id dst_id keys p out
    from=$(cluster_node_of_slot "$slot") || { echo "cluster_migrate_slot: no master serves slot $slot" >&2; return 1; }
    [[ $from == "$to" ]] && return 0
    src_id=$(cluster_cli "$from" CLUSTER MYID) && dst_id=$(cluster_cli "$to" CLUSTER MYID) || return 1
    out=$(cluster_cli "$to" CLUSTER SETSLOT "$slot" IMPORTING "$src_id") || true
    [[ $out == OK ]] || { echo "cluster_migrate_slot: SETSLOT $slot IMPORTING on $to: $out" >&2; return 1; }
    out=$(cluster_cli "$from" CLUSTER SETSLOT "$slot" MIGRATING "$dst_id") || true
    [[ $out == OK ]] || { echo "cluster_migrate_slot: SETSLOT $slot MIGRATING on $from: $out" >&2; return 1; }
    while :; do
        mapfile -t keys < <(cluster_cli "$from" CLUSTER GETKEYSINSLOT "$slot" 10)
        ((${#keys[@]})) || break
        [[ -n ${keys[0]} ]] || break
        out=$(cluster_cli "$from" MIGRATE 127.0.0.1 "$to" "" 0 10000 KEYS "${keys[@]}") ||
            { echo "cluster_migrate_slot: MIGRATE from $from to $to failed: $out" >&2; return 1; }
        [[ $out == OK || $out == NOKEY ]] ||
            { echo "cluster_migrate_slot: MIGRATE from $from to $to: $out" >&2; return 1; }
    done
    for p in "$to" "$from"; do
        out=$(cluster_cli "$p" CLUSTER SETSLOT "$slot" NODE "$dst_id") || true
        [[ $out == OK ]] || { echo "cluster_migrate_slot: SETSLOT $slot NODE on $p: $out" >&2; return 1; }
    done
    for p in $(_cluster_live_ports); do
        [[ $p == "$to" || $p == "$from" ]] && continue
        [[ $(cluster_cli "$p" ROLE | head -n 1) == master ]] || continue
        cluster_cli "$p" CLUSTER SETSLOT "$slot" NODE "$dst_id" >/dev/null || true
    done
    return 0
}
