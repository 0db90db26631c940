#!/usr/bin/env bash
# sluice-ctl submit refuses bad input and leaves nothing behind:
# - a malformed manifest line: exit 1, "FILE:LINE: <what>" on stderr, and no
#   job key, no task, no task definition in Redis;
# - bad flags: exit 2 before connecting; a missing queue: exit 1;
# - a second submit while the first job runs: exit 1 (the job is untouched).
# And the task order: with --shuffle-seed every epoch is a permutation of
# the shards, the same seed gives the same orders, epochs differ; without a
# seed, manifest order.
# shellcheck source=tests/lib/integration.sh
. "$(dirname "$0")/../lib/integration.sh"
need_bin sluice-ctl

redis_tmp_start
q=jobman
ctl create "$q" --max-batches 10 --max-bytes 1M >/dev/null
for i in 0 1 2 3 4 5 6 7; do seq 1 10 >"$T/f$i.txt"; done

# nothing_left Q: no key of a job exists for queue Q.
nothing_left() {
    local k n
    for k in job tasks:0 taskdef tlease towner tattempts jstage jstage:taskdef; do
        n=$(redis_tmp_cli --raw EXISTS "sluice:{$1}:$k")
        [[ $n == 0 ]] || fail "sluice:{$1}:$k exists after a refused submit"
    done
}
# refused RC PATTERN ARGS...: sluice-ctl ARGS exits RC, stderr matches PATTERN.
refused() {
    local want=$1 pat=$2 rc=0
    shift 2
    ctl "$@" >"$T/out" 2>"$T/err" || rc=$?
    ((rc == want)) || fail "sluice-ctl $* exit $rc, expected $want: $(cat "$T/out" "$T/err")"
    grep -Eq -- "$pat" "$T/err" || fail "sluice-ctl $*: stderr '$(cat "$T/err")' does not match '$pat'"
    note "sluice-ctl $* -> $rc: $(head -n 1 "$T/err")"
}

m=$T/bad.manifest
printf '# training shards\nlines f0.txt\n\nlines f1.txt f2.txt\nparquet f3.txt\nlines f4.txt\n' >"$m"
refused 1 "^sluice-ctl: $m:5: .*parquet" submit "$q" --manifest "$m" --epochs 2 --batch-size 4
nothing_left "$q"
printf 'lines f0.txt\nlines f1.txt records=5:2\n' >"$m"
refused 1 "$m:2: " submit "$q" --manifest "$m" --epochs 1 --batch-size 4
printf 'lines f0.txt\nlines f1.txt\nlines f2.txt\nlines no-such-file.txt\n' >"$m"
refused 1 "$m:4: .*no-such-file.txt" submit "$q" --manifest "$m" --epochs 1 --batch-size 4
printf 'lines\n' >"$m"
refused 1 "$m:1: " submit "$q" --manifest "$m" --epochs 1 --batch-size 4
refused 1 "no-such.manifest" submit "$q" --manifest "$T/no-such.manifest" --epochs 1 --batch-size 4
nothing_left "$q"

printf 'lines f0.txt\n' >"$T/ok.manifest"
refused 2 "epochs" submit "$q" --manifest "$T/ok.manifest" --batch-size 4
refused 2 "batch-size" submit "$q" --manifest "$T/ok.manifest" --epochs 1 --batch-size 0
refused 2 "shuffle-seed" submit "$q" --manifest "$T/ok.manifest" --epochs 1 --batch-size 4 --shuffle-seed x
refused 2 "unknown" submit "$q" --manifest "$T/ok.manifest" --epochs 1 --batch-size 4 --frobnicate
refused 1 "nosuch.*does not exist" submit nosuch --manifest "$T/ok.manifest" --epochs 1 --batch-size 4
[[ $(redis_tmp_cli --raw EXISTS "sluice:{nosuch}:job") == 0 ]] || fail "a job appeared for a missing queue"
nothing_left "$q"

# Task orders.
for i in 0 1 2 3 4 5 6 7; do echo "lines f$i.txt"; done >"$T/eight.manifest"
# order Q: the waiting tasks of every epoch (tasks:<e>), epoch by epoch.
order() {
    local e
    for ((e = 0; e < 3; e++)); do redis_tmp_cli --raw LRANGE "sluice:{$1}:tasks:$e" 0 -1; done |
        grep -v '^$' | paste -sd' '
}
for x in s1 s2 plain; do ctl create "$x" --max-batches 10 --max-bytes 1M >/dev/null; done
ctl submit s1 --manifest "$T/eight.manifest" --epochs 3 --batch-size 4 --shuffle-seed 99 >/dev/null
ctl submit s2 --manifest "$T/eight.manifest" --epochs 3 --batch-size 4 --shuffle-seed 99 >/dev/null
ctl submit plain --manifest "$T/eight.manifest" --epochs 2 --batch-size 4 >/dev/null
o1=$(order s1) o2=$(order s2)
note "seed 99: $o1"
[[ $o1 == "$o2" ]] || fail "the same seed gave different orders: '$o1' vs '$o2'"
[[ $(order plain) == "0:0 0:1 0:2 0:3 0:4 0:5 0:6 0:7 1:0 1:1 1:2 1:3 1:4 1:5 1:6 1:7" ]] ||
    fail "without a seed the order is not the manifest's: $(order plain)"
"$PY" -c 'import sys
ts = sys.argv[1].split()
ep = [[int(t.split(":")[1]) for t in ts if t.startswith("%d:" % e)] for e in range(3)]
assert all(sorted(o) == list(range(8)) for o in ep), ep
assert ep[0] != list(range(8)) and len({tuple(o) for o in ep}) == 3, ep' "$o1" ||
    fail "seeded orders are not distinct permutations per epoch: $o1"

# A job is running: a second submit is refused and changes nothing.
refused 1 "runs a job" submit s1 --manifest "$T/ok.manifest" --epochs 1 --batch-size 4
[[ $(redis_tmp_cli --raw HGET "sluice:{s1}:job" ntasks) == 8 ]] || fail "the running job was changed"
[[ $(order s1 | wc -w) == 24 ]] || fail "the running job's tasks changed"
echo "ok: malformed manifests refused with their line, nothing left in Redis; orders deterministic"
