#!/usr/bin/env bash
# `make bench`: starts a private redis-server (scripts/redis-tmp.sh), with
# a TLS port too (a throw-away CA and certificate, made with openssl), and
# private Redis Clusters of 1, 2 and 3 masters (tests/lib/cluster.sh)
# and runs bench/bench.py against them; every server is stopped on exit.
# Arguments are passed to bench.py (--quick, --sizes 1024,65536, --reps N,
# --out FILE, --defaults, --cluster-sizes 65536,1048576, --cluster-only,
# --tls-only, --delays 250,1000, --no-delay, --delay-only, --compress-sizes,
# --no-compress, --compress-only; bench.py --help says what each does);
# --no-cluster (taken here) skips the clusters and the scaling part,
# --no-tls the TLS part; the *-only options need neither.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
BUILD=${BUILD:-build}
. scripts/redis-tmp.sh
trap redis_tmp_cleanup_all EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

for t in bench-produce bench-consume sluice-ctl; do
    [[ -x $BUILD/$t ]] || { echo "bench: $BUILD/$t is not built (make bench builds it)" >&2; exit 1; }
done

# maxmemory well above anything a run holds (the limit's pre-filled list is
# the largest, ~0.6 GB), but at most half of the memory available.
avail_kb=$(awk '/^MemAvailable:/ {print $2}' /proc/meminfo)
maxmem_mb=$((avail_kb / 2048))
((maxmem_mb > 8192)) && maxmem_mb=8192
REDIS_ARGS=(--save '' --appendonly no --maxmemory "${maxmem_mb}mb" --maxmemory-policy noeviction)

args=() clusters=() with_clusters=1 with_tls=1
for a in "$@"; do
    case $a in
        --no-cluster) with_clusters=0 ;;
        --no-tls) with_tls=0 ;;
        --tls-only) with_clusters=0; args+=("$a") ;;
        --cluster-only) with_tls=0; args+=("$a") ;;
        --delay-only|--compress-only) with_clusters=0; with_tls=0; args+=("$a") ;;
        *) args+=("$a") ;;
    esac
done

# The TLS part: the same server on a second port, with a certificate for
# 127.0.0.1 from a CA made here (bench.py gives the tools the CA file).
tls_args=()
if ((with_tls)); then
    command -v openssl >/dev/null || { echo "bench: openssl not found (run scripts/install-deps.sh)" >&2; exit 1; }
    certs=$(mktemp -d "${TMPDIR:-/tmp}/sluice-bench-tls.XXXXXX")
    trap 'redis_tmp_cleanup_all; rm -rf "$certs"' EXIT
    openssl req -x509 -newkey rsa:2048 -nodes -days 2 -subj "/CN=sluice bench CA" \
        -keyout "$certs/ca.key" -out "$certs/ca.pem" 2>/dev/null &&
    openssl req -newkey rsa:2048 -nodes -subj "/CN=127.0.0.1" -keyout "$certs/server.key" \
        -out "$certs/server.csr" 2>/dev/null &&
    echo "subjectAltName=IP:127.0.0.1" >"$certs/san.ext" &&
    openssl x509 -req -in "$certs/server.csr" -CA "$certs/ca.pem" -CAkey "$certs/ca.key" \
        -CAcreateserial -days 2 -extfile "$certs/san.ext" -out "$certs/server.pem" 2>/dev/null ||
        { echo "bench: making the TLS certificates failed" >&2; exit 1; }
    tls_port=$(redis_tmp_free_port)
    tls_args=(--tls-port "$tls_port" --tls-cert-file "$certs/server.pem"
              --tls-key-file "$certs/server.key" --tls-ca-cert-file "$certs/ca.pem"
              --tls-auth-clients no)
    args+=(--tls-port "$tls_port" --tls-ca "$certs/ca.pem")
fi
redis_tmp_start "${REDIS_ARGS[@]}" ${tls_args[@]+"${tls_args[@]}"}
port=$REDIS_PORT
if ((with_clusters)); then
    . tests/lib/cluster.sh
    CLUSTER_REDIS_ARGS=("${REDIS_ARGS[@]}")
    for m in 1 2 3; do
        cluster_start "$m" 0 || { echo "bench: could not start a cluster of $m masters" >&2; exit 1; }
        clusters+=("$CLUSTER_URL")
    done
fi

/usr/bin/python3 bench/bench.py --build "$BUILD" --port "$port" \
    --redis-args "$(printf '%q ' "${REDIS_ARGS[@]}")" --clusters "${clusters[*]}" \
    ${args[@]+"${args[@]}"}
