#!/usr/bin/env bash
# IDX round trip against Python: the producer's idx reader (through
# build/dump-idx) and numpy read the same files and must agree row by row
# (FNV-1a 64 of each image, the label bytes). Uses the Fashion-MNIST test
# set when /usr/share/datasets/fashion-mnist is installed, and always small
# files written by Python, plain and gzip, whole and as a record range.
# shellcheck source=tests/lib/integration.sh
. "$(dirname "$0")/../lib/integration.sh"
need_bin dump-idx
PYIDX=$ROOT/tests/integration/idx_python.py

# same IMAGES LABELS [START END]: both readings agree.
same() {
    "$BUILD/dump-idx" "$@" >"$T/c.txt" || fail "dump-idx $* failed"
    "$PY" "$PYIDX" dump "$@" >"$T/py.txt" || fail "python could not read $*"
    cmp -s "$T/c.txt" "$T/py.txt" || {
        diff "$T/c.txt" "$T/py.txt" | head -5 >&2
        fail "dump-idx and python disagree on $*"
    }
    note "agree on $* ($(($(wc -l <"$T/c.txt") - 1)) rows)"
}

"$PY" "$PYIDX" write "$T" 257 28 28 7
same "$T/img.idx" "$T/lab.idx"
same "$T/img.idx.gz" "$T/lab.idx.gz"
same "$T/img.idx.gz" "$T/lab.idx" 100 201
same "$T/img.idx" "$T/lab.idx.gz" 256 257

fm=/usr/share/datasets/fashion-mnist
if [[ -r $fm/t10k-images-idx3-ubyte.gz ]]; then
    same "$fm/t10k-images-idx3-ubyte.gz" "$fm/t10k-labels-idx1-ubyte.gz"
    same "$fm/t10k-images-idx3-ubyte.gz" "$fm/t10k-labels-idx1-ubyte.gz" 5000 5100
else
    note "no $fm: Fashion-MNIST part skipped"
fi

# A truncated gzip file: a clear error naming the image, never a hang.
sz=$(stat -c %s "$T/img.idx.gz")
head -c $((sz / 2)) "$T/img.idx.gz" >"$T/half.gz"
if "$BUILD/dump-idx" "$T/half.gz" "$T/lab.idx" >/dev/null 2>"$T/err"; then
    fail "a truncated gzip file was read without error"
fi
grep -q "half.gz: truncated at image [0-9]" "$T/err" || fail "unexpected error: $(cat "$T/err")"
# Counts that disagree name both files.
if [[ -r $fm/train-labels-idx1-ubyte.gz ]]; then
    if "$BUILD/dump-idx" "$T/img.idx" "$fm/train-labels-idx1-ubyte.gz" >/dev/null 2>"$T/err"; then
        fail "mismatched counts accepted"
    fi
    grep -q "holds 257 images but .* holds 60000 labels" "$T/err" || fail "unexpected: $(cat "$T/err")"
fi
note "ok"
