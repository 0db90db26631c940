#!/usr/bin/env bash
# make demo: the whole data path on this machine, in a temp folder.
# A private redis-server, 4 TFRecord shards of random records, one producer
# and two consumers running at the same time; prints what went through and
# whether every record arrived exactly once. Stops everything on exit or
# Ctrl-C.
#
#   BUILD=build scripts/demo.sh
#   DEMO_SHARDS=4 DEMO_RECORDS=5000 DEMO_MIN=1024 DEMO_MAX=16384 scripts/demo.sh
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BUILD=${BUILD:-build}
case $BUILD in /*) ;; *) BUILD=$root/$BUILD ;; esac
shards=${DEMO_SHARDS:-4}
records=${DEMO_RECORDS:-5000}
min=${DEMO_MIN:-1024}
max=${DEMO_MAX:-16384}
batch=${DEMO_BATCH:-64}
q=demo

for b in sluice-ctl sluice-producer sluice-consume gen-tfrecord; do
    [[ -x $BUILD/$b ]] || { echo "demo: $BUILD/$b is missing; run 'make' first" >&2; exit 1; }
done
. "$root/scripts/redis-tmp.sh"

work=$(mktemp -d "${TMPDIR:-/tmp}/sluice-demo.XXXXXX")
pids=()
cleanup() {
    local rc=$? p
    trap - EXIT INT TERM
    for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
    for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
    redis_tmp_cleanup_all
    rm -rf "$work"
    exit "$rc"
}
trap cleanup EXIT
trap 'echo; echo "demo: interrupted, cleaning up" >&2; exit 130' INT
trap 'exit 143' TERM

now() { date +%s.%N; }
field() { printf '%s\n' "$2" | grep -o "\\b$1=[^ ]*" | head -n 1 | cut -d= -f2-; }

cat <<EOT
sluice demo
  One producer reads $shards TFRecord shards ($records random records of
  $min-$max bytes each), packs them into batches of $batch records and pushes
  them into a Redis queue whose budget is 64 batches / 64 MiB (backpressure).
  Two consumers pop batches at the same time, as two trainers would. At the
  end the record counts and checksums of both sides must agree.

EOT

echo "[1/5] starting a private redis-server"
redis_tmp_start
echo "      $REDIS_URL (data in $REDIS_DIR; the system's Redis is not used)"

echo "[2/5] generating $shards shards in $work"
gen_sums=()
gen_records=0
for ((i = 1; i <= shards; i++)); do
    line=$("$BUILD/gen-tfrecord" --records "$records" --min-size "$min" --max-size "$max" \
        --seed "$i" "$work/shard-$i.tfrecord")
    gen_sums+=("$(field checksum "$line")")
    gen_records=$((gen_records + $(field records "$line")))
    printf '      shard-%d.tfrecord  %s\n' "$i" "$line"
done

echo "[3/5] creating queue '$q'"
"$BUILD/sluice-ctl" --redis "$REDIS_URL" create "$q" --max-batches 64 --max-bytes 64M

echo "[4/5] running 1 producer and 2 consumers"
t0=$(now)
for c in 1 2; do
    "$BUILD/sluice-consume" --redis "$REDIS_URL" --queue "$q" --summary --quiet \
        --timeout-ms 3000 >"$work/c$c.out" 2>"$work/c$c.err" </dev/null &
    pids+=($!)
done
"$BUILD/sluice-producer" --redis "$REDIS_URL" --queue "$q" --format tfrecord \
    --batch-size "$batch" --summary --quiet "$work"/shard-*.tfrecord \
    >"$work/p.out" 2>"$work/p.err" </dev/null &
ppid=$!
pids+=("$ppid")
prc=0
wait "$ppid" || prc=$?
if ((prc != 0)); then
    echo "demo: the producer failed (exit $prc):" >&2
    cat "$work/p.err" >&2
    exit 1
fi
pline=$(<"$work/p.out")
pbatches=$(field batches "$pline")
# The run ends when the last batch is acknowledged (not when the consumers
# give up waiting for more, 3 s later).
while :; do
    acked=$(redis_tmp_cli HGET "sluice:{$q}:stats" acked)
    (( ${acked:-0} >= pbatches )) && break
    # Both consumers ended early: report what they got.
    kill -0 "${pids[0]}" 2>/dev/null || kill -0 "${pids[1]}" 2>/dev/null || break
    sleep 0.01
done
t1=$(now)
echo "      all batches acknowledged; waiting for the consumers' 3 s idle timeout"
for c in 1 2; do
    rc=0
    wait "${pids[c - 1]}" || rc=$?
    if ((rc != 0)); then
        echo "demo: consumer $c failed (exit $rc):" >&2
        cat "$work/c$c.err" >&2
        exit 1
    fi
done
c1=$(<"$work/c1.out")
c2=$(<"$work/c2.out")

echo "[5/5] results"
printf '      producer:   %s\n' "$pline"
printf '      consumer 1: %s\n' "$c1"
printf '      consumer 2: %s\n' "$c2"

read -r gen_sum cons_sum < <(/usr/bin/python3 -c '
import sys
g = sys.argv[1].split(","); c = sys.argv[2].split(",")
s = lambda xs: "%016x" % (sum(int(x, 16) for x in xs if x) % (1 << 64))
print(s(g), s(c))' "$(IFS=,; echo "${gen_sums[*]}")" "$(field checksum "$c1"),$(field checksum "$c2")")
crecords=$(( $(field records "$c1") + $(field records "$c2") ))
cbatches=$(( $(field batches "$c1") + $(field batches "$c2") ))
bytes=$(field bytes "$pline")
awk -v b="$bytes" -v t0="$t0" -v t1="$t1" -v nb="$cbatches" -v nr="$crecords" \
    -v b1="$(field batches "$c1")" -v b2="$(field batches "$c2")" 'BEGIN {
    w = t1 - t0; if (w <= 0) w = 1e-6
    printf "\n      batches:    %d (consumer 1: %d, consumer 2: %d)\n", nb, b1, b2
    printf "      records:    %d\n", nr
    printf "      data:       %.1f MB\n", b / 1e6
    printf "      wall time:  %.2f s\n", w
    printf "      throughput: %.1f MB/s, %.0f records/s\n", b / 1e6 / w, nr / w
}'
ok=yes
[[ $crecords == "$gen_records" && $(field records "$pline") == "$gen_records" ]] || ok=no
[[ $cons_sum == "$gen_sum" && $(field checksum "$pline") == "$gen_sum" ]] || ok=no
echo "      records:    shards $gen_records, producer $(field records "$pline"), consumers $crecords"
echo "      checksums:  shards $gen_sum, producer $(field checksum "$pline"), consumers $cons_sum"
echo "      checksums match: $ok"
[[ $ok == yes ]]
