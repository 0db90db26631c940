#!/usr/bin/env bash
# docs/PROTOCOL.md is the reference: each Lua block under "### NAME" is
# exactly common/lua/NAME.lua, and `sluice-ctl script NAME` is that file
# with its "--! include lib" line replaced by lib.lua.
. "$(dirname "$0")/../lib/integration.sh"
need_bin sluice-ctl

doc=$ROOT/docs/PROTOCOL.md
names=(lib create delete push take claim ack requeue reap beat dead deadadmin restore submit
       task_claim task_renew task_done task_fail task_check checkpoint)
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
    # What the programs send: the file with its include replaced by the
    # blocks of lib.lua it needs, in their order; checked here apart from
    # scripts/lua-expand.awk, which makes it: the first block always, and
    # the block defining every helper the text uses, and no other.
    "$BUILD/sluice-ctl" script "$name" >"$T/code.lua" || fail "sluice-ctl script $name failed"
    "$PY" - "$ROOT/common/lua/lib.lua" "$ROOT/common/lua/$name.lua" "$T/code.lua" <<'PYEOF' ||
import re, sys
lib, src, code = (open(f).read() for f in sys.argv[1:4])
blocks = [b + "\n" for b in lib.strip("\n").split("\n\n")]
if "--! include lib\n" not in src:
    sys.exit(0 if code == src else "%s: not its file" % sys.argv[2])
head, _, tail = src.partition("--! include lib\n")
if not (code.startswith(head) and code.endswith(tail)):
    sys.exit("%s: not its file with the include replaced" % sys.argv[2])
mid = code[len(head):len(code) - len(tail)]
# mid: some of the blocks, in order, a blank line between them
parts = [p + "\n" for p in mid.rstrip("\n").split("\n\n")]
it = iter(blocks)
if not all(any(p == b for b in it) for p in parts) or parts[0] != blocks[0]:
    sys.exit("%s: the helpers are not blocks of lib.lua in order, the first one first" % sys.argv[2])
def used(text):
    text = re.sub(r"--[^\n]*", "", text)
    text = re.sub(r"'[^'\n]*'", "", text)
    return set(re.findall(r"[A-Za-z_][A-Za-z0-9_]*", text))
names = {}
for b in blocks:
    for m in re.finditer(r"^(?:local function ([A-Za-z0-9_]+)|local ([A-Za-z0-9_]+)$|([A-Za-z0-9_]+) = function)", b, re.M):
        names.setdefault(next(g for g in m.groups() if g), []).append(b)
have = set(parts)
uses = used(code)
for n, bs in names.items():
    if n in uses and not all(b in have for b in bs):
        sys.exit("%s uses %s, whose definition it lacks" % (sys.argv[2], n))
for b in parts[1:]:
    defined = [n for n, bs in names.items() if b in bs]
    if not any(n in used(code.replace(b, "", 1)) for n in defined):
        sys.exit("%s includes the helpers %s and uses none of them" % (sys.argv[2], defined))
PYEOF
        { echo "sluice-ctl script $name is not common/lua/$name.lua with its helpers expanded"; bad=$((bad + 1)); }
done
((bad == 0)) || fail "$bad script blocks of docs/PROTOCOL.md do not match the code"

# No script walks the key space (SCAN, KEYS): it would hold Redis for as
# long as the walk, however small the queue.
walkers=$(grep -ln "redis.call('\(SCAN\|KEYS\)'" "$ROOT"/common/lua/*.lua || true)
[[ -z $walkers ]] || fail "scripts that walk the key space: $walkers"

# The lease default is sluice/common.h's, also where a script falls back
# on it for a queue created without lease_ms.
c_lease=$(sed -n 's/^#define SLUICE_LEASE_MS_DEFAULT \([0-9]*\)$/\1/p' "$ROOT/common/include/sluice/common.h")
[[ -n $c_lease ]] || fail "no SLUICE_LEASE_MS_DEFAULT in sluice/common.h"
lua_lease=$(grep -ho "'lease_ms') or '[0-9]*'" "$ROOT"/common/lua/*.lua | sort -u)
[[ $lua_lease == "'lease_ms') or '$c_lease'" ]] ||
    fail "the scripts' lease default ($lua_lease) is not SLUICE_LEASE_MS_DEFAULT ($c_lease)"

# The room rule is one function: push.lua, which runs without lib.lua (a
# client may take it from the doc as it is), holds has_room word for word.
fn() { awk '/^local function has_room\(/ {on = 1} on {print} on && /^end$/ {exit}' "$1"; }
lib_room=$(fn "$ROOT/common/lua/lib.lua")
[[ -n $lib_room ]] || fail "no has_room in common/lua/lib.lua"
[[ $(fn "$ROOT/common/lua/push.lua") == "$lib_room" ]] ||
    fail "push.lua's has_room differs from lib.lua's: the room rule must be the same"
echo "ok: ${#names[@]} script blocks of docs/PROTOCOL.md match common/lua and sluice-ctl"
