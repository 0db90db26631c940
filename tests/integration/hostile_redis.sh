#!/usr/bin/env bash
# A hostile (or broken) Redis cannot make a program allocate without bound.
# A proxy (hostile_redis.py) in front of the test's server passes replies
# through until a command matches, then answers it with a reply of absurd
# size followed by endless bytes:
#   bulk      $9999999999            (a string, declared)
#   array     *2147483647            (an array, declared)
#   elements  *10000000 of :1 each   (a reply that grows one object at a time)
#   line      a status line that never ends
#   spurious  +OK again and again: replies nobody asked for (hiredis
#             alone asserts on one in an async context: the process aborts)
# sluice-ctl, sluice-producer, sluice-consume and the Python binding get it
# as the answer to their first command; sluice-consume also on its event
# loop's data connection (the GET/MGET of a frame, after open went well),
# sluice-producer in the middle of a push (MSET), sluice-ctl on a list;
# sluice-consume gets the spurious replies on its hand connection, whose
# replies are off (CLIENT REPLY OFF).
# Each must exit non-zero within the timeout with an error naming the
# proxy's address and the limit or size, its peak RSS (GNU time) below
# 200 MB. The valid queue behind the proxy is then read in full directly.
# shellcheck source=tests/lib/integration.sh
. "$(dirname "$0")/../lib/integration.sh"
# shellcheck source=tests/lib/python.sh
. "$ROOT/tests/lib/python.sh"
need_bin sluice-ctl sluice-producer sluice-consume gen-tfrecord
[[ -x /usr/bin/time ]] || fail "/usr/bin/time (GNU time) is not installed (apt-get install time)"

MAX_RSS_KB=200000

redis_tmp_start
q=hq
# A short lease: what a consumer stopped by the proxy had taken is reaped
# soon, for the full read at the end.
ctl create "$q" --max-batches 100 --max-bytes 64M --lease-ms 1000 >/dev/null
gen "$T/in.tfrecord" 60 3 100 1000 >/dev/null
"$BUILD/sluice-producer" --redis "$REDIS_URL" --queue "$q" --batch-size 10 --quiet \
    "$T/in.tfrecord" || fail "filling the queue failed"

# proxy MODE TRIGGER [UPSTREAM]: starts a hostile proxy; sets HP_PID,
# HP_PORT, HP_URL and HP_LOG (its log of hostile answers).
np=0
proxy() {
    np=$((np + 1))
    local pf=$T/proxy$np.port
    local args=(--mode "$1" --trigger "$2" --port-file "$pf")
    [[ -n ${3:-} ]] && args+=(--upstream "$3")
    bg "$T/proxy$np.out" "$T/proxy$np.err" "$PY" "$ROOT/tests/integration/hostile_redis.py" \
        "${args[@]}"
    HP_PID=$BG_PID
    HP_LOG=$T/proxy$np.err
    wait_for 10 test -s "$pf" || fail "the hostile proxy did not start: $(cat "$HP_LOG")"
    HP_PORT=$(<"$pf")
    HP_URL=redis://127.0.0.1:$HP_PORT
}

# hostile NAME EXPECT CMD...: runs CMD against the current proxy; it must
# fail (not time out, not crash) with stderr naming the proxy's address
# and containing EXPECT, its peak RSS below MAX_RSS_KB. Stops the proxy.
hostile() {
    local name=$1 expect=$2 rc=0 rss
    shift 2
    timeout -k 5 60 /usr/bin/time -v -o "$T/$name.time" "$@" >"$T/$name.out" 2>"$T/$name.err" ||
        rc=$?
    # The proxy logs the hang-up when its next write fails: wait for it.
    wait_for 10 in_file "$HP_LOG" "hung up" || true
    kill "$HP_PID" 2>/dev/null || true
    ((rc != 124 && rc != 137)) ||
        fail "$name: still running after 60 s: $(tail -n 3 "$T/$name.err")"
    ((rc != 0)) || fail "$name: exit 0 after a hostile reply: $(cat "$T/$name.err")"
    ((rc < 128)) || fail "$name: killed by signal $((rc - 128)): $(tail -n 5 "$T/$name.err")"
    grep -q "127.0.0.1:$HP_PORT" "$T/$name.err" ||
        fail "$name: the error does not name the server 127.0.0.1:$HP_PORT: $(cat "$T/$name.err")"
    grep -qF -- "$expect" "$T/$name.err" ||
        fail "$name: no '$expect' in the error: $(cat "$T/$name.err")"
    grep -q "hung up" "$HP_LOG" ||
        fail "$name: the proxy never sent its hostile reply: $(cat "$HP_LOG")"
    rss=$(awk -F': ' '/Maximum resident set size/ { print $2 }' "$T/$name.time")
    [[ -n $rss ]] || fail "$name: no peak RSS from GNU time: $(cat "$T/$name.time")"
    ((rss < MAX_RSS_KB)) || fail "$name: peak RSS $rss kB, above $MAX_RSS_KB kB"
    note "$name: exit $rc, peak RSS $rss kB: $(grep -m 1 -e "$expect" "$T/$name.err")"
    note "    proxy: $(tail -n 1 "$HP_LOG")"
}

declare -A EXPECT=(
    [bulk]="a string of 9999999999 bytes"
    [array]="an array of 2147483647 elements"
    [elements]="reply too large: over"
    [line]="reply too large: a status, error or integer line"
)

cat >"$T/pyconsume.py" <<'PYEOF'
import sys
import sluice
try:
    with sluice.Consumer(sys.argv[1], sys.argv[2], timeout_ms=30000) as c:
        for batch in c:
            batch.release()
except sluice.Error as e:
    sys.exit("pyconsume: %s" % e)
sys.exit("pyconsume: the queue ended without an error")
PYEOF

# --- 1. the first command of every program ---------------------------------
for mode in bulk array elements line; do
    proxy "$mode" .
    hostile "ctl-$mode" "${EXPECT[$mode]}" "$BUILD/sluice-ctl" --redis "$HP_URL" info "$q"
done
for mode in bulk array; do
    proxy "$mode" .
    hostile "producer-$mode" "${EXPECT[$mode]}" "$BUILD/sluice-producer" --redis "$HP_URL" \
        --queue "$q" --batch-size 10 --quiet "$T/in.tfrecord"
    proxy "$mode" .
    hostile "consume-$mode" "${EXPECT[$mode]}" "$BUILD/sluice-consume" --redis "$HP_URL" \
        --queue "$q" --quiet --timeout-ms 30000
    proxy "$mode" .
    hostile "python-$mode" "${EXPECT[$mode]}" "${PYCMD[@]}" "$T/pyconsume.py" "$HP_URL" "$q"
done

# --- 2. later commands, after everything before went well ------------------
up=127.0.0.1:$REDIS_PORT
# The consumer's event loop: its data connection fetches frames with GET
# (one) or MGET (several). (Not "elements": a consumer's reply may take
# prefetch frames' worth of memory, 256 MiB here.)
for mode in bulk array; do
    proxy "$mode" '\$3\r\nGET\r\n|\$4\r\nMGET\r\n' "$up"
    hostile "consume-fetch-$mode" "${EXPECT[$mode]}" "$BUILD/sluice-consume" --redis "$HP_URL" \
        --queue "$q" --quiet --timeout-ms 30000
done
# Replies after CLIENT REPLY OFF: an error, not an abort.
proxy spurious '\$5\r\nREPLY\r\n' "$up"
hostile consume-unasked "reply malformed: a reply to no request" "$BUILD/sluice-consume" \
    --redis "$HP_URL" --queue "$q" --quiet --timeout-ms 30000
# The producer's pipelined pushes: MULTI, MSET of the frames, EVALSHA, EXEC.
proxy bulk '\$4\r\nMSET\r\n' "$up"
hostile producer-push "${EXPECT[bulk]}" "$BUILD/sluice-producer" --redis "$HP_URL" \
    --queue "$q" --batch-size 10 --quiet "$T/in.tfrecord"
# sluice-ctl reading a list whole.
proxy array '\$6\r\nLRANGE\r\n' "$up"
hostile ctl-list "${EXPECT[array]}" "$BUILD/sluice-ctl" --redis "$HP_URL" dead "$q"

# Nothing was lost behind the proxy: the queue reads in full.
"$BUILD/sluice-consume" --redis "$REDIS_URL" --queue "$q" --summary --quiet --timeout-ms 5000 \
    >"$T/sum.out" 2>"$T/sum.err" || true
recs=$(kv records "$(cat "$T/sum.out")")
((recs == 60)) ||
    fail "the queue read directly holds $recs records, expected 60: $(cat "$T/sum.err")"
echo "ok: every program stopped at a hostile reply with a clear error, peak RSS < $MAX_RSS_KB kB"
