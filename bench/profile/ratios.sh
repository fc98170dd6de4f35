#!/usr/bin/env bash
# The ratio table of bench/profile/README.md: `engram bench throughput --model mlp|cnn|vit` beside
# its PyTorch twin at 1 and 2 threads, three runs (models interleaved, engram and PyTorch
# alternated within each), then per model and thread count the median over the runs of each side
# and of the ratio. About 15 minutes on 2 quiet cores. PYTHON=path/to/python with torch.
set -euo pipefail
cd "$(dirname "$0")/../.."
E=target/release/engram
PY=${PYTHON:-python3}
W=$(realpath -m "${WORK:-target/bench-ratios}")
mkdir -p "$W"
if [ -z "${REPORT_ONLY:-}" ]; then
  for r in 1 2 3; do
    for m in mlp cnn vit; do
      "$E" bench throughput --model "$m" --python "$PY" --json "$W/$m-$r.json" > "$W/$m-$r.txt"
    done
  done
fi
python3 - "$W" <<'PY'
import json, statistics as st, sys
w = sys.argv[1]
print("| model | threads | engram samples/s | PyTorch samples/s | engram / PyTorch (median of runs) | runs (ratio) | load average before each run |")
print("|---|---|---|---|---|---|---|")
for m in ("mlp", "cnn", "vit"):
    runs = [json.load(open(f"{w}/{m}-{r}.json")) for r in (1, 2, 3)]
    for i, th in enumerate((1, 2)):
        rows = [r["rows"][i] for r in runs]
        e = [x["engram_samples_per_s"] for x in rows]
        t = [x["torch_samples_per_s"] for x in rows]
        ratio = [x["ratio_vs_torch"] for x in rows]
        load = ", ".join(f"{r['load_average_before'][0]:.1f}" for r in runs)
        print(f"| {runs[0]['model']}, batch {runs[0]['batch']} | {th} | {st.median(e):.0f} | {st.median(t):.0f} | "
              f"{st.median(ratio):.2f}× | {', '.join(f'{x:.2f}' for x in ratio)} | {load} |")
PY
