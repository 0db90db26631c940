#!/usr/bin/python3
"""The shell blocks of the docs, for tests/integration/docs_blocks.sh.

A fenced block whose language is sh (or bash, shell, console) carries one
more word: `run` (the docs test runs it) or `norun: why` (it is shown, not
run: a Docker engine, a cluster of hosts...). A block without a language
whose lines look like commands is an error too: mark it.

    ```sh run port=6390 timeout=120
    ...
    ```

port=N (default 6379) is the Redis port the block uses: the test puts a
free port in its place, and nothing else is changed. cluster=H:P,H:P...
names the nodes of a Redis Cluster the block addresses: the test starts a
cluster of that many masters and puts its nodes' addresses in their
places. timeout=S (default 120) bounds the block. The next block, when its language is `output`,
holds what the block prints: each of its lines must match a line of the
output, in order (lines may come between), `…` standing for any text and
a line `…` alone for any lines. The README's --help references (under
"<!-- help: PROGRAM -->") are checked by readme_help.sh, not here.

    doc-blocks.py check FILE...           every sh block marked, every file of the
                                          tree a doc names in backticks exists;
                                          exit 1 if not
    doc-blocks.py extract OUTDIR FILE...  writes OUTDIR/NN.sh, NN.meta
                                          ("FILE LINE PORT TIMEOUT CLUSTER"), NN.expect
    doc-blocks.py match EXPECT ACTUAL     exit 1, naming the first expected
                                          line not found, if they differ
"""
import os
import re
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SHELL_LANGS = {"sh", "bash", "shell", "console"}
# A line of a block without a language that is a command, not output.
COMMAND_LINE = re.compile(r"^\s*(\$ )?(sluice-(ctl|producer|consume|trainer)|make|redis-server|"
                          r"redis-cli|docker|docker-compose|export|build/\S+)(\s|$)")


class Block:
    def __init__(self, path, line, info, lines, before):
        self.path, self.line, self.lines = path, line, lines
        self.before = before  # the last non-blank line above the fence
        words = info.split()
        self.lang = words[0] if words else ""
        self.words = words[1:]

    def where(self):
        return "%s:%d" % (self.path, self.line)


def blocks(path):
    out, cur, before = [], None, ""
    with open(path, encoding="utf-8") as f:
        for n, text in enumerate(f, 1):
            text = text.rstrip("\n")
            if cur is None:
                m = re.match(r"^```(.*)$", text)
                if m:
                    cur = (n, m.group(1).strip(), [], before)
                elif text.strip():
                    before = text.strip()
            elif text == "```":
                out.append(Block(path, cur[0], cur[1], cur[2], cur[3]))
                cur, before = None, ""
            else:
                cur[2].append(text)
    if cur is not None:
        out.append(Block(path, cur[0], "<unclosed>", cur[2], cur[3]))
    return out


def options(b):
    """The run block's settings, or an error message."""
    port, timeout, cluster = "6379", "120", "-"
    for w in b.words[1:]:
        k, _, v = w.partition("=")
        if k == "cluster" and re.fullmatch(r"[\w.-]+:\d+(,[\w.-]+:\d+)*", v):
            cluster = v
        elif k in ("port", "timeout") and v.isdigit():
            if k == "port":
                port = v
            else:
                timeout = v
        else:
            return None, "unknown setting '%s' (port=N, timeout=S, cluster=HOST:PORT,...)" % w
    return (port, timeout, cluster), None


# A file of the tree named in backticks (`producer/src/task.c`); a name in
# capitals (`tests/integration/NAME.sh`) stands for any.
TREE_PATH = re.compile(r"`([\w.][\w./-]*/[\w.-]+\.(?:h|c|sh|py|md|lua|yml|yaml|toml|in|awk|supp))`")


def missing_files(path):
    """Files of the tree the doc names that do not exist."""
    errors, here = [], os.path.dirname(path)
    with open(path, encoding="utf-8") as f:
        for n, text in enumerate(f, 1):
            for m in TREE_PATH.finditer(text):
                name = m.group(1)
                if re.search(r"/[A-Z_]+\.\w+$", name):
                    continue
                if not os.path.exists(os.path.join(ROOT, name)) \
                        and not os.path.exists(os.path.join(here, name)):
                    errors.append("%s:%d: names `%s`, which is not in the tree" % (path, n, name))
    return errors


def check(paths):
    errors, runs = [], []
    for path in paths:
        errors += missing_files(path)
        bs = blocks(path)
        for i, b in enumerate(bs):
            if b.lang == "<unclosed>":
                errors.append("%s: a ``` block is not closed" % b.where())
            elif b.lang in SHELL_LANGS:
                mark = b.words[0] if b.words else ""
                if mark == "run":
                    opts, err = options(b)
                    if err:
                        errors.append("%s: %s" % (b.where(), err))
                        continue
                    nxt = bs[i + 1] if i + 1 < len(bs) and bs[i + 1].lang == "output" else None
                    runs.append((b, opts, nxt))
                elif mark.startswith("norun"):
                    why = " ".join(b.words)[len("norun"):]
                    if not why.startswith(":") or not why[1:].strip():
                        errors.append("%s: 'norun' needs a reason ('norun: why')" % b.where())
                else:
                    errors.append("%s: a %s block must say 'run' or 'norun: why' after '%s'"
                                  % (b.where(), b.lang, b.lang))
            elif b.lang == "" and b.before.startswith("<!-- help:"):
                pass  # a program's --help, checked by tests/integration/readme_help.sh
            elif b.lang == "":
                cmds = [ln for ln in b.lines if COMMAND_LINE.match(ln)]
                if cmds:
                    errors.append("%s: a block without a language holds commands ('%s'): "
                                  "give it 'sh run' or 'sh norun: why'" % (b.where(), cmds[0].strip()))
            elif b.lang == "output":
                prev = bs[i - 1] if i > 0 else None
                if prev is None or prev.lang not in SHELL_LANGS or not prev.words \
                        or prev.words[0] != "run":
                    errors.append("%s: an output block follows no 'run' block" % b.where())
    return errors, runs


def extract(outdir, paths):
    errors, runs = check(paths)
    if errors:
        print("\n".join(errors), file=sys.stderr)
        return 1
    os.makedirs(outdir, exist_ok=True)
    for n, (b, (port, timeout, cluster), out) in enumerate(runs):
        base = os.path.join(outdir, "%02d" % n)
        with open(base + ".sh", "w", encoding="utf-8") as f:
            f.write("\n".join(b.lines) + "\n")
        with open(base + ".meta", "w", encoding="utf-8") as f:
            f.write("%s %d %s %s %s\n" % (b.path, b.line, port, timeout, cluster))
        with open(base + ".expect", "w", encoding="utf-8") as f:
            if out is not None:
                f.write("\n".join(out.lines) + "\n")
    print(len(runs))
    return 0


def pattern(line):
    parts = [re.escape(p) for p in line.strip().split("…")]
    return re.compile("^" + ".*".join(parts) + "$")


def match(expect_path, actual_path):
    with open(expect_path, encoding="utf-8") as f:
        expect = [ln for ln in f.read().splitlines()]
    with open(actual_path, encoding="utf-8", errors="replace") as f:
        actual = [ln.strip() for ln in f.read().splitlines()]
    pos = 0
    for n, want in enumerate(expect, 1):
        if want.strip() in ("…", ""):
            continue
        pat = pattern(want)
        while pos < len(actual) and not pat.match(actual[pos]):
            pos += 1
        if pos == len(actual):
            print("expected line %d not found (in order) in the output: %s" % (n, want.strip()))
            return 1
        pos += 1
    return 0


def main(argv):
    if len(argv) >= 2 and argv[1] == "check":
        errors, runs = check(argv[2:])
        print("\n".join(errors) if errors else "%d blocks to run" % len(runs))
        return 1 if errors else 0
    if len(argv) >= 3 and argv[1] == "extract":
        return extract(argv[2], argv[3:])
    if len(argv) == 4 and argv[1] == "match":
        return match(argv[2], argv[3])
    print(__doc__.strip(), file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv))
