#!/usr/bin/env bash
# Least privilege: three Redis users made from `sluice-ctl acl Q --role R`
# (admin, producer, consumer) run whole jobs, and each refuses what its
# role must not do.
#  1. A free queue, 2 epochs of 12 TFRecord shards: the admin creates and
#     submits, 2 producers and 2 consumers run with their own users; one
#     consumer is killed (kill -9) while it holds batches, and the others
#     (one with checkpoints on) take its place: every batch arrives once per
#     epoch (counts and checksums add up to the shards'), so the hand-back of a
#     dead consumer's batches (reap), acknowledgements, checkpoints, task
#     claims, renewals and epoch ends all ran under their role's ACL.
#  2. Coordinated queues of 3 ranks (remainder pad, then drop), 10 batches
#     in one epoch: the producer ending the epoch copies the last round
#     (pad) without the right to write a frame in place, or leaves it to a
#     consumer's reap to forget (drop): each rank gets its batches and the
#     end, and the dropped batch leaves the queue.
#  2b. A partitioned queue (3 partitions): the lines name every partition,
#     and a job runs with the three users.
#  3. Forbidden: with a consumer's user, sluice-ctl delete / submit / dead
#     --purge are refused naming the script and the admin role, and Redis
#     refuses DEL of meta, a budget change and a task definition change;
#     with a producer's user, acknowledging (SETBIT of the record, the ack
#     script), deleting or overwriting a frame, taking from a ready list,
#     removing a delivery count are refused, and sluice-consume with it
#     fails naming the consumer role; nothing refused changed the queue.
#  4. --aclfile: the lines, in a server's ACL file, make the very users
#     ACL SETUSER makes.
# shellcheck source=tests/lib/integration.sh
. "$(dirname "$0")/../lib/integration.sh"
need_bin sluice-ctl sluice-producer sluice-consume gen-tfrecord hold

redis_tmp_start
pw=acl-test-pw
# url USER: the server's address as that user.
url() { echo "redis://$1:$pw@127.0.0.1:$REDIS_PORT"; }
# as USER CMD...: redis-cli as that user (the password in REDISCLI_AUTH).
as() { REDISCLI_AUTH=$pw redis-cli -p "$REDIS_PORT" --user "$1" --no-auth-warning "${@:2}"; }
# users Q [ARGS...]: the three users of queue Q, from sluice-ctl acl.
users() {
    local role line
    for role in admin producer consumer; do
        line=$("$BUILD/sluice-ctl" acl "$1" --role "$role" --user "$1-$role" "${@:2}") ||
            fail "acl $1 --role $role failed: $line"
        [[ $line == "ACL SETUSER $1-$role reset on "* ]] || fail "acl printed: $line"
        rcli $line >/dev/null || fail "ACL SETUSER for $role refused: $line"
        rcli ACL SETUSER "$1-$role" ">$pw" >/dev/null
    done
}

# ---- 1. a free queue, 2 epochs -----------------------------------------------
q=aclq
users "$q" --partitions 1
shards=12 per=40
sums=()
for ((i = 0; i < shards; i++)); do
    line=$(gen "$T/s$i.tfrecord" "$per" $((900 + i)) 1 400)
    sums+=("$(kv checksum "$line")")
    echo "tfrecord s$i.tfrecord"
done >"$T/train.manifest"
want_sum=$(hexsum "${sums[@]}")
want=$((shards * per))
A=$(url "$q-admin") P=$(url "$q-producer") C=$(url "$q-consumer")
"$BUILD/sluice-ctl" --redis "$A" create "$q" --max-batches 8 --max-bytes 16M --lease-ms 1500 \
    >/dev/null || fail "admin: create failed"
"$BUILD/sluice-ctl" --redis "$A" submit "$q" --manifest "$T/train.manifest" --epochs 2 \
    --batch-size 5 >/dev/null || fail "admin: submit failed"

# The victim takes batches and dies holding them (kill -9): a reap
# hands them back. The two others, one with checkpoints, are registered
# before any batch flows: one that came late could find epoch 0 ended.
bg "$T/v.out" "$T/v.err" "$BUILD/hold" --redis "$C" --queue "$q" --count 3 --prefetch 4
victim=$BG_PID
for k in 1 2; do
    args=()
    ((k == 2)) && args=(--checkpoint-every 3 --checkpoint-file "$T/ckpt")
    bg "$T/c$k.out" "$T/c$k.err" "$BUILD/sluice-consume" --redis "$C" --queue "$q" \
        --consumer-id "c$k" --print-ids --summary --epochs --quiet "${args[@]}"
done
cons=("${_BG_PIDS[@]: -2}")
both_in() { [[ $(rcli HMGET "sluice:{$q}:consumers" c1 c2 | grep -c .) == 2 ]]; }
wait_for 30 both_in || fail "the consumers did not register: $(cat "$T"/c*.err)"
for k in 1 2; do
    bg "$T/p$k.out" "$T/p$k.err" "$BUILD/sluice-producer" --redis "$P" --queue "$q" --id "p$k"
done
prods=("${_BG_PIDS[@]: -2}")
wait_for 20 in_file "$T/v.out" '^held 3' || fail "the victim took no batch: $(cat "$T/v.err")"
kill -9 "$victim"
for p in "${prods[@]}"; do
    rc=0; wait_pid "$p" 90 || rc=$?
    ((rc == 0)) || fail "a producer exit $rc: $(cat "$T"/p*.err)"
done
for k in 1 2; do
    rc=0; wait_pid "${cons[k - 1]}" 90 || rc=$?
    ((rc == 0)) || fail "consumer $k exit $rc: $(cat "$T/c$k.err")"
done
# Every batch id of both epochs once, over the two consumers.
all=$(awk '$1 == "id" { print $2 }' "$T/c1.out" "$T/c2.out" | sort)
dups=$(uniq -d <<<"$all" | awk 'NR <= 3')
[[ -z $dups ]] || fail "batches delivered twice: $dups"
n=$(wc -l <<<"$all")
((n == 2 * shards * per / 5)) ||
    fail "$n batch ids over 2 epochs, expected $((2 * shards * per / 5))"
for e in 0 1; do
    n=$(grep -c "^$e:" <<<"$all" || true)
    ((n == shards * per / 5)) || fail "epoch $e: $n batch ids, expected $((shards * per / 5))"
done
# Records and checksums over both epochs: a batch the victim held comes
# back in its own epoch, but possibly after that epoch's end was posted
# (docs/PROTOCOL.md, "End of an epoch"), so it may count in the next line.
recs=0 esums=()
for k in 1 2; do
    for e in 0 1; do
        line=$(grep "^epoch=$e " "$T/c$k.out") ||
            fail "consumer $k: no epoch=$e line: $(tail -n 5 "$T/c$k.out" "$T/c$k.err")"
        recs=$((recs + $(kv records "$line")))
        esums+=("$(kv checksum "$line")")
    done
done
((recs == 2 * want)) || fail "$recs records over 2 epochs, expected $((2 * want))"
[[ $(hexsum "${esums[@]}") == "$(hexsum "$want_sum" "$want_sum")" ]] ||
    fail "the checksums do not add up to the shards'"
[[ -s $T/ckpt ]] || fail "the consumer with checkpoints saved none"
info=$("$BUILD/sluice-ctl" --redis "$A" info "$q") || fail "admin: info failed"
grep -qx "job: finished" <<<"$info" || fail "the job did not finish: $info"
grep -qx "tasks_failed: 0" <<<"$info" || fail "a task failed: $info"
note "free queue: 2 epochs x $want records once, over 4 users' processes"

# ---- 2. coordinated queues: pad and drop by a producer -----------------------
gen "$T/ten.tfrecord" 10 5 1 100 >/dev/null
echo "tfrecord ten.tfrecord" >"$T/ten.manifest"
for rem in pad drop; do
    q=acl-$rem
    users "$q" --partitions 1
    A=$(url "$q-admin") P=$(url "$q-producer") C=$(url "$q-consumer")
    "$BUILD/sluice-ctl" --redis "$A" create "$q" --max-batches 20 --max-bytes 16M \
        --consumers 3 --coordinated --remainder "$rem" >/dev/null || fail "$rem: create failed"
    "$BUILD/sluice-ctl" --redis "$A" submit "$q" --manifest "$T/ten.manifest" --epochs 1 \
        --batch-size 1 >/dev/null || fail "$rem: submit failed"
    pids=()
    for r in 0 1 2; do
        bg "$T/$rem$r.out" "$T/$rem$r.err" "$BUILD/sluice-consume" --redis "$C" --queue "$q" \
            --rank "$r" --world 3 --print-ids --summary --epochs --quiet
        pids+=("$BG_PID")
    done
    "$BUILD/sluice-producer" --redis "$P" --queue "$q" --quiet >/dev/null 2>"$T/$rem.perr" ||
        fail "$rem: the producer failed: $(cat "$T/$rem.perr")"
    for r in 0 1 2; do
        rc=0; wait_pid "${pids[r]}" 30 || rc=$?
        ((rc == 0)) || fail "$rem: rank $r exit $rc: $(cat "$T/$rem$r.err")"
        n=$(grep -c '^id ' "$T/$rem$r.out" || true)
        want_n=3; [[ $rem == pad ]] && want_n=4
        ((n == want_n)) || fail "$rem: rank $r got $n batches, expected $want_n"
        grep -q '^epoch=0 ' "$T/$rem$r.out" || fail "$rem: rank $r saw no end of epoch 0"
    done
done
# The dropped batch was left by the producer for a consumer's reap.
drop_gone() {
    [[ $(held acl-drop) == 0 && $(rcli LLEN "sluice:{acl-drop}:dropped") == 0 ]]
}
drop_gone || "$BUILD/sluice-ctl" --redis "$(url acl-drop-consumer)" reap acl-drop >/dev/null ||
    fail "reap as the consumer failed"
wait_for 10 drop_gone || fail "the dropped batch is still held"
note "coordinated: pad and drop ended their epoch under the producer's ACL"

# ---- 2b. a partitioned queue: the lines name every partition -----------------
q=aclp
A0=$(url "$q-admin")
rcli ACL SETUSER "$q-admin" reset on ">$pw" '~*' '+@all' >/dev/null
"$BUILD/sluice-ctl" --redis "$A0" create "$q" --max-batches 8 --max-bytes 16M --partitions 3 \
    >/dev/null || fail "partitioned: create failed"
SLUICE_REDIS_URL=$REDIS_URL users "$q"   # the partitions read from Redis
line=$("$BUILD/sluice-ctl" acl "$q" --role consumer --partitions 3)
[[ $line == *"sluice:{$q#2}:ready:*"* && $line != *"sluice:{$q#3}"* ]] ||
    fail "partitioned: the consumer's line does not name the 3 partitions: $line"
A=$(url "$q-admin") P=$(url "$q-producer") C=$(url "$q-consumer")
"$BUILD/sluice-ctl" --redis "$A" submit "$q" --manifest "$T/train.manifest" --epochs 1 \
    --batch-size 5 >/dev/null || fail "partitioned: submit failed"
bg "$T/pc.out" "$T/pc.err" "$BUILD/sluice-consume" --redis "$C" --queue "$q" --summary --quiet
pc=$BG_PID
"$BUILD/sluice-producer" --redis "$P" --queue "$q" --quiet >/dev/null 2>"$T/pp.err" ||
    fail "partitioned: the producer failed: $(cat "$T/pp.err")"
rc=0; wait_pid "$pc" 60 || rc=$?
((rc == 0)) || fail "partitioned: the consumer exit $rc: $(cat "$T/pc.err")"
line=$(grep '^records=' "$T/pc.out") || fail "partitioned: no summary: $(cat "$T/pc.out")"
(($(kv records "$line") == want)) && [[ $(kv checksum "$line") == "$want_sum" ]] ||
    fail "partitioned: $line, expected records=$want checksum=$want_sum"
out=$(as "$q-consumer" HSET "sluice:{$q#1}:meta" max_bytes 1 2>&1)
[[ $out == NOPERM* ]] || fail "partitioned: the consumer changed a partition's budget: $out"
note "partitioned: a job over 3 partitions with the three users"

# ---- 3. what each role may not do --------------------------------------------
q=aclq
C=$(url "$q-consumer") P=$(url "$q-producer")
snap() {
    rcli --raw DUMP "sluice:{$q}:meta" | od -c | md5sum
    rcli HGETALL "sluice:{$q}:taskdef" | md5sum
}
before=$(snap)
# refused NAME CMD...: CMD fails, and its error names what it must.
refused() {
    local what=$1 out rc=0
    shift
    out=$("$@" 2>&1) || rc=$?
    ((rc != 0)) || fail "$what: not refused: $out"
    printf '%s\n' "$out"
}
for cmd in "delete $q" "dead $q --purge" \
           "submit $q --manifest $T/train.manifest --epochs 1 --batch-size 5"; do
    name=${cmd%% *}
    [[ $name == dead ]] && script=deadadmin || script=$name
    # shellcheck disable=SC2086
    out=$(refused "consumer: $name" "$BUILD/sluice-ctl" --redis "$C" $cmd)
    grep -q "permission denied: Redis refused the $script script, which is the admin role's" \
        <<<"$out" || fail "consumer: $name: the error does not name the script and role: $out"
    ! grep -q "deleted only in part" <<<"$out" ||
        fail "consumer: $name: says a part was deleted: $out"
done
out=$(as "$q-consumer" DEL "sluice:{$q}:meta" 2>&1)
[[ $out == NOPERM* ]] || fail "consumer: DEL meta: $out"
out=$(as "$q-consumer" HSET "sluice:{$q}:meta" max_bytes 1 2>&1)
[[ $out == NOPERM* ]] || fail "consumer: a budget change: $out"
out=$(as "$q-consumer" HSET "sluice:{$q}:taskdef" 0 "lines	0		/proc/self/environ" 2>&1)
[[ $out == NOPERM* ]] || fail "consumer: a task definition change: $out"
[[ $(snap) == "$before" ]] || fail "the queue's meta or task definitions changed"

# A batch in the queue for the producer's attempts on it.
"$BUILD/sluice-producer" --redis "$P" --queue "$q" --id px "$T/s0.tfrecord" --batch-size 5 \
    >/dev/null 2>"$T/px.err" || fail "files-mode producer failed: $(cat "$T/px.err")"
id=$(rcli HKEYS "sluice:{$q}:dlv" | grep -vx '~' | head -n 1)
[[ -n $id ]] || fail "no batch in the queue"
e=${id%%:*} rest=${id#*:} t=${rest%%:*} s=${id##*:}
frame=$(rcli GET "sluice:{$q}:b:$id" | md5sum)
for c in "SETBIT sluice:{$q}:acked:$e:$t $s 1" "DEL sluice:{$q}:b:$id" \
         "SET sluice:{$q}:b:$id x" "RENAMENX sluice:{$q}:b:$id sluice:{$q}:in:x" \
         "RPOP sluice:{$q}:ready:$e" "HDEL sluice:{$q}:dlv $id" \
         "LREM sluice:{$q}:ready:$e 0 $id" "UNLINK sluice:{$q}:meta"; do
    # shellcheck disable=SC2086
    out=$(as "$q-producer" $c 2>&1)
    [[ $out == NOPERM* ]] || fail "producer: $c: $out"
done
ack=$("$BUILD/sluice-ctl" script ack | sha1sum | cut -d' ' -f1)
out=$(as "$q-producer" EVALSHA "$ack" 1 "sluice:{$q}:consumers" x 2>&1)
[[ $out == NOPERM* ]] || fail "producer: the ack script on the consumers' key: $out"
out=$(as "$q-producer" EVALSHA "$ack" 1 "sluice:{$q}:producers" x "" "$id" "$e" "$t" "$s" 2>&1)
[[ $out == *"can't access"* || $out == NOPERM* ]] || fail "producer: the ack script: $out"
[[ $(rcli HEXISTS "sluice:{$q}:dlv" "$id") == 1 &&
   $(rcli GET "sluice:{$q}:b:$id" | md5sum) == "$frame" &&
   $(rcli GETBIT "sluice:{$q}:acked:$e:$t" "$s") == 0 ]] || fail "the batch changed"
out=$(refused "producer: consume" "$BUILD/sluice-consume" --redis "$P" --queue "$q" --count 1)
grep -q "consumer role" <<<"$out" ||
    fail "sluice-consume as the producer: the error does not name the role: $out"

# ---- 4. --aclfile: the lines of an ACL file, as Redis loads them ----------------
{
    echo "user default on nopass ~* &* +@all"
    for role in admin producer consumer; do
        "$BUILD/sluice-ctl" acl fq --role "$role" --partitions 2 --aclfile | sed "s/\$/ >$pw/"
    done
} >"$T/users.acl"
redis_tmp_start --aclfile "$T/users.acl"
for role in admin producer consumer; do
    set_line=$("$BUILD/sluice-ctl" acl fq --role "$role" --partitions 2)
    rcli ACL SETUSER "cmp-$role" ${set_line#"ACL SETUSER sluice-fq-$role "} ">$pw" >/dev/null
    a=$(rcli ACL LIST | grep "^user sluice-fq-$role " | cut -d' ' -f3-)
    b=$(rcli ACL LIST | grep "^user cmp-$role " | cut -d' ' -f3-)
    [[ -n $a && $a == "$b" ]] ||
        fail "--aclfile for $role loads as another user than ACL SETUSER: $a / $b"
done
note "--aclfile: the ACL file's users are those ACL SETUSER makes"
echo "ok: jobs ran with the admin, producer and consumer users; every forbidden action was refused"
