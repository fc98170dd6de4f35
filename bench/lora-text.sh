#!/usr/bin/env bash
# Regenerates book/src/figures/lora-text.md: the four-task text stream of
# examples/text/minilm-stream.toml (BBC topic -> spam, old release -> spam, new release ->
# Austen novel; all-MiniLM-L6-v2 from its Hugging Face directory, class-incremental over 13
# classes, 1 epoch, batch 16, AdamW), each row a way to train it, side by side with
# `engram compare` (mean ± std over SEEDS):
#   full naive, full replay        every weight trains (lr 5e-5)
#   lora naive, lora + replay      rank 8 on query/value, the head trainable (lr 1e-3)
#   o-lora                         lora with merge = "task" and O-LoRA's orthogonality loss
#   per-task-lora                  one adapter a task, picked by the nearest task prototype
#   per-task-lora-seen             the same, its loss over every class seen so far
#                                  (train_classes = "seen") instead of the task's own
#   moe-lora                       lora on the activation path, a pool of experts per layer
#                                  grown by task with a top-k router (2 experts a task, top 2)
#   joint                          full fine-tuning on all tasks at once (the upper bound)
# then each row's task-identification line where it has one. Replay keeps CAPACITY documents.
# SUBSAMPLE / TEST training / test documents a task (the text issue's sizes are 1000 / 200;
# the defaults are a slice that fits a session on 2 cores: about 3 minutes a run there).
# Needs `cargo build --release --workspace` and the data (`engram data fetch text-stream`,
# `engram data fetch minilm`).
#   SEEDS, SUBSAMPLE, TEST, CAPACITY, ROWS (a subset, space-separated), ENGRAM (the binary),
#   WORK (the runs' directory) override the settings below; KEEP=1 keeps finished rows.
set -euo pipefail
cd "$(dirname "$0")/.."
E=$(realpath "${ENGRAM:-target/release/engram}")
W=$(realpath -m "${WORK:-target/bench-lora-text}")
DATA=$(realpath -m "${ENGRAM_DATA:-data}")
SEEDS=${SEEDS:-0,1,2}
SUBSAMPLE=${SUBSAMPLE:-120}
TEST=${TEST:-60}
CAPACITY=${CAPACITY:-200}
ROWS=${ROWS:-full-naive full-replay lora-naive lora-replay o-lora per-task-lora per-task-lora-seen moe-lora joint}
BASE=examples/text/minilm-stream.toml
[ "${KEEP:-0}" = 1 ] || rm -rf "$W"
mkdir -p "$W"
load=$(cut -d' ' -f1-3 /proc/loadavg)

# The example's stream, model and training, without its replay entry, at this slice.
base() {
    sed -e "s#\.\./\.\./data#$DATA#g" \
        -e "s/^subsample = .*/subsample = $SUBSAMPLE/" \
        -e "s/^test_subsample = .*/test_subsample = $TEST/" \
        -e "s/^lr = .*/lr = $1/" \
        -e '/^\[\[forgetting\]\]/,$d' "$BASE"
}
LORA='[[memory]]
type = "lora"'
REPLAY="[[forgetting]]
type = \"replay\"
capacity = $CAPACITY"
config() {
    case "$1" in
    full-naive) base 5e-5 ;;
    full-replay) base 5e-5; echo "$REPLAY" ;;
    joint) base 5e-5 | sed 's/^eval_batch_size = \(.*\)/eval_batch_size = \1\njoint = true/' ;;
    lora-naive) base 1e-3; echo "$LORA" ;;
    lora-replay) base 1e-3; echo "$LORA"; echo "$REPLAY" ;;
    o-lora) base 1e-3; echo "$LORA"; echo 'merge = "task"
[[forgetting]]
type = "o-lora"' ;;
    per-task-lora) base 1e-3; echo "$LORA"; echo 'merge = "none"
[[forgetting]]
type = "per-task-lora"' ;;
    per-task-lora-seen) config per-task-lora; echo 'train_classes = "seen"' ;;
    moe-lora) base 1e-3; echo "$LORA"; echo 'path = "activation"
[[forgetting]]
type = "moe-lora"' ;;
    *) echo "unknown row $1" >&2; exit 2 ;;
    esac
}
for row in $ROWS; do
    if [ "${KEEP:-0}" = 1 ] && [ -d "$W/$row" ]; then continue; fi
    config "$row" > "$W/$row.toml"
    echo "== $row" >&2
    "$E" run "$W/$row.toml" --seeds "$SEEDS" --out "$W/$row" -q
done
# Named by row (run from the work directory), not by this machine's paths.
(cd "$W" && "$E" compare $ROWS > compare.txt 2> warnings.txt) || true
# Task identification of the rows that infer tasks, per seed (report.json's task_id_matrix),
# and the router's choices of the rows with a mixture (forgetting["moe-lora"].routing).
python3 - "$W" $ROWS > "$W/routing.txt" <<'PY'
import glob, json, os, sys
w, rows = sys.argv[1], sys.argv[2:]
for row in rows:
    for rep in sorted(glob.glob(os.path.join(w, row, "**", "report.json"), recursive=True)):
        r = json.load(open(rep))
        t = r.get("task_id_matrix")
        if t:
            cells = " ".join("–" if v is None else f"{100 * v:.1f}" for v in t[-1])
            print(f"{row} seed {r['config']['run']['seed']}: {cells}")
PY
python3 - "$W" $ROWS > "$W/experts.txt" <<'PY'
import glob, json, os, sys
w, rows = sys.argv[1], sys.argv[2:]
for row in rows:
    for rep in sorted(glob.glob(os.path.join(w, row, "**", "report.json"), recursive=True)):
        r = json.load(open(rep))
        m = r.get("forgetting", {}).get("moe-lora")
        if m and m.get("routing"):
            seed = r["config"]["run"]["seed"]
            for j, shares in enumerate(m["routing"][-1]):
                cells = " ".join(f"{100 * v:.1f}" for v in shares)
                print(f"{row} seed {seed}, T{j} inputs: {cells}")
PY
python3 - "$load" "$SEEDS" "$SUBSAMPLE" "$TEST" "$CAPACITY" "$W" > book/src/figures/lora-text.md.tmp <<'PY'
import os, sys
load, seeds, sub, test, cap, w = sys.argv[1:]
cpu = "unknown CPU"
for line in open("/proc/cpuinfo"):
    if line.startswith("model name"):
        cpu = line.split(":", 1)[1].strip()
        break
print("<!-- Generated by `bash bench/lora-text.sh`; do not edit by hand. -->\n")
print(f"Machine: {cpu}, {os.cpu_count()} cores; Burn's CPU backend (flex); load average {load} "
      "at the start (times are from a shared machine).\n")
over = "mean ± std over the seeds" if "," in seeds else "one seed: no spread is shown"
print(f"The four-task text stream, all-MiniLM-L6-v2, class-incremental, 1 epoch: {sub} training "
      f"and {test} test documents a task, seeds {seeds}, replay of {cap} documents "
      f"({over}):\n")
print("```text")
print(open(os.path.join(w, "compare.txt")).read().rstrip("\n"))
print("```\n")
routing = open(os.path.join(w, "routing.txt")).read().rstrip("\n")
if routing:
    print("How often each task's test documents were routed to their own task after the last "
          "task (%, T0 T1 T2 T3; `task_id_matrix`):\n")
    print("```text")
    print(routing)
    print("```")
experts = open(os.path.join(w, "experts.txt")).read().rstrip("\n")
if experts:
    print("\nWhere the mixture's router sent each task's training inputs after the last task "
          "(% of top-k choices, to the experts added at T0 T1 T2 T3; `forgetting[\"moe-lora\"]."
          "routing`):\n")
    print("```text")
    print(experts)
    print("```")
PY
mv book/src/figures/lora-text.md.tmp book/src/figures/lora-text.md
cat book/src/figures/lora-text.md
