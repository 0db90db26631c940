#!/usr/bin/env bash
# The Redis password never shows: a job runs with the password read from
# SLUICE_REDIS_PASSWORD_FILE (a producer serving metrics, consumers,
# sluice-ctl info / stat / metrics), and the password is found in no
# process's command line or environment (ps, /proc/PID/environ), in no
# output or log of the programs, and in no metrics page. Then the errors:
# a wrong password (from the file, from the URL), a server that refuses
# the connection with the password in the URL, and every bad password file
# (missing, empty, two lines, a FIFO, /proc/self/environ, both variables
# set) fail with a clear message that names the file and never the
# password.
# shellcheck source=tests/lib/integration.sh
. "$(dirname "$0")/../lib/integration.sh"
need_bin sluice-ctl sluice-producer sluice-consume gen-tfrecord

redis_tmp_start
pw="pw-$RANDOM$RANDOM-secret-$RANDOM"
rcli ACL SETUSER app on ">$pw" '~*' '&*' '+@all' >/dev/null
umask 077
printf '%s\n' "$pw" >"$T/pw"
export SLUICE_REDIS_PASSWORD_FILE=$T/pw
unset SLUICE_REDIS_PASSWORD
U=redis://app@127.0.0.1:$REDIS_PORT
c() { "$BUILD/sluice-ctl" --redis "$U" "$@"; }

# no_pw FILE...: the password is in none of the files.
no_pw() {
    local f
    for f in "$@"; do
        ! grep -qF -- "$pw" "$f" ||
            fail "the password is in $f: $(grep -F -- "$pw" "$f" | head -c 300)"
    done
}
# ps_check: the password is in no process's command line nor environment.
ps_check() {
    ps -eo args >"$T/ps.txt"
    no_pw "$T/ps.txt"
    local p
    for p in "${_BG_PIDS[@]}"; do
        [[ -r /proc/$p/environ ]] || continue
        tr '\0' '\n' <"/proc/$p/environ" >"$T/env.txt" 2>/dev/null || continue
        no_pw "$T/env.txt"
    done
}

for ((i = 0; i < 4; i++)); do
    gen "$T/s$i.tfrecord" 50 $((70 + i)) 1 300 >/dev/null
    echo "tfrecord s$i.tfrecord"
done >"$T/m.manifest"
c create q --max-batches 6 --max-bytes 1M >"$T/create.out" 2>&1 ||
    fail "create: $(cat "$T/create.out")"
c submit q --manifest "$T/m.manifest" --epochs 2 --batch-size 10 >"$T/submit.out" 2>&1 ||
    fail "submit: $(cat "$T/submit.out")"
mport=$(redis_tmp_free_port)
bg "$T/p.out" "$T/p.err" "$BUILD/sluice-producer" --redis "$U" --queue q --id p1 --follow \
    --metrics-addr "127.0.0.1:$mport"
prod=$BG_PID
bg "$T/c.out" "$T/c.err" "$BUILD/sluice-consume" --redis "$U" --queue q --summary --epochs
cons=$BG_PID
# fetch URL: the body of URL (quiet when the server is not there yet).
fetch() {
    "$PY" -c 'import sys, urllib.request
print(urllib.request.urlopen(sys.argv[1], timeout=5).read().decode())' "$1" 2>/dev/null
}
wait_for 20 fetch "http://127.0.0.1:$mport/metrics" || fail "the producer's metrics never answered"
fetch "http://127.0.0.1:$mport/metrics" >"$T/pmetrics.txt"
grep -q '^sluice_producer' "$T/pmetrics.txt" ||
    fail "no producer metrics: $(head -n 5 "$T/pmetrics.txt")"
ps_check
rc=0; wait_pid "$cons" 60 || rc=$?
((rc == 0)) || fail "the consumer exit $rc: $(cat "$T/c.err")"
grep -q '^records=400 ' "$T/c.out" ||
    fail "the consumer did not get the job's 400 records: $(cat "$T/c.out")"
c info q >"$T/info.txt" 2>&1 || fail "info: $(cat "$T/info.txt")"
c stat q >"$T/stat.txt" 2>&1 || fail "stat: $(cat "$T/stat.txt")"
c info q --json >"$T/info.json" 2>&1 || fail "info --json: $(cat "$T/info.json")"
qport=$(redis_tmp_free_port)
bg "$T/m.out" "$T/m.err" "$BUILD/sluice-ctl" --redis "$U" metrics q --addr "127.0.0.1:$qport"
wait_for 20 fetch "http://127.0.0.1:$qport/metrics" || fail "sluice-ctl metrics never answered"
fetch "http://127.0.0.1:$qport/metrics" >"$T/qmetrics.txt"
grep -q '^sluice_queue' "$T/qmetrics.txt" || fail "no queue metrics: $(head -n 5 "$T/qmetrics.txt")"
ps_check
kill -TERM "$prod"
rc=0; wait_pid "$prod" 30 || rc=$?
((rc == 0)) || fail "the producer exit $rc: $(cat "$T/p.err")"
# Redis's own client list: the programs' names, not their secrets.
rcli CLIENT LIST >"$T/clients.txt"
no_pw "$T"/*.out "$T"/*.err "$T"/*.txt "$T/info.json"
note "a job ran with the password from the file; it showed nowhere"

# ---- errors -------------------------------------------------------------------
# fails_clean NAME WANT CMD...: CMD fails, its error says WANT and holds
# no password.
fails_clean() {
    local name=$1 want=$2 rc=0
    shift 2
    "$@" >"$T/e.out" 2>"$T/e.err" </dev/null || rc=$?
    ((rc != 0)) || fail "$name: did not fail: $(cat "$T/e.out")"
    grep -qF -- "$want" "$T/e.err" ||
        fail "$name: the error does not say '$want': $(cat "$T/e.err")"
    no_pw "$T/e.out" "$T/e.err"
}
printf '%s-not\n' "$pw" >"$T/wrong"
SLUICE_REDIS_PASSWORD_FILE=$T/wrong fails_clean "wrong password" "WRONGPASS" c info q
SLUICE_REDIS_PASSWORD_FILE=$T/wrong fails_clean "wrong password (consumer)" "authentication" \
    "$BUILD/sluice-consume" --redis "$U" --queue q --count 1
SLUICE_REDIS_PASSWORD_FILE=$T/wrong fails_clean "wrong password (producer)" "authentication" \
    "$BUILD/sluice-producer" --redis "$U" --queue q
SLUICE_REDIS_PASSWORD_FILE= fails_clean "password in the URL, server down" "refused" \
    "$BUILD/sluice-ctl" --redis "redis://app:$pw@127.0.0.1:$(redis_tmp_free_port)" info q
SLUICE_REDIS_PASSWORD_FILE= fails_clean "password in the URL, bad port" "port" \
    "$BUILD/sluice-ctl" --redis "redis://app:$pw@127.0.0.1:99999" info q
SLUICE_REDIS_PASSWORD_FILE=$T/none fails_clean "missing file" "$T/none" c info q
: >"$T/empty"
SLUICE_REDIS_PASSWORD_FILE=$T/empty fails_clean "empty file" "is empty" c info q
printf '%s\nmore\n' "$pw" >"$T/two"
SLUICE_REDIS_PASSWORD_FILE=$T/two fails_clean "two lines" "more than one line" c info q
mkfifo "$T/fifo"
SLUICE_REDIS_PASSWORD_FILE=$T/fifo fails_clean "a FIFO" "not a regular file" \
    timeout 10 "$BUILD/sluice-ctl" --redis "$U" info q
SLUICE_REDIS_PASSWORD_FILE=/proc/self/environ SLUICE_X=$pw fails_clean "/proc/self/environ" \
    "NUL" c info q
SLUICE_REDIS_PASSWORD=$pw fails_clean "both variables" "set one" c info q
# The password from the file works with a final CRLF too.
printf '%s\r\n' "$pw" >"$T/crlf"
SLUICE_REDIS_PASSWORD_FILE=$T/crlf c info q >/dev/null 2>"$T/crlf.err" ||
    fail "a password file ending in CRLF: $(cat "$T/crlf.err")"
echo "ok: the password came from its file, and no output, error, metrics page or process showed it"
