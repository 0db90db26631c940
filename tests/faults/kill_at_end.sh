#!/usr/bin/env bash
# kill -9 of a consumer holding batches when the others reach the end of
# the job. A 2-epoch job (2 shards x 10 batches per epoch, queue lease 1 s):
# a consumer (tests/tools/hold) takes 3 batches of epoch 0 and holds them;
# the producer pushes everything; a second consumer reads the rest of both
# epochs and finishes. Then the holder is killed with -9 and, after its
# lease ran out, a replacement consumer starts, as a supervisor would
# restart a dead trainer. Checked: the held batches are not lost: the
# replacement receives them (deliveries >= 2) and every batch id of both
# epochs is delivered and acknowledged, nothing left in Redis.
# shellcheck source=tests/faults/_lib.sh
. "$(dirname "$0")/_lib.sh"
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
rc=0; wait_pid "$BG_PID" 30 || rc=$?
((rc == 0)) || fail "consumer 1 exit $rc: $(cat "$T/c1.err")"
echo "consumer 1 finished the job with $(grep -c '^id ' "$T/c1") batches; held: $(info_field "$q" pending) pending"

{ kill -KILL "$h"; wait "$h"; } 2>/dev/null || true
sleep 1.5   # the holder's lease (1 s) runs out
start_consumer "$T/c2" "$q" --quiet --timeout-ms 10000
rc=0; wait_pid "$BG_PID" 30 || rc=$?
((rc == 0)) || fail "replacement consumer exit $rc: $(cat "$T/c2.err")"
echo "replacement consumer got $(grep -c '^id ' "$T/c2") batches: $(grep '^id ' "$T/c2" | cut -d' ' -f2,3 | paste -sd' ')"
check_ids "$q" 2 "$(batches_per_shard 2 100 10)" --killed "$T/hold" "$T/c1" "$T/c2"
echo "ok: the batches a killed consumer held at the end of the job were delivered again"
