#!/usr/bin/env bash
# A big job is submitted in steps: no script keeps Redis busy (README,
# guarantee 9). A manifest line `lines FILE split=N` over a file of N
# one-byte lines is N shards of one record; 10 epochs make 10 N tasks.
# A job of 10^6 x 10 used to be one 26 s script, and Redis answered BUSY to
# everybody meanwhile. Now:
#  - while it is submitted, a client sending PING every 5 ms never gets
#    BUSY nor waits more than 500 ms, and SLOWLOG (slowlog-log-slower-than
#    100 ms) records no script; the submit prints "submitted 10N tasks";
#  - all or nothing: a submit killed (SIGKILL) half way leaves no job (on
#    a queue without one: `sluice-ctl jobs` says "job: none"); another
#    submit meanwhile is refused as BUSY while the dead one's staging is
#    fresh, then succeeds, and its job holds its own tasks only (none of
#    the 10 epochs the dead one staged is left beyond its 2);
#  - `sluice-ctl delete` of both queues, in steps, leaves no key, still
#    without a slow script.
# Size: N = 200,000 by default (a few seconds per submit); SLUICE_BIG=1
# runs the full N = 1,000,000 (about 16 s per submit on an idle machine).
# Alone (tests/run.sh): Redis's slowest script (SLOWLOG, 100 ms) and PING
# waits (500 ms) are wall time, which other tests' CPU would stretch.
# test: serial
# shellcheck source=tests/lib/integration.sh
. "$(dirname "$0")/../lib/integration.sh"
need_bin sluice-ctl

N=200000
[[ ${SLUICE_BIG:-0} == 1 ]] && N=1000000
EPOCHS=10
TASKS=$((N * EPOCHS))
MAX_PING_MS=500

redis_tmp_start
rcli CONFIG SET slowlog-log-slower-than 100000 >/dev/null
rcli CONFIG SET slowlog-max-len 1024 >/dev/null
"$PY" -c 'import sys; open(sys.argv[1], "w").write("x\n" * int(sys.argv[2]))' "$T/one-byte-lines.txt" "$N"
echo "lines one-byte-lines.txt split=$N" >"$T/big.manifest"

# The latency probe: PING every 5 ms until $T/stop exists (it creates
# $T/ready after its first); then one line
# "pings=N max_ms=X busy=B errors=E [first error]".
cat >"$T/probe.py" <<'EOF'
import os, sys, time
import redis
r = redis.Redis(host="127.0.0.1", port=int(sys.argv[1]), socket_timeout=30)
stop, ready = sys.argv[2], sys.argv[3]
n = busy = errors = 0
worst = 0.0
first = ""
while not os.path.exists(stop):
    t = time.monotonic()
    try:
        r.ping()
    except Exception as e:
        errors += 1
        busy += "BUSY" in str(e)
        first = first or repr(e)
    worst = max(worst, time.monotonic() - t)
    n += 1
    if n == 1:
        open(ready, "w").close()
    time.sleep(0.005)
print("pings=%d max_ms=%.1f busy=%d errors=%d %s" % (n, worst * 1000, busy, errors, first))
EOF
probe_start() {
    local i
    rm -f "$T/stop" "$T/ready"
    bg "$T/probe.out" "$T/probe.err" "$PY" "$T/probe.py" "$REDIS_PORT" "$T/stop" "$T/ready"
    PROBE=$BG_PID
    for ((i = 0; i < 200; i++)); do
        [[ -e $T/ready ]] && return 0
        sleep 0.05
    done
    fail "the PING probe did not start: $(cat "$T/probe.err")"
}
# probe_check WHAT: stops the probe; fails on BUSY, errors or a slow PING.
probe_check() {
    local out rc=0
    touch "$T/stop"
    wait_pid "$PROBE" 30 || rc=$?
    out=$(cat "$T/probe.out")
    ((rc == 0)) || fail "$1: the probe failed (exit $rc): $out $(cat "$T/probe.err")"
    note "$1: PING probe: $out"
    [[ $(kv busy "$out") == 0 && $(kv errors "$out") == 0 ]] || fail "$1: Redis refused PINGs: $out"
    awk -v m="$(kv max_ms "$out")" -v lim=$MAX_PING_MS 'BEGIN { exit !(m <= lim) }' ||
        fail "$1: a PING waited $(kv max_ms "$out") ms (limit $MAX_PING_MS ms)"
    [[ $(kv pings "$out") -ge 1 ]] || fail "$1: the probe did not run: $out"
}
# no_slow_script WHAT: SLOWLOG holds no script call.
no_slow_script() {
    local log
    log=$(rcli SLOWLOG GET 1024)
    if grep -qiE '^(eval|evalsha|fcall)$' <<<"$log"; then
        fail "$1: SLOWLOG records a script slower than 100 ms: $(tr '\n' ' ' <<<"$log" | cut -c1-600)"
    fi
    note "$1: SLOWLOG has $(rcli SLOWLOG LEN) entries, no script"
}

# ---- a big submit, watched ---------------------------------------------------
ctl create big --max-batches 10 --max-bytes 64M >/dev/null
rcli SLOWLOG RESET >/dev/null
probe_start
t0=$(now_ms)
out=$(ctl submit big --manifest "$T/big.manifest" --epochs $EPOCHS --batch-size 1) ||
    fail "submit failed: $out"
ms=$(($(now_ms) - t0))
probe_check "submit of $TASKS tasks"
no_slow_script "submit"
echo "submit of $N shards x $EPOCHS epochs: $ms ms: $out"
[[ $out == "submitted $TASKS tasks "* ]] || fail "submit said: $out"
[[ $(rcli HGET "sluice:{big}:jrun" twaiting) == "$TASKS" && $(rcli HLEN "sluice:{big}:taskdef") == "$N" ]] ||
    fail "the job holds $(rcli HGET "sluice:{big}:jrun" twaiting) tasks and $(rcli HLEN "sluice:{big}:taskdef") definitions"

# ---- all or nothing ------------------------------------------------------------
ctl create half --max-batches 10 --max-bytes 64M >/dev/null
bg "$T/k.out" "$T/k.err" "$BUILD/sluice-ctl" --redis "$REDIS_URL" submit half \
    --manifest "$T/big.manifest" --epochs $EPOCHS --batch-size 1
k=$BG_PID
staged() { [[ $(rcli HGET "sluice:{half}:jstage" tasks) -ge $((TASKS / 2)) ]] 2>/dev/null; }
for ((i = 0; i < 1200; i++)); do
    staged && break
    kill -0 "$k" 2>/dev/null || break
    sleep 0.05
done
staged || fail "the second submit did not get half way: $(rcli HGETALL "sluice:{half}:jstage" | tr '\n' ' ') $(cat "$T/k.err")"
kill -KILL "$k"
wait "$k" 2>/dev/null || true
t_kill=$(now_ms)
note "submit killed with $(rcli HGET "sluice:{half}:jstage" tasks) of $TASKS tasks staged"
jobs=$(ctl jobs half) || fail "sluice-ctl jobs failed: $jobs"
grep -qx "job: none" <<<"$jobs" || fail "a killed submit left a job visible: $jobs"
[[ $(rcli EXISTS "sluice:{half}:job") == 0 ]] || fail "the killed submit left a job hash"
rc=0
out=$(ctl submit half --manifest "$T/big.manifest" --epochs 2 --batch-size 1 2>&1) || rc=$?
note "a submit right after the kill: exit $rc: $out"
if ((rc != 0)); then
    [[ $out == *"another submit to this queue is under way"* ]] ||
        fail "a submit right after the kill failed without saying why: $out"
    grep -qx "job: none" <<<"$(ctl jobs half)" || fail "the refused submit left a job: $(ctl jobs half)"
fi

# ---- delete of the big queue, watched (meanwhile the dead submit's staging
# grows stale) ----------------------------------------------------------------
# Frames of pushes whose script never ran (NOSCRIPT inside a MULTI) are
# swept too, from the client; another queue's are not touched.
for id in 0:5:1 0:5:2 1:9:3; do rcli SET "sluice:{big}:in:$id" frame >/dev/null; done
rcli SET "sluice:{big2}:in:0:1:1" frame >/dev/null
rcli SLOWLOG RESET >/dev/null
probe_start
t0=$(now_ms)
out=$(ctl delete big) || fail "delete failed: $out"
ms=$(($(now_ms) - t0))
probe_check "delete"
no_slow_script "delete"
note "delete of the job's queue: $ms ms: $out"
left=$(rcli --scan --pattern 'sluice:{big}:*' | awk 'NR <= 5')
[[ -z $left ]] || fail "delete left keys: $left"
[[ $(rcli EXISTS "sluice:{big2}:in:0:1:1") == 1 ]] || fail "delete of 'big' removed a key of queue 'big2'"
rcli DEL "sluice:{big2}:in:0:1:1" >/dev/null

# ---- a later submit succeeds -----------------------------------------------------
if ((rc != 0)); then
    for ((i = 0; i < 30; i++)); do
        rc=0
        out=$(ctl submit half --manifest "$T/big.manifest" --epochs 2 --batch-size 1 2>&1) || rc=$?
        ((rc == 0)) && break
        [[ $out == *"another submit to this queue is under way"* ]] || fail "the later submit failed: $out"
        sleep 1
    done
    ((rc == 0)) || fail "no later submit succeeded within 30 s of the kill: $out"
fi
note "later submit, $(($(now_ms) - t_kill)) ms after the kill: $out"
[[ $out == "submitted $((2 * N)) tasks "* ]] || fail "the later submit said: $out"
for e in 0 1; do
    [[ $(rcli LLEN "sluice:{half}:tasks:$e") == "$N" ]] ||
        fail "epoch $e of the later job has $(rcli LLEN "sluice:{half}:tasks:$e") tasks, expected $N"
done
for ((e = 2; e < EPOCHS; e++)); do
    [[ $(rcli EXISTS "sluice:{half}:tasks:$e") == 0 ]] ||
        fail "tasks:$e staged by the killed submit is still there ($(rcli LLEN "sluice:{half}:tasks:$e") tasks)"
done
[[ $(rcli EXISTS "sluice:{half}:jstage") == 0 ]] || fail "a staging area is left"
grep -qx "job: running" <<<"$(ctl jobs half)" || fail "the later job: $(ctl jobs half)"

rcli SLOWLOG RESET >/dev/null
out=$(ctl delete half) || fail "delete failed: $out"
no_slow_script "delete of the second queue"
[[ $(rcli DBSIZE) == 0 ]] || fail "keys left after both deletes: $(rcli --scan | awk 'NR <= 10' | tr '\n' ' ')"
echo "ok: $TASKS tasks submitted without a slow script; a killed submit left no job; deletes left no key"
