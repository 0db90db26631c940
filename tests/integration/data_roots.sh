#!/usr/bin/env bash
# A producer reads only regular files under its data roots, whatever the
# job in Redis names (docs/DEPLOY.md, "Data roots"). Redis has a password
# here, in SLUICE_REDIS_PASSWORD and REDISCLI_AUTH as a deployment has it.
#
# Job mode, --data-root $T/data, --follow, a job of 8 tasks, some of them
# rewritten in Redis after submit (HSET on the taskdef hash) as someone
# with a consumer's credentials could:
#   0 good.txt  1 outside the root  2 a symbolic link out of the root
#   3 a FIFO in the root  4 /dev/zero  5 /proc/self/environ (rewritten)
#   6 sub/more.txt  7 a link inside the root to sub/more.txt (rewritten)
# Tasks 1-5 fail with "PATH: refused: <why>" on the producer's stderr and
# in sluice-ctl info; the producer neither hangs on the FIFO nor stops, and
# exits 0 on SIGTERM within a bound; the consumer gets exactly the records
# of 0, 6 and 7 and is told of the failed tasks (exit 3).
# Start-up: job mode without a root, with a missing one (flag or variable),
# an empty entry in SLUICE_DATA_ROOTS or a root on /proc exits 2.
# Files mode without roots still refuses /dev/zero, /proc/self/environ and
# a FIFO, at once (exit 1), and so does a root of /.
# --exec (roots from SLUICE_DATA_ROOTS): the command gets the resolved path,
# an environment without SLUICE_* and REDISCLI_AUTH (another variable
# stays), and never runs for a path outside the root.
# shellcheck source=tests/lib/integration.sh
. "$(dirname "$0")/../lib/integration.sh"
need_bin sluice-ctl sluice-producer sluice-consume

pw=roots-test-$RANDOM$RANDOM
redis_tmp_start --requirepass "$pw"
export SLUICE_REDIS_PASSWORD=$pw REDISCLI_AUTH=$pw
r() { REDISCLI_AUTH=$pw redis-cli -h 127.0.0.1 -p "$REDIS_PORT" --raw "$@"; }
P=$BUILD/sluice-producer

D=$T/data
mkdir -p "$D/sub" "$T/outside"
seq 1 50 | sed 's/^/good-/' >"$D/good.txt"
seq 1 30 | sed 's/^/more-/' >"$D/sub/more.txt"
echo placeholder >"$D/placeholder.txt"
echo "SECRET=$pw" >"$T/outside/secret.txt"
ln -s ../outside/secret.txt "$D/escape"
ln -s sub/more.txt "$D/alias.txt"
mkfifo "$D/fifo"

# ---- start-up -----------------------------------------------------------------
startup_refused() {   # WANT ROOTS ARGS...: job mode exits 2 with WANT (ROOTS: the variable)
    local want=$1 roots=$2 rc=0
    shift 2
    env SLUICE_DATA_ROOTS="$roots" "$P" --redis "$REDIS_URL" --queue roots "$@" \
        >"$T/s.out" 2>"$T/s.err" || rc=$?
    ((rc == 2)) && grep -qF -- "$want" "$T/s.err" ||
        fail "job mode $*, SLUICE_DATA_ROOTS='$roots': exit $rc, not 2 with '$want':" \
            "$(cat "$T/s.err")"
}
startup_refused "job mode (no FILE) needs --data-root DIR" ""
startup_refused "--data-root $T/nope: No such file or directory" "$D" --data-root "$T/nope"
startup_refused "SLUICE_DATA_ROOTS: $T/nope: No such file or directory" "$T/nope"
startup_refused "has an empty entry" "$D::/tmp"
startup_refused "--data-root /proc: on proc, a kernel file system" "" --data-root /proc
note "start-up refusals ok"

# ---- files mode: no FIFO, device or /proc file, with or without roots ---------
files_refused() {   # WANT ARGS...: exit 1, promptly, with WANT on stderr
    local want=$1 rc=0
    shift
    timeout 20 env -u SLUICE_DATA_ROOTS "$P" --redis "$REDIS_URL" --queue roots --batch-size 1 \
        --format lines "$@" >"$T/f.out" 2>"$T/f.err" || rc=$?
    ((rc == 1)) && grep -qF -- "$want" "$T/f.err" ||
        fail "files mode $*: exit $rc (124: it hung), expected 1 and '$want': $(cat "$T/f.err")"
}
files_refused "/dev/zero: refused: a character device, not a regular file" /dev/zero
files_refused "/proc/self/environ: refused: on proc, a kernel file system" /proc/self/environ
files_refused "$D/fifo: refused: a FIFO, not a regular file" "$D/fifo"
files_refused "/proc/self/environ: refused: on proc" --data-root / /proc/self/environ
files_refused "$T/outside/secret.txt: refused: not under a data root" --data-root "$D" \
    "$T/outside/secret.txt"
note "files mode refusals ok"

# ---- job mode -------------------------------------------------------------------
q=roots
{
    echo "lines $D/good.txt"
    echo "lines $T/outside/secret.txt"
    echo "lines $D/placeholder.txt"
    echo "lines $D/fifo"
    echo "lines /dev/zero"
    echo "lines $D/placeholder.txt"
    echo "lines $D/sub/more.txt"
    echo "lines $D/placeholder.txt"
} >"$T/job.manifest"
ctl create "$q" --max-batches 100 --max-bytes 16M >/dev/null
ctl submit "$q" --manifest "$T/job.manifest" --epochs 1 --batch-size 7 --max-attempts 1 \
    >/dev/null || fail "submit failed"
# What a writer of Redis could do: point tasks elsewhere (submit stored
# resolved paths; these are not).
rewrite() {   # SHARD PATH: the task's single path becomes PATH
    local def
    def=$(r HGET "sluice:{$q}:taskdef" "$1")
    [[ $def == lines$'\t'* ]] || fail "taskdef $1 is '$def'"
    r HSET "sluice:{$q}:taskdef" "$1" "${def%$'\t'*}"$'\t'"$2" >/dev/null
}
rewrite 2 "$D/escape"
rewrite 5 /proc/self/environ
rewrite 7 "$D/alias.txt"
[[ $(r HGET "sluice:{$q}:taskdef" 5) == *$'\t'/proc/self/environ ]] ||
    fail "rewrite of task 5 failed"

bg "$T/c.out" "$T/c.err" "$BUILD/sluice-consume" --redis "$REDIS_URL" --queue "$q" --summary --quiet
c=$BG_PID
bg "$T/p.out" "$T/p.err" "$P" --redis "$REDIS_URL" --queue "$q" --data-root "$D" --follow \
    --summary
p=$BG_PID
finished() { ctl info "$q" 2>/dev/null | grep -qx "job: finished with 5 failed tasks"; }
wait_for 60 finished ||
    fail "the job did not finish with 5 failed tasks: $(ctl info "$q"; cat "$T/p.err")"
kill -0 "$p" 2>/dev/null || fail "the producer exited: $(cat "$T/p.err")"
kill -TERM "$p"
rc=0; wait_pid "$p" 10 || rc=$?
((rc == 0)) ||
    fail "producer exit $rc on SIGTERM (124: still running after 10 s): $(cat "$T/p.err")"
grep -q "SIGTERM: shut down cleanly" "$T/p.err" || fail "no clean shutdown: $(cat "$T/p.err")"

info=$(ctl info "$q")
note "$info"
expect_failed() {   # SHARD TEXT: task 0:SHARD failed with TEXT, here and on the producer's stderr
    grep -qF "failed 0:$1: attempts 1: $2" <<<"$info" ||
        fail "sluice-ctl info does not show task 0:$1 failed with '$2': $info"
    grep -q "task 0:$1 (.*) attempt 1 failed: " "$T/p.err" && grep -qF -- "$2" "$T/p.err" ||
        fail "the producer did not say why task 0:$1 failed ('$2'): $(cat "$T/p.err")"
}
expect_failed 1 "$T/outside/secret.txt: refused: not under a data root"
expect_failed 2 "$D/escape: refused: a symbolic link leads out of the data roots"
expect_failed 3 "$D/fifo: refused: a FIFO, not a regular file"
expect_failed 4 "/dev/zero: refused: not under a data root"
expect_failed 5 "/proc/self/environ: refused: not under a data root"
grep -qx "tasks_done: 3" <<<"$info" || fail "tasks 0, 6 and 7 are not done: $info"

rc=0; wait_pid "$c" 30 || rc=$?
((rc == 3)) || fail "consumer exit $rc, expected 3 (an epoch lost records): $(cat "$T/c.err")"
line=$(cat "$T/c.out")
note "consumer: $line"
want=$(cat "$D/good.txt" "$D/sub/more.txt" "$D/sub/more.txt" | lines_sum)
[[ $(kv records "$line") == 110 ]] ||
    fail "consumer got $(kv records "$line") records, expected 110"
[[ $(kv checksum "$line") == "$want" ]] ||
    fail "consumer checksum $(kv checksum "$line"), expected $want"
note "job mode: 5 tasks refused, 110 records delivered"

# ---- --exec ---------------------------------------------------------------------
qx=rootsx
cat >"$T/emit.py" <<'EOF'
import os, struct, sys
path, log = sys.argv[1], sys.argv[2]
with open(log, "a") as f:
    f.write("ARG %s\n" % path)
    for k in sorted(os.environ):
        f.write("ENV %s=%s\n" % (k, os.environ[k]))
for line in open(path, "rb").read().splitlines():
    sys.stdout.buffer.write(struct.pack("<I", len(line)) + line)
EOF
printf 'lines %s\nlines %s\n' "$D/placeholder.txt" "$T/outside/secret.txt" >"$T/x.manifest"
ctl create "$qx" --max-batches 100 --max-bytes 16M >/dev/null
ctl submit "$qx" --manifest "$T/x.manifest" --epochs 1 --batch-size 7 --max-attempts 1 \
    >/dev/null || fail "submit of the --exec job failed"
q=$qx rewrite 0 "$D/alias.txt"
bg "$T/x.out" "$T/x.err" env SLUICE_DATA_ROOTS="$D" SLUICE_TEST_MARK=1 KEEP_ME=kept "$P" \
    --redis "$REDIS_URL" --queue "$qx" --exec "$PY $T/emit.py {path} $T/child.log" --summary
rc=0; wait_pid "$BG_PID" 60 || rc=$?
((rc == 0)) || fail "--exec producer exit $rc: $(cat "$T/x.err")"
[[ $(kv records "$(cat "$T/x.out")") == 30 ]] ||
    fail "--exec pushed $(cat "$T/x.out"), expected 30 records"
[[ -s $T/child.log ]] || fail "the command never ran"
args=$(grep '^ARG ' "$T/child.log")
[[ $args == "ARG $(realpath "$D/sub/more.txt")" ]] ||
    fail "the command ran with '$args' (want only the resolved $D/alias.txt)"
grep -qx "ENV KEEP_ME=kept" "$T/child.log" || fail "the command lost KEEP_ME: $(cat "$T/child.log")"
grep -q "^ENV PATH=" "$T/child.log" || fail "the command lost PATH"
if grep -q "^ENV SLUICE_\|^ENV REDISCLI_AUTH=\|$pw" "$T/child.log"; then
    fail "the command saw sluice's variables: $(grep "SLUICE_\|REDISCLI\|$pw" "$T/child.log")"
fi
grep -qF "failed 0:1: attempts 1: $T/outside/secret.txt: refused: not under a data root" \
    <<<"$(ctl info "$qx")" || fail "--exec task 0:1 not refused: $(ctl info "$qx")"
echo "ok: 5 paths refused in job mode, 3 in files mode, --exec checked and without secrets"
