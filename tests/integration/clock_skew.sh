#!/usr/bin/env bash
# Leases run on the Redis server's clock (README, guarantee 1): no host's
# clock, however wrong, makes anybody lose a task or a batch early. Every
# participant here runs with its wall clock set off through the LD_PRELOAD
# shim $BUILD/libskew.so (SLUICE_SKEW_MS; tests/tools/skew.c), which is
# first proven to shift `date +%s` and Python's time.time() (and to leave
# the monotonic clock alone). A 2-epoch job of 6 shards runs with producer
# p1 20 s behind and p2 20 s ahead (task lease 1 s), consumers 15 s behind
# (sluice-consume --print-ids, and a slow Python trainer that holds each
# batch unacknowledged for 20-60 ms) and one on the right time, queue lease
# 1 s, while `sluice-ctl reap` runs every 200-400 ms with its clock 20 s
# ahead.
# Checked: no task failed, none was reaped, no batch was handed back; every
# batch of both epochs delivered exactly once (check_ids.py --exact: not a
# single duplicate) and acknowledged; every process exits 0; the job is
# finished and the queue holds nothing.
# Alone (tests/run.sh): leases of 1 s, renewed by producers and consumers
# that other tests' CPU would delay.
# test: serial
# shellcheck source=tests/lib/faults.sh
. "$(dirname "$0")/../lib/faults.sh"
# shellcheck source=tests/lib/python.sh
. "$ROOT/tests/lib/python.sh"
need_bin sluice-ctl sluice-producer sluice-consume libskew.so

# The shim applies: date and Python 20 s / 30.5 s off, monotonic untouched.
d0=$(date +%s)
d1=$(skewed -20000 date +%s)
(( d0 - d1 >= 19 && d0 - d1 <= 21 )) || fail "libskew.so does not shift date: $d1 with -20 s vs $d0"
out=$(skewed 30500 "$PY" -c 'import time; print("%.3f %.3f" % (time.time(), time.monotonic()))')
read -r w m <<<"$out"
read -r w0 m0 < <("$PY" -c 'import time; print("%.3f %.3f" % (time.time(), time.monotonic()))')
awk -v w="$w" -v w0="$w0" -v m="$m" -v m0="$m0" \
    'BEGIN { d = w - w0; e = m0 - m; exit !(d > 29.5 && d < 31.5 && e >= 0 && e < 1) }' ||
    fail "libskew.so does not shift Python's time.time() by 30.5 s alone: skewed $out, plain $w0 $m0"
note "libskew.so: date $d1 (-20 s) vs $d0; python time.time $w vs $w0"

redis_tmp_start
q=skew
shards=6 per=200 bsize=10 epochs=2
make_line_shards "$shards" "$per" "$T/job.manifest"
ctl create "$q" --max-batches 16 --max-bytes 64M --lease-ms 1000 >/dev/null
ctl submit "$q" --manifest "$T/job.manifest" --epochs "$epochs" --batch-size "$bsize" \
    --shuffle-seed "$SEED" >/dev/null || fail "submit failed"

pids=() names=()
add() { pids+=("$BG_PID"); names+=("$1"); }
skew_env -20000
bg "$T/p1" "$T/p1.err" "${SKEW[@]}" "$BUILD/sluice-producer" --redis "$REDIS_URL" --queue "$q" \
    --id p1 --lease-ms 1000 --exec "$(slow_exec 5)"
add p1
skew_env 20000
bg "$T/p2" "$T/p2.err" "${SKEW[@]}" "$BUILD/sluice-producer" --redis "$REDIS_URL" --queue "$q" \
    --id p2 --lease-ms 1000 --exec "$(slow_exec 5)"
add p2
skew_env -15000
bg "$T/c1" "$T/c1.err" "${SKEW[@]}" "$BUILD/sluice-consume" --redis "$REDIS_URL" --queue "$q" \
    --print-ids --summary --epochs --quiet
add c1
bg "$T/c2" "$T/c2.err" "${SKEW[@]}" "$PY" "$FAULTS/slow_consume.py" "$REDIS_URL" "$q" "$SEED" 20 60
add c2
bg "$T/c3" "$T/c3.err" "${PYCMD[@]}" "$FAULTS/slow_consume.py" "$REDIS_URL" "$q" "$((SEED + 1))" 20 60
add c3

# The reaper, 20 s ahead, runs while the job does.
t0=$(now_ms) reaps=0
job_state() { rcli HGET "sluice:{$q}:jrun" state; }
while [[ $(job_state) != finished ]]; do
    (( $(now_ms) - t0 < 60000 )) || fail "the job did not finish within 60 s: $(ctl info "$q")"
    skewed 20000 "$BUILD/sluice-ctl" --redis "$REDIS_URL" reap "$q" >/dev/null ||
        fail "sluice-ctl reap (20 s ahead) failed"
    reaps=$((reaps + 1))
    rand 200 400
    ms_sleep "$RAND"
done
for i in "${!pids[@]}"; do
    rc=0; wait_pid "${pids[i]}" 30 || rc=$?
    ((rc == 0)) || fail "${names[i]} exit $rc: $(tail -n 3 "$T/${names[i]}.err")"
done
echo "job finished in $(( $(now_ms) - t0 )) ms, $reaps reaps 20 s ahead meanwhile"

info=$(ctl info "$q")
grep -qx "tasks_failed: 0" <<<"$info" || fail "a task failed: $info"
for k in tasks_reaped requeued; do
    v=$(sed -n "s/^$k: //p" <<<"$info")
    [[ ${v:-0} == 0 ]] || fail "$k: $v: a clock made a lease end early: $info"
done
check_ids "$q" "$epochs" "$(batches_per_shard "$shards" "$per" "$bsize")" --exact "$T/c1" "$T/c2" "$T/c3"
echo "ok: producers 20 s behind and ahead, consumers 15 s behind, reaper 20 s ahead (seed $SEED):" \
    "no lease ended early, every batch exactly once"
