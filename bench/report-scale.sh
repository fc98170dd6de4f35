#!/usr/bin/env bash
# How long `engram report` takes as the stream grows (issue #32, defect 9): a report.json of N
# tasks (N = 10, 100, 500, 2000; a lower-triangular accuracy matrix, per-task memory peaks)
# synthesised from tests/fixtures/report, rendered with `engram report DIR`, wall-clock seconds
# printed per N. The figures draw at most 100x100 heatmap cells, 20 task curves and 50 memory
# bars, so the time should grow with reading report.json (N^2 cells), not with drawing. Needs
# `cargo build --release --workspace`.
set -euo pipefail
cd "$(dirname "$0")/.."
E=target/release/engram
W=$(realpath -m "${WORK:-target/bench-report-scale}")
rm -rf "$W"; mkdir -p "$W"
for n in 10 100 500 2000; do
  python3 - "$n" "$W/n-$n" <<'PY'
import json, os, sys
n, out = int(sys.argv[1]), sys.argv[2]
os.makedirs(out, exist_ok=True)
r = json.load(open("tests/fixtures/report/report.json"))
r["tasks"] = [dict(r["tasks"][0], index=i) for i in range(n)]
r["memory"]["per_task_train_peak_bytes"] = [1_000_000 + 1000 * i for i in range(n)]
r["accuracy_matrix"] = [[(0.5 if j % 2 == 0 else 0.9) if j <= i else None for j in range(n)] for i in range(n)]
json.dump(r, open(f"{out}/report.json", "w"))
PY
  start=$(date +%s.%N)
  "$E" report "$W/n-$n" >/dev/null
  end=$(date +%s.%N)
  printf '%5d tasks: %.2f s\n' "$n" "$(echo "$end - $start" | bc)"
done
