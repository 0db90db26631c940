#!/usr/bin/env bash
# The docs are run as written: every shell block of README.md, docs/*.md,
# python/README.md and bench/README.md is marked `run` or `norun: why`
# (tests/tools/doc-blocks.py says how), and each `run` block runs here, from
# a copy of the source tree's layout (links to it, `build` to $BUILD), with
# the programs of $BUILD first on PATH and SLUICE_REDIS_URL naming a private
# redis-server. The blocks of one doc run in order and share the directory
# and the Redis, as a reader going down the page would. The only change made to a block is its Redis port, replaced
# by a free one (in its output block too). A block must exit 0 and print what its `output` block shows.
# And every file of the tree a doc names in backticks exists.
# Afterwards every process the block started is stopped, the Redis on its
# port too.
# shellcheck source=tests/lib/integration.sh
. "$(dirname "$0")/../lib/integration.sh"
# shellcheck source=tests/lib/cluster.sh
. "$ROOT/tests/lib/cluster.sh"
need_bin sluice-ctl sluice-producer sluice-consume gen-tfrecord examples/libupper.so

# The docs' examples run "after make": a plain `make` (target all) builds
# every program of $BUILD they use (checked on a dry run into a fresh folder).
plan=$(make -n -C "$ROOT" BUILD="$T/fresh" all 2>&1) || fail "make -n all failed: $plan"
for tool in sluice-ctl sluice-producer sluice-consume gen-tfrecord examples/libupper.so; do
    grep -q -- "-o $T/fresh/$tool\b" <<<"$plan" || fail "make (all) does not build $tool, which the docs use"
done

DOCS=("$ROOT/README.md" "$ROOT"/docs/*.md "$ROOT/python/README.md" "$ROOT/bench/README.md")
n=$("$PY" "$ROOT/tests/tools/doc-blocks.py" extract "$T/blocks" "${DOCS[@]}") ||
    fail "some shell blocks of the docs are not marked (above)"
((n > 0)) || fail "no block of the docs is marked 'run'"

failed=0
cur_file= w= fport=
for meta in "$T"/blocks/*.meta; do
    base=${meta%.meta}
    read -r file line port timeout cluster <"$meta"
    where="${file#"$ROOT"/}:$line"
    if [[ $file != "$cur_file" ]]; then
        # A doc is read from the top: its blocks share a working directory
        # and a Redis, in order.
        [[ -n $fport ]] && redis_tmp_stop "$fport" >/dev/null 2>&1
        cur_file=$file fport=
        w=$T/run-$(basename "$base")
        mkdir -p "$w/tmp"
        for e in "$ROOT"/* "$ROOT"/.[!.]*; do
            [[ -e $e && $(basename "$e") != build ]] && ln -s "$e" "$w/"
        done
        ln -s "$BUILD" "$w/build"
    fi
    cp "$base.sh" "$w/block.sh"
    cp "$base.expect" "$w/expect"
    if [[ $cluster != - ]]; then
        # The block's cluster nodes become those of a private cluster.
        IFS=, read -r -a nodes <<<"$cluster"
        cluster_start "${#nodes[@]}" 0 >/dev/null || fail "$where: no cluster to run it on"
        for i in "${!nodes[@]}"; do
            sed -i "s/\b${nodes[$i]//./\\.}\b/127.0.0.1:${CLUSTER_PORTS[$i]}/g" "$w/block.sh" "$w/expect"
        done
        p=${CLUSTER_PORTS[0]}
    elif grep -q 'redis-server' "$w/block.sh"; then
        p=$(redis_tmp_free_port)            # the block starts its own
    else
        if [[ -z $fport ]]; then
            redis_tmp_start >/dev/null
            fport=$REDIS_PORT
        fi
        p=$fport
    fi
    sed -i "s/\b$port\b/$p/g" "$w/block.sh" "$w/expect"
    note "$where (Redis port $p)"
    (
        cd "$w" || exit 1
        export PATH="$BUILD:$PATH" TMPDIR="$w/tmp" SLUICE_REDIS_URL="redis://127.0.0.1:${fport:-$p}"
        unset SLUICE_DATA_ROOTS
        exec setsid bash -e block.sh
    ) >"$w/out" 2>&1 </dev/null &
    pid=$!
    rc=0
    wait_pid "$pid" "$timeout" || rc=$?
    kill -KILL -- "-$pid" 2>/dev/null || true
    if [[ $p != "$fport" ]]; then
        # What the block started on its own port (--daemonize escapes its
        # process group), or the cluster.
        env -u REDISCLI_AUTH redis-cli -p "$p" shutdown nosave >/dev/null 2>&1 ||
            pkill -KILL -f "^redis-server [^ ]*:$p\b" 2>/dev/null || true
        if [[ $cluster != - ]]; then
            for c in "${CLUSTER_PORTS[@]}"; do redis_tmp_stop "$c" >/dev/null 2>&1; done
        fi
    fi
    if ((rc != 0)); then
        echo "FAIL $where: exited with status $rc$( ((rc == 124)) && echo " (timeout ${timeout}s)"); its output:"
        tail -n 30 "$w/out"
        failed=$((failed + 1))
    elif ! why=$("$PY" "$ROOT/tests/tools/doc-blocks.py" match "$w/expect" "$w/out"); then
        echo "FAIL $where: $why; its output:"
        tail -n 30 "$w/out"
        failed=$((failed + 1))
    else
        echo "ok $where ($(grep -c . "$w/expect") lines of output checked)"
    fi
done
((failed == 0)) || fail "$failed of $n runnable doc blocks failed"
echo "ok: $n runnable doc blocks ran as written"
