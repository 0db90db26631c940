#!/usr/bin/env bash
# A files-mode producer stopped by SIGINT while its batches wait for room
# says plainly what became of them: how many are stored (confirmed by
# Redis), how many are not (never sent, or refused for lack of room), and
# never calls batches that were not sent "unconfirmed" or "dropped". The
# counts add up to every batch of the input, and the stored ones are what
# the queue holds.
# shellcheck source=tests/lib/integration.sh
. "$(dirname "$0")/../lib/integration.sh"
need_bin sluice-ctl sluice-producer

redis_tmp_start
seq 1 500 >"$T/a.txt"
seq 501 1000 >"$T/b.txt"
# 1000 records in batches of 10: 100 batches; --inflight 1024 lets the
# producer hold them all, so both files are read at once; the queue takes 4.
# interrupt TAG ARGS...: a files-mode producer on queue q (batches of 10,
# lines, ARGS added) is sent SIGINT once the queue is full (4 batches) and
# must exit 130; its stderr is $T/err.TAG.
interrupt() {
    local tag=$1 pid rc=0
    shift
    bg "$T/out.$tag" "$T/err.$tag" "$BUILD/sluice-producer" --redis "$REDIS_URL" --queue q \
        --format lines --batch-size 10 "$@"
    pid=$BG_PID
    wait_for 20 held_is q 4 || fail "the queue never filled: $(cat "$T/err.$tag")"
    kill -INT "$pid"
    wait_pid "$pid" 20 || rc=$?
    ((rc == 130)) || fail "exit $rc after SIGINT, expected 130: $(cat "$T/err.$tag")"
    note "stderr: $(cat "$T/err.$tag")"
}

ctl create q --max-batches 4 --max-bytes 1M >/dev/null || fail "create"
interrupt 1 --inflight 1024 "$T/a.txt" "$T/b.txt"

# check ERRFILE TOTAL: the interrupted line of ERRFILE tells the stored
# batches (what the queue holds) and the ones not stored, by kind; with
# TOTAL (not 0), they add up to it.
check() {
    local err=$1 total=$2 line stored held not_stored parts k kind
    line=$(grep 'interrupted by SIGINT' "$err") || fail "no 'interrupted by SIGINT' line: $(cat "$err")"
    if grep -qiE 'unconfirmed|dropped' "$err"; then
        fail "says 'unconfirmed' or 'dropped': $(cat "$err")"
    fi
    stored=$(grep -oE '[0-9]+ batch(es)? stored in queue' <<<"$line" | grep -oE '^[0-9]+') ||
        fail "no stored count: $line"
    held=$(held q)
    ((stored == held)) || fail "says $stored stored, the queue holds $held: $line"
    not_stored=$(grep -oE '[0-9]+ batch(es)? not stored' <<<"$line" | grep -oE '^[0-9]+') ||
        fail "no 'not stored' count: $line"
    # The kinds of "not stored" add up to it.
    parts=0
    for kind in 'not sent' 'refused for lack of room' 'refused by Redis'; do
        k=$(grep -oE "[0-9]+ $kind" <<<"$line" | grep -oE '^[0-9]+' || echo 0)
        parts=$((parts + k))
    done
    ((parts == not_stored)) || fail "the kinds add up to $parts, not $not_stored: $line"
    # Nothing was in flight without an answer: Redis stayed up.
    if grep -q 'without an answer' <<<"$line"; then fail "batches without an answer: $line"; fi
    if ((total > 0 && stored + not_stored != total)); then
        fail "$stored stored + $not_stored not stored is not $total: $line"
    fi
    echo "ok: $line"
}

line=$(grep 'interrupted by SIGINT' "$T/err.1") || fail "no 'interrupted by SIGINT' line"
# Both files are read at once, but a loaded machine may stop the producer
# before it has read them to the end: the sum over all 100 batches holds
# only when it says it did.
[[ $line =~ ([0-2])\ of\ 2\ files\ read\ to\ the\ end ]] || fail "files read not told: $line"
if [[ ${BASH_REMATCH[1]} == 2 ]]; then check "$T/err.1" 100; else check "$T/err.1" 0; fi

# A long file: the producer is stopped while its pushes wait for room,
# with the rest of the file not read (a push cut short counts as not sent).
ctl delete q >/dev/null && ctl create q --max-batches 4 --max-bytes 1M >/dev/null ||
    fail "create again"
seq 1 200000 >"$T/big.txt"
interrupt 2 "$T/big.txt"
grep -q '0 of 1 files read to the end' "$T/err.2" || fail "files read: $(cat "$T/err.2")"
check "$T/err.2" 0
