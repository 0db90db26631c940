#!/usr/bin/env bash
# The series sluice-ctl metrics exports stay bounded on a long job:
#  - a job of 12 tiny epochs: while it runs, every scrape has the
#    sluice_epoch_* series of at most 7 epochs (the open one, 3 before, up
#    to 3 after), the open epoch among them; once it is finished, those of
#    its last 3 epochs (9, 10, 11) only, while `sluice-ctl stat --json`
#    still shows all 12 (the estats hash keeps every epoch of the job).
# shellcheck source=tests/lib/integration.sh
. "$(dirname "$0")/../lib/integration.sh"
# shellcheck source=tests/lib/python.sh
. "$ROOT/tests/lib/python.sh"
need_bin sluice-ctl sluice-producer sluice-consume gen-tfrecord

# epochs.py URL: scrapes URL; prints "OPEN E1,E2,..." (sluice_job_epoch_open,
# then the epochs of the sluice_epoch_* series, sorted), or fails when the
# families disagree on them.
cat >"$T/epochs.py" <<'PYEOF'
import re, sys, urllib.request
body = urllib.request.urlopen(sys.argv[1], timeout=5).read().decode()
per, open_ = {}, None
for line in body.split("\n"):
    m = re.match(r'^(sluice_epoch_\w+)\{.*epoch="(\d+)".*\} ', line)
    if m:
        per.setdefault(m.group(1), set()).add(int(m.group(2)))
    m = re.match(r'^sluice_job_epoch_open\{.*\} (\d+)', line)
    if m:
        open_ = int(m.group(1))
sets = {frozenset(v) for v in per.values()}
if len(per) != 6 or len(sets) != 1:
    sys.exit("families %s disagree: %s" % (sorted(per), per))
print(open_, ",".join(str(e) for e in sorted(next(iter(sets)))))
PYEOF

redis_tmp_start
q=long
gen "$T/s.tfrecord" 40 5 10 100 >/dev/null
echo "tfrecord s.tfrecord" >"$T/job.manifest"
ctl create "$q" --max-batches 8 --max-bytes 1M >/dev/null
ctl submit "$q" --manifest "$T/job.manifest" --epochs 12 --batch-size 2 >/dev/null
port=$(redis_tmp_free_port)
bg "$T/m.out" "$T/m.err" "$BUILD/sluice-ctl" --redis "$REDIS_URL" metrics "$q" \
    --addr "127.0.0.1:$port" --interval-ms 50
mp=$BG_PID
wait_for 10 "$PY" "$T/epochs.py" "http://127.0.0.1:$port/metrics" >/dev/null ||
    fail "sluice-ctl metrics does not serve: $(cat "$T/m.err")"
# A trainer that spends 5-15 ms per batch: the job (240 batches) lasts
# long enough to be scraped while it runs.
bg "$T/c.out" "$T/c.err" "${PYCMD[@]}" "$ROOT/tests/faults/slow_consume.py" "$REDIS_URL" "$q" 1 5 15
c=$BG_PID
bg "$T/p.out" "$T/p.err" "$BUILD/sluice-producer" --redis "$REDIS_URL" --queue "$q" --quiet
p=$BG_PID
scrapes=0 most=0
while kill -0 "$c" 2>/dev/null; do
    r=$("$PY" "$T/epochs.py" "http://127.0.0.1:$port/metrics") || fail "scrape: $r"
    open=${r% *} list=${r#* }
    n=$(tr ',' '\n' <<<"$list" | wc -l)
    ((n <= 7)) || fail "epoch open $open: series of $n epochs ($list), more than 7"
    ((open >= 12)) || [[ ,$list, == *",$open,"* ]] || fail "the open epoch $open is not exported: $list"
    ((n > most)) && most=$n
    scrapes=$((scrapes + 1))
    sleep 0.05
done
rc=0; wait_pid "$c" 5 || rc=$?
((rc == 0)) || fail "consumer exit $rc: $(cat "$T/c.err")"
rc=0; wait_pid "$p" 30 || rc=$?
((rc == 0)) || fail "producer exit $rc: $(cat "$T/p.err")"
note "$scrapes scrapes while the job ran, at most $most epochs exported"
((scrapes >= 3)) || fail "only $scrapes scrapes while the job ran"
wait_for 10 eval '[[ $("$PY" "$T/epochs.py" "http://127.0.0.1:$port/metrics") == "12 9,10,11" ]]' ||
    fail "after the job: $("$PY" "$T/epochs.py" "http://127.0.0.1:$port/metrics") (want open 12, epochs 9,10,11)"
ctl stat "$q" --json >"$T/stat.json"
"$PY" -c 'import json,sys; j=json.load(open(sys.argv[1]))["job"]; e=[x["epoch"] for x in j["per_epoch"]]; sys.exit(0 if e == list(range(12)) else "stat per_epoch: %r" % e)' "$T/stat.json" ||
    fail "stat --json does not show the 12 epochs"
kill -INT "$mp"
rc=0; wait_pid "$mp" 10 || rc=$?
((rc == 0)) || fail "sluice-ctl metrics exit $rc"
echo "ok: 12 epochs, at most $most exported while running, 3 after the end"
