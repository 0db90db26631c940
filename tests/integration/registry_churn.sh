#!/usr/bin/env bash
# Producers and consumers that leave are pruned from the registries, and
# the series sluice-ctl metrics exports come back to the live ones, with
# totals unchanged (their counters folded into pstats_gone / cstats_gone):
#  - 20 producers blocked at the budget (8 batches, no consumer): 6 killed
#    -9, 6 stopped with SIGTERM (their last beat unregisters them at once);
#    after 5 s (the least a producer is given) the live producers' beats prune the killed ones.
#    The registry, pstats:* and the exported producer series are the 8
#    live ones; sum of the live counters + the folded ones = the queue's
#    pushed count, before and after; the killed ones leave pgone:<id> (an
#    hour).
#  - 12 consumers: 8 read 2 batches and close, 4 are killed -9 holding
#    batches; a reap after the lease prunes those (their batches go back).
#    No consumer is left in consumers, ctoken, crank or cstats:*, the
#    folded batches equal what stat showed before the prune, and sluice-ctl
#    metrics exports no consumer series but the left="1" ones.
#  - a producer frozen (SIGSTOP) past 5 s is pruned, and registered again
#    when it goes on (SIGCONT), its folded counters taken out again; so is
#    a consumer frozen past its lease, reaped, then told it lost its lease.
#  - the job of the queue ends: every producer left, the registry is
#    empty, pstats_gone holds every batch pushed.
# shellcheck source=tests/lib/integration.sh
# test: long (about 30 s: leases of 1 s run out many times)
. "$(dirname "$0")/../lib/integration.sh"
need_bin sluice-ctl sluice-producer sluice-consume gen-tfrecord hold

redis_tmp_start
q=churn
k() { echo "sluice:{$q}:$1"; }
gen "$T/in.tfrecord" 100 3 10 100 >/dev/null
ctl create "$q" --max-batches 8 --max-bytes 1M --lease-ms 1000 >/dev/null
declare -A P
for i in $(seq -w 0 19); do
    bg "$T/p$i.out" "$T/p$i.err" "$BUILD/sluice-producer" --redis "$REDIS_URL" --queue "$q" \
        --id "p-$i" --batch-size 10 --quiet "$T/in.tfrecord"
    P[$i]=$BG_PID
done
# num HASH FIELD: the field's value, 0 when absent.
num() { local v; v=$(rcli HGET "$(k "$1")" "$2"); echo "${v:-0}"; }
# batches_sum p|c: batches of every producer's (p) or consumer's (c)
# published counters plus the folded ones.
batches_sum() {
    local s=0 id reg=producers
    [[ $1 == c ]] && reg=consumers
    for id in $(rcli HKEYS "$(k $reg)"); do
        s=$((s + $(num "${1}stats:$id" batches)))
    done
    echo $((s + $(num "${1}stats_gone" batches)))
}
pstats_sum() { batches_sum p; }
csum() { batches_sum c; }
all_blocked() {
    [[ $(rcli HLEN "$(k producers)") == 20 && $(rcli HGET "$(k stats)" pushed) == 8 ]] || return 1
    local id
    for id in $(rcli HKEYS "$(k producers)"); do
        [[ -n $(rcli HGET "$(k "pstats:$id")" batches) ]] || return 1
    done
    [[ $(pstats_sum) == 8 ]]
}
wait_for 20 all_blocked || fail "20 producers not registered and blocked: $(rcli HLEN "$(k producers)") registered, pushed $(rcli HGET "$(k stats)" pushed)"

note "6 producers killed -9, 6 stopped"
for i in 00 01 02 03 04 05; do kill -KILL "${P[$i]}"; done
for i in 06 07 08 09 10 11; do kill -TERM "${P[$i]}"; done
for i in 06 07 08 09 10 11; do
    rc=0; wait_pid "${P[$i]}" 10 || rc=$?
    ((rc == 0 || rc == 130 || rc == 143)) || fail "producer p-$i exit $rc on SIGTERM: $(cat "$T/p$i.err")"
    [[ -z $(rcli HGET "$(k producers)" "p-$i") ]] || fail "p-$i still registered after it exited"
done
pruned() {
    [[ $(rcli HLEN "$(k producers)") == 8 && $(rcli HGET "$(k pstats_gone)" left) == 12 ]]
}
wait_for 20 pruned || fail "after the lease: $(rcli HLEN "$(k producers)") producers registered, $(rcli HGET "$(k pstats_gone)" left) left"
[[ $(rcli --scan --pattern "$(k 'pstats:*')" | wc -l) == 8 ]] || fail "pstats:* keys: $(rcli --scan --pattern "$(k 'pstats:*')")"
[[ $(rcli HLEN "$(k ptoken)") == 8 ]] || fail "ptoken holds $(rcli HLEN "$(k ptoken)") producers"
[[ $(pstats_sum) == "$(rcli HGET "$(k stats)" pushed)" ]] ||
    fail "producers' batches $(pstats_sum) != pushed $(rcli HGET "$(k stats)" pushed) after the prune"
ttl=$(rcli PTTL "$(k pgone:p-00)")
((ttl > 0 && ttl <= 3600000)) || fail "pgone:p-00 of a killed producer: PTTL $ttl"
[[ $(rcli EXISTS "$(k pgone:p-06)") == 0 ]] || fail "a producer that closed left pgone:"

# The exported series: the live producers, and one left="1" series a counter.
port=$(redis_tmp_free_port)
bg "$T/m.out" "$T/m.err" "$BUILD/sluice-ctl" --redis "$REDIS_URL" metrics "$q" \
    --addr "127.0.0.1:$port" --interval-ms 100
mp=$BG_PID
scrape() { "$PY" -c 'import sys, urllib.request; print(urllib.request.urlopen(sys.argv[1], timeout=5).read().decode())' "http://127.0.0.1:$port/metrics"; }
wait_for 10 eval 'scrape >"$T/m1.txt" 2>/dev/null' || fail "no metrics: $(cat "$T/m.err")"
n=$(grep -c '^sluice_producer_alive{' "$T/m1.txt")
((n == 8)) || fail "sluice_producer_alive: $n series, want the 8 live producers"
grep -q '^sluice_producers_left{queue="churn"} 12$' "$T/m1.txt" || fail "no sluice_producers_left 12"
sum=$(awk '/^sluice_producer_batches_pushed_total\{/ { s += $NF } END { print s }' "$T/m1.txt")
[[ $sum == "$(rcli HGET "$(k stats)" pushed)" ]] ||
    fail "exported producers' batches add up to $sum, pushed $(rcli HGET "$(k stats)" pushed)"
grep -q '^sluice_producer_batches_pushed_total{queue="churn",left="1"} ' "$T/m1.txt" ||
    fail "no left=\"1\" series"

note "12 consumers: 8 close, 4 killed"
for i in $(seq 1 8); do
    "$BUILD/sluice-consume" --redis "$REDIS_URL" --queue "$q" --consumer-id "c-$i" --count 2 \
        --quiet >/dev/null 2>"$T/c$i.err" || fail "consumer c-$i: $(cat "$T/c$i.err")"
    [[ -z $(rcli HGET "$(k consumers)" "c-$i") ]] || fail "c-$i still registered after it closed"
done
H=()
for i in 1 2 3 4; do
    bg "$T/h$i.out" "$T/h$i.err" "$BUILD/hold" --redis "$REDIS_URL" --queue "$q" --count 1 \
        --prefetch 1
    H+=("$BG_PID")
done
wait_for 20 eval '[[ $(cat "$T"/h?.out 2>/dev/null | grep -c "^held 1") == 4 ]]' ||
    fail "4 consumers did not take a batch each: $(cat "$T"/h?.out "$T"/h?.err)"
# Until each has published its counters once.
published() {
    local id
    [[ $(rcli HLEN "$(k consumers)") == 4 ]] || return 1
    for id in $(rcli HKEYS "$(k consumers)"); do
        [[ -n $(rcli HGET "$(k "cstats:$id")" batches) ]] || return 1
    done
}
wait_for 10 published || fail "the 4 holding consumers did not publish counters"
for h in "${H[@]}"; do kill -KILL "$h"; done
before=$(csum)
reaped() { ctl reap "$q" >/dev/null && [[ $(rcli HLEN "$(k consumers)") == 0 ]]; }
wait_for 10 reaped || fail "the killed consumers were not reaped: $(rcli HKEYS "$(k consumers)")"
for h in ctoken crank; do
    [[ $(rcli HLEN "$(k "$h")") == 0 ]] || fail "$h still holds $(rcli HKEYS "$(k "$h")")"
done
[[ -z $(rcli --scan --pattern "$(k 'cstats:*')") ]] || fail "cstats:* left: $(rcli --scan --pattern "$(k 'cstats:*')")"
[[ $(csum) == "$before" ]] || fail "consumers' batches $before before the reap, $(csum) after"
[[ $(num cstats_gone left) == 12 ]] || fail "cstats_gone left $(rcli HGET "$(k cstats_gone)" left)"
wait_for 10 eval 'scrape >"$T/m2.txt" 2>/dev/null && grep -q "^sluice_consumers_left{queue=\"churn\"} 12$" "$T/m2.txt"' ||
    fail "sluice_consumers_left is not 12"
grep -q '^sluice_consumer_alive{' "$T/m2.txt" && fail "consumer series of consumers that left"
[[ $(awk '/^sluice_consumer_batches_total\{/ { s += $NF } END { print s }' "$T/m2.txt") == "$before" ]] ||
    fail "exported consumers' batches differ from $before"

note "a producer and a consumer frozen past their leases come back"
kill -STOP "${P[12]}"
wait_for 20 eval '[[ $(rcli EXISTS "$(k pgone:p-12)") == 1 ]]' || fail "frozen p-12 not pruned"
[[ $(num pstats_gone left) == 13 && $(pstats_sum) == "$(num stats pushed)" ]] ||
    fail "p-12 pruned: left $(num pstats_gone left), batches $(pstats_sum), pushed $(num stats pushed)"
kill -CONT "${P[12]}"
back() {
    [[ -n $(rcli HGET "$(k producers)" p-12) && $(rcli EXISTS "$(k pgone:p-12)") == 0 &&
       $(num pstats_gone left) == 12 ]]
}
wait_for 10 back || fail "p-12 back: registered '$(rcli HGET "$(k producers)" p-12)', left $(num pstats_gone left)"
[[ $(pstats_sum) == "$(num stats pushed)" ]] || fail "after p-12 came back: $(pstats_sum) batches"
bg "$T/hf.out" "$T/hf.err" "$BUILD/hold" --redis "$REDIS_URL" --queue "$q" --count 1 --prefetch 1
hf=$BG_PID
wait_for 20 in_file "$T/hf.out" "^held 1" || fail "the consumer to freeze got no batch: $(cat "$T/hf.err")"
wait_for 10 published || true
wait_for 10 eval '[[ $(rcli HLEN "$(k consumers)") == 1 ]]' || fail "no consumer registered"
cf=$(rcli HKEYS "$(k consumers)")
wait_for 10 eval '[[ -n $(rcli HGET "$(k "cstats:$cf")" batches) ]]' || fail "$cf published nothing"
before=$(csum)
kill -STOP "$hf"
wait_for 10 eval 'ctl reap "$q" >/dev/null && [[ $(rcli EXISTS "$(k "cgone:$cf")") == 1 ]]' ||
    fail "frozen consumer $cf not reaped"
[[ $(num cstats_gone left) == 13 && $(csum) == "$before" ]] || fail "$cf reaped: $(csum) batches, $before before"
kill -CONT "$hf"
# Told its lease was lost, it registers again: its counters are its own again.
cback() {
    [[ -n $(rcli HGET "$(k consumers)" "$cf") && $(rcli EXISTS "$(k "cgone:$cf")") == 0 &&
       $(num cstats_gone left) == 12 ]]
}
wait_for 15 cback || fail "$cf back: registered '$(rcli HGET "$(k consumers)" "$cf")', left $(num cstats_gone left)"
kill -KILL "$hf"
wait_for 10 eval 'ctl reap "$q" >/dev/null && [[ $(rcli HLEN "$(k consumers)") == 0 ]]' ||
    fail "$cf not reaped after its kill"

note "the rest of the queue drained: every producer leaves"
"$BUILD/sluice-consume" --redis "$REDIS_URL" --queue "$q" --timeout-ms 3000 --quiet >/dev/null \
    2>"$T/drain.err" || fail "drain: $(cat "$T/drain.err")"
for i in $(seq -w 12 19); do
    rc=0; wait_pid "${P[$i]}" 30 || rc=$?
    ((rc == 0)) || fail "producer p-$i exit $rc: $(cat "$T/p$i.err")"
done
[[ $(rcli HLEN "$(k producers)") == 0 && $(rcli HLEN "$(k ptoken)") == 0 ]] ||
    fail "producers left registered: $(rcli HKEYS "$(k producers)")"
[[ $(rcli HGET "$(k pstats_gone)" left) == 20 ]] || fail "pstats_gone left $(rcli HGET "$(k pstats_gone)" left)"
[[ $(rcli HGET "$(k pstats_gone)" batches) == "$(rcli HGET "$(k stats)" pushed)" ]] ||
    fail "folded batches $(rcli HGET "$(k pstats_gone)" batches) != pushed $(rcli HGET "$(k stats)" pushed)"
kill -INT "$mp"

note "delete leaves no key behind, the tombstones of reaped peers included"
[[ -n $(rcli --scan --pattern "sluice:{$q}:[pc]gone:*") ]] ||
    fail "no pgone:/cgone: key before the delete: nothing for it to sweep"
ctl delete "$q" >/dev/null || fail "delete failed"
left=$(rcli --scan --pattern "sluice:{$q}:*")
[[ -z $left ]] || fail "delete left keys: $left"
echo "ok: 20 producers and 12 consumers churned; registries back to the live ones, totals kept"
