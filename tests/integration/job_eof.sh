#!/usr/bin/env bash
# End of epoch with real producers: a job of 2 epochs (6 shards) produced by
# 2 producers that run ahead into epoch 1, read by 3 consumers. Every
# consumer prints "eof epoch=0" exactly once, then "eof epoch=1" exactly
# once, then "finished"; none gets a batch of epoch 1 before its end of
# epoch 0 (nor one of epoch 0 after it); across the three, every batch id
# the producers stored is delivered exactly once.
# shellcheck source=tests/lib/integration.sh
. "$(dirname "$0")/../lib/integration.sh"
need_bin sluice-ctl sluice-producer sluice-consume gen-tfrecord

redis_tmp_start
q=jobeof
for i in 0 1 2 3 4 5; do
    gen "$T/s$i.tfrecord" 80 $((300 + i)) 1 100 >/dev/null
    echo "tfrecord s$i.tfrecord"
done >"$T/m.manifest"
# Room for a third of an epoch: producers get ahead, not arbitrarily far.
ctl create "$q" --max-batches 16 --max-bytes 64M >/dev/null
ctl submit "$q" --manifest "$T/m.manifest" --epochs 2 --batch-size 5 --shuffle-seed 5 >/dev/null ||
    fail "submit failed"

cons=()
for k in 1 2 3; do
    bg "$T/c$k.out" "$T/c$k.err" "$BUILD/sluice-consume" --redis "$REDIS_URL" --queue "$q" \
        --print-ids --quiet
    cons+=("$BG_PID")
done
# A consumer that opens once epoch 0 is over and drained starts at epoch 1
# (docs/PROTOCOL.md): under load one did, after the other two had read all
# of it. All three open before any batch exists, so each is there for both.
wait_for 30 eval '[[ $(rcli HLEN "sluice:{$q}:consumers") == 3 ]]' ||
    fail "the 3 consumers did not open: $(cat "$T"/c*.err)"
prods=()
for k in 1 2; do
    bg "$T/p$k.out" "$T/p$k.err" "$BUILD/sluice-producer" --redis "$REDIS_URL" --queue "$q" --quiet
    prods+=("$BG_PID")
done
for k in 1 2; do
    rc=0; wait_pid "${prods[k - 1]}" 60 || rc=$?
    ((rc == 0)) || fail "producer $k exit $rc: $(cat "$T/p$k.err")"
done
for k in 1 2 3; do
    rc=0; wait_pid "${cons[k - 1]}" 30 || rc=$?
    ((rc == 0)) || fail "consumer $k exit $rc (expected 0 once the job is finished): $(cat "$T/c$k.err")"
done

for k in 1 2 3; do
    f=$T/c$k.out
    note "consumer $k: $(grep -c '^id ' "$f") batches; $(grep -v '^id ' "$f" | paste -sd' ')"
    [[ $(grep -cx 'eof epoch=0' "$f") == 1 ]] || fail "consumer $k: 'eof epoch=0' not exactly once"
    [[ $(grep -cx 'eof epoch=1' "$f") == 1 ]] || fail "consumer $k: 'eof epoch=1' not exactly once"
    [[ $(grep -v '^id ' "$f" | paste -sd' ') == "eof epoch=0 eof epoch=1 finished" ]] ||
        fail "consumer $k: epoch ends out of order: $(grep -v '^id ' "$f" | paste -sd' ')"
    # Line numbers: the end of epoch 0 separates the two epochs' batches.
    # A consumer may get no batch of an epoch (the others were quicker:
    # under load, one got 3 batches, all of epoch 0); grep then finds none.
    eof0=$(grep -nx 'eof epoch=0' "$f" | cut -d: -f1)
    first1=$(grep -m 1 -n '^id 1:' "$f" | cut -d: -f1) || true
    last0=$(grep -n '^id 0:' "$f" | tail -n 1 | cut -d: -f1) || true
    [[ -z $first1 ]] || ((first1 > eof0)) ||
        fail "consumer $k got batch $(sed -n "${first1}p" "$f") before its end of epoch 0"
    [[ -z $last0 ]] || ((last0 < eof0)) ||
        fail "consumer $k got batch $(sed -n "${last0}p" "$f") after its end of epoch 0"
done

ids=$(cat "$T"/c{1,2,3}.out | sed -n 's/^id \([^ ]*\) .*/\1/p' | sort)
dups=$(uniq -d <<<"$ids" | head -n 3)
[[ -z $dups ]] || fail "batches delivered more than once: $dups"
n0=$(grep -c '^0:' <<<"$ids") n1=$(grep -c '^1:' <<<"$ids")
p0=$(redis_tmp_cli --raw HGET "sluice:{$q}:estats" 0:pushed)
p1=$(redis_tmp_cli --raw HGET "sluice:{$q}:estats" 1:pushed)
((n0 == p0 && n1 == p1)) || fail "delivered $n0 + $n1 batches, producers stored $p0 + $p1"
((p0 == 96 && p1 == 96)) || fail "expected 96 batches per epoch (6 x 80 records / 5), got $p0 + $p1"
echo "ok: 3 consumers each saw eof epoch=0, eof epoch=1, finished; $n0 + $n1 batches exactly once"
