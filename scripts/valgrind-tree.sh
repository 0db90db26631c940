#!/usr/bin/env bash
# Makes DEST a copy of the build folder SRC in which the sluice programs
# run under valgrind (memcheck, every leak kind, errors fail the run with
# exit status 99). Everything else is symlinked, so tests pointed at
# BUILD=DEST run unchanged. Usage: valgrind-tree.sh SRC DEST
set -euo pipefail
src=$(cd "$1" && pwd)
supp=$(cd "$(dirname "$0")" && pwd)/valgrind.supp
dest=$2
rm -rf "$dest"
mkdir -p "$dest"
dest=$(cd "$dest" && pwd)
for f in "$src"/*; do
    [[ -e $f ]] && ln -s "$f" "$dest/${f##*/}"
done
for prog in sluice-producer sluice-consume sluice-ctl hold; do
    [[ -x $src/$prog ]] || continue
    rm -f "$dest/$prog"
    # exec keeps the PID, so tests that signal or kill -9 a program reach it.
    cat >"$dest/$prog" <<WRAP
#!/bin/sh
exec valgrind --quiet --error-exitcode=99 --leak-check=full --show-leak-kinds=all \\
    --errors-for-leak-kinds=definite,indirect,possible --track-fds=no \\
    --suppressions="$supp" "$src/$prog" "\$@"
WRAP
    chmod +x "$dest/$prog"
done
