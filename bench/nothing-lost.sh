#!/usr/bin/env bash
# Regenerates book/src/figures/nothing-lost.md: classes of bad input (mutated configs, output
# directories holding a user's files, two writers on one --out 20 times, plugin files that are
# not plugins, image shapes 1×1 to 64×64 and 1-D features on every built-in model, damaged
# checkpoints and checkpoints of another config, sweep files with random axes, export targets
# that cannot be written, image-folder entries that are not files, huge labels in CSV and NPY,
# a real plugin with one ELF section byte-patched) against this build and, with OLD=path/to/engram
# (and OLD_NAME, what it is), against an older one (the book's table uses cf392f8, the build before
# round two of the "nothing lost" work, issue #32: `git worktree add /tmp/before cf392f8 &&
# cargo build --release --workspace` there; round one's table, against b828a5a, is in git history),
# then a diverged run's record. About 10 minutes on 2 cores with OLD, 5 without. Needs
# `cargo build --release --workspace` and the dataset.
set -euo pipefail
cd "$(dirname "$0")/.."
WORK=$(realpath -m "${WORK:-target/bench-nothing-lost}") \
  python3 bench/nothing_lost.py target/release/engram "${OLD:-}" > book/src/figures/nothing-lost.md
cat book/src/figures/nothing-lost.md
