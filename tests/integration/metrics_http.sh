#!/usr/bin/env bash
# Metrics over HTTP, with real requests (Python's urllib):
#  1. sluice-producer --metrics-addr, blocked by backpressure (budget 4
#     batches, no consumer): /metrics is valid Prometheus text (every
#     sample `name{labels} value` inside its family, HELP and TYPE present),
#     batches and bytes pushed equal what Redis counted, the backpressure
#     seconds grow above 0, the queue's depth and budget are there;
#     /healthz answers 200 "ok", anything else 404. A taken port: exit 1,
#     one line; a bad address: exit 2 naming it.
#  2. The same producer in job mode (--follow), after the job finished:
#     batches pushed equal to the producer's and the queue's count in
#     Redis, tasks done = the job's tasks; SIGTERM stops it (exit 0) and
#     the port is closed.
#  3. sluice-ctl metrics with two running consumers: a line per consumer
#     for each of its counters (batches adding up to what was pushed,
#     blocked seconds > 0 while they wait for more), queue totals equal to
#     Redis; SIGINT: exit 0, port closed.
# shellcheck source=tests/lib/integration.sh
. "$(dirname "$0")/../lib/integration.sh"
need_bin sluice-ctl sluice-producer sluice-consume gen-tfrecord

# prom.py URL: fetches URL; for /metrics checks the exposition format and
# prints each sample as `name{k="v",...} value` (labels sorted), else
# prints the status and body. Exit 1 with the reason on malformed text.
cat >"$T/prom.py" <<'PYEOF'
import re, sys, urllib.error, urllib.request

url = sys.argv[1]
try:
    with urllib.request.urlopen(url, timeout=5) as r:
        status, ctype, body = r.status, r.headers.get("Content-Type", ""), r.read().decode()
except urllib.error.HTTPError as e:
    status, ctype, body = e.code, "", e.read().decode()
if not url.endswith("/metrics"):
    print(status, body.strip())
    sys.exit(0)

def bad(msg, line=""):
    print("malformed metrics: %s%s" % (msg, (": " + line) if line else ""), file=sys.stderr)
    sys.exit(1)

if status != 200:
    bad("status %d" % status)
if not ctype.startswith("text/plain; version=0.0.4"):
    bad("Content-Type %r" % ctype)
NAME = r"[a-zA-Z_:][a-zA-Z0-9_:]*"
LABEL = r'[a-zA-Z_][a-zA-Z0-9_]*="(?:[^"\\\n]|\\.)*"'
SAMPLE = re.compile(r"^(%s)(?:\{(%s(?:,%s)*)\})? (\S+)$" % (NAME, LABEL, LABEL))
helps, types, done, current, out = {}, {}, set(), None, []
for line in body.split("\n"):
    if not line:
        continue
    if line.startswith("# HELP "):
        name, _, text = line[7:].partition(" ")
        if not re.fullmatch(NAME, name) or not text:
            bad("HELP line", line)
        helps[name] = text
    elif line.startswith("# TYPE "):
        name, _, t = line[7:].partition(" ")
        if t not in ("counter", "gauge"):
            bad("TYPE", line)
        if name in types:
            bad("family declared twice", line)
        if current:
            done.add(current)
        types[name], current = t, name
    elif line.startswith("#"):
        continue
    else:
        m = SAMPLE.match(line)
        if not m:
            bad("sample line", line)
        name, labels, value = m.group(1), m.group(2) or "", m.group(3)
        if name != current:
            bad("sample outside its family (after the # TYPE of %s)" % current, line)
        if name not in helps:
            bad("no # HELP for %s" % name)
        try:
            v = float(value)
        except ValueError:
            bad("value", line)
        if types[name] == "counter" and (not name.endswith("_total") or v < 0):
            bad("counter", line)
        pairs = sorted(re.findall(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"', labels))
        lab = ",".join('%s="%s"' % p for p in pairs)
        out.append("%s{%s} %s" % (name, lab, int(v) if v == int(v) else repr(v)))
if not out:
    bad("no samples")
print("\n".join(out))
PYEOF

# scrape URL: the normalized samples, or fail.
scrape() { "$PY" "$T/prom.py" "$1" || fail "scrape of $1 failed"; }
# val TEXT PREFIX [SUBSTRING]: the value of the first sample line that
# starts with PREFIX (and contains SUBSTRING); empty when none.
val() {
    printf '%s\n' "$1" | awk -v p="$2" -v s="${3:-}" 'index($0, p) == 1 && (s == "" || index($0, s)) && !n++ { print $NF }'
}
# gt A B: A > B as numbers.
gt() { awk -v a="$1" -v b="$2" 'BEGIN { exit !(a + 0 > b + 0) }'; }
# wait_listen PORT: until something accepts on 127.0.0.1:PORT (5 s).
wait_listen() {
    for _ in $(seq 100); do
        (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null && return 0
        sleep 0.05
    done
    return 1
}
closed() { ! (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

redis_tmp_start

# --- 1. a producer blocked by backpressure ---------------------------------
note "producer, blocked by backpressure"
q=mq
gen "$T/in.tfrecord" 400 7 100 1000 >/dev/null
ctl create "$q" --max-batches 4 --max-bytes 64M >/dev/null
port=$(redis_tmp_free_port)
bg "$T/p.out" "$T/p.err" "$BUILD/sluice-producer" --redis "$REDIS_URL" --queue "$q" \
    --batch-size 10 --id prod-m --quiet --metrics-addr "127.0.0.1:$port" "$T/in.tfrecord"
p=$BG_PID
wait_listen "$port" || fail "producer does not listen on $port: $(cat "$T/p.err")"
# The wait for room happens inside the producer API, which publishes its
# blocked time every second; the endpoint reads it back within a second.
bp=0
for _ in $(seq 100); do
    m=$(scrape "http://127.0.0.1:$port/metrics")
    bp=$(val "$m" 'sluice_producer_backpressure_seconds_total{')
    gt "$bp" 0 && break
    kill -0 "$p" 2>/dev/null || fail "producer exited: $(cat "$T/p.err")"
    sleep 0.1
done
note "$(printf '%s\n' "$m" | head -n 20)"
gt "$bp" 0 || fail "backpressure seconds stayed $bp while the producer was blocked"
pushed=$(redis_tmp_cli HGET "sluice:{$q}:stats" pushed)
pbytes=$(redis_tmp_cli HGET "sluice:{$q}:stats" pushed_bytes)
[[ $pushed == 4 ]] || fail "Redis counted $pushed pushes, expected 4 (the budget)"
[[ $(val "$m" 'sluice_producer_batches_pushed_total{') == "$pushed" ]] ||
    fail "batches_pushed_total $(val "$m" 'sluice_producer_batches_pushed_total{') != Redis $pushed"
[[ $(val "$m" 'sluice_producer_bytes_pushed_total{') == "$pbytes" ]] ||
    fail "bytes_pushed_total $(val "$m" 'sluice_producer_bytes_pushed_total{') != Redis $pbytes"
[[ $(val "$m" 'sluice_producer_batches_pushed_total{' 'producer="prod-m"') == 4 ]] ||
    fail "no producer=\"prod-m\" label: $m"
[[ $(val "$m" 'sluice_producer_batches_pushed_total{' 'queue="mq"') == 4 ]] || fail "no queue label: $m"
[[ $(val "$m" 'sluice_queue_max_batches{') == 4 ]] || fail "sluice_queue_max_batches: $m"
depth=$(val "$m" 'sluice_queue_depth_batches{')
[[ $depth == "$(held "$q")" ]] ||
    fail "sluice_queue_depth_batches $depth != the batches held, $(held "$q")"
for name in reconnects_total tasks_done_total tasks_failed_total; do
    [[ $(val "$m" "sluice_producer_$name{") == 0 ]] || fail "sluice_producer_$name: $m"
done
[[ $(scrape "http://127.0.0.1:$port/healthz") == "200 ok" ]] || fail "/healthz: $(scrape "http://127.0.0.1:$port/healthz")"
[[ $(scrape "http://127.0.0.1:$port/other") == 404* ]] || fail "/other is not a 404"

# A port in use, and addresses that are not addresses.
rc=0
"$BUILD/sluice-producer" --redis "$REDIS_URL" --queue "$q" --batch-size 10 \
    --metrics-addr "127.0.0.1:$port" "$T/in.tfrecord" >"$T/dup.out" 2>"$T/dup.err" || rc=$?
((rc == 1)) || fail "second producer on a taken port: exit $rc, expected 1"
[[ $(wc -l <"$T/dup.err") == 1 ]] && grep -q "127.0.0.1:$port: the address is in use" "$T/dup.err" ||
    fail "port in use: $(cat "$T/dup.err")"
for bad in "127.0.0.1" "127.0.0.1:0" "127.0.0.1:70000" "localhost:http" "no-such-host.invalid:9100" ""; do
    rc=0
    "$BUILD/sluice-producer" --redis "$REDIS_URL" --queue "$q" --batch-size 10 \
        --metrics-addr "$bad" "$T/in.tfrecord" >/dev/null 2>"$T/bad.err" || rc=$?
    ((rc == 2)) || fail "--metrics-addr '$bad': exit $rc, expected 2"
    grep -qF -- "--metrics-addr" "$T/bad.err" || fail "--metrics-addr '$bad': $(cat "$T/bad.err")"
    [[ -z $bad ]] || grep -qF -- "'$bad'" "$T/bad.err" || fail "the error does not name '$bad': $(cat "$T/bad.err")"
done

# Drain; the producer ends, its server with it.
bg "$T/c.out" "$T/c.err" "$BUILD/sluice-consume" --redis "$REDIS_URL" --queue "$q" \
    --summary --quiet --timeout-ms 2000
c=$BG_PID
rc=0; wait_pid "$p" 60 || rc=$?
((rc == 0)) || fail "producer exit $rc: $(cat "$T/p.err")"
closed "$port" || fail "port $port still open after the producer exited"
rc=0; wait_pid "$c" 60 || rc=$?
((rc == 0)) || fail "consumer exit $rc: $(cat "$T/c.err")"

# --- 2. job mode: counters after the job finished ----------------------------
note "producer in job mode, after the job"
q=mjob
for i in 0 1 2; do
    gen "$T/s$i.tfrecord" 50 $((20 + i)) 10 200 >/dev/null
    echo "tfrecord s$i.tfrecord"
done >"$T/job.manifest"
ctl create "$q" --max-batches 8 --max-bytes 64M >/dev/null
ctl submit "$q" --manifest "$T/job.manifest" --epochs 2 --batch-size 10 >/dev/null
port=$(redis_tmp_free_port)
bg "$T/pj.out" "$T/pj.err" "$BUILD/sluice-producer" --redis "$REDIS_URL" --queue "$q" \
    --id prod-j --follow --quiet --metrics-addr "127.0.0.1:$port"
pj=$BG_PID
bg "$T/cj.out" "$T/cj.err" "$BUILD/sluice-consume" --redis "$REDIS_URL" --queue "$q" --summary --quiet
cj=$BG_PID
rc=0; wait_pid "$cj" 60 || rc=$?
((rc == 0)) || fail "job consumer exit $rc: $(cat "$T/cj.err")"
kill -0 "$pj" 2>/dev/null || fail "the --follow producer exited: $(cat "$T/pj.err")"
pushed=$(redis_tmp_cli HGET "sluice:{$q}:stats" pushed)
# The producer publishes pstats with its heartbeat (every second).
for _ in $(seq 50); do
    pstats=$(redis_tmp_cli HGET "sluice:{$q}:pstats:prod-j" batches)
    [[ $pstats == "$pushed" ]] && break
    sleep 0.1
done
m=$(scrape "http://127.0.0.1:$port/metrics")
note "job: Redis pushed=$pushed pstats batches=$pstats; metrics: $(val "$m" 'sluice_producer_batches_pushed_total{')"
[[ $pushed == 30 ]] || fail "Redis counted $pushed pushes, expected 30 (3 shards x 5 batches x 2 epochs)"
[[ $(val "$m" 'sluice_producer_batches_pushed_total{') == "$pushed" && $pstats == "$pushed" ]] ||
    fail "batches pushed: metrics $(val "$m" 'sluice_producer_batches_pushed_total{'), pstats $pstats, queue $pushed"
[[ $(val "$m" 'sluice_producer_tasks_done_total{') == 6 ]] ||
    fail "tasks_done_total $(val "$m" 'sluice_producer_tasks_done_total{'), expected 6"
[[ $(val "$m" 'sluice_producer_bytes_pushed_total{') == "$(redis_tmp_cli HGET "sluice:{$q}:stats" pushed_bytes)" ]] ||
    fail "bytes pushed differ from Redis"
kill -TERM "$pj"
rc=0; wait_pid "$pj" 10 || rc=$?
((rc == 0)) || fail "producer exit $rc on SIGTERM: $(cat "$T/pj.err")"
closed "$port" || fail "port $port still open after SIGTERM"

# --- 3. sluice-ctl metrics with two running consumers ---------------------------
note "sluice-ctl metrics"
q=mctl
ctl create "$q" --max-batches 16 --max-bytes 64M --lease-ms 1500 >/dev/null
port=$(redis_tmp_free_port)
bg "$T/m.out" "$T/m.err" "$BUILD/sluice-ctl" --redis "$REDIS_URL" metrics "$q" \
    --addr "127.0.0.1:$port" --interval-ms 200
mp=$BG_PID
wait_listen "$port" || fail "sluice-ctl metrics does not listen: $(cat "$T/m.err")"
for k in a b; do
    bg "$T/c$k.out" "$T/c$k.err" "$BUILD/sluice-consume" --redis "$REDIS_URL" --queue "$q" \
        --consumer-id "cons-$k" --summary --quiet --timeout-ms 30000
done
"$BUILD/sluice-producer" --redis "$REDIS_URL" --queue "$q" --batch-size 10 --quiet \
    "$T/in.tfrecord" || fail "producer of the ctl metrics part failed"
# Consumers publish their counters with each heartbeat (lease/3 = 0.5 s).
for _ in $(seq 100); do
    m=$(scrape "http://127.0.0.1:$port/metrics")
    a=$(val "$m" 'sluice_consumer_batches_total{' 'consumer="cons-a"')
    b=$(val "$m" 'sluice_consumer_batches_total{' 'consumer="cons-b"')
    ba=$(val "$m" 'sluice_consumer_blocked_seconds_total{' 'consumer="cons-a"')
    bb=$(val "$m" 'sluice_consumer_blocked_seconds_total{' 'consumer="cons-b"')
    [[ -n $a && -n $b ]] && (((a + b) == 40)) && gt "$ba" 0 && gt "$bb" 0 && break
    sleep 0.1
done
note "$(printf '%s\n' "$m" | grep -E 'consumer="cons-a"|sluice_queue_(pushed|acked)_total')"
[[ -n $a && -n $b ]] || fail "no sluice_consumer_batches_total line per consumer: $m"
(((a + b) == 40)) || fail "consumers' batches $a + $b != 40"
gt "$ba" 0 && gt "$bb" 0 || fail "blocked seconds of waiting consumers: $ba, $bb"
for k in a b; do
    [[ $(val "$m" 'sluice_consumer_alive{' "consumer=\"cons-$k\"") == 1 ]] || fail "cons-$k not alive: $m"
    for name in records_total bytes_total redelivered_total duplicates_total invalid_total epoch pending_batches; do
        [[ -n $(val "$m" "sluice_consumer_$name{" "consumer=\"cons-$k\"") ]] ||
            fail "no sluice_consumer_$name for cons-$k"
    done
done
for f in pushed acked pushed_bytes acked_bytes; do
    [[ $(val "$m" "sluice_queue_${f}_total{") == "$(redis_tmp_cli HGET "sluice:{$q}:stats" "$f")" ]] ||
        fail "sluice_queue_${f}_total $(val "$m" "sluice_queue_${f}_total{") != Redis"
done
[[ $(val "$m" 'sluice_up{') == 1 && $(val "$m" 'sluice_queue_max_batches{') == 16 ]] || fail "queue gauges: $m"
[[ $(val "$m" 'sluice_queue_depth_batches{') == 0 ]] || fail "depth $(val "$m" 'sluice_queue_depth_batches{') after everything was acked"
[[ $(val "$m" 'sluice_epoch_pushed_total{' 'epoch="0"') == 40 ]] || fail "per-epoch pushed: $m"
[[ $(scrape "http://127.0.0.1:$port/healthz") == "200 ok" ]] || fail "ctl /healthz"

# Errors: a missing queue (exit 1), a taken port (exit 1), a bad address (2).
rc=0; ctl metrics nosuch --addr "127.0.0.1:$(redis_tmp_free_port)" 2>"$T/e.err" || rc=$?
((rc == 1)) && grep -q "does not exist" "$T/e.err" || fail "metrics of a missing queue: exit $rc: $(cat "$T/e.err")"
rc=0; ctl metrics "$q" --addr "127.0.0.1:$port" 2>"$T/e.err" || rc=$?
((rc == 1)) && grep -q "in use" "$T/e.err" || fail "metrics on a taken port: exit $rc: $(cat "$T/e.err")"
rc=0; ctl metrics "$q" --addr "127.0.0.1:x" 2>"$T/e.err" || rc=$?
((rc == 2)) && grep -qF "'127.0.0.1:x'" "$T/e.err" || fail "metrics --addr 127.0.0.1:x: exit $rc: $(cat "$T/e.err")"
rc=0; ctl metrics "$q" 2>"$T/e.err" || rc=$?
((rc == 2)) || fail "metrics without --addr: exit $rc"

kill -INT "$mp"
rc=0; wait_pid "$mp" 10 || rc=$?
((rc == 0)) || fail "sluice-ctl metrics exit $rc on SIGINT: $(cat "$T/m.err")"
closed "$port" || fail "port $port still open after sluice-ctl metrics exited"
echo "ok: producer metrics (blocked ${bp} s, job counters), sluice-ctl metrics with 2 consumers"
