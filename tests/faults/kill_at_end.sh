#!/usr/bin/env bash
# kill -9 of a consumer holding batches when the others reach the end of
# the job. A 2-epoch job (2 shards x 10 batches per epoch, queue lease 1 s):
# a consumer (tests/tools/hold) takes 3 batches of epoch 0 and holds them;
# the producer pushes everything; a second consumer reads the rest of both
# epochs and must not finish while batches are held: the end of the job's
# last epoch waits for them. Then the holder is killed with -9; after its
# lease ran out the waiting consumer receives the held batches
# (deliveries >= 2) and finishes. A consumer started afterwards finds
# nothing left. Checked: every batch id of both epochs is delivered and
# acknowledged, nothing left in Redis.
# shellcheck source=tests/lib/faults.sh
. "$(dirname "$0")/../lib/faults.sh"
need_bin sluice-ctl sluice-producer sluice-consume hold gen-tfrecord

redis_tmp_start
q=faultend
make_shards 2 100 "$T/job.manifest"
ctl create "$q" --max-batches 100 --max-bytes 64M --lease-ms 1000 >/dev/null
ctl submit "$q" --manifest "$T/job.manifest" --epochs 2 --batch-size 10 >/dev/null ||
    fail "submit failed"

bg "$T/hold" "$T/hold.err" "$BUILD/hold" --redis "$REDIS_URL" --queue "$q" --count 3 --prefetch 1
h=$BG_PID
start_producer "$T/p" "$q" --lease-ms 1000 --quiet
rc=0; wait_pid "$BG_PID" 30 || rc=$?
((rc == 0)) || fail "producer exit $rc: $(cat "$T/p.err")"
wait_for 10 grep -q '^held 3' "$T/hold" || fail "hold did not take 3 batches: $(cat "$T/hold.err")"
echo "holder took: $(grep '^id ' "$T/hold" | cut -d' ' -f2 | paste -sd' ')"

start_consumer "$T/c1" "$q" --quiet
c1=$BG_PID
# Everything but the 4 the holder has (3 held, 1 prefetched) arrives; then
# consumer 1 waits.
wait_for 20 bash -c "[[ \$(grep -c '^id ' '$T/c1') -ge 36 ]]" ||
    fail "consumer 1 got $(grep -c '^id ' "$T/c1") of 36 batches (40 less the 3 held and 1 prefetched)"
sleep 1
kill -0 "$c1" 2>/dev/null || fail "consumer 1 finished the job while 3 batches were still held"
echo "consumer 1 waits at the end of the job; held: $(info_field "$q" pending) pending"

{ kill -KILL "$h"; wait "$h"; } 2>/dev/null || true
rc=0; wait_pid "$c1" 30 || rc=$?
((rc == 0)) || fail "consumer 1 exit $rc after the holder died: $(cat "$T/c1.err")"
echo "consumer 1 finished with $(grep -c '^id ' "$T/c1") batches: $(grep '^id ' "$T/c1" | grep -v 'deliveries=1' | cut -d' ' -f2,3 | paste -sd' ')"
grep '^id 0:0:0 ' "$T/c1" | grep -q 'deliveries=2' || fail "0:0:0 was not redelivered to consumer 1 with deliveries=2"
start_consumer "$T/c2" "$q" --quiet --timeout-ms 3000
rc=0; wait_pid "$BG_PID" 30 || rc=$?
((rc == 0)) || fail "a later consumer exit $rc: $(cat "$T/c2.err")"
[[ $(grep -c '^id ' "$T/c2") == 0 ]] || fail "a later consumer still got batches: $(cat "$T/c2")"
check_ids "$q" 2 "$(batches_per_shard 2 100 10)" --killed "$T/hold" "$T/c1" "$T/c2"
echo "ok: the batches a consumer held when it was killed at the end of the job reached the one still waiting"
