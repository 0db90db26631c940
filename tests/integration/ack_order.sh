#!/usr/bin/env bash
# The ack script (docs/PROTOCOL.md, "### ack") drops the acknowledged ids
# from pending:<cid> with one LTRIM when they are the list's last entries:
# checked in the order of the takes (the tail backwards) and, failing
# that, as the same ids in any order; anything else is looked for id by
# id (LREM). Each way must forget exactly the batches named that the
# consumer holds, set exactly their bits, and leave the rest of pending
# as it was; a seq above 16777215 is no batch of the consumer's.
# shellcheck source=tests/lib/integration.sh
. "$(dirname "$0")/../lib/integration.sh"
need_bin sluice-ctl

redis_tmp_start
q=ackq
ctl create "$q" --max-batches 100 --max-bytes 64M >/dev/null
k() { echo "sluice:{$q}:$1"; }
sha=$("$BUILD/sluice-ctl" script ack | rcli -x SCRIPT LOAD) || fail "SCRIPT LOAD ack"

# hold S...: batches 0:1:S, each with a frame of 10 bytes, held by
# consumer c, taken in the order given (take LPUSHes them: the first
# taken ends up last in pending:c).
hold() {
    local s
    for s in "$@"; do
        rcli SET "$(k "b:0:1:$s")" "frame-$(printf %04d "$s")" >/dev/null
        rcli HSET "$(k dlv)" "0:1:$s" 0 >/dev/null
        rcli INCRBY "$(k bytes)" 10 >/dev/null
        rcli LPUSH "$(k pending:c)" "0:1:$s" >/dev/null
    done
}
# ack S...: acknowledges 0:1:S for consumer c; prints what the script returned.
ack() {
    local args=() s
    for s in "$@"; do args+=("0:1:$s" 0 1 "$s"); done
    rcli EVALSHA "$sha" 1 "$(k consumers)" c '' "${args[@]}"
}
pending() { rcli LRANGE "$(k pending:c)" 0 -1 | xargs; }
# calls CMD: how many times Redis ran CMD (scripts' calls included) since
# the last check.
calls() {
    rcli INFO commandstats | tr -d '\r' | awk -F'[:=,]' -v c="cmdstat_$1" '$1 == c { n = $3 } END { print n + 0 }'
}
# check WHAT RETURNED WANT_RETURNED WANT_PENDING WANT_LTRIMS WANT_LREMS: the
# LTRIMs of pending, besides the one of room each call that forgot a batch
# makes (wake_producers).
check() {
    [[ $2 == "$3" ]] || fail "$1: ack returned '$2', expected $3"
    [[ $(pending) == "$4" ]] || fail "$1: pending:c is '$(pending)', expected '$4'"
    local lt lr
    lt=$(($(calls ltrim) - 1)) lr=$(calls lrem)
    [[ $lt == "$5" && $lr == "$6" ]] || fail "$1: $lt LTRIM and $lr LREM, expected $5 and $6"
    rcli CONFIG RESETSTAT >/dev/null
}
acked() { rcli GETBIT "$(k acked:0:1)" "$1"; }
frame() { rcli EXISTS "$(k "b:0:1:$1")"; }

hold 0 1 2 3 4
rcli CONFIG RESETSTAT >/dev/null
# In the order of the takes: the tail backwards.
check "in order" "$(ack 0 1)" 2 "0:1:4 0:1:3 0:1:2" 1 0
# The tail's ids in another order.
check "out of order" "$(ack 3 2)" 2 "0:1:4" 1 0
hold 5 6 7
rcli CONFIG RESETSTAT >/dev/null
# Not the tail (the newest and the oldest, 7 and 4): one by one.
check "not the tail" "$(ack 7 4)" 2 "0:1:6 0:1:5" 0 2
# The tail, but one seq out of range: no LTRIM, and that one is no batch.
out=$(rcli EVALSHA "$sha" 1 "$(k consumers)" c '' 0:1:5 0 1 5 0:1:6 0 1 99999999)
check "bad seq" "$out" 1 "0:1:6" 0 1
# A batch the consumer does not hold, with one it does.
check "not held" "$(ack 9 6)" 1 "" 0 2

for s in 0 1 2 3 4 5 6 7; do
    [[ $(acked "$s") == 1 ]] || fail "the bit of 0:1:$s is not set"
    [[ $(frame "$s") == 0 ]] || fail "the frame of 0:1:$s is still there"
done
[[ $(acked 9) == 0 ]] || fail "the bit of 0:1:9, never held, is set"
[[ $(held "$q") == 0 ]] || fail "the queue still holds $(held "$q") batches"
[[ $(rcli GET "$(k bytes)") == 0 ]] || fail "bytes is $(rcli GET "$(k bytes)"), expected 0"
[[ $(rcli HGET "$(k stats)" acked) == 8 ]] || fail "stats acked: $(rcli HGET "$(k stats)" acked)"
echo "ok: acks in order, out of order, not the tail, with a bad seq and of a batch not held"
