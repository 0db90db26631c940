"""Independent IDX reading for tests/integration/idx_python.sh.

usage: idx_python.py dump IMAGES LABELS [START END]
    prints what build/dump-idx prints, read with numpy (gzip or plain)
usage: idx_python.py write DIR N H W SEED
    writes DIR/img.idx, DIR/lab.idx (plain) and DIR/img.idx.gz,
    DIR/lab.idx.gz: N random uint8 images HxW and labels 0..9
"""
import gzip
import os
import struct
import sys

import numpy as np

DTYPES = {0x08: ">u1", 0x09: ">i1", 0x0B: ">i2", 0x0C: ">i4", 0x0D: ">f4", 0x0E: ">f8"}


def read_idx(path):
    with open(path, "rb") as f:
        raw = f.read()
    if raw[:2] == b"\x1f\x8b":
        raw = gzip.decompress(raw)
    zero, code, ndim = struct.unpack_from(">HBB", raw, 0)
    assert zero == 0, path
    dims = struct.unpack_from(">%dI" % ndim, raw, 4)
    data = np.frombuffer(raw, dtype=DTYPES[code], offset=4 + 4 * ndim)
    assert data.size == int(np.prod(dims)), path
    return data.reshape(dims)


def fnv1a64(b):
    h = 0xCBF29CE484222325
    for x in b:
        h = ((h ^ x) * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    return h


def dump(images, labels, start, end):
    img, lab = read_idx(images), read_idx(labels)
    assert img.shape[0] == lab.shape[0]
    end = img.shape[0] if end is None else end
    shape = lambda a: ",".join(str(d) for d in a.shape[1:])
    out = ["columns image %s [%s] label %s [%s]" % (img.dtype.name, shape(img),
                                                   lab.dtype.name, shape(lab))]
    # Little-endian bytes, as the reader converts them for the wire.
    for i in range(start, end):
        ib = img[i].astype(img.dtype.newbyteorder("<")).tobytes()
        lb = lab[i].astype(lab.dtype.newbyteorder("<")).tobytes()
        out.append("%016x %s" % (fnv1a64(ib), lb.hex()))
    sys.stdout.write("\n".join(out) + "\n")


def write(d, n, h, w, seed):
    rng = np.random.default_rng(seed)
    img = rng.integers(0, 256, size=(n, h, w), dtype=np.uint8)
    lab = rng.integers(0, 10, size=(n,), dtype=np.uint8)
    ih = struct.pack(">HBBIII", 0, 0x08, 3, n, h, w) + img.tobytes()
    lh = struct.pack(">HBBI", 0, 0x08, 1, n) + lab.tobytes()
    for name, data in (("img.idx", ih), ("lab.idx", lh)):
        with open(os.path.join(d, name), "wb") as f:
            f.write(data)
        with open(os.path.join(d, name + ".gz"), "wb") as f:
            f.write(gzip.compress(data))


if __name__ == "__main__":
    if sys.argv[1] == "dump":
        a = sys.argv[2:]
        dump(a[0], a[1], int(a[2]) if len(a) > 2 else 0, int(a[3]) if len(a) > 3 else None)
    else:
        write(sys.argv[2], *(int(x) for x in sys.argv[3:7]))
