#!/usr/bin/env python3
"""Bad input, tried as a user would: `python3 bench/nothing_lost.py NEW [OLD]` runs each class of
input against the engram binary NEW (and OLD, the build before the "nothing lost" work, when
given), counts the inputs that panicked or aborted, the ones that lost or changed a file the
user had, and the ones with another wrong outcome, and prints the markdown for
book/src/figures/nothing-lost.md. Called by bench/nothing-lost.sh, which says how OLD is built.

Everything is seeded: the same binaries give the same table. Work happens under $WORK.
"""
import gzip, hashlib, json, os, random, shutil, stat, struct, subprocess, sys, time

NEW = os.path.abspath(sys.argv[1])
OLD = os.path.abspath(sys.argv[2]) if len(sys.argv) > 2 and sys.argv[2] else None
WORK = os.path.abspath(os.environ.get("WORK", "target/bench-nothing-lost"))
FMNIST = "/usr/share/datasets/fashion-mnist"
CRASH = ("panicked", "internal error", "memory allocation of", "Aborted", "Segmentation fault")

BASE = """[run]
seed = 0
[data]
dataset = "fashion-mnist"
tasks = 2
classes_per_task = 2
subsample = 400
test_subsample = 200
[model]
type = "mlp"
hidden = [32]
[optimizer]
type = "sgd"
lr = 0.05
momentum = 0.9
[train]
batch_size = 64
checkpoint_every = 3
[[forgetting]]
type = "replay"
capacity = 60
ratio = 1.0
[[forgetting]]
type = "ewc"
lambda = 100.0
"""


def run(binary, args, cwd=None, timeout=300, limit_kb=None):
    """(exit code, output, max RSS in KiB); code 124 on timeout. `limit_kb` caps the address
    space (ulimit -v) so that an unbounded read ends in an allocation failure, not the OOM
    killer."""
    pre = f"ulimit -v {limit_kb}; " if limit_kb else ""
    cmd = pre + "exec /usr/bin/time -f '@@rss %M' " + " ".join(_q(a) for a in [binary] + args)
    try:
        p = subprocess.run(["bash", "-c", cmd], cwd=cwd, capture_output=True, text=True,
                           timeout=timeout, errors="replace")
        out = p.stdout + p.stderr
        code = p.returncode
    except subprocess.TimeoutExpired as e:
        out = (e.stdout or b"").decode(errors="replace") if isinstance(e.stdout, bytes) else (e.stdout or "")
        return 124, out, 0
    rss = 0
    for line in out.splitlines():
        if line.startswith("@@rss "):
            rss = int(line.split()[1])
    if "Command terminated by signal" in out or "Command exited with non-zero status" in out:
        pass
    # /usr/bin/time reports a signal as "Command terminated by signal N" with exit 0 of its own.
    for line in out.splitlines():
        if line.startswith("Command terminated by signal"):
            code = 128 + int(line.split()[-1])
    return code, out, rss


def _q(a):
    return "'" + str(a).replace("'", "'\\''") + "'"


def crashed(code, out):
    return code >= 101 or code < 0 or any(c in out for c in CRASH)


def tree(d):
    """{relative path: sha256} of every file under d (but engram's lock file, which holds the
    pid of the last writer)."""
    out = {}
    for root, _, files in os.walk(d):
        for f in files:
            if f == ".lock":
                continue
            p = os.path.join(root, f)
            if os.path.islink(p) or not os.path.isfile(p):
                continue
            out[os.path.relpath(p, d)] = hashlib.sha256(open(p, "rb").read()).hexdigest()
    return out


def lost(before, after):
    """Files of `before` that are gone or changed in `after`."""
    return [f for f, h in before.items() if after.get(f) != h]


class Tally:
    def __init__(self):
        self.rows = {}

    def add(self, cls, which, tried=0, crash=0, lost=0, wrong=0):
        r = self.rows.setdefault(cls, {}).setdefault(which, [0, 0, 0, 0])
        for i, v in enumerate((tried, crash, lost, wrong)):
            r[i] += v


T = Tally()
NOTES = []


def fresh(name):
    p = os.path.join(WORK, name)
    shutil.rmtree(p, ignore_errors=True)
    os.makedirs(p)
    return p


def write(path, text):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        f.write(text)
    return path


def binaries():
    yield "after", NEW
    if OLD:
        yield "before", OLD


# 1. Mutated configs through `engram validate`.
def mutate(text, rng):
    b = bytearray(text.encode())
    for _ in range(rng.randint(1, 3)):
        k = rng.random()
        i = rng.randrange(len(b) + 1) if b else 0
        if k < 0.3 and b:
            b[min(i, len(b) - 1)] ^= rng.randint(1, 255)
        elif k < 0.55:
            b[i:i] = bytes(rng.choice(b"[]{}=\",.:#-+0123456789eEnaif \n") for _ in range(rng.randint(1, 6)))
        elif k < 0.75 and b:
            del b[i:i + rng.randint(1, 24)]
        elif k < 0.85:
            del b[i:]
        else:
            lines = bytes(b).decode(errors="replace").split("\n")
            idx = [j for j, l in enumerate(lines) if " = " in l]
            if idx:
                j = rng.choice(idx)
                lines[j] = lines[j].split(" = ")[0] + " = " + rng.choice(
                    ["nan", "inf", "-inf", "0", "-1", "1e308", "18446744073709551615", '""', "[]", "{}", "true"])
                b = bytearray("\n".join(lines).encode())
    return bytes(b)


def configs(n=120):
    d = fresh("configs")
    rng = random.Random(16)
    cases = [mutate(BASE, rng) for _ in range(n)]
    for which, binary in binaries():
        for i, c in enumerate(cases):
            f = os.path.join(d, f"c{i}.toml")
            open(f, "wb").write(c)
            code, out, _ = run(binary, ["validate", f, "-q"])
            positioned = code == 0 or (code == 2 and f in out)
            T.add("configs (mutated, `validate`)", which, 1, crashed(code, out), 0,
                  (not crashed(code, out)) and not positioned)


# 2. Output directories that hold a user's files, and a failing run over a finished one.
def out_dirs():
    for which, binary in binaries():
        d = fresh(f"out-{which}")
        cfg = write(os.path.join(d, "c.toml"), BASE)
        # (a) --out at a directory of the user's.
        user = os.path.join(d, "results")
        write(os.path.join(user, "plots", "fig.txt"), "mine")
        write(os.path.join(user, "metrics.csv"), "a,b\n1,2\n")
        write(os.path.join(user, "config.toml"), "# my notes\n")
        before = tree(user)
        code, out, _ = run(binary, ["run", cfg, "--out", user, "-q"])
        T.add("output directory", which, 1, crashed(code, out), bool(lost(before, tree(user))))
        # (b) [run] out = "" in a directory of the user's.
        cwd = os.path.join(d, "cwd")
        write(os.path.join(cwd, "notes.txt"), "mine")
        write(os.path.join(cwd, "metrics.csv"), "x\n")
        c2 = write(os.path.join(cwd, "e.toml"), BASE.replace("[run]\n", '[run]\nout = ""\n'))
        before = tree(cwd)
        code, out, _ = run(binary, ["run", c2, "-q"], cwd=cwd)
        T.add("output directory", which, 1, crashed(code, out), bool(lost(before, tree(cwd))))
        # (c) a finished run, then a run that fails at once into the same directory (with and
        # without --overwrite).
        for extra in ([], ["--overwrite"]):
            fin = os.path.join(d, "fin" + "".join(extra))
            code, out, _ = run(binary, ["run", cfg, "--out", fin, "-q"])
            before = tree(fin)
            code, out, _ = run(binary, ["run", cfg, "--out", fin, "-q", "--set", "optimizer.lr=1e30"] + extra)
            after = tree(fin)
            T.add("output directory", which, 1, crashed(code, out), bool(lost(before, after)))


# 3. Two runs started together on one --out, 20 times: configs that differ in their seed line.
def race(n=20):
    for which, binary in binaries():
        d = fresh(f"race-{which}")
        cfgs = [write(os.path.join(d, f"c{s}.toml"), BASE.replace("seed = 0", f"seed = {s}")) for s in (1, 2)]
        for i in range(n):
            out = os.path.join(d, f"o{i}")
            ps = [subprocess.Popen(["bash", "-c", f"exec {_q(binary)} run {_q(c)} --out {_q(out)} -q"],
                                   stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) for c in cfgs]
            res = [(p.wait(), p.stdout.read()) for p in ps]
            bad = any(crashed(c, o) or c not in (0, 2) for c, o in res)
            mixed = False
            try:
                r = json.load(open(os.path.join(out, "report.json")))
                text = open(os.path.join(out, "config.toml")).read()
                mixed = f"seed = {r['seed']}" not in text
            except Exception:
                mixed = True  # no readable report beside the config after two runs that ended
            T.add("two writers on one --out (×20)", which, 1, bad, 0, mixed)


# 4. Plugins that are not plugins, read with a 2 GiB address-space limit.
def plugins():
    d = fresh("plugins")
    rnd = os.path.join(d, "random.so")
    open(rnd, "wb").write(random.Random(3).randbytes(1 << 20))
    open(os.path.join(d, "empty.so"), "wb").close()
    write(os.path.join(d, "text.so"), "not a library\n")
    real = os.path.join(os.path.dirname(NEW), "libsynaptic_intelligence.so")
    if os.path.exists(real):
        data = open(real, "rb").read()
        open(os.path.join(d, "truncated.so"), "wb").write(data[: len(data) // 3])
    cases = ["/dev/zero", "/dev/urandom", rnd, os.path.join(d, "empty.so"), os.path.join(d, "text.so"), d]
    if os.path.exists(os.path.join(d, "truncated.so")):
        cases.append(os.path.join(d, "truncated.so"))
    for which, binary in binaries():
        peak = 0
        for c in cases:
            code, out, rss = run(binary, ["list", "--plugin", c], timeout=60, limit_kb=2 << 20)
            if c.startswith("/dev/"):
                peak = max(peak, rss)
            bad = crashed(code, out) or code == 124
            # Right: exit 2, having read next to nothing (the bound: well under 512 MiB).
            T.add("plugin files", which, 1, bad, 0, not bad and (code != 2 or rss > 512 * 1024))
        NOTES.append(f"`--plugin /dev/zero` {which}: peak resident memory {peak / 1024:.0f} MiB")


# 5. Image shapes and 1-D features, every built-in model.
def idx(path, dims, data):
    with gzip.open(path + ".gz", "wb", compresslevel=1) as f:
        f.write(struct.pack(">BBBB", 0, 0, 8, len(dims)) + b"".join(struct.pack(">I", x) for x in dims) + data)


def shapes():
    rng = random.Random(5)
    dims = [(1, 1), (2, 2), (3, 3), (5, 5), (7, 7), (8, 8), (16, 16), (27, 27), (31, 31), (64, 64), (1, 784), (28, 14)]
    for h, w in dims:
        d = fresh(f"shape-{h}x{w}")
        for split, n in (("train", 200), ("t10k", 50)):
            idx(os.path.join(d, f"{split}-images-idx3-ubyte"), [n, h, w], rng.randbytes(n * h * w))
            idx(os.path.join(d, f"{split}-labels-idx1-ubyte"), [n], bytes(i % 10 for i in range(n)))
    d = fresh("shape-features")
    for split, n in (("train", 200), ("t10k", 50)):
        idx(os.path.join(d, f"{split}-images-idx3-ubyte"), [n, 40], rng.randbytes(n * 40))
        idx(os.path.join(d, f"{split}-labels-idx1-ubyte"), [n], bytes(i % 10 for i in range(n)))
    dirs = [f"shape-{h}x{w}" for h, w in dims] + ["shape-features"]
    models = {"mlp": 'type = "mlp"\nhidden = [16]', "cnn": 'type = "cnn"', "vit": 'type = "vit"\ndim = 16\ndepth = 1\nheads = 2'}
    for which, binary in binaries():
        for dd in dirs:
            for m, keys in models.items():
                text = (f'[data]\ndataset = "fashion-mnist"\npath = "{os.path.join(WORK, dd)}"\ntasks = 1\nclasses_per_task = 2\n'
                        f"[model]\n{keys}\n[optimizer]\ntype = \"sgd\"\nlr = 0.05\n[train]\nbatch_size = 32\n")
                f = write(os.path.join(WORK, dd, f"{m}.toml"), text)
                code, out, _ = run(binary, ["run", f, "--out", os.path.join(WORK, dd, f"o-{m}-{which}"), "-q"])
                c = crashed(code, out)
                T.add("image shapes × models", which, 1, c, 0, not c and code not in (0, 2))


# 6. Checkpoints: a newest checkpoint that verifies but does not decode, and checkpoints of
# another config.
def checkpoints(n=10):
    rng = random.Random(7)
    for which, binary in binaries():
        d = fresh(f"ck-{which}")
        cfg = write(os.path.join(d, "c.toml"), BASE)
        other = write(os.path.join(d, "o.toml"), BASE.replace("capacity = 60", "capacity = 40").replace("tasks = 2", "tasks = 3"))
        ref = os.path.join(d, "ref")
        run(binary, ["run", cfg, "--out", ref, "-q"])
        cks = sorted(os.listdir(os.path.join(ref, "checkpoints")))
        for i in range(n):
            case = os.path.join(d, f"case{i}")
            shutil.copytree(ref, case)
            ck = os.path.join(case, "checkpoints", cks[-1])
            files = sorted(f for f in os.listdir(ck) if f != "manifest.json")
            f = os.path.join(ck, rng.choice(files))
            b = bytearray(open(f, "rb").read())
            cut = rng.randrange(len(b) // 2, len(b)) if len(b) > 2 else 0
            b = b[:cut] if rng.random() < 0.5 else b[:cut] + bytes([b[cut] ^ 0x5a]) + b[cut + 1:] if cut < len(b) else b
            open(f, "wb").write(bytes(b))
            m = json.load(open(os.path.join(ck, "manifest.json")))
            for k in m.get("files", {}):
                m["files"][k] = hashlib.sha256(open(os.path.join(ck, k), "rb").read()).hexdigest()
            json.dump(m, open(os.path.join(ck, "manifest.json"), "w"))
            code, out, _ = run(binary, ["eval", case, "--json"])
            # Right: the older checkpoint is used (exit 0 with a warning) or a named refusal.
            c = crashed(code, out)
            T.add("checkpoints (damaged, `eval`)", which, 1, c, 0, not c and code not in (0, 2))
        # Checkpoints of another config (capacity, task count) copied into a killed run.
        orun = os.path.join(d, "other")
        run(binary, ["run", other, "--out", orun, "-q"])
        target = os.path.join(d, "target")
        run(binary, ["run", cfg, "--out", target, "-q"])
        os.remove(os.path.join(target, "report.json"))
        shutil.rmtree(os.path.join(target, "checkpoints"))
        shutil.copytree(os.path.join(orun, "checkpoints"), os.path.join(target, "checkpoints"))
        for cmd in (["resume", target], ["eval", target]):
            code, out, _ = run(binary, cmd)
            T.add("checkpoints of another config", which, 1, crashed(code, out), 0, code != 2)


def accumulation():
    """CNN [8, 16] (batch norm), 2 tasks, 2,000 samples a task, seeds 0-2: the plain step,
    gradient accumulation over 4 micro-batches and segment checkpointing; R[0][0] and ACC."""
    rows = []
    base = ('[data]\ndataset = "fashion-mnist"\ntasks = 2\nclasses_per_task = 2\nsubsample = 2000\n'
            '[model]\ntype = "cnn"\nchannels = [8, 16]\n[optimizer]\ntype = "sgd"\nlr = 0.05\nmomentum = 0.9\n'
            '[train]\nbatch_size = 64\n')
    for name, mem in (("plain step", ""), ("`accumulate` steps = 4", '[[memory]]\ntype = "accumulate"\nsteps = 4\n'),
                      ("`checkpoint` (segments)", '[[memory]]\ntype = "checkpoint"\n')):
        d = fresh("acc-" + name.split()[0].strip("`"))
        f = write(os.path.join(d, "c.toml"), base + mem)
        r00, acc, warned = [], [], False
        for seed in (0, 1, 2):
            out = os.path.join(d, f"s{seed}")
            code, o, _ = run(NEW, ["run", f, "--out", out, "--seed", str(seed), "-q"])
            r = json.load(open(os.path.join(out, "report.json")))
            r00.append(r["accuracy_matrix"][0][0])
            acc.append(r["metrics"]["acc"])
            warned |= any(e["kind"] == "batch-statistics" for e in r["events"])
        rows.append((name, r00, acc, warned))
    return rows


def diverged():
    d = fresh("diverged")
    out = os.path.join(d, "run")
    code, o, _ = run(NEW, ["run", "examples/split-fmnist.toml", "--out", out, "-q", "--set", "data.subsample=2000",
                           "--set", "optimizer.lr=3.0", "--set", "train.log_every=5"])
    r = json.load(open(os.path.join(out, "report.json")))
    steps = open(os.path.join(out, "steps.csv")).read().splitlines()
    return code, {k: r[k] for k in ("status", "failure", "accuracy_matrix")}, steps



# 8. Sweep files with random axes: `engram sweep validate` exits 0 or 2, never crashes.
SWEEP_KEYS = ["optimizer.lr", "data.subsample", "train.epochs", "model.hidden", "forgetting.0.capacity",
              "forgetting.7.lambda", "scheduler.0.type", "nothing.here", "seeds", "configs", "", "data"]
SWEEP_VALUES = ["nan", "inf", "-1", "0", "1e308", "18446744073709551615", '""', '"x"', "[]", "{}", "true",
                "0.05", "2", "[8]"]


def sweeps(n=30):
    d = fresh("sweeps")
    write(os.path.join(d, "base.toml"), BASE)
    rng = random.Random(8)
    cases = []
    for _ in range(n):
        text = '[sweep]\nbase = "base.toml"\n' + ("seeds = [0]\n" if rng.random() < 0.5 else "")
        for _ in range(rng.randint(0, 3)):
            vals = ", ".join(rng.choice(SWEEP_VALUES) for _ in range(rng.randint(0, 2)))
            text += json.dumps(rng.choice(SWEEP_KEYS)) + f" = [{vals}]\n"
        cases.append(text)
    for which, binary in binaries():
        for i, text in enumerate(cases):
            f = write(os.path.join(d, f"s{i}.toml"), text)
            code, out, _ = run(binary, ["sweep", "validate", f], timeout=120)
            bad = crashed(code, out) or code == 124
            T.add("sweep files (random axes, `sweep validate`)", which, 1, bad, 0, not bad and code not in (0, 2))


# 9. Export targets that cannot be written: refused with exit 2, nothing of the user's lost.
def exports():
    for which, binary in binaries():
        d = fresh(f"export-{which}")
        user = os.path.join(d, "mine")
        write(os.path.join(user, "notes.txt"), "mine")
        afile = write(os.path.join(d, "a-file"), "mine")
        fifo = os.path.join(d, "fifo")
        os.mkfifo(fifo)
        loop = os.path.join(d, "loop")
        os.symlink(loop, loop)
        # (A read-only directory is not among them: the bench runs as root, who may write there.)
        targets = [user, afile, os.path.join(afile, "sub"), "/dev/null", fifo, loop, "/proc/engram-export"]
        for t in targets:
            before = {**tree(user), **{"a-file": tree(d).get("a-file")}}
            code, out, _ = run(binary, ["data", "export", "fashion-mnist", "--format", "npy", "--out", t], timeout=120)
            after = {**tree(user), **{"a-file": tree(d).get("a-file")}}
            bad = crashed(code, out) or code == 124
            T.add("export targets (existing, a file, under a file, a device, a FIFO, a loop, /proc)", which, 1,
                  bad, bool(lost(before, after)), not bad and code != 2)
        # `export RUN --safetensors FILE` onto the same kinds of target (a user's file must survive).
        run_dir = os.path.join(d, "run")
        run(binary, ["run", "examples/split-fmnist.toml", "--out", run_dir, "--quiet", "--set", "data.subsample=500"],
            timeout=300)
        # The device is a private copy of /dev/null (root may mknod): an old build turns the
        # target into a regular file, which must not happen to the machine's own /dev/null.
        dev = os.path.join(d, "null")
        os.mknod(dev, stat.S_IFCHR | 0o666, os.makedev(1, 3))
        for t in [afile, os.path.join(afile, "sub"), dev, fifo, loop, "/proc/engram.safetensors"]:
            before = {"a-file": tree(d).get("a-file")}
            code, out, _ = run(binary, ["export", run_dir, "--safetensors", t], timeout=120)
            after = {"a-file": tree(d).get("a-file")}
            dev_lost = not stat.S_ISCHR(os.lstat(dev).st_mode) or not stat.S_ISFIFO(os.lstat(fifo).st_mode)
            bad = crashed(code, out) or code == 124
            T.add("`export --safetensors` targets (a file, under a file, a device, a FIFO, a loop, /proc)", which, 1,
                  bad, bool(lost(before, after)) or dev_lost, not bad and code != 2)


def tiny_images(root):
    """A 2-class image folder of 4×4 gray PNGs written by engram itself (CSV → image-folder)."""
    src = os.path.join(root, "csv")
    rows = "label," + ",".join(f"x{i}" for i in range(16)) + "\n"
    for k in range(8):
        rows += f"{k % 2}," + ",".join(str((k * 37 + i * 11) % 256) for i in range(16)) + "\n"
    write(os.path.join(src, "train.csv"), rows)
    write(os.path.join(src, "test.csv"), rows)
    write(os.path.join(src, "dataset.toml"), "shape = [1, 4, 4]\n")
    out = os.path.join(root, "img")
    subprocess.run([NEW, "data", "export", "x", "--from", "csv", "--path", src, "--format", "image-folder",
                    "--out", out], capture_output=True)
    return out


def format_config(path, fmt, data):
    return write(path, f'[data]\nformat = "{fmt}"\npath = "{data}"\ntasks = 1\nclasses_per_task = 2\n'
                       '[model]\ntype = "mlp"\nhidden = [8]\n')


# 10. Image-folder entries that are not files: refused by name (or read), never a hang.
def image_non_files():
    for which, binary in binaries():
        d = fresh(f"images-{which}")
        seed = tiny_images(d)
        for kind in ["fifo", "dangling", "loop", "directory"]:
            case = os.path.join(d, kind)
            shutil.copytree(seed, case)
            cls = sorted(os.listdir(os.path.join(case, "train")))[0]
            at = os.path.join(case, "train", cls, "x.png")
            if kind == "fifo":
                os.mkfifo(at)
            elif kind == "dangling":
                os.symlink(os.path.join(case, "absent.png"), at)
            elif kind == "loop":
                os.symlink(at, at)
            else:
                os.makedirs(at)
            cfg = format_config(os.path.join(d, f"{kind}.toml"), "image-folder", case)
            code, out, _ = run(binary, ["validate", cfg], timeout=30)
            bad = crashed(code, out) or code == 124
            right = code == 0 or (code == 2 and at in out)
            T.add("image-folder entries that are not files", which, 1, bad, 0, not bad and not right)


def npy(path, descr, shape, data):
    dims = ", ".join(str(s) for s in shape) + ("," if len(shape) == 1 else "")
    header = f"{{'descr': '{descr}', 'fortran_order': False, 'shape': ({dims}), }}"
    header += " " * ((64 - (10 + len(header) + 1) % 64) % 64) + "\n"
    with open(path, "wb") as f:
        f.write(b"\x93NUMPY\x01\x00" + struct.pack("<H", len(header)) + header.encode() + data)


# 11. Huge labels (CSV and NPY), under a 2 GiB address-space limit: refused by name, cheaply.
def huge_labels():
    for which, binary in binaries():
        d = fresh(f"labels-{which}")
        cases = []
        for i, label in enumerate(["1000000000", "200000000", "99999999999999999999999", "-1"]):
            data = os.path.join(d, f"csv{i}")
            write(os.path.join(data, "train.csv"), f"label,a,b\n0,1,2\n1,3,4\n{label},5,6\n")
            write(os.path.join(data, "test.csv"), "label,a,b\n0,1,2\n1,3,4\n")
            cases.append((format_config(os.path.join(d, f"csv{i}.toml"), "csv", data), "train.csv"))
        for i, label in enumerate([3_000_000_000, 2**63 - 1, 2**32 - 1, 2**31, -1]):
            data = os.path.join(d, f"npy{i}")
            os.makedirs(data)
            for x in ("train_x", "test_x"):
                npy(os.path.join(data, f"{x}.npy"), "|u1", [4, 2], bytes(range(8)))
            npy(os.path.join(data, "train_y.npy"), "<i8", [4], struct.pack("<4q", 0, 1, label, 1))
            npy(os.path.join(data, "test_y.npy"), "<i8", [4], struct.pack("<4q", 0, 1, 0, 1))
            cases.append((format_config(os.path.join(d, f"npy{i}.toml"), "npy", data), "train_y.npy"))
        for cfg, file in cases:
            code, out, _ = run(binary, ["validate", cfg], timeout=120, limit_kb=2 << 20)
            bad = crashed(code, out) or code == 124
            T.add("huge labels (CSV, NPY)", which, 1, bad, 0, not bad and not (code == 2 and file in out))


# 12. A real plugin with one section byte-patched (its declaration intact): `list --plugin`.
def patched_plugins():
    """Each build patches its own fixture plugin (a plugin of another build is refused by its
    declaration before any of its code is mapped, which would test nothing)."""
    for which, binary in binaries():
        real = os.path.join(os.path.dirname(binary), "libengram_plugin_fixture.so")
        if not os.path.exists(real):
            continue
        data = open(real, "rb").read()
        d = fresh(f"patched-plugins-{which}")
        rng = random.Random(12)
        cases = []
        for name, off, size in elf_sections(data):
            if name in ("", ".engram_plugin", ".bss") or size == 0:
                continue
            b = bytearray(data)
            b[off:off + size] = rng.randbytes(size)
            p = os.path.join(d, f"lib{name.strip('.').replace('.', '_')}.so")
            open(p, "wb").write(bytes(b))
            cases.append(p)
        for p in cases:
            code, out, _ = run(binary, ["list", "--plugin", p], timeout=120, limit_kb=2 << 20)
            bad = crashed(code, out) or code == 124 or code >= 128
            T.add("plugins byte-patched (one ELF section, declaration intact)", which, 1, bad, 0,
                  not bad and code not in (0, 2))


def elf_sections(data):
    """(name, file offset, size) of every section of a 64-bit little-endian ELF file with file
    contents (not NOBITS)."""
    shoff, = struct.unpack_from("<Q", data, 0x28)
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", data, 0x3A)
    heads = [struct.unpack_from("<IIQQQQIIQQ", data, shoff + i * shentsize) for i in range(shnum)]
    stroff = heads[shstrndx][4]
    out = []
    for h in heads:
        name_off, typ, off, size = h[0], h[1], h[4], h[5]
        if typ == 8:  # SHT_NOBITS
            continue
        end = data.index(b"\0", stroff + name_off)
        out.append((data[stroff + name_off:end].decode(), off, size))
    return out


def main():
    os.makedirs(WORK, exist_ok=True)
    t0 = time.time()
    configs(); out_dirs(); race(); plugins(); shapes(); checkpoints()
    sweeps(); exports(); image_non_files(); huge_labels(); patched_plugins()
    code, rep, steps = diverged()
    acc_rows = accumulation()
    el = time.time() - t0
    sides = ["after"] + (["before"] if OLD else [])
    print("<!-- Generated by `bash bench/nothing-lost.sh`; do not edit by hand. -->\n")
    head = "| input | tried | " + " | ".join(f"crashed ({s}) | lost a file ({s}) | wrong outcome ({s})" for s in sides) + " |"
    print(head)
    print("|---|---|" + "---|" * (3 * len(sides)))
    for cls, by in T.rows.items():
        tried = by["after"][0]
        cells = []
        for s in sides:
            _, c, l, w = by.get(s, [0, 0, 0, 0])
            cells += [str(c), str(l), str(w)]
        print(f"| {cls} | {tried} | " + " | ".join(cells) + " |")
    print()
    print("*crashed*: a panic, an abort (an allocation that failed under a 2 GiB address-space limit), a")
    print("signal or a timeout; *lost a file*: a file that was there before the command is gone or changed;")
    print("*wrong outcome*: an error without the file's position, exit 0 with a mixed directory (a report beside")
    print("another run's config), a plugin file read past 512 MiB, or a checkpoint of another config")
    print("accepted; a sweep file, an image-folder entry, a huge label or a patched plugin that ends in another")
    print("exit code than 0 or 2 (for a label or an image entry: exit 2 not naming the file; for an export target:")
    print("not exit 2). " + "; ".join(NOTES) + ".")
    if OLD:
        print()
        print(f"*before*: {os.environ.get('OLD_NAME', 'an older build')}.")
    print()
    print(f"A diverged run (`examples/split-fmnist.toml`, `--set optimizer.lr=3.0`, 2,000 samples a task) exits {code}")
    print("and keeps its record; `report.json`:\n")
    print("```json")
    print(json.dumps(rep, indent=2))
    print("```\n")
    print("and the end of `steps.csv`:\n")
    print("```text")
    print("\n".join(steps if len(steps) <= 6 else [steps[0], "…"] + steps[-4:]))
    print("```")
    print()
    print("Gradient accumulation with batch norm (`cnn`, channels [8, 16], 2 tasks, 2,000 samples a task,")
    print("seeds 0, 1, 2): R[0][0] is the accuracy on task 0 right after training on it.\n")
    print("| step | R[0][0] (seeds 0, 1, 2) | ACC (seeds 0, 1, 2) | `batch-statistics` warning |")
    print("|---|---|---|---|")
    for name, r00, acc, warned in acc_rows:
        f = lambda v: ", ".join(f"{x:.4f}" for x in v)
        print(f"| {name} | {f(r00)} | {f(acc)} | {'yes' if warned else 'no'} |")
    print(f"\n<!-- {el:.0f} s -->", file=sys.stderr)


main()
