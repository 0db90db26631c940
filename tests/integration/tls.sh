#!/usr/bin/env bash
# TLS to Redis (rediss://, rediss+cluster://). A private redis-server
# serves TLS on one port (a CA, a server certificate for 127.0.0.1 and
# localhost, made here) and plain text on another (redis-cli's checks).
# Over rediss://: a whole job (sluice-ctl create and submit, two
# producers, one of them with an --exec command, so forking while its TLS
# connections are open; two consumers) delivers every record exactly once;
# the Python binding reads a queue, a fork()ed child of it reads with a
# consumer of its own, and once closed no thread or descriptor is left;
# 20000 batches of one small record come without a session lost; a
# consumer killed the moment next() returns has that delivery counted (its
# mark went out through the TLS session, not the relay); a
# consumer whose connections Redis drops five times reconnects through new
# tunnels, with no descriptor or thread more. What must fail fails at once, saying why: a CA that did not sign the
# server's certificate ("certificate verify failed ... (CA file ...)"), a
# name the certificate does not hold (SLUICE_TLS_SERVER_NAME), a server
# that wants a client certificate and got none or one it does not trust,
# broken SLUICE_TLS_* files, rediss:// to the plain port, redis:// to the
# TLS port. Last, a Redis Cluster of 3 masters speaking TLS (bus and
# clients) runs a job over rediss+cluster://.
# test: long
# shellcheck source=tests/lib/integration.sh
. "$(dirname "$0")/../lib/integration.sh"
# shellcheck source=tests/lib/python.sh
. "$ROOT/tests/lib/python.sh"
need_bin sluice-ctl sluice-producer sluice-consume hold
command -v openssl >/dev/null || fail "openssl (the command) is needed to make the certificates"

# ---- certificates ----------------------------------------------------------
# mkcert NAME CA SUBJECT [SAN]: NAME.key and NAME.pem signed by CA (CA.pem,
# CA.key); CA "-" makes a self-signed CA.
mkcert() {
    local name=$1 ca=$2 subj=$3 san=${4:-}
    if [[ $ca == - ]]; then
        openssl req -x509 -newkey rsa:2048 -nodes -days 2 -subj "$subj" \
            -keyout "$T/$name.key" -out "$T/$name.pem" 2>"$T/openssl.err" ||
            fail "openssl req (CA $name): $(cat "$T/openssl.err")"
        return
    fi
    openssl req -newkey rsa:2048 -nodes -subj "$subj" -keyout "$T/$name.key" \
        -out "$T/$name.csr" 2>"$T/openssl.err" || fail "openssl req ($name): $(cat "$T/openssl.err")"
    local ext=()
    if [[ -n $san ]]; then
        echo "subjectAltName=$san" >"$T/$name.ext"
        ext=(-extfile "$T/$name.ext")
    fi
    openssl x509 -req -in "$T/$name.csr" -CA "$T/$ca.pem" -CAkey "$T/$ca.key" -CAcreateserial \
        -days 2 -out "$T/$name.pem" ${ext[@]+"${ext[@]}"} 2>"$T/openssl.err" ||
        fail "openssl x509 ($name): $(cat "$T/openssl.err")"
}
mkcert ca - "/CN=sluice test CA"
mkcert other_ca - "/CN=another CA"
mkcert server ca "/CN=redis" "DNS:localhost,IP:127.0.0.1"
mkcert client ca "/CN=sluice client"
mkcert stranger other_ca "/CN=stranger"

TLS_ARGS=(--tls-cert-file "$T/server.pem" --tls-key-file "$T/server.key"
          --tls-ca-cert-file "$T/ca.pem")
redis_tmp_start --tls-port '{free-port}' "${TLS_ARGS[@]}" --tls-auth-clients optional ||
    fail "redis-server with TLS did not start"
tls_port=${REDIS_TMP_EXTRA_PORTS[0]}
PLAIN_URL=$REDIS_URL
TLS_URL=rediss://127.0.0.1:$tls_port
REDIS_URL=$TLS_URL      # ctl() goes over TLS
export SLUICE_TLS_CA_FILE=$T/ca.pem

# ---- a job over rediss:// ---------------------------------------------------
q=tlsjob
for f in a b c d e f; do
    seq 1 60 | sed "s/^/$f-record-/" >"$T/$f.txt"
    echo "lines $f.txt"
done >"$T/m.manifest"
want=$(cat "$T"/[a-f].txt | lines_sum)
want_recs=360
# The --exec command: the lines of {path} from record {start}, as records.
cat >"$T/emit.py" <<'EOF'
import struct, sys
lines = open(sys.argv[1], "rb").read().splitlines()
end = int(sys.argv[3]) if sys.argv[3] else len(lines)
for line in lines[int(sys.argv[2]):end]:
    sys.stdout.buffer.write(struct.pack("<I", len(line)) + line)
EOF

out=$(ctl create "$q" --max-batches 8 --max-bytes 16M) || fail "create over TLS: $out"
out=$(ctl submit "$q" --manifest "$T/m.manifest" --epochs 1 --batch-size 7) ||
    fail "submit over TLS: $out"
cons=()
for k in 1 2; do
    bg "$T/c$k.out" "$T/c$k.err" "$BUILD/sluice-consume" --redis "$TLS_URL" --queue "$q" \
        --summary --epochs --quiet
    cons+=("$BG_PID")
done
# Both consumers registered before the job runs: one that came after the
# end would see a finished job and no epoch.
both_in() { [[ $(rcli HLEN "sluice:{$q}:consumers") == 2 ]]; }
wait_for 30 both_in || fail "the consumers did not register over TLS: $(cat "$T"/c*.err)"
bg "$T/p1.out" "$T/p1.err" "$BUILD/sluice-producer" --redis "$TLS_URL" --queue "$q" --id p1 \
    --summary
p1=$BG_PID
bg "$T/p2.out" "$T/p2.err" "$BUILD/sluice-producer" --redis "$TLS_URL" --queue "$q" --id p2 \
    --summary --exec "$PY $T/emit.py {path} {start} '{end}'"
p2=$BG_PID
for k in 1 2; do
    pid=$p1
    ((k == 2)) && pid=$p2
    rc=0; wait_pid "$pid" 60 || rc=$?
    ((rc == 0)) || fail "producer p$k exit $rc: $(cat "$T/p$k.err")"
done
recs=0 sums=()
for k in 1 2; do
    rc=0; wait_pid "${cons[k - 1]}" 60 || rc=$?
    ((rc == 0)) || fail "consumer $k exit $rc: $(cat "$T/c$k.err")"
    line=$(grep "^epoch=0 " "$T/c$k.out") ||
        fail "consumer $k printed no epoch=0 line: $(cat "$T/c$k.out")"
    note "consumer $k: $line"
    recs=$((recs + $(kv records "$line")))
    sums+=("$(kv checksum "$line")")
done
((recs == want_recs)) || fail "the consumers got $recs records over TLS, expected $want_recs"
got=$(hexsum "${sums[@]}")
[[ $got == "$want" ]] || fail "the consumers' checksums add up to $got, expected $want"
grep -qx "job: finished" <<<"$(ctl info "$q")" || fail "the job is not finished: $(ctl info "$q")"
note "job over TLS: $recs records, checksum $got"

# ---- the Python binding -------------------------------------------------------
ctl create pyq --max-batches 100 --max-bytes 16M >/dev/null || fail "create pyq"
ctl create pychild --max-batches 100 --max-bytes 16M >/dev/null || fail "create pychild"
pline=$("$BUILD/sluice-producer" --redis "$TLS_URL" --queue pyq --format lines --batch-size 9 --summary --quiet \
    "$T/a.txt" "$T/b.txt") || fail "sluice-producer over TLS failed"
"$BUILD/sluice-producer" --redis "$TLS_URL" --queue pychild --format lines --batch-size 9 --quiet "$T/c.txt" ||
    fail "sluice-producer over TLS failed (pychild)"
pyline=$(py "$ROOT/tests/integration/tls.py" "$TLS_URL" pyq "$(kv batches "$pline")" pychild) ||
    fail "tls.py failed"
note "python: $pyline"
[[ $(kv checksum "$pyline") == $(kv checksum "$pline") && $(kv records "$pyline") == 120 ]] ||
    fail "python read $pyline, the producer pushed $pline"

# ---- many small batches: no session lost -------------------------------------------
# next() marks each batch with one small write through the TLS session:
# when the socket is full a moment, next() waits for room instead of
# taking the connection for broken (and starting a new session).
ctl create small --max-batches 100000 --max-bytes 256M >/dev/null || fail "create small"
seq 1 20000 >"$T/small.txt"
"$BUILD/sluice-producer" --redis "$TLS_URL" --queue small --format lines --batch-size 1 --quiet \
    "$T/small.txt" || fail "sluice-producer (small) failed"
out=$("$BUILD/sluice-consume" --redis "$TLS_URL" --queue small --count 20000 --summary 2>"$T/small.err") ||
    fail "consuming 20000 small batches over TLS failed: $(cat "$T/small.err")"
[[ $(kv batches "$out") == 20000 ]] || fail "small: $out, expected 20000 batches"
# The second line of the summary comes only when a count is not 0.
! grep -q 'reconnects [1-9]' "$T/small.err" ||
    fail "20000 small batches over TLS cost sessions: $(tail -n 2 "$T/small.err")"
note "20000 small batches over TLS: $(head -n 1 "$T/small.err")"

# ---- killed the moment next() returns: the mark is not lost ----------------------
# Over TLS next() writes the mark through the tunnel's TLS session, into
# the kernel before it returns, as over plain text: a consumer killed the
# moment its application receives a batch has that delivery counted, and
# the batch comes back flagged. hold --kill takes 3 (prefetching 4) and
# kills itself as the third next() returns; once its lease ran out and it
# was reaped, exactly 3 batches count a delivery (the prefetched one
# none). Five rounds, each on a queue of its own.
seq 1 10 >"$T/km.txt"
for round in 1 2 3 4 5; do
    q=km$round
    ctl create "$q" --max-batches 100 --max-bytes 16M --lease-ms 1000 >/dev/null || fail "create $q"
    "$BUILD/sluice-producer" --redis "$TLS_URL" --queue "$q" --format lines --batch-size 1 --quiet \
        "$T/km.txt" || fail "sluice-producer ($q) failed"
    rc=0
    "$BUILD/hold" --redis "$TLS_URL" --queue "$q" --count 3 --prefetch 4 --kill >"$T/$q.out" \
        2>"$T/$q.err" || rc=$?
    ((rc == 137)) || fail "hold --kill on $q: exit $rc: $(cat "$T/$q.err")"
    reaped() {
        ctl reap "$q" >/dev/null &&
            [[ -z $(rcli --scan --pattern "sluice:{$q}:pending:*") ]]
    }
    wait_for 15 reaped || fail "$q: the killed consumer's batches were not handed back"
    counted=$(rcli HVALS "sluice:{$q}:dlv" | grep -cx 1 || true)
    ((counted == 3)) || fail "$q: $counted batches count a delivery, expected 3: $(rcli HGETALL "sluice:{$q}:dlv" | grep -v '^not a batch' | tr '\n' ' ')"
done
note "5 consumers killed as next() returned over TLS: 3 deliveries counted each time"

# ---- connections dropped: new tunnels, nothing left behind ----------------------
# tls_clients: the ids of the clients Redis has on its TLS port.
tls_clients() { rcli CLIENT LIST | grep "laddr=127.0.0.1:$tls_port " | sed 's/^id=\([0-9]*\) .*/\1/' | sort; }
ctl create rq --max-batches 100 --max-bytes 16M >/dev/null || fail "create rq"
bg "$T/rc.out" "$T/rc.err" "$BUILD/sluice-consume" --redis "$TLS_URL" --queue rq --summary \
    --count 10 --quiet
rcpid=$BG_PID
wait_for 10 eval '(($(tls_clients | wc -l) >= 3))' || fail "the consumer did not connect over TLS"
nconn=$(tls_clients | wc -l)
fds0=$(ls "/proc/$rcpid/fd" | wc -l)
threads0=$(ls "/proc/$rcpid/task" | wc -l)
for round in 1 2 3 4 5; do
    before=$(tls_clients)
    rcli CLIENT KILL LADDR "127.0.0.1:$tls_port" >/dev/null
    # Connected again: as many TLS clients as before, none of the old ones.
    wait_for 20 eval '[[ $(tls_clients | wc -l) == "$nconn" && -z $(comm -12 <(tls_clients) <(echo "$before")) ]]' ||
        fail "round $round: the consumer did not reconnect over TLS ($(tls_clients | wc -l) clients): $(cat "$T/rc.err")"
done
fds1=$(ls "/proc/$rcpid/fd" | wc -l)
threads1=$(ls "/proc/$rcpid/task" | wc -l)
((fds1 == fds0 && threads1 == threads0)) ||
    fail "after 5 reconnects the consumer has $fds1 descriptors and $threads1 threads, before $fds0 and $threads0"
"$BUILD/sluice-producer" --redis "$TLS_URL" --queue rq --format lines --batch-size 6 --quiet \
    "$T/e.txt" || fail "sluice-producer (rq) failed"
rc=0; wait_pid "$rcpid" 30 || rc=$?
((rc == 0)) || fail "the consumer that reconnected exit $rc: $(cat "$T/rc.err")"
[[ $(kv records "$(cat "$T/rc.out")") == 60 ]] || fail "after reconnects: $(cat "$T/rc.out"), expected 60 records"
note "5 reconnects over TLS: $nconn connections each time, $fds0 descriptors and $threads0 threads throughout"

# ---- what must fail, fails at once and says why ----------------------------------
# expect_fail WHAT TEXT CMD...: CMD exits non-zero within 10 s, its stderr
# holding TEXT.
expect_fail() {
    local what=$1 text=$2 rc=0
    shift 2
    timeout 10 "$@" >"$T/f.out" 2>"$T/f.err" </dev/null || rc=$?
    ((rc != 0)) || fail "$what: succeeded"
    ((rc != 124)) || fail "$what: still running after 10 s"
    grep -qF -- "$text" "$T/f.err" || fail "$what: no '$text' in: $(cat "$T/f.err")"
    note "$what: $(head -n 1 "$T/f.err")"
}
expect_fail "wrong CA" "TLS: certificate verify failed: self-signed certificate in certificate chain (CA file '$T/other_ca.pem')" \
    env SLUICE_TLS_CA_FILE="$T/other_ca.pem" "$BUILD/sluice-ctl" --redis "$TLS_URL" info "$q"
expect_fail "wrong CA, consumer" "certificate verify failed" \
    env SLUICE_TLS_CA_FILE="$T/other_ca.pem" "$BUILD/sluice-consume" --redis "$TLS_URL" --queue "$q"
expect_fail "wrong CA, producer" "certificate verify failed" \
    env SLUICE_TLS_CA_FILE="$T/other_ca.pem" "$BUILD/sluice-producer" --redis "$TLS_URL" \
    --queue pyq --format lines --batch-size 9 "$T/a.txt"
expect_fail "no CA file: the system's store" "certificate verify failed" \
    env -u SLUICE_TLS_CA_FILE "$BUILD/sluice-ctl" --redis "$TLS_URL" info "$q"
expect_fail "a name the certificate lacks" "hostname mismatch: the server's certificate does not name 'wrong'" \
    env SLUICE_TLS_SERVER_NAME=wrong "$BUILD/sluice-ctl" --redis "$TLS_URL" info "$q"
expect_fail "an IP the certificate lacks" "IP address mismatch: the server's certificate does not name '127.0.0.2'" \
    env SLUICE_TLS_SERVER_NAME=127.0.0.2 "$BUILD/sluice-ctl" --redis "$TLS_URL" info "$q"
# The names it holds work: by IP, by name, by IP with the name given.
for how in "rediss://localhost:$tls_port" "SLUICE_TLS_SERVER_NAME=localhost"; do
    if [[ $how == rediss* ]]; then
        out=$("$BUILD/sluice-ctl" --redis "$how" info pyq) || fail "$how: $out"
    else
        out=$(env "$how" "$BUILD/sluice-ctl" --redis "$TLS_URL" info pyq) || fail "$how: $out"
    fi
done
expect_fail "missing CA file" "TLS: SLUICE_TLS_CA_FILE '$T/nope.pem': No such file or directory" \
    env SLUICE_TLS_CA_FILE="$T/nope.pem" "$BUILD/sluice-ctl" --redis "$TLS_URL" info "$q"
expect_fail "a CA file without certificates" "TLS: SLUICE_TLS_CA_FILE '$T/ca.key'" \
    env SLUICE_TLS_CA_FILE="$T/ca.key" "$BUILD/sluice-ctl" --redis "$TLS_URL" info "$q"
expect_fail "a certificate without its key" "SLUICE_TLS_CERT_FILE is set without SLUICE_TLS_KEY_FILE" \
    env SLUICE_TLS_CERT_FILE="$T/client.pem" "$BUILD/sluice-ctl" --redis "$TLS_URL" info "$q"
expect_fail "another certificate's key" "TLS: SLUICE_TLS_KEY_FILE '$T/server.key' is not the key of SLUICE_TLS_CERT_FILE" \
    env SLUICE_TLS_CERT_FILE="$T/client.pem" SLUICE_TLS_KEY_FILE="$T/server.key" \
    "$BUILD/sluice-ctl" --redis "$TLS_URL" info "$q"
expect_fail "a key file holding no key" "TLS: SLUICE_TLS_KEY_FILE '$T/ca.pem': no PEM key in it" \
    env SLUICE_TLS_CERT_FILE="$T/client.pem" SLUICE_TLS_KEY_FILE="$T/ca.pem" \
    "$BUILD/sluice-ctl" --redis "$TLS_URL" info "$q"
openssl pkey -in "$T/client.key" -aes256 -passout pass:x -out "$T/client-enc.key" 2>/dev/null ||
    fail "openssl pkey -aes256 failed"
expect_fail "a key with a passphrase" "the key has a passphrase" \
    env SLUICE_TLS_CERT_FILE="$T/client.pem" SLUICE_TLS_KEY_FILE="$T/client-enc.key" \
    "$BUILD/sluice-ctl" --redis "$TLS_URL" info "$q"
plain_port=${PLAIN_URL##*:}
# (The plain port waits for the end of a line that a TLS hello lacks: the
# connect timeout, 5 s, ends it.)
expect_fail "rediss:// to the plain port" "TLS: no handshake within 5000 ms (is port $plain_port Redis's tls-port?)" \
    "$BUILD/sluice-consume" --redis "rediss://127.0.0.1:$plain_port" --queue "$q"
expect_fail "redis:// to the TLS port" "(if this port is Redis's tls-port, use rediss://)" \
    "$BUILD/sluice-ctl" --redis "redis://127.0.0.1:$tls_port" info "$q"

# A client certificate, required.
[[ $(rcli CONFIG SET tls-auth-clients yes) == OK ]] || fail "CONFIG SET tls-auth-clients yes"
expect_fail "no client certificate" "TLS: the server requires a client certificate" \
    "$BUILD/sluice-ctl" --redis "$TLS_URL" info pyq
expect_fail "a client certificate of another CA" "TLS: the server refused the client certificate SLUICE_TLS_CERT_FILE '$T/stranger.pem'" \
    env SLUICE_TLS_CERT_FILE="$T/stranger.pem" SLUICE_TLS_KEY_FILE="$T/stranger.key" \
    "$BUILD/sluice-ctl" --redis "$TLS_URL" info pyq
export SLUICE_TLS_CERT_FILE=$T/client.pem SLUICE_TLS_KEY_FILE=$T/client.key
"$BUILD/sluice-producer" --redis "$TLS_URL" --queue pyq --format lines --batch-size 9 --quiet "$T/d.txt" ||
    fail "sluice-producer with a client certificate failed"
out=$("$BUILD/sluice-consume" --redis "$TLS_URL" --queue pyq --summary --quiet --count 7) ||
    fail "sluice-consume with a client certificate failed: $out"
[[ $(kv records "$out") == 60 ]] || fail "with a client certificate: $out, expected 60 records"
unset SLUICE_TLS_CERT_FILE SLUICE_TLS_KEY_FILE
note "client certificate: required, refused without, accepted with"

# ---- a Redis Cluster over TLS -------------------------------------------------------
. "$ROOT/tests/lib/cluster.sh"
CLUSTER_TLS_ARGS=("${TLS_ARGS[@]}" --tls-auth-clients optional)
cluster_start 3 0 || fail "a TLS cluster did not start"
REDIS_URL=$CLUSTER_TLS_URL
note "cluster: $CLUSTER_TLS_URL"
cq=tlsparts
ctl create "$cq" --max-batches 8 --max-bytes 16M --partitions 3 >/dev/null ||
    fail "create over rediss+cluster:// failed"
out=$(ctl submit "$cq" --manifest "$T/m.manifest" --epochs 1 --batch-size 7) ||
    fail "submit over rediss+cluster://: $out"
bg "$T/cc.out" "$T/cc.err" "$BUILD/sluice-consume" --redis "$CLUSTER_TLS_URL" --queue "$cq" \
    --summary --epochs --quiet
cpid=$BG_PID
rc=0
"$BUILD/sluice-producer" --redis "$CLUSTER_TLS_URL" --queue "$cq" --id cp --summary \
    >"$T/cp.out" 2>"$T/cp.err" || rc=$?
((rc == 0)) || fail "producer over rediss+cluster:// exit $rc: $(cat "$T/cp.err")"
rc=0; wait_pid "$cpid" 60 || rc=$?
((rc == 0)) || fail "consumer over rediss+cluster:// exit $rc: $(cat "$T/cc.err")"
line=$(grep "^epoch=0 " "$T/cc.out") || fail "the cluster consumer printed no epoch=0 line"
[[ $(kv records "$line") == "$want_recs" && $(kv checksum "$line") == "$want" ]] ||
    fail "over rediss+cluster:// the consumer got $line, expected $want_recs records, checksum $want"
# The seeds are TLS ports only, and so are the nodes CLUSTER SLOTS names
# (Redis answers a TLS client with its TLS ports): a plain one would have
# failed the handshake.
info=$(ctl info "$cq") || fail "info over rediss+cluster://: $info"
grep -qx "job: finished" <<<"$info" || fail "the cluster job is not finished: $info"
echo "ok: a job over rediss:// ($recs records), Python and a fork over TLS, 20000 small batches without a session lost, every failure named, a TLS cluster over rediss+cluster://"
