#!/usr/bin/env bash
# The DDP example end to end on this machine: a private redis-server; a
# coordinated queue 'ddp' of 2 ranks (2 x DDP_WORKERS with DataLoader
# workers); a job of Fashion-MNIST's training images read from the IDX
# files, tasks shuffled per epoch; 2 producers (sluice-producer, job mode);
# then examples/torch/ddp_train.py as 2 ranks, started by itself (--nproc
# 2) or by torchrun. Arguments are passed on to ddp_train.py. Stops
# everything it started on exit and on Ctrl-C; exits with the trainer's
# status. Installs python3-torch and dataset-fashion-mnist (Debian) when
# they are missing.
#
#   BUILD=build examples/torch/run.sh
#   DDP_LAUNCH=torchrun DDP_EPOCHS=1 DDP_RECORDS=12000 DDP_SHARDS=4 \
#       examples/torch/run.sh --ids-out /tmp/ids --checkpoint /tmp/ddp.pt
#
# Settings (environment): DDP_LAUNCH (spawn: ddp_train.py --nproc 2;
# torchrun: python3 -m torch.distributed.run --nproc_per_node 2),
# DDP_EPOCHS (3), DDP_RECORDS (60000: the first N training images),
# DDP_SHARDS (12 tasks per epoch), DDP_BATCH (100 images per batch),
# DDP_WORKERS (0: DataLoader workers per rank), DDP_PRODUCERS (2),
# DDP_SEED (7: task shuffle seed), DDP_TIMEOUT (600 s for the trainer),
# DDP_DATA (/usr/share/datasets/fashion-mnist), DDP_KILL_AT (a step: the
# trainer's rank 0 kills itself after it (--die-at), the producers are
# killed too (kill -9) and started again, and the trainer is started again
# and resumes from its --checkpoint, which must be given).
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
BUILD=${BUILD:-build}
case $BUILD in /*) ;; *) BUILD=$root/$BUILD ;; esac
launch=${DDP_LAUNCH:-spawn}
epochs=${DDP_EPOCHS:-3}
records=${DDP_RECORDS:-60000}
shards=${DDP_SHARDS:-12}
batch=${DDP_BATCH:-100}
workers=${DDP_WORKERS:-0}
nprod=${DDP_PRODUCERS:-2}
seed=${DDP_SEED:-7}
timeout_s=${DDP_TIMEOUT:-600}
data=${DDP_DATA:-/usr/share/datasets/fashion-mnist}
ranks=2
q=ddp
PY=/usr/bin/python3

die() { echo "run.sh: $*" >&2; exit 1; }

kill_at=${DDP_KILL_AT:-}
if [[ -n $kill_at ]]; then
    [[ $kill_at =~ ^[1-9][0-9]*$ ]] || die "DDP_KILL_AT must be a step (a positive integer), got '$kill_at'"
    [[ " $* " == *" --checkpoint "* ]] || die "DDP_KILL_AT needs --checkpoint FILE: the trainer resumes from it"
fi
for v in epochs records shards batch nprod seed timeout_s; do
    [[ ${!v} =~ ^[1-9][0-9]*$ ]] || die "$v must be a positive integer, got '${!v}'"
done
[[ $workers =~ ^[0-9]+$ ]] || die "DDP_WORKERS must be 0 or more, got '$workers'"
[[ $launch == spawn || $launch == torchrun ]] || die "DDP_LAUNCH must be spawn or torchrun, got '$launch'"
# With DataLoader workers each reads a rank of its own: the queue has
# ranks x workers of them (sluice.torch: worker w of rank r reads r*workers+w).
qranks=$((ranks * (workers > 1 ? workers : 1)))
# Every batch full and every round of the coordinated queue complete: then
# nothing is dropped, and every image is trained on once per epoch.
((records <= 60000)) || die "Fashion-MNIST has 60000 training images, DDP_RECORDS=$records"
((records % shards == 0 && records / shards % batch == 0)) ||
    die "DDP_RECORDS=$records is not DDP_SHARDS=$shards tasks of whole batches of $batch"
((records / batch % qranks == 0)) ||
    die "$((records / batch)) batches per epoch do not divide among $qranks ranks"
for b in sluice-ctl sluice-producer; do
    [[ -x $BUILD/$b ]] || die "$BUILD/$b is missing; run 'make' first"
done
[[ -f $BUILD/libsluice.so ]] || die "$BUILD/libsluice.so is missing; run 'make' first"
# PyTorch and the dataset, when missing (Debian packages; prints nothing
# when they are there).
"$root/scripts/install-deps.sh" python3-torch dataset-fashion-mnist ||
    die "could not install python3-torch and dataset-fashion-mnist"
"$PY" -c 'import torch' 2>/dev/null || die "PyTorch is missing (Debian: apt-get install python3-torch)"
images=$data/train-images-idx3-ubyte.gz
labels=$data/train-labels-idx1-ubyte.gz
[[ -r $images && -r $labels && -r $data/t10k-images-idx3-ubyte.gz ]] ||
    die "no Fashion-MNIST in $data (Debian: apt-get install dataset-fashion-mnist)"

# shellcheck source=scripts/redis-tmp.sh
. "$root/scripts/redis-tmp.sh"
work=$(mktemp -d "${TMPDIR:-/tmp}/sluice-ddp.XXXXXX")
pids=()
cleanup() {
    local rc=$? p
    trap - EXIT INT TERM
    for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
    for p in "${pids[@]}"; do
        for _ in $(seq 50); do kill -0 "$p" 2>/dev/null || break; sleep 0.1; done
        kill -KILL "$p" 2>/dev/null || true
        wait "$p" 2>/dev/null || true
    done
    redis_tmp_cleanup_all
    rm -rf "$work"
    exit "$rc"
}
trap cleanup EXIT
trap 'echo "run.sh: interrupted" >&2; exit 130' INT
trap 'exit 143' TERM
ctl() { "$BUILD/sluice-ctl" --redis "$REDIS_URL" "$@"; }

redis_tmp_start
# Leases of 3 s: a rank that died is replaced (resumed), and a task whose
# producer died is taken up again, within 3 s.
ctl create "$q" --max-batches 64 --max-bytes 64M --consumers "$qranks" --coordinated \
    --remainder drop --lease-ms 3000 >/dev/null
printf 'idx %s %s records=0:%d split=%d\n' "$images" "$labels" "$records" "$shards" >"$work/manifest"
ctl submit "$q" --manifest "$work/manifest" --epochs "$epochs" --batch-size "$batch" \
    --shuffle-seed "$seed" >/dev/null
echo "run.sh: queue '$q' at $REDIS_URL, coordinated over $qranks ranks; job: $records images" \
     "as $shards tasks x $epochs epochs, batches of $batch; $nprod producers; launch: $launch"
start_producers() {
    local p
    pids=()
    for ((p = 0; p < nprod; p++)); do
        "$BUILD/sluice-producer" --redis "$REDIS_URL" --queue "$q" --data-root "$data" \
            --lease-ms 3000 >"$work/p$p.out" 2>"$work/p$p.err" </dev/null &
        pids+=($!)
    done
}
start_producers

export PYTHONPATH=$root/python${PYTHONPATH:+:$PYTHONPATH}
export SLUICE_LIB=$BUILD/libsluice.so
train=("$root/examples/torch/ddp_train.py" --redis "$REDIS_URL" --queue "$q" --workers "$workers"
       --data "$data" "$@")
if [[ $launch == torchrun ]]; then
    # Debian 12's torchrun (torch 1.13 on Python 3.11) fails with "'NoneType'
    # object has no attribute 'get'" when --redirects and --tee are 0 (their
    # default): Std.from_str("0") finds no member there. Any other value
    # works; 2 (stderr: to a log file, and on to ours) leaves stdout as it is.
    cmd=("$PY" -m torch.distributed.run --nnodes 1 --nproc_per_node "$ranks"
         --master_addr 127.0.0.1 --master_port "$(redis_tmp_free_port)" --redirects 2 --tee 2
         "${train[@]}")
else
    cmd=("$PY" "${train[@]}" --nproc "$ranks")
fi
t0=$(date +%s.%N)
rc=0
if [[ -n $kill_at ]]; then
    timeout -k 10 "$timeout_s" "${cmd[@]}" --die-at "$kill_at" </dev/null || rc=$?
    ((rc != 0)) || die "the trainer did not die at step $kill_at (the job has fewer steps?)"
    echo "run.sh: the trainer died (exit status $rc); killing the producers (kill -9)," \
         "starting them and the trainer again"
    for p in "${pids[@]}"; do kill -KILL "$p" 2>/dev/null || true; wait "$p" 2>/dev/null || true; done
    start_producers
    rc=0
fi
timeout -k 10 "$timeout_s" "${cmd[@]}" </dev/null || rc=$?
echo "run.sh: the trainer ran $(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }') s" \
     "(exit status $rc)"
((rc == 0)) || exit "$rc"
# The producers stop once the job is finished.
for ((p = 0; p < nprod; p++)); do
    for _ in $(seq 100); do kill -0 "${pids[p]}" 2>/dev/null || break; sleep 0.05; done
    kill -0 "${pids[p]}" 2>/dev/null && die "producer $p is still running after the job finished"
    prc=0
    wait "${pids[p]}" || prc=$?
    ((prc == 0)) || die "producer $p exited with status $prc: $(tail -n 3 "$work/p$p.err")"
done
