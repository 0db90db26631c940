# shellcheck shell=bash
# A job on a partitioned queue in a Redis Cluster, for the cluster_*.sh
# tests (sourced after integration.sh and cluster.sh). It makes the shards, runs
# sluice-producer (job mode) and sluice-consume processes against
# $CLUSTER_URL, and checks that every record arrived exactly once per epoch.
#
#   cjob_data SHARDS LINES           # $T/shard-*.txt, $T/job.manifest; CJOB_SUM, CJOB_RECS
#   cjob_consumers N                 # N x sluice-consume --summary --epochs --print-ids
#   cjob_producers N [DELAY_S]       # N x sluice-producer; DELAY_S: a pause per 10 records
#   cjob_delivered                   # batches the consumers printed so far
#   cjob_wait SECONDS                # every producer, then every consumer, exit 0
#   cjob_check EPOCHS BATCH_SIZE     # exactly once per epoch, EOF per epoch
#   cjob_spread Q P                  # partitions of Q spread over >= 2 masters
#   cjob_job NP SHARDS LINES BS EPOCHS  # data, $CJOB_Q of NP partitions, the job submitted
#   cjob_busiest NP                  # CJOB_BUSY: the partition whose slot holds most keys
#   cjob_pause / cjob_resume         # SIGSTOP / SIGCONT the producers
#
# Records are the lines of the shard files (the `lines` reader). With a
# DELAY_S the producers read them through --exec instead, with a pause of
# DELAY_S seconds after every 10 records, so that a job lasts long enough
# for a failover or a migration to happen in the middle of an epoch while
# the machine stays idle.

CJOB_SHARDS=0 CJOB_LINES=0 CJOB_SUM='' CJOB_RECS=0
CJOB_PRODS=() CJOB_CONS=()

# cjob_data SHARDS LINES: SHARDS files of LINES lines (1..300 random
# printable bytes each) and a manifest naming them; sets CJOB_SUM (the
# checksum sluice-consume --summary prints for the whole set, per epoch)
# and CJOB_RECS.
cjob_data() {
    CJOB_SHARDS=$1 CJOB_LINES=$2
    cat >"$T/gen.py" <<'EOF'
import random, sys
d, shards, lines = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
rng = random.Random(7)
total = 0
with open(d + "/job.manifest", "w") as m:
    for s in range(shards):
        recs = [bytes(rng.randrange(33, 127) for _ in range(rng.randint(1, 300)))
                for _ in range(lines)]
        with open("%s/shard-%d.txt" % (d, s), "wb") as f:
            f.write(b"".join(r + b"\n" for r in recs))
        m.write("lines shard-%d.txt\n" % s)
        for r in recs:
            h = 0xcbf29ce484222325
            for b in r:
                h = ((h ^ b) * 0x100000001b3) & 0xffffffffffffffff
            total = (total + h) & 0xffffffffffffffff
print("%016x" % total)
EOF
    CJOB_SUM=$("$PY" "$T/gen.py" "$T" "$1" "$2") || fail "cjob_data: could not write the shards"
    # shellcheck disable=SC2034  # for the tests
    CJOB_RECS=$(($1 * $2))
    # What --exec runs: the file's lines as length-prefixed records, with a
    # pause after every 10.
    cat >"$T/emit.py" <<'EOF'
import struct, sys, time
path, delay = sys.argv[1], float(sys.argv[2])
out = sys.stdout.buffer
for i, line in enumerate(open(path, "rb").read().splitlines()):
    out.write(struct.pack("<I", len(line)) + line)
    if i % 10 == 9:
        out.flush()
        time.sleep(delay)
EOF
}

# cjob_consumers N: starts N consumers of $CJOB_Q (ids, per-epoch summaries).
cjob_consumers() {
    local k
    for ((k = 1; k <= $1; k++)); do
        bg "$T/c$k.out" "$T/c$k.err" "$BUILD/sluice-consume" --redis "$CLUSTER_URL" \
            --queue "$CJOB_Q" --summary --epochs --print-ids
        CJOB_CONS+=("$BG_PID")
    done
}

# cjob_producers N [DELAY_S]: starts N job-mode producers p1..pN.
cjob_producers() {
    local k ex=()
    [[ -n ${2:-} ]] && ex=(--exec "$PY $T/emit.py {path} $2")
    for ((k = 1; k <= $1; k++)); do
        bg "$T/p$k.out" "$T/p$k.err" "$BUILD/sluice-producer" --redis "$CLUSTER_URL" \
            --queue "$CJOB_Q" --id "p$k" --summary ${ex[@]+"${ex[@]}"}
        CJOB_PRODS+=("$BG_PID")
    done
}

# cjob_delivered [EPOCH]: batches printed by the consumers so far (of EPOCH).
# shellcheck disable=SC2120  # EPOCH is optional
cjob_delivered() {
    cat "$T"/c*.out 2>/dev/null | grep -c "^id ${1:+$1:}" || true
}

# cjob_pause / cjob_resume: freeze the producers (SIGSTOP) while the test
# looks at the cluster and prepares a fault, and let them go on: the job
# cannot get ahead of the test however slow the machine, and a pause well
# inside the task lease changes nothing else.
cjob_pause() {
    local p
    for p in "${CJOB_PRODS[@]}"; do kill -STOP "$p" 2>/dev/null || true; done
}
cjob_resume() {
    local p
    for p in "${CJOB_PRODS[@]}"; do kill -CONT "$p" 2>/dev/null || true; done
}

# cjob_alive: 0 when every producer and consumer still runs; else says who
# stopped.
cjob_alive() {
    local k
    for k in "${!CJOB_PRODS[@]}"; do
        kill -0 "${CJOB_PRODS[k]}" 2>/dev/null ||
            { echo "producer p$((k + 1)) stopped: $(tail -n 3 "$T/p$((k + 1)).err")"; return 1; }
    done
    for k in "${!CJOB_CONS[@]}"; do
        kill -0 "${CJOB_CONS[k]}" 2>/dev/null ||
            { echo "consumer $((k + 1)) stopped: $(tail -n 3 "$T/c$((k + 1)).err")"; return 1; }
    done
    return 0
}

# cjob_wait_delivered N SECONDS: waits until the consumers printed N batches,
# failing when the job ends first or SECONDS pass.
cjob_wait_delivered() {
    local i why
    for ((i = 0; i < $2 * 20; i++)); do
        (($(cjob_delivered) >= $1)) && return 0
        why=$(cjob_alive) || cjob_fail "waiting for $1 batches to be delivered (got $(cjob_delivered)): $why"
        sleep 0.05
    done
    cjob_fail "only $(cjob_delivered) of $1 batches delivered within $2 s"
}

# cjob_wait SECONDS: every producer, then every consumer, must exit 0, all
# within SECONDS; sets CJOB_TASKS (tasks the producers report done). On a
# failure it shows what the queue holds and the tools' last words.
cjob_wait() {
    local k rc line left end=$((SECONDS + $1))
    CJOB_TASKS=0
    for k in "${!CJOB_PRODS[@]}"; do
        left=$((end - SECONDS)); ((left > 0)) || left=1
        rc=0; wait_pid "${CJOB_PRODS[k]}" "$left" || rc=$?
        ((rc == 0)) || cjob_fail "producer p$((k + 1)) exit $rc$( ((rc == 124)) && echo " (still running after $1 s)")"
        line=$(cat "$T/p$((k + 1)).out")
        note "producer p$((k + 1)): $line"
        CJOB_TASKS=$((CJOB_TASKS + $(kv tasks "$line")))
    done
    for k in "${!CJOB_CONS[@]}"; do
        left=$((end - SECONDS)); ((left > 0)) || left=1
        rc=0; wait_pid "${CJOB_CONS[k]}" "$left" || rc=$?
        ((rc == 0)) || cjob_fail "consumer $((k + 1)) exit $rc$( ((rc == 124)) && echo " (still running after $1 s)")"
        note "consumer $((k + 1)): $(grep -v '^id ' "$T/c$((k + 1)).out" | tr '\n' '|')" \
            "$(tr '\n' ' ' <"$T/c$((k + 1)).err")"
    done
}

# cjob_fail MESSAGE: fails the test after showing sluice-ctl info and the
# tail of every producer's and consumer's stderr.
cjob_fail() {
    local f
    echo "-- sluice-ctl info $CJOB_Q:"
    timeout 10 "$BUILD/sluice-ctl" --redis "$CLUSTER_URL" info "$CJOB_Q" 2>&1 | sed 's/^/   /' || true
    for f in "$T"/p*.err "$T"/c*.err; do
        [[ -e $f ]] || continue
        if [[ $f == */c*.err ]]; then
            echo "-- $(basename "$f" .err): $(grep -c '^id ' "${f%.err}.out") batches; stderr:"
        else
            echo "-- $(basename "$f" .err): stderr:"
        fi
        tail -n 8 "$f" | sed 's/^/   /'
    done
    fail "$@"
}

# cjob_check EPOCHS BATCH_SIZE: from the consumers' output: in every epoch
# each batch id (epoch:shard:seq, every shard, seq 0..ceil(LINES/BATCH)-1)
# was delivered exactly once over all consumers, nothing else was; every
# consumer printed the end of every epoch once, in order, with no batch of
# an epoch after its end or before the end of the previous one; the
# consumers' per-epoch records and checksums add up to the shards'. Then
# sluice-ctl info: the job finished, every task done, nothing left.
cjob_check() {
    local epochs=$1 bs=$2 files=() k info
    for k in "${!CJOB_CONS[@]}"; do files+=("$T/c$((k + 1)).out"); done
    "$PY" - "$epochs" "$bs" "$CJOB_SHARDS" "$CJOB_LINES" "$CJOB_SUM" "${files[@]}" <<'EOF' ||
import sys
epochs, bs, shards, lines = map(int, sys.argv[1:5])
want_sum, files = sys.argv[5], sys.argv[6:]
nb = (lines + bs - 1) // bs
bad = []
seen = [dict() for _ in range(epochs)]
recs = [0] * epochs
sums = [0] * epochs
for k, path in enumerate(files, 1):
    ended = []          # epochs whose end this consumer printed, in order
    for n, l in enumerate(open(path).read().splitlines(), 1):
        f = l.split()
        if l.startswith("id "):
            e, s, q = (int(x) for x in f[1].split(":"))
            if e >= epochs:
                bad.append("consumer %d line %d: batch %s of no epoch of the job" % (k, n, f[1]))
                continue
            if e != len(ended):
                bad.append("consumer %d line %d: batch %s while in epoch %d (ends printed: %s)"
                           % (k, n, f[1], len(ended), ended))
            seen[e].setdefault(f[1], []).append(k)
        elif l.startswith("epoch="):
            kv = dict(x.split("=", 1) for x in f)
            e = int(kv["epoch"])
            if e != len(ended):
                bad.append("consumer %d: end of epoch %d printed after the ends of %s" % (k, e, ended))
            ended.append(e)
            if e < epochs:
                recs[e] += int(kv["records"])
                sums[e] = (sums[e] + int(kv["checksum"], 16)) % (1 << 64)
    if ended != list(range(epochs)):
        bad.append("consumer %d printed the ends of epochs %s, expected %s"
                   % (k, ended, list(range(epochs))))
for e in range(epochs):
    want = {"%d:%d:%d" % (e, s, q) for s in range(shards) for q in range(nb)}
    got = set(seen[e])
    dup = sorted((i, c) for i, c in seen[e].items() if len(c) > 1)
    if dup:
        bad.append("epoch %d: %d batches delivered more than once (id: consumers), e.g. %s"
                   % (e, len(dup), dup[:5]))
    if want - got:
        bad.append("epoch %d: %d of %d batches never delivered, e.g. %s"
                   % (e, len(want - got), len(want), sorted(want - got)[:5]))
    if got - want:
        bad.append("epoch %d: unexpected batches %s" % (e, sorted(got - want)[:5]))
    if recs[e] != shards * lines:
        bad.append("epoch %d: consumers got %d records, expected %d" % (e, recs[e], shards * lines))
    if "%016x" % sums[e] != want_sum:
        bad.append("epoch %d: consumers' checksums add up to %016x, expected %s"
                   % (e, sums[e], want_sum))
for b in bad:
    print("FAIL:", b)
if bad:
    sys.exit(1)
print("-- %d epochs x %d batches (%d records, checksum %s) exactly once over %d consumers"
      % (epochs, shards * nb, shards * lines, want_sum, len(files)))
EOF
        fail "delivery is not exactly once per epoch (above)"
    info=$("$BUILD/sluice-ctl" --redis "$CLUSTER_URL" info "$CJOB_Q" 2>&1) ||
        fail "sluice-ctl info $CJOB_Q: $info"
    note "$info"
    grep -qx "job: finished" <<<"$info" || fail "sluice-ctl info does not say 'job: finished'"
    grep -qx "tasks_done: $((CJOB_SHARDS * epochs))" <<<"$info" ||
        fail "sluice-ctl info: tasks_done is not $((CJOB_SHARDS * epochs))"
    grep -qx "tasks_failed: 0" <<<"$info" || fail "sluice-ctl info: a task failed"
    grep -qx "batches: 0" <<<"$info" || fail "sluice-ctl info: batches left in the queue"
}

# cjob_node_of_partition Q P: the port of the master serving partition P of Q.
cjob_node_of_partition() {
    local slot
    slot=$(cluster_slot_of "{$1#$2}") || fail "CLUSTER KEYSLOT {$1#$2} failed"
    cluster_node_of_slot "$slot" || fail "no master serves slot $slot ({$1#$2})"
}

# cjob_spread Q P: every partition's meta hash is on the master serving its
# slot, and the partitions are on at least 2 masters.
cjob_spread() {
    local q=$1 np=$2 p port map=() nodes
    for ((p = 0; p < np; p++)); do
        port=$(cjob_node_of_partition "$q" "$p")
        [[ $(cluster_cli "$port" EXISTS "sluice:{$q#$p}:meta") == 1 ]] ||
            fail "partition $p: no sluice:{$q#$p}:meta on $port, the master serving its slot"
        map+=("$p@$port")
    done
    nodes=$(printf '%s\n' "${map[@]}" | cut -d@ -f2 | sort -u | wc -l)
    note "partitions on masters: ${map[*]} ($nodes masters)"
    ((nodes >= 2)) || fail "all $np partitions of $q are on one master: ${map[*]}"
}

# cjob_no_errors: no producer's or consumer's stderr mentions an error.
cjob_no_errors() {
    local f
    for f in "$T"/p*.err "$T"/c*.err; do
        if grep -qi error "$f"; then
            fail "$(basename "$f" .err) printed an error: $(grep -i error "$f" | head -n 3)"
        fi
    done
}

# cjob_job NP SHARDS LINES BS EPOCHS [MAX_BATCHES]: the shards (cjob_data),
# queue $CJOB_Q of NP partitions (a budget of MAX_BATCHES, default 6,
# batches each) spread over >= 2 masters, and a job of EPOCHS epochs of
# BS records per batch submitted to it.
cjob_job() {
    local np=$1 out
    cjob_data "$2" "$3"
    out=$(ctl create "$CJOB_Q" --max-batches "${6:-6}" --max-bytes 16M --partitions "$np") ||
        fail "create --partitions $np: $out"
    cjob_spread "$CJOB_Q" "$np"
    out=$(ctl submit "$CJOB_Q" --manifest "$T/job.manifest" --epochs "$5" --batch-size "$4") ||
        fail "submit: $out"
    note "$out"
}

# cjob_busiest NP: sets CJOB_BUSY to the partition of $CJOB_Q whose slot
# holds the most keys now (batches stored, held, acknowledged ids), and
# CJOB_BUSY_KEYS to that count; FAILOVER_PARTITION=p picks partition p.
cjob_busiest() {
    local p port n
    CJOB_BUSY=-1 CJOB_BUSY_KEYS=-1
    for ((p = 0; p < $1; p++)); do
        port=$(cjob_node_of_partition "$CJOB_Q" "$p")
        n=$(cluster_cli "$port" CLUSTER COUNTKEYSINSLOT "$(cluster_slot_of "{$CJOB_Q#$p}")")
        if [[ -n ${FAILOVER_PARTITION:-} ]]; then
            ((p == FAILOVER_PARTITION)) && CJOB_BUSY=$p CJOB_BUSY_KEYS=$n
        elif ((n > CJOB_BUSY_KEYS)); then
            CJOB_BUSY=$p CJOB_BUSY_KEYS=$n
        fi
    done
    ((CJOB_BUSY >= 0)) ||
        fail "FAILOVER_PARTITION=$FAILOVER_PARTITION is not a partition (0..$(($1 - 1)))"
}
