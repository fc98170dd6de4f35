#!/usr/bin/env bash
# The per-op profile of bench/profile/README.md: the training step of `engram bench throughput`
# for the recipe CNN (channels 16, 32, batch 64) and the ViT (8 encoder blocks × 128, batch 128),
# one thread, under callgrind (instruction counts, deterministic; valgrind 3.19 has no AVX-512, so
# Burn's kernels take their AVX2 paths there), then grouped by bench/profile/phases.py; and a
# wall-clock sample of the native (AVX-512) step with `perf record -e cpu-clock` (no hardware
# counters in this VM). About 25 minutes on one core. Needs valgrind (and perf for the second).
set -euo pipefail
cd "$(dirname "$0")/../.."
E=$(realpath target/release/engram)
W=$(realpath -m "${WORK:-target/bench-profile}")
mkdir -p "$W"
for m in "cnn --batch 64 --steps 5 --warmup 1" "vit --batch 128 --steps 2 --warmup 1"; do
  n=${m%% *}
  # shellcheck disable=SC2086
  RAYON_NUM_THREADS=1 valgrind --tool=callgrind --callgrind-out-file="$W/$n.cg" \
    "$E" bench throughput --model $m --threads none > "$W/$n.log" 2>&1
  echo "## $n (callgrind)"; python3 bench/profile/phases.py "$W/$n.cg"
done
if command -v perf > /dev/null; then
  for m in "cnn --batch 64 --steps 40 --warmup 5" "vit --batch 128 --steps 10 --warmup 2"; do
    n=${m%% *}
    # shellcheck disable=SC2086
    RAYON_NUM_THREADS=1 perf record -q -e cpu-clock -F 499 --call-graph dwarf,16384 -o "$W/$n.perf" -- \
      "$E" bench throughput --model $m --threads none > /dev/null 2>&1
    echo "## $n (perf, native)"
    perf report -i "$W/$n.perf" --children --sort symbol --stdio -g none --percent-limit 2 2> /dev/null | grep '%' | cut -c1-200
  done
fi
