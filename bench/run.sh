#!/usr/bin/env bash
# `make bench`: starts a private redis-server (scripts/redis-tmp.sh) and runs
# bench/bench.py against it; the server is stopped on exit. Arguments are
# passed to bench.py (--quick, --sizes 1024,65536, --reps N, --out FILE).
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

/usr/bin/python3 bench/bench.py --build "$BUILD" --port "$REDIS_PORT" \
    --redis-args "$(printf '%q ' "${REDIS_ARGS[@]}")" "$@"
