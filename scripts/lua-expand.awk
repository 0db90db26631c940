# Expands a protocol script: its line "--! include lib" becomes the
# helpers of LIB (common/lua/lib.lua) that the script uses, directly or
# through other helpers, in their order in LIB; lib.lua's first block (the
# key names and the migration guard) always goes. Redis runs every line of
# a script on every call, so a helper defined and not used would cost each
# call its closure.
#
#   awk -v lib=common/lua/lib.lua -f scripts/lua-expand.awk common/lua/NAME.lua
#
# LIB is made of blocks separated by blank lines; a block defines the names
# of its lines "local function NAME", "local NAME" and "NAME = function".
# What a piece of code uses: its identifiers, comments left out.

function idents(line, into,    n, i, w) {
    sub(/--.*/, "", line)
    gsub(/'[^']*'/, " ", line)
    n = split(line, w, /[^A-Za-z0-9_]+/)
    for (i = 1; i <= n; i++)
        if (w[i] != "")
            into[w[i]] = 1
}

BEGIN {
    nb = 1
    while ((getline l < lib) > 0) {
        if (l == "") {
            if (blen[nb] > 0)
                nb++
            continue
        }
        btext[nb] = btext[nb] l "\n"
        blen[nb]++
        if (match(l, /^local function [A-Za-z0-9_]+/))
            defs[nb] = defs[nb] " " substr(l, 16, RLENGTH - 15)
        else if (l ~ /^local [A-Za-z0-9_]+$/)
            defs[nb] = defs[nb] " " substr(l, 7)
        else if (match(l, /^[A-Za-z0-9_]+ = function/))
            defs[nb] = defs[nb] " " substr(l, 1, index(l, " ") - 1)
    }
    close(lib)
    if (blen[nb] == 0)
        nb--
    for (b = 1; b <= nb; b++) {
        n = split(btext[b], lines, "\n")
        for (i = 1; i <= n; i++)
            idents(lines[i], uses_tmp)
        for (w in uses_tmp)
            uses[b, w] = 1
        delete uses_tmp
        k = split(defs[b], names, " ")
        for (i = 1; i <= k; i++)
            definer[names[i]] = definer[names[i]] " " b
    }
}

{ body[++nl] = $0; if ($0 != "--! include lib") idents($0, want) }

END {
    need[1] = 1
    # Transitive closure: a block is needed when a needed piece of code
    # (the script, or a needed block) uses a name it defines.
    changed = 1
    while (changed) {
        changed = 0
        for (w in want) {
            k = split(definer[w], bs, " ")
            for (i = 1; i <= k; i++)
                if (!(bs[i] in need)) {
                    need[bs[i]] = 1
                    changed = 1
                }
        }
        for (b = 1; b <= nb; b++)
            if (b in need)
                for (key in uses) {
                    split(key, part, SUBSEP)
                    if (part[1] == b && !(part[2] in want)) {
                        want[part[2]] = 1
                        changed = 1
                    }
                }
    }
    for (i = 1; i <= nl; i++) {
        if (body[i] != "--! include lib") {
            print body[i]
            continue
        }
        first = 1
        for (b = 1; b <= nb; b++)
            if (b in need) {
                if (!first)
                    print ""
                printf "%s", btext[b]
                first = 0
            }
    }
}
