#!/usr/bin/env bash
# A poison batch: delivered 3 times (max_deliveries) to a consumer that is
# killed each time before acknowledging it. The next reaping moves it to the
# dead-letter list with its reason instead of handing it out a 4th time.
# shellcheck source=tests/lib/integration.sh
. "$(dirname "$0")/../lib/integration.sh"
need_bin sluice-ctl sluice-producer sluice-consume gen-tfrecord hold

redis_tmp_start
q=poison
gen "$T/in.tfrecord" 5 3 10 100 >/dev/null
ctl create "$q" --max-batches 100 --max-bytes 64M --lease-ms 1000 --max-deliveries 3 >/dev/null
"$BUILD/sluice-producer" --redis "$REDIS_URL" --queue "$q" --format tfrecord --batch-size 10 \
    --quiet "$T/in.tfrecord" || fail "producer failed"

id=
for k in 1 2 3; do
    bg "$T/h$k.out" "$T/h$k.err" "$BUILD/hold" --redis "$REDIS_URL" --queue "$q" --count 1 \
        --prefetch 1 --timeout-ms 10000
    h=$BG_PID
    for ((i = 0; i < 300; i++)); do
        grep -q '^held 1' "$T/h$k.out" 2>/dev/null && break
        kill -0 "$h" 2>/dev/null || fail "holder $k exited: $(cat "$T/h$k.err")"
        sleep 0.05
    done
    grep -q '^held 1' "$T/h$k.out" || fail "holder $k got nothing"
    line=$(grep '^id ' "$T/h$k.out")
    note "holder $k: $line"
    [[ $line == *"deliveries=$k" ]] || fail "holder $k: '$line', expected deliveries=$k"
    [[ -z $id || $line == "id $id "* ]] || fail "holder $k got another batch: $line"
    id=$(echo "$line" | awk '{ print $2 }')
    kill -9 "$h"
done

# Any consumer reaps: this one must get nothing, the batch goes to the dead letters.
out=$("$BUILD/sluice-consume" --redis "$REDIS_URL" --queue "$q" --summary --quiet \
    --timeout-ms 2500) || fail "consumer failed: $out"
[[ $(kv batches "$out") == 0 ]] || fail "the poison batch was delivered a 4th time: $out"
dead=$(redis_tmp_cli LRANGE "sluice:{$q}:dead" 0 -1)
[[ $dead == "$id" ]] || fail "dead-letter list is '$dead', expected $id"
info=$(redis_tmp_cli HGET "sluice:{$q}:deadinfo" "$id")
note "deadinfo $id: $info"
[[ $info == *"delivered 3 times without an acknowledgement"* ]] || fail "deadinfo has no reason: $info"
(( $(redis_tmp_cli STRLEN "sluice:{$q}:deadb:$id") > 0 )) || fail "the frame was not kept as deadb:$id"
[[ $(info_field "$q" batches) == 0 ]] || fail "batches left: $(info_field "$q" batches)"
if ctl dead "$q" >"$T/dead.out" 2>&1; then
    grep -q "$id" "$T/dead.out" || fail "sluice-ctl dead does not list $id: $(cat "$T/dead.out")"
    note "sluice-ctl dead: $(cat "$T/dead.out")"
fi
echo "ok: batch $id dead-lettered after 3 deliveries: $info"
