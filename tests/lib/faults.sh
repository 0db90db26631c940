# shellcheck shell=bash
# Shared helpers of the fault scenarios (sourced). On top of
# tests/lib/integration.sh (strict
# mode, $ROOT, $BUILD, scratch dir $T, bg, wait_pid, fail, note, kv, gen,
# ctl, rcli, now_ms, wait_for, in_file, the private redis-server helpers)
# it gives:
#   $SEED      the scenario's seed: $FAULT_SEED, else a random one; printed,
#              and seeds bash's $RANDOM so every random choice replays
#   rand A B   sets RAND to a random integer in [A, B] (not a $(...): a
#              subshell would draw from a fresh seed)
#   ms_sleep MS, aof_incr_file, aof_mark, aof_crash_back (below)
#   make_shards, make_line_shards, slow_exec, start_consumer,
#   start_producer, check_ids, epoch_sums_match, batches_per_shard (below)
# shellcheck source=tests/lib/integration.sh
. "$(dirname "${BASH_SOURCE[0]}")/integration.sh"
FAULTS=$ROOT/tests/faults

SEED=${FAULT_SEED:-$(( (RANDOM << 15 | RANDOM) % 1000000 ))}
RANDOM=$SEED
echo "seed: $SEED (replay the random choices with FAULT_SEED=$SEED)"

# shellcheck disable=SC2034  # RAND is for the scenarios
rand() { RAND=$(( $1 + RANDOM % ($2 - $1 + 1) )); }
# ms_sleep MS: sleeps MS milliseconds.
ms_sleep() { sleep "$(printf '%d.%03d' $(($1 / 1000)) $(($1 % 1000)))"; }

# aof_incr_file: the path of the newest incr file of the private server's
# AOF (started with --appendonly yes), as its manifest names it.
aof_incr_file() {
    local dir=$REDIS_DIR/appendonlydir
    echo "$dir/$(awk '$1 == "file" && $NF == "i" { f = $2 } END { print f }' "$dir/appendonly.aof.manifest")"
}
# aof_mark: remembers where the AOF ends now (AOF_MARK_FILE, AOF_MARK_SIZE).
aof_mark() {
    AOF_MARK_FILE=$(aof_incr_file)
    AOF_MARK_SIZE=$(stat -c %s "$AOF_MARK_FILE")
}
# aof_crash_back: the server loses what it wrote since aof_mark, as a
# crash of its host would: kill -9, the incr file cut back to the mark (a
# cut inside a transaction goes back to its MULTI: aof_cut.py), restart.
# Sets AOF_CUT_FROM and AOF_CUT_TO (the file's sizes before and after).
aof_crash_back() {
    redis_tmp_kill9
    AOF_CUT_FROM=$(stat -c %s "$AOF_MARK_FILE")
    AOF_CUT_TO=$("$PY" "$FAULTS/aof_cut.py" "$AOF_MARK_FILE" "$AOF_MARK_SIZE") || fail "aof_cut.py failed"
    truncate -s "$AOF_CUT_TO" "$AOF_MARK_FILE"
    redis_tmp_restart || fail "Redis did not come back: $(tail -n 5 "$REDIS_DIR/redis.log")"
}

# make_shards N RECORDS MANIFEST [MIN MAX]: writes N TFRecord shards of
# RECORDS records each, of MIN..MAX bytes (default 1..600), seeded from
# $SEED, next to MANIFEST, and the manifest. Sets SHARD_SUM (the sum of
# their checksums) and SHARD_RECORDS.
make_shards() {
    local n=$1 per=$2 m=$3 lo=${4:-1} hi=${5:-600} i line sums=()
    for ((i = 0; i < n; i++)); do
        line=$(gen "$(dirname "$m")/shard-$i.tfrecord" "$per" $((SEED + i)) "$lo" "$hi")
        sums+=("$(kv checksum "$line")")
        echo "tfrecord shard-$i.tfrecord"
    done >"$m"
    SHARD_SUM=$(hexsum "${sums[@]}")
    SHARD_RECORDS=$((n * per))
}

# make_line_shards N RECORDS MANIFEST: writes N text shards of RECORDS lines
# each (their text depends on $SEED) next to MANIFEST, and the manifest
# ("lines s<i>.txt"). Sets SHARD_SUM and SHARD_RECORDS as make_shards does,
# for records that are the lines (what slow_emit.py sends).
make_line_shards() {
    SHARD_SUM=$("$PY" - "$@" "$SEED" <<'PYEOF'
import os, random, sys
n, per, m, seed = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], int(sys.argv[4])
rng = random.Random(seed)
total, mask = 0, (1 << 64) - 1
with open(m, "w") as man:
    for i in range(n):
        with open(os.path.join(os.path.dirname(m), "s%d.txt" % i), "wb") as f:
            for k in range(per):
                rec = b"shard %d record %d %s" % (i, k, b"x" * rng.randint(0, 200))
                f.write(rec + b"\n")
                h = 0xCBF29CE484222325
                for c in rec:
                    h = ((h ^ c) * 0x100000001B3) & mask
                total = (total + h) & mask
        man.write("lines s%d.txt\n" % i)
print("%016x" % total)
PYEOF
) || fail "make_line_shards failed"
    SHARD_RECORDS=$(($1 * $2))
}

# slow_exec DELAY_MS: the --exec command of a producer that sends a task's
# lines with DELAY_MS between records (tests/faults/slow_emit.py).
slow_exec() { echo "$PY $FAULTS/slow_emit.py $1 {path} {start} {end}"; }

# start_consumer OUT Q [ARGS...]: a job consumer printing every batch id
# (line-buffered) and the per-epoch summaries; sets BG_PID.
start_consumer() {
    local out=$1 q=$2
    shift 2
    bg "$out" "$out.err" "$BUILD/sluice-consume" --redis "$REDIS_URL" --queue "$q" \
        --print-ids --summary --epochs "$@"
}

# start_producer OUT Q [ARGS...]: a job-mode producer; sets BG_PID.
start_producer() {
    local out=$1 q=$2
    shift 2
    bg "$out" "$out.err" "$BUILD/sluice-producer" --redis "$REDIS_URL" --queue "$q" "$@"
}

# check_ids Q EPOCHS BATCHES [check_ids.py args...]: runs the delivery
# check (tests/faults/check_ids.py) against the current server; prints
# what it checked and fails the scenario when anything is wrong.
check_ids() {
    local q=$1 epochs=$2 batches=$3 out rc=0
    shift 3
    out=$("$PY" "$FAULTS/check_ids.py" --port "$REDIS_PORT" --queue "$q" --epochs "$epochs" \
        --batches "$batches" "$@") || rc=$?
    printf '%s\n' "$out"
    ((rc == 0)) || fail "delivery check failed (seed $SEED)"
    [[ $(info_field "$q" batches) == 0 ]] || fail "batches left in the queue: $(ctl info "$q")"
}

# epoch_sums_match EPOCHS FILE...: the consumers' per-epoch summary lines
# (epoch=E records=R ... checksum=X) add up to the shards' records and
# checksum in every epoch: every record exactly once.
epoch_sums_match() {
    local epochs=$1 e f line recs sums got
    shift
    for ((e = 0; e < epochs; e++)); do
        recs=0 sums=()
        for f in "$@"; do
            line=$(grep "^epoch=$e " "$f") || continue
            recs=$((recs + $(kv records "$line")))
            sums+=("$(kv checksum "$line")")
        done
        ((recs == SHARD_RECORDS)) || fail "epoch $e: consumers got $recs records, expected $SHARD_RECORDS"
        got=$(hexsum "${sums[@]}" 0)
        [[ $got == "$SHARD_SUM" ]] || fail "epoch $e: checksum $got, expected $SHARD_SUM"
        echo "checked epoch $e: $recs records, checksum $got = the shards'"
    done
}

# batches_per_shard N RECORDS BSIZE: "b,b,...,b" (N times ceil(RECORDS/BSIZE)).
batches_per_shard() {
    local nb=$(( ($2 + $3 - 1) / $3 )) i s=""
    for ((i = 0; i < $1; i++)); do s+="${s:+,}$nb"; done
    echo "$s"
}
