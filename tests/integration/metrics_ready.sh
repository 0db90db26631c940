#!/usr/bin/env bash
# /readyz and /healthz of both metrics servers, as Redis and the queue come
# and go (docs/OBSERVE.md, "Liveness and readiness"):
#  - sluice-producer --metrics-addr and sluice-ctl metrics answer /readyz
#    200 "ready" while Redis answers and the queue exists;
#  - redis-server stopped (kill -9): both answer 503 with a one-line reason
#    naming Redis, while /healthz stays 200 "ok"; Redis back (its AOF keeps
#    the queue): 200 again;
#  - the queue deleted: sluice-ctl metrics answers 503 "... queue 'rq' does
#    not exist"; created anew: 200 again. (A producer stops when its queue
#    is deleted: the first thing it claims answers NOQUEUE.)
# Every change is waited for with a deadline.
# shellcheck source=tests/lib/integration.sh
. "$(dirname "$0")/../lib/integration.sh"
need_bin sluice-ctl sluice-producer

# http URL: "STATUS BODY" (the body's lines joined), "down" when nothing
# answers.
http() {
    "$PY" - "$1" <<'PYEOF'
import sys, urllib.error, urllib.request
try:
    with urllib.request.urlopen(sys.argv[1], timeout=3) as r:
        status, body = r.status, r.read().decode()
except urllib.error.HTTPError as e:
    status, body = e.code, e.read().decode()
except OSError:
    print("down")
    sys.exit(0)
print(status, body.strip().replace("\n", " | "))
PYEOF
}
# answers URL PATTERN: the answer of URL matches the extended regex.
answers() { [[ $(http "$1") =~ $2 ]]; }
# until_answers SECONDS URL PATTERN WHAT: waits, else fails saying WHAT.
until_answers() {
    wait_for "$1" answers "$2" "$3" || fail "$4: $2 answers '$(http "$2")'"
}

redis_tmp_start --appendonly yes --appendfsync always
q=rq
ctl create "$q" --max-batches 4 --max-bytes 1M >/dev/null
pport=$(redis_tmp_free_port)
bg "$T/p.out" "$T/p.err" "$BUILD/sluice-producer" --redis "$REDIS_URL" --queue "$q" \
    --id prod-r --follow --quiet --metrics-addr "127.0.0.1:$pport"
p=$BG_PID
cport=$(redis_tmp_free_port)
bg "$T/m.out" "$T/m.err" "$BUILD/sluice-ctl" --redis "$REDIS_URL" metrics "$q" \
    --addr "127.0.0.1:$cport" --interval-ms 200
m=$BG_PID
P=http://127.0.0.1:$pport C=http://127.0.0.1:$cport

note "ready while Redis answers and the queue exists"
until_answers 10 "$P/readyz" '^200 ready$' "producer not ready"
until_answers 10 "$C/readyz" '^200 ready$' "sluice-ctl metrics not ready"
[[ $(http "$P/nowhere") == "404 not found: try /metrics, /healthz or /readyz" ]] ||
    fail "404 does not list the endpoints: $(http "$P/nowhere")"

note "Redis stopped"
redis_tmp_kill9
until_answers 10 "$P/readyz" '^503 not ready: Redis: ' "producer /readyz with Redis down"
until_answers 10 "$C/readyz" "^503 not ready: reading queue 'rq' from Redis failed" \
    "sluice-ctl metrics /readyz with Redis down"
for u in "$P" "$C"; do
    [[ $(http "$u/healthz") == "200 ok" ]] || fail "$u/healthz with Redis down: $(http "$u/healthz")"
    # One line of reason, no more.
    [[ $(http "$u/readyz") != *" | "* ]] || fail "$u/readyz: more than one line: $(http "$u/readyz")"
done
kill -0 "$p" 2>/dev/null || fail "the producer exited with Redis down: $(cat "$T/p.err")"

note "Redis back"
redis_tmp_restart
# sluice-ctl metrics retries with a doubling pause (1, 2, 4 s ...).
until_answers 20 "$P/readyz" '^200 ready$' "producer /readyz after Redis came back"
until_answers 20 "$C/readyz" '^200 ready$' "sluice-ctl metrics /readyz after Redis came back"

note "the queue deleted, then created anew"
ctl delete "$q" >/dev/null
until_answers 20 "$C/readyz" "^503 not ready: queue 'rq' does not exist$" \
    "sluice-ctl metrics /readyz of a deleted queue"
[[ $(http "$C/healthz") == "200 ok" ]] || fail "/healthz of a deleted queue: $(http "$C/healthz")"
ctl create "$q" --max-batches 4 --max-bytes 1M >/dev/null
until_answers 40 "$C/readyz" '^200 ready$' "sluice-ctl metrics /readyz of the queue created anew"

kill -INT "$m"
rc=0; wait_pid "$m" 10 || rc=$?
((rc == 0)) || fail "sluice-ctl metrics exit $rc: $(cat "$T/m.err")"
echo "ok: /readyz follows Redis and the queue on both servers; /healthz stays 200"
