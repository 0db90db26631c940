#!/usr/bin/env bash
# docs/ARCHITECTURE.md "Where things live" stays true to the tree: every
# source file of the product (common, consumer, producer, ctl) is named
# there, and every test the guarantee table names exists.
# shellcheck source=tests/lib/integration.sh
. "$(dirname "$0")/../lib/integration.sh"

doc=$ROOT/docs/ARCHITECTURE.md
sed -n '/^## Where things live$/,$p' "$doc" >"$T/section"
[[ -s $T/section ]] || fail "docs/ARCHITECTURE.md has no section 'Where things live'"

missing=()
while IFS= read -r f; do
    base=${f##*/}
    grep -q "\`$base\`\|[ (,]$base[ ),]\|/$base\b" "$T/section" || missing+=("$f")
done < <(cd "$ROOT" && git ls-files 'common/src/*.c' 'common/cli/*.c' 'consumer/src/*.c' \
    'consumer/cli/*.c' 'producer/src/*.c' 'producer/job/*.c' 'producer/daemon/*.c' 'ctl/*.c')
((${#missing[@]} == 0)) || fail "files 'Where things live' does not name: ${missing[*]}"

table=$(sed -n '/^### Which tests prove which guarantee$/,$p' "$T/section" | grep '^| [0-9A-Z]')
[[ -n $table ]] || fail "no guarantee table under 'Which tests prove which guarantee'"
n=0
for t in $(grep -o '`[a-z_]*`' <<<"$table" | tr -d '`' | sort -u); do
    [[ -f $ROOT/tests/integration/$t.sh || -f $ROOT/tests/faults/$t.sh ]] ||
        fail "the guarantee table names '$t', which is no test"
    n=$((n + 1))
done
echo "ok: every product source file is placed; the guarantee table names $n tests, all real"
