#!/usr/bin/env bash
# Every seed of the fuzz corpus and every input of a fixed crash
# (tests/fuzz/regress) goes through its fuzz target's checks again.
. "$(dirname "$0")/../lib/integration.sh"
n=0
for bin in "$BUILD"/fuzz/replay-*; do
    [[ -x $bin ]] || fail "no replay binaries in $BUILD/fuzz (make unit builds them)"
    name=${bin##*/replay-}
    files=()
    for d in "$ROOT/tests/fuzz/corpus/$name" "$ROOT/tests/fuzz/regress/$name"; do
        [[ -d $d ]] && while IFS= read -r -d '' f; do files+=("$f"); done < <(find "$d" -type f -print0)
    done
    ((${#files[@]} > 0)) || fail "fuzz target $name has no seed corpus in tests/fuzz/corpus/$name"
    "$bin" "${files[@]}" >"$T/out" 2>&1 || fail "replay-$name failed: $(tail -n 20 "$T/out")"
    note "$name: $(cat "$T/out")"
    n=$((n + 1))
done
((n > 0)) || fail "no fuzz targets replayed"
echo "ok: $n fuzz targets replayed their corpus"
