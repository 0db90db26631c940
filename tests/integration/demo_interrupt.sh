#!/usr/bin/env bash
# Ctrl-C during the demo: started in its own process group (as a terminal
# runs it), the demo gets SIGINT with all its programs once its first
# progress line is out. It must say "interrupted" plainly and exit 130,
# never print a negative or empty figure ("waited -s", "-324 batches/s"),
# never report the trainers' or producers' exits as failures, and leave no
# process, redis-server or temporary folder behind, within 20 s.
# shellcheck source=tests/lib/integration.sh
. "$(dirname "$0")/../lib/integration.sh"
need_bin sluice-ctl sluice-producer sluice-trainer
[[ -r /usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz ]] ||
    fail "Fashion-MNIST is not installed (apt-get install dataset-fashion-mnist)"

# A background job of a script starts with SIGINT ignored, which a shell
# cannot undo: env resets it, setsid gives the demo its own group.
DEMO_EPOCHS=3 DEMO_TIMEOUT=60 BUILD=$BUILD TMPDIR=$T \
    setsid env --default-signal=INT "$ROOT/scripts/demo.sh" >"$T/demo.out" 2>&1 </dev/null &
pid=$!
_BG_PIDS+=("$pid")
progress() { grep -qE '^ +[0-9]+\.[0-9]s  epoch ' "$T/demo.out"; }
wait_for 60 progress || fail "no progress line within 60 s: $(cat "$T/demo.out")"
pgid=$(ps -o pgid= -p "$pid" | tr -d ' ')
[[ $pgid == "$pid" ]] || fail "the demo is not its own process group ($pgid, pid $pid)"
t0=$(now_ms)
kill -INT -- "-$pgid"
rc=0
wait_pid "$pid" 20 || rc=$?
out=$(<"$T/demo.out")
note "demo output:"
printf '%s\n' "$out"
((rc != 124)) || fail "the demo still ran 20 s after SIGINT"
note "stopped $(($(now_ms) - t0)) ms after SIGINT"
((rc == 130)) || fail "exit status $rc after SIGINT, expected 130"
grep -q '^demo: interrupted' <<<"$out" || fail "no 'demo: interrupted' line"
if grep -qE 'waited -s|waited s|-[0-9][0-9.]* (batches/s|MB/s)' <<<"$out"; then
    fail "an empty or negative figure: $(grep -E 'waited -?s|-[0-9]' <<<"$out")"
fi
if grep -qE 'exited with status|failed' <<<"$out"; then
    fail "the interruption reported as a failure: $(grep -E 'exited with status|failed' <<<"$out")"
fi
if grep -q '^\[4/5\]' <<<"$out"; then fail "the demo went on after SIGINT"; fi
# Nothing left: no process of the demo's group (its trainers, producers
# and redis-server), none that runs from $T (redis-server's folder, the
# trainers' outputs), no temporary folder of the demo or of its Redis.
gone() { ! pgrep -g "$pgid" >/dev/null && ! pgrep -f "$T/" >/dev/null; }
wait_for 5 gone || fail "processes left: $(pgrep -ag "$pgid"; pgrep -af "$T/")"
left=$(find "$T" -maxdepth 1 \( -name 'sluice-demo.*' -o -name 'sluice-redis.*' \))
[[ -z $left ]] || fail "the demo left behind: $left"
echo "ok: interrupted demo exits 130 and says so"
