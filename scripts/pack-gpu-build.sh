#!/usr/bin/env bash
# Copies the binaries scripts/gpu-check.sh needs from a build made here into a small folder that
# can travel to the GPU machine (the device tool's `carry`), keeping their relative paths.
#   scripts/pack-gpu-build.sh [BUILD_DIR=build-gpu] [DEST=.carry/build-gpu]
set -euo pipefail
cd "$(dirname "$0")/.."
src=${1:-build-gpu}
dst=${2:-.carry/build-gpu}
rm -rf "$dst"
for f in tests/fp8moe_cpu_tests tests/fp8moe_gpu_tests tests/fp8moe_c_abi_smoke bench/fp8moe-bench \
         bench/fp8moe-gemm-bench bench/fp8moe-wgmma-rate bench/fp8moe-tma-stream libfp8moe.a; do
  if [[ -e $src/$f ]]; then
    mkdir -p "$dst/$(dirname "$f")"
    cp "$src/$f" "$dst/$f"
  fi
done
du -sh "$dst"
