#!/usr/bin/env bash
# docs/PROTOCOL.md is the reference: each Lua block under "### NAME" is
# exactly what `sluice-ctl script NAME` prints (the code's scripts).
# shellcheck source=tests/integration/_lib.sh
. "$(dirname "$0")/_lib.sh"
need_bin sluice-ctl

doc=$ROOT/docs/PROTOCOL.md
bad=0
for name in create delete push take claim ack requeue; do
    # The fenced block right after the heading line "### NAME".
    awk -v h="### $name" '
        $0 == h { found = 1; next }
        found == 1 && /^```/ { found = 2; next }
        found == 1 && NF { exit }
        found == 2 && /^```/ { exit }
        found == 2 { print }
    ' "$doc" >"$T/doc.lua"
    "$BUILD/sluice-ctl" script "$name" >"$T/code.lua" || fail "sluice-ctl script $name failed"
    [[ -s $T/code.lua ]] || fail "sluice-ctl script $name printed nothing"
    if [[ ! -s $T/doc.lua ]]; then
        echo "docs/PROTOCOL.md has no block under '### $name'"
        bad=$((bad + 1))
    elif ! diff <(sed -e :a -e '/^\n*$/{$d;N;ba' -e '}' "$T/doc.lua") \
                <(sed -e :a -e '/^\n*$/{$d;N;ba' -e '}' "$T/code.lua") >"$T/diff"; then
        echo "docs/PROTOCOL.md '### $name' differs from sluice-ctl script $name:"
        sed 's/^/    /' "$T/diff" | head -n 20
        bad=$((bad + 1))
    fi
done
((bad == 0)) || fail "$bad script blocks of docs/PROTOCOL.md do not match the code"
echo "ok: the 7 scripts in docs/PROTOCOL.md match the code"
