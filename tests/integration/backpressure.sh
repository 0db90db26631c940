#!/usr/bin/env bash
# Bounded memory: with --max-batches 4 and no consumer, a producer with 40
# batches to push never has more than 4 in Redis, waits without burning CPU,
# resumes quickly when a consumer frees room, and in the end everything
# arrives.
# shellcheck source=tests/lib/integration.sh
. "$(dirname "$0")/../lib/integration.sh"
need_bin sluice-ctl sluice-producer sluice-consume gen-tfrecord

redis_tmp_start
q=bp
line=$(gen "$T/in.tfrecord" 400 7 100 1000)
gen_sum=$(kv checksum "$line")
ctl create "$q" --max-batches 4 --max-bytes 64M >/dev/null

bg "$T/p.out" "$T/p.err" "$BUILD/sluice-producer" --redis "$REDIS_URL" --queue "$q" \
    --format tfrecord --batch-size 10 --summary --quiet "$T/in.tfrecord"
p=$BG_PID

# Let it fill the budget.
for ((i = 0; i < 100; i++)); do
    [[ $(held "$q") == 4 ]] && break
    kill -0 "$p" 2>/dev/null || fail "producer exited while the queue was full: $(cat "$T/p.err")"
    sleep 0.05
done
[[ $(held "$q") == 4 ]] || fail "queue never reached its budget of 4 batches"

# Never above the budget, and the producer is idle while it waits.
hz=$(getconf CLK_TCK)
t0=$(cpu_ticks "$p") || fail "producer gone: $(cat "$T/p.err")"
max=0
for ((i = 0; i < 15; i++)); do
    n=$(held "$q")
    b=$(info_field "$q" batches)
    (( n > max )) && max=$n
    (( b > max )) && max=$b
    sleep 0.2
done
t1=$(cpu_ticks "$p") || fail "producer exited while the queue was full: $(cat "$T/p.err")"
note "max batches seen: $max; producer CPU while blocked: $((t1 - t0)) ticks in 3 s (CLK_TCK=$hz)"
(( max <= 4 )) || fail "queue held $max batches, budget is 4"
# < 2% of one core over 3 s.
(( (t1 - t0) * 100 < 2 * 3 * hz )) ||
    fail "blocked producer used $((t1 - t0)) ticks of CPU in 3 s (>= 2% of a core): busy loop?"
pushed=$(info_field "$q" pushed)
[[ $pushed == 4 ]] || fail "info pushed: $pushed while blocked, expected 4"

# Resume latency: one consumer takes and acks a single batch; time from the
# ack to the producer's next push (a wake-up, not a 1 s poll).
probe=$("$PY" - "$REDIS_PORT" "$q" "$BUILD/sluice-consume" "$REDIS_URL" <<'PYEOF'
import subprocess, sys, time
import redis
port, q, consume, url = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4]
r = redis.Redis(host="127.0.0.1", port=int(port))
stats = "sluice:{%s}:stats" % q
def counters():
    a, p = r.hmget(stats, "acked", "pushed")
    return int(a or 0), int(p or 0)
a0, p0 = counters()
c = subprocess.Popen([consume, "--redis", url, "--queue", q, "--count", "1",
                      "--prefetch", "1", "--quiet", "--summary"],
                     stdout=subprocess.PIPE, text=True)
t_ack = t_push = None
deadline = time.monotonic() + 10
while time.monotonic() < deadline and t_push is None:
    a, p = counters()
    now = time.monotonic()
    if a > a0 and t_ack is None:
        t_ack = now
    if p > p0 and t_ack is not None:
        t_push = now
    time.sleep(0.0005)
out = c.communicate()[0].strip()
print(-1 if t_push is None else int((t_push - t_ack) * 1000), out)
PYEOF
)
lat=${probe%% *}
probe_line=${probe#* }
note "probe consumer: $probe_line"
[[ $(kv records "$probe_line") == 10 ]] || fail "probe consumer (--count 1): $probe_line"
note "resume latency (ack -> next push): ${lat} ms"
(( lat >= 0 )) || fail "producer did not push again within 10 s of an ack"
(( lat < 500 )) || fail "producer took ${lat} ms to resume after an ack (no wake-up signal?)"

# Now drain: everything arrives, the producer finishes.
bg "$T/c.out" "$T/c.err" "$BUILD/sluice-consume" --redis "$REDIS_URL" --queue "$q" \
    --summary --quiet --timeout-ms 3000
c=$BG_PID
rc=0; wait_pid "$p" 60 || rc=$?
((rc == 0)) || fail "producer exit $rc: $(cat "$T/p.err")"
rc=0; wait_pid "$c" 60 || rc=$?
((rc == 0)) || fail "consumer exit $rc: $(cat "$T/c.err")"
pline=$(cat "$T/p.out"); cline=$(cat "$T/c.out")
note "producer: $pline"; note "consumer: $cline"
[[ $(kv records "$pline") == 400 && $(kv batches "$pline") == 40 ]] || fail "producer: $pline"
# The latency probe consumed one batch (10 records) of its own.
[[ $(kv records "$cline") == 390 ]] || fail "consumer got $(kv records "$cline") records, expected 390 (+10 by the probe)"
[[ $(kv checksum "$pline") == "$gen_sum" ]] || fail "producer checksum $(kv checksum "$pline") != $gen_sum"
csum=$(hexsum "$(kv checksum "$cline")" "$(kv checksum "$probe_line")")
[[ $csum == "$gen_sum" ]] || fail "consumers' checksums add up to $csum, expected $gen_sum"
[[ $(info_field "$q" acked) == 40 ]] || fail "acked: $(info_field "$q" acked), expected 40"
[[ $(info_field "$q" batches) == 0 ]] || fail "batches left: $(info_field "$q" batches)"
echo "ok: max 4 batches held, idle while blocked ($((t1 - t0)) ticks/3 s), resume ${lat} ms"
