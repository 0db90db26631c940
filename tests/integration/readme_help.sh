#!/usr/bin/env bash
# The README's CLI reference is each program's --help, verbatim: the block
# under "<!-- help: PROGRAM -->" equals `PROGRAM --help`
# (scripts/readme-help.sh rewrites the blocks).
# shellcheck source=tests/lib/integration.sh
. "$(dirname "$0")/../lib/integration.sh"
progs=$(sed -n 's/^<!-- help: \([^ ]*\) -->$/\1/p' "$ROOT/README.md")
[[ -n $progs ]] || fail "README.md has no <!-- help: PROGRAM --> markers"
bad=0
for p in $progs; do
    need_bin "$p"
    awk -v m="<!-- help: $p -->" '
        $0 == m { found = 1; next }
        found == 1 && /^```$/ { found = 2; next }
        found == 1 { exit }
        found == 2 && /^```$/ { exit }
        found == 2 { print }' "$ROOT/README.md" >"$T/readme"
    "$BUILD/$p" --help >"$T/help" || fail "$p --help exited $?"
    if ! diff -u "$T/readme" "$T/help" >"$T/diff"; then
        echo "README.md's reference of $p differs from $p --help (run scripts/readme-help.sh):"
        head -n 30 "$T/diff"
        bad=$((bad + 1))
    fi
done
((bad == 0)) || fail "$bad CLI references in README.md are out of date"
echo "ok: the README's CLI reference matches --help of: $progs"
