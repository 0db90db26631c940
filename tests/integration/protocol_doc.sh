#!/usr/bin/env bash
# docs/PROTOCOL.md is the reference: each Lua block under "### NAME" is
# exactly common/lua/NAME.lua, and `sluice-ctl script NAME` is that file
# with its "--! include lib" line replaced by lib.lua.
. "$(dirname "$0")/_lib.sh"
need_bin sluice-ctl

doc=$ROOT/docs/PROTOCOL.md
names=(lib create delete push take claim ack requeue reap beat dead deadadmin restore submit
       task_claim task_renew task_done task_fail task_check)
bad=0
for name in "${names[@]}"; do
    # The fenced block right after the heading line "### NAME".
    awk -v h="### $name" '
        $0 == h { found = 1; next }
        found == 1 && /^```/ { found = 2; next }
        found == 1 && NF { exit }
        found == 2 && /^```/ { exit }
        found == 2 { print }
    ' "$doc" >"$T/doc.lua"
    if [[ ! -s $T/doc.lua ]]; then
        echo "docs/PROTOCOL.md has no block under '### $name'"
        bad=$((bad + 1))
    elif ! diff "$T/doc.lua" "$ROOT/common/lua/$name.lua" >"$T/diff"; then
        echo "docs/PROTOCOL.md '### $name' differs from common/lua/$name.lua:"
        sed 's/^/    /' "$T/diff" | head -n 20
        bad=$((bad + 1))
    fi
    [[ $name == lib ]] && continue
    # What the programs send: the file with the include expanded.
    awk -v lib="$ROOT/common/lua/lib.lua" '
        $0 == "--! include lib" { while ((getline l < lib) > 0) print l; next }
        { print }' "$ROOT/common/lua/$name.lua" >"$T/expanded.lua"
    "$BUILD/sluice-ctl" script "$name" >"$T/code.lua" || fail "sluice-ctl script $name failed"
    diff -q "$T/expanded.lua" "$T/code.lua" >/dev/null ||
        { echo "sluice-ctl script $name is not common/lua/$name.lua with lib expanded"; bad=$((bad + 1)); }
done
((bad == 0)) || fail "$bad script blocks of docs/PROTOCOL.md do not match the code"
echo "ok: ${#names[@]} script blocks of docs/PROTOCOL.md match common/lua and sluice-ctl"
