#!/usr/bin/env bash
# tests/tools/delay-proxy, the bench's network latency: bytes go through it
# exactly, both ways, at delay 0 and 5 ms; a PING's round trip at 20 ms
# takes 40 ms and not much more; an end of stream is passed on after the
# queued bytes, itself delayed; an upstream that does not read stalls the
# client, not the proxy's memory; a client whose upstream refuses is closed
# with one line on stderr while the proxy goes on; bad arguments exit 2
# naming the argument; SIGTERM and SIGINT end it with 0.
# shellcheck source=tests/lib/integration.sh
. "$(dirname "$0")/../lib/integration.sh"
need_bin delay-proxy

redis_tmp_start

# proxy NAME UPSTREAM_PORT DELAY_US: starts a proxy in the background; sets
# PROXY_PID and PROXY_PORT (checked: the port file and the stdout line agree).
proxy() {
    local name=$1 line
    bg "$T/$name.out" "$T/$name.err" "$BUILD/delay-proxy" --listen 127.0.0.1:0 \
        --to "127.0.0.1:$2" --delay-us "$3" --port-file "$T/$name.port"
    PROXY_PID=$BG_PID
    wait_for 10 in_file "$T/$name.out" '^listening ' ||
        fail "$name: no 'listening' line: $(cat "$T/$name.err")"
    line=$(<"$T/$name.out")
    [[ $line =~ ^listening\ ([0-9]+)$ ]] ||
        fail "$name: stdout is not one 'listening PORT': '$line'"
    PROXY_PORT=${BASH_REMATCH[1]}
    [[ $(<"$T/$name.port") == "$PROXY_PORT" ]] ||
        fail "$name: port file has '$(<"$T/$name.port")', stdout $PROXY_PORT"
}

# stop PID SIGNAL NAME: the proxy must exit 0 on SIGNAL, within 5 s.
stop() {
    local rc=0
    kill "-$2" "$1"
    wait_pid "$1" 5 || rc=$?
    ((rc == 0)) || fail "$3: exit $rc after SIG$2, expected 0; stderr: $(cat "$T/$3.err")"
}

# (1) A random 3 MiB value, SET through the proxy and read back through it
# and directly: byte-exact both ways.
size=$((3 << 20))
head -c "$size" /dev/urandom >"$T/value"
want=$(sha256sum <"$T/value" | cut -d' ' -f1)
for delay in 0 5000; do
    proxy "p$delay" "$REDIS_PORT" "$delay"
    reply=$(redis-cli -h 127.0.0.1 -p "$PROXY_PORT" -x SET "k$delay" <"$T/value")
    [[ $reply == OK ]] || fail "delay $delay: SET through the proxy answered '$reply'"
    for via in proxy direct; do
        port=$PROXY_PORT
        [[ $via == direct ]] && port=$REDIS_PORT
        # --raw ends the value with a newline of its own.
        redis-cli -h 127.0.0.1 -p "$port" --raw GET "k$delay" >"$T/got"
        got_size=$(stat -c %s "$T/got")
        ((got_size == size + 1)) || fail "delay $delay, GET $via: $got_size bytes, expected $size"
        got=$(head -c "$size" "$T/got" | sha256sum | cut -d' ' -f1)
        [[ $got == "$want" ]] || fail "delay $delay, GET $via: the value differs from what was SET"
    done
    stop "$PROXY_PID" TERM "p$delay"
    note "delay $delay µs: 3 MiB SET and GET through the proxy are byte-exact"
done

# (2) Round trip at D = 20 ms: the median of 20 PINGs is 2D and a bit.
proxy p20ms "$REDIS_PORT" 20000
median=$("$PY" - "$PROXY_PORT" <<'EOF'
import socket, sys, time
s = socket.create_connection(("127.0.0.1", int(sys.argv[1])), timeout=10)
s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
times = []
for _ in range(20):
    t = time.monotonic()
    s.sendall(b"PING\r\n")
    got = b""
    while not got.endswith(b"\r\n"):
        part = s.recv(64)
        if not part:
            sys.exit("the proxy closed the connection")
        got += part
    times.append((time.monotonic() - t) * 1000)
    if got != b"+PONG\r\n":
        sys.exit("PING answered %r" % got)
s.close()
times.sort()
print("%.3f" % ((times[9] + times[10]) / 2))
EOF
) || fail "the PING client failed: $median"
awk -v m="$median" 'BEGIN { exit !(m >= 39.5 && m <= 70) }' ||
    fail "median PING round trip at 20 ms one way: $median ms, expected 39.5 to 70"
note "delay 20 ms: median PING round trip $median ms"
stop "$PROXY_PID" INT p20ms

# (3) Half-close: the client sends 1 MiB and shuts down its writing half;
# the upstream echoes and closes when it sees the end. The client gets all
# of it back, then the end, no sooner than both delays after its shutdown.
echo_port=$(redis_tmp_free_port)
bg "$T/echo.out" "$T/echo.err" "$PY" -c '
import socket, sys
ls = socket.socket()
ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
ls.bind(("127.0.0.1", int(sys.argv[1])))
ls.listen(4)
print("ready", flush=True)
while True:
    c, _ = ls.accept()
    while True:
        data = c.recv(1 << 16)
        if not data:
            break
        c.sendall(data)
    c.close()
' "$echo_port"
wait_for 10 in_file "$T/echo.out" ready ||
    fail "the echo server did not start: $(cat "$T/echo.err")"
proxy phalf "$echo_port" 5000
out=$("$PY" - "$PROXY_PORT" <<'EOF'
import os, socket, sys, threading, time
s = socket.create_connection(("127.0.0.1", int(sys.argv[1])), timeout=10)
data = os.urandom(1 << 20)
got = []
def read():
    while True:
        part = s.recv(1 << 16)
        if not part:
            break
        got.append(part)
reader = threading.Thread(target=read)
reader.start()
s.sendall(data)
t = time.monotonic()
s.shutdown(socket.SHUT_WR)
reader.join()
ms = (time.monotonic() - t) * 1000
back = b"".join(got)
if back != data:
    sys.exit("echoed %d bytes, sent %d, equal: %s" % (len(back), len(data), back == data))
print("%.1f" % ms)
EOF
) || fail "half-close through the proxy: $out"
awk -v m="$out" 'BEGIN { exit !(m >= 9.9) }' ||
    fail "the end of stream came back $out ms after the shutdown, expected at least 10 ms"
note "half-close: 1 MiB echoed, the end came back $out ms after the shutdown"
stop "$PROXY_PID" TERM phalf

# (4) Bounded memory: an upstream that reads nothing stalls the client once
# the proxy holds its 64 MiB (plus what the kernel buffers); the proxy's
# memory stays near that. Then upstream reads: all of it arrives, exact.
up_port=$(redis_tmp_free_port)
proxy pfull "$up_port" 1000
out=$("$PY" - "$up_port" "$PROXY_PORT" "$PROXY_PID" <<'EOF'
import hashlib, os, socket, sys, time
up_port, port, pid = (int(a) for a in sys.argv[1:])
ls = socket.socket()
ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
ls.bind(("127.0.0.1", up_port))
ls.listen(1)
c = socket.create_connection(("127.0.0.1", port), timeout=10)
ls.settimeout(10)
up, _ = ls.accept()
c.setblocking(False)
block = os.urandom(1 << 20)
sent, h, last = 0, hashlib.sha256(), time.monotonic()
while time.monotonic() - last < 0.5:
    if sent > 512 << 20:
        sys.exit("sent %d MiB and the proxy still reads" % (sent >> 20))
    try:
        n = c.send(block[sent % len(block):])
    except BlockingIOError:
        time.sleep(0.01)
        continue
    h.update(block[sent % len(block):][:n])
    sent += n
    last = time.monotonic()
rss = int([l for l in open("/proc/%d/status" % pid) if l.startswith("VmRSS")][0].split()[1])
if rss > 128 << 10:
    sys.exit("the proxy holds %d MiB (VmRSS) with %d MiB sent" % (rss >> 10, sent >> 20))
c.setblocking(True)
c.shutdown(socket.SHUT_WR)
g, got = hashlib.sha256(), 0
up.settimeout(10)
while True:
    data = up.recv(1 << 20)
    if not data:
        break
    g.update(data)
    got += len(data)
if got != sent or g.digest() != h.digest():
    sys.exit("upstream got %d bytes of %d, equal: %s" % (got, sent, g.digest() == h.digest()))
print("stalled at %d MiB sent, proxy VmRSS %d MiB, all delivered" % (sent >> 20, rss >> 10))
EOF
) || fail "backpressure: $out"
note "backpressure: $out"
stop "$PROXY_PID" TERM pfull

# (5) An upstream that refuses: the client is closed, one line on stderr
# per client, and the proxy goes on accepting.
closed_port=$(redis_tmp_free_port)
proxy prefused "$closed_port" 1000
err_lines() { [[ $(grep -c . "$T/prefused.err" || true) == "$1" ]]; }
for i in 1 2; do
    "$PY" - "$PROXY_PORT" <<'EOF' || fail "refused upstream, client $i was not closed"
import socket, sys
s = socket.create_connection(("127.0.0.1", int(sys.argv[1])), timeout=5)
try:
    s.sendall(b"PING\r\n")
    got = s.recv(64)
except (BrokenPipeError, ConnectionResetError):
    got = b""  # closed with the PING unread: a reset rather than an end
sys.exit(0 if got == b"" else "got %r" % got)
EOF
    wait_for 5 err_lines "$i" ||
        fail "refused upstream, client $i: stderr is not $i line(s): $(cat "$T/prefused.err")"
done
grep -q "cannot connect to 127.0.0.1:$closed_port" "$T/prefused.err" ||
    fail "the refused connect is not named: $(cat "$T/prefused.err")"
kill -0 "$PROXY_PID" 2>/dev/null || fail "the proxy exited after an upstream refused"
stop "$PROXY_PID" TERM prefused
note "refused upstream: $(head -n 1 "$T/prefused.err")"

# (6) Bad arguments: exit 2, and the message names the argument.
failures=0
bad() {
    local name=$1 rc=0
    shift
    timeout 10 "$BUILD/delay-proxy" "$@" >"$T/bad.out" 2>"$T/bad.err" </dev/null || rc=$?
    if ((rc != 2)); then
        echo "FAIL [$*]: exit $rc, expected 2"
        failures=$((failures + 1))
    elif ! grep -qF -- "$name" "$T/bad.err"; then
        echo "FAIL [$*]: the message does not name $name: $(cat "$T/bad.err")"
        failures=$((failures + 1))
    else
        echo "ok   [$*] -> 2: $(head -n 1 "$T/bad.err")"
    fi
}
L=(--listen 127.0.0.1:0)
TO=(--to "127.0.0.1:$REDIS_PORT")
bad --listen
bad --listen "${TO[@]}" --delay-us 0
bad --to "${L[@]}" --delay-us 0
bad --delay-us "${L[@]}" "${TO[@]}"
bad --delay-us "${L[@]}" "${TO[@]}" --delay-us abc
bad --delay-us "${L[@]}" "${TO[@]}" --delay-us -5
bad --delay-us "${L[@]}" "${TO[@]}" --delay-us 10000001
bad --delay-us "${L[@]}" "${TO[@]}" --delay-us 12ms
bad --listen --listen nocolon "${TO[@]}" --delay-us 0
bad --listen --listen 127.0.0.1:65536 "${TO[@]}" --delay-us 0
bad --to "${L[@]}" --to 127.0.0.1:0 --delay-us 0
bad --to "${L[@]}" --to '[]:6379' --delay-us 0
bad --to "${L[@]}" --to 127.0.0.1: --delay-us 0
bad --to "${L[@]}" --to 127.0.0.1:6x --delay-us 0
bad --bogus "${L[@]}" "${TO[@]}" --delay-us 0 --bogus
bad --delay-us "${L[@]}" "${TO[@]}" --delay-us
((failures == 0)) || fail "$failures bad-argument case(s)"
"$BUILD/delay-proxy" --help >"$T/help" || fail "--help exited non-zero"
grep -q -- '--delay-us' "$T/help" || fail "--help does not show the usage: $(cat "$T/help")"

echo "ok: byte-exact at 0 and 5 ms, PING round trip $median ms at 20 ms one way," \
    "half-close delayed, memory bounded, refused upstream survived, bad arguments exit 2"
