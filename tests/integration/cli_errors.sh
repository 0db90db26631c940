#!/usr/bin/env bash
# Every command fails with one clear line that names the problem: exit 2 for
# a usage error, 1 for a runtime error (bad URL, refused connection, wrong
# password, missing or existing queue). Passwords never appear in messages.
# shellcheck source=tests/lib/integration.sh
. "$(dirname "$0")/../lib/integration.sh"
need_bin sluice-ctl sluice-producer sluice-consume

redis_tmp_start --requirepass s3cret-pw
auth_url=redis://:s3cret-pw@127.0.0.1:$REDIS_PORT
noauth_url=redis://127.0.0.1:$REDIS_PORT
wrong_url=redis://:wr0ng-pw@127.0.0.1:$REDIS_PORT
closed_port=$(redis_tmp_free_port)   # nothing listens there
echo x >"$T/lines.txt"
"$BUILD/sluice-ctl" --redis "$auth_url" create exists --max-batches 4 --max-bytes 1M >/dev/null ||
    fail "sluice-ctl create with the right password failed"

failures=0
# expect CODE REGEX CMD...: CMD must exit CODE (a list like "1|2" allowed)
# and the first line of its stderr must match the extended REGEX
# (case-insensitive). Runtime errors (exit 1) must print exactly one line.
expect() {
    local code=$1 re=$2 rc=0 first n
    shift 2
    timeout 20 "$@" >"$T/out" 2>"$T/err" </dev/null || rc=$?
    first=$(head -n 1 "$T/err")
    n=$(grep -c . "$T/err" || true)
    local what="[$*]"
    if [[ ! $rc =~ ^($code)$ ]]; then
        echo "FAIL $what: exit $rc, expected $code; stderr: $(cat "$T/err")"
        failures=$((failures + 1))
    elif ! grep -qiE -- "$re" <<<"$first"; then
        echo "FAIL $what: first stderr line does not match /$re/: '$first'"
        failures=$((failures + 1))
    elif ((rc == 1 && n != 1)); then
        echo "FAIL $what: $n lines on stderr, expected one: $(cat "$T/err")"
        failures=$((failures + 1))
    elif grep -q -- "-pw" "$T/err" "$T/out"; then
        echo "FAIL $what: the password appears in the output: $(cat "$T/err")"
        failures=$((failures + 1))
    else
        echo "ok   $what -> $rc: $first"
    fi
}

P=(--format lines --batch-size 1 "$T/lines.txt")
for bin in sluice-ctl sluice-producer sluice-consume; do
    expect 2 'bogus|unknown|unrecognized|invalid' "$BUILD/$bin" --bogus-flag
done
expect 2 'command|usage' "$BUILD/sluice-ctl" --redis "$auth_url" frobnicate q
expect 2 'consumers N needs --coordinated' "$BUILD/sluice-ctl" --redis "$auth_url" create q2 --max-batches 4 --max-bytes 1M --consumers 2
expect 2 'remainder needs --coordinated' "$BUILD/sluice-ctl" --redis "$auth_url" create q2 --max-batches 4 --max-bytes 1M --remainder pad
expect 2 'max-bytes|12X|size' "$BUILD/sluice-ctl" --redis "$auth_url" create q2 --max-batches 4 --max-bytes 12X
expect 2 'max-batches|abc|number' "$BUILD/sluice-ctl" --redis "$auth_url" create q2 --max-batches abc --max-bytes 1M
expect 2 'queue' "$BUILD/sluice-producer" --redis "$auth_url" "${P[@]}"
expect 2 'queue' "$BUILD/sluice-consume" --redis "$auth_url"
expect 2 'format' "$BUILD/sluice-producer" --redis "$auth_url" --queue exists --format parquet --batch-size 1 "$T/lines.txt"
expect 2 'queue name|character' "$BUILD/sluice-ctl" --redis "$auth_url" create 'bad name!' --max-batches 4 --max-bytes 1M

# A flag that only means something with another flag or mode is refused,
# never silently ignored.
expect 2 'epochs needs --summary' "$BUILD/sluice-consume" --redis "$auth_url" --queue exists --epochs
expect 2 'checkpoint-keep needs --checkpoint-every' "$BUILD/sluice-consume" --redis "$auth_url" \
    --queue exists --checkpoint-keep 3
expect 2 'checkpoint-every and --checkpoint-file go together' "$BUILD/sluice-consume" \
    --redis "$auth_url" --queue exists --checkpoint-every 5
expect 2 'rank and --world go together' "$BUILD/sluice-consume" --redis "$auth_url" \
    --queue exists --rank 0
expect 2 'at-most-once has nothing to give back' "$BUILD/sluice-consume" --redis "$auth_url" \
    --queue exists --at-most-once --resume tok
expect 2 'exec-format goes with --exec' "$BUILD/sluice-producer" --redis "$auth_url" \
    --queue exists --exec-format msgpack "${P[@]}"
expect 2 'follow is for job mode' "$BUILD/sluice-producer" --redis "$auth_url" --queue exists \
    --follow "${P[@]}"
expect 2 'lease-ms is for job mode' "$BUILD/sluice-producer" --redis "$auth_url" --queue exists \
    --lease-ms 5000 "${P[@]}"
expect 2 'batch-size is for files mode' "$BUILD/sluice-producer" --redis "$auth_url" \
    --queue exists --data-root "$T" --batch-size 4
expect 2 'format is for files mode' "$BUILD/sluice-producer" --redis "$auth_url" \
    --queue exists --data-root "$T" --format lines
expect 2 'format and --exec exclude each other' "$BUILD/sluice-producer" --redis "$auth_url" \
    --queue exists --exec cat "${P[@]}"
expect 2 'interval-ms goes with --watch' "$BUILD/sluice-ctl" --redis "$auth_url" stat exists \
    --interval-ms 500
expect 2 'coordinated needs --consumers' "$BUILD/sluice-ctl" --redis "$auth_url" create q2 \
    --max-batches 4 --max-bytes 1M --coordinated
expect 2 'unexpected argument .extra' "$BUILD/sluice-ctl" script push extra

# Bad URL: port out of range. A usage or runtime error, but clear.
expect 2 '99999|port' "$BUILD/sluice-ctl" --redis redis://h:99999 info q
expect 2 '99999|port' "$BUILD/sluice-producer" --redis redis://h:99999 --queue q "${P[@]}"
expect 2 '99999|port' "$BUILD/sluice-consume" --redis redis://h:99999 --queue q --timeout-ms 100
expect '1|2' 'url|scheme|http' "$BUILD/sluice-ctl" --redis http://127.0.0.1:$REDIS_PORT info q

# Nothing listening.
expect 1 "connect|refused|$closed_port" "$BUILD/sluice-ctl" --redis "redis://127.0.0.1:$closed_port" info exists
expect 1 "connect|refused|$closed_port" "$BUILD/sluice-consume" --redis "redis://127.0.0.1:$closed_port" --queue exists --timeout-ms 100

# Wrong password, and none at all.
for bin in sluice-ctl sluice-consume sluice-producer; do
    case $bin in
        sluice-ctl) args=(info exists) ;;
        sluice-consume) args=(--queue exists --timeout-ms 100) ;;
        sluice-producer) args=(--queue exists "${P[@]}") ;;
    esac
    expect 1 'auth|password|WRONGPASS' "$BUILD/$bin" --redis "$wrong_url" "${args[@]}"
    expect 1 'auth|password|NOAUTH' "$BUILD/$bin" --redis "$noauth_url" "${args[@]}"
done

# Missing queue, existing queue.
expect 1 'nosuch' "$BUILD/sluice-ctl" --redis "$auth_url" info nosuch
expect 1 'nosuch' "$BUILD/sluice-ctl" --redis "$auth_url" delete nosuch
expect 1 'nosuch' "$BUILD/sluice-consume" --redis "$auth_url" --queue nosuch --timeout-ms 100
expect 1 'nosuch' "$BUILD/sluice-producer" --redis "$auth_url" --queue nosuch "${P[@]}"
expect 1 'exists' "$BUILD/sluice-ctl" --redis "$auth_url" create exists --max-batches 4 --max-bytes 1M
# Missing input file.
expect 1 'no-such-file' "$BUILD/sluice-producer" --redis "$auth_url" --queue exists --format lines \
    --batch-size 1 "$T/no-such-file.txt"

# The environment variable is the default URL.
rc=0
SLUICE_REDIS_URL=$auth_url "$BUILD/sluice-ctl" info exists >"$T/out" 2>&1 || rc=$?
if ((rc != 0)) || ! grep -q '^max_batches: *4$' "$T/out"; then
    echo "FAIL SLUICE_REDIS_URL not used as the default: exit $rc: $(cat "$T/out")"
    failures=$((failures + 1))
fi

((failures == 0)) || fail "$failures error cases misbehaved"
echo "ok: all error cases"
