#!/usr/bin/env bash
# `make install` installs the Python package too, and it works from
# anywhere with nothing but the PREFIX: into a temporary PREFIX (no
# DESTDIR, so the ldconfig step runs; a stub stands in for it), then from
# a folder outside the tree, with PYTHONPATH = the installed package's
# folder and no SLUICE_LIB or LD_LIBRARY_PATH, /usr/bin/python3 imports
# sluice over the installed library and pushes and consumes a batch on a
# private Redis. `make uninstall` removes all of it.
# Alone (tests/run.sh): its `make install` relinks, in $BUILD, whatever is
# older than the Makefile, under the feet of tests running its programs.
# test: serial
# shellcheck source=tests/lib/integration.sh
. "$(dirname "$0")/../lib/integration.sh"

prefix=$T/prefix
ver=$(sed -n 's/^#define SLUICE_VERSION "\(.*\)"/\1/p' "$ROOT/common/include/sluice/common.h")
major=$(sed -n 's/^#define SLUICE_VERSION_MAJOR \([0-9]*\)$/\1/p' "$ROOT/common/include/sluice/common.h")
cat >"$T/ldconfig" <<EOF
#!/bin/sh
echo "ldconfig \$*" >>"$T/ldconfig.log"
EOF
chmod +x "$T/ldconfig"

# BUILD (and SAN under `make asan`) reach the sub-make through the
# environment and MAKEFLAGS; passing BUILD keeps it on the tree under test.
make -s -C "$ROOT" install PREFIX="$prefix" LDCONFIG="$T/ldconfig" BUILD="$BUILD" >"$T/make.log" 2>&1 ||
    fail "make install failed: $(tail -n 20 "$T/make.log")"
pydir=$(sed -n 's/^sluice: the Python package is in //p' "$T/make.log")
xy=$("$PY" -c 'import sys; print("python%d.%d" % sys.version_info[:2])')
[[ $pydir == "$prefix/lib/$xy/dist-packages" ]] ||
    fail "make install put the package in '$pydir', expected $prefix/lib/$xy/dist-packages: $(cat "$T/make.log")"
for f in __init__.py _lib.py _consumer.py _producer.py torch.py _installed.py; do
    [[ -f $pydir/sluice/$f ]] || fail "make install did not install $pydir/sluice/$f"
done
if [[ $(id -u) == 0 ]]; then
    [[ -s $T/ldconfig.log ]] || fail "make install as root with no DESTDIR did not run ldconfig"
else
    [[ ! -e $T/ldconfig.log ]] || fail "make install ran ldconfig as a user"
fi
# _installed.py is what the wheel backend writes, with the library's folder.
want=$("$PY" -c 'import sys; sys.path.insert(0, sys.argv[1]); import sluice_backend as b
sys.stdout.write(b.installed_py(sys.argv[2], sys.argv[3]))' "$ROOT/python/backend" "$ver" "$prefix/lib")
[[ $(cat "$pydir/sluice/_installed.py") == "$want" ]] ||
    fail "_installed.py differs from the backend's: $(cat "$pydir/sluice/_installed.py") vs $want"

redis_tmp_start
q=pyinst
"$prefix/bin/sluice-ctl" --redis "$REDIS_URL" create "$q" --max-batches 10 --max-bytes 1M >/dev/null ||
    fail "the installed sluice-ctl cannot create a queue"

mkdir -p "$T/elsewhere"
env=(env -i PATH=/usr/bin:/bin HOME="$T" PYTHONPATH="$pydir")
asan=$(ldd "$prefix/lib/libsluice.so.$major" 2>/dev/null | awk '/libasan/ && !n++ { print $3 }')
[[ -z $asan ]] || env+=("LD_PRELOAD=$asan" "ASAN_OPTIONS=detect_leaks=0")
out=$(cd "$T/elsewhere" && "${env[@]}" "$PY" - "$REDIS_URL" "$q" 2>&1 <<'PYEOF'
import os, sys
import sluice
url, q = sys.argv[1], sys.argv[2]
print("file", sluice.__file__)
print("lib", sluice.library_path())
print("version", sluice.__version__, sluice.version())
with sluice.Producer(url, q) as p:
    p.push_records([b"installed", b"package"])
    p.flush()
with sluice.Consumer(url, q, timeout_ms=10000) as c:
    b = c.next_batch(timeout_ms=10000)
    assert b is not None, "no batch within 10 s"
    print("records", ",".join(bytes(r).decode() for r in b.records))
    b.release()
PYEOF
) || fail "python with the installed package failed: $out"
note "$out"
grep -qx "file $pydir/sluice/__init__.py" <<<"$out" || fail "sluice was not imported from $pydir: $out"
grep -qx "lib $prefix/lib/libsluice.so.$major" <<<"$out" ||
    fail "sluice did not load $prefix/lib/libsluice.so.$major: $out"
grep -qx "version $ver $ver" <<<"$out" || fail "versions: $out"
grep -qx "records installed,package" <<<"$out" || fail "the batch did not come back whole: $out"

rm -f "$T/ldconfig.log"
make -s -C "$ROOT" uninstall PREFIX="$prefix" LDCONFIG="$T/ldconfig" BUILD="$BUILD" >"$T/un.log" 2>&1 ||
    fail "make uninstall failed: $(cat "$T/un.log")"
left=$(find "$prefix" -type f -o -type l)
[[ -z $left ]] || fail "make uninstall left: $left"
if [[ $(id -u) == 0 ]]; then
    [[ -s $T/ldconfig.log ]] || fail "make uninstall as root with no DESTDIR did not run ldconfig"
fi
echo "ok: make install's Python package in $pydir loads $prefix/lib/libsluice.so.$major and moves a batch; uninstall removes it"
