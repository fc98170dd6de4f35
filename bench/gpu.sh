#!/usr/bin/env bash
# One command for a GPU machine that has no Rust toolchain and no network.
#
#   bench/gpu.sh pack [--out FILE] [--bin DIR]     (here)  writes one .tar.xz bundle (<= 64 MiB)
#   bench/gpu.sh run  [--bundle FILE] [--out DIR] [--device D]   (there) runs it, writes DIR/gpu-figures.json
#
# pack takes the cuda-feature build (DIR, default target/cuda/release: engram and
# libengram_core.so, LLVM linked statically), the toolchain's libstd, the shared libraries the
# binary needs beyond glibc's own, a slice of the real Fashion-MNIST (12,000 training and 2,000
# test images, gzipped IDX), the example configs and this script; it prints the bundle's size.
# run unpacks the bundle (or uses the directory it is in), probes the device (default cuda;
# without one it falls back to the CPU and says so), and runs, each step under a time limit and
# all of them in under 10 minutes: the device probe, `bench throughput` (engram and the plain
# PyTorch loop of the same model, when torch imports), `bench memory` (ViT, MLP, the
# BERT-large geometry, and SmolLM2's geometry -- full fine-tuning with AdamW, LoRA and QLoRA, each
# with and without checkpointing -- all with random init: no weights travel), the main job
# (Split-FMNIST), the checkpoint+AMP example, and bench/gpu-path.sh (the GPU code path's checks).
# Every figure lands in one JSON file, DIR/gpu-figures.json, with each step's exit status.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
cmd=${1:-}; [ $# -gt 0 ] && shift

usage() { sed -n 2,6p "$0" | sed 's/^# \{0,1\}//' >&2; exit 2; }

pack() {
  local out=target/gpu-bundle.tar.xz bin=target/cuda/release
  while [ $# -gt 0 ]; do
    case "$1" in --out) out=$2; shift 2 ;; --bin) bin=$2; shift 2 ;; *) usage ;; esac
  done
  cd "$here/.."
  [ -x "$bin/engram" ] && [ -f "$bin/libengram_core.so" ] || {
    echo "gpu.sh pack: no cuda build in $bin; build it with:" >&2
    echo "  scripts/setup-cuda-build.sh && CARGO_TARGET_DIR=target/cuda cargo build --release --features cuda" >&2
    exit 2; }
  "$bin/engram" --version >/dev/null 2>&1 || { echo "gpu.sh pack: $bin/engram does not start" >&2; exit 1; }
  local data=${ENGRAM_DATA:-}/fashion-mnist
  [ -f "$data/train-images-idx3-ubyte.gz" ] || data=/usr/share/datasets/fashion-mnist
  [ -f "$data/train-images-idx3-ubyte.gz" ] || { echo "gpu.sh pack: Fashion-MNIST not found (apt-get install dataset-fashion-mnist, or engram data fetch fashion-mnist)" >&2; exit 2; }
  local stage; stage=$(mktemp -d); trap 'rm -rf "$stage"' RETURN
  local b=$stage/engram-gpu; mkdir -p "$b/bin" "$b/lib" "$b/data/fashion-mnist" "$b/examples" "$b/bench"
  cp "$bin/engram" "$bin/libengram_core.so" "$b/bin/"
  # The static symbol tables go (LLVM's are most of the library's size); the dynamic symbols
  # that the binary and plugins link against stay.
  command -v strip >/dev/null && strip --strip-unneeded "$b/bin/engram" "$b/bin/libengram_core.so"
  cp "$(rustc --print sysroot)"/lib/rustlib/*/lib/libstd-*.so "$b/lib/"
  # Shared libraries beyond glibc's own (LLVM's zlib, zstd, libxml2, libstdc++...): the GPU
  # machine's distribution may lack them or have other versions.
  ldd "$b/bin/engram" "$b/bin/libengram_core.so" | awk '/=> \//{print $3}' | sort -u | while read -r so; do
    case "${so##*/}" in
      libc.so*|libm.so*|libdl.so*|libpthread.so*|librt.so*|ld-linux*|libresolv.so*|libstd-*|libengram_core.so) ;;
      *) cp -L "$so" "$b/lib/" ;;
    esac
  done
  python3 - "$data" "$b/data/fashion-mnist" <<'EOF'
import gzip, struct, sys
src, dst = sys.argv[1], sys.argv[2]
for split, n in (("train", 12000), ("t10k", 2000)):
    for kind, hdr in (("images-idx3", 16), ("labels-idx1", 8)):
        raw = gzip.open(f"{src}/{split}-{kind}-ubyte.gz").read()
        dims = struct.unpack(">" + "I" * ((hdr - 4) // 4), raw[4:hdr])
        per = 1
        for d in dims[1:]:
            per *= d
        body = raw[hdr:hdr + n * per]
        head = raw[:4] + struct.pack(">I", n) + raw[8:hdr]
        with gzip.open(f"{dst}/{split}-{kind}-ubyte.gz", "wb", compresslevel=9) as f:
            f.write(head + body)
EOF
  cp examples/split-fmnist.toml examples/vit-split-fmnist-memory.toml "$b/examples/"
  cp bench/gpu.sh bench/gpu-path.sh bench/throughput_torch.py "$b/bench/"
  git rev-parse HEAD >"$b/COMMIT" 2>/dev/null || echo unknown >"$b/COMMIT"
  "$bin/engram" --version >"$b/VERSION" 2>&1
  mkdir -p "$(dirname "$out")"
  tar -C "$stage" -cf - engram-gpu | xz -9 -T0 >"$out.tmp" && mv -f "$out.tmp" "$out" || { rm -f "$out.tmp"; exit 1; }
  local size; size=$(stat -c %s "$out")
  echo "gpu.sh pack: $out: $size bytes ($(python3 -c "print(round($size/1048576, 1))") MiB; the limit is 64 MiB)"
  tar -tJf "$out" | sed 's/^/  /' | grep -v '/$'
  [ "$size" -le $((64 * 1024 * 1024)) ] || { echo "gpu.sh pack: the bundle is over 64 MiB" >&2; exit 1; }
}

run() {
  local bundle="" out="" dev=cuda limit=600
  while [ $# -gt 0 ]; do
    case "$1" in --bundle) bundle=$2; shift 2 ;; --out) out=$2; shift 2 ;; --device) dev=$2; shift 2 ;; *) usage ;; esac
  done
  local root
  if [ -n "$bundle" ]; then
    root=$(mktemp -d); tar -C "$root" -xJf "$bundle" || { echo "gpu.sh run: cannot unpack $bundle" >&2; exit 2; }
    root=$root/engram-gpu
  elif [ -x "$here/../bin/engram" ]; then root=$(cd "$here/.." && pwd)
  else echo "gpu.sh run: give --bundle FILE (from bench/gpu.sh pack), or run the script inside an unpacked bundle" >&2; exit 2
  fi
  out=${out:-${OUT:-$PWD/gpu-run}}; mkdir -p "$out"; out=$(cd "$out" && pwd)
  local E="$root/bin/engram" S=$SECONDS
  export LD_LIBRARY_PATH="$root/lib:$root/bin${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" ENGRAM_DATA="$root/data"
  export XDG_RUNTIME_DIR=${XDG_RUNTIME_DIR:-$(mktemp -d)}
  local py=python3; command -v python3 >/dev/null || py=""
  local steps="$out/steps.jsonl"; : >"$steps"
  step() { # NAME SECONDS CMD...: runs CMD under a time limit, logs to out/NAME.log
    local name=$1 t=$2; shift 2
    local left=$((limit - (SECONDS - S) - 10))
    [ "$t" -gt "$left" ] && t=$left
    if [ "$t" -le 5 ]; then echo "skip  $name (the 10-minute budget is spent)"; printf '{"step":"%s","rc":"skipped"}\n' "$name" >>"$steps"; return 1; fi
    local t0=$SECONDS; timeout "$t" "$@" >"$out/$name.log" 2>&1; local rc=$?
    printf '{"step":"%s","rc":%s,"seconds":%s}\n' "$name" "$rc" "$((SECONDS - t0))" >>"$steps"
    echo "rc=$rc $name ($((SECONDS - t0)) s)"
    [ "$rc" = 0 ] || [ "$name" = probe ] || tail -8 "$out/$name.log" | sed 's/^/    | /'
    return $rc
  }
  nvidia-smi -L >"$out/nvidia-smi.log" 2>&1 || true
  local note=""
  if ! step probe 120 "$E" bench throughput --device "$dev" --steps 5 --threads none; then
    note="device $dev did not start ($(tail -1 "$out/probe.log")): every figure below is from the CPU (flex)"
    echo "gpu.sh run: $note"
    dev=cpu
  fi
  # On the CPU fallback the same steps run at a smaller size, so that they fit the budget.
  local vit=() mlp=(--batch 1024) bert=(--batch 8 --seq-len 128 --steps 3) sub=1500
  # SmolLM2's table (the language-model chapter's, at its batch 8 x 128 tokens), in two steps so
  # that a quantized base the device cannot take costs only the QLoRA rows.
  local llama=(--batch 8 --seq-len 128 --steps 3 --warmup 1 --every 6 --rows standard,checkpoint,lora,lora+checkpoint,lora+checkpoint+amp)
  local qlora=(--batch 8 --seq-len 128 --steps 3 --warmup 1 --every 6 --rows qlora,qlora+checkpoint)
  [ "$dev" = cpu ] && vit=(--batch 32 --steps 2) mlp=(--batch 256 --steps 2) sub=300 \
    bert=(--batch 2 --seq-len 32 --steps 1 --rows standard,checkpoint) \
    llama=(--batch 1 --seq-len 16 --steps 1 --warmup 0 --rows standard,lora) \
    qlora=(--batch 1 --seq-len 16 --steps 1 --warmup 0 --rows qlora)
  step throughput 120 "$E" bench throughput --device "$dev" --json "$out/throughput.json" --python "${py:-false}" $([ "$dev" = cuda ] && echo --threads none)
  if [ "$dev" = cuda ] && [ -n "$py" ]; then
    step torch-cuda 90 sh -c "$py '$root/bench/throughput_torch.py' --device cuda >'$out/torch-cuda.json'"
  fi
  step memory-vit 150 "$E" bench memory --device "$dev" --model vit "${vit[@]}" --json "$out/memory-vit.json"
  step memory-mlp 90 "$E" bench memory --device "$dev" --model mlp "${mlp[@]}" --json "$out/memory-mlp.json"
  step memory-bert-large 150 "$E" bench memory --device "$dev" --model bert --preset large --every 4 "${bert[@]}" --json "$out/memory-bert-large.json"
  step memory-llama 150 "$E" bench memory --device "$dev" --model llama --preset smollm2 --optimizer adamw "${llama[@]}" --json "$out/memory-llama.json"
  step memory-llama-qlora 90 "$E" bench memory --device "$dev" --model llama --preset smollm2 --optimizer adamw "${qlora[@]}" --json "$out/memory-llama-qlora.json"
  step main-job 120 "$E" run "$root/examples/split-fmnist.toml" --device "$dev" --out "$out/split-fmnist" -q --overwrite
  step checkpoint-amp 150 "$E" run "$root/examples/vit-split-fmnist-memory.toml" --device "$dev" --out "$out/vit-memory" -q --overwrite --set data.subsample=$sub
  step gpu-path 120 bash "$root/bench/gpu-path.sh" --bin "$E" --device "$dev" --out "$out/gpu-path"
  python3 - "$out" "$dev" "$note" "$root" <<'EOF' || echo "gpu.sh run: python3 is missing; the figures are in $out/*.json"
import json, os, sys
out, dev, note, root = sys.argv[1:5]
def load(p):
    try:
        return json.load(open(os.path.join(out, p)))
    except Exception:
        return None
def report(d):
    r = load(d + "/report.json")
    return r and {k: r.get(k) for k in ("device", "metrics", "accuracy_matrix", "memory", "throughput", "timings")}
fig = {
    "device": dev, "note": note or None,
    "commit": open(os.path.join(root, "COMMIT")).read().strip(),
    "steps": [json.loads(l) for l in open(os.path.join(out, "steps.jsonl"))],
    "throughput": load("throughput.json"), "torch_cuda": load("torch-cuda.json"),
    "memory_vit": load("memory-vit.json"), "memory_mlp": load("memory-mlp.json"),
    "memory_bert_large": load("memory-bert-large.json"),
    "memory_llama": load("memory-llama.json"), "memory_llama_qlora": load("memory-llama-qlora.json"),
    "main_job": report("split-fmnist"), "checkpoint_amp": report("vit-memory"),
    "gpu_path": load("gpu-path/gpu-path.json"),
}
t, tc = fig["throughput"], fig["torch_cuda"]
if t and tc:
    fig["engram_vs_torch_cuda"] = t["train_samples_per_s"] / tc["train_samples_per_s"]
tmp = os.path.join(out, "gpu-figures.json.tmp")
json.dump(fig, open(tmp, "w"), indent=1)
os.replace(tmp, os.path.join(out, "gpu-figures.json"))
print(f"gpu.sh run: {os.path.join(out, 'gpu-figures.json')} ({dev}{'; ' + note if note else ''})")
EOF
  echo "gpu.sh run: $((SECONDS - S)) s in all"
}

case "$cmd" in
  pack) pack "$@" ;;
  run) run "$@" ;;
  *) usage ;;
esac
