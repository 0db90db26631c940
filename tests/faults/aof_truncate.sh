#!/usr/bin/env bash
# Redis loses its last second of writes, as on a crash of its host with
# appendonly yes and appendfsync everysec (docs/DEPLOY.md, "Persistence";
# README, guarantee 7). A 3-epoch job of 10 shards runs with 3 producers
# (task lease 1 s, throttled --exec source) and AOF_CONSUMERS (default 2)
# consumers (queue lease 1 s, sluice-consume --print-ids --summary
# --epochs, all appending to one file, which keeps the order of every
# delivery). Meanwhile the size of the newest incr file of the AOF (named
# by its manifest) is recorded every 100 ms. AOF_CRASHES times (default
# 2), once a seeded random share of the job was delivered, redis-server is
# killed with -9, the incr file is cut back to a seeded random byte of
# what it held about a second earlier (AOF_LOST_MS, default a random
# 700-1300 ms; the base file is never touched; a cut inside a transaction
# goes back into its MULTI, so that Redis drops all of it: aof_cut.py), and
# after AOF_DOWN_MS (default a random 0-500 ms; a host that reboots takes
# longer) Redis comes back on the same port and dir, loading the truncated
# file (aof-load-truncated yes). The clients reconnect by themselves.
# Checked: no hang (the job reaches the next crash, and then its end, within
# AOF_FINISH_S, default 60, seconds of each restart); every producer and
# consumer exits 0; every batch id of every epoch was delivered and is
# acknowledged; an id delivered more than once came flagged (deliveries >=
# 2) on every copy after the first (tests/faults/check_ids.py --lost-writes:
# no consumer dies here, so the one exception of the guarantee does not
# apply); no pending list, no dead letter, no batch left in Redis.
# AOF_KEEP=DIR keeps what a failing run leaves (the delivery log, the
# clients' stderr, Redis's dir) in DIR.
# test: long
# shellcheck source=tests/lib/faults.sh
. "$(dirname "$0")/../lib/faults.sh"
need_bin sluice-ctl sluice-producer sluice-consume

redis_tmp_start --appendonly yes --appendfsync everysec --aof-load-truncated yes
q=faultaof
shards=10 per=200 bsize=10 epochs=3
crashes=${AOF_CRASHES:-2}
consumers=${AOF_CONSUMERS:-2}
finish_s=${AOF_FINISH_S:-60}
aof=$REDIS_DIR/appendonlydir
make_line_shards "$shards" "$per" "$T/job.manifest"
ctl create "$q" --max-batches 16 --max-bytes 64M --lease-ms 1000 >/dev/null
ctl submit "$q" --manifest "$T/job.manifest" --epochs "$epochs" --batch-size "$bsize" \
    --shuffle-seed "$SEED" >/dev/null || fail "submit failed"
total=$((epochs * shards * ((per + bsize - 1) / bsize)))

pids=() names=()
for k in 1 2 3; do
    start_producer "$T/p$k" "$q" --id "p$k" --lease-ms 1000 --exec "$(slow_exec 4)"
    pids+=("$BG_PID"); names+=("p$k")
done
# One file for every consumer: each appends its lines to it, tagged
# " by=c<k>" by a sed of its own that writes each line at once, so the file
# is the order in which the batches were delivered (check_ids.py reads the
# tags).
ids=$T/ids
: >"$ids"
export IDS=$ids
for ((k = 1; k <= consumers; k++)); do
    # shellcheck disable=SC2016  # $IDS and $1 are the inner shell's
    bg /dev/null "$T/c$k.err" bash -c 'n=$1; shift; exec "$@" > >(exec sed -u "s/\$/ by=$n/" >>"$IDS")' \
        tag "c$k" "$BUILD/sluice-consume" --redis "$REDIS_URL" --queue "$q" \
        --print-ids --summary --epochs --quiet
    pids+=("$BG_PID"); names+=("c$k")
done
all_alive() {
    local i
    for i in "${!pids[@]}"; do
        kill -0 "${pids[i]}" 2>/dev/null || die "${names[i]} exited $1: $(tail -n 3 "$T/${names[i]}.err")"
    done
}
delivered() { grep -c '^id ' "$ids" || true; }
# incr_file: the newest incr file of the AOF, as its manifest names it.
incr_file() { basename "$(aof_incr_file)"; }
# keep: with AOF_KEEP=DIR, copies the scratch dir (the delivery log, the
# clients' stderr) and Redis's dir (AOF, log) to DIR for a post-mortem.
keep() {
    [[ -n ${AOF_KEEP:-} ]] || return 0
    mkdir -p "$AOF_KEEP" && cp -r "$T" "$AOF_KEEP/scratch" && cp -r "$REDIS_DIR" "$AOF_KEEP/redis" &&
        echo "kept the scratch dir and Redis's dir in $AOF_KEEP"
}
# die MESSAGE...: fail, after printing the queue's state and keeping.
die() {
    echo "-- at the failure: $(ctl info "$q" 2>&1 | tr '\n' ' ')"
    keep
    fail "$@"
}

t0=$(now_ms)
since=$t0        # when Redis last started: the size history begins there
cut_bytes=0
for ((k = 1; k <= crashes; k++)); do
    # The crash comes once a random share of the job's batches, inside the
    # k-th of $crashes equal parts of 10-85 %, was delivered, and at least
    # $lost ms (plus a margin) after the last start of Redis, so that the
    # cut falls in what this run of Redis wrote.
    rand $((10 + (k - 1) * 75 / crashes)) $((10 + k * 75 / crashes))
    at=$((total * RAND / 100))
    rand 700 1300
    lost=${AOF_LOST_MS:-$RAND}
    hist_t=() hist_f=() hist_s=()
    while :; do
        t=$(now_ms)
        f=$(incr_file)
        hist_t+=("$t"); hist_f+=("$f"); hist_s+=("$(stat -c %s "$aof/$f")")
        (( $(delivered) >= at && t - since >= lost + 200 )) && break
        all_alive "before crash $k (at $at of $total batches delivered: slow the job down)"
        (( t - since < finish_s * 1000 )) ||
            die "a hang: crash $k waits for $at batches delivered, $(delivered) were" \
                "$finish_s s after the last start of Redis"
        sleep 0.1
    done
    acked=$(rcli HGET "sluice:{$q}:stats" acked)
    t_kill=$(now_ms)
    redis_tmp_kill9
    f=$(incr_file)
    size=$(stat -c %s "$aof/$f")
    # The newest sample taken $lost ms or more before the kill (of the same
    # file: the oldest one otherwise); the cut is a random byte of what was
    # written between it and the next sample, so it mostly falls inside a
    # command (Redis loads up to the last whole one).
    j=$((${#hist_t[@]} - 1))
    while ((j > 0)) && [[ ${hist_f[j - 1]} == "$f" ]] && ((hist_t[j] > t_kill - lost)); do
        j=$((j - 1))
    done
    lo=0 hi=$size
    if [[ ${hist_f[j]} == "$f" ]]; then
        lo=${hist_s[j]}
        ((j + 1 < ${#hist_t[@]})) && hi=${hist_s[j + 1]}
    fi
    cut=$((lo + ((RANDOM << 15) | RANDOM) % (hi - lo + 1)))
    # Inside a transaction (a script's effects), what Redis 7.0 leaves of
    # it would spoil the next load: cut in its MULTI (aof_cut.py).
    at_byte=$cut
    cut=$("$PY" "$FAULTS/aof_cut.py" "$aof/$f" "$cut") || die "aof_cut.py $aof/$f failed"
    truncate -s "$cut" "$aof/$f" || die "truncate -s $cut $aof/$f failed"
    cut_bytes=$((cut_bytes + size - cut))
    where=""
    ((cut == at_byte)) || where=" (inside a transaction: cut in its MULTI, at byte $cut)"
    echo "crash $k at $((t_kill - t0)) ms ($(delivered) of $total batches delivered, acked ${acked:-0}):" \
        "kill -9 redis-server, $f cut from $size bytes at byte $at_byte$where:" \
        "$((size - cut)) bytes, the writes of the last $((t_kill - hist_t[j])) ms or so"
    rand 0 500
    ms_sleep "${AOF_DOWN_MS:-$RAND}"
    all_alive "while Redis was down"
    redis_tmp_restart || die "Redis did not come back: $(tail -n 5 "$REDIS_DIR/redis.log")"
    since=$(now_ms)
    echo "  restarted after $((since - t_kill)) ms: acked $(rcli HGET "sluice:{$q}:stats" acked) after" \
        "the load; $(grep -o 'Truncating the AOF.*at offset [0-9]*\|Revert incomplete MULTI.*' \
        "$REDIS_DIR/redis.log" | tr '\n' ' ' | sed 's/ *$//' | grep . || echo 'the file loaded whole')"
done

deadline=$((since + finish_s * 1000))
for i in "${!pids[@]}"; do
    rc=0; wait_pid "${pids[i]}" $(( (deadline - $(now_ms)) / 1000 + 1 )) || rc=$?
    ((rc != 124)) || die "${names[i]} still running ${finish_s} s after the last restart (a hang):" \
        "$(tail -n 3 "$T/${names[i]}.err")"
    ((rc == 0)) || die "${names[i]} exit $rc: $(tail -n 3 "$T/${names[i]}.err")"
done
# Each consumer's last line (its summary) says that its sed wrote everything.
summaries() { (( $(grep -c '^records=.* by=' "$ids" || true) == consumers )); }
wait_for 10 summaries || die "the consumers' output is incomplete: $(tail -n 3 "$ids")"
echo "all processes finished $(( $(now_ms) - since )) ms after the last restart, $(( $(now_ms) - t0 )) ms after the start"

rc=0
out=$("$PY" "$FAULTS/check_ids.py" --port "$REDIS_PORT" --queue "$q" --epochs "$epochs" \
    --batches "$(batches_per_shard "$shards" "$per" "$bsize")" --lost-writes "$ids") || rc=$?
printf '%s\n' "$out"
((rc == 0)) || die "delivery check failed (seed $SEED)"
[[ $(info_field "$q" batches) == 0 ]] || die "batches left in the queue"
info=$(ctl info "$q")
echo "tasks reaped: $(sed -n 's/^tasks_reaped: //p' <<<"$info"), duplicate pushes dropped:" \
    "$(sed -n 's/^dup_dropped: //p' <<<"$info"), restored: $(rcli HGET "sluice:{$q}:stats" restored)," \
    "redo entries left: $(rcli HLEN "sluice:{$q}:redo")"
echo "ok: $crashes crashes cut $cut_bytes bytes of AOF (seed $SEED): every batch of the $epochs" \
    "epochs delivered and acknowledged, every duplicate flagged"
