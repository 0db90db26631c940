#!/usr/bin/env bash
# Ids and end markers forged by anyone with write access to Redis. The
# consumer checks what it takes from a list byte for byte, with take (the
# list had it already) and with claim (a blocked BLMOVE moved it):
#  (a) an id with a NUL byte ("0:1\0:2", which C string handling would cut
#      to the valid-looking "0:1") goes to the dead letters with exactly
#      its bytes, and leaves no trace in the pending list of the consumer
#      that took it (checked while that consumer holds other batches);
#  (b) an end marker of another epoch (eof:5 in ready:0) and a forged end
#      of the open epoch that was not posted (eof:0 while epoch 0 still has
#      a task to come) are dead-lettered and end nothing: the consumer gets
#      every record of epoch 0 and exactly one end per epoch;
#  (c) a valid-looking id with seq 2^32-1, stored with a frame and a
#      delivery entry as a push would, is dead-lettered ("not a batch id")
#      instead of being acknowledged, which would set bit 2^32-1 of its
#      acknowledgement bitmap: a 512 MiB string in Redis. Every acked:*
#      key stays small, and the push script refuses such a seq (INVALID),
#      leaving no in: key behind.
# shellcheck source=tests/lib/integration.sh
. "$(dirname "$0")/../lib/integration.sh"
need_bin sluice-ctl sluice-consume hold

# pyq CODE ARGS...: runs Python with j (a consumer_jobtool Job on queue $q),
# r (its redis client), key(name) and the ARGS in sys.argv[1:]; its
# stderr goes to stdout, so that a failure message is captured with it.
pyq() {
    local code=$1
    shift
    "$PY" - "$REDIS_PORT" "$q" "$BUILD/sluice-ctl" "$ROOT/tests/integration" "$@" 2>&1 <<PYEOF
import sys
sys.path.insert(0, sys.argv[4])
from consumer_jobtool import Job, frame, fnv1a64, MASK
j = Job(sys.argv[1], sys.argv[2], sys.argv[3])
r = j.r
key = j.key
sys.argv = [sys.argv[0]] + sys.argv[5:]
$code
PYEOF
}
# kill9 PID: kill -9 of a background job, without the shell's notice.
kill9() { kill -9 "$1"; wait "$1" 2>/dev/null || true; }
held_lines() { grep -q '^held ' "$1" 2>/dev/null; }
llen_is() { [[ $(rcli LLEN "$1") == "$2" ]]; }

redis_tmp_start

# ---- (a) an id with a NUL byte ---------------------------------------------
q=nul
ctl create "$q" --max-batches 100 --max-bytes 64M --lease-ms 1000 >/dev/null

# a1: take. The forged id is first in line, two valid batches behind it.
pyq '
r.lpush(key("ready:0"), b"0:1\x00:2")
j.push(0, 2, 0, [b"first"])
j.push(0, 2, 1, [b"second"])
' || fail "a1: pushing failed"
bg "$T/a1.out" "$T/a1.err" "$BUILD/hold" --redis "$REDIS_URL" --queue "$q" --count 2 \
    --prefetch 1 --timeout-ms 10000
h1=$BG_PID
wait_for 20 held_lines "$T/a1.out" || fail "a1: hold did not get 2 batches: $(cat "$T/a1.err")"
note "a1 hold: $(tr '\n' ' ' <"$T/a1.out")"
grep -qx 'id 0:2:0 deliveries=1' "$T/a1.out" && grep -qx 'id 0:2:1 deliveries=1' "$T/a1.out" ||
    fail "a1: hold should hold 0:2:0 and 0:2:1: $(cat "$T/a1.out")"
cid1=$(rcli HKEYS "sluice:{$q}:consumers")
[[ -n $cid1 && $cid1 != *$'\n'* ]] || fail "a1: expected one registered consumer, got '$cid1'"
out=$(pyq '
want = b"0:1\x00:2"
dead = r.lrange(key("dead"), 0, -1)
if dead != [want]:
    sys.exit("dead list is %r, expected exactly [%r]" % (dead, want))
info = r.hget(key("deadinfo"), want)
if not info or b"not a batch id" not in info:
    sys.exit("deadinfo of the NUL id: %r" % info)
pend = r.lrange(key("pending:" + sys.argv[1]), 0, -1)
if sorted(pend) != [b"0:2:0", b"0:2:1"]:
    sys.exit("pending list of the holder is %r, expected exactly the 2 valid ids" % pend)
for k in r.scan_iter(key("pending:*")):
    if any(b"\x00" in x or x.startswith(b"0:1") for x in r.lrange(k, 0, -1)):
        sys.exit("%r keeps a trace of the forged id: %r" % (k, r.lrange(k, 0, -1)))
if r.exists(key("b:0:1")) or r.hexists(key("dlv"), "0:1"):
    sys.exit("the forged id was cut to 0:1 somewhere")
print("dead=%r reason=%r" % (dead[0], info))
' "$cid1") || fail "a1 (take): $out"
note "a1: $out"
kill9 "$h1"

# a2: claim. A consumer blocked in BLMOVE on the empty list moves the
# forged id into its pending list itself.
q=nul2
ctl create "$q" --max-batches 100 --max-bytes 64M --lease-ms 1000 >/dev/null
bg "$T/a2.out" "$T/a2.err" "$BUILD/hold" --redis "$REDIS_URL" --queue "$q" --count 1 \
    --prefetch 1 --timeout-ms 15000
h2=$BG_PID
wait_for 10 eval '[[ -n $(rcli HKEYS "sluice:{$q}:consumers") ]]' ||
    fail "a2: hold did not register: $(cat "$T/a2.err")"
# It blocks within a few ms of registering; give the BLMOVE a moment to be sent.
wait_for 10 eval '[[ $(rcli CLIENT LIST | grep -c "cmd=blmove") -ge 1 ]]' ||
    fail "a2: hold never blocked in BLMOVE"
pyq 'r.lpush(key("ready:0"), b"0:1\x00:2")' || fail "a2: lpush failed"
wait_for 10 llen_is "sluice:{$q}:dead" 1 || fail "a2: the forged id was not dead-lettered"
pyq 'j.push(0, 2, 0, [b"after"])' || fail "a2: push failed"
wait_for 20 held_lines "$T/a2.out" || fail "a2: hold did not get the valid batch: $(cat "$T/a2.err")"
grep -qx 'id 0:2:0 deliveries=1' "$T/a2.out" || fail "a2: hold holds $(cat "$T/a2.out")"
cid2=$(rcli HKEYS "sluice:{$q}:consumers")
out=$(pyq '
want = b"0:1\x00:2"
dead = r.lrange(key("dead"), 0, -1)
if dead != [want]:
    sys.exit("dead list is %r, expected exactly [%r]" % (dead, want))
pend = r.lrange(key("pending:" + sys.argv[1]), 0, -1)
if pend != [b"0:2:0"]:
    sys.exit("pending list of the holder is %r, expected only 0:2:0" % pend)
print("dead=%r" % dead[0])
' "$cid2") || fail "a2 (claim): $out"
note "a2: $out"
kill9 "$h2"

# ---- (b) forged end markers -------------------------------------------------
q=markers
ctl create "$q" --max-batches 100 --max-bytes 64M --lease-ms 1000 >/dev/null
tool() { "$PY" "$ROOT/tests/integration/consumer_jobtool.py" "$REDIS_PORT" "$q" "$BUILD/sluice-ctl" "$@"; }
tool submit 2 2 >/dev/null || fail "b: submit failed"
# Epoch 0: task 0:0 done, then both forged markers in ready:0 before the
# consumer starts (take sees them), task 0:1 still to come.
t00=$(tool task 3) || fail "b: task 0:0"
pyq 'r.lpush(key("ready:0"), "eof:5"); r.lpush(key("ready:0"), "eof:0")' || fail "b: lpush"
bg "$T/b.out" "$T/b.err" "$BUILD/sluice-consume" --redis "$REDIS_URL" --queue "$q" \
    --summary --epochs --quiet
cb=$BG_PID
wait_for 10 llen_is "sluice:{$q}:dead" 2 ||
    fail "b: the consumer did not dead-letter eof:5 and eof:0: $(rcli LRANGE "sluice:{$q}:dead" 0 -1)"
# Now the consumer waits in BLMOVE on ready:0: a forged eof:0 reaches it
# through claim.
wait_for 10 eval '[[ $(rcli CLIENT LIST | grep -c "cmd=blmove") -ge 1 ]]' ||
    fail "b: the consumer never blocked in BLMOVE"
rcli LPUSH "sluice:{$q}:ready:0" eof:0 >/dev/null
wait_for 10 llen_is "sluice:{$q}:dead" 3 || fail "b: the forged eof:0 sent to a blocked consumer was not dead-lettered"
kill -0 "$cb" 2>/dev/null || fail "b: the consumer exited: $(cat "$T/b.out" "$T/b.err")"
grep -q '^epoch=' "$T/b.out" && fail "b: an epoch ended early: $(cat "$T/b.out")"
t01=$(tool task 2) || fail "b: task 0:1"
t10=$(tool task 4) || fail "b: task 1:0"
t11=$(tool task 1) || fail "b: task 1:1"
note "b: tasks: $t00 / $t01 / $t10 / $t11"
rc=0; wait_pid "$cb" 30 || rc=$?
((rc == 0)) || fail "b: consumer exit $rc: $(cat "$T/b.out" "$T/b.err")"
note "b: consumer: $(tr '\n' '|' <"$T/b.out")"
for e in 0 1; do
    n=$(grep -c "^epoch=$e " "$T/b.out" || true)
    ((n == 1)) || fail "b: $n ends of epoch $e: $(cat "$T/b.out")"
done
(($(grep -c '^epoch=' "$T/b.out") == 2)) || fail "b: ends of other epochs: $(cat "$T/b.out")"
e0=$(grep '^epoch=0 ' "$T/b.out")
e1=$(grep '^epoch=1 ' "$T/b.out")
want0=$(($(kv records "$t00") + $(kv records "$t01")))
want1=$(($(kv records "$t10") + $(kv records "$t11")))
[[ $(kv records "$e0") == "$want0" && $(kv batches "$e0") == 5 ]] ||
    fail "b: epoch 0: $e0, expected records=$want0 batches=5"
[[ $(kv checksum "$e0") == $(hexsum "$(kv checksum "$t00")" "$(kv checksum "$t01")") ]] ||
    fail "b: epoch 0 checksum differs: $e0"
[[ $(kv records "$e1") == "$want1" && $(kv batches "$e1") == 5 ]] ||
    fail "b: epoch 1: $e1, expected records=$want1 batches=5"
out=$(pyq '
dead = r.lrange(key("dead"), 0, -1)
if sorted(dead) != [b"eof:0", b"eof:0", b"eof:5"]:
    sys.exit("dead list %r" % dead)
for m in (b"eof:0", b"eof:5"):
    info = r.hget(key("deadinfo"), m) or b""
    if b"end marker" not in info:
        sys.exit("deadinfo of %r: %r" % (m, info))
print("dead=%r" % dead)
') || fail "b: $out"
note "b: $out"

# ---- (c) seq 2^32-1 ---------------------------------------------------------
q=bigseq
ctl create "$q" --max-batches 100 --max-bytes 64M --lease-ms 1000 >/dev/null
# Behind the forged batches, a valid one of the same task: its
# acknowledgement makes the bitmap acked:0:1 exist, so the size check
# below looks at a real key.
pyq '
j.raw("0:1:4294967295", frame(0, 1, 4294967295, [b"x" * 100]))
j.raw("0:1:16777216", frame(0, 1, 16777216, [b"y" * 100]))
j.push(0, 1, 5, [b"valid"])
' || fail "c: pushing failed"
out=$("$BUILD/sluice-consume" --redis "$REDIS_URL" --queue "$q" --print-ids --summary \
    --timeout-ms 2000 2>"$T/c.err") || fail "c: consumer failed: $out $(cat "$T/c.err")"
note "c: consumer: $(tr '\n' '|' <<<"$out")"
[[ $(grep -c '^id ' <<<"$out") == 1 ]] && grep -q '^id 0:1:5 deliveries=1' <<<"$out" ||
    fail "c: the consumer should have delivered only 0:1:5: $out"
out=$(pyq '
for bid in ("0:1:4294967295", "0:1:16777216"):
    info = r.hget(key("deadinfo"), bid) or b""
    if b"not a batch id" not in info:
        sys.exit("%s: deadinfo %r, expected \"not a batch id\"" % (bid, info))
    if not r.exists(key("deadb:" + bid)):
        sys.exit("%s: the frame was not kept as deadb:" % bid)
keys = list(r.scan_iter(key("acked:*")))
if keys != [key("acked:0:1").encode()]:
    sys.exit("acked bitmaps: %r, expected only acked:0:1" % keys)
for k in keys:
    n = r.strlen(k)
    mem = r.memory_usage(k) or 0
    if n > 64 or mem > 4096:
        sys.exit("%r: STRLEN %d, MEMORY USAGE %d: a huge bitmap" % (k, n, mem))
# Batches held: the fields of dlv but its pin "~" (docs/PROTOCOL.md).
def held():
    return r.hlen(key("dlv")) - r.hexists(key("dlv"), "~")
if held() != 0 or int(r.get(key("bytes")) or 0) != 0:
    sys.exit("the queue still holds batches: dlv %r" % r.hgetall(key("dlv")))
print("acked bitmaps small: %s" % ", ".join("%s=%d bytes" % (k.decode(), r.strlen(k)) for k in keys))
# The push script refuses such seqs, and ids off the grammar (so that
# every id the queue holds is a batch id).
for e, t, seq in (("0", "7", "4294967295"), ("0", "7", "16777216"), ("0", "7", "007"),
                  ("0", "07", "1"), ("0", "7\x00", "1"), ("4294967296", "7", "1"),
                  ("0", "18446744073709551616", "1")):
    bid = "%s:%s:%s" % (e, t, seq)
    tx = r.pipeline(transaction=True)
    tx.set(key("in:" + bid), frame(0, 7, 1, [b"z"]))
    tx.eval(j.source("push"), 1, j.meta, e, t, seq)
    res = tx.execute(raise_on_error=False)[-1]
    res = res[0] if isinstance(res, list) else res
    if not isinstance(res, Exception) or not str(res).startswith("INVALID"):
        sys.exit("push of %r: %r, expected an INVALID error" % (bid, res))
    if (r.exists(key("in:" + bid)) or r.exists(key("b:" + bid)) or r.exists(key("acked:0:7")) or
            held() != 0):
        sys.exit("push of %r left keys behind" % bid)
    print("push %r: %s" % (bid, res))
') || fail "c: $out"
note "c: $out"
echo "ok: NUL id dead-lettered intact (take and claim), forged markers ended nothing, seq 2^32-1 refused"
