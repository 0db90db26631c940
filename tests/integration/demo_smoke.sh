#!/usr/bin/env bash
# `make demo`, shortened: the same pipeline (private redis-server, a
# coordinated queue, a job of IDX tasks, 2 producers, 2 example trainers
# averaging their weights) on the first 10,000 Fashion-MNIST training
# images as 10 tasks for 2 epochs (two ends of epoch, two averagings). The
# demo must say that every image was seen exactly once per epoch and reach
# a test accuracy of at least 70% (about 77% is usual on this little data).
# shellcheck source=tests/lib/integration.sh
. "$(dirname "$0")/../lib/integration.sh"
need_bin sluice-ctl sluice-producer sluice-trainer

# The demo script installs the dataset when it is missing.
rc=0
DEMO_EPOCHS=2 DEMO_RECORDS=10000 DEMO_SHARDS=10 DEMO_BATCH=100 DEMO_MIN_ACCURACY=0.70 \
    DEMO_TIMEOUT=60 BUILD=$BUILD TMPDIR=$T "$ROOT/scripts/demo.sh" >"$T/demo.out" 2>&1 || rc=$?
out=$(<"$T/demo.out")
note "demo output:"
printf '%s\n' "$out"
((rc == 0)) || fail "the shortened demo exited with status $rc"

grep -q '^  every training image seen exactly once per epoch: yes' <<<"$out" ||
    fail "no 'seen exactly once per epoch: yes' line"
acc=$(sed -n 's/^  test accuracy: \([0-9.]*\)%.*/\1/p' <<<"$out")
[[ -n $acc ]] || fail "no test accuracy line"
awk -v a="$acc" 'BEGIN { exit !(a >= 70) }' || fail "test accuracy $acc% is below 70%"
grep -q '^  totals: 200 batches, 20000 images' <<<"$out" || fail "totals are not 200 batches, 20000 images"
# Everything the demo started is gone: no sluice-demo temp dir left.
left=$(find "$T" -maxdepth 1 -name 'sluice-demo.*' -o -maxdepth 1 -name 'sluice-redis.*')
[[ -z $left ]] || fail "the demo left behind: $left"
