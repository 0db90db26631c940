#!/usr/bin/env bash
# make demo: a real training input pipeline on Fashion-MNIST, on this machine.
#
# A private redis-server; a coordinated queue for 2 ranks with a budget;
# one job of the 60,000 training images as 12 IDX tasks x 3 epochs, task
# order shuffled per epoch; 2 producers claiming those tasks; 2 example
# trainers (examples/trainer) as ranks 0 and 1, averaging their weights at
# each end of epoch. Shows live progress, then the test accuracy, whether
# every training image reached a trainer exactly once per epoch (from the
# image ids and pixel checksums the trainers wrote) and the throughput.
# Stops everything it started on exit and on Ctrl-C. Exits non-zero when
# the accuracy is below the target or the exactly-once check fails; 130
# when interrupted (SIGINT, Ctrl-C), saying so.
#
#   BUILD=build scripts/demo.sh
#   DEMO_EPOCHS=2 DEMO_RECORDS=10000 DEMO_SHARDS=10 DEMO_MIN_ACCURACY=0.70 scripts/demo.sh
#
# Settings (environment): DEMO_EPOCHS (3), DEMO_RECORDS (60000: the first N
# training images), DEMO_SHARDS (12 tasks per epoch), DEMO_BATCH (100),
# DEMO_PRODUCERS (2), DEMO_RANKS (2), DEMO_SEED (shuffle seed, 7),
# DEMO_MAX_BATCHES (32) and DEMO_MAX_BYTES (64M): the queue's budget,
# DEMO_MIN_ACCURACY (0.80), DEMO_TIMEOUT (300 s for the whole run),
# DEMO_DATA (/usr/share/datasets/fashion-mnist), DEMO_KEEP (set: keep the
# temporary folder with every program's output).
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BUILD=${BUILD:-build}
case $BUILD in /*) ;; *) BUILD=$root/$BUILD ;; esac
epochs=${DEMO_EPOCHS:-3}
records=${DEMO_RECORDS:-60000}
shards=${DEMO_SHARDS:-12}
batch=${DEMO_BATCH:-100}
nprod=${DEMO_PRODUCERS:-2}
ranks=${DEMO_RANKS:-2}
seed=${DEMO_SEED:-7}
max_batches=${DEMO_MAX_BATCHES:-32}
max_bytes=${DEMO_MAX_BYTES:-64M}
min_acc=${DEMO_MIN_ACCURACY:-0.80}
deadline_s=${DEMO_TIMEOUT:-300}
data=${DEMO_DATA:-/usr/share/datasets/fashion-mnist}
q=fashion
PY=/usr/bin/python3

# Set by SIGINT (Ctrl-C): the demo stops at the next step and says so. A
# Ctrl-C reaches every program of the terminal's process group, so the
# trainers' and producers' own exits then are the interruption, not
# failures to report.
interrupted=0
die() {
    if ((interrupted)); then exit 130; fi
    echo "demo: $*" >&2
    exit 1
}

for v in epochs records shards batch nprod ranks seed max_batches deadline_s; do
    [[ ${!v} =~ ^[1-9][0-9]*$ ]] || die "$v must be a positive integer, got '${!v}'"
done
# Exactly once per epoch needs every batch to be full and every round of
# the coordinated queue complete: then the "drop" remainder policy has
# nothing to drop.
shard_size=$((records / shards))
((shard_size * shards == records)) || die "DEMO_RECORDS=$records is not a multiple of DEMO_SHARDS=$shards"
((shard_size % batch == 0)) || die "a shard ($shard_size images) is not a whole number of batches of $batch"
nbatches=$((records / batch))
((nbatches % ranks == 0)) || die "$nbatches batches per epoch do not divide among $ranks ranks"
((records <= 60000)) || die "Fashion-MNIST has 60000 training images, DEMO_RECORDS=$records"
rounds=$((nbatches / ranks))

for b in sluice-ctl sluice-producer sluice-trainer; do
    [[ -x $BUILD/$b ]] || die "$BUILD/$b is missing; run 'make' first"
done

train_images=$data/train-images-idx3-ubyte.gz
train_labels=$data/train-labels-idx1-ubyte.gz
test_images=$data/t10k-images-idx3-ubyte.gz
test_labels=$data/t10k-labels-idx1-ubyte.gz
if [[ ! -r $train_images || ! -r $train_labels || ! -r $test_images || ! -r $test_labels ]]; then
    [[ $data == /usr/share/datasets/fashion-mnist ]] ||
        die "DEMO_DATA=$data lacks the Fashion-MNIST files (train-images-idx3-ubyte.gz ...)"
    echo "demo: Fashion-MNIST is not installed; installing the Debian package dataset-fashion-mnist"
    "$root/scripts/install-deps.sh" dataset-fashion-mnist ||
        die "could not install dataset-fashion-mnist (as root: apt-get install dataset-fashion-mnist)"
    [[ -r $train_images ]] || die "dataset-fashion-mnist is installed but $train_images is missing"
fi

# shellcheck source=scripts/redis-tmp.sh
. "$root/scripts/redis-tmp.sh"
work=$(mktemp -d "${TMPDIR:-/tmp}/sluice-demo.XXXXXX")
pids=()
live_open=0
cleanup() {
    local rc=$? p
    trap - EXIT INT TERM
    ((live_open)) && echo
    if ((interrupted)); then
        echo "demo: interrupted; stopping the trainers, the producers and redis-server" >&2
        rc=130
    fi
    for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
    for p in "${pids[@]}"; do
        for _ in $(seq 50); do kill -0 "$p" 2>/dev/null || break; sleep 0.1; done
        kill -KILL "$p" 2>/dev/null || true
        wait "$p" 2>/dev/null || true
    done
    redis_tmp_cleanup_all
    if [[ -n ${DEMO_KEEP:-} ]]; then
        echo "demo: kept the outputs in $work" >&2
    else
        rm -rf "$work"
    fi
    exit "$rc"
}
trap cleanup EXIT
trap 'interrupted=1' INT
trap 'exit 143' TERM

now() { date +%s.%N; }
stop_if_interrupted() { if ((interrupted)); then exit 130; fi; }
field() { printf '%s\n' "$2" | grep -o "\\b$1=[^ ]*" | head -n 1 | cut -d= -f2-; }
ctl() { "$BUILD/sluice-ctl" --redis "$REDIS_URL" "$@"; }

cat <<EOT
sluice demo: Fashion-MNIST
  job:      the first $records training images (IDX, gzip) as $shards tasks of $shard_size,
            $epochs epoch(s), task order shuffled per epoch (seed $seed), batches of $batch
  queue:    coordinated over $ranks ranks, budget $max_batches batches / $max_bytes bytes;
            $records images = $nbatches batches = $rounds rounds of $ranks: nothing to drop
  programs: $nprod producers (job mode) and $ranks trainers, which average their
            weights at every end of epoch; rank 0 scores the 10000 test images

EOT

echo "[1/5] starting a private redis-server"
redis_tmp_start
echo "      $REDIS_URL (data in $REDIS_DIR; the system's Redis is not used)"

stop_if_interrupted
echo "[2/5] creating queue '$q' and submitting the job"
ctl create "$q" --max-batches "$max_batches" --max-bytes "$max_bytes" \
    --consumers "$ranks" --coordinated --remainder drop >/dev/null
printf 'idx %s %s records=0:%d split=%d\n' "$train_images" "$train_labels" "$records" "$shards" \
    >"$work/train.manifest"
ctl submit "$q" --manifest "$work/train.manifest" --epochs "$epochs" --batch-size "$batch" \
    --shuffle-seed "$seed" >"$work/submit.out" ||
    die "sluice-ctl submit failed: $(cat "$work/submit.out")"
echo "      manifest: $(<"$work/train.manifest")"

stop_if_interrupted
echo "[3/5] starting $ranks trainers and $nprod producers"
t0=$(now)
tpids=()
for ((r = 0; r < ranks; r++)); do
    args=(--redis "$REDIS_URL" --queue "$q" --rank "$r" --world "$ranks"
          --ids-out "$work/ids.$r" --timeout 60)
    ((r == 0)) && args+=(--test-images "$test_images" --test-labels "$test_labels")
    "$BUILD/sluice-trainer" "${args[@]}" >"$work/t$r.out" 2>"$work/t$r.err" </dev/null &
    pids+=($!)
    tpids+=($!)
done
ppids=()
for ((p = 0; p < nprod; p++)); do
    "$BUILD/sluice-producer" --redis "$REDIS_URL" --queue "$q" --data-root "$data" --summary \
        >"$work/p$p.out" 2>"$work/p$p.err" </dev/null &
    pids+=($!)
    ppids+=($!)
done

# ---- live progress -------------------------------------------------------
# One line every second, refreshed in place on a terminal (a plain line
# every 2 s otherwise), read from the queue's keys (docs/PROTOCOL.md). A
# snapshot that is not complete (Redis gone, no trainer's counters yet) is
# not shown: a line never shows an empty or negative figure.
K="sluice:{$q}"
# snapshot: one value per line, an empty line for a missing one: epoch_open,
# state, epochs (job); acked, acked_bytes (stats); batches and bytes held;
# then blocked_us of every consumer (their published counters).
snapshot() {
    local cids c
    cids=$(redis_tmp_cli HKEYS "$K:consumers" 2>/dev/null) || return 0
    {
        printf 'HMGET %s:jrun epoch_open state epochs\n' "$K"
        printf 'HMGET %s:stats acked acked_bytes\n' "$K"
        # Batches held: dlv's fields but its pin '~' (docs/PROTOCOL.md).
        printf '%s\n' "EVAL \"return redis.call('HLEN', KEYS[1]) - redis.call('HEXISTS', KEYS[1], '~')\" 1 $K:dlv"
        printf 'GET %s:bytes\n' "$K"
        for c in $cids; do printf 'HGET %s:cstats:%s blocked_us\n' "$K" "$c"; done
    } | redis_tmp_cli 2>/dev/null
}
max_bytes_n=$(redis_tmp_cli HGET "$K:meta" max_bytes)
tty=0
[[ -t 1 ]] && tty=1
period_us=2000000
((tty)) && period_us=1000000
echo "      live: elapsed, epoch in progress, batches and MB acknowledged per second,"
echo "      queue held against its budget (batches, MiB), seconds each trainer waited"
us() { echo "${EPOCHREALTIME/[.,]/}"; }
prev_b=0 prev_B=0 prev_t=$t0 failed=""
start_us=$(us)
due=$((start_us + period_us))
while :; do
    stop_if_interrupted
    running=0
    for p in "${tpids[@]}"; do kill -0 "$p" 2>/dev/null && running=1; done
    ((running)) || break
    for ((i = 0; i < ${#ppids[@]}; i++)); do
        p=${ppids[i]}
        [[ $p == "done" ]] && continue
        kill -0 "$p" 2>/dev/null && continue
        rc=0
        wait "$p" || rc=$?
        ppids[i]="done"
        ((rc == 0)) || { failed="producer $i exited with status $rc: $(tail -n 3 "$work/p$i.err")"; break 2; }
    done
    if (($(us) - start_us > deadline_s * 1000000)); then
        failed="the run took longer than DEMO_TIMEOUT=$deadline_s s"
        break
    fi
    # Sleeps until the next line is due, at most 0.2 s at a time (the
    # trainers' end is noticed promptly); `wait` returns at once on Ctrl-C.
    left=$((due - $(us)))
    if ((left > 0)); then
        ((left > 200000)) && left=200000
        sleep "$(printf '%d.%06d' $((left / 1000000)) $((left % 1000000)))" &
        wait $! || true
        continue
    fi
    due=$((due + period_us))
    # Fallen behind (a slow snapshot): the next line one period from now.
    (($(us) < due)) || due=$(($(us) + period_us))
    mapfile -t v < <(snapshot)
    stop_if_interrupted
    t=$(now)
    # Complete: the counters read, the trainers' among them, none gone back.
    complete=$((${#v[@]} > 7))
    for x in "${v[@]:3:3}" "${v[@]:7}"; do [[ $x =~ ^[0-9]+$ ]] || complete=0; done
    ((complete)) || continue
    ((v[3] >= prev_b && v[4] >= prev_B)) || continue
    line=$(awk -v t="$t" -v t0="$t0" -v pt="$prev_t" -v b="${v[3]}" -v pb="$prev_b" \
        -v B="${v[4]}" -v pB="$prev_B" -v eo="${v[0]:-0}" -v st="${v[1]:-}" \
        -v ne="${v[2]:-$epochs}" -v d="${v[5]}" -v md="$max_batches" -v by="${v[6]:-0}" \
        -v mb="${max_bytes_n:-1}" -v w="${v[*]:7}" 'BEGIN {
        dt = t - pt; if (dt <= 0) dt = 1
        n = split(w, ws, " "); s = ""
        for (i = 1; i <= n; i++) s = s sprintf("%s%.1f", i > 1 ? "+" : "", ws[i] / 1e6)
        ep = st == "finished" ? "end" : sprintf("%d/%d", eo + 1, ne)
        printf "  %5.1fs  epoch %s  %4.0f batches/s %5.1f MB/s  queue %d/%d %.1f/%.0fMiB  waited %ss",
            t - t0, ep, (b - pb) / dt, (B - pB) / dt / 1e6, d, md, by / 1048576, mb / 1048576, s
    }')
    prev_t=$t prev_b=${v[3]} prev_B=${v[4]}
    if ((tty)); then
        printf '\r%s\033[K' "$line"
        live_open=1
    else
        printf '%s\n' "$line"
    fi
done
((live_open)) && echo && live_open=0
stop_if_interrupted
[[ -z $failed ]] || die "$failed"
t1=$(now)

for ((r = 0; r < ranks; r++)); do
    rc=0
    wait "${tpids[r]}" || rc=$?
    # 130: the trainer had a SIGINT, which is the Ctrl-C the demo had too.
    # The INT trap alone is not enough: bash skips it when the child it
    # waits for in the foreground exits normally as the signal comes (it
    # takes the child to have handled it).
    ((rc == 130)) && interrupted=1
    ((rc == 0)) || die "trainer $r exited with status $rc: $(tail -n 5 "$work/t$r.err")"
done
echo "[4/5] trainers finished; what they printed:"
for ((r = 0; r < ranks; r++)); do sed 's/^/      /' "$work/t$r.out"; done
# The producers stop once the job is finished.
for ((i = 0; i < ${#ppids[@]}; i++)); do
    p=${ppids[i]}
    [[ $p == "done" ]] && continue
    for _ in $(seq 100); do kill -0 "$p" 2>/dev/null || break; sleep 0.05; done
    kill -0 "$p" 2>/dev/null && die "producer $i is still running after the job finished"
    rc=0
    wait "$p" || rc=$?
    ((rc == 0)) || die "producer $i exited with status $rc: $(tail -n 3 "$work/p$i.err")"
done

stop_if_interrupted
echo "[5/5] checking what the trainers saw"
# Every epoch: the union over ranks of the image indices must be 0..N-1,
# each exactly once, and each image's label and pixel checksum must equal
# the training file's.
check=$("$PY" - "$train_images" "$train_labels" "$records" "$epochs" "$work"/ids.* <<'PYEOF'
import gzip, struct, sys, zlib
images, labels, n, epochs = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
with gzip.open(images) as f:
    magic, count, rows, cols = struct.unpack(">IIII", f.read(16))
    size = rows * cols
    pix = f.read(n * size)
with gzip.open(labels) as f:
    f.read(8)
    lab = f.read(n)
seen = [bytearray(n) for _ in range(epochs)]
bad = []
lines = 0
for path in sys.argv[5:]:
    with open(path) as f:
        for line in f:
            e, i, l, c = line.split()
            e, i, l, c = int(e), int(i), int(l), int(c, 16)
            lines += 1
            if not (0 <= e < epochs and 0 <= i < n):
                bad.append("epoch %d image %d is out of range" % (e, i)); continue
            if seen[e][i] < 255:
                seen[e][i] += 1
            if l != lab[i] or c != zlib.crc32(pix[i * size:(i + 1) * size]):
                bad.append("epoch %d image %d: label or pixels differ from the file" % (e, i))
for e in range(epochs):
    missing = seen[e].count(0)
    dup = sum(1 for v in seen[e] if v > 1)
    if missing or dup:
        bad.append("epoch %d: %d images missing, %d seen more than once" % (e, missing, dup))
print("images=%d bad=%d" % (lines, len(bad)))
for b in bad[:5]:
    print("  " + b)
PYEOF
) || die "the exactly-once checker failed: $check"
once=yes
[[ $(field bad "$check") == 0 ]] || once=no
stop_if_interrupted

stats=$(redis_tmp_cli HMGET "$K:stats" acked acked_bytes dup_dropped requeued | tr '\n' ' ')
read -r s_acked s_bytes s_dup s_req <<<"$stats"
acc=$(field test_accuracy "$(tail -n 1 "$work/t0.out")")
[[ -n $acc ]] || die "trainer 0 printed no test accuracy"
waits=""
for ((r = 0; r < ranks; r++)); do
    waits+="rank $r $(field waited_s "$(tail -n 1 "$work/t$r.out")") s, "
done
acc_ok=$(awk -v a="$acc" -v m="$min_acc" 'BEGIN { print (a >= m) ? "yes" : "no" }')

echo
echo "results"
awk -v a="$acc" -v m="$min_acc" 'BEGIN { printf "  test accuracy: %.2f%% on the 10000 test images (target >= %.0f%%)\n", a * 100, m * 100 }'
es=s
((epochs > 1)) || es=""
echo "  every training image seen exactly once per epoch: $once ($epochs epoch$es x $records images over $ranks ranks; labels and pixels match the IDX file)"
printf '%s\n' "$check" | sed -n '2,$p' | sed 's/^/  /'
awk -v t0="$t0" -v t1="$t1" -v b="${s_acked:-0}" -v B="${s_bytes:-0}" -v n="$records" -v e="$epochs" \
    -v dup="${s_dup:-0}" -v req="${s_req:-0}" 'BEGIN {
    w = t1 - t0; if (w <= 0) w = 1e-6
    printf "  totals: %d batches, %d images, %.1f MB through Redis in %.1f s (duplicates dropped %d, requeued %d)\n", b, n * e, B / 1e6, w, dup, req
    printf "  throughput: %.0f batches/s, %.0f images/s, %.1f MB/s\n", b / w, n * e / w, B / 1e6 / w
}'
echo "  time trainers waited for data in next(): ${waits%, }"
prods="" pblocked=0
for ((p = 0; p < nprod; p++)); do
    pl=$(<"$work/p$p.out")
    bl=$(sed -n 's/.*blocked \([0-9.]*\) s by backpressure.*/\1/p' "$work/p$p.err" | tail -n 1)
    prods+="producer $p $(field tasks "$pl") tasks ${bl:-?} s, "
    pblocked=$(awk -v a="$pblocked" -v b="${bl:-0}" 'BEGIN { print a + b }')
done
echo "  time producers were held back by the budget: ${prods%, }"
# Whoever waits is not the bottleneck: trainers waiting on an empty queue
# mean the producers are too slow, producers held back by a full queue mean
# the trainers are.
awk -v w="$(field waited_s "$(tail -n 1 "$work/t0.out")")" -v pb="$pblocked" -v n="$nprod" \
    -v t0="$t0" -v t1="$t1" 'BEGIN {
    el = t1 - t0; if (el <= 0) el = 1e-6
    tw = w / el; pw = pb / n / el
    if (tw > pw) printf "  bottleneck: the producers (rank 0 waited for data %.0f%% of the time; producers held back %.0f%%)\n", 100 * tw, 100 * pw
    else printf "  bottleneck: the trainers (producers held back by the budget %.0f%% of the time; rank 0 waited %.0f%%)\n", 100 * pw, 100 * tw
}'
[[ $once == yes && $acc_ok == yes ]] || {
    [[ $acc_ok == yes ]] || echo "demo: test accuracy $acc is below the target $min_acc" >&2
    exit 1
}
