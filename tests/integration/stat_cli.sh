#!/usr/bin/env bash
# sluice-ctl stat, on a job in progress: a producer blocked by the budget
# (8 batches) and a consumer holding 2 batches.
#  - stat --json is one JSON object that agrees with Redis (depth, bytes,
#    counters, producers and consumers with their published counters, the
#    job's tasks and epochs); rates are null in a single snapshot.
#  - stat (not a terminal) prints the bars, the producer and consumer lines,
#    the epochs, failed tasks and dead letters.
#  - stat --watch --interval-ms 200 (not a terminal) prints snapshots one
#    after another, separated by a blank line, with rates from the second
#    on and, after 3 s, the blocked producer's share of time (~100%); it
#    exits 0 on SIGINT; --watch --json prints a JSON object a line.
#  - to a pipe, a snapshot whose figures did not change is not printed again;
#    stat --watch ends with exit 1 and a line saying so when the queue is
#    deleted; with --follow it goes on and shows the queue created anew.
#  - under a pseudo-terminal (script(1), when installed) the view redraws in
#    place with ANSI cursor-home and clear sequences.
#  - after the job: "finished", every epoch's end posted; a stat --watch
#    started while the job ran ends by itself (exit 0) with that snapshot.
# shellcheck source=tests/lib/integration.sh
. "$(dirname "$0")/../lib/integration.sh"
need_bin sluice-ctl sluice-producer sluice-consume gen-tfrecord hold

redis_tmp_start
q=sq
for i in 0 1 2; do
    gen "$T/s$i.tfrecord" 50 $((40 + i)) 100 400 >/dev/null
    echo "tfrecord s$i.tfrecord"
done >"$T/job.manifest"
ctl create "$q" --max-batches 8 --max-bytes 1M --lease-ms 3000 >/dev/null
ctl submit "$q" --manifest "$T/job.manifest" --epochs 2 --batch-size 10 >/dev/null
bg "$T/p.out" "$T/p.err" "$BUILD/sluice-producer" --redis "$REDIS_URL" --queue "$q" \
    --id prod-s --follow --quiet
p=$BG_PID
bg "$T/h.out" "$T/h.err" "$BUILD/hold" --redis "$REDIS_URL" --queue "$q" --count 2 --prefetch 1
h=$BG_PID
for _ in $(seq 200); do
    grep -q '^held 2' "$T/h.out" 2>/dev/null && break
    sleep 0.05
done
grep -q '^held 2' "$T/h.out" || fail "hold did not get 2 batches: $(cat "$T/h.err")"
# Until the producer is blocked at the budget and both have beaten.
for _ in $(seq 200); do
    [[ $(redis_tmp_cli HGET "sluice:{$q}:stats" pushed) == 8 &&
       $(redis_tmp_cli HEXISTS "sluice:{$q}:pstats:prod-s" batches) == 1 &&
       $(redis_tmp_cli HGET "sluice:{$q}:pstats:prod-s" batches) == 8 &&
       $(redis_tmp_cli HLEN "sluice:{$q}:consumers") == 1 ]] && break
    sleep 0.05
done
[[ $(redis_tmp_cli HGET "sluice:{$q}:stats" pushed) == 8 ]] ||
    fail "expected 8 batches pushed (the budget, 2 of them taken), Redis says $(redis_tmp_cli HGET "sluice:{$q}:stats" pushed)"
cid=$(redis_tmp_cli HKEYS "sluice:{$q}:consumers")
for _ in $(seq 100); do
    [[ $(redis_tmp_cli HGET "sluice:{$q}:cstats:$cid" batches) == 2 ]] && break
    sleep 0.05
done

# --- --json: one object, agreeing with Redis -------------------------------
note "stat --json"
ctl stat "$q" --json >"$T/stat.json" || fail "stat --json failed"
[[ $(wc -l <"$T/stat.json") == 1 ]] || fail "stat --json printed $(wc -l <"$T/stat.json") lines"
"$PY" - "$REDIS_PORT" "$q" "$T/stat.json" <<'PYEOF' || fail "stat --json disagrees with Redis"
import json, sys
import redis
port, q, path = sys.argv[1:4]
r = redis.Redis(host="127.0.0.1", port=int(port), decode_responses=True)
k = lambda name: "sluice:{%s}:%s" % (q, name)
s = json.load(open(path))
def check(what, got, want):
    if got != want:
        print("FAIL: %s: stat says %r, Redis %r" % (what, got, want))
        sys.exit(1)
check("queue", s["queue"], q)
# Batches held: the fields of dlv but its pin "~" (docs/PROTOCOL.md).
check("batches", s["batches"], r.hlen(k("dlv")) - r.hexists(k("dlv"), "~"))
check("bytes", s["bytes"], int(r.get(k("bytes")) or 0))
check("max_batches", s["max_batches"], 8)
check("max_bytes", s["max_bytes"], 1 << 20)
check("stats", s["stats"], {f: int(v) for f, v in r.hgetall(k("stats")).items()})
check("dead_letters", s["dead_letters"], r.llen(k("dead")))
check("rates", s["rates"], {"push_batches_per_s": None, "push_bytes_per_s": None,
                            "ack_batches_per_s": None, "ack_bytes_per_s": None})
check("producers", [p["id"] for p in s["producers"]], r.hkeys(k("producers")))
check("consumers", [c["id"] for c in s["consumers"]], r.hkeys(k("consumers")))
ps = r.hgetall(k("pstats:prod-s"))
p = s["producers"][0]
for f in ("batches", "bytes", "tasks_done", "tasks_failed"):
    check("producer " + f, p["stats"][f], int(ps[f]))
check("producer alive", p["alive"], True)
c = s["consumers"][0]
cs = r.hgetall(k("cstats:" + c["id"]))
for f in ("batches", "bytes", "redelivered", "duplicates", "invalid", "epoch"):
    check("consumer " + f, c["stats"][f], int(cs[f]))
check("consumer pending", c["pending"], r.llen(k("pending:" + c["id"])))
j = s["job"]
check("job state", j["state"], r.hget(k("jrun"), "state"))
check("tasks total", j["tasks"]["total"], 6)
check("tasks failed", j["tasks"]["failed"], r.llen(k("failed")))
check("epochs", [e["epoch"] for e in j["per_epoch"]], [0, 1])
pushed = sum(e["pushed"] for e in j["per_epoch"])
check("pushed per epoch", pushed, int(r.hget(k("stats"), "pushed")))
check("blocked_share", sorted(s["blocked_share"]), ["consumers", "producers"])
print("ok: stat --json agrees with Redis")
PYEOF

# --- text, not a terminal -----------------------------------------------------
note "stat (text)"
ctl stat "$q" >"$T/stat.txt" || fail "stat failed"
note "$(cat "$T/stat.txt")"
want=(
    "queue 'sq'"
    "batches    [" "/8 batches"
    "bytes      [" "/1.0 MiB"
    "rates      n/a (first snapshot)"
    "totals     pushed 8  acked 0"
    "job        running: epoch 0 of 0..1 open; tasks "
    "  epoch 0  tasks "
    "  epoch 1  tasks 0/3"
    "producers  1 alive"
    "  prod-s  seen " "backpressure "
    "consumers  1 alive"
    "  $cid  rank -  seen " "blocked in next() " "pending "
    "failed tasks  0"
    "dead letters  0"
)
for w in "${want[@]}"; do
    grep -qF -- "$w" "$T/stat.txt" || fail "stat text lacks '$w'"
done
grep -qE '^batches    \[#+\.*\] [0-9]+/8 batches' "$T/stat.txt" || fail "no batch bar"
if grep -q $'\033' "$T/stat.txt"; then fail "escape sequences in the output to a file"; fi

# --- --watch, not a terminal ------------------------------------------------------
note "stat --watch (not a terminal)"
bg "$T/w.out" "$T/w.err" "$BUILD/sluice-ctl" --redis "$REDIS_URL" stat "$q" --watch --interval-ms 200
w=$BG_PID
# The blocked producer's counters move with each of its heartbeats (every
# second), so snapshots keep coming; wait for one with a share shown.
has_share() { grep -q '^  prod-s .*% of the last [0-9]* s)' "$T/w.out"; }
wait_for 15 has_share || fail "no blocked share after 15 s: $(tail -n 20 "$T/w.out")"
kill -INT "$w"
rc=0; wait_pid "$w" 5 || rc=$?
((rc == 0)) || fail "stat --watch exit $rc on SIGINT: $(cat "$T/w.err")"
n=$(grep -c "^queue 'sq'" "$T/w.out")
((n >= 2)) || fail "stat --watch printed $n snapshots before the share showed"
blanks=$(grep -c '^$' "$T/w.out")
((blanks == n - 1)) || fail "$n snapshots but $blanks blank lines between them"
grep -q '^rates      push [0-9.]* batches/s' "$T/w.out" || fail "no rates in later snapshots"
# The producer waits for room all along: its share of blocked time, once
# 3 s of snapshots are there, is about all of it.
share=$(grep '^  prod-s ' "$T/w.out" | tail -n 1 | sed -n 's/.*backpressure [0-9.]* s (\([0-9]*\)% of the last \([0-9]*\) s).*/\1 \2/p')
note "producer blocked share at the end: ${share:-none}"
[[ -n $share ]] || fail "no blocked share on the producer line after 3.6 s: $(grep '^  prod-s ' "$T/w.out" | tail -n 1)"
((${share% *} >= 80)) || fail "blocked producer shown blocked ${share% *}% of the time"
note "stat --watch: $n snapshots"

bg "$T/wj.out" "$T/wj.err" "$BUILD/sluice-ctl" --redis "$REDIS_URL" stat "$q" --watch --json --interval-ms 200
w=$BG_PID
sleep 0.8
kill -TERM "$w"
rc=0; wait_pid "$w" 5 || rc=$?
((rc == 0)) || fail "stat --watch --json exit $rc on SIGTERM"
"$PY" - "$T/wj.out" <<'PYEOF' || fail "stat --watch --json output"
import json, sys
objs = [json.loads(l) for l in open(sys.argv[1])]
assert len(objs) >= 2, "%d objects" % len(objs)
assert objs[0]["rates"]["push_batches_per_s"] is None
assert objs[-1]["rates"]["push_batches_per_s"] is not None
PYEOF

# --- a pseudo-terminal: redrawn in place -----------------------------------------
if command -v script >/dev/null 2>&1; then
    note "stat --watch under script(1)"
    cmd="'$BUILD/sluice-ctl' --redis '$REDIS_URL' stat $q --watch --interval-ms 200"
    rc=0
    timeout -k 3 -s INT 1.5 script -qfec "$cmd" /dev/null </dev/null >"$T/tty.out" 2>&1 || rc=$?
    # timeout reports 124 when it had to send the signal.
    ((rc == 0 || rc == 124)) || fail "stat --watch under a pseudo-terminal: exit $rc"
    grep -q $'\033\[H' "$T/tty.out" || fail "no cursor-home sequence on a terminal"
    grep -q $'\033\[J' "$T/tty.out" || fail "no clear-to-end sequence on a terminal"
    frames=$(grep -o $'\033\[H' "$T/tty.out" | wc -l)
    ((frames >= 2)) || fail "$frames frames drawn in 1.5 s"
fi

# --- to a pipe: only what changed; the queue deleted ---------------------------------
note "stat --watch on an idle queue, then deleted"
ctl create idle --max-batches 4 --max-bytes 1M >/dev/null
bg "$T/i.out" "$T/i.err" "$BUILD/sluice-ctl" --redis "$REDIS_URL" stat idle --watch --interval-ms 50
w=$BG_PID
snaps() { grep -c "^queue 'idle'" "$T/i.out" 2>/dev/null || true; }
wait_for 10 eval '[[ $(snaps) == 1 ]]' || fail "no first snapshot of the idle queue"
# Twenty refreshes of a queue where nothing moves: nothing more printed.
sleep 1
[[ $(snaps) == 1 ]] || fail "$(snaps) snapshots of an idle queue in 1 s (want 1)"
rcli HINCRBY "sluice:{idle}:stats" dead 1 >/dev/null
wait_for 10 eval '[[ $(snaps) == 2 ]]' || fail "a changed figure was not printed"
grep -q "dead 1" "$T/i.out" || fail "the second snapshot lacks the changed total"
ctl delete idle >/dev/null
rc=0; wait_pid "$w" 10 || rc=$?
((rc == 1)) || fail "stat --watch of a deleted queue: exit $rc (want 1)"
grep -q "queue 'idle' was deleted while watching" "$T/i.err" ||
    fail "no line saying the queue was deleted: $(cat "$T/i.err")"

note "stat --watch --follow across a delete"
ctl create idle --max-batches 4 --max-bytes 1M >/dev/null
bg "$T/f.out" "$T/f.err" "$BUILD/sluice-ctl" --redis "$REDIS_URL" stat idle --watch --follow \
    --interval-ms 50
w=$BG_PID
wait_for 10 in_file "$T/f.out" "^queue 'idle'" || fail "no first snapshot with --follow"
ctl delete idle >/dev/null
wait_for 10 in_file "$T/f.err" "does not exist" || fail "--follow did not see the delete"
kill -0 "$w" 2>/dev/null || fail "stat --watch --follow ended when the queue was deleted"
ctl create idle --max-batches 9 --max-bytes 1M >/dev/null
wait_for 10 in_file "$T/f.out" "/9 batches" || fail "--follow did not show the queue created anew"
kill -INT "$w"
rc=0; wait_pid "$w" 5 || rc=$?
((rc == 0)) || fail "stat --watch --follow exit $rc on SIGINT"

# --- usage ----------------------------------------------------------------------
rc=0; ctl stat "$q" --interval-ms 200 2>/dev/null || rc=$?
((rc == 2)) || fail "--interval-ms without --watch: exit $rc"
rc=0; ctl stat "$q" --follow 2>/dev/null || rc=$?
((rc == 2)) || fail "--follow without --watch: exit $rc"
rc=0; ctl stat "$q" --watch --interval-ms 10 2>/dev/null || rc=$?
((rc == 2)) || fail "--interval-ms 10: exit $rc"
rc=0; ctl stat "$q" --bogus 2>/dev/null || rc=$?
((rc == 2)) || fail "stat --bogus: exit $rc"
rc=0; ctl stat nosuch 2>"$T/e.err" || rc=$?
((rc == 1)) && grep -q "does not exist" "$T/e.err" || fail "stat of a missing queue: exit $rc"

# --- the job runs to its end ---------------------------------------------------------
kill -KILL "$h"
wait "$h" 2>/dev/null || true
ctl reap "$q" >/dev/null
redis_tmp_cli HSET "sluice:{$q}:meta" lease_ms 1000 >/dev/null
bg "$T/we.out" "$T/we.err" "$BUILD/sluice-ctl" --redis "$REDIS_URL" stat "$q" --watch \
    --interval-ms 100
w=$BG_PID
bg "$T/c.out" "$T/c.err" "$BUILD/sluice-consume" --redis "$REDIS_URL" --queue "$q" --summary --quiet
c=$BG_PID
rc=0; wait_pid "$c" 60 || rc=$?
((rc == 0)) || fail "consumer exit $rc: $(cat "$T/c.err")"
rc=0; wait_pid "$w" 10 || rc=$?
((rc == 0)) || fail "stat --watch did not end by itself after the job (exit $rc): $(cat "$T/we.err")"
last=$(awk 'BEGIN{RS=""} {s=$0} END{print s}' "$T/we.out")
grep -qF "job        finished: all 2 epochs ended" <<<"$last" ||
    fail "stat --watch's last snapshot does not show the job finished: $last"
ctl stat "$q" >"$T/end.txt" || fail "stat after the job"
note "$(cat "$T/end.txt")"
grep -qF "job        finished: all 2 epochs ended; tasks 6/6 done" "$T/end.txt" || fail "job not shown finished"
[[ $(grep -c "end posted" "$T/end.txt") == 2 ]] || fail "not every epoch's end shown posted"
kill -TERM "$p"
rc=0; wait_pid "$p" 10 || rc=$?
((rc == 0)) || fail "producer exit $rc"
echo "ok: stat --json agrees with Redis; text, --watch ($n snapshots), pseudo-terminal"
