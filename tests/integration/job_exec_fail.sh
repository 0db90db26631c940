#!/usr/bin/env bash
# A task whose --exec command exits 1 (after writing "boom" to stderr) is
# retried up to the job's --max-attempts (3), then recorded as failed with
# the tail of the command's stderr, which sluice-ctl info shows (text and
# JSON). The other tasks complete, the epoch ends without the failed task,
# both producers exit 0, and the consumer gets exactly the records of the
# good tasks, as the command wrote them, and is told: the end of the epoch
# names the failed task and its error, and it exits 3. The job ends
# "finished with 1 failed task".
# shellcheck source=tests/lib/integration.sh
. "$(dirname "$0")/../lib/integration.sh"
need_bin sluice-ctl sluice-producer sluice-consume

redis_tmp_start
q=jobexec

# The command: length-prefixed records (4-byte little-endian length) of the
# lines of {path}, records [start, end); a path containing "bad" fails.
cat >"$T/emit.py" <<'EOF'
import struct, sys
path, start = sys.argv[1], int(sys.argv[2])
end = sys.argv[3] if len(sys.argv) > 3 else ""
if "bad" in path:
    sys.stderr.write("loading %s\nboom\n" % path)
    sys.exit(1)
lines = open(path, "rb").read().splitlines()
for line in lines[start:int(end) if end else len(lines)]:
    sys.stdout.buffer.write(struct.pack("<I", len(line)) + line)
EOF
for f in a bad c d; do
    seq 1 40 | sed "s/^/$f-/" >"$T/$f.txt"
done
printf 'lines a.txt\nlines bad.txt\nlines c.txt records=10:30\nlines d.txt\n' >"$T/m.manifest"
# Records the consumer must get: a (40), c 10..29 (20), d (40).
want=$( (cat "$T/a.txt"; sed -n 11,30p "$T/c.txt"; cat "$T/d.txt") | lines_sum)

ctl create "$q" --max-batches 100 --max-bytes 16M >/dev/null
ctl submit "$q" --manifest "$T/m.manifest" --epochs 1 --batch-size 7 --max-attempts 3 >/dev/null ||
    fail "submit failed"
bg "$T/c.out" "$T/c.err" "$BUILD/sluice-consume" --redis "$REDIS_URL" --queue "$q" --summary --quiet
c=$BG_PID
ps=()
for k in 1 2; do
    bg "$T/p$k.out" "$T/p$k.err" "$BUILD/sluice-producer" --redis "$REDIS_URL" --queue "$q" \
        --exec "$PY $T/emit.py {path} {start} '{end}'" --summary
    ps+=("$BG_PID")
done
for k in 1 2; do
    rc=0; wait_pid "${ps[k - 1]}" 60 || rc=$?
    ((rc == 0)) || fail "producer $k exit $rc (expected 0: a failed task is not a producer error): $(cat "$T/p$k.err")"
done
rc=0; wait_pid "$c" 30 || rc=$?
((rc == 3)) || fail "consumer exit $rc, expected 3 (an epoch lost records): $(cat "$T/c.err")"
grep -q "epoch 0 ended without the records of 1 failed task: 0:1 (exec: .*exited with status 1: .*boom)" \
    "$T/c.err" || fail "the consumer did not say which task failed: $(cat "$T/c.err")"

attempts=$(cat "$T/p1.err" "$T/p2.err" | grep -c "task 0:1 .*failed: exec: .*exited with status 1: .*boom") || true
((attempts == 3)) || fail "expected 3 failed attempts of task 0:1 on the producers' stderr, got $attempts: $(cat "$T/p1.err" "$T/p2.err")"
line=$(cat "$T/c.out")
note "consumer: $line"
[[ $(kv records "$line") == 100 ]] || fail "consumer got $(kv records "$line") records, expected 100"
[[ $(kv checksum "$line") == "$want" ]] || fail "consumer checksum $(kv checksum "$line"), expected $want"

info=$(ctl info "$q")
note "$info"
grep -qx "job: finished with 1 failed task" <<<"$info" || fail "job not finished with 1 failed task"
grep -qx "tasks_done: 3" <<<"$info" || fail "tasks_done is not 3"
grep -qx "tasks_failed: 1" <<<"$info" || fail "tasks_failed is not 1"
grep -q "^failed 0:1: attempts 3: exec: .*exited with status 1: .*boom" <<<"$info" ||
    fail "info does not show task 0:1 failed with the command's stderr"
grep -q "^epoch 0: .*tasks_finished=4/4 failed_tasks=1 end=posted" <<<"$info" ||
    fail "epoch 0 should have ended with one failed task"
ctl info "$q" --json | "$PY" -c 'import json, sys
f = json.load(sys.stdin)["job"]["failed"]
assert len(f) == 1 and f[0]["task"] == "0:1" and f[0]["attempts"] == 3, f
assert "boom" in f[0]["error"] and "status 1" in f[0]["error"], f' || fail "info --json: bad failed list"
echo "ok: task 0:1 failed after 3 attempts with its stderr; 100 records of the other tasks delivered"
