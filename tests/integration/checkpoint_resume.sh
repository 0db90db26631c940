#!/usr/bin/env bash
# Checkpoint and resume under kills: a stand-in DDP trainer of 2
# coordinated ranks (checkpoint_trainer.py) takes a checkpoint every K
# steps and is killed (SIGKILL) at a random step, together with the
# producers (kill -9); once in the run Redis is killed too and restarted
# from its AOF (appendfsync always). Everything is started again and the
# trainer resumes from its last checkpoint. Over the whole run, the model
# (the batches the trainer holds at the end) has every batch of every
# epoch exactly once, the ranks equal counts per epoch, and epochs in
# order. CKPT_SEEDS="s1 s2 ..." chooses the seeds (default: 3 random).
# test: long
# shellcheck source=tests/lib/integration.sh
. "$(dirname "$0")/../lib/integration.sh"
# shellcheck source=tests/lib/python.sh
. "$ROOT/tests/lib/python.sh"
need_bin sluice-ctl sluice-producer gen-tfrecord
trainer=$ROOT/tests/integration/checkpoint_trainer.py

# 4 shards of 120 records, batches of 10: 48 batches per epoch, 24 per rank.
gen "$T/in.tfrecord" 480 7 10 200
echo "tfrecord $T/in.tfrecord split=4" >"$T/job.manifest"
epochs=3 per_epoch=48 every=5

start_producers() {
    ppids=()
    for k in 1 2; do
        bg "$T/p$k.out" "$T/p$k.err" "$BUILD/sluice-producer" --redis "$REDIS_URL" --queue ck \
            --lease-ms 1000 --quiet
        ppids+=("$BG_PID")
    done
}

seeds=${CKPT_SEEDS:-"$RANDOM $RANDOM $RANDOM"}
for seed in $seeds; do
    RANDOM=$seed
    redis_tmp_start --appendonly yes --appendfsync always
    ctl create ck --max-batches 16 --max-bytes 64M --consumers 2 --coordinated --lease-ms 1000 \
        >/dev/null || fail "create failed"
    ctl submit ck --manifest "$T/job.manifest" --epochs $epochs --batch-size 10 \
        --shuffle-seed "$seed" >/dev/null || fail "submit failed"
    state=$T/state.$seed.json
    rm -f "$state"
    kills=0 redis_restarted=0
    for round in 1 2 3 4 5 6; do
        # Die somewhere in the rest of the job (the last round never dies).
        die=0
        ((round < 6)) && die=$(( (RANDOM % 40) + 1 + $(
            [[ -f $state ]] && /usr/bin/python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["step"])' "$state" || echo 0) ))
        start_producers
        rc=0
        "${PYCMD[@]}" "$trainer" "$REDIS_URL" ck "$state" $every "$die" \
            >"$T/t.out" 2>"$T/t.err" || rc=$?
        note "seed $seed round $round: die at $die: exit $rc: $(head -1 "$T/t.out")"
        for p in "${ppids[@]}"; do kill -9 "$p" 2>/dev/null || true; wait "$p" 2>/dev/null || true; done
        if ((rc == 0)); then break; fi
        ((rc == 137)) || fail "trainer exit $rc: $(tail -5 "$T/t.err")"
        kills=$((kills + 1))
        if ((round == 2)); then
            redis_tmp_restart
            redis_restarted=1
        fi
    done
    ((rc == 0)) || fail "seed $seed: the job did not finish in 6 rounds"
    # The model: every batch once per epoch, ranks equal, epochs in order.
    out=$(/usr/bin/python3 - "$T/t.out" $epochs $per_epoch <<'EOF'
import sys, collections
lines = open(sys.argv[1]).read().split("model\n", 1)[1].split()
epochs, per = int(sys.argv[2]), int(sys.argv[3])
model = list(zip(lines[0::2], lines[1::2]))
seen = collections.Counter(b for b, _ in model)
dups = [b for b, n in seen.items() if n > 1]
by_epoch = collections.Counter(int(b.split(":")[0]) for b in seen)
by_rank = collections.Counter((int(b.split(":")[0]), r) for b, r in model)
order = [int(b.split(":")[0]) for b, _ in model]
bad = []
if dups: bad.append("trained twice: %s" % dups[:5])
for e in range(epochs):
    if by_epoch[e] != per: bad.append("epoch %d: %d distinct batches, want %d" % (e, by_epoch[e], per))
    if by_rank[(e, "0")] != by_rank[(e, "1")]: bad.append("epoch %d: ranks %d/%d" % (e, by_rank[(e, "0")], by_rank[(e, "1")]))
if order != sorted(order): bad.append("epochs out of order")
print("batches=%d %s" % (len(model), "; ".join(bad) if bad else "ok"))
EOF
)
    note "seed $seed: kills=$kills redis_restarted=$redis_restarted: $out"
    [[ $out == *" ok" ]] || fail "seed $seed: $out"
    ((kills > 0)) || fail "seed $seed: the trainer was never killed"
    redis_tmp_stop
done
# A free consumer, on a plain queue and on one of 2 partitions: killed
# after a checkpoint, resumed under another id; bad tokens are refused.
free=$ROOT/tests/integration/checkpoint_free.py
redis_tmp_start
for parts in 0 2; do
    q=free$parts
    args=()
    ((parts)) && args=(--partitions "$parts")
    ctl create $q --max-batches 64 --max-bytes 64M --lease-ms 1000 "${args[@]}" >/dev/null ||
        fail "create $q"
    ctl submit $q --manifest "$T/job.manifest" --epochs 1 --batch-size 10 >/dev/null ||
        fail "submit $q"
    "$BUILD/sluice-producer" --redis "$REDIS_URL" --queue $q --quiet || fail "producer of $q"
    rc=0
    "${PYCMD[@]}" "$free" "$REDIS_URL" $q "$T/free$parts.json" phase1 2>"$T/f.err" || rc=$?
    ((rc == 137)) || fail "$q phase1 exit $rc: $(tail -3 "$T/f.err")"
    out=$(ORDERED=$((parts == 0)) "${PYCMD[@]}" "$free" "$REDIS_URL" $q "$T/free$parts.json" \
          phase2) || fail "$q phase2 failed"
    note "$q: $out"
    [[ $out == "ok batches=$per_epoch distinct=$per_epoch dups=0" ]] || fail "$q: $out"
done
echo "ok: seeds $seeds: every batch exactly once per epoch in the final model; free consumers resumed"
