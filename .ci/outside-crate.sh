#!/usr/bin/env bash
# CI: crates outside the workspace, written by `engram new plugin` (one of each kind), build
# against the workspace's compiled engram -- cargo compiles the new crate alone: neither Burn nor
# engram-core -- and each runs `engram run` on a tiny slice of real Fashion-MNIST. Needs the
# workspace built (`cargo build --release --workspace`) and the dataset; at most 180 s in all.
#
#   bash .ci/outside-crate.sh [ENGRAM_BINARY]   # default target/release/engram
set -euo pipefail
cd "$(dirname "$0")/.."
ENGRAM=$(realpath "${1:-target/release/engram}")
work=$(mktemp -d)
# The crates go with the temporary directory, their libraries from beside the binary.
release=$(dirname "$ENGRAM")
trap 'rm -rf "$work" "$release"/liboutside_* "$release"/deps/liboutside_* "$release"/deps/outside_*' EXIT
start=$SECONDS
for kind in forgetting model memory scheduler; do
  name="outside-$kind"
  t0=$SECONDS
  "$ENGRAM" new plugin "$name" --kind "$kind" --dir "$work/$name" --quiet
  if ! (cd "$work/$name" && cargo build --release --offline -v) >"$work/$name.log" 2>&1; then
    cat "$work/$name.log"; echo "the generated $kind plugin does not build"; exit 1
  fi
  compiled=$(sed -n 's/^ *Compiling \([^ ]*\) .*/\1/p' "$work/$name.log" | sort -u | tr '\n' ' ')
  if [ "$compiled" != "$name " ]; then
    grep -E "Dirty|Compiling" "$work/$name.log" | head -20
    echo "building the $kind plugin compiled: ${compiled}(want $name alone: it must reuse the workspace's Burn and engram-core)"
    exit 1
  fi
  built=$((SECONDS - t0))
  "$ENGRAM" run "$work/$name/experiment.toml" --out "$work/runs/$name" --set data.subsample=600 --quiet
  python3 - "$work/runs/$name" "$kind" "$name" <<'PY'
import json, sys
out, kind, name = sys.argv[1:]
r = json.load(open(f"{out}/report.json"))
c = r["config"]
used = c["model"]["type"] if kind == "model" else [e["type"] for e in c.get(kind, [])]
assert name == used or name in used, f"{kind}: the run used {used}, not {name}"
rows = r["accuracy_matrix"]
assert len(rows) == 5 and all(x is not None for x in rows[-1]), rows
if kind == "memory":
    steps = r["memory"]["strategies"][name]["steps"]
    assert steps > 0, f"the memory plugin saw {steps} steps"
PY
  echo "  $kind plugin: built in $built s (only $name compiled), ran in $((SECONDS - t0 - built)) s"
done
elapsed=$((SECONDS - start))
echo "four outside plugin crates built and ran in $elapsed s"
[ "$elapsed" -le 180 ] || { echo "over the 180 s this step may take"; exit 1; }
