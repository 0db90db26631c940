#!/usr/bin/env bash
# `make install` into a DESTDIR gives a usable SDK: headers, libsluice,
# sluice.pc, the programs and the Python package (in
# /usr/lib/python3/dist-packages for PREFIX=/usr, recording /usr/lib as the
# library's folder), and does not run ldconfig (a staging tree is not the
# system). A small C program built with nothing but
# `pkg-config --cflags --libs sluice` (sysroot = the DESTDIR) compiles,
# links and runs against the installed library.
# (tests/integration/python_install.sh runs the installed Python package.)
# Alone (tests/run.sh): its `make install` relinks, in $BUILD, whatever is
# older than the Makefile, under the feet of tests running its programs.
# test: serial
# shellcheck source=tests/lib/integration.sh
. "$(dirname "$0")/../lib/integration.sh"

dest=$T/root
# BUILD (and SAN under `make asan`) reach the sub-make through the
# environment and MAKEFLAGS; passing BUILD keeps it on the tree under test.
printf '#!/bin/sh\necho "ldconfig $*" >>"%s/ldconfig.log"\n' "$T" >"$T/ldconfig"
chmod +x "$T/ldconfig"
make -s -C "$ROOT" install PREFIX=/usr DESTDIR="$dest" LDCONFIG="$T/ldconfig" BUILD="$BUILD" \
    >"$T/make.log" 2>&1 || fail "make install failed: $(tail -n 20 "$T/make.log")"
[[ ! -e $T/ldconfig.log ]] || fail "make install into a DESTDIR ran ldconfig: $(cat "$T/ldconfig.log")"

for f in usr/include/sluice/consumer.h usr/include/sluice/common.h usr/include/sluice/batch.h \
         usr/include/sluice/producer.h usr/lib/libsluice.a usr/lib/libsluice.so.0 \
         usr/lib/libsluice.so usr/lib/pkgconfig/sluice.pc usr/lib/python3/dist-packages/sluice/__init__.py \
         usr/lib/python3/dist-packages/sluice/_lib.py usr/lib/python3/dist-packages/sluice/_installed.py; do
    [[ -e $dest/$f ]] || fail "make install did not install /$f"
done
for b in sluice-producer sluice-consume sluice-ctl; do
    [[ -x $dest/usr/bin/$b ]] || fail "make install did not install /usr/bin/$b"
    "$dest/usr/bin/$b" --help >"$T/help.out" 2>&1 || fail "$b --help exit $?: $(cat "$T/help.out")"
    [[ -s $T/help.out ]] || fail "$b --help printed nothing"
done
grep -qx "LIBDIR = '/usr/lib'" "$dest/usr/lib/python3/dist-packages/sluice/_installed.py" ||
    fail "the installed Python package does not record /usr/lib: $(cat "$dest/usr/lib/python3/dist-packages/sluice/_installed.py")"
grep -q '^prefix=/usr$' "$dest/usr/lib/pkgconfig/sluice.pc" ||
    fail "installed sluice.pc does not say prefix=/usr: $(grep '^prefix=' "$dest/usr/lib/pkgconfig/sluice.pc")"

export PKG_CONFIG_SYSROOT_DIR=$dest PKG_CONFIG_PATH=$dest/usr/lib/pkgconfig
flags=$(pkg-config --cflags --libs sluice) || fail "pkg-config --cflags --libs sluice failed"
note "pkg-config: $flags"
for w in $flags; do
    case $w in
        -I* | -L*) [[ ${w:2} == "$dest"/* ]] || fail "pkg-config flag $w points outside the DESTDIR $dest" ;;
    esac
done
[[ " $flags " == *" -I$dest/usr/include "* ]] || fail "no -I$dest/usr/include in: $flags"
[[ " $flags " == *" -L$dest/usr/lib "* ]] || fail "no -L$dest/usr/lib in: $flags"

cat >"$T/hello.c" <<'CEOF'
#include <sluice/consumer.h>
#include <stdio.h>
#include <string.h>

int main(void)
{
    sluice_consumer_opts o = {.redis_url = "redis://h:99999", .queue = "q"};
    sluice_consumer *c = (sluice_consumer *)&o; /* must come back NULL */
    char err[256] = "";
    sluice_err e = sluice_consumer_open(&c, &o, err, sizeof err);
    printf("version=%s header=%s\n", sluice_version(), SLUICE_VERSION);
    printf("strerror=%s\n", sluice_strerror(SLUICE_ERR_INVALID));
    printf("open=%d invalid=%d null=%d\n", (int)e, e == SLUICE_ERR_INVALID, c == NULL);
    printf("err=%s\n", err);
    return 0;
}
CEOF
# A library built with sanitizers (make asan) needs them in the program too.
san=()
if readelf -d "$dest/usr/lib/libsluice.so.0" 2>/dev/null | grep 'libasan' >/dev/null; then
    # shellcheck disable=SC2054  # one flag with a comma in it
    san=(-fsanitize=address,undefined)
fi
# shellcheck disable=SC2086  # flags are words
cc -std=c11 -Wall -Wextra -Werror "${san[@]}" "$T/hello.c" -o "$T/hello" $flags 2>"$T/cc.err" ||
    fail "compiling with pkg-config flags failed: $(cat "$T/cc.err")"
out=$(LD_LIBRARY_PATH=$dest/usr/lib "$T/hello" 2>&1) || fail "hello exit $?: $out"
note "$out"
ldd_out=$(LD_LIBRARY_PATH=$dest/usr/lib ldd "$T/hello")
grep -q "libsluice.so.0 => $dest/usr/lib/libsluice.so.0" <<<"$ldd_out" ||
    fail "hello does not load the installed libsluice.so.0: $ldd_out"
ver=$(sed -n 's/^#define SLUICE_VERSION "\(.*\)"/\1/p' "$ROOT/common/include/sluice/common.h")
grep -qx "version=$ver header=$ver" <<<"$out" || fail "sluice_version() mismatch: $out"
strerr=$(sed -n 's/^strerror=//p' <<<"$out")
[[ -n $strerr && $strerr != "unknown error" ]] || fail "sluice_strerror(SLUICE_ERR_INVALID) = '$strerr'"
grep -qx "open=[0-9]* invalid=1 null=1" <<<"$out" || fail "opening redis://h:99999: expected SLUICE_ERR_INVALID and NULL: $out"
grep -q "^err=..*" <<<"$out" || fail "sluice_consumer_open gave no reason in errbuf: $out"
grep -q "99999\|port" <<<"$out" || note "(the reason does not mention the port: $(grep '^err=' <<<"$out"))"
echo "ok: installed SDK works via pkg-config ($flags)"
