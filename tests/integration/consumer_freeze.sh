#!/usr/bin/env bash
# A consumer frozen (SIGSTOP) past its lease (1 s) loses its batches to the
# others; when it is resumed it must neither destroy nor hand out what is
# no longer its own.
#  (a) build/hold holds 4 batches unreleased (the whole queue) and is
#      frozen; `sluice-ctl reap` hands them back, and on SIGCONT it takes
#      the same 4 again. Its duplicate filter used to acknowledge them, as
#      if the application had released them: killed then (kill -9), the 4
#      batches were gone. Now they stay held (in its pending list, marked
#      received), so after the kill another consumer gets all 4, flagged as
#      redelivered (deliveries >= 2), every record of them (count and
#      checksum as pushed), and Redis holds nothing of the queue after.
#  (b) A slow Python trainer (consumer_freeze.py: prefetch 4, holds each
#      batch 400 ms) is frozen with one batch in its application's hands and
#      more prefetched. They are reaped, and sluice-consume --print-ids
#      drains the queue: the prefetched ones come unflagged (deliveries=1,
#      only the library had them), the held one flagged (deliveries=2).
#      When the trainer is resumed, its application must get none of what
#      it had prefetched (it lost its lease: it drops its prefetch), so
#      from the prints of the two consumers every batch was processed once,
#      except the one the frozen application held, which came again flagged.
#  (c) As (b), but nobody else consumes: the resumed trainer takes back what
#      it had prefetched, and its application gets every one of them
#      (unflagged), none acknowledged unseen.
# test: long
# shellcheck source=tests/lib/integration.sh
. "$(dirname "$0")/../lib/integration.sh"
# shellcheck source=tests/lib/python.sh
. "$ROOT/tests/lib/python.sh"
need_bin sluice-ctl sluice-producer sluice-consume gen-tfrecord hold

kill9() { kill -9 "$1"; wait "$1" 2>/dev/null || true; }
# reaped Q N: runs sluice-ctl reap; true once ready:0 holds N ids.
reaped() {
    ctl reap "$1" >/dev/null || return 1
    [[ $(rcli LLEN "sluice:{$1}:ready:0") == "$2" ]]
}
# empty Q: the queue holds no batch, no pending list, no frame.
empty() {
    local q=$1 keys
    [[ $(held "$q") == 0 ]] || fail "$q: batches left: $(rcli HGETALL "sluice:{$q}:dlv" | tr '\n' ' ')"
    [[ $(rcli GET "sluice:{$q}:bytes") == 0 ]] || fail "$q: bytes left: $(rcli GET "sluice:{$q}:bytes")"
    [[ $(rcli LLEN "sluice:{$q}:ready:0") == 0 ]] || fail "$q: ready:0 is not empty"
    keys=$(rcli --scan --pattern "sluice:{$q}:b:*"; rcli --scan --pattern "sluice:{$q}:pending:*")
    [[ -z $keys ]] || fail "$q: keys left: $keys"
}

redis_tmp_start

# ---- (a) resumed holder killed before releasing -----------------------------
q=freeze
ctl create "$q" --max-batches 100 --max-bytes 64M --lease-ms 1000 >/dev/null
gen "$T/a.tfrecord" 40 11 10 200 >/dev/null
prod=$("$BUILD/sluice-producer" --redis "$REDIS_URL" --queue "$q" --format tfrecord \
    --batch-size 10 --summary --quiet "$T/a.tfrecord") || fail "a: producer failed"
bg "$T/h.out" "$T/h.err" "$BUILD/hold" --redis "$REDIS_URL" --queue "$q" --count 4 \
    --prefetch 4 --timeout-ms 10000
h=$BG_PID
wait_for 20 in_file "$T/h.out" '^held 4' || fail "a: hold did not get 4 batches: $(cat "$T/h.err")"
mapfile -t ids < <(awk '/^id / { print $2 }' "$T/h.out")
((${#ids[@]} == 4)) || fail "a: hold printed $(cat "$T/h.out")"
cid=$(rcli HKEYS "sluice:{$q}:consumers")
note "a: hold ($cid) holds ${ids[*]}"
kill -STOP "$h"
wait_for 15 reaped "$q" 4 || fail "a: the frozen holder's batches were not handed back: $(ctl info "$q")"
for id in "${ids[@]}"; do
    [[ $(rcli HGET "sluice:{$q}:dlv" "$id") == 1 ]] ||
        fail "a: $id: delivery count $(rcli HGET "sluice:{$q}:dlv" "$id") after the reap, expected 1 (the application had it)"
done
kill -CONT "$h"
# The holder takes its 4 batches back. Done when the list is empty and each
# frame is marked received again (its application still holds it); a
# frame that disappears was acknowledged.
gone=
retaken() {
    local id
    for id in "${ids[@]}"; do
        [[ $(rcli EXISTS "sluice:{$q}:b:$id") == 1 ]] || { gone=$id; return 0; }
        (($(rcli PTTL "sluice:{$q}:b:$id") > 0)) || return 1
    done
    [[ $(rcli LLEN "sluice:{$q}:ready:0") == 0 ]]
}
wait_for 15 retaken || fail "a: the resumed holder did not take its batches back: ready:0 holds $(rcli LLEN "sluice:{$q}:ready:0"), pending $(rcli LRANGE "sluice:{$q}:pending:$cid" 0 -1 | tr '\n' ' ')"
[[ -z $gone ]] || fail "a: batch $gone was acknowledged by the resumed holder, whose application never released it"
pend=$(rcli LRANGE "sluice:{$q}:pending:$cid" 0 -1 | sort | tr '\n' ' ')
[[ $pend == "$(printf '%s\n' "${ids[@]}" | sort | tr '\n' ' ')" ]] ||
    fail "a: the resumed holder's pending list is '$pend', expected its 4 batches"
note "a: resumed holder holds them again: $pend; kill -9"
kill9 "$h"
out=$("$BUILD/sluice-consume" --redis "$REDIS_URL" --queue "$q" --print-ids --summary \
    --quiet --timeout-ms 5000) || fail "a: consumer failed: $out"
note "a: next consumer: $(tr '\n' '|' <<<"$out")"
got=$(awk '/^id / { print $2 }' <<<"$out" | sort | tr '\n' ' ')
[[ $got == "$(printf '%s\n' "${ids[@]}" | sort | tr '\n' ' ')" ]] ||
    fail "a: the next consumer got '$got', expected the 4 batches the killed holder held"
while read -r _ id d _; do
    ((${d#deliveries=} >= 2)) || fail "a: $id came with $d, expected a redelivery flag (>= 2)"
done < <(grep '^id ' <<<"$out")
sum=$(grep '^records=' <<<"$out")
[[ $(kv records "$sum") == 40 && $(kv checksum "$sum") == $(kv checksum "$prod") ]] ||
    fail "a: records lost: consumer $sum, producer $prod"
empty "$q"

# ---- (b) prefetched batches of a frozen consumer ----------------------------
q=prefetch
ctl create "$q" --max-batches 100 --max-bytes 64M --lease-ms 1000 >/dev/null
gen "$T/b.tfrecord" 160 12 10 200 >/dev/null
prod=$("$BUILD/sluice-producer" --redis "$REDIS_URL" --queue "$q" --format tfrecord \
    --batch-size 10 --summary --quiet "$T/b.tfrecord") || fail "b: producer failed"
bg "$T/A.out" "$T/A.err" "${PYCMD[@]}" "$ROOT/tests/integration/consumer_freeze.py" \
    "$REDIS_URL" "$q" A 400 3000
a=$BG_PID
# Freeze A while its application holds a batch (the last it printed, the
# 2nd or a later one), the ones before are acknowledged, and the library
# has 4 prefetched behind it.
frozen_ok() {
    local id got
    mapfile -t got < <(awk '/^id / { print $2 }' "$T/A.out")
    ((${#got[@]} >= 2)) || return 1
    for id in "${got[@]::${#got[@]}-1}"; do
        [[ $(rcli EXISTS "sluice:{$q}:b:$id") == 0 ]] || return 1
    done
    (($(rcli LLEN "sluice:{$q}:pending:A") == 5))
}
wait_for 20 frozen_ok || fail "b: A never held a batch with 4 prefetched behind it: $(cat "$T/A.out" "$T/A.err")"
kill -STOP "$a"
# What A had at the freeze (it may have moved on a little since the check):
# the batch its application holds (the last it printed), batches it
# released whose acknowledgement was still on its way, and prefetched ones.
na=$(grep -c '^id ' "$T/A.out")
held=$(awk '/^id / { id = $2 } END { print id }' "$T/A.out")
mapfile -t pend < <(rcli LRANGE "sluice:{$q}:pending:A" 0 -1)
prefetched=() again=()
for id in "${pend[@]}"; do
    if ! grep -q "^id $id " "$T/A.out"; then
        prefetched+=("$id")
    else
        again+=("$id")   # received by A's application: comes back flagged
    fi
done
note "b: A frozen after $na batches, holding $held; received and not acknowledged: ${again[*]}; prefetched: ${prefetched[*]}"
[[ " ${again[*]} " == *" $held "* ]] || fail "b: the batch A's application holds ($held) is not in its pending list"
((${#prefetched[@]} >= 3)) || fail "b: A had only ${#prefetched[@]} batches prefetched at the freeze"
ready=$(rcli LLEN "sluice:{$q}:ready:0")
wait_for 15 reaped "$q" $((ready + ${#pend[@]})) ||
    fail "b: A's batches were not handed back: pending $(rcli LRANGE "sluice:{$q}:pending:A" 0 -1 | tr '\n' ' ')"
# Only batches A's application received count a delivery.
for id in "${again[@]}"; do
    [[ $(rcli HGET "sluice:{$q}:dlv" "$id") == 1 ]] ||
        fail "b: $id (received by A's application) counts $(rcli HGET "sluice:{$q}:dlv" "$id") deliveries, expected 1"
done
for id in "${prefetched[@]}"; do
    [[ $(rcli HGET "sluice:{$q}:dlv" "$id") == 0 ]] ||
        fail "b: $id (only prefetched by A) counts $(rcli HGET "sluice:{$q}:dlv" "$id") deliveries, expected 0"
done
"$BUILD/sluice-consume" --redis "$REDIS_URL" --queue "$q" --print-ids --quiet \
    --timeout-ms 2000 >"$T/B.out" 2>"$T/B.err" || fail "b: consumer B failed: $(cat "$T/B.err")"
note "b: B got $(grep -c '^id ' "$T/B.out") batches"
for id in "${prefetched[@]}"; do
    grep -qx "id $id deliveries=1 padding=0" "$T/B.out" ||
        fail "b: B did not get $id (prefetched by A) unflagged: $(grep "^id $id " "$T/B.out")"
done
for id in "${again[@]}"; do
    grep -qx "id $id deliveries=2 padding=0" "$T/B.out" ||
        fail "b: B did not get $id (received by A's application) flagged: $(grep "^id $id " "$T/B.out")"
done
kill -CONT "$a"
rc=0; wait_pid "$a" 20 || rc=$?
((rc == 0)) || fail "b: A exit $rc after the resume: $(cat "$T/A.err")"
note "b: A: $(tr '\n' '|' <"$T/A.out")"
grep -qx idle "$T/A.out" || fail "b: A did not run to its end: $(cat "$T/A.out")"
after=$(tail -n +$((na + 1)) "$T/A.out" | grep '^id ' || true)
for id in "${prefetched[@]}"; do
    grep -q "^id $id " <<<"$after" &&
        fail "b: A's application got $id after the resume, which it had only prefetched and B processed meanwhile"
done
[[ -z $after ]] || fail "b: A's application got batches after the resume although B had drained the queue: $after"
# Every batch once, but those A's application had received and not
# acknowledged when it froze.
all=$( (grep '^id ' "$T/A.out"; grep '^id ' "$T/B.out") | awk '{ print $2 }' | sort)
dups=$(uniq -d <<<"$all")
[[ $dups == "$(printf '%s\n' "${again[@]}" | sort)" ]] ||
    fail "b: batches processed twice: '$dups', expected only ${again[*]}"
(($(uniq <<<"$all" | wc -l) == 16)) || fail "b: $(uniq <<<"$all" | wc -l) distinct batches processed, expected 16"
empty "$q"

# ---- (c) its prefetched batches come back to the frozen consumer itself ----
q=selfback
ctl create "$q" --max-batches 100 --max-bytes 64M --lease-ms 1000 >/dev/null
gen "$T/c.tfrecord" 160 13 10 200 >/dev/null
"$BUILD/sluice-producer" --redis "$REDIS_URL" --queue "$q" --format tfrecord \
    --batch-size 10 --summary --quiet "$T/c.tfrecord" >/dev/null || fail "c: producer failed"
bg "$T/C.out" "$T/C.err" "${PYCMD[@]}" "$ROOT/tests/integration/consumer_freeze.py" \
    "$REDIS_URL" "$q" C 100 3000
c=$BG_PID
frozen_c() {
    (($(grep -c '^id ' "$T/C.out") >= 2 && $(rcli LLEN "sluice:{$q}:pending:C") == 5))
}
wait_for 20 frozen_c || fail "c: C never held a batch with 4 prefetched behind it: $(cat "$T/C.out" "$T/C.err")"
kill -STOP "$c"
mapfile -t pend < <(rcli LRANGE "sluice:{$q}:pending:C" 0 -1)
prefetched=()
for id in "${pend[@]}"; do
    grep -q "^id $id " "$T/C.out" || prefetched+=("$id")
done
((${#prefetched[@]} >= 3)) || fail "c: C had only ${#prefetched[@]} batches prefetched at the freeze"
ready=$(rcli LLEN "sluice:{$q}:ready:0")
wait_for 15 reaped "$q" $((ready + ${#pend[@]})) ||
    fail "c: C's batches were not handed back: pending $(rcli LRANGE "sluice:{$q}:pending:C" 0 -1 | tr '\n' ' ')"
note "c: C frozen and reaped with ${prefetched[*]} prefetched; resumed, nobody else consuming"
kill -CONT "$c"
rc=0; wait_pid "$c" 30 || rc=$?
((rc == 0)) || fail "c: C exit $rc after the resume: $(cat "$T/C.err")"
# C drops its prefetch (it lost its lease) and takes those batches again
# from the queue: its application gets each of them now, unflagged (only
# the library had had them). Its filter of duplicates once took them for
# batches its application had released, and acknowledged them unseen.
for id in "${prefetched[@]}"; do
    grep -qx "id $id deliveries=1" "$T/C.out" ||
        fail "c: C's application never got $id (prefetched before the freeze) unflagged: $(grep "^id $id " "$T/C.out")"
done
(($(grep '^id ' "$T/C.out" | awk '{ print $2 }' | sort -u | wc -l) == 16)) ||
    fail "c: C's application got $(grep '^id ' "$T/C.out" | awk '{ print $2 }' | sort -u | wc -l) distinct batches, expected 16"
empty "$q"
echo "ok: a resumed consumer kept (and lost at its kill) what its application held, handed out nothing it had prefetched that others took, and got back what it had prefetched when nobody did"
