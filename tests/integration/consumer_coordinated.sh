#!/usr/bin/env bash
# Coordinated mode: a queue for 3 ranks, one job epoch of 10 batches.
# remainder drop: each rank gets 3, the 10th is dropped (and counted);
# remainder pad: each rank gets 4, two of them padding copies flagged as
# such. Either way every rank sees the end of the epoch and the job's end,
# and the batches the ranks got are every batch of the epoch. A consumer
# that does not name its rank, or names a wrong world, is refused.
# shellcheck source=tests/lib/integration.sh
. "$(dirname "$0")/../lib/integration.sh"
need_bin sluice-ctl sluice-consume

redis_tmp_start
jt() { "$PY" "$ROOT/tests/integration/consumer_jobtool.py" "$REDIS_PORT" "$1" "$BUILD/sluice-ctl" "${@:2}"; }

for rem in drop pad; do
    q=coord-$rem
    ctl create "$q" --max-batches 100 --max-bytes 64M --consumers 3 --coordinated \
        --remainder "$rem" >/dev/null
    jt "$q" submit 1 1 >/dev/null || fail "submit failed"
    pids=()
    for r in 0 1 2; do
        bg "$T/$rem$r.out" "$T/$rem$r.err" "$BUILD/sluice-consume" --redis "$REDIS_URL" \
            --queue "$q" --rank "$r" --world 3 --print-ids --summary --epochs --quiet \
            --timeout-ms 15000
        pids+=("$BG_PID")
    done
    tline=$(jt "$q" task 10) || fail "producing the task failed"
    note "$rem: $tline"
    for r in 0 1 2; do
        rc=0; wait_pid "${pids[r]}" 30 || rc=$?
        ((rc == 0)) || fail "$rem rank $r exit $rc: $(cat "$T/$rem$r.err")"
    done
    want=3; pads=0
    [[ $rem == pad ]] && { want=4; pads=2; }
    all=()
    npad=0
    for r in 0 1 2; do
        out=$(cat "$T/$rem$r.out")
        note "$rem rank $r: $(printf '%s\n' "$out" | tr '\n' ' ')"
        n=$(printf '%s\n' "$out" | grep -c '^id ' || true)
        ((n == want)) || fail "$rem: rank $r got $n batches, expected $want"
        eline=$(printf '%s\n' "$out" | grep '^epoch=0 ') || fail "$rem: rank $r saw no end of epoch 0"
        [[ $(kv batches "$eline") == "$want" ]] || fail "$rem: rank $r epoch line: $eline"
        p=$(printf '%s\n' "$out" | grep -c '^id .*padding=1$' || true)
        [[ $(kv padding "$eline") == "$p" ]] || fail "$rem: rank $r epoch line says padding $(kv padding "$eline"), saw $p"
        npad=$((npad + p))
        mapfile -t ids < <(printf '%s\n' "$out" | awk '$1 == "id" && $4 == "padding=0" { print $2 }')
        all+=("${ids[@]}")
    done
    ((npad == pads)) || fail "$rem: $npad padding batches, expected $pads"
    distinct=$(printf '%s\n' "${all[@]}" | sort -u | wc -l)
    ((distinct == ${#all[@]})) || fail "$rem: a batch reached two ranks: ${all[*]}"
    dropped=$(redis_tmp_cli HGET "sluice:{$q}:estats" 0:dropped)
    if [[ $rem == drop ]]; then
        ((distinct == 9)) || fail "drop: $distinct distinct batches delivered, expected 9"
        [[ $dropped == 1 ]] || fail "drop: estats 0:dropped is '$dropped', expected 1"
    else
        ((distinct == 10)) || fail "pad: $distinct distinct batches delivered, expected all 10"
        [[ $(redis_tmp_cli HGET "sluice:{$q}:estats" 0:padded) == 2 ]] || fail "pad: estats 0:padded != 2"
    fi
    [[ $(info_field "$q" batches) == 0 ]] || fail "$rem: batches left: $(info_field "$q" batches)"
done

# Wrong or missing rank/world: a clear usage error.
expect_refused() {
    local rc=0 out
    out=$("$BUILD/sluice-consume" --redis "$REDIS_URL" --queue coord-drop --timeout-ms 100 "$@" 2>&1) || rc=$?
    ((rc == 2)) || fail "sluice-consume $* exited $rc, expected 2: $out"
    [[ $out == *"$EXPECT"* ]] || fail "sluice-consume $*: '$out' does not mention '$EXPECT'"
}
EXPECT="coordinated over 3 ranks" expect_refused
EXPECT="not world=2" expect_refused --rank 0 --world 2
EXPECT="rank" expect_refused --rank 3 --world 3
echo "ok: 3 ranks x 10 batches: drop 3 each (1 dropped), pad 4 each (2 padding), every rank saw EOF"
