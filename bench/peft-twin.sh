#!/usr/bin/env bash
# Regenerates book/src/figures/peft-twin.md and .json: engram's LoRA beside Hugging Face PEFT's
# on the four-task text stream (issue #30's "PyTorch + PEFT, same recipe, same stream, side by
# side"). The recipe is bench/lora-text.sh's `lora-naive` row (examples/text/minilm-stream.toml
# without replay: all-MiniLM-L6-v2 frozen, LoRA r = 8, alpha 16 on query/value, the head
# trainable, AdamW lr 1e-3, batch 16, 1 epoch, class-incremental with mask_logits) with no
# dropout, since a dropout mask is a draw the two sides cannot share; engram's adapters on each
# of its two paths (PATHS: `activation`, x·A·B beside the frozen layer as PEFT computes it, and
# `weight`, Burn's W₀ + (α/r)·A·B, what `path = "auto"` picks without dropout). For each seed:
#   1. `engram data stream` writes the rows the engram run trains on, in its order (and the
#      head's class count);
#   2. bench/reference/peft_twin.py init: PEFT draws the starting adapters (its Kaiming-uniform
#      A, B = 0) and torch the head; engram starts from them with `[model] adapter = DIR`;
#   3. `engram run` trains and evaluates, once a path; bench/reference/peft_twin.py train does
#      the same in PyTorch + PEFT on those rows, batch by batch, with AdamW set as Burn's.
# Both sides run one after the other on THREADS threads; peak memory is each process's peak
# RSS (GNU time's %M, frozen base included), throughput the training samples per second of
# the training phase (evaluation excluded) as each side reports it.
# Needs `cargo build --release --workspace`, the data (`engram data fetch text-stream`,
# `engram data fetch minilm`) and a Python with torch, transformers and peft (PYTHON):
#   PYTHON=/tmp/venv-ref/bin/python bash bench/peft-twin.sh
# SEEDS, PATHS, SUBSAMPLE, TEST, THREADS, ENGRAM (the binary), WORK (the runs' directory) override the
# settings below.
set -euo pipefail
cd "$(dirname "$0")/.."
E=$(realpath "${ENGRAM:-target/release/engram}")
W=$(realpath -m "${WORK:-target/bench-peft-twin}")
DATA=$(realpath -m "${ENGRAM_DATA:-data}")
PY=${PYTHON:?set PYTHON to a Python with torch, transformers and peft}
SEEDS=${SEEDS:-0 1 2}
PATHS=${PATHS:-activation weight}
SUBSAMPLE=${SUBSAMPLE:-120}
TEST=${TEST:-60}
THREADS=${THREADS:-1}
LR=1e-3
BASE=examples/text/minilm-stream.toml
TWIN=bench/reference/peft_twin.py
rm -rf "$W"
mkdir -p "$W"
load=$(cut -d' ' -f1-3 /proc/loadavg)
export ENGRAM_DATA=$DATA
for seed in $SEEDS; do
    s="$W/seed-$seed"
    mkdir -p "$s"
    # The example's stream and model at this slice, lora-naive's learning rate, no replay,
    # no dropout.
    sed -e "s#\.\./\.\./data#$DATA#g" \
        -e "s/^seed = .*/seed = $seed/" \
        -e "s/^subsample = .*/subsample = $SUBSAMPLE/" \
        -e "s/^test_subsample = .*/test_subsample = $TEST/" \
        -e "s/^lr = .*/lr = $LR/" \
        -e "s#^pooling = .*#pooling = \"mean\"\ndropout = 0.0#" \
        -e '/^\[\[forgetting\]\]/,$d' "$BASE" > "$s/engram.toml"
    printf '[[memory]]\ntype = "lora"\nrank = 8\nalpha = 16.0\n' >> "$s/engram.toml"
    echo "== seed $seed" >&2
    "$E" data stream "$s/engram.toml" --out "$s/stream.json" -q
    classes=$(python3 -c 'import json, sys; print(json.load(open(sys.argv[1]))["classes"])' \
        "$s/stream.json")
    # PEFT draws the adapters and torch the head; engram starts from them.
    "$PY" "$TWIN" init "$s/init" --base "$DATA/minilm" --classes "$classes" --seed "$seed" \
        > "$s/init.log" 2>&1
    for path in $PATHS; do
        sed -e "s/^alpha = 16.0$/alpha = 16.0\npath = \"$path\"/" \
            -e "s#^dropout = 0.0\$#dropout = 0.0\nadapter = \"$s/init\"#" \
            "$s/engram.toml" > "$s/$path.toml"
        RAYON_NUM_THREADS=$THREADS /usr/bin/time -f %M -o "$s/$path.rss" \
            "$E" run "$s/$path.toml" --out "$s/$path" -q > "$s/$path.log" 2>&1
    done
    /usr/bin/time -f %M -o "$s/peft.rss" "$PY" "$TWIN" train "$s/stream.json" "$s/init" \
        --base "$DATA/minilm" --lr $LR --threads "$THREADS" --out "$s/peft.json" \
        > "$s/peft.log" 2>&1
done
python3 - "$W" "$load" "$THREADS" "$SUBSAMPLE" "$TEST" "$PATHS" $SEEDS <<'PY'
import json, os, sys
w, load, threads, sub, test, paths, *seeds = sys.argv[1:]
paths = paths.split()
cpu = "unknown CPU"
for line in open("/proc/cpuinfo"):
    if line.startswith("model name"):
        cpu = line.split(":", 1)[1].strip()
        break
rows = []
for seed in seeds:
    s = os.path.join(w, f"seed-{seed}")
    p = json.load(open(os.path.join(s, "peft.json")))
    # GNU time's last line is the peak RSS in KiB.
    rss = lambda f: int(open(os.path.join(s, f)).read().split()[-1]) * 1024
    for path in paths:
        e = json.load(open(os.path.join(s, path, "report.json")))
        rows.append({
            "seed": int(seed),
            "path": path,
            "engram": {"accuracy_matrix": e["accuracy_matrix"], "acc": e["metrics"]["acc"],
                       "train_samples_per_s": e["throughput"]["train_samples_per_s"],
                       "peak_rss_bytes": rss(f"{path}.rss")},
            "peft": {"accuracy_matrix": p["accuracy_matrix"], "acc": p["acc"],
                     "train_samples_per_s": p["train_samples_per_s"],
                     "peak_rss_bytes": rss("peft.rss")},
        })
versions = json.load(open(os.path.join(w, f"seed-{seeds[0]}", "peft.json")))["versions"]
out = {"cpu": cpu, "cores": os.cpu_count(), "load": load, "threads": int(threads),
       "subsample": int(sub), "test_subsample": int(test), "versions": versions, "rows": rows}
with open("book/src/figures/peft-twin.json.tmp", "w") as f:
    json.dump(out, f, indent=1)
    f.write("\n")

# The table (tests/engram/book.rs recomputes its cells from the JSON).
mib = lambda b: b / 2**20
def cells(r):
    e, p = r["engram"], r["peft"]
    worst = max(abs(a - b) for ra, rb in zip(e["accuracy_matrix"], p["accuracy_matrix"])
                for a, b in zip(ra, rb))
    return [e["acc"], p["acc"], abs(e["acc"] - p["acc"]), worst,
            e["train_samples_per_s"], p["train_samples_per_s"],
            e["train_samples_per_s"] / p["train_samples_per_s"],
            mib(e["peak_rss_bytes"]), mib(p["peak_rss_bytes"])]
fmt = ["{:.4f}", "{:.4f}", "{:.4f}", "{:.4f}", "{:.2f}", "{:.2f}", "{:.2f}×", "{:,.0f}", "{:,.0f}"]
table = [cells(r) for r in rows]
md = ["<!-- Generated by `bash bench/peft-twin.sh`; do not edit by hand. -->", "",
      f"Machine: {cpu}, {os.cpu_count()} cores, {threads} thread(s) a side, one side after the "
      f"other; load average {load} at the start. PyTorch {versions['torch']}, transformers "
      f"{versions['transformers']}, PEFT {versions['peft']}.", "",
      f"The four-task text stream at {sub} training and {test} test documents a task, "
      "all-MiniLM-L6-v2 frozen, LoRA r = 8 (alpha 16) on query and value, the head trainable, "
      "AdamW lr 1e-3, batch 16, 1 epoch, no dropout; each seed starts both sides from the "
      "adapters and head PEFT drew and feeds them engram's batches; engram's adapters on the "
      "activation path (x·A·B beside the frozen layer, as PEFT) and on the weight path "
      "(Burn's W₀ + (α/r)·A·B), one PEFT run a seed beside both. ACC is the accuracy "
      "matrix's last row's mean; max |Δ| the largest difference of any cell of the two "
      "accuracy matrices; peak RSS the process's, frozen base included.", "",
      "| seed | path | engram ACC | PEFT ACC | \\|Δ ACC\\| | max \\|Δ\\| cell | engram samples/s "
      "| PEFT samples/s | engram / PEFT | engram peak RSS MiB | PEFT peak RSS MiB |",
      "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
line = lambda head, c: "| " + " | ".join(head + [f.format(v) for f, v in zip(fmt, c)]) + " |"
for path in paths:
    mine = [c for r, c in zip(rows, table) if r["path"] == path]
    for r, c in zip([r for r in rows if r["path"] == path], mine):
        md.append(line([str(r["seed"]), path], c))
    md.append(line(["mean", path], [sum(c[i] for c in mine) / len(mine) for i in range(len(fmt))]))
with open("book/src/figures/peft-twin.md.tmp", "w") as f:
    f.write("\n".join(md) + "\n")
PY
mv book/src/figures/peft-twin.json.tmp book/src/figures/peft-twin.json
mv book/src/figures/peft-twin.md.tmp book/src/figures/peft-twin.md
cat book/src/figures/peft-twin.md
