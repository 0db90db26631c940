# Private, throw-away redis-server instances for tests and the demo.
# Source this file from bash; it defines functions only.
#
#   . scripts/redis-tmp.sh
#   trap redis_tmp_cleanup_all EXIT
#   redis_tmp_start                       # or: redis_tmp_start --appendonly yes
#   echo "$REDIS_URL"                     # redis://127.0.0.1:<port>
#   redis_tmp_cli DBSIZE                  # redis-cli against the current server
#   redis_tmp_restart                     # kill -9, start again: same port, dir, args
#   redis_tmp_stop                        # stop it and remove its dir
#
# Each start picks a free loopback port, makes a fresh `mktemp -d` dir and
# runs `redis-server --daemonize no` in the background with `--save ''
# --appendonly no` (later arguments override). It sets REDIS_PORT, REDIS_PID,
# REDIS_DIR and REDIS_URL to the new server ("the current server"). Several
# servers may run at once: copy those variables after each start, and pass
# the port to redis_tmp_stop / redis_tmp_restart / redis_tmp_use to address
# a given one. Nothing ever touches the system's redis on 6379.
# An argument "{free-port}" (for --tls-port, --cluster-port) becomes a free
# port too, picked afresh with the server's own on each try; they are in
# REDIS_TMP_EXTRA_PORTS, in order.
# Tests run several at a time (tests/run.sh), so a port free a moment ago
# may be another test's server by the time ours binds it: a start counts
# only when our own server's log says it is ready (a PONG alone could be
# the other test's), and a start that lost its port tries another.
# The functions work with and without `set -e` in the caller.

REDIS_TMP_SERVER=${REDIS_TMP_SERVER:-redis-server}
REDIS_TMP_CLI=${REDIS_TMP_CLI:-redis-cli}
declare -gA _REDIS_TMP_PID=() _REDIS_TMP_DIR=() _REDIS_TMP_WRAP=()
declare -ga REDIS_TMP_EXTRA_PORTS=()

# Prints a port that was free on 127.0.0.1 a moment ago: a random one of the
# 16384 below the kernel's ephemeral range (ip_local_port_range), which
# neither a connect() nor a bind to port 0 ever takes, so that only another
# test's pick can take it before its user binds it; port 0's choice when
# none of 100 tries is free.
redis_tmp_free_port() {
    /usr/bin/python3 -c 'import random, socket
try:
    with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
        lo = int(f.read().split()[0])
except (OSError, ValueError, IndexError):
    lo = 32768
lo = max(lo, 2048)
for _ in range(100):
    s = socket.socket()
    try:
        s.bind(("127.0.0.1", random.randrange(max(1024, lo - 16384), lo)))
        break
    except OSError:
        s.close()
else:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
print(s.getsockname()[1])'
}

# redis_tmp_use PORT: makes the server on PORT the current one.
# shellcheck disable=SC2034  # REDIS_* are for the caller
redis_tmp_use() {
    local port=$1
    [[ -n ${_REDIS_TMP_PID[$port]:-} ]] || { echo "redis-tmp: no server on port $port" >&2; return 1; }
    REDIS_PORT=$port
    REDIS_PID=${_REDIS_TMP_PID[$port]}
    REDIS_DIR=${_REDIS_TMP_DIR[$port]}
    REDIS_URL=redis://127.0.0.1:$port
}

# Runs redis-cli against the current server (no password: pass -a yourself).
redis_tmp_cli() {
    env -u REDISCLI_AUTH "$REDIS_TMP_CLI" -h 127.0.0.1 -p "$REDIS_PORT" "$@"
}

# _redis_tmp_launch PORT DIR: starts redis-server with the args saved in
# DIR/args and waits until it answers. Returns 0 and sets _REDIS_TMP_PID[PORT],
# 2 when a port (its own or one in the args) was taken by someone else, 1 on
# any other failure.
_redis_tmp_launch() {
    local port=$1 dir=$2 args=() pid wrapper i reply
    mapfile -d '' -t args <"$dir/args"
    : >"$dir/redis.log"
    rm -f "$dir/pid"
    # The server runs under a wrapper subshell that waits for it, so that a
    # kill -9 of the server is the wrapper's exit status, not a "Killed"
    # job notice printed by this shell.
    (
        "$REDIS_TMP_SERVER" --port "$port" --bind 127.0.0.1 --dir "$dir" \
            --daemonize no --save '' --appendonly no --logfile "$dir/redis.log" \
            "${args[@]}" </dev/null >>"$dir/redis.log" 2>&1 &
        echo $! >"$dir/pid.tmp" && mv "$dir/pid.tmp" "$dir/pid"
        wait $!
    ) >/dev/null 2>&1 &
    wrapper=$!
    for ((i = 0; i < 100; i++)); do
        [[ -s $dir/pid ]] && break
        sleep 0.01
    done
    pid=$(<"$dir/pid") || return 1
    for ((i = 0; i < 200; i++)); do         # 200 x 50 ms = 10 s
        if ! kill -0 "$pid" 2>/dev/null; then
            wait "$wrapper" 2>/dev/null || true
            if grep -qiE 'address already in use|could not create server tcp' "$dir/redis.log"; then
                return 2
            fi
            echo "redis-tmp: redis-server on port $port exited at start; its log:" >&2
            tail -n 20 "$dir/redis.log" >&2
            return 1
        fi
        # Whoever answers on the port, it is ours only once our server has
        # logged that it listens (after loading its AOF, if any): another
        # test's server may hold the port while ours fails to bind it.
        if ! grep -qi 'ready to accept connections' "$dir/redis.log"; then
            sleep 0.05
            continue
        fi
        reply=$(timeout 2 env -u REDISCLI_AUTH "$REDIS_TMP_CLI" -h 127.0.0.1 -p "$port" ping 2>&1 || true)
        # A server started with --requirepass answers NOAUTH: it is up.
        if [[ $reply == PONG || $reply == *NOAUTH* ]]; then
            _REDIS_TMP_PID[$port]=$pid
            _REDIS_TMP_WRAP[$port]=$wrapper
            return 0
        fi
        sleep 0.05
    done
    echo "redis-tmp: redis-server on port $port did not answer PING within 10 s; its log:" >&2
    tail -n 20 "$dir/redis.log" >&2
    kill -9 "$pid" 2>/dev/null || true
    wait "$wrapper" 2>/dev/null || true
    return 1
}

# redis_tmp_start [redis-server args...]: starts a new private server and
# makes it the current one. Returns non-zero (with a message) on failure.
redis_tmp_start() {
    local dir port rc a args=()
    command -v "$REDIS_TMP_SERVER" >/dev/null 2>&1 || {
        echo "redis-tmp: $REDIS_TMP_SERVER not found (run scripts/install-deps.sh)" >&2; return 1; }
    dir=$(mktemp -d "${TMPDIR:-/tmp}/sluice-redis.XXXXXX") || return 1
    for _ in 1 2 3 4 5 6 7 8; do
        port=$(redis_tmp_free_port) || { rm -rf "$dir"; return 1; }
        REDIS_TMP_EXTRA_PORTS=() args=()
        for a in "$@"; do
            if [[ $a == '{free-port}' ]]; then
                a=$(redis_tmp_free_port) || { rm -rf "$dir"; return 1; }
                REDIS_TMP_EXTRA_PORTS+=("$a")
            fi
            args+=("$a")
        done
        if ((${#args[@]})); then printf '%s\0' "${args[@]}" >"$dir/args"; else : >"$dir/args"; fi
        rc=0
        _redis_tmp_launch "$port" "$dir" || rc=$?
        if ((rc == 0)); then
            _REDIS_TMP_DIR[$port]=$dir
            redis_tmp_use "$port"
            return 0
        fi
        ((rc == 2)) || break
        echo "redis-tmp: port $port ${REDIS_TMP_EXTRA_PORTS[*]} was taken meanwhile," \
            "trying others" >&2
    done
    rm -rf "$dir"
    echo "redis-tmp: could not start redis-server" >&2
    return 1
}

# _redis_tmp_kill PORT SIGNAL: signals the server on PORT and waits for it
# (up to 10 s, then -9) and for its wrapper.
_redis_tmp_kill() {
    local pid=${_REDIS_TMP_PID[$1]} wrapper=${_REDIS_TMP_WRAP[$1]:-} sig=$2 i
    if kill "-$sig" "$pid" 2>/dev/null; then
        for ((i = 0; i < 200; i++)); do
            kill -0 "$pid" 2>/dev/null || break
            sleep 0.05
        done
        kill -9 "$pid" 2>/dev/null || true
    fi
    [[ -z $wrapper ]] || wait "$wrapper" 2>/dev/null || true
}

# redis_tmp_stop [PORT]: stops a server (default: the current one) and
# removes its dir.
redis_tmp_stop() {
    local port=${1:-${REDIS_PORT:-}}
    [[ -n $port && -n ${_REDIS_TMP_PID[$port]:-} ]] || return 0
    [[ ${_REDIS_TMP_PID[$port]} == dead ]] || _redis_tmp_kill "$port" TERM
    rm -rf "${_REDIS_TMP_DIR[$port]}"
    unset "_REDIS_TMP_PID[$port]" "_REDIS_TMP_DIR[$port]" "_REDIS_TMP_WRAP[$port]"
    if [[ $port == "${REDIS_PORT:-}" ]]; then
        unset REDIS_PID REDIS_DIR
    fi
}

# redis_tmp_kill9 [PORT]: kills a server hard and leaves it down (its dir,
# with any AOF, stays); redis_tmp_restart brings it back.
redis_tmp_kill9() {
    local port=${1:-$REDIS_PORT}
    [[ -n ${_REDIS_TMP_PID[$port]:-} ]] || { echo "redis-tmp: no server on port $port" >&2; return 1; }
    _redis_tmp_kill "$port" KILL
    _REDIS_TMP_PID[$port]=dead
}

# redis_tmp_restart [PORT]: kill -9 (unless already down), then starts the
# server again on the same port with the same dir and args (an AOF in the
# dir is loaded). Makes it the current server.
redis_tmp_restart() {
    local port=${1:-$REDIS_PORT} rc
    [[ -n ${_REDIS_TMP_DIR[$port]:-} ]] || { echo "redis-tmp: no server on port $port" >&2; return 1; }
    [[ ${_REDIS_TMP_PID[$port]} == dead ]] || redis_tmp_kill9 "$port"
    for _ in 1 2 3 4 5 6 7 8 9 10; do
        rc=0
        _redis_tmp_launch "$port" "${_REDIS_TMP_DIR[$port]}" || rc=$?
        ((rc == 0)) && { redis_tmp_use "$port"; return 0; }
        ((rc == 2)) || break
        # The port can linger briefly (or a client grabbed it as its local
        # port): try again shortly.
        sleep 0.2
    done
    echo "redis-tmp: could not restart redis-server on port $port" >&2
    return 1
}

# Stops every server this shell started. Meant for `trap ... EXIT`.
redis_tmp_cleanup_all() {
    local port
    for port in "${!_REDIS_TMP_PID[@]}"; do
        [[ ${_REDIS_TMP_PID[$port]} == dead ]] || _redis_tmp_kill "$port" TERM
        rm -rf "${_REDIS_TMP_DIR[$port]}"
        unset "_REDIS_TMP_PID[$port]" "_REDIS_TMP_DIR[$port]" "_REDIS_TMP_WRAP[$port]"
    done
    return 0
}
