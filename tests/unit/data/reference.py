#!/usr/bin/env python3
"""Independent reference for the data tests (Python standard library only).

Writes data files in their formats and prints what the contracts say a
loader must return, computed here from the file bytes, not from psync code.

  llmc PATH N SEED                   write an llm.c token file (N uint16 tokens)
  bytes PATH N SEED                  write N random bytes
  token-batches PATH KIND T B STEPS  KIND llmc|bytes|shards (PATH: a directory of *.bin or a glob,
                                     concatenated in sorted order): one line per (step, k):
                                     "s k o | inputs... | targets..."
  token-windows PATH KIND T          Examples(): one line per window i: "i | inputs | targets"
  idx PREFIX N H W CLASSES SEED gz|plain   write PREFIX-images-idx3-ubyte[.gz] and labels
  idx-expect IMAGES LABELS MEAN STD  one line per image: "label | normalised float32 pixels (%.9g)"
  perm N SEED EPOCH                  the documented shuffle permutation
  fmnist DIR                         counts, first 20 labels, label histogram, pixel sums of train and t10k
"""
import glob
import gzip
import os
import struct
import sys

MASK = (1 << 64) - 1


def lcg(seed):
    x = seed & 0x7FFFFFFF
    while True:
        x = (x * 1103515245 + 12345) & 0x7FFFFFFF
        yield x >> 8


def f32(v):
    return struct.unpack("<f", struct.pack("<f", v))[0]


def read_tokens(path, kind):
    if kind == "shards":
        if os.path.isdir(path):
            files = [os.path.join(path, f) for f in os.listdir(path) if f.endswith(".bin")]
        else:
            files = glob.glob(path)
        return [t for f in sorted(files) for t in read_tokens(f, "llmc")]
    data = open(path, "rb").read()
    if kind == "bytes":
        return list(data)
    header = struct.unpack("<256i", data[:1024])
    assert header[0] == 20240520 and header[1] == 1, header[:3]
    n = header[2]
    return list(struct.unpack("<%dH" % n, data[1024:1024 + 2 * n]))


def splitmix64(state):
    while True:
        state = (state + 0x9E3779B97F4A7C15) & MASK
        z = state
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK
        yield z ^ (z >> 31)


def main(argv):
    cmd = argv[1]
    if cmd == "llmc":
        path, n, seed = argv[2], int(argv[3]), int(argv[4])
        g = lcg(seed)
        toks = [next(g) % 50257 for _ in range(n)]
        header = [0] * 256
        header[0], header[1], header[2] = 20240520, 1, n
        with open(path, "wb") as f:
            f.write(struct.pack("<256i", *header))
            f.write(struct.pack("<%dH" % n, *toks))
    elif cmd == "bytes":
        path, n, seed = argv[2], int(argv[3]), int(argv[4])
        g = lcg(seed)
        with open(path, "wb") as f:
            f.write(bytes(next(g) & 0xFF for _ in range(n)))
    elif cmd == "token-batches":
        path, kind, t, b, steps = argv[2], argv[3], int(argv[4]), int(argv[5]), int(argv[6])
        tok = read_tokens(path, kind)
        n = len(tok)
        for s in range(steps):
            for k in range(b):
                o = ((s * b + k) * t) % (n - t)
                print(s, k, o, "|", *tok[o:o + t], "|", *tok[o + 1:o + t + 1])
    elif cmd == "token-windows":
        path, kind, t = argv[2], argv[3], int(argv[4])
        tok = read_tokens(path, kind)
        for i in range((len(tok) - 1) // t):
            o = i * t
            print(i, "|", *tok[o:o + t], "|", *tok[o + 1:o + t + 1])
    elif cmd == "idx":
        prefix, n, h, w, classes, seed, mode = argv[2], *map(int, argv[3:8]), argv[8]
        g = lcg(seed)
        pixels = bytes(next(g) & 0xFF for _ in range(n * h * w))
        labels = bytes(next(g) % classes for _ in range(n))
        opener = (lambda p: gzip.open(p + ".gz", "wb")) if mode == "gz" else (lambda p: open(p, "wb"))
        with opener(prefix + "-images-idx3-ubyte") as f:
            f.write(struct.pack(">IIII", 0x803, n, h, w) + pixels)
        with opener(prefix + "-labels-idx1-ubyte") as f:
            f.write(struct.pack(">II", 0x801, n) + labels)
    elif cmd == "idx-expect":
        images, labels, mean, std = argv[2], argv[3], f32(float(argv[4])), f32(float(argv[5]))
        op = lambda p: gzip.open(p, "rb") if p.endswith(".gz") else open(p, "rb")
        img, lab = op(images).read(), op(labels).read()
        magic, n, h, w = struct.unpack(">IIII", img[:16])
        assert magic == 0x803 and struct.unpack(">II", lab[:8]) == (0x801, n)
        for i in range(n):
            px = img[16 + i * h * w:16 + (i + 1) * h * w]
            # float32 arithmetic step by step (exact: double rounding is harmless for + - * / here)
            vals = [f32(f32(f32(p / 255.0) - mean) / std) for p in px]
            print(lab[8 + i], "|", *("%.9g" % v for v in vals))
    elif cmd == "perm":
        n, seed, epoch = int(argv[2]), int(argv[3]), int(argv[4])
        rng = splitmix64((seed * 0x2545F4914F6CDD1D + (epoch + 1) * 0xD1B54A32D192ED03) & MASK)
        perm = list(range(n))
        for i in range(n - 1, 0, -1):
            j = (next(rng) * (i + 1)) >> 64
            perm[i], perm[j] = perm[j], perm[i]
        print(*perm)
    elif cmd == "fmnist":
        d = argv[2]
        for part in ("train", "t10k"):
            img = gzip.open("%s/%s-images-idx3-ubyte.gz" % (d, part)).read()
            lab = gzip.open("%s/%s-labels-idx1-ubyte.gz" % (d, part)).read()
            _, n, h, w = struct.unpack(">IIII", img[:16])
            hist = [0] * 10
            for v in lab[8:]:
                hist[v] += 1
            print(part, n, h, w, "|", *lab[8:28], "|", *hist, "|", sum(img[16:16 + h * w]), sum(img[16:]))
    else:
        sys.exit("unknown command " + cmd)


if __name__ == "__main__":
    main(sys.argv)
