#!/usr/bin/env bash
# The dlv hash (one field per batch the queue holds) is kept in Redis's
# hashtable encoding by its pin, the field '~' (docs/PROTOCOL.md, section
# 2): in the compact encoding every field the scripts look up, set or
# delete is a scan of the whole hash. The pin is not a batch: the
# budgets, `sluice-ctl info` and the end of a job count without it.
# shellcheck source=tests/lib/integration.sh
. "$(dirname "$0")/../lib/integration.sh"
need_bin sluice-ctl sluice-producer sluice-consume gen-tfrecord

redis_tmp_start
q=pin
gen "$T/in.tfrecord" 40 3 >/dev/null
ctl create "$q" --max-batches 6 --max-bytes 64M >/dev/null
dlv="sluice:{$q}:dlv"

# 8 batches against a budget of 6: the producer waits at the budget, which
# counts the batches and not the pin.
bg "$T/p.out" "$T/p.err" "$BUILD/sluice-producer" --redis "$REDIS_URL" --queue "$q" \
    --format tfrecord --batch-size 5 --quiet "$T/in.tfrecord"
p=$BG_PID
wait_for 20 held_is "$q" 6 || fail "the queue never reached its budget: $(cat "$T/p.err")"
[[ $(rcli HLEN "$dlv") == 7 ]] || fail "dlv has $(rcli HLEN "$dlv") fields, expected 6 batches and the pin"
[[ $(rcli HGET "$dlv" '~') == "not a batch: a value over 64 bytes keeps this hash in the hashtable encoding" ]] ||
    fail "the pin's value: $(rcli HGET "$dlv" '~')"
enc=$(rcli OBJECT ENCODING "$dlv")
[[ $enc == hashtable ]] || fail "dlv is encoded as $enc, expected hashtable"
[[ $(info_field "$q" batches) == 6 ]] || fail "sluice-ctl info: $(ctl info "$q")"
kill -0 "$p" 2>/dev/null || fail "the producer did not wait for room: $(cat "$T/p.err")"

# Consumed to the end: no batch held, the pin stays (and with it the
# encoding, which Redis never gives up for a hash it converted).
out=$("$BUILD/sluice-consume" --redis "$REDIS_URL" --queue "$q" --count 8 --summary \
    --timeout-ms 10000 2>"$T/c.err") || fail "consumer failed: $out $(cat "$T/c.err")"
[[ $(kv batches "$out") == 8 ]] || fail "consumed $(kv batches "$out") batches, expected 8"
wait_pid "$p" 20 || fail "producer: exit $? $(cat "$T/p.err")"
wait_for 10 held_is "$q" 0 || fail "the queue still holds $(held "$q") batches"
[[ $(rcli HKEYS "$dlv") == "~" ]] || fail "dlv holds $(rcli HKEYS "$dlv" | tr '\n' ' ')"
enc=$(rcli OBJECT ENCODING "$dlv")
[[ $enc == hashtable ]] || fail "dlv is encoded as $enc once empty, expected hashtable"
echo "ok: dlv pinned to the hashtable encoding, counted by nobody"
