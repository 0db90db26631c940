#!/usr/bin/env bash
# `make bench`: starts a private redis-server (scripts/redis-tmp.sh) and
# private Redis Clusters of 1, 2 and 3 masters (tests/lib/cluster.sh)
# and runs bench/bench.py against them; every server is stopped on exit.
# Arguments are passed to bench.py (--quick, --sizes 1024,65536, --reps N,
# --out FILE, --cluster-sizes 65536,1048576, --cluster-only); --no-cluster
# (taken here) skips the clusters and the scaling part.
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
redis_tmp_start "${REDIS_ARGS[@]}"
port=$REDIS_PORT

args=() clusters=() with_clusters=1
for a in "$@"; do
    if [[ $a == --no-cluster ]]; then with_clusters=0; else args+=("$a"); fi
done
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
