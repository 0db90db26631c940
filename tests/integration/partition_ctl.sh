#!/usr/bin/env bash
# sluice-ctl on partitioned queues, on one plain redis-server:
#  1. create Q --partitions 4 makes the queues Q#0..Q#3 (meta partitions 4,
#     partition p, the same budgets each); info, info --json, stat,
#     stat --json and metrics show the sums and a line per partition;
#     creating Q again (plain or partitioned), or a partitioned queue over
#     a plain one, is refused; bad --partitions values and names (a '#',
#     too long for "#<P-1>") are usage errors (exit 2) before anything is
#     written.
#  2. submit splits the job (its shuffle buffer and drop_remainder in
#     every partition): shard s goes to partition s mod 4, each
#     partition's job has its own ntasks, the definitions of its shards
#     (under their global numbers, as a plain queue gets them) and each
#     epoch's order filtered to its shards; jobs shows the sums. A job with
#     fewer shards than partitions, a second job while one runs, and a
#     submit to a single partition are refused with nothing written.
#  3. dead lists and purges the dead letters of every partition; reap runs
#     on every partition; delete removes every partition, also when one is
#     missing: nothing of the queue is left in Redis.
#  4. A list of two servers, redis://A,redis://B: --partitions 4 puts
#     partitions 0 and 2 on A, 1 and 3 on B; info names each one's node;
#     delete empties both.
#  5. create and submit sent again after a lost reply (the router sends a
#     script again after a failover) find their own work by its time stamp
#     and succeed; the same calls with another time stamp are refused.
# shellcheck source=tests/lib/integration.sh
. "$(dirname "$0")/../lib/integration.sh"
need_bin sluice-ctl

redis_tmp_start --enable-debug-command local
# keys: every key in the current server, sorted, one a line.
keys() { rcli --scan | sort; }

failures=0
# expect CODE REGEX CMD...: CMD exits CODE, its first stderr line matches
# REGEX (extended, case-insensitive), nothing is on stdout, and Redis
# holds the same keys and values before and after.
expect() {
    local code=$1 re=$2 rc=0 before after
    shift 2
    before=$(keys; rcli DEBUG DIGEST 2>/dev/null || true)
    "$@" >"$T/out" 2>"$T/err" </dev/null || rc=$?
    after=$(keys; rcli DEBUG DIGEST 2>/dev/null || true)
    local what="[${*:4}]" first
    first=$(head -n 1 "$T/err")
    if ((rc != code)); then
        echo "FAIL $what: exit $rc, expected $code; stderr: $(cat "$T/err")"
    elif ! grep -qiE -- "$re" <<<"$first"; then
        echo "FAIL $what: first stderr line does not match /$re/: '$first'"
    elif [[ -s $T/out ]]; then
        echo "FAIL $what: output on stdout: $(head -c 300 "$T/out")"
    elif [[ $before != "$after" ]]; then
        echo "FAIL $what: refused, but Redis changed"
    else
        echo "ok   $what -> $rc: $first"
        return 0
    fi
    failures=$((failures + 1))
}

# ---- 1. create, info, stat ----------------------------------------------------
note "create --partitions 4"
out=$(ctl create pq --max-batches 8 --max-bytes 1M --lease-ms 5000 --partitions 4) ||
    fail "create --partitions 4 failed: $out"
note "$out"
grep -q "partitions" <<<"$out" || fail "create does not say it made partitions: $out"
want=$(for p in 0 1 2 3; do printf 'sluice:{pq#%d}:bytes\nsluice:{pq#%d}:meta\n' "$p" "$p"; done)
[[ $(keys) == "$want" ]] || fail "keys after create: $(keys | paste -sd' ')"
for p in 0 1 2 3; do
    m="sluice:{pq#$p}:meta"
    [[ $(rcli HGET "$m" partitions) == 4 && $(rcli HGET "$m" partition) == "$p" ]] ||
        fail "$m: partitions '$(rcli HGET "$m" partitions)', partition '$(rcli HGET "$m" partition)'"
    [[ $(rcli HGET "$m" max_batches) == 8 && $(rcli HGET "$m" max_bytes) == 1048576 &&
       $(rcli HGET "$m" lease_ms) == 5000 ]] || fail "$m does not have the budgets and lease: $(rcli HGETALL "$m" | paste -sd' ')"
done

info=$(ctl info pq) || fail "info pq failed"
note "$info"
grep -qx 'partitions: 4' <<<"$info" || fail "info has no 'partitions: 4'"
grep -qx 'max_batches: 32' <<<"$info" || fail "info does not sum the batch budgets"
grep -qx 'max_bytes: 4194304' <<<"$info" || fail "info does not sum the byte budgets"
grep -qx 'lease_ms: 5000' <<<"$info" || fail "info lost the lease"
for p in 0 1 2 3; do
    grep -qE "^partition $p: pq#$p on redis://127\.0\.0\.1:$REDIS_PORT/0, batches 0/8, bytes 0/1048576" <<<"$info" ||
        fail "info has no line for partition $p"
done
ctl info pq --json >"$T/info.json" || fail "info --json failed"
"$PY" - "$T/info.json" <<'PYEOF' || fail "info --json: $(cat "$T/info.json")"
import json, sys
o = json.load(open(sys.argv[1]))
assert o["queue"] == "pq" and o["meta"]["max_batches"] == 32, o["meta"]
assert o["meta"]["partitions"] == 4 and "partition" not in o["meta"], o["meta"]
ps = o["partitions"]
assert [p["partition"] for p in ps] == [0, 1, 2, 3], ps
assert all(p["queue"] == "pq#%d" % p["partition"] and p["max_batches"] == 8 and
           p["max_bytes"] == 1048576 and p["batches"] == 0 and p["job"] is None for p in ps), ps
PYEOF
stat=$(ctl stat pq) || fail "stat pq failed"
grep -qF '0/32 batches' <<<"$stat" || fail "stat does not show the summed budget: $stat"
grep -qx 'partitions 4' <<<"$stat" || fail "stat has no 'partitions 4' line: $stat"
[[ $(grep -cE "^  [0-3]  redis://127\.0\.0\.1:$REDIS_PORT/0  batches 0/8 \(0%\)  bytes 0 B/1\.0 MiB \(0%\)" <<<"$stat") == 4 ]] ||
    fail "stat lacks a line per partition: $stat"
ctl stat pq --json >"$T/stat.json" || fail "stat --json failed"
"$PY" -c 'import json,sys; o=json.load(open(sys.argv[1])); assert o["max_batches"] == 32 and len(o["partitions"]) == 4, o' \
    "$T/stat.json" || fail "stat --json: $(cat "$T/stat.json")"

# The metrics endpoint: the sums, and the partitions' own gauges.
mport=$(redis_tmp_free_port)
bg "$T/m.out" "$T/m.err" "$BUILD/sluice-ctl" --redis "$REDIS_URL" metrics pq --addr "127.0.0.1:$mport"
mpid=$BG_PID
"$PY" - "http://127.0.0.1:$mport/metrics" >"$T/metrics.txt" <<'PYEOF' || fail "metrics: $(cat "$T/m.err")"
import sys, time, urllib.request
for _ in range(100):
    try:
        print(urllib.request.urlopen(sys.argv[1], timeout=5).read().decode())
        break
    except OSError:
        time.sleep(0.05)
else:
    sys.exit(1)
PYEOF
kill -TERM "$mpid"
rc=0; wait_pid "$mpid" 5 || rc=$?
((rc == 0)) || fail "metrics exit $rc on SIGTERM: $(cat "$T/m.err")"
grep -qx 'sluice_queue_max_batches{queue="pq"} 32' "$T/metrics.txt" ||
    fail "metrics: no summed budget: $(grep max_batches "$T/metrics.txt")"
grep -qx 'sluice_queue_partitions{queue="pq"} 4' "$T/metrics.txt" || fail "metrics: no partition count"
[[ $(grep -c '^sluice_partition_max_batches{queue="pq",partition="[0-3]"} 8$' "$T/metrics.txt") == 4 ]] ||
    fail "metrics: no budget per partition: $(grep partition "$T/metrics.txt")"

note "refused creates"
ctl create plainq --max-batches 4 --max-bytes 1M >/dev/null || fail "create plainq failed"
expect 1 "'pq' exists already" "$BUILD/sluice-ctl" --redis "$REDIS_URL" create pq --max-batches 4 --max-bytes 1M
expect 1 "'pq' exists already" "$BUILD/sluice-ctl" --redis "$REDIS_URL" create pq --max-batches 4 --max-bytes 1M --partitions 2
expect 1 "'plainq' exists already" "$BUILD/sluice-ctl" --redis "$REDIS_URL" create plainq --max-batches 4 --max-bytes 1M --partitions 2
expect 2 "partitions.*0" "$BUILD/sluice-ctl" --redis "$REDIS_URL" create n1 --max-batches 4 --max-bytes 1M --partitions 0
expect 2 "partitions.*1025|1024" "$BUILD/sluice-ctl" --redis "$REDIS_URL" create n1 --max-batches 4 --max-bytes 1M --partitions 1025
expect 2 "partitions.*abc" "$BUILD/sluice-ctl" --redis "$REDIS_URL" create n1 --max-batches 4 --max-bytes 1M --partitions abc
expect 2 "partitions needs a value" "$BUILD/sluice-ctl" --redis "$REDIS_URL" create n1 --max-batches 4 --max-bytes 1M --partitions
expect 2 "'#'" "$BUILD/sluice-ctl" --redis "$REDIS_URL" create 'n#1' --max-batches 4 --max-bytes 1M --partitions 2
expect 2 "'#'" "$BUILD/sluice-ctl" --redis "$REDIS_URL" create 'n#' --max-batches 4 --max-bytes 1M
long125=$(printf 'a%.0s' {1..125})
expect 2 "too long.*1000 partitions" "$BUILD/sluice-ctl" --redis "$REDIS_URL" create "$long125" --max-batches 4 --max-bytes 1M --partitions 1000
# 124 bytes and "#999" is 128: just fits.
long124=${long125:1}
ctl create "$long124" --max-batches 4 --max-bytes 1M --partitions 1000 >/dev/null ||
    fail "a name of 124 bytes with 1000 partitions was refused"
[[ $(rcli HGET "sluice:{$long124#999}:meta" partition) == 999 ]] || fail "partition 999 of the long name is missing"
ctl delete "$long124" >"$T/out" || fail "delete of the 1000 partitions failed"
grep -qF '(1000 partitions,' "$T/out" || fail "delete: $(cat "$T/out")"
[[ -z $(rcli --scan --pattern "sluice:{$long124*") ]] || fail "keys of the 1000 partitions left"

# ---- 2. submit ------------------------------------------------------------------
note "submit"
printf 'l%s\n' {0..11} >"$T/lines.txt"
printf 'lines lines.txt split=6\n' >"$T/six.manifest"
printf 'lines lines.txt split=3\n' >"$T/three.manifest"
S=(--epochs 2 --batch-size 2 --shuffle-seed 11)
out=$(ctl submit plainq --manifest "$T/six.manifest" "${S[@]}") || fail "submit to plainq: $out"
out=$(ctl submit pq --manifest "$T/six.manifest" "${S[@]}" --shuffle-buffer 3 --drop-remainder) ||
    fail "submit to pq: $out"
note "$out"
grep -qF "submitted 12 tasks" <<<"$out" || fail "submit to pq: $out"
# Shard s to partition s mod 4: 0 and 4 to #0, 1 and 5 to #1, 2 to #2, 3 to #3.
declare -A want_shards=([0]="0 4" [1]="1 5" [2]="2" [3]="3")
for p in 0 1 2 3; do
    read -ra sh <<<"${want_shards[$p]}"
    [[ $(rcli HGET "sluice:{pq#$p}:job" ntasks) == "${#sh[@]}" ]] ||
        fail "partition $p: ntasks $(rcli HGET "sluice:{pq#$p}:job" ntasks), expected ${#sh[@]}"
    [[ $(rcli HGET "sluice:{pq#$p}:job" epochs) == 2 ]] || fail "partition $p: epochs"
    [[ $(rcli HMGET "sluice:{pq#$p}:job" shuffle_buffer drop_remainder | paste -sd' ') == "3 1" ]] ||
        fail "partition $p: shuffle_buffer, drop_remainder not 3 and 1"
    [[ $(rcli HKEYS "sluice:{pq#$p}:taskdef" | sort -n | paste -sd' ') == "${want_shards[$p]}" ]] ||
        fail "partition $p has the definitions of shards $(rcli HKEYS "sluice:{pq#$p}:taskdef" | paste -sd' ')"
    for s in "${sh[@]}"; do
        [[ $(rcli HGET "sluice:{pq#$p}:taskdef" "$s") == "$(rcli HGET "sluice:{plainq}:taskdef" "$s")" ]] ||
            fail "partition $p: definition of shard $s differs from the plain queue's"
    done
    # The tasks in each epoch's order, without the other partitions' shards.
    mine=$(for e in 0 1; do rcli LRANGE "sluice:{pq#$p}:tasks:$e" 0 -1; done | paste -sd' ')
    expected=$(for e in 0 1; do rcli LRANGE "sluice:{plainq}:tasks:$e" 0 -1; done |
        awk -F: -v p="$p" '$2 % 4 == p' | paste -sd' ')
    [[ $mine == "$expected" ]] || fail "partition $p tasks '$mine', expected '$expected'"
done
jobs=$(ctl jobs pq) || fail "jobs pq failed"
note "$jobs"
grep -qx 'shards: 6' <<<"$jobs" && grep -qx 'tasks: 12' <<<"$jobs" && grep -qx 'tasks_waiting: 12' <<<"$jobs" ||
    fail "jobs does not show the sums: $jobs"
if ! grep -qx 'shuffle_buffer: 3' <<<"$jobs" || ! grep -qx 'drop_remainder: yes' <<<"$jobs"; then
    fail "jobs does not show the job's shuffle_buffer and drop_remainder: $jobs"
fi
grep -qE '^partition 0: pq#0, job running, epoch_open 0, shards 2, tasks_waiting 4' <<<"$jobs" &&
    grep -qE '^partition 3: pq#3, job running, epoch_open 0, shards 1, tasks_waiting 2' <<<"$jobs" ||
    fail "jobs lacks the lines per partition: $jobs"

expect 1 "runs a job" "$BUILD/sluice-ctl" --redis "$REDIS_URL" submit pq --manifest "$T/six.manifest" "${S[@]}"
expect 2 "partition" "$BUILD/sluice-ctl" --redis "$REDIS_URL" submit 'pq#1' --manifest "$T/six.manifest" "${S[@]}"
ctl create pq2 --max-batches 4 --max-bytes 1M --partitions 4 >/dev/null || fail "create pq2 failed"
expect 1 "4 partitions.*3 shards" "$BUILD/sluice-ctl" --redis "$REDIS_URL" submit pq2 --manifest "$T/three.manifest" "${S[@]}"
# A job running in one partition only (left by hand) stops the whole submit
# before any partition is written.
rcli HSET 'sluice:{pq2#3}:jrun' state running epoch_open 0 epochs 1 >/dev/null
rcli HSET 'sluice:{pq2#3}:job' epochs 1 >/dev/null
expect 1 "runs a job.*partition 3" "$BUILD/sluice-ctl" --redis "$REDIS_URL" submit pq2 --manifest "$T/six.manifest" "${S[@]}"
rcli DEL 'sluice:{pq2#3}:job' 'sluice:{pq2#3}:jrun' >/dev/null

# ---- 3. dead, reap, delete -----------------------------------------------------------
note "dead, reap, delete"
rcli RPUSH 'sluice:{pq#2}:dead' 0:2:0 >/dev/null
rcli HSET 'sluice:{pq#2}:deadinfo' 0:2:0 '5 1700000000000 invalid: test' >/dev/null
rcli SET 'sluice:{pq#2}:deadb:0:2:0' hello >/dev/null
out=$(ctl dead pq) || fail "dead pq failed"
grep -qE '^0:2:0  5 bytes  2023-11-14T22:13:20\.000Z  partition 2  invalid: test$' <<<"$out" &&
    grep -qx '1 dead letter' <<<"$out" || fail "dead pq: $out"
out=$(ctl dead pq --purge) || fail "dead --purge failed"
grep -qx 'purged 1 dead letter' <<<"$out" || fail "dead --purge: $out"
[[ $(rcli EXISTS 'sluice:{pq#2}:deadb:0:2:0') == 0 ]] || fail "the dead letter's frame is left"
out=$(ctl reap pq) || fail "reap pq failed: $out"
expect 1 "'nosuch' does not exist" "$BUILD/sluice-ctl" --redis "$REDIS_URL" info nosuch
out=$(ctl delete pq) || fail "delete pq failed: $out"
note "$out"
grep -qE "^deleted queue 'pq' \(4 partitions, [0-9]+ keys\)$" <<<"$out" || fail "delete pq: $out"
# pq2 without its partition 2: delete removes the rest.
rcli DEL 'sluice:{pq2#2}:meta' 'sluice:{pq2#2}:bytes' >/dev/null
out=$(ctl delete pq2 2>"$T/err") || fail "delete of pq2 without partition 2 failed: $out $(cat "$T/err")"
grep -q "1 of its partitions did not exist" "$T/err" || fail "delete pq2 did not say a partition was missing: $(cat "$T/err")"
ctl delete plainq >/dev/null || fail "delete plainq failed"
[[ -z $(keys) ]] || fail "keys left after delete: $(keys | paste -sd' ')"
expect 1 "'pq' does not exist" "$BUILD/sluice-ctl" --redis "$REDIS_URL" info pq

# ---- 4. a list of two servers --------------------------------------------------------
note "a list of servers"
A=$REDIS_PORT
redis_tmp_start --enable-debug-command local
B=$REDIS_PORT
list="redis://127.0.0.1:$A,redis://127.0.0.1:$B"
"$BUILD/sluice-ctl" --redis "$list" create lq --max-batches 4 --max-bytes 1M --partitions 4 >/dev/null ||
    fail "create on a list of servers failed"
on() { redis-cli -p "$1" --raw --scan --pattern 'sluice:*:meta' | sort | paste -sd' '; }
[[ $(on "$A") == 'sluice:{lq#0}:meta sluice:{lq#2}:meta' ]] || fail "server A holds: $(on "$A")"
[[ $(on "$B") == 'sluice:{lq#1}:meta sluice:{lq#3}:meta' ]] || fail "server B holds: $(on "$B")"
info=$("$BUILD/sluice-ctl" --redis "$list" info lq) || fail "info on a list of servers failed"
grep -qF "partition 1: lq#1 on redis://127.0.0.1:$B/0" <<<"$info" &&
    grep -qF "partition 2: lq#2 on redis://127.0.0.1:$A/0" <<<"$info" || fail "info on a list: $info"
"$BUILD/sluice-ctl" --redis "$list" submit lq --manifest "$T/six.manifest" "${S[@]}" >/dev/null ||
    fail "submit on a list of servers failed"
[[ $(redis-cli -p "$B" --raw HGET 'sluice:{lq#1}:job' ntasks) == 2 ]] || fail "lq#1 has no job of 2 shards on B"
# A plain queue lives on the first server.
"$BUILD/sluice-ctl" --redis "$list" create lp --max-batches 4 --max-bytes 1M >/dev/null || fail "create lp"
[[ $(redis-cli -p "$A" --raw EXISTS 'sluice:{lp}:meta') == 1 ]] || fail "plain queue not on the first server"
"$BUILD/sluice-ctl" --redis "$list" delete lq >/dev/null || fail "delete on a list of servers failed"
"$BUILD/sluice-ctl" --redis "$list" delete lp >/dev/null || fail "delete lp failed"
[[ -z $(redis-cli -p "$A" --scan) && -z $(redis-cli -p "$B" --scan) ]] ||
    fail "keys left on the servers: $(redis-cli -p "$A" --scan) $(redis-cli -p "$B" --scan)"

# 5. A script sent again: what sluice-ctl sends is `sluice-ctl script NAME`.
create_src=$("$BUILD/sluice-ctl" script create) || fail "sluice-ctl script create"
submit_src=$("$BUILD/sluice-ctl" script submit) || fail "sluice-ctl script submit"
meta='sluice:{again}:meta'
create() { rcli EVAL "$create_src" 1 "$meta" 8 1048576 "$1" 0 '' 10000 3 65536 2>&1; }
step() { rcli EVAL "$submit_src" 1 "$meta" "$@" 2>&1; }
[[ $(create 111) == 1 ]] || fail "create: $(create 111)"
[[ $(create 111) == 1 ]] || fail "create sent again refused: $(create 111)"
[[ $(create 112) == *EXISTS* ]] || fail "create with another time stamp: $(create 112)"
[[ $(step begin t222 1 2 10 '' 3 20) == 0 ]] || fail "begin: $(step begin t222 1 2 10 '' 3 20)"
step defs t222 0 $'lines\t\t\ta' 1 $'lines\t\t\tb' >/dev/null
step tasks t222 0 0:1 0:0 >/dev/null
[[ $(step commit t222) == 2 ]] || fail "commit: $(step commit t222)"
[[ $(step commit t222) == 2 ]] || fail "commit sent again refused: $(step commit t222)"
[[ $(step begin t222 1 2 10 '' 3 20) == 0 ]] || fail "begin sent again after the commit: $(step begin t222 1 2 10 '' 3 20)"
[[ $(rcli LLEN 'sluice:{again}:tasks:0') == 2 ]] ||
    fail "submit sent again queued the tasks twice: $(rcli LRANGE 'sluice:{again}:tasks:0' 0 -1)"
[[ $(step begin t223 1 2 10 '' 3 20) == *JOBEXISTS* ]] || fail "submit with another token: $(step begin t223 1 2 10 '' 3 20)"
ctl delete again >/dev/null || fail "delete again"

((failures == 0)) || fail "$failures refused commands misbehaved"
echo "ok: partitioned queues: create, info, stat, metrics, submit split by shard, dead, reap, delete; a list of servers; create and submit sent again"
