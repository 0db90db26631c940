#!/usr/bin/env bash
# libsluice.so exports its public API and nothing else: every dynamic
# symbol it defines is a sluice_* name declared SLUICE_EXPORT in a public
# header (common/include/sluice), and every name so declared is exported
# (transform.h's names are a plugin's to define, not the library's). The
# soname carries SLUICE_VERSION_MAJOR, and sluice_version_number() is
# SLUICE_VERSION_NUMBER.
# shellcheck source=tests/lib/integration.sh
. "$(dirname "$0")/../lib/integration.sh"

so=$BUILD/libsluice.so
[[ -f $so ]] || fail "$so not built"
nm -D --defined-only "$so" | awk '$2 ~ /^[TDBRVW]$/ {print $3}' | sort -u >"$T/exported"
[[ -s $T/exported ]] || fail "nm -D found no exported symbol in $so"

stray=$(grep -v '^sluice_' "$T/exported" || true)
[[ -z $stray ]] || fail "libsluice.so exports names outside the API: $(tr '\n' ' ' <<<"$stray")"

inc=$ROOT/common/include/sluice
# The declared names: SLUICE_EXPORT ... name( over one or two lines.
cat "$inc"/common.h "$inc"/batch.h "$inc"/consumer.h "$inc"/producer.h |
    tr '\n' ' ' | grep -o 'SLUICE_EXPORT [^;(]*(' | grep -o 'sluice_[a-z0-9_]*($' |
    tr -d '(' | sort -u >"$T/declared"
[[ -s $T/declared ]] || fail "no SLUICE_EXPORT declaration found in $inc"

undeclared=$(comm -23 "$T/exported" "$T/declared")
[[ -z $undeclared ]] || fail "exported but declared in no public header: $(tr '\n' ' ' <<<"$undeclared")"
missing=$(comm -13 "$T/exported" "$T/declared")
[[ -z $missing ]] || fail "declared SLUICE_EXPORT but not exported: $(tr '\n' ' ' <<<"$missing")"

major=$(sed -n 's/^#define SLUICE_VERSION_MAJOR \([0-9]*\)$/\1/p' "$inc/common.h")
soname=$(readelf -d "$so" | sed -n 's/.*Library soname: \[\(.*\)\]/\1/p')
[[ $soname == "libsluice.so.$major" ]] || fail "soname is '$soname', expected libsluice.so.$major"

cat >"$T/ver.c" <<'CEOF'
#include <sluice/consumer.h>
#include <sluice/producer.h>
#include <stdio.h>
#define SIZE_IS(t) (sluice_struct_size(#t) == sizeof(t))
int main(void)
{
    int sizes = SIZE_IS(sluice_consumer_opts) && SIZE_IS(sluice_producer_opts) &&
                SIZE_IS(sluice_task) && SIZE_IS(sluice_tensor) && sluice_struct_size("nope") == 0;
    printf("%u %u %s\n", (unsigned)sluice_version_number(), (unsigned)SLUICE_VERSION_NUMBER,
           sluice_version());
    if (!sizes)
        printf("sluice_struct_size() disagrees with sizeof\n");
    return sluice_version_number() == SLUICE_VERSION_NUMBER && sizes ? 0 : 1;
}
CEOF
san=()
if readelf -d "$so" | grep 'libasan' >/dev/null; then san=(-fsanitize=address,undefined); fi
mkdir "$T/lib" && ln -s "$so" "$T/lib/libsluice.so" && ln -s "$so" "$T/lib/$soname"
cc -std=c11 "${san[@]}" -I"$ROOT/common/include" "$T/ver.c" -o "$T/ver" -L"$T/lib" -lsluice ||
    fail "cannot build a program against $so"
out=$(LD_LIBRARY_PATH=$T/lib "$T/ver") || fail "the library differs from the headers: $out"
read -r n _ s <<<"$out"
[[ $n -gt 0 || $s == 0.0.0 ]] || fail "version number $n for version $s"
echo "ok: $(wc -l <"$T/exported") symbols exported, all declared; soname $soname; version $s = $n"
