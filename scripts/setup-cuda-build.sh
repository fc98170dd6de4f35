#!/usr/bin/env bash
# Prepares an offline build of engram's `cuda` feature (and of `cubecl-cpu`, which shares its LLVM).
#
# Why: burn-cuda 0.22 -> cubecl-cuda 0.11 -> cubecl-llvm links LLVM statically. Its build
# dependency tracel-llvm-bundler downloads a prebuilt LLVM 23 from GitHub unless its cache
# directory already holds an install marked by `.tracel-llvm-installed`, and cubecl-llvm then asks
# that directory's `bin/llvm-config` how to link. This script fills that directory from Debian's
# LLVM 22 (llvm-22-dev, libpolly-22-dev, libzstd-dev), so no download happens:
#   DIR = ${XDG_DATA_HOME:-$HOME/.local/share}/tracel/tracel-llvm-23.1.0-4
#   DIR/include, DIR/lib     -> links to /usr/lib/llvm-22/{include,lib}
#   DIR/bin/llvm-config      -> a wrapper of /usr/lib/llvm-22/bin/llvm-config that rewrites the
#                               absolute library paths it prints (`/usr/lib/.../libz3.so`) into
#                               `-l` flags: the bundler turns such a path into `-llibz3`, which
#                               does not link.
#   DIR/.tracel-llvm-installed  the marker the bundler checks.
# Idempotent: running it again rewrites the same files. As root it installs the three packages
# (apt-get); otherwise it says what to install. Undo: delete DIR.
# When the bundler can be pointed at a system LLVM, this script can go (book: "The accelerator path").
set -euo pipefail

LLVM=/usr/lib/llvm-22
PKGS=(llvm-22-dev libpolly-22-dev libzstd-dev)
# The bundler's version, from Cargo.lock (tracel-llvm-bundler's package version).
lock="$(dirname "$0")/../Cargo.lock"
ver=$(awk '/^name = "tracel-llvm-bundler"/{getline; gsub(/version = |"/,""); print; exit}' "$lock" 2>/dev/null || true)
ver=${ver:-23.1.0-4}
DIR="${XDG_DATA_HOME:-$HOME/.local/share}/tracel/tracel-llvm-$ver"

missing=()
for p in "${PKGS[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  if ! command -v apt-get >/dev/null 2>&1; then
    echo "setup-cuda-build: this is not a Debian-like system (no apt-get). Install LLVM 22 with its" >&2
    echo "  static libraries (libLLVM*.a), Polly and zstd's development files, then edit LLVM= in $0;" >&2
    echo "  or build with network and let Burn's bundler download its own LLVM." >&2
    exit 1
  fi
  if [ "$(id -u)" != 0 ]; then
    echo "setup-cuda-build: missing packages: ${missing[*]}" >&2
    echo "  install them as root:  apt-get install -y ${missing[*]}   then run this script again" >&2
    exit 1
  fi
  echo "setup-cuda-build: installing ${missing[*]}"
  if ! DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}"; then
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}"
  fi
fi
[ -x "$LLVM/bin/llvm-config" ] || { echo "setup-cuda-build: $LLVM/bin/llvm-config not found after installing ${PKGS[*]}" >&2; exit 1; }
ls "$LLVM"/lib/libLLVMCore.a >/dev/null 2>&1 || { echo "setup-cuda-build: $LLVM/lib has no static LLVM libraries (libLLVMCore.a); install llvm-22-dev" >&2; exit 1; }

mkdir -p "$DIR/bin"
ln -sfn "$LLVM/include" "$DIR/include"
ln -sfn "$LLVM/lib" "$DIR/lib"
cat >"$DIR/bin/llvm-config.tmp" <<EOF
#!/bin/sh
# Written by engram's scripts/setup-cuda-build.sh: Debian's llvm-config, with absolute library
# paths (/usr/lib/x86_64-linux-gnu/libz3.so) rewritten to -l flags (-lz3) for tracel-llvm-bundler.
out=\$($LLVM/bin/llvm-config "\$@") || exit \$?
printf '%s\n' "\$out" | sed -E ':a; s#(^| )/[^ ]*/lib([^ /]+)\.(so|a)( |\$)#\1-l\2\4#; ta'
EOF
chmod +x "$DIR/bin/llvm-config.tmp"
mv -f "$DIR/bin/llvm-config.tmp" "$DIR/bin/llvm-config"
touch "$DIR/.tracel-llvm-installed"

libs=$("$DIR/bin/llvm-config" --link-static --system-libs)
case "$libs" in */*) echo "setup-cuda-build: the wrapper left a path in: $libs" >&2; exit 1 ;; esac
echo "setup-cuda-build: $DIR now serves LLVM $("$DIR/bin/llvm-config" --version) from $LLVM (system libs: $libs)"
echo "  build: CARGO_TARGET_DIR=target/cuda cargo build --release --features cuda   (cuda,vulkan: also --device vulkan)"
