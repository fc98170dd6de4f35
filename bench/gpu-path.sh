#!/usr/bin/env bash
# The GPU code path of engram, run on one CubeCL device: the device pool's memory accounting,
# AMP in f16 with dynamic loss scaling, segment checkpointing (gradients exact: the same matrix
# as without it), the memory budget's probe steps on the pool, a killed run resumed, and a run
# resumed on another device. Tiny models on small real slices of Fashion-MNIST.
#
#   bench/gpu-path.sh [--bin ENGRAM] [--device D] [--out DIR]
#
# Defaults: target/cuda/release/engram (the cuda build), device `cuda`, DIR target/gpu-path.
# bench/gpu.sh run runs it on the GPU machine; CI runs it on `cpu` with the cuda build, inside
# gpu.sh run. `--device cubecl-cpu` (a build with `--features cuda,cubecl-cpu`) runs the GPU
# path's kernels on this CPU, but far too slowly so far (book, "The accelerator path").
# Writes DIR/gpu-path.json (one entry a check, with its figures); exit 1 when a check fails.
set -uo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
BIN=$repo/target/cuda/release/engram DEV=cuda OUT=$repo/target/gpu-path
while [ $# -gt 0 ]; do
  case "$1" in
    --bin) BIN=$2; shift 2 ;;
    --device) DEV=$2; shift 2 ;;
    --out) OUT=$2; shift 2 ;;
    *) echo "usage: bench/gpu-path.sh [--bin ENGRAM] [--device D] [--out DIR]" >&2; exit 2 ;;
  esac
done
[ -x "$BIN" ] || { echo "gpu-path: no binary at $BIN (build: scripts/setup-cuda-build.sh, then CARGO_TARGET_DIR=target/cuda cargo build --release --features cuda,vulkan; --features cuda serves --device cuda only)" >&2; exit 2; }
rm -rf "$OUT"; mkdir -p "$OUT"; OUT=$(cd "$OUT" && pwd)  # the paths below are taken as given, from any directory
results="$OUT/results.jsonl"; : >"$results"
fails=0

# One small class-incremental MLP run; extra TOML (memory strategies) is appended.
config() { # NAME EXTRA_TOML
  cat >"$OUT/$1.toml" <<EOF
[run]
seed = 0
[data]
dataset = "fashion-mnist"
scenario = "class-incremental"
tasks = 3
classes_per_task = 2
subsample = 600
test_subsample = 200
[model]
type = "mlp"
hidden = [64, 64, 64, 64]
activation = "relu"
[optimizer]
type = "adam"
lr = 0.003
[train]
epochs = 1
batch_size = 32
eval_batch_size = 200
[[forgetting]]
type = "replay"
capacity = 60
$2
EOF
}
run() { # NAME DEVICE [extra args]
  local name=$1 dev=$2; shift 2
  "$BIN" run "$OUT/$name.toml" --out "$OUT/$name" --device "$dev" -q "$@" >"$OUT/$name.log" 2>&1
}
py() { python3 -c "import json,sys
def r(n): return json.load(open('$OUT/'+n+'/report.json'))
$1"; }
# judge RC NAME LOG FIGURES OK: records {check, ok, figures}. FIGURES and OK are Python
# expressions over r(run) (a run's report.json); a failed command (RC != 0) records its last line.
judge() {
  local ok fig
  if [ "$1" = 0 ]; then
    fig=$(py "print(json.dumps($4))" 2>&1) || fig="{\"error\": $(printf %s "$fig" | tail -1 | python3 -c 'import json,sys; print(json.dumps(sys.stdin.read()))')}"
    ok=$(py "print(str(bool($5)).lower())" 2>/dev/null) || ok=false
  else
    ok=false fig="{\"error\": $(tail -1 "$3" | python3 -c 'import json,sys; print(json.dumps(sys.stdin.read().strip()))')}"
  fi
  printf '{"check": "%s", "ok": %s, "figures": %s}\n' "$2" "$ok" "$fig" >>"$results"
  if [ "$ok" = true ]; then echo "ok    $2: $fig"; else echo "FAIL  $2: $fig"; fails=$((fails + 1)); fi
}
learns() { echo "r('$1')['metrics']['acc'] > 0.4"; }   # class-IL over 6 classes: chance is 1/6
pool=$([ "$DEV" = cpu ] && echo heap || echo device-pool)

# 1. Device-pool accounting on a plain run.
config plain ""
run plain "$DEV"
judge $? pool-accounting "$OUT/plain.log" \
  "{k: r('plain')['memory'][k] for k in ('source', 'train')} | {'acc': r('plain')['metrics']['acc'], 'device': r('plain')['device']}" \
  "r('plain')['memory']['source'] == '$pool' and r('plain')['memory']['train']['peak_bytes'] > 0 and r('plain')['device'] == '$DEV' and $(learns plain)"

# 2. AMP f16 with dynamic loss scaling: it learns, and the scaler's figures are reported.
config amp '[[memory]]
type = "amp"
dtype = "f16"'
run amp "$DEV"
judge $? amp-f16 "$OUT/amp.log" \
  "{'acc': r('amp')['metrics']['acc'], 'amp': r('amp')['memory']['strategies'].get('amp'), 'skipped_steps': r('amp')['training']['skipped_steps']}" \
  "'amp' in r('amp')['memory']['strategies'] and r('amp')['training']['skipped_steps'] < r('amp')['training']['steps'] and $(learns amp)"

# 3. Segment checkpointing: exact gradients, so the same accuracy matrix as the plain run.
config ckpt '[[memory]]
type = "checkpoint"
interval = 2'
run ckpt "$DEV"
judge $? checkpoint-exact "$OUT/ckpt.log" \
  "{'plain_final_row': r('plain')['accuracy_matrix'][-1], 'checkpoint_final_row': r('ckpt')['accuracy_matrix'][-1]}" \
  "r('plain')['accuracy_matrix'] == r('ckpt')['accuracy_matrix']"

# 4. The memory budget: probe steps on the device pool pick a plan.
config budget '[[memory]]
type = "budget"
budget = "2 MiB"'
run budget "$DEV"
judge $? budget-probes "$OUT/budget.log" \
  "{'budget': r('budget')['memory']['strategies'].get('budget'), 'acc': r('budget')['metrics']['acc']}" \
  "r('budget')['memory']['strategies']['budget']['probes'][0]['peak_bytes'] > 0 and r('budget')['memory']['strategies']['budget']['plan'] is not None and $(learns budget)"

# 5. Killed at global step 30 (of 57, in the second task), resumed: the uninterrupted run's
#    matrix, exactly.
config cut ""
(ENGRAM_FAILPOINT=step-30 run cut "$DEV") 2>/dev/null  # aborts, as meant
"$BIN" resume "$OUT/cut" -q >"$OUT/cut-resume.log" 2>&1
judge $? resume "$OUT/cut-resume.log" \
  "{'final_row': r('cut')['accuracy_matrix'][-1]}" \
  "r('plain')['accuracy_matrix'] == r('cut')['accuracy_matrix']"

# 6. Killed on the CPU (flex), resumed on the device: it finishes there, and learns.
config across ""
(ENGRAM_FAILPOINT=step-30 run across cpu) 2>/dev/null  # aborts, as meant
"$BIN" resume "$OUT/across" --device "$DEV" -q >"$OUT/across-resume.log" 2>&1
judge $? resume-across-devices "$OUT/across-resume.log" \
  "{'device': r('across')['device'], 'acc': r('across')['metrics']['acc'], 'final_row': r('across')['accuracy_matrix'][-1]}" \
  "r('across')['device'] == '$DEV' and $(learns across)"

python3 - "$results" "$OUT/gpu-path.json" "$DEV" <<'EOF'
import json, os, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
tmp = sys.argv[2] + ".tmp"
json.dump({"device": sys.argv[3], "checks": rows}, open(tmp, "w"), indent=1)
os.replace(tmp, sys.argv[2])
EOF
echo "gpu-path on $DEV: $((6 - fails)) of 6 checks pass ($OUT/gpu-path.json)"
[ $fails = 0 ]
