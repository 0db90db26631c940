#!/usr/bin/env bash
# Bad input to every program, beyond cli_errors.sh and job_manifest_error.sh:
# every sluice-ctl subcommand (no queue, a missing queue, bad and
# conflicting flags, out-of-range numbers), malformed manifests of every
# kind, bad URLs (empty, bad db, db out of range, unclosed IPv6 bracket,
# missing socket, unknown host, bad port), wrong passwords (in the URL and
# in $SLUICE_REDIS_PASSWORD), and the flags of sluice-producer and
# sluice-consume. Each must fail with a non-zero exit (2 usage, 1 runtime),
# nothing on stdout, and one error line on stderr, "<program>: ...", that
# matches what is wrong; the only other stderr lines allowed are the usage
# hint ("try ... --help") and the producer's closing statistics. And
# nothing partial in Redis: every key and value (DEBUG DIGEST-VALUE) is the
# same before and after every refused command, so a refused submit leaves
# no job key, no task, nothing (a producer's own liveness entry in an
# existing queue aside).
# test: long
# shellcheck source=tests/lib/integration.sh
. "$(dirname "$0")/../lib/integration.sh"
need_bin sluice-ctl sluice-producer sluice-consume

redis_tmp_start --requirepass h0stile-pw --enable-debug-command local
U=redis://:h0stile-pw@127.0.0.1:$REDIS_PORT
plain=redis://127.0.0.1:$REDIS_PORT
rcli() { redis_tmp_cli -a h0stile-pw --no-auth-warning --raw "$@"; }
# digest: a digest of every key and value in Redis, except the liveness
# entry and counters a producer publishes about itself in an existing
# queue (sluice:{q}:producers, ptoken, pstats:*, and pstats_gone, where its
# counters go when it leaves), which even a producer that fails on its
# input leaves, as one that succeeds does.
# The key names go to $T/keys.TAG.
digest() {
    local keys
    rcli KEYS '*' | grep -vE '^sluice:\{q\}:(producers|ptoken|pstats:.*|pstats_gone)$' | sort \
        >"$T/keys.$1"
    mapfile -t keys <"$T/keys.$1"
    { printf '%s\n' "${keys[@]}"; ((${#keys[@]} == 0)) || rcli DEBUG DIGEST-VALUE "${keys[@]}"; } | md5sum
}
CTL=$BUILD/sluice-ctl PROD=$BUILD/sluice-producer CONS=$BUILD/sluice-consume
"$CTL" --redis "$U" create q --max-batches 4 --max-bytes 1M >/dev/null || fail "create q failed"
seq 1 10 >"$T/a.txt"
printf 'lines a.txt\n' >"$T/ok.manifest"

failures=0 label=
# expect CODE REGEX CMD...: CMD exits CODE ("1|2" allowed), prints nothing
# on stdout, its first stderr line is "<program>: ..." matching REGEX
# (extended, case-insensitive), no other stderr line but a usage hint or
# the producer's statistics, no password in the output, and the Redis
# dataset is unchanged.
expect() {
    local code=$1 re=$2 rc=0 first prog before after extra
    shift 2
    prog=$(basename "$1")
    [[ $prog == env ]] && prog=$(basename "$3")
    before=$(digest before)
    timeout 20 "$@" >"$T/out" 2>"$T/err" </dev/null || rc=$?
    after=$(digest after)
    first=$(head -n 1 "$T/err")
    extra=$(tail -n +2 "$T/err" | grep -vE "^try .*--help|^pushed [0-9]+ batches" || true)
    local what="[${*:2}]${label:+ (manifest: $label)}"
    if [[ ! $rc =~ ^($code)$ ]]; then
        echo "FAIL $what: exit $rc, expected $code; stderr: $(cat "$T/err") stdout: $(head -c 300 "$T/out")"
    elif [[ $first != "$prog: "* ]] || ! grep -qiE -- "$re" <<<"$first"; then
        echo "FAIL $what: first stderr line is not '$prog: ...' matching /$re/: '$first'"
    elif [[ -n $extra ]]; then
        echo "FAIL $what: more than one error line: $(cat "$T/err")"
    elif [[ -s $T/out ]]; then
        echo "FAIL $what: output on stdout: $(head -c 300 "$T/out")"
    elif grep -q -- "-pw" "$T/err"; then
        echo "FAIL $what: the password appears in the message: $first"
    elif [[ $before != "$after" ]]; then
        echo "FAIL $what: refused, but Redis changed; keys added/removed:" \
            "$(diff "$T/keys.before" "$T/keys.after" | grep '^[<>]' | paste -sd' ' || true)"
    else
        echo "ok   $what -> $rc: ${first:0:160}"
        return 0
    fi
    failures=$((failures + 1))
}

# ---- sluice-ctl: every subcommand -----------------------------------------
for sub in create delete info submit jobs dead reap; do
    expect 2 'which queue|queue' "$CTL" --redis "$U" "$sub"
done
expect 2 'script|which' "$CTL" --redis "$U" script
expect 2 "nosuch|unknown" "$CTL" --redis "$U" script nosuch
for sub in jobs dead reap; do
    expect 1 "'nosuch'.*not exist|nosuch" "$CTL" --redis "$U" "$sub" nosuch
done
expect 2 'requeue.*purge|exclude' "$CTL" --redis "$U" dead q --requeue --purge
expect 2 "bogus" "$CTL" --redis "$U" dead q --bogus
expect 2 "extra" "$CTL" --redis "$U" info q extra
expect 2 "extra" "$CTL" --redis "$U" jobs q extra
expect 2 "consumers.*x|'x'" "$CTL" --redis "$U" create c1 --max-batches 4 --max-bytes 1M --consumers x --coordinated
expect 2 'coordinated.*consumers' "$CTL" --redis "$U" create c1 --max-batches 4 --max-bytes 1M --coordinated
expect 2 "remainder.*keep" "$CTL" --redis "$U" create c1 --max-batches 4 --max-bytes 1M --consumers 2 --coordinated --remainder keep
expect 2 'lease-ms' "$CTL" --redis "$U" create c1 --max-batches 4 --max-bytes 1M --lease-ms 0
expect 2 'max-deliveries' "$CTL" --redis "$U" create c1 --max-batches 4 --max-bytes 1M --max-deliveries -1
expect 2 'max-batches' "$CTL" --redis "$U" create c1 --max-batches 0 --max-bytes 1M
expect 2 'max-batches' "$CTL" --redis "$U" create c1 --max-batches 99999999999999999999 --max-bytes 1M
expect 2 'max-bytes' "$CTL" --redis "$U" create c1 --max-batches 4 --max-bytes 0
expect 2 'max-bytes' "$CTL" --redis "$U" create c1 --max-batches 4 --max-bytes 9999999999G   # > 2^63
expect 2 'max-bytes' "$CTL" --redis "$U" create c1 --max-batches 4
expect 2 'queue name.*0' "$CTL" --redis "$U" create '' --max-batches 4 --max-bytes 1M
expect 2 'queue name.*300' "$CTL" --redis "$U" create "$(printf 'a%.0s' {1..300})" --max-batches 4 --max-bytes 1M

# ---- bad URLs and passwords (sluice-ctl; the other programs below) -------
expect 2 'empty' "$CTL" --redis '' info q
expect 2 "db 'abc'" "$CTL" --redis "$plain/abc" info q
expect '1|2' 'DB index|99' "$CTL" --redis "$U/99" info q
expect 2 'IPv6|\]' "$CTL" --redis 'redis://[::1' info q
expect 2 "port 'abc'|port" "$CTL" --redis 'redis://127.0.0.1:abc' info q
expect 1 'nonexistent.*No such file' "$CTL" --redis unix:///nonexistent/redis.sock info q
expect 1 'no-such-host.invalid' "$CTL" --redis redis://no-such-host.invalid:6379 info q
expect 1 'WRONGPASS|auth' "$CTL" --redis "redis://someone:wr0ng-pw@127.0.0.1:$REDIS_PORT" info q
expect 1 'WRONGPASS|auth' env SLUICE_REDIS_PASSWORD=wr0ng-pw "$CTL" --redis "$plain" info q
expect 1 'WRONGPASS|auth' "$CTL" --redis "redis://:wr0ng-pw@127.0.0.1:$REDIS_PORT" submit q \
    --manifest "$T/ok.manifest" --epochs 1 --batch-size 2

# ---- submit: flags and malformed manifests, nothing left behind ----------
S=(submit q --epochs 1 --batch-size 2)
expect 2 'epochs' "$CTL" --redis "$U" submit q --manifest "$T/ok.manifest" --epochs 0 --batch-size 2
expect 2 'epochs' "$CTL" --redis "$U" submit q --manifest "$T/ok.manifest" --epochs 99999999999 --batch-size 2
expect 2 'batch-size' "$CTL" --redis "$U" submit q --manifest "$T/ok.manifest" --epochs 1 --batch-size 99999999
expect 2 'max-attempts' "$CTL" --redis "$U" "${S[@]}" --manifest "$T/ok.manifest" --max-attempts 0
expect 2 'shuffle-seed' "$CTL" --redis "$U" "${S[@]}" --manifest "$T/ok.manifest" --shuffle-seed -1
expect 2 'shuffle-buffer' "$CTL" --redis "$U" "${S[@]}" --manifest "$T/ok.manifest" \
    --shuffle-buffer 2000000
expect 2 'shuffle-buffer' "$CTL" --redis "$U" "${S[@]}" --manifest "$T/ok.manifest" \
    --shuffle-buffer x
expect 2 'manifest' "$CTL" --redis "$U" "${S[@]}"
expect 2 'extra' "$CTL" --redis "$U" "${S[@]}" --manifest "$T/ok.manifest" extra
m=$T/bad.manifest
# manifest TEXT REGEX: submit of a manifest holding TEXT (printf format)
# fails (exit 1) with REGEX in its line.
manifest() {
    printf "$1" >"$m"
    label=${1//\\n/; }
    expect 1 "$2" "$CTL" --redis "$U" "${S[@]}" --manifest "$m"
    label=
}
manifest '' 'no shard'
manifest '# only a comment\n\n' 'no shard'
manifest 'lines a.txt records=5:2\n' 'bad.manifest:1: .*records=5:2'
manifest 'lines a.txt records=abc\n' 'bad.manifest:1: .*records=abc'
manifest 'lines a.txt split=0\n' 'bad.manifest:1: .*split=0'
manifest 'lines a.txt split=abc\n' 'bad.manifest:1: .*split=abc'
manifest 'lines a.txt split=100\n' 'bad.manifest:1: .*split=100'
manifest 'fixed:0 a.txt\n' 'bad.manifest:1: .*fixed'
manifest 'lines a.txt\nidx a.txt\n' 'bad.manifest:2: .*idx'
manifest 'lines a.txt\nlines a.txt\x00b\n' 'bad.manifest:2: .*NUL'
manifest 'lines a.txt\nlines missing.txt\n' 'bad.manifest:2: .*missing.txt'
# A range beyond the end of the file: refused at submit, not found out by
# the producers after they delivered the records that do exist.
# (When one is accepted anyway, its job is removed so that the next case
# is not refused merely because a job runs.)
for r in 0:1000 20:30; do
    manifest "lines a.txt records=$r\n" "bad.manifest:1: .*(records|range|$r|10 records)"
    if [[ $(rcli EXISTS "sluice:{q}:job") == 1 ]]; then
        "$CTL" --redis "$U" delete q >/dev/null
        "$CTL" --redis "$U" create q --max-batches 4 --max-bytes 1M >/dev/null
    fi
done
head -c 3000 /dev/urandom >"$m"
expect 1 'bad.manifest' "$CTL" --redis "$U" "${S[@]}" --manifest "$m"
expect 1 'directory' "$CTL" --redis "$U" "${S[@]}" --manifest "$T"
expect 1 "nosuch" "$CTL" --redis "$U" submit nosuch --manifest "$T/ok.manifest" --epochs 1 --batch-size 2
[[ $(rcli EXISTS "sluice:{q}:job") == 0 ]] ||
    fail "a job key exists after only refused submits"

# ---- sluice-producer ------------------------------------------------------
P=(--redis "$U" --queue q)
expect 2 'batch-size' "$PROD" "${P[@]}" --batch-size 0 "$T/a.txt"
expect 2 'batch-size' "$PROD" "${P[@]}" --batch-size abc "$T/a.txt"
expect 2 'batch-size' "$PROD" "${P[@]}" --batch-size 2000000 "$T/a.txt"
expect 2 'batch-size' "$PROD" "${P[@]}" "$T/a.txt"
expect 2 'fixed' "$PROD" "${P[@]}" --format fixed:abc --batch-size 1 "$T/a.txt"
expect 2 'idx.*2 paths|pairs|groups' "$PROD" "${P[@]}" --format idx --batch-size 1 "$T/a.txt"
expect 2 'inflight' "$PROD" "${P[@]}" --inflight 0 --batch-size 1 "$T/a.txt"
expect 2 'lease-ms' "$PROD" "${P[@]}" --lease-ms 5
expect 2 'exec-format' "$PROD" "${P[@]}" --exec-format bogus --exec cat --batch-size 1 "$T/a.txt"
expect 1 'nonexistent' "$PROD" "${P[@]}" --transform /nonexistent/x.so --batch-size 1 "$T/a.txt"
expect 1 'a.txt' "$PROD" "${P[@]}" --transform "$T/a.txt" --batch-size 1 "$T/a.txt"
expect 1 'directory' "$PROD" "${P[@]}" --format tfrecord --batch-size 1 "$T"
expect 1 'nosuch' "$PROD" --redis "$U" --queue nosuch
expect 2 'queue name|character' "$PROD" --redis "$U" --queue 'bad name!' --batch-size 1 "$T/a.txt"
expect 2 "db 'abc'" "$PROD" --redis "$plain/abc" --queue q --batch-size 1 "$T/a.txt"
expect '1|2' 'DB index|99' "$PROD" --redis "$U/99" --queue q --batch-size 1 "$T/a.txt"
expect 1 'nonexistent.*No such file' "$PROD" --redis unix:///nonexistent/redis.sock --queue q \
    --batch-size 1 "$T/a.txt"
expect 1 'WRONGPASS|auth' env SLUICE_REDIS_PASSWORD=wr0ng-pw "$PROD" --redis "$plain" --queue q \
    --batch-size 1 "$T/a.txt"

# ---- sluice-consume -------------------------------------------------------
C=(--redis "$U" --queue q --timeout-ms 100)
expect 2 'count' "$CONS" "${C[@]}" --count 0
expect 2 'timeout-ms' "$CONS" --redis "$U" --queue q --timeout-ms -1
expect 2 'prefetch' "$CONS" "${C[@]}" --prefetch 0
expect 2 'prefetch' "$CONS" "${C[@]}" --prefetch 2000
expect 2 'rank.*world' "$CONS" "${C[@]}" --rank 1
expect 2 'rank.*below|world' "$CONS" "${C[@]}" --rank 2 --world 2
expect '1|2' 'not coordinated' "$CONS" "${C[@]}" --rank 0 --world 2
expect 2 'max-batch-bytes' "$CONS" "${C[@]}" --max-batch-bytes 0
expect 2 'print-ids.*no value' "$CONS" "${C[@]}" --print-ids=x
expect 2 'queue name|character' "$CONS" --redis "$U" --queue 'bad name!' --timeout-ms 100
expect 2 "db 'abc'" "$CONS" --redis "$plain/abc" --queue q --timeout-ms 100
expect '1|2' 'DB index|99' "$CONS" --redis "$U/99" --queue q --timeout-ms 100
expect 1 'nonexistent.*No such file' "$CONS" --redis unix:///nonexistent/redis.sock --queue q --timeout-ms 100
expect 1 'WRONGPASS|auth' env SLUICE_REDIS_PASSWORD=wr0ng-pw "$CONS" --redis "$plain" --queue q --timeout-ms 100

((failures == 0)) || fail "$failures hostile command lines misbehaved"
echo "ok: every bad command line refused with one clear line, Redis unchanged"
