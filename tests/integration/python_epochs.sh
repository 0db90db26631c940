#!/usr/bin/env bash
# Epochs through Python: a job of 3 epochs over one TFRecord file; the
# Python Consumer's `for epoch, batches in consumer.epochs()` sees each
# epoch end in turn, every record once per epoch, then the job finished.
# Then a coordinated queue of 3 ranks (remainder pad), read by 3 Python
# consumers given rank/world: 10 batches -> 4 each, 2 of them padding.
# shellcheck source=tests/lib/integration.sh
. "$(dirname "$0")/../lib/integration.sh"
# shellcheck source=tests/lib/python.sh
. "$ROOT/tests/lib/python.sh"
need_bin sluice-ctl sluice-producer gen-tfrecord
if ! nm -D --defined-only "$SLUICE_LIB" | grep -w sluice_consumer_finished >/dev/null; then
    echo "skip: $SLUICE_LIB has no epochs yet (sluice_consumer_finished)"
    exit 0
fi
pye=$ROOT/tests/integration/python_epochs.py

redis_tmp_start
line=$(gen "$T/in.tfrecord" 100 5 10 300)
sum=$(kv checksum "$line")
echo "tfrecord in.tfrecord split=2" >"$T/job.manifest"

# Free queue, 3 epochs of 10 batches.
ctl create ep --max-batches 8 --max-bytes 64M >/dev/null
ctl submit ep --manifest "$T/job.manifest" --epochs 3 --batch-size 10 >/dev/null ||
    fail "submit failed"
bg "$T/p.out" "$T/p.err" "$BUILD/sluice-producer" --redis "$REDIS_URL" --queue ep --quiet
p=$BG_PID
out=$(py "$pye" "$REDIS_URL" ep) || fail "python_epochs.py failed"
note "python: $out"
[[ $(kv epochs "$out") == 3 ]] || fail "epochs: $out"
[[ $(kv records "$out") == 100,100,100 ]] || fail "records per epoch: $out"
[[ $(kv checksums "$out") == "$sum,$sum,$sum" ]] || fail "checksums per epoch: $out (want $sum)"
[[ $(kv batches "$out") == 10,10,10 ]] || fail "batches per epoch: $out"
rc=0; wait_pid "$p" 30 || rc=$?
((rc == 0)) || fail "producer exit $rc: $(cat "$T/p.err")"
[[ $(info_field ep batches) == 0 ]] || fail "batches left: $(info_field ep batches)"

# Coordinated: 3 ranks, 1 epoch of 10 batches, remainder pad.
ctl create co --max-batches 30 --max-bytes 64M --consumers 3 --coordinated --remainder pad \
    >/dev/null
ctl submit co --manifest "$T/job.manifest" --epochs 1 --batch-size 10 >/dev/null ||
    fail "submit failed"
for r in 0 1 2; do
    bg "$T/r$r.out" "$T/r$r.err" "${PYCMD[@]}" "$pye" "$REDIS_URL" co "$r" 3 "$T/r$r.ready"
    pids[r]=$BG_PID
done
# Every rank opens before the data comes (a consumer that opens after its
# epoch was closed starts at the next epoch).
for ((i = 0; i < 200; i++)); do
    [[ -e $T/r0.ready && -e $T/r1.ready && -e $T/r2.ready ]] && break
    sleep 0.05
done
[[ -e $T/r0.ready && -e $T/r1.ready && -e $T/r2.ready ]] ||
    fail "the ranks did not open: $(cat "$T"/r*.err)"
"$BUILD/sluice-producer" --redis "$REDIS_URL" --queue co --quiet || fail "producer failed"
total=0 pad=0 rsum=0
for r in 0 1 2; do
    rc=0; wait_pid "${pids[r]}" 60 || rc=$?
    ((rc == 0)) || fail "rank $r exit $rc: $(cat "$T/r$r.err")"
    o=$(cat "$T/r$r.out")
    note "rank $r: $o"
    [[ $(kv batches "$o") == 4 ]] || fail "rank $r got $(kv batches "$o") batches, expected 4"
    total=$((total + $(kv records "$o")))
    pad=$((pad + $(kv padding "$o")))
    rsums+=("$(kv checksums "$o")")
done
((pad == 2)) || fail "$pad padding batches, expected 2"
((total == 100)) || fail "ranks got $total distinct records, expected 100"
[[ $(hexsum "${rsums[@]}") == "$sum" ]] || fail "ranks' checksums add up to $(hexsum "${rsums[@]}"), want $sum"
echo "ok: $out; coordinated: 3 ranks x 4 batches, $pad padding"
