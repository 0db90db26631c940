#!/usr/bin/env bash
# No stall while a producer lives (README, guarantee 5), the scale-down
# case that used to hang for ever. A job of 3 epochs over one shard of 100
# records (20 batches per task), a queue budget of 8 batches, so batches of
# epochs ahead of the open one get 3/4 of it: 6.
#   P0 holds epoch 0's only (so last) task 0:0, producing it slowly (its
#      --exec writes one record per 300 ms);
#   P1 holds 1:0 and is blocked on room: the queue holds 6 of its batches,
#      the limit for an epoch ahead;
#   P2 holds 2:0 and is blocked on room from its first batch.
# The consumer reads epoch 0 and cannot get at epochs 1 and 2, so nothing
# frees room for P1 or P2. Then P0 goes: SIGTERM (it hands 0:0 back), and
# in a second run kill -9 (0:0 comes back when its lease runs out: the
# blocked producers' renewals reap it within a few seconds; the queue's
# consumer lease is 60 s, so the consumer's own reaps, every 30 s, cannot
# be what frees it). Before
# the protocol rework P1 and P2 waited for room for ever. Now a producer
# blocked with a later epoch's task hands it back (keeping what it stored)
# and takes 0:0: the job finishes, the consumer gets every record of every
# epoch (count and checksum), within 30 s plus the producers' lease (2 s),
# and a producer's stderr says it "handed back" its task because "a task of
# an earlier epoch waits".
# shellcheck source=tests/lib/integration.sh
. "$(dirname "$0")/../lib/integration.sh"
need_bin sluice-ctl sluice-producer sluice-consume

llen_is() { [[ $(rcli LLEN "$1") == "$2" ]]; }
LEASE_MS=2000

redis_tmp_start
for k in $(seq 0 99); do echo "record $k of the only shard"; done >"$T/shard.txt"
echo "lines shard.txt" >"$T/job.manifest"
want=$("$PY" -c 'import sys
h_sum = 0
n = 0
for line in open(sys.argv[1], "rb").read().split(b"\n")[:-1]:
    h = 0xCBF29CE484222325
    for b in line:
        h = ((h ^ b) * 0x100000001B3) & (2**64 - 1)
    h_sum = (h_sum + h) % 2**64
    n += 1
print("records=%d checksum=%016x" % (n, h_sum))' "$T/shard.txt")
# The records of a task, as the lines reader gives them, one per 300 ms.
cat >"$T/slow.py" <<'EOF'
import struct, sys, time
path, start, end = sys.argv[1], int(sys.argv[2]), sys.argv[3]
lines = open(path, "rb").read().split(b"\n")[:-1]
for rec in lines[start:int(end) if end else len(lines)]:
    sys.stdout.buffer.write(struct.pack("<I", len(rec)) + rec)
    sys.stdout.flush()
    time.sleep(0.3)
EOF

# run_case SIGNAL: the scenario above, P0 stopped with SIGNAL.
run_case() {
    local sig=$1 q=stall-$1 e line pc p0 p1 p2 t0 ms rc
    ctl create "$q" --max-batches 8 --max-bytes 64M --lease-ms 60000 >/dev/null
    ctl submit "$q" --manifest "$T/job.manifest" --epochs 3 --batch-size 5 >/dev/null ||
        fail "$sig: submit failed"
    bg "$T/$sig-c.out" "$T/$sig-c.err" "$BUILD/sluice-consume" --redis "$REDIS_URL" --queue "$q" \
        --summary --epochs --quiet
    pc=$BG_PID
    bg "$T/$sig-p0.out" "$T/$sig-p0.err" "$BUILD/sluice-producer" --redis "$REDIS_URL" \
        --queue "$q" --id P0 --lease-ms "$LEASE_MS" --exec "$PY $T/slow.py {path} {start} '{end}'"
    p0=$BG_PID
    wait_for 10 owner_is "$q" 0:0 P0 || fail "$sig: P0 did not claim 0:0: $(cat "$T/$sig-p0.err")"
    bg "$T/$sig-p1.out" "$T/$sig-p1.err" "$BUILD/sluice-producer" --redis "$REDIS_URL" \
        --queue "$q" --id P1 --lease-ms "$LEASE_MS"
    p1=$BG_PID
    wait_for 10 owner_is "$q" 1:0 P1 || fail "$sig: P1 did not claim 1:0: $(cat "$T/$sig-p1.err")"
    wait_for 10 llen_is "sluice:{$q}:ready:1" 6 ||
        fail "$sig: P1 did not fill the budget of an epoch ahead: ready:1 holds $(rcli LLEN "sluice:{$q}:ready:1")"
    bg "$T/$sig-p2.out" "$T/$sig-p2.err" "$BUILD/sluice-producer" --redis "$REDIS_URL" \
        --queue "$q" --id P2 --lease-ms "$LEASE_MS"
    p2=$BG_PID
    wait_for 10 owner_is "$q" 2:0 P2 || fail "$sig: P2 did not claim 2:0: $(cat "$T/$sig-p2.err")"
    # The state: every task claimed, none waiting, epoch 0 open and still
    # produced by P0, the queue at the limit of the epochs ahead.
    for e in 0 1 2; do
        [[ $(rcli LLEN "sluice:{$q}:tasks:$e") == 0 ]] || fail "$sig: a task of epoch $e waits"
    done
    [[ $(rcli ZCARD "sluice:{$q}:tlease") == 3 ]] || fail "$sig: tlease: $(rcli ZRANGE "sluice:{$q}:tlease" 0 -1)"
    [[ $(rcli HGET "sluice:{$q}:jrun" epoch_open) == 0 ]] || fail "$sig: epoch 0 is not open"
    [[ $(rcli LLEN "sluice:{$q}:ready:1") == 6 && $(rcli LLEN "sluice:{$q}:ready:2") == 0 ]] ||
        fail "$sig: P1 or P2 got room: ready:1 $(rcli LLEN "sluice:{$q}:ready:1"), ready:2 $(rcli LLEN "sluice:{$q}:ready:2")"
    kill -0 "$p0" 2>/dev/null || fail "$sig: P0 ended: $(cat "$T/$sig-p0.err")"
    note "$sig: P0 holds 0:0, P1 holds 1:0 (6 batches stored), P2 holds 2:0; P0 gets SIG$sig"
    t0=$(now_ms)
    if [[ $sig == KILL ]]; then
        kill -KILL "$p0"
        wait "$p0" 2>/dev/null || true
        owner_not_p0() { [[ $(rcli HGET "sluice:{$q}:towner" 0:0) != P0 ]]; }
        wait_for $((LEASE_MS / 1000 + 3)) owner_not_p0 ||
            fail "$sig: 0:0 still leased to the killed P0 $(($(now_ms) - t0)) ms after kill -9 (its lease: $LEASE_MS ms)"
        note "$sig: 0:0 left P0 $(($(now_ms) - t0)) ms after kill -9"
    else
        kill -TERM "$p0"
        rc=0; wait_pid "$p0" 10 || rc=$?
        ((rc == 0)) || fail "$sig: P0 exit $rc after SIGTERM: $(cat "$T/$sig-p0.err")"
        grep -q "task 0:0 .*handed back" "$T/$sig-p0.err" || fail "$sig: P0 did not hand 0:0 back: $(cat "$T/$sig-p0.err")"
    fi
    rc=0; wait_pid "$pc" $((30 + LEASE_MS / 1000)) || rc=$?
    ms=$(($(now_ms) - t0))
    ((rc != 124)) || fail "$sig: the job stalled: not finished $((30 + LEASE_MS / 1000)) s after P0 went: $(ctl jobs "$q")
P1: $(cat "$T/$sig-p1.err")
P2: $(cat "$T/$sig-p2.err")"
    ((rc == 0)) || fail "$sig: consumer exit $rc: $(cat "$T/$sig-c.err")"
    note "$sig: job finished $ms ms after P0 went"
    for e in 0 1 2; do
        line=$(grep "^epoch=$e " "$T/$sig-c.out") || fail "$sig: no end of epoch $e: $(cat "$T/$sig-c.out")"
        [[ $(kv records "$line") == "$(kv records "$want")" && $(kv checksum "$line") == "$(kv checksum "$want")" ]] ||
            fail "$sig: epoch $e: $line, expected $want"
    done
    for p in "$p1" "$p2"; do
        rc=0; wait_pid "$p" 20 || rc=$?
        ((rc == 0)) || fail "$sig: producer exit $rc: $(cat "$T/$sig-p1.err" "$T/$sig-p2.err")"
    done
    note "$sig: P1: $(tr '\n' '|' <"$T/$sig-p1.err")"
    note "$sig: P2: $(tr '\n' '|' <"$T/$sig-p2.err")"
    grep -q "task [12]:0 .*handed back .*a task of an earlier epoch waits" "$T/$sig-p1.err" "$T/$sig-p2.err" ||
        fail "$sig: neither P1 nor P2 said it handed its task back for an earlier epoch's"
    grep -qx "job: finished" <<<"$(ctl jobs "$q")" || fail "$sig: $(ctl jobs "$q")"
    [[ $(held "$q") == 0 ]] || fail "$sig: batches left in the queue"
    echo "$sig: finished $ms ms after P0 went"
}

run_case TERM
run_case KILL
echo "ok: the open epoch's task was taken over by producers blocked with later epochs' tasks"
