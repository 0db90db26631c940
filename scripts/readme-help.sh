#!/usr/bin/env bash
# Writes each program's --help output into README.md, in the fenced block
# under its marker line "<!-- help: PROGRAM -->" (replacing the block that
# is there). tests/integration/readme_help.sh checks that they agree.
# Usage: scripts/readme-help.sh [BUILD]
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-$root/build}
/usr/bin/python3 - "$root/README.md" "$build" <<'PY'
import re, subprocess, sys
path, build = sys.argv[1], sys.argv[2]
text = open(path, encoding="utf-8").read()
def fill(m):
    prog = m.group(1)
    out = subprocess.run([build + "/" + prog, "--help"], check=True,
                         stdout=subprocess.PIPE, text=True).stdout
    return "<!-- help: %s -->\n```\n%s```\n" % (prog, out if out.endswith("\n") else out + "\n")
text = re.sub(r"<!-- help: (\S+) -->\n(?:```\n.*?```\n)?", fill, text, flags=re.S)
open(path, "w", encoding="utf-8").write(text)
PY
