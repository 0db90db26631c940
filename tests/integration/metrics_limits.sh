#!/usr/bin/env bash
# The metrics endpoint cannot take file descriptors or CPU from the data
# path. sluice-producer runs a job of 8 shards at `ulimit -n 256` with
# --metrics-addr, held by backpressure (budget 4 batches) while 400 clients
# connect to its metrics port: 300 that send nothing and 100 that send
# their request one byte per second. Meanwhile:
#   - the producer keeps well under its fd limit, and its CPU stays low
#     (no accept loop spinning on EMFILE);
#   - it holds at most 32 of those connections; the others get a 503 at
#     once; each one it holds is closed about 10 s after it was accepted,
#     the byte-per-second ones too;
#   - a fresh client gets /metrics (200) once the held ones are gone;
#   - the job then delivers every record (the consumer's count and
#     checksum), no task fails, nothing says "Too many open files".
# Also: headers over 8 KiB get 431, a POST 405, HEAD 200 without a body,
# and `:PORT` listens on 127.0.0.1 only.
# shellcheck source=tests/lib/integration.sh
. "$(dirname "$0")/../lib/integration.sh"
need_bin sluice-ctl sluice-producer sluice-consume gen-tfrecord

IDLE=300
SLOW=100
MAX_CONNS=32
TIMEOUT_S=10

# http.py HOST PORT RAW: sends RAW (Python escapes) and prints the status
# line and the body length, or "closed" when the server closed at once,
# "reset" when it reset the connection.
cat >"$T/http.py" <<'PYEOF'
import socket, sys
host, port, raw = sys.argv[1], int(sys.argv[2]), sys.argv[3].encode().decode("unicode_escape")
s = socket.create_connection((host, port), timeout=5)
s.sendall(raw.encode("latin-1"))
data = b""
while True:
    try:
        chunk = s.recv(65536)
    except ConnectionResetError:
        print("reset")
        sys.exit(0)
    if not chunk:
        break
    data += chunk
if not data:
    print("closed")
    sys.exit(0)
head, _, body = data.partition(b"\r\n\r\n")
print(head.split(b"\r\n")[0].decode(), len(body))
PYEOF

# hold.py PORT IDLE SLOW STOPFILE OUT: opens IDLE connections that send
# nothing and SLOW that send a request a byte a second, then watches them
# until STOPFILE exists. Writes to OUT one line per connection the server
# closed: "idle|slow SECONDS-OPEN STATUS" (STATUS: the status code it
# answered with, "-" for none, "reset", "connect-failed" when the connect
# did not complete within 2 s), then "open N" for those still open.
cat >"$T/hold.py" <<'PYEOF'
import os, select, socket, sys, time
port, nidle, nslow = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
stop, out = sys.argv[4], sys.argv[5]
req = b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n"
conns = {}
done = []
for i in range(nidle + nslow):
    # Every fourth one is slow while there are slow ones to open.
    kind = "slow" if (i % 4 == 3 and nslow > 0) or nidle == 0 else "idle"
    if kind == "slow":
        nslow -= 1
    else:
        nidle -= 1
    try:
        s = socket.create_connection(("127.0.0.1", port), timeout=2)
    except OSError:
        done.append("%s 0 connect-failed" % kind)
        continue
    s.setblocking(False)
    conns[s] = [kind, time.monotonic(), 0, b""]
print("connected %d" % len(conns), file=sys.stderr, flush=True)
last_tick = 0.0
while conns and not os.path.exists(stop):
    r, _, _ = select.select(list(conns), [], [], 0.1)
    for s in r:
        kind, t0, sent, got = conns[s]
        reset = False
        try:
            chunk = s.recv(4096)
        except BlockingIOError:
            continue
        except ConnectionResetError:
            chunk, reset = b"", True
        if chunk:
            conns[s][3] += chunk
            continue
        status = got.split(b" ")[1].decode() if got.startswith(b"HTTP/") else "-"
        if reset and status == "-":
            status = "reset"
        done.append("%s %.2f %s" % (kind, time.monotonic() - t0, status))
        del conns[s]
        s.close()
    now = time.monotonic()
    if now - last_tick >= 1.0:
        last_tick = now
        for s, c in list(conns.items()):
            if c[0] == "slow" and c[2] < len(req):
                try:
                    s.send(req[c[2]:c[2] + 1])
                    c[2] += 1
                except OSError:
                    pass
    with open(out + ".tmp", "w") as f:
        f.write("\n".join(done + ["open %d" % len(conns)]) + "\n")
    os.replace(out + ".tmp", out)
PYEOF

fds() { find "/proc/$1/fd" -mindepth 1 -maxdepth 1 2>/dev/null | wc -l; }

redis_tmp_start
q=mlim
: >"$T/job.manifest"
sums=()
for i in $(seq 0 7); do
    out=$(gen "$T/s$i.tfrecord" 200 $((40 + i)) 100 2000)
    sums+=("$(kv checksum "$out")")
    echo "tfrecord s$i.tfrecord" >>"$T/job.manifest"
done
want_sum=$(hexsum "${sums[@]}")
ctl create "$q" --max-batches 4 --max-bytes 64M >/dev/null
ctl submit "$q" --manifest "$T/job.manifest" --epochs 1 --batch-size 20 >/dev/null

port=$(redis_tmp_free_port)
bg "$T/p.out" "$T/p.err" bash -c 'ulimit -n 256 && exec "$@"' _ "$BUILD/sluice-producer" \
    --redis "$REDIS_URL" --queue "$q" --id prod-l --metrics-addr ":$port"
p=$BG_PID
wait_for 10 "$PY" "$T/http.py" 127.0.0.1 "$port" 'GET /healthz HTTP/1.0\r\n\r\n' >/dev/null ||
    fail "the producer does not serve on 127.0.0.1:$port: $(cat "$T/p.err")"
[[ $(awk '/^Max open files/ { print $4 }' "/proc/$p/limits") == 256 ]] ||
    fail "the producer does not run at ulimit -n 256: $(grep 'open files' "/proc/$p/limits")"
# `:PORT` is loopback only: not reachable on another address of the host.
other=$(hostname -I 2>/dev/null | awk '{ print $1 }')
if [[ -n $other && $other != 127.* ]]; then
    ! "$PY" "$T/http.py" "$other" "$port" 'GET /healthz HTTP/1.0\r\n\r\n' >/dev/null 2>&1 ||
        fail ":$port is reachable on $other, not only on loopback"
else
    note "no non-loopback address to check the bind against"
fi
if command -v ss >/dev/null; then
    [[ $(ss -Hltn "sport = :$port" | awk '{ print $4 }') == "127.0.0.1:$port" ]] ||
        fail "not listening on 127.0.0.1:$port alone: $(ss -Hltn "sport = :$port")"
fi

# The small limits, on a fresh server.
r=$("$PY" "$T/http.py" 127.0.0.1 "$port" 'HEAD /metrics HTTP/1.1\r\nHost: x\r\n\r\n')
[[ $r == "HTTP/1.1 200 OK 0" ]] || fail "HEAD /metrics: $r"
r=$("$PY" "$T/http.py" 127.0.0.1 "$port" 'POST /metrics HTTP/1.1\r\nContent-Length: 0\r\n\r\n')
[[ $r == "HTTP/1.1 405 "* ]] || fail "POST /metrics: $r"
big=$(printf 'x%.0s' $(seq 9000))
r=$("$PY" "$T/http.py" 127.0.0.1 "$port" "GET /metrics HTTP/1.1\\r\\nX-Big: $big\\r\\n\\r\\n")
[[ $r == "HTTP/1.1 431 "* ]] || fail "9000 bytes of headers: $r"
r=$("$PY" "$T/http.py" 127.0.0.1 "$port" 'GARBAGE\r\n\r\n')
[[ $r == "HTTP/1.1 400 "* ]] || fail "a malformed request line: $r"

# The producer is held by backpressure: 4 batches stored, nothing reads.
wait_for 20 held_is "$q" 4 || fail "the producer did not fill the budget: $(cat "$T/p.err")"

# --- 400 clients -------------------------------------------------------------
bg "$T/hold.out" "$T/hold.err" "$PY" "$T/hold.py" "$port" "$IDLE" "$SLOW" "$T/stop" "$T/held"
h=$BG_PID
wait_for 20 in_file "$T/hold.err" "connected" ||
    fail "the clients did not connect: $(cat "$T/hold.err")"
t0=$(cpu_ticks "$p")
max_fds=0
for _ in $(seq 30); do
    n=$(fds "$p")
    ((n > max_fds)) && max_fds=$n
    sleep 0.1
done
t1=$(cpu_ticks "$p")
note "held: producer at $max_fds fds, $((t1 - t0)) CPU ticks in 3 s; $(tail -n 1 "$T/held")"
((max_fds < 100)) || fail "the producer holds $max_fds file descriptors (limit 256)"
((t1 - t0 < 60)) || fail "the producer used $((t1 - t0)) ticks of CPU in 3 s while clients idled"
refused=$(grep -c ' 503$\| 0\.[0-9]* reset$' "$T/held" || true)
((refused >= IDLE + SLOW - MAX_CONNS)) ||
    fail "only $refused of $((IDLE + SLOW)) connections refused at once (at most $MAX_CONNS held)"
# A fresh client, at once: refused while every slot is held (503, or a
# reset when its request crossed the refusal), never left hanging.
r=$("$PY" "$T/http.py" 127.0.0.1 "$port" 'GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n')
[[ $r == "HTTP/1.1 503 "* || $r == reset || $r == "HTTP/1.1 200 OK "* ]] ||
    fail "a fresh client: $r"
# Those held are closed after about TIMEOUT_S, even while they trickle bytes.
wait_for 20 in_file "$T/held" "^open 0$" ||
    fail "the server still holds connections 20 s later: $(tail -n 1 "$T/held")"
touch "$T/stop"
held=$(grep -v '^open' "$T/held" | awk '$3 != 503 && !($3 == "reset" && $2 < 1)')
kinds=$(awk '{ print $1 }' <<<"$held" | sort | uniq -c | tr '\n' ' ')
note "closed by timeout: $(wc -l <<<"$held") ($kinds)"
while read -r kind secs status; do
    awk -v s="$secs" -v t="$TIMEOUT_S" 'BEGIN { exit !(s >= t - 1 && s <= t + 3) }' ||
        fail "a held $kind connection was closed after $secs s (status $status), not ~$TIMEOUT_S s"
done <<<"$held"
slow_held=$(grep -c '^slow' <<<"$held" || true)
note "byte-per-second clients held and cut off: $slow_held"
r=$("$PY" "$T/http.py" 127.0.0.1 "$port" 'GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n')
[[ $r == "HTTP/1.1 200 OK "* ]] || fail "a fresh client after the timeouts: $r"
wait_pid "$h" 10 >/dev/null || true

# --- the job ------------------------------------------------------------------
"$BUILD/sluice-consume" --redis "$REDIS_URL" --queue "$q" --summary --quiet \
    >"$T/c.out" 2>"$T/c.err" || fail "consumer: $(cat "$T/c.err")"
rc=0; wait_pid "$p" 60 || rc=$?
((rc == 0)) || fail "producer exit $rc: $(tail -n 5 "$T/p.err")"
! grep -qi "too many open files" "$T/p.err" "$T/c.err" || fail "out of fds: $(cat "$T/p.err")"
recs=$(kv records "$(cat "$T/c.out")")
sum=$(kv checksum "$(cat "$T/c.out")")
((recs == 1600)) && [[ $sum == "$want_sum" ]] ||
    fail "the consumer got $recs records, checksum $sum; expected 1600, $want_sum"
failed=$(rcli LLEN "sluice:{$q}:failed")
((failed == 0)) || fail "$failed tasks failed: $(rcli LRANGE "sluice:{$q}:failed" 0 -1)"
echo "ok: $((IDLE + SLOW)) clients on the metrics port, producer at $max_fds fds and" \
    "$((t1 - t0)) ticks per 3 s; every record delivered"
