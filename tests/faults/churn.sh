#!/usr/bin/env bash
# A churn soak, seeded: one random scenario per run, chosen by $SEED
# (FAULT_SEED=N replays it; tests/soak.sh / `make soak SEEDS=N` runs many).
# The seed picks a free or a coordinated queue (one rank per consumer), 2-3
# epochs of 8 shards (24 batches each: 192 an epoch, whole rounds for 2, 3
# or 4 ranks), budget pressure (--max-batches 8-16), 2-4 producers (task
# lease 1-2 s, a throttled --exec source: tests/faults/slow_emit.py) and
# 2-4 consumers (queue lease 1-2 s; sluice-consume --print-ids and slow
# Python trainers, tests/faults/slow_consume.py, that hold each batch
# unacknowledged for 2-20 ms), with the DEFAULT --max-attempts (3),
# --max-crashes (20) and --max-deliveries (3): churn must neither fail a
# task nor dead-letter a batch. Redis runs with AOF, appendfsync always.
# Then 8-16 rounds, a random 0.2-1.5 s apart, of one random action each:
#   kill -9 of a producer (half the time once the queue is at its budget:
#   producers blocked on room) or of a consumer (a trainer always holds a
#   batch, and prefetched ones); SIGTERM of either; SIGSTOP of either past
#   its lease (the lease + 0.3-1.5 s), then SIGCONT; a participant replaced
#   by one whose clock is 5-30 s off (LD_PRELOAD $BUILD/libskew.so); the
#   producers scaled down to one (SIGTERM of the others), or back up; Redis
#   killed with -9 and restarted on the same port and dir (at most twice).
# A killed or stopped process is replaced at once (a coordinated rank by
# one of the same rank, which retries while the dead holder's lease runs).
# Then the job must finish within CHURN_FINISH_S (default 60) s.
# Checked: every process exits 0 (a trainer stopped by SIGTERM excepted);
# the job is finished with no failed task; per epoch every batch id was
# delivered and is acknowledged; a duplicate only where every earlier copy
# went to a consumer that was killed, stopped by a signal or frozen past
# its lease (for a frozen one: a line printed before its last freeze), and
# with a distinct, higher delivery count (flagged); no dead letter (unless
# killed consumers received it --max-deliveries times: reported); nothing
# left in Redis (tests/faults/check_ids.py).
# Prints the seed's choices, then every action with its time; CHURN_KEEP=DIR
# keeps the outputs and Redis's dir of a failing run in DIR.
# test: long
# shellcheck source=tests/lib/faults.sh
. "$(dirname "$0")/../lib/faults.sh"
# shellcheck source=tests/lib/python.sh
. "$ROOT/tests/lib/python.sh"
need_bin sluice-ctl sluice-producer sluice-consume libskew.so

redis_tmp_start --appendonly yes --appendfsync always
q=churn
shards=8 per=240 bsize=10
finish_s=${CHURN_FINISH_S:-60}
rand 0 1; coord=$RAND
rand 2 3; epochs=$RAND
rand 8 16; maxb=$RAND
rand 2 4; np=$RAND
rand 2 4; nc=$RAND
rand 1000 2000; qlease=$RAND
rand 1000 2000; tlease=$RAND
rand 8 16; rounds=${CHURN_ROUNDS:-$RAND}
rand 3 5; emit_ms=$RAND
kinds=(cli py)   # at least one of each
for ((i = 2; i < nc; i++)); do rand 0 1; kinds[i]=$( ((RAND)) && echo py || echo cli); done

make_line_shards "$shards" "$per" "$T/job.manifest"
cargs=()
((coord)) && cargs=(--consumers "$nc" --coordinated)
ctl create "$q" --max-batches "$maxb" --max-bytes 64M --lease-ms "$qlease" "${cargs[@]}" >/dev/null ||
    fail "create failed"
ctl submit "$q" --manifest "$T/job.manifest" --epochs "$epochs" --batch-size "$bsize" \
    --shuffle-seed "$SEED" >/dev/null || fail "submit failed"
exec_cmd=$(slow_exec "$emit_ms")
mode=free
((coord)) && mode="coordinated over $nc ranks"
echo "chose: $mode queue, $epochs epochs x $shards shards x 24 batches, --max-batches $maxb," \
    "queue lease $qlease ms; $np producers (task lease $tlease ms, $emit_ms ms a record);" \
    "$nc consumers (${kinds[*]}); $rounds rounds"

# Slots: producers P_*[i], i < np; consumers C_*[i], i < nc (rank i when
# coordinated). *_PID: the current process, *_OUT its stdout (stderr in
# .err); P_ON[i]=0 for a producer slot scaled down. C_ALL: every consumer
# output; C_DEAD: those of consumers killed or stopped by a signal;
# FROZEN[out]=N: consumer out was frozen past its lease after N id lines.
P_PID=() P_OUT=() P_ON=() C_PID=() C_OUT=() C_ALL=() C_DEAD=() C_FIN=()
declare -A FROZEN=()
ACTS=() nstart=0 redis_restarts=0
t0=$(now_ms)
elapsed() { local t=$(( $(now_ms) - t0 )); printf '%d.%ds' $((t / 1000)) $((t % 1000 / 100)); }
act() { ACTS+=("$(elapsed) $*"); note "$(elapsed) $*"; }
keep() {
    [[ -n ${CHURN_KEEP:-} ]] || return 0
    mkdir -p "$CHURN_KEEP" && cp -r "$T" "$CHURN_KEEP/scratch" 2>/dev/null
    [[ -z ${REDIS_DIR:-} ]] || cp -r "$REDIS_DIR" "$CHURN_KEEP/redis" 2>/dev/null
    echo "kept the outputs and Redis's dir in $CHURN_KEEP"
}
summary() { echo "actions (seed $SEED): ${ACTS[*]/%/;}"; }
die() {
    summary
    echo "-- at the failure: $(ctl info "$q" 2>&1 | tr '\n' ' ')"
    keep
    fail "$* (seed $SEED: FAULT_SEED=$SEED bash tests/faults/churn.sh)"
}
alive() { kill -0 "$1" 2>/dev/null; }
# reap_rc PID: sets RC to the exit status of an ended background process
# (not in a $(...): a subshell cannot wait for its parent's children).
reap_rc() { RC=0; wait "$1" 2>/dev/null || RC=$?; }

# start_prod I [SKEW_MS]; start_cons I [SKEW_MS]: a new process in slot I.
start_prod() {
    local i=$1 pre=()
    nstart=$((nstart + 1))
    [[ -z ${2:-} ]] || { skew_env "$2"; pre=("${SKEW[@]}"); }
    P_OUT[i]=$T/p$nstart
    : >"${P_OUT[i]}"     # bg's child may be killed before it opens it
    bg "${P_OUT[i]}" "${P_OUT[i]}.err" "${pre[@]}" "$BUILD/sluice-producer" --redis "$REDIS_URL" \
        --queue "$q" --id "p$nstart" --lease-ms "$tlease" --exec "$exec_cmd"
    P_PID[i]=$BG_PID P_ON[i]=1
}
start_cons() {
    local i=$1 rk=() pre=("${PYCMD[@]}")
    nstart=$((nstart + 1))
    C_OUT[i]=$T/c$nstart
    : >"${C_OUT[i]}"     # killed before its redirection, it still has a file
    C_ALL+=("${C_OUT[i]}")
    if [[ ${kinds[i]} == cli ]]; then
        pre=()
        [[ -z ${2:-} ]] || { skew_env "$2"; pre=("${SKEW[@]}"); }
        ((coord)) && rk=(--rank "$i" --world "$nc")
        bg "${C_OUT[i]}" "${C_OUT[i]}.err" "${pre[@]}" "$BUILD/sluice-consume" --redis "$REDIS_URL" \
            --queue "$q" --print-ids --summary --epochs --quiet "${rk[@]}"
    else
        [[ -z ${2:-} ]] || { skew_env "$2"; pre=("${SKEW[@]}" "$PY"); }
        ((coord)) && rk=("$i" "$nc")
        bg "${C_OUT[i]}" "${C_OUT[i]}.err" "${pre[@]}" "$FAULTS/slow_consume.py" "$REDIS_URL" "$q" \
            "$((SEED + nstart))" 2 20 "${rk[@]}"
    fi
    C_PID[i]=$BG_PID C_FIN[i]=0
}
# open_io_error ERRFILE: the process failed at its start on a connection
# lost or refused (Redis restarting then).
open_io_error() {
    ((redis_restarts)) &&
        grep -qiE 'closed the connection|connection refused|connection reset|LOADING' "$1"
}
finished() { [[ $(rcli HGET "sluice:{$q}:jrun" state 2>/dev/null) == finished ]]; }
ids_of() { grep -c '^id ' "$1" || true; }

# supervise: looks at every slot whose process ended by itself. A producer
# or a consumer must end with 0 once the job is finished, and only then;
# a coordinated rank's replacement refused while its dead holder's lease
# runs is started again.
supervise() {
    local i rc
    for i in "${!P_PID[@]}"; do
        if ! ((P_ON[i])) || [[ -z ${P_PID[i]} ]] || alive "${P_PID[i]}"; then continue; fi
        reap_rc "${P_PID[i]}"; rc=$RC
        if ((rc == 1)) && ! grep -q '^task ' "${P_OUT[i]}.err" && open_io_error "${P_OUT[i]}.err"; then
            act "producer $(basename "${P_OUT[i]}") failed to start across the Redis restart: started again"
            start_prod "$i"
            continue
        fi
        ((rc == 0)) || die "producer $(basename "${P_OUT[i]}") exit $rc: $(tail -n 3 "${P_OUT[i]}.err")"
        finished || die "producer $(basename "${P_OUT[i]}") exited 0 before the job finished"
        P_PID[i]=""
    done
    for i in "${!C_PID[@]}"; do
        if ((C_FIN[i])) || alive "${C_PID[i]}"; then continue; fi
        reap_rc "${C_PID[i]}"; rc=$RC
        if ((rc == 1 && coord)) && grep -q 'is held by consumer' "${C_OUT[i]}.err" &&
            ! grep -q '^id ' "${C_OUT[i]}"; then
            start_cons "$i"      # the dead holder's lease still runs: again
            sleep 0.2
            continue
        fi
        # open() does not wait out a Redis restart (SLUICE_ERR_IO, as its
        # doc says; only an open consumer reconnects): start it again.
        if ((rc == 1)) && ! grep -q '^id ' "${C_OUT[i]}" && open_io_error "${C_OUT[i]}.err"; then
            act "consumer $(basename "${C_OUT[i]}") failed to open across the Redis restart: started again"
            start_cons "$i"
            continue
        fi
        ((rc == 0)) || die "consumer $(basename "${C_OUT[i]}") (${kinds[i]}) exit $rc: $(tail -n 3 "${C_OUT[i]}.err")"
        grep -qx finished "${C_OUT[i]}" || grep -q '^records=' "${C_OUT[i]}" ||
            die "consumer $(basename "${C_OUT[i]}") exited 0 without the job's end: $(tail -n 3 "${C_OUT[i]}")"
        C_FIN[i]=1
    done
}
# pause MS: sleeps MS while supervising.
pause() {
    local end=$(( $(now_ms) + $1 ))
    while (( $(now_ms) < end )); do supervise; sleep 0.1; done
}
# pick_prod / pick_cons: sets PICK to a random slot with a live process,
# or returns 1.
pick_prod() {
    local c=() i
    for i in "${!P_PID[@]}"; do ((P_ON[i])) && [[ -n ${P_PID[i]} ]] && alive "${P_PID[i]}" && c+=("$i"); done
    ((${#c[@]})) || return 1
    rand 0 $((${#c[@]} - 1)); PICK=${c[RAND]}
}
pick_cons() {
    local c=() i
    for i in "${!C_PID[@]}"; do ((C_FIN[i] == 0)) && alive "${C_PID[i]}" && c+=("$i"); done
    ((${#c[@]})) || return 1
    rand 0 $((${#c[@]} - 1)); PICK=${c[RAND]}
}
nprod_on() { local i n=0; for i in "${!P_ON[@]}"; do ((P_ON[i])) && n=$((n + 1)); done; echo "$n"; }
at_budget() { (( $(held "$q") >= maxb )); }
# sigterm PID SECS: SIGTERM; sets RC to its exit status (124: it ran on).
sigterm() {
    kill -TERM "$1" 2>/dev/null || true
    RC=0
    wait_pid "$1" "$2" || RC=$?
}

for ((i = 0; i < np; i++)); do start_prod "$i"; done
for ((i = 0; i < nc; i++)); do start_cons "$i"; done
# Sometimes one of the first participants already runs on a wrong clock.
rand 0 2
if ((RAND == 0)); then
    rand 5 30; ms=$((RAND * 1000)); rand 0 1; ((RAND)) && ms=$((-ms))
    rand 0 1
    if ((RAND)); then
        kill -KILL "${P_PID[0]}"; wait "${P_PID[0]}" 2>/dev/null || true
        start_prod 0 "$ms"; act "producer 0 restarted at once with its clock ${ms} ms off"
    else
        kill -KILL "${C_PID[0]}"; wait "${C_PID[0]}" 2>/dev/null || true
        C_DEAD+=("${C_OUT[0]}")
        start_cons 0 "$ms"; act "consumer 0 restarted at once with its clock ${ms} ms off"
    fi
fi

for ((r = 1; r <= rounds; r++)); do
    rand 200 1500
    pause "$RAND"
    if finished; then act "the job finished before round $r"; break; fi
    rand 0 99; a=$RAND
    if ((a < 20)); then                                   # kill -9 a producer
        pick_prod || continue
        i=$PICK where=""
        rand 0 1
        if ((RAND)) && wait_for 3 at_budget; then where=" (the queue at its budget)"; fi
        alive "${P_PID[i]}" || continue
        kill -KILL "${P_PID[i]}"; wait "${P_PID[i]}" 2>/dev/null || true
        act "kill -9 producer $(basename "${P_OUT[i]}")$where"
        start_prod "$i"
    elif ((a < 40)); then                                 # kill -9 a consumer
        pick_cons || continue
        i=$PICK
        kill -KILL "${C_PID[i]}"; wait "${C_PID[i]}" 2>/dev/null || true
        act "kill -9 consumer $(basename "${C_OUT[i]}") (${kinds[i]}, $(ids_of "${C_OUT[i]}") ids)"
        C_DEAD+=("${C_OUT[i]}")
        start_cons "$i"
    elif ((a < 50)); then                                 # SIGTERM a producer
        pick_prod || continue
        i=$PICK
        sigterm "${P_PID[i]}" 15; rc=$RC
        ((rc == 0)) || die "producer $(basename "${P_OUT[i]}") exit $rc after SIGTERM: $(tail -n 3 "${P_OUT[i]}.err")"
        act "SIGTERM producer $(basename "${P_OUT[i]}") (exit 0)"
        start_prod "$i"
    elif ((a < 60)); then                                 # SIGTERM a consumer
        pick_cons || continue
        i=$PICK
        sigterm "${C_PID[i]}" 15; rc=$RC
        # sluice-consume closes and exits 0; Python dies of the signal.
        [[ $rc == 0 || ($rc == 143 && ${kinds[i]} == py) ]] ||
            die "consumer $(basename "${C_OUT[i]}") exit $rc after SIGTERM: $(tail -n 3 "${C_OUT[i]}.err")"
        act "SIGTERM consumer $(basename "${C_OUT[i]}") (${kinds[i]}, $(ids_of "${C_OUT[i]}") ids, exit $rc)"
        C_DEAD+=("${C_OUT[i]}")
        if grep -qx finished "${C_OUT[i]}"; then C_FIN[i]=1; else start_cons "$i"; fi
    elif ((a < 75)); then                                 # SIGSTOP past the lease
        rand 0 1
        if ((RAND)) && pick_cons; then
            i=$PICK pid=${C_PID[i]} what="consumer $(basename "${C_OUT[i]}") (${kinds[i]})"
            kill -STOP "$pid"
            FROZEN[${C_OUT[i]}]=$(ids_of "${C_OUT[i]}")
            rand 300 1500; ms=$((qlease + RAND))
        elif pick_prod; then
            i=$PICK pid=${P_PID[i]} what="producer $(basename "${P_OUT[i]}")"
            kill -STOP "$pid"
            rand 300 1500; ms=$((tlease + RAND))
        else
            continue
        fi
        ms_sleep "$ms"
        kill -CONT "$pid"
        act "SIGSTOP $what for $ms ms, SIGCONT"
    elif ((a < 83)); then                                 # a participant on a wrong clock
        rand 5 30; ms=$((RAND * 1000)); rand 0 1; ((RAND)) && ms=$((-ms))
        rand 0 1
        if ((RAND)) && pick_cons; then
            i=$PICK
            kill -KILL "${C_PID[i]}"; wait "${C_PID[i]}" 2>/dev/null || true
            C_DEAD+=("${C_OUT[i]}")
            act "kill -9 consumer $(basename "${C_OUT[i]}") (${kinds[i]}), replaced by one ${ms} ms off"
            start_cons "$i" "$ms"
        elif pick_prod; then
            i=$PICK
            kill -KILL "${P_PID[i]}"; wait "${P_PID[i]}" 2>/dev/null || true
            act "kill -9 producer $(basename "${P_OUT[i]}"), replaced by one ${ms} ms off"
            start_prod "$i" "$ms"
        fi
    elif ((a < 90)); then                                 # scale producers down to one, or up
        if (( $(nprod_on) > 1 )); then
            pick_prod || continue
            keep_i=$PICK stopped=()
            for i in "${!P_PID[@]}"; do
                ((P_ON[i] && i != keep_i)) || continue
                if [[ -n ${P_PID[i]} ]] && alive "${P_PID[i]}"; then
                    sigterm "${P_PID[i]}" 15; rc=$RC
                    ((rc == 0)) || die "producer $(basename "${P_OUT[i]}") exit $rc after SIGTERM (scale-down): $(tail -n 3 "${P_OUT[i]}.err")"
                    stopped+=("$(basename "${P_OUT[i]}")")
                fi
                P_ON[i]=0
            done
            act "scale-down to producer $(basename "${P_OUT[keep_i]}"): SIGTERM ${stopped[*]}"
        else
            started=()
            for i in "${!P_ON[@]}"; do
                ((P_ON[i])) && continue
                start_prod "$i"; started+=("$(basename "${P_OUT[i]}")")
            done
            act "scale-up: started ${started[*]}"
        fi
    else                                                  # Redis restart
        ((redis_restarts < 2)) || continue
        redis_restarts=$((redis_restarts + 1))
        redis_tmp_kill9
        rand 200 1500; down=$RAND
        ms_sleep "$down"
        redis_tmp_restart || die "Redis did not come back: $(tail -n 5 "$REDIS_DIR/redis.log")"
        act "kill -9 redis-server, restarted after $down ms"
    fi
done

# At least one producer, every consumer slot running: the job must finish.
if (( $(nprod_on) == 0 )); then start_prod 0; act "started producer $(basename "${P_OUT[0]}") to finish"; fi
t_end=$(now_ms)
act "end of the rounds"
while :; do
    supervise
    done_all=1
    for i in "${!P_PID[@]}"; do ((P_ON[i])) && [[ -n ${P_PID[i]} ]] && done_all=0; done
    for i in "${!C_PID[@]}"; do ((C_FIN[i])) || done_all=0; done
    ((done_all)) && break
    (( $(now_ms) - t_end < finish_s * 1000 )) ||
        die "not finished $finish_s s after the last action: $(finished && echo 'the job is finished but processes run' || echo 'the job is not finished')"
    sleep 0.1
done
act "all finished"
summary

info=$(ctl info "$q")
grep -qx "job: finished" <<<"$info" || die "the job is not finished without failures: $(grep '^job' <<<"$info")"
grep -qx "tasks_failed: 0" <<<"$info" || die "a task failed: $(grep -i 'fail' <<<"$info" | tr '\n' ' ')"
live=() dargs=()
for f in "${C_ALL[@]}"; do
    if [[ " ${C_DEAD[*]} " == *" $f "* ]]; then
        dargs+=(--killed "$f")
    elif [[ -n ${FROZEN[$f]:-} ]]; then
        dargs+=(--frozen "$f:${FROZEN[$f]}")
    else
        live+=("$f")
    fi
done
rc=0
out=$("$PY" "$FAULTS/check_ids.py" --port "$REDIS_PORT" --queue "$q" --epochs "$epochs" \
    --batches "$(batches_per_shard "$shards" "$per" "$bsize")" --max-deliveries 3 \
    "${dargs[@]}" "${live[@]}") || rc=$?
printf '%s\n' "$out"
((rc == 0)) || die "delivery check failed"
[[ $(info_field "$q" batches) == 0 ]] || die "batches left in the queue: $(ctl info "$q" | tr '\n' ' ')"
echo "tasks reaped: $(sed -n 's/^tasks_reaped: //p' <<<"$info"), batches requeued:" \
    "$(sed -n 's/^requeued: //p' <<<"$info"), duplicate pushes dropped: $(sed -n 's/^dup_dropped: //p' <<<"$info")"
echo "ok: churn (seed $SEED), $mode: ${#ACTS[@]} actions, finished $(( $(now_ms) - t_end )) ms after the last," \
    "$(( $(now_ms) - t0 )) ms in all"
