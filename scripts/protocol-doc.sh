#!/usr/bin/env bash
# Rewrites the Lua blocks of docs/PROTOCOL.md from common/lua: the fenced
# block right after each heading "### NAME" becomes common/lua/NAME.lua.
# Run it after changing a script; tests/integration/protocol_doc.sh checks
# that they match. Headings without a file of that name are left alone.
#
#   scripts/protocol-doc.sh            # rewrites docs/PROTOCOL.md in place
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
doc=$root/docs/PROTOCOL.md
tmp=$(mktemp)
trap 'rm -f "$tmp"' EXIT
awk -v dir="$root/common/lua" '
    # state 0: text; 1: after a script heading, before its fence; 2: in its
    # fenced block (replaced by the file)
    state == 0 && /^### [a-z_]+$/ {
        name = substr($0, 5)
        file = dir "/" name ".lua"
        print
        if ((getline probe < file) > 0) { close(file); state = 1 }
        next
    }
    state == 1 && /^```/ {
        print
        while ((getline l < file) > 0) print l
        close(file)
        state = 2
        next
    }
    state == 2 { if (/^```/) { print; state = 0 } ; next }
    { print }
' "$doc" >"$tmp"
cmp -s "$tmp" "$doc" || cat "$tmp" >"$doc"
