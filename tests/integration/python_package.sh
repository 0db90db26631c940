#!/usr/bin/env bash
# The Python package installs offline and checks the library it loads:
# - `pip install ./python` (pip's default build isolation, no index
#   reachable) works in a clean /usr/bin/python3 -m venv
#   --system-site-packages, as do `pip wheel`, `pip install -e` and an
#   install from the sdist; the version is SLUICE_VERSION of common.h
#   everywhere (wheel, sdist, sluice.__version__) and written nowhere else;
# - the library is found through SLUICE_LIB, else by its soname through the
#   dynamic loader, else the ImportError names what was tried and the fix;
# - a library of another version, with other struct sizes or without
#   sluice_struct_size() is refused at import, before anything else is
#   called, with the library's path and expected vs found.
# test: long
# shellcheck source=tests/lib/integration.sh
. "$(dirname "$0")/../lib/integration.sh"

so=$BUILD/libsluice.so
[[ -f $so ]] || fail "$so is not built (make all)"
ver=$(sed -n 's/^#define SLUICE_VERSION "\(.*\)"/\1/p' "$ROOT/common/include/sluice/common.h")
major=$(sed -n 's/^#define SLUICE_VERSION_MAJOR \([0-9]*\)$/\1/p' "$ROOT/common/include/sluice/common.h")
[[ -n $ver && -n $major ]] || fail "no SLUICE_VERSION / SLUICE_VERSION_MAJOR in common.h"

# A library built with ASan (make asan) needs its runtime preloaded in
# Python (as tests/lib/python.sh does); pip itself runs without it.
asan=$(ldd "$so" 2>/dev/null | awk '/libasan/ && !n++ { print $3 }')
# clean CMD...: CMD in an environment of nothing but PATH and HOME (no
# PYTHONPATH, SLUICE_LIB or LD_LIBRARY_PATH of the caller), from outside
# the source tree. Extra VAR=value words may come first.
out=$T/elsewhere
mkdir -p "$out"
clean() {
    local -a e=(env -i PATH=/usr/bin:/bin HOME="$T/home")
    [[ -z $asan ]] || e+=("LD_PRELOAD=$asan" "ASAN_OPTIONS=detect_leaks=0")
    (cd "$out" && "${e[@]}" "$@")
}
# pip runs offline: any index it would contact is a closed port.
pipenv=(PIP_INDEX_URL=http://127.0.0.1:9/simple PIP_CONFIG_FILE=/dev/null
        PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_INPUT=1)
mkdir -p "$T/home"

note "the version is written in common.h only"
hits=$(cd "$ROOT/python" && { grep -rnF -e "\"$ver\"" -e "'$ver'" --include='*.py' --include='*.toml' . || true; })
[[ -z $hits ]] || fail "python/ spells the version out instead of reading common.h: $hits"

note "pyproject.toml reads the same with and without tomllib"
"$PY" - "$ROOT/python" <<'PYEOF' || fail "the backend's TOML subset reader disagrees with tomllib"
import sys, tomllib
sys.path.insert(0, sys.argv[1] + "/backend")
import sluice_backend as b
text = open(sys.argv[1] + "/pyproject.toml").read()
mine, real = b._parse_toml_subset(text, "pyproject.toml"), tomllib.loads(text)
assert mine == real, (mine, real)
assert real["build-system"]["requires"] == [], real["build-system"]
PYEOF

note "pip wheel ./python (build isolation on, offline)"
clean "${pipenv[@]}" "$PY" -m pip wheel --no-deps -w "$T/wheels" "$ROOT/python" >"$T/wheel.log" 2>&1 ||
    fail "pip wheel ./python failed: $(tail -n 20 "$T/wheel.log")"
whl=$T/wheels/sluice-$ver-py3-none-any.whl
[[ -f $whl ]] || fail "no $whl: $(ls "$T/wheels")"
"$PY" - "$whl" "$ver" <<'PYEOF' || fail "the wheel's contents are wrong"
import sys, zipfile, hashlib, base64
whl, ver = sys.argv[1], sys.argv[2]
z = zipfile.ZipFile(whl)
names = set(z.namelist())
di = "sluice-%s.dist-info/" % ver
for need in ["sluice/__init__.py", "sluice/_lib.py", "sluice/_consumer.py", "sluice/_producer.py",
             "sluice/torch.py", "sluice/_installed.py", di + "METADATA", di + "WHEEL", di + "RECORD"]:
    assert need in names, "missing " + need
assert not any("backend" in n or "__pycache__" in n for n in names), names
meta = z.read(di + "METADATA").decode()
assert "\nVersion: %s\n" % ver in meta, meta[:300]
assert "Name: sluice\n" in meta and "Requires-Python: >=3.8" in meta, meta[:300]
assert "Requires-Dist: numpy; extra" in meta and "\nRequires-Dist: numpy\n" not in meta, meta[:400]
inst = {}
exec(z.read("sluice/_installed.py").decode(), inst)
assert inst["VERSION"] == ver and inst["LIBDIR"] is None, inst
for line in z.read(di + "RECORD").decode().split():
    name, digest, size = line.rsplit(",", 2)
    if name == di + "RECORD":
        continue
    data = z.read(name)
    want = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    assert digest == "sha256=" + want and int(size) == len(data), line
assert len(z.read(di + "RECORD").decode().split()) == len(names), "RECORD does not list every file"
PYEOF

note "pip install ./python in a clean venv"
clean "$PY" -m venv --system-site-packages "$T/venv" >"$T/venv.log" 2>&1 ||
    fail "python3 -m venv failed: $(cat "$T/venv.log")"
vpy=$T/venv/bin/python
clean "${pipenv[@]}" "$vpy" -m pip install "$ROOT/python" >"$T/install.log" 2>&1 ||
    fail "pip install ./python failed: $(tail -n 20 "$T/install.log")"
site=$(clean "$vpy" -c 'import sysconfig; print(sysconfig.get_path("purelib"))')
[[ -f $site/sluice/_installed.py ]] || fail "pip install put no sluice/_installed.py in $site"
probe='import sluice; print(sluice.__version__, sluice.version(), sluice.library_path(), sluice.__file__)'
got=$(clean SLUICE_LIB="$so" "$vpy" -c "$probe" 2>&1) || fail "import sluice (SLUICE_LIB) failed: $got"
note "SLUICE_LIB: $got"
[[ $got == "$ver $ver $so $site/sluice/__init__.py" ]] ||
    fail "installed package: expected '$ver $ver $so $site/sluice/__init__.py', got '$got'"

note "found by its soname through the dynamic loader"
mkdir -p "$T/lib"
ln -s "$so" "$T/lib/libsluice.so.$major"
got=$(clean LD_LIBRARY_PATH="$T/lib" "$vpy" -c "$probe" 2>&1) || fail "import sluice by soname failed: $got"
[[ $got == "$ver $ver $T/lib/libsluice.so.$major "* ]] || fail "by soname: got '$got'"

note "nothing to load: the error says what was tried and what to do"
if clean "$vpy" -c 'import ctypes, sys; ctypes.CDLL(sys.argv[1])' "libsluice.so.$major" 2>/dev/null; then
    note "skipped: libsluice.so.$major is installed on this system"
else
    err=$(clean "$vpy" -c 'import sluice' 2>&1) && fail "import sluice without any library succeeded"
    for want in "ImportError: sluice: cannot load libsluice" "SLUICE_LIB (not set)" \
                "libsluice.so.$major (" "make install" "LD_LIBRARY_PATH"; do
        [[ $err == *"$want"* ]] || fail "the error lacks '$want': $err"
    done
    err=$(clean SLUICE_LIB="$T/nothing.so" "$vpy" -c 'import sluice' 2>&1) &&
        fail "import sluice with SLUICE_LIB pointing at nothing succeeded"
    [[ $err == *"$T/nothing.so (missing)"* && $err != *"libsluice.so.$major ("* ]] ||
        fail "SLUICE_LIB is tried alone and named: $err"
fi

note "editable install"
clean "$vpy" -m pip uninstall -y sluice >"$T/uninstall.log" 2>&1 || fail "pip uninstall: $(cat "$T/uninstall.log")"
clean "${pipenv[@]}" "$vpy" -m pip install -e "$ROOT/python" >"$T/editable.log" 2>&1 ||
    fail "pip install -e ./python failed: $(tail -n 20 "$T/editable.log")"
got=$(clean SLUICE_LIB="$so" "$vpy" -c "$probe" 2>&1) || fail "import sluice (editable) failed: $got"
[[ $got == "$ver $ver $so $ROOT/python/sluice/__init__.py" ]] || fail "editable: got '$got'"
clean "$vpy" -c 'import backend' 2>/dev/null && fail "the editable install makes python/backend importable"
clean "$vpy" -m pip uninstall -y sluice >"$T/uninstall.log" 2>&1 || fail "pip uninstall: $(cat "$T/uninstall.log")"

note "the sdist builds and installs away from the source tree"
"$PY" -c 'import sys; sys.path.insert(0, sys.argv[1]); import sluice_backend as b
print(b.build_sdist(sys.argv[2]))' "$ROOT/python/backend" "$T/sdist" >"$T/sdist.name" 2>"$T/sdist.err" ||
    fail "build_sdist: $(cat "$T/sdist.err")"
sdist=$T/sdist/$(cat "$T/sdist.name")
[[ $sdist == */sluice-$ver.tar.gz && -f $sdist ]] || fail "sdist is '$sdist'"
pkginfo=$(tar -xOzf "$sdist" "sluice-$ver/PKG-INFO") || fail "the sdist has no sluice-$ver/PKG-INFO"
grep -qx "Version: $ver" <<<"$pkginfo" || fail "the sdist's PKG-INFO lacks Version: $ver"
clean "${pipenv[@]}" "$vpy" -m pip install "$sdist" >"$T/sdist.log" 2>&1 ||
    fail "pip install of the sdist failed: $(tail -n 20 "$T/sdist.log")"
got=$(clean SLUICE_LIB="$so" "$vpy" -c "$probe" 2>&1) || fail "import sluice (from the sdist) failed: $got"
[[ $got == "$ver $ver $so $site/sluice/__init__.py" ]] || fail "from the sdist: got '$got'"

# --- the ABI check, against libraries that lie -----------------------------
# Each exports the three calls the check makes, and nothing else: the check
# must run (and refuse) before the package declares the rest of the API.
note "libraries that do not match are refused"
cat >"$T/liar.c" <<'CEOF'
#include <sluice/common.h>
#include <string.h>
#ifndef LIE_VERSION
#define LIE_VERSION SLUICE_VERSION
#endif
#ifndef LIE_NUMBER
#define LIE_NUMBER SLUICE_VERSION_NUMBER
#endif
size_t real_struct_size(const char *name);   /* common/src/abi.c, renamed */
__attribute__((visibility("default"))) const char *sluice_version(void) { return LIE_VERSION; }
__attribute__((visibility("default"))) uint32_t sluice_version_number(void) { return LIE_NUMBER; }
#ifndef NO_STRUCT_SIZE
__attribute__((visibility("default"))) size_t sluice_struct_size(const char *name)
{
#ifdef LIE_STRUCT
    if (name && strcmp(name, LIE_STRUCT) == 0)
        return LIE_SIZE;
#endif
    return real_struct_size(name);
}
#endif
CEOF
liar() {
    local name=$1
    shift
    cc -std=c11 -fPIC -fvisibility=hidden -I"$ROOT/common/include" -Dsluice_struct_size=real_struct_size \
        -c "$ROOT/common/src/abi.c" -o "$T/abi-$name.o" 2>"$T/cc.err" || fail "building abi.o: $(cat "$T/cc.err")"
    cc -std=c11 -fPIC -shared -fvisibility=hidden -I"$ROOT/common/include" "$@" "$T/liar.c" "$T/abi-$name.o" \
        -o "$T/$name.so" 2>"$T/cc.err" || fail "building $name.so: $(cat "$T/cc.err")"
}
opts_size=$(clean SLUICE_LIB="$so" "$vpy" -c \
    'import ctypes, sluice._lib as l; print(ctypes.sizeof(l.ConsumerOpts))') ||
    fail "cannot read sizeof(ConsumerOpts): $opts_size"
liar honest
liar version -DLIE_VERSION='"9.8.7"' -DLIE_NUMBER=0x09080700u
liar number -DLIE_NUMBER=0x7f000000u
liar opts -DLIE_STRUCT='"sluice_consumer_opts"' -DLIE_SIZE="($opts_size + 8)"
liar report -DLIE_STRUCT='"sluice_epoch_report"' -DLIE_SIZE=0
liar old -DNO_STRUCT_SIZE
# refused NAME TEXT...: importing with $T/NAME.so fails with every TEXT in
# the error, which also names the library, the package and the remedy.
refused() {
    local name=$1 err want
    shift
    err=$(clean SLUICE_LIB="$T/$name.so" "$vpy" -c 'import sluice' 2>&1) &&
        fail "the $name library was accepted"
    for want in "ImportError: sluice: $T/$name.so does not match this Python package (sluice $ver" \
                "Rebuild/reinstall" "$@"; do
        [[ $err == *"$want"* ]] || fail "$name: the error lacks '$want': $err"
    done
    [[ $err != *"lacks sluice_"* ]] || fail "$name: the API was declared before the check: $err"
    note "$name: $(grep -v '^ *File\|^Traceback\|^    ' <<<"$err" | tr '\n' ' ')"
}
refused version "version 9.8.7 (expected $ver)"
refused number "version number 0x7f000000 (expected 0x"
refused opts "sizeof(sluice_consumer_opts) $((opts_size + 8)) (expected $opts_size)"
refused report "sizeof(sluice_epoch_report) unknown to it (expected "
refused old "no sluice_struct_size()"
# The honest one passes the check; then it lacks the rest of the API.
err=$(clean SLUICE_LIB="$T/honest.so" "$vpy" -c 'import sluice' 2>&1) && fail "the honest stub was enough for import"
[[ $err == *"$T/honest.so lacks sluice_"* ]] || fail "the honest stub failed the ABI check: $err"

note "expected sizes come from the ctypes classes; every mirrored struct is checked"
clean SLUICE_LIB="$so" "$vpy" - <<'PYEOF' || fail "the ABI check does not follow the ctypes classes"
import ctypes, importlib, pkgutil
import sluice
from sluice import _lib
# Every ctypes Structure of the package mirrors a C struct and is checked
# (the loader's own dladdr record aside).
mirrored = set(_lib.STRUCTS.values())
for m in pkgutil.iter_modules(sluice.__path__):
    if m.name == "torch":
        continue
    mod = importlib.import_module("sluice." + m.name)
    for v in vars(mod).values():
        if isinstance(v, type) and issubclass(v, ctypes.Structure) and v is not _lib._DlInfo \
                and v.__module__.startswith("sluice"):
            assert v in mirrored, "%s.%s is not in _lib.STRUCTS" % (m.name, v.__name__)
_lib._check_abi(_lib.lib, _lib.LIBRARY_PATH)   # the real library passes
class Appended(ctypes.Structure):             # a field appended on this side only
    _fields_ = _lib.ConsumerOpts._fields_ + [("appended", ctypes.c_uint64)]
_lib.STRUCTS["sluice_consumer_opts"] = Appended
try:
    _lib._check_abi(_lib.lib, _lib.LIBRARY_PATH)
except ImportError as e:
    assert "sizeof(sluice_consumer_opts) %d (expected %d)" % (
        ctypes.sizeof(_lib.ConsumerOpts), ctypes.sizeof(Appended)) in str(e), e
else:
    raise AssertionError("a field appended to ConsumerOpts alone went unnoticed")
PYEOF

echo "ok: pip wheel, install, -e and sdist offline in a venv, version $ver from common.h;" \
    "SLUICE_LIB, soname and no library; 5 lying libraries refused"
