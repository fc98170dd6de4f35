#!/usr/bin/env bash
# vendor/burn-flex is the published burn-flex 0.22.1 plus vendor/burn-flex.diff, nothing else.
# This script proves it: it brings the published crate into cargo's registry cache through a
# scratch manifest (the workspace's [patch.crates-io] keeps cargo from fetching it otherwise),
# applies the diff to a copy, and compares the copy with vendor/burn-flex.
#   scripts/vendor-check.sh          check (exit 1 on any difference)
#   scripts/vendor-check.sh --write  rewrite vendor/burn-flex.diff from vendor/burn-flex
set -euo pipefail
cd "$(dirname "$0")/.."
name=burn-flex; version=0.22.1
# Files of the published crate that the vendored copy leaves out (upstream's benchmark notes and
# its lock file; cargo's own markers).
left_out=(.cargo-ok .cargo_vcs_info.json BENCHMARKS.md COMPARISON.md Cargo.lock)
scratch=$(mktemp -d); trap 'rm -rf "$scratch"' EXIT
mkdir -p "$scratch/m/src"; : > "$scratch/m/src/lib.rs"
printf '[package]\nname = "scratch"\nversion = "0.0.0"\nedition = "2021"\n[dependencies]\n%s = "=%s"\n' \
  "$name" "$version" > "$scratch/m/Cargo.toml"
(cd "$scratch/m" && cargo fetch -q)
published=$(ls -d "${CARGO_HOME:-$HOME/.cargo}"/registry/src/*/"$name-$version" | head -n 1)
[ -d "$published" ] || { echo "cargo fetch did not bring $name $version"; exit 1; }
mkdir -p "$scratch/a" "$scratch/b"
cp -r "$published" "$scratch/a/$name"
for f in "${left_out[@]}"; do rm -rf "$scratch/a/$name/$f"; done
cp -r "vendor/$name" "$scratch/b/$name"
if [ "${1:-}" = --write ]; then
  (cd "$scratch" && git diff --no-index --no-prefix a/$name b/$name || true) \
    | sed -e "s#a/$name/#a/#g; s#b/$name/#b/#g" > "vendor/$name.diff"
  echo "wrote vendor/$name.diff ($(grep -c '^@@' "vendor/$name.diff") hunks)"
  exit 0
fi
(cd "$scratch/a/$name" && patch -s -p1 < "$OLDPWD/vendor/$name.diff")
if ! diff -r "$scratch/a/$name" "$scratch/b/$name"; then
  echo "vendor/$name is not the published $name $version plus vendor/$name.diff"
  echo "(after a deliberate change: scripts/vendor-check.sh --write, and say why in vendor/README.md)"
  exit 1
fi
echo "vendor/$name = published $name $version + vendor/$name.diff ($(grep -c '^@@' "vendor/$name.diff") hunks)"
