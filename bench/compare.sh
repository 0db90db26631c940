#!/usr/bin/env bash
# Compares this tree's sluice with the tree at git revision REV, side by
# side in one run (bench/compare.py): builds REV's bench tools in a scratch
# worktree, starts one private redis-server, runs both builds interleaved
# and prints a table of medians and ratios. Everything started is stopped,
# and the worktree removed, on exit.
#   bench/compare.sh REV [--sizes 1024,65536,1048576] [--reps 5]
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
[[ $# -ge 1 && $1 != -* ]] || { echo "usage: bench/compare.sh REV [--sizes S,S] [--reps N]" >&2; exit 2; }
rev=$1
shift
git rev-parse --verify -q "$rev^{commit}" >/dev/null || { echo "compare: no commit '$rev'" >&2; exit 2; }
BUILD=${BUILD:-build}
. scripts/redis-tmp.sh
wt=$(mktemp -d "${TMPDIR:-/tmp}/sluice-compare.XXXXXX")
cleanup() {
    redis_tmp_cleanup_all
    git worktree remove --force "$wt" 2>/dev/null || rm -rf "$wt"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM
git worktree add -q --detach "$wt" "$rev"
echo "compare: building $rev in $wt" >&2
make -C "$wt" -s -j"$(nproc)" all build/bench-produce build/bench-consume >"$wt.log" 2>&1 ||
    { tail -n 20 "$wt.log" >&2; echo "compare: building $rev failed" >&2; exit 1; }
make -s -j"$(nproc)" all "$BUILD/bench-produce" "$BUILD/bench-consume" >/dev/null
rm -f "$wt.log"
redis_tmp_start --save '' --appendonly no --maxmemory 4gb --maxmemory-policy noeviction
case $BUILD in /*) ;; *) BUILD=$ROOT/$BUILD ;; esac
/usr/bin/python3 bench/compare.py --port "$REDIS_PORT" --a "$wt/build" --b "$BUILD" "$@"
