#!/usr/bin/env bash
# The docker-compose deployment, checked offline (there is no Docker daemon
# here: nothing is built or run):
# - docker-compose.yml validates with .env.example (docker-compose config -q,
#   and `make compose-check`) and without the password's secret file; the
#   redis service's start refuses a missing, empty or example password and
#   turns a real one into an ACL file that a real redis-server accepts;
# - the resolved configuration says what docs/DEPLOY.md promises: producers
#   scale (no container_name, no published port), Redis has AOF, noeviction,
#   maxmemory, a password from the secret file and a healthcheck that
#   keep it off every command line and environment, trainers are ranks 0..N-1 of SLUICE_WORLD=N, submit is one-shot;
# - the Dockerfile is multi-stage from debian:bookworm-slim and its final
#   stage runs as a user that is not root, without build tools, and carries
#   what `make install` wrote (programs, library, headers, sluice.pc, the
#   Python package, imported once in the build stage);
# - the helper scripts of docker/ behave (submit modes, healthcheck,
#   trainer install), run against stubs.
# test: long
# shellcheck source=tests/lib/integration.sh
. "$(dirname "$0")/../lib/integration.sh"

command -v docker-compose >/dev/null 2>&1 ||
    fail "docker-compose is not installed (scripts/install-deps.sh installs Debian's docker-compose)"

# A private copy of the project files: a developer's .env or exported
# SLUICE_*/REDIS_* variables must not change what is checked.
proj=$T/proj
mkdir -p "$proj"
for f in docker-compose.yml Dockerfile .env.example .dockerignore; do
    [[ -f $ROOT/$f ]] || fail "$f is missing"
    cp "$ROOT/$f" "$proj/"
done
cp -r "$ROOT/docker" "$proj/docker"
dc() { (cd "$proj" && env -i PATH="$PATH" HOME="$T" docker-compose -f docker-compose.yml "$@"); }

note "docker-compose config -q with .env.example"
dc --env-file .env.example config -q 2>"$T/dc.err" ||
    fail "docker-compose config -q failed: $(cat "$T/dc.err")"
env -i PATH="$PATH" HOME="$T" make -s -C "$ROOT" compose-check >"$T/make.out" 2>&1 ||
    fail "make compose-check failed: $(cat "$T/make.out")"
dc --env-file .env.example config >"$T/config.yml" 2>"$T/dc.err" ||
    fail "docker-compose config failed: $(cat "$T/dc.err")"

note "the password's secret: validates without it; the start of redis checks it"
[[ ! -e $proj/secrets/redis_password ]] || fail "the copy holds a secret file"
grep -q '^REDIS_PASSWORD=' "$proj/.env.example" && fail ".env.example sets REDIS_PASSWORD"
(cd "$proj" && env -i PATH="$PATH" HOME="$T" docker-compose -f docker-compose.yml config -q) 2>"$T/dc.err" ||
    fail "docker-compose config -q without an env file failed: $(cat "$T/dc.err")"
# The redis service's entrypoint script, run here with its paths in $T and
# a stub docker-entrypoint.sh that prints what it would run.
"$PY" - "$T/config.yml" >"$T/start.sh" <<'PYEOF' || fail "no entrypoint script in the redis service"
import sys, yaml
e = yaml.safe_load(open(sys.argv[1]))['services']['redis']['entrypoint']
assert e[:2] == ['sh', '-c'], e
print(e[2].replace('$$', '$'))
PYEOF
mkdir -p "$T/stub"
printf '#!/bin/sh\necho "run: $*"\n' >"$T/stub/docker-entrypoint.sh"
chmod +x "$T/stub/docker-entrypoint.sh"
sed -i "s|/run/secrets/redis_password|$T/secret|g; s|/tmp/users.acl|$T/users.acl|g" "$T/start.sh"
start() { env -i PATH="$T/stub:$PATH" sh -c "$(cat "$T/start.sh")" redis-entrypoint redis-server --appendonly yes; }
rc=0; start >"$T/s.out" 2>"$T/s.err" || rc=$?
((rc == 1)) && grep -q 'no Redis password: write one to secrets/redis_password' "$T/s.err" ||
    fail "no secret file: exit $rc, $(cat "$T/s.out" "$T/s.err")"
: >"$T/secret"
rc=0; start >"$T/s.out" 2>"$T/s.err" || rc=$?
((rc == 1)) && grep -q 'no Redis password' "$T/s.err" || fail "an empty secret: exit $rc"
echo change-me >"$T/secret"
rc=0; start >"$T/s.out" 2>"$T/s.err" || rc=$?
((rc == 1)) && grep -q 'example password change-me' "$T/s.err" ||
    fail "the example password: exit $rc, $(cat "$T/s.err")"
pw="compose-$RANDOM$RANDOM"
printf '%s\n' "$pw" >"$T/secret"
rc=0; start >"$T/s.out" 2>"$T/s.err" || rc=$?
((rc == 0)) || fail "a real password: exit $rc, $(cat "$T/s.err")"
grep -qx "run: redis-server --appendonly yes --aclfile $T/users.acl" "$T/s.out" ||
    fail "redis-server would not run with the ACL file: $(cat "$T/s.out")"
[[ $(stat -c %a "$T/users.acl") == 600 ]] || fail "the ACL file is not private"
! grep -qF -- "$pw" "$T/users.acl" "$T/s.out" "$T/s.err" || fail "the password itself is in the ACL file or output"
# A real redis-server takes the ACL file: the password opens it, no other.
port=$(redis_tmp_free_port)
bg "$T/r.out" "$T/r.err" redis-server --port "$port" --bind 127.0.0.1 --save '' \
    --aclfile "$T/users.acl"
up() { REDISCLI_AUTH=$pw redis-cli -p "$port" --no-auth-warning ping 2>/dev/null | grep -q PONG; }
wait_for 20 up || fail "redis-server with the ACL file does not accept the password: $(cat "$T/r.err" "$T/r.out" | tail -n 3)"
out=$(redis-cli -p "$port" ping 2>&1)
[[ $out == *NOAUTH* ]] || fail "redis-server with the ACL file answers without a password: $out"
REDISCLI_AUTH=$pw redis-cli -p "$port" --no-auth-warning shutdown nosave >/dev/null 2>&1 || true

note "resolved configuration"
if "$PY" -c 'import yaml' 2>/dev/null; then
    "$PY" - "$T/config.yml" "$proj/.env.example" <<'PYEOF' || fail "docker-compose.yml content check failed"
import re, sys, yaml

cfg = yaml.safe_load(open(sys.argv[1]))
env = {}
for line in open(sys.argv[2]):
    m = re.match(r'^([A-Z_][A-Z0-9_]*)=(.*)$', line.strip())
    if m:
        env[m.group(1)] = m.group(2)
svcs = cfg.get('services', {})
errors = []

def err(msg):
    errors.append(msg)

def argv(svc):
    # Compose keeps a string command as is; the container splits it.
    c = svc.get('command', [])
    return c.split() if isinstance(c, str) else [str(x) for x in c]

def environ(svc):
    e = svc.get('environment', {})
    if isinstance(e, list):
        e = dict(x.split('=', 1) for x in e)
    return {k: '' if v is None else str(v) for k, v in e.items()}

def opt(args, name):
    return args[args.index(name) + 1] if name in args[:-1] else None

def needs(svc, dep, cond):
    d = svc.get('depends_on', {})
    return isinstance(d, dict) and d.get(dep, {}).get('condition') == cond

SECRET = '/run/secrets/redis_password'
sec = cfg.get('secrets', {}).get('redis_password', {})
if not str(sec.get('file', '')).endswith('secrets/redis_password'):
    err('no top-level secret redis_password from secrets/redis_password: %r' % sec)

def has_secret(svc):
    return any((x if isinstance(x, str) else x.get('source')) == 'redis_password'
               for x in svc.get('secrets', []))
trainers = sorted(n for n in svcs if re.fullmatch(r'trainer\d+', n))
for need in ['redis', 'submit', 'producer', 'metrics']:
    if need not in svcs:
        err('no service %s' % need)
if not trainers:
    err('no trainerN service')
if errors:
    print('\n'.join(errors)); sys.exit(1)

for name, s in svcs.items():
    # A fixed name would make a second replica of any service fail.
    if 'container_name' in s:
        err('%s has container_name' % name)
    if not has_secret(s):
        err('%s: does not mount the redis_password secret' % name)
    e = environ(s)
    if any('PASSWORD' in k and k != 'SLUICE_REDIS_PASSWORD_FILE' or 'AUTH' in k for k in e):
        err('%s: a password variable in its environment: %s' % (name, sorted(e)))
    if name != 'redis':
        if e.get('SLUICE_REDIS_PASSWORD_FILE') != SECRET:
            err('%s: SLUICE_REDIS_PASSWORD_FILE is %r, not %s' % (
                name, e.get('SLUICE_REDIS_PASSWORD_FILE'), SECRET))
        if not e.get('SLUICE_REDIS_URL', '').startswith('redis://redis:6379'):
            err('%s: SLUICE_REDIS_URL is %r' % (name, e.get('SLUICE_REDIS_URL')))

# redis: durable, bounded, refuses rather than evicts, password, healthcheck.
r = svcs['redis']
a = argv(r)
if not str(r.get('image', '')).startswith('redis:7'):
    err('redis image is %r, not redis:7' % r.get('image'))
if opt(a, '--appendonly') != 'yes':
    err('redis: no --appendonly yes in %s' % a)
if opt(a, '--appendfsync') != env.get('REDIS_APPENDFSYNC', 'everysec'):
    err('redis: --appendfsync is %r' % opt(a, '--appendfsync'))
if opt(a, '--maxmemory-policy') != 'noeviction':
    err('redis: --maxmemory-policy is %r, not noeviction' % opt(a, '--maxmemory-policy'))
if opt(a, '--maxmemory') != env.get('REDIS_MAXMEMORY'):
    err('redis: --maxmemory is %r, .env.example says %r' % (opt(a, '--maxmemory'), env.get('REDIS_MAXMEMORY')))
if '--requirepass' in a:
    err('redis: --requirepass puts the password on the command line')
hc = r.get('healthcheck', {}).get('test', [])
hc = ' '.join(hc) if isinstance(hc, list) else str(hc)
if 'redis-cli' not in hc or 'ping' not in hc:
    err('redis: healthcheck is not a redis-cli ping: %r' % hc)
if ' -a ' in ' %s ' % hc or 'REDISCLI_AUTH=' not in hc or SECRET not in hc:
    err('redis: the healthcheck does not authenticate with REDISCLI_AUTH from %s: %r' % (SECRET, hc))
if not any(str(v).endswith(':/data') or ':/data:' in str(v) or
           (isinstance(v, dict) and v.get('target') == '/data') for v in r.get('volumes', [])):
    err('redis: no volume on /data')
if r.get('ports'):
    err('redis: publishes ports %s' % r['ports'])

# producer: scalable, follows the queue, metrics port exposed only.
p = svcs['producer']
a = argv(p)
if p.get('ports'):
    err('producer publishes host ports %s: --scale producer=N would collide' % p['ports'])
if 'deploy' in p and p['deploy'].get('mode') == 'global':
    err('producer: deploy.mode global')
if a[:1] != ['sluice-producer'] or '--follow' not in a:
    err('producer: command is not sluice-producer ... --follow: %s' % a)
if opt(a, '--queue') != env.get('SLUICE_QUEUE'):
    err('producer: --queue %r, .env.example says %r' % (opt(a, '--queue'), env.get('SLUICE_QUEUE')))
maddr = opt(a, '--metrics-addr') or ''
if not maddr.startswith('0.0.0.0:'):
    err('producer: --metrics-addr %r does not listen on all addresses' % maddr)
if maddr.split(':')[-1] not in [str(x).split('/')[0] for x in p.get('expose', [])]:
    err('producer: metrics port of %r not in expose %s' % (maddr, p.get('expose')))
if p.get('restart') != 'unless-stopped':
    err('producer: restart is %r' % p.get('restart'))
if not needs(p, 'redis', 'service_healthy'):
    err('producer does not wait for a healthy redis')
vols = [str(v) for v in p.get('volumes', [])]
if not vols or not all(v.endswith(':ro') for v in vols):
    err('producer: data volumes not read-only: %s' % vols)
# Data roots: job mode refuses to start without; the data volume among them.
roots = environ(p).get('SLUICE_DATA_ROOTS') or ''
if roots != env.get('SLUICE_DATA_ROOTS'):
    err('producer: SLUICE_DATA_ROOTS is %r, .env.example says %r'
        % (roots, env.get('SLUICE_DATA_ROOTS')))
if '/data' not in roots.split(':'):
    err('producer: the data volume /data is not among its data roots %r' % roots)

# submit: one-shot, after a healthy redis.
s = svcs['submit']
if s.get('restart', 'no') != 'no':
    err('submit: restart is %r, not "no"' % s.get('restart'))
if not needs(s, 'redis', 'service_healthy'):
    err('submit does not wait for a healthy redis')
se = environ(s)
for k in ['SLUICE_QUEUE', 'SLUICE_MAX_BATCHES', 'SLUICE_MAX_BYTES', 'SLUICE_WORLD',
          'SLUICE_MANIFEST', 'SLUICE_EPOCHS', 'SLUICE_BATCH_SIZE', 'SLUICE_SUBMIT']:
    if k in env and se.get(k) != env[k]:
        err('submit: %s is %r, .env.example says %r' % (k, se.get(k), env[k]))

# trainers: one service per rank, ranks 0..N-1 of SLUICE_WORLD = N.
world = env.get('SLUICE_WORLD')
ranks = []
for n in trainers:
    a = argv(svcs[n])
    if a[:1] != ['sluice-trainer']:
        err('%s: command is not sluice-trainer: %s' % (n, a))
    if opt(a, '--world') != world:
        err('%s: --world %r, SLUICE_WORLD is %r' % (n, opt(a, '--world'), world))
    if opt(a, '--queue') != env.get('SLUICE_QUEUE'):
        err('%s: --queue %r' % (n, opt(a, '--queue')))
    if opt(a, '--rank') != n[len('trainer'):]:
        err('%s: --rank %r does not match its name' % (n, opt(a, '--rank')))
    ranks.append(opt(a, '--rank'))
    if not needs(svcs[n], 'submit', 'service_completed_successfully'):
        err('%s does not wait for the submit service' % n)
    if svcs[n].get('ports'):
        err('%s publishes ports' % n)
if sorted(ranks, key=lambda x: int(x) if x and x.isdigit() else -1) != [str(i) for i in range(len(trainers))] \
        or str(len(trainers)) != world:
    err('trainer ranks %s are not 0..SLUICE_WORLD-1 (SLUICE_WORLD=%s)' % (ranks, world))

# metrics: the queue-wide endpoint.
m = svcs['metrics']
a = argv(m)
if a[:3] != ['sluice-ctl', 'metrics', env.get('SLUICE_QUEUE')] or not (opt(a, '--addr') or '').startswith('0.0.0.0:'):
    err('metrics: command is %s' % a)

if errors:
    print('docker-compose.yml:\n  ' + '\n  '.join(errors))
    sys.exit(1)
print('compose content ok: services %s' % ' '.join(sorted(svcs)))
PYEOF
else
    # Without python3-yaml (docker-compose depends on it, so rarely): the
    # same key points by text. Block of a service = from "  name:" to the
    # next line indented by exactly two spaces.
    block() { awk -v s="  $1:" '$0 == s {on = 1; next} on && /^  [^ ]/ {exit} on' "$T/config.yml"; }
    grep -q 'container_name' "$T/config.yml" && fail "a service has container_name"
    block producer | grep -q '^    ports:' && fail "producer publishes host ports"
    block producer | grep -q -- '--follow' || fail "producer does not run with --follow"
    block redis | grep -q -- '- --appendonly' || fail "redis has no --appendonly"
    block redis | grep -A1 -- '- --appendonly' | grep -q '"*yes"*' || fail "redis: appendonly is not yes"
    block redis | grep -A1 -- '- --maxmemory-policy' | grep -q noeviction || fail "redis: no noeviction"
    block redis | grep -q 'REDISCLI_AUTH' || fail "redis: no REDISCLI_AUTH for the healthcheck"
    block redis | grep -q -- '--requirepass' && fail "redis: --requirepass on its command line"
    block submit | grep -q "restart: \"*no\"*" || fail "submit is not one-shot"
fi

note "Dockerfile"
"$PY" - "$proj/Dockerfile" <<'PYEOF' || fail "Dockerfile check failed"
import os, re, sys

lines = []
for raw in open(sys.argv[1]).read().replace('\\\n', ' ').splitlines():
    raw = raw.strip()
    if raw and not raw.startswith('#'):
        lines.append(raw)
stages = []                     # [(from line, [instructions])]
for l in lines:
    if l.split()[0].upper() == 'FROM':
        stages.append((l, []))
    elif stages:
        stages[-1][1].append(l)
errors = []
if len(stages) < 2:
    errors.append('not multi-stage: %d FROM' % len(stages))
for f, _ in stages:
    if f.split()[1] != 'debian:bookworm-slim':
        errors.append('stage not from debian:bookworm-slim: %s' % f)
final = stages[-1][1] if stages else []
users = [l.split(None, 1)[1].strip() for l in final if l.split()[0].upper() == 'USER']
if not users:
    errors.append('the final stage has no USER: it would run as root')
elif users[-1].split(':')[0] in ('root', '0'):
    errors.append('the final stage runs as %s' % users[-1])
runtime = ' '.join(final)
for bad in ['build-essential', '-dev ', 'gcc', 'make ']:
    if bad in runtime + ' ':
        errors.append('the final stage installs or runs %r' % bad.strip())
build = ' '.join(stages[0][1]) if stages else ''
for need in ['make', 'install PREFIX=/usr/local DESTDIR=/out', 'libhiredis-dev', 'libevent-dev',
             'libmsgpack-dev', 'zlib1g-dev', 'libssl-dev', 'liblz4-dev', 'libzstd-dev',
             'pkg-config', 'build-essential']:
    if need not in build:
        errors.append('the build stage lacks %r' % need)
for need in ['libhiredis0.14', 'libevent-2.1-7', 'libevent-pthreads-2.1-7', 'libmsgpackc2', 'zlib1g',
             'liblz4-1', 'libzstd1', 'libssl3', 'ca-certificates']:
    if need not in runtime:
        errors.append('the final stage lacks the runtime library %s' % need)
if 'COPY --from=' not in runtime:
    errors.append('the final stage copies nothing from the build stage')
# The SDK a trainer image builds FROM or copies from (docs/DEPLOY.md): what
# `make install` wrote under /out/usr/local must reach /usr/local.
copies = [l.split()[-2:] for l in final if l.split()[0].upper() == 'COPY' and '--from=build' in l.split()]
def copied_to(src_path, s, d):
    """Where COPY s d puts src_path, or None when it does not copy it."""
    s = s.rstrip('/')
    if src_path == s:        # the file itself, into a folder or to a name
        return d + os.path.basename(s) if d.endswith('/') else d
    if src_path.startswith(s + '/'):
        return d.rstrip('/') + src_path[len(s):]
    return None
for need in ['bin/sluice-ctl', 'include/sluice/consumer.h', 'lib/libsluice.so.0', 'lib/libsluice.so',
             'lib/libsluice.a', 'lib/pkgconfig/sluice.pc', 'lib/python3.11/dist-packages/sluice']:
    src_path = '/out/usr/local/' + need
    if not any(copied_to(src_path, s, d) == '/usr/local/' + need for s, d in copies):
        errors.append('the final stage does not copy %s to /usr/local/%s' % (src_path, need))
for need in ['python3', "import sluice"]:
    if need not in build:
        errors.append('the build stage lacks %r (the installed Python package is imported there)' % need)
# Every local file a COPY names must exist.
base = os.path.dirname(sys.argv[1])
for l in final + (stages[0][1] if stages else []):
    w = l.split()
    if w[0].upper() == 'COPY' and not any(x.startswith('--from=') for x in w) and w[1] != '.':
        for src in w[1:-1]:
            if not src.startswith('--') and not os.path.exists(os.path.join(base, src)):
                errors.append('COPY source %s does not exist' % src)
if errors:
    print('Dockerfile:\n  ' + '\n  '.join(errors))
    sys.exit(1)
print('Dockerfile ok: %d stages, runs as %s' % (len(stages), users[-1]))
PYEOF

# The runtime stage installs shared libraries by package name: every
# library the programs built here load must come from one of them (or from
# the base image), or the image would fail at its first start.
note "runtime libraries"
runtime=$(awk '/^FROM/ {s = ""} {s = s $0 "\n"} END {printf "%s", s}' "$proj/Dockerfile")
checked=0
for f in "$BUILD"/sluice-producer "$BUILD"/sluice-ctl "$BUILD"/sluice-consume "$BUILD"/libsluice.so \
         "$BUILD"/sluice-trainer; do
    [[ -e $f ]] || continue
    libs=$(ldd "$f" 2>/dev/null | awk '/=>/ && $3 ~ /^\// {print $3}') || true
    # Sanitizer builds (make asan) load libasan; the image is never built so.
    grep -q 'libasan\|libubsan' <<<"$libs" && continue
    for l in $libs; do
        pkg=$(dpkg -S "$(readlink -f "$l")" 2>/dev/null || dpkg -S "$l" 2>/dev/null) || true
        pkg=${pkg%%:*}
        [[ -n $pkg ]] || fail "$f loads $l, which no Debian package provides"
        case $pkg in libc6 | libgcc-s1 | libstdc++6) continue ;; esac   # in debian:bookworm-slim
        grep -qw -- "$pkg" <<<"$runtime" ||
            fail "$(basename "$f") loads $l from package $pkg, which the Dockerfile's runtime stage does not install"
    done
    checked=$((checked + 1))
done
note "runtime libraries of $checked programs are in the image"

for pat in '.env' 'build'; do
    grep -qxE "/?$pat/?" "$proj/.dockerignore" || fail ".dockerignore does not exclude $pat"
done
for s in "$ROOT"/docker/*.sh; do
    bash -n "$s" || fail "$s: syntax error"
done

# --- docker/submit.sh against a stub sluice-ctl --------------------------
note "submit modes"
stub=$T/sluice-ctl
cat >"$stub" <<'EOF'
#!/usr/bin/env bash
# Stub: a queue "exists" when $STUB/q does; every call is logged.
echo "$*" >>"$STUB/log"
case $1 in
    create) [[ -e $STUB/q ]] && { echo "sluice-ctl: queue '$2' exists already (sluice-ctl delete $2 removes it)" >&2; exit 1; }
            [[ -e $STUB/down ]] && { echo "sluice-ctl: redis://redis:6379: Connection refused" >&2; exit 1; }
            touch "$STUB/q" ;;
    delete) [[ -e $STUB/q ]] || { echo "sluice-ctl: queue '$2' does not exist (create it with: sluice-ctl create $2)" >&2; exit 1; }
            rm -f "$STUB/q" ;;
    info)   echo "queue: $2"; echo "coordinated: $(cat "$STUB/ranks" 2>/dev/null || echo 2) ranks, remainder drop" ;;
    submit) [[ -e $STUB/running ]] && { echo "sluice-ctl: queue '$2': the queue runs a job (epoch 0 of 3); wait for it to finish or delete the queue" >&2; exit 1; }
            exit "$(cat "$STUB/submit_rc" 2>/dev/null || echo 0)" ;;
esac
EOF
chmod +x "$stub"
export STUB=$T/stub
mkdir -p "$STUB"
# run_submit MODE: runs docker/submit.sh with the stub; sets rc and calls.
run_submit() {
    : >"$STUB/log"
    rc=0
    env SLUICE_CTL="$stub" SLUICE_QUEUE=train SLUICE_MANIFEST=/m SLUICE_WORLD=2 \
        SLUICE_EPOCHS=3 SLUICE_BATCH_SIZE=64 SLUICE_SHUFFLE_SEED=7 SLUICE_MAX_BATCHES=10 \
        SLUICE_MAX_BYTES=1M SLUICE_SUBMIT="$1" bash "$ROOT/docker/submit.sh" >"$T/submit.out" 2>&1 || rc=$?
    calls=$(cut -d' ' -f1 "$STUB/log" | tr '\n' ' ')
}
run_submit auto
[[ $rc == 0 && $calls == "create submit " ]] || fail "auto on a new queue: rc=$rc calls='$calls' $(cat "$T/submit.out")"
grep -qx 'create train --max-batches 10 --max-bytes 1M --consumers 2 --coordinated --remainder drop' "$STUB/log" ||
    fail "create arguments: $(cat "$STUB/log")"
grep -qx 'submit train --manifest /m --epochs 3 --batch-size 64 --shuffle-seed 7' "$STUB/log" ||
    fail "submit arguments: $(cat "$STUB/log")"
run_submit once
[[ $rc == 0 && $calls == "create info " ]] || fail "once on an existing queue submitted: rc=$rc calls='$calls'"
# A second `up` while the job runs: sluice-ctl refuses, the job is kept.
touch "$STUB/running"
run_submit auto
[[ $rc == 0 && $calls == "create info submit " ]] || fail "auto on a running job: rc=$rc calls='$calls' $(cat "$T/submit.out")"
grep -q 'keeping it' "$T/submit.out" || fail "auto on a running job does not say it keeps it: $(cat "$T/submit.out")"
rm -f "$STUB/running"
run_submit auto
[[ $rc == 0 && $calls == "create info submit " ]] || fail "auto after a finished job: rc=$rc calls='$calls'"
echo 3 >"$STUB/ranks"
run_submit auto
[[ $rc == 1 && $calls == "create info " ]] || fail "auto on a queue of another world size: rc=$rc calls='$calls'"
grep -q 'SLUICE_SUBMIT=recreate' "$T/submit.out" || fail "world size mismatch without a hint: $(cat "$T/submit.out")"
run_submit recreate
[[ $rc == 0 && $calls == "delete create submit " ]] || fail "recreate: rc=$rc calls='$calls'"
rm -f "$STUB/ranks" "$STUB/q"
echo 1 >"$STUB/submit_rc"
run_submit auto
[[ $rc == 1 && $calls == "create submit delete " && ! -e $STUB/q ]] ||
    fail "a failed submission must delete the queue it created: rc=$rc calls='$calls'"
rm -f "$STUB/submit_rc"
touch "$STUB/down"
run_submit auto
[[ $rc == 1 && $calls == "create " ]] || fail "create failing for another reason: rc=$rc calls='$calls'"
grep -q 'Connection refused' "$T/submit.out" || fail "the create error was not shown: $(cat "$T/submit.out")"
rm -f "$STUB/down"
run_submit sometimes
[[ $rc == 1 && -z $calls ]] || fail "a bad SLUICE_SUBMIT was accepted: rc=$rc calls='$calls'"

# --- docker/healthcheck.sh against a local HTTP server -------------------
note "healthcheck"
web=$T/web
mkdir -p "$web"
echo ok >"$web/healthz"
port=$(redis_tmp_free_port)
bg "$T/web.out" "$T/web.err" "$PY" -m http.server --bind 127.0.0.1 --directory "$web" "$port"
for _ in $(seq 100); do
    bash "$ROOT/docker/healthcheck.sh" "$port" /healthz 2>/dev/null && break
    sleep 0.05
done
bash "$ROOT/docker/healthcheck.sh" "$port" /healthz || fail "healthcheck: 200 on /healthz reported unhealthy"
if bash "$ROOT/docker/healthcheck.sh" "$port" /nothing 2>/dev/null; then
    fail "healthcheck: a 404 reported healthy"
fi
# A server that accepts connections and never answers: unhealthy in ~3 s.
mute=$(redis_tmp_free_port)
bg "$T/mute.out" "$T/mute.err" "$PY" -c '
import socket, sys, time
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("127.0.0.1", int(sys.argv[1]))); s.listen(8); time.sleep(60)' "$mute"
sleep 0.3
start=$SECONDS
if bash "$ROOT/docker/healthcheck.sh" "$mute" /healthz 2>/dev/null; then
    fail "healthcheck: a silent server reported healthy"
fi
((SECONDS - start <= 6)) || fail "healthcheck took $((SECONDS - start)) s on a silent server"

# --- docker/install-trainer.sh -------------------------------------------
note "install-trainer"
mkdir -p "$T/tree/build"
printf '#!/bin/sh\n' >"$T/tree/build/sluice-trainer"
chmod +x "$T/tree/build/sluice-trainer"
(cd "$T/tree" && BUILD=build bash "$ROOT/docker/install-trainer.sh" "$T/out/bin") || fail "install-trainer did not install a built trainer"
[[ -x $T/out/bin/sluice-trainer ]] || fail "install-trainer: no $T/out/bin/sluice-trainer"
rm -f "$T/tree/build/sluice-trainer"
if (cd "$T/tree" && BUILD=build bash "$ROOT/docker/install-trainer.sh" "$T/out2/bin") 2>/dev/null; then
    fail "install-trainer succeeded without a trainer"
fi

# --- rehearsal: the services' commands, run on this host -----------------
# Without Docker, the next best proof that the compose file is honest: run
# what it would run — each service's command and environment exactly as
# `docker-compose config` resolves them, with the programs built here —
# against a redis-server started with the redis service's arguments.
# Changed only: the Redis address (the private server), the listen
# addresses (a container has its own network; here they would collide), the
# epochs (1, for time), the manifest path (docker/, not the image's) and
# the data root /data (the volume's mount point: a folder in $T here).
dataset=/usr/share/datasets/fashion-mnist
if [[ ! -x $BUILD/sluice-trainer || ! -r $dataset/train-images-idx3-ubyte.gz ]]; then
    note "rehearsal skipped: needs $BUILD/sluice-trainer and the dataset-fashion-mnist package"
    echo "ok: compose file, Dockerfile and docker/ helpers (no rehearsal)"
    exit 0
fi
note "rehearsal of the services on this host"
# svc SERVICE cmd|env: the command (one word a line) or the environment
# (KEY=value lines) of a service in the resolved configuration.
svc() {
    "$PY" - "$T/config.yml" "$1" "$2" <<'PYEOF'
import sys, yaml
s = yaml.safe_load(open(sys.argv[1]))['services'][sys.argv[2]]
if sys.argv[3] == 'cmd':
    c = s.get('command', [])
    print('\n'.join(c.split() if isinstance(c, str) else [str(x) for x in c]))
else:
    print('\n'.join('%s=%s' % (k, '' if v is None else v) for k, v in s.get('environment', {}).items()))
PYEOF
}
# Redis as its entrypoint starts it, with the secret of the checks above
# ($T/secret holds $pw): the stub prints the command it would run.
mapfile -t rcmd < <(svc redis cmd)
line=$(env -i PATH="$T/stub:$PATH" sh -c "$(cat "$T/start.sh")" redis-entrypoint "${rcmd[@]}") ||
    fail "the redis entrypoint failed: $line"
read -r -a rargs <<<"${line#run: }"
mkdir -p "$T/data"
redis_tmp_start "${rargs[@]:1}"
[[ $(REDISCLI_AUTH=$pw redis-cli -p "$REDIS_PORT" --no-auth-warning ping) == PONG ]] ||
    fail "the redis healthcheck (redis-cli ping with REDISCLI_AUTH) does not get PONG"
[[ $(redis-cli -p "$REDIS_PORT" ping 2>&1) == *NOAUTH* ]] || fail "redis answers without the password"
# svc_env SERVICE: its environment, with the private server's address and
# the secret's path here.
svc_env() {
    svc "$1" env | sed -e "s|^SLUICE_REDIS_URL=.*|SLUICE_REDIS_URL=$REDIS_URL|" \
        -e "s|^SLUICE_REDIS_PASSWORD_FILE=.*|SLUICE_REDIS_PASSWORD_FILE=$T/secret|" \
        -e "/^SLUICE_DATA_ROOTS=/s#\([=:]\)/data\(:\|\$\)#\1$T/data\2#"
}

# start SERVICE OUT [ADDR-OPTION]: runs the service's command (its program
# from $BUILD) in its environment, in the background; with ADDR-OPTION the
# listen address after that option moves to a free loopback port ($PORT).
start_svc() {
    local name=$1 out=$2 addropt=${3:-} i
    local -a cmd envv
    mapfile -t cmd < <(svc "$name" cmd)
    mapfile -t envv < <(svc_env "$name")
    cmd[0]=$BUILD/${cmd[0]}
    if [[ -n $addropt ]]; then
        PORT=$(redis_tmp_free_port)
        for ((i = 0; i < ${#cmd[@]} - 1; i++)); do
            [[ ${cmd[i]} == "$addropt" ]] && cmd[i + 1]=127.0.0.1:$PORT
        done
    fi
    bg "$out" "$out.err" env -i PATH="$PATH" "${envv[@]}" "${cmd[@]}"
}

mapfile -t senv < <(svc_env submit)
env -i PATH="$PATH" "${senv[@]}" SLUICE_EPOCHS=1 SLUICE_CTL="$BUILD/sluice-ctl" \
    SLUICE_MANIFEST="$ROOT/docker/fashion-mnist.manifest" bash "$ROOT/docker/submit.sh" >"$T/sub.out" 2>&1 ||
    fail "submit service: $(cat "$T/sub.out")"
prod_ports=() prod_pids=()
for i in 1 2; do
    start_svc producer "$T/producer$i.out" --metrics-addr
    prod_ports+=("$PORT")
    prod_pids+=("$BG_PID")
done
start_svc metrics "$T/metrics.out" --addr
metrics_port=$PORT metrics_pid=$BG_PID
start_svc trainer0 "$T/trainer0.out"
t0=$BG_PID
start_svc trainer1 "$T/trainer1.out"
t1=$BG_PID
# The healthchecks of the compose file, on the real endpoints.
checks=("${prod_ports[0]} /healthz ${prod_pids[0]} producer1" "${prod_ports[1]} /healthz ${prod_pids[1]} producer2"
        "$metrics_port /metrics $metrics_pid metrics")
for c in "${checks[@]}"; do
    read -r port path pid name <<<"$c"
    for _ in $(seq 100); do
        kill -0 "$pid" 2>/dev/null || break
        bash "$ROOT/docker/healthcheck.sh" "$port" "$path" 2>/dev/null && break
        sleep 0.1
    done
    kill -0 "$pid" 2>/dev/null || fail "the $name service exited: $(tail -n 3 "$T/$name.out.err")"
    bash "$ROOT/docker/healthcheck.sh" "$port" "$path" ||
        fail "the $name healthcheck fails on 127.0.0.1:$port$path"
done
rc0=0 rc1=0
wait_pid "$t0" 90 || rc0=$?
wait_pid "$t1" 90 || rc1=$?
((rc0 == 0 && rc1 == 0)) ||
    fail "trainers exit $rc0/$rc1: $(tail -n 3 "$T/trainer0.out.err" "$T/trainer0.out" "$T/trainer1.out.err" "$T/trainer1.out")"
for r in 0 1; do
    last=$(tail -n 1 "$T/trainer$r.out")
    [[ $last == rank=$r\ epochs=1\ * ]] || fail "trainer$r did not finish the job: $last"
    note "trainer$r: $last"
done
# With --follow the producers outlive the job, as `restart: unless-stopped` expects.
for p in "${prod_pids[@]}"; do
    kill -0 "$p" 2>/dev/null || fail "a producer exited after the job: $(tail -n 3 "$T"/producer*.out.err)"
done

echo "ok: compose file, Dockerfile and docker/ helpers; the services' commands ran a job here"
