#!/usr/bin/env bash
# The cluster router (common/src/cluster*.c) on a live 3-master cluster with
# one replica each: key slots agree with CLUSTER KEYSLOT, commands and
# scripts reach the master of their queue's slot, MOVED is followed after a
# slot moved, ASK during a half-done migration, and a killed master's
# promoted replica is found (by the router, and by a connection's resolver).
# test: long
. "$(dirname "$0")/../lib/integration.sh"
. "$(dirname "$0")/../lib/cluster.sh"
need_bin cluster-probe
P=$BUILD/cluster-probe

cluster_start 3 1 || fail "cluster_start 3 1"
URL=$CLUSTER_URL
note "cluster: $URL"
M=("${CLUSTER_PORTS[@]:0:3}")

# probe ARGS...: one command through a fresh router; fails the test on error.
probe() {
    local out
    out=$("$P" "$URL" "$@") || fail "cluster-probe $*: $out"
    printf '%s\n' "$out"
}
# slot_of_queue Q: the slot of Q's keys, as the cluster computes it.
slot_of_queue() { cluster_slot_of "sluice:{$1}:meta"; }
# port_of_queue Q: the master serving Q, as the cluster says.
port_of_queue() { cluster_node_of_slot "$(slot_of_queue "$1")"; }

# ---- slots -----------------------------------------------------------------
keys=(foo bar 123456789 '{user1000}.following' '{user1000}.followers' '{}' '{' '}{'
      'foo{}{bar}' 'foo{{bar}}zap' 'foo{bar}{zap}' 'a{b' 'x}{a}' 'sluice:{Q#7}:meta'
      'sluice:{jobs}:dlv' 'Q#1023' "$(printf 'k%.0s' {1..300})")
for i in $(seq 1 20); do keys+=("key-$RANDOM-$i"); done
read -ra ours <<<"$("$P" - keyslot "${keys[@]}")"
((${#ours[@]} == ${#keys[@]})) || fail "keyslot printed ${#ours[@]} slots for ${#keys[@]} keys"
for i in "${!keys[@]}"; do
    want=$(cluster_slot_of "${keys[i]}")
    [[ ${ours[i]} == "$want" ]] || fail "slot of '${keys[i]}': ours ${ours[i]}, CLUSTER KEYSLOT $want"
done
note "key slots agree with CLUSTER KEYSLOT (${#keys[@]} keys)"

# ---- routing ---------------------------------------------------------------
declare -A seen=()
for q in q0 q1 q2 q3 q4 q5 q6 q7 'Q#0' 'Q#1' 'Q#2' 'Q#3'; do
    want=$(port_of_queue "$q") || fail "no master for $q"
    got=$(probe node "$q")
    [[ $got == "127.0.0.1:$want wait=1" ]] || fail "node $q: got '$got', want 127.0.0.1:$want wait=1"
    [[ $(probe set "$q" "v-$q") == OK ]] || fail "set $q"
    [[ $(cluster_cli "$want" GET "sluice:{$q}:probe") == "v-$q" ]] ||
        fail "$q: value not on its master $want"
    [[ $(probe get "$q") == "v-$q" ]] || fail "get $q"
    seen[$want]=1
done
((${#seen[@]} == 3)) || fail "the test queues landed on ${#seen[@]} masters, not 3"
# ?wait=0 overrides "the master has a replica".
[[ $("$P" "${URL}?wait=0" node q0) == *" wait=0" ]] || fail "?wait=0 not honoured"
[[ $("$P" "${URL}?wait=2" node q0) == *" wait=2" ]] || fail "?wait=2 not honoured"
# Any one seed will do, also a replica, also behind a dead one.
[[ $("$P" "redis+cluster://127.0.0.1:1,127.0.0.1:${CLUSTER_PORTS[4]}" get q3) == v-q3 ]] ||
    fail "a replica as the only live seed"
note "commands reach the master of their slot"

# Scripts (create) and partition discovery.
[[ $(probe create plain) == 1 ]] || fail "create plain"
[[ $(cluster_cli "$(port_of_queue plain)" EXISTS 'sluice:{plain}:meta') == 1 ]] ||
    fail "plain's meta is not on its master"
for p in 0 1 2; do [[ $(probe create "part#$p" 3 "$p") == 1 ]] || fail "create part#$p"; done
[[ $(probe partitions plain) == 0 ]] || fail "partitions plain"
[[ $(probe partitions part) == 3 ]] || fail "partitions part"
out=$("$P" "$URL" partitions nope) && fail "partitions of a missing queue succeeded: $out"
[[ $out == *"queue 'nope' does not exist"* ]] || fail "partitions nope: $out"
out=$("$P" "$URL" create plain) && fail "create twice succeeded"
[[ $out == "ERR queue exists"* ]] || fail "create twice: $out"
note "scripts and partition discovery"

# ---- MOVED: a long-lived router, a slot moved under it ---------------------
coproc PROBE { "$P" --deadline 20000 "$URL" - 2>&1; }
# ask LINE: sends one command to the coprocess, prints its one-line answer.
ask() {
    local line
    printf '%s\n' "$1" >&"${PROBE[1]}"
    read -r -t 40 line <&"${PROBE[0]}" || fail "cluster-probe gave no answer to '$1'"
    printf '%s\n' "$line"
}
[[ $(ask "get q1") == v-q1 ]] || fail "get q1 (coprocess)"
from=$(port_of_queue q1)
to=${M[0]}
[[ $to == "$from" ]] && to=${M[1]}
cluster_migrate_slot "$(slot_of_queue q1)" "$to" || fail "cluster_migrate_slot"
[[ $(cluster_cli "$to" GET 'sluice:{q1}:probe') == v-q1 ]] || fail "q1 did not move to $to"
[[ $(ask "get q1") == v-q1 ]] || fail "get q1 after its slot moved"
[[ $(ask "node q1") == "127.0.0.1:$to wait=1" ]] || fail "the map did not learn q1's new node"
[[ $(ask stats) =~ moved=([1-9][0-9]*) ]] || fail "no MOVED followed: $(ask stats)"
note "MOVED followed ($from -> $to)"

# ---- ASK: a migration left half done ----------------------------------------
q=q2
slot=$(slot_of_queue $q)
from=$(port_of_queue $q)
to=${M[0]}
[[ $to == "$from" ]] && to=${M[1]}
[[ $(ask "get $q") == v-$q ]] || fail "get $q before the migration"
src_id=$(cluster_cli "$from" CLUSTER MYID)
dst_id=$(cluster_cli "$to" CLUSTER MYID)
[[ $(cluster_cli "$to" CLUSTER SETSLOT "$slot" IMPORTING "$src_id") == OK ]] || fail "IMPORTING"
[[ $(cluster_cli "$from" CLUSTER SETSLOT "$slot" MIGRATING "$dst_id") == OK ]] || fail "MIGRATING"
[[ $(cluster_cli "$from" MIGRATE 127.0.0.1 "$to" "sluice:{$q}:probe" 0 5000) == OK ]] ||
    fail "MIGRATE"
before=$(ask stats)
[[ $(ask "get $q") == v-$q ]] || fail "get $q with the key moved (ASK)"
# A new key of the slot goes to the importing node.
[[ $(ask "cmd $q SET sluice:{$q}:new n1") == OK ]] || fail "SET of a new key during the migration"
after=$(ask stats)
[[ $before =~ ask=([0-9]+) ]] && n0=${BASH_REMATCH[1]}
[[ $after =~ ask=([0-9]+) ]] && n1=${BASH_REMATCH[1]}
((n1 >= n0 + 2)) || fail "ASK not followed twice: $before / $after"
[[ $(ask "node $q") == "127.0.0.1:$from "* ]] || fail "ASK changed the map"
# A script is refused by the migration guard until the slot has moved.
out=$("$P" --deadline 700 "$URL" create $q) && fail "create during a migration succeeded: $out"
[[ $out == *"non local key"* || $out == *TRYAGAIN* ]] || fail "create during a migration: $out"
for p in "${M[@]}"; do cluster_cli "$p" CLUSTER SETSLOT "$slot" NODE "$dst_id" >/dev/null; done
[[ $(cluster_cli "$to" GET "sluice:{$q}:new") == n1 ]] || fail "the new key is not on $to"
[[ $(ask "create $q") == 1 ]] || fail "create after the migration"
[[ $(cluster_cli "$to" EXISTS "sluice:{$q}:meta") == 1 ]] || fail "$q's meta not on $to"
note "ASK followed ($from -> $to, half done), scripts wait for the end of the migration"

# ---- failover ----------------------------------------------------------------
q=q5
master=$(port_of_queue $q)
replica=$(cluster_replica_of "$master") || fail "no replica of $master"
[[ $(ask "set $q before") == OK ]] || fail "set $q"
cluster_cli "$master" WAIT 1 2000 >/dev/null
[[ $(ask "node $q") == "127.0.0.1:$master wait=1" ]] || fail "node $q before the failover"
bg "$T/follow.out" "$T/follow.err" "$P" "$URL" follow $q 8
follow_pid=$BG_PID
sleep 1
t0=$(date +%s%N)
cluster_kill_port "$master"
# Sent at once: the router retries until the replica has taken over.
[[ $(ask "get $q") == before ]] || fail "get $q across the failover"
ms=$((($(date +%s%N) - t0) / 1000000))
[[ $(port_of_queue $q) == "$replica" ]] || fail "the cluster did not promote $replica"
# The new master has no live replica: writes no longer WAIT.
got=$(ask "node $q")
[[ $got == "127.0.0.1:$replica wait=0" ]] || fail "node $q after the failover: $got"
[[ $(ask "set $q after") == OK ]] || fail "set $q after the failover"
wait_pid "$follow_pid" 30 || fail "follow failed: $(cat "$T/follow.out" "$T/follow.err")"
fo=$(cat "$T/follow.out")
last=$(tail -n 1 "$T/follow.out")
[[ $fo == *"node 127.0.0.1:$master"* ]] || fail "follow did not start on $master: $fo"
[[ $last == *" node=127.0.0.1:$replica" ]] || fail "follow did not move to $replica: $fo"
(($(kv ok "$last") > 20)) || fail "follow made too little progress: $fo"
n=$(cluster_cli "$replica" GET "sluice:{$q}:follow")
((n >= $(kv ok "$last") - 10)) || fail "follow counted $(kv ok "$last"), the new master has $n"
note "failover: $master -> $replica, found after $ms ms; follow: $last"

printf 'quit\n' >&"${PROBE[1]}"
echo "cluster_router: ok"
