#!/usr/bin/env bash
# Where the grouped GEMM's time and power go, on the GPU machine (an investigation, not a test).
# For one case and GEMM it runs each variant of fp8moe-gemm-bench and records
#   - sustained timing (SAMPLES cold-L2 live samples back to back) with power and SM clock
#     sampled by nvidia-smi every 50 ms,
#   - an ncu view of the first live launch (speed of light, memory workload; --clock-control none),
#   - for the timeline build, per-CTA tile timelines (scripts/gemm-timeline.py summarises them).
# Then it packs everything into OUT/gemm-profile.tgz (the device tool returns a few files only).
#
#   OUT=./gpu-out CASE=4096/4096 GEMM=1 SAMPLES=1200 scripts/gemm-profile.sh [VARIANT[+ENV=VALUE]]...
#
# VARIANT is a build: default, no-math (-DFP8MOE_GEMM_ABLATE=2: TMA ring and barriers only),
# no-loads (-DFP8MOE_GEMM_ABLATE=3: math on stale shared memory), timeline (-DFP8MOE_GEMM_TRACE=1).
# +ENV=VALUE runs it with that environment variable, e.g. default+FP8MOE_GEMM_CLUSTER=2.
# Default variants: default no-loads no-math default+FP8MOE_GEMM_CLUSTER=2 default+FP8MOE_GEMM_CLUSTER=2m
# timeline.
# Builds go to PROFILE_BUILDS/<variant>/ (default build-profile); a folder that already holds
# bench/fp8moe-gemm-bench (e.g. built on the dev machine and carried) is used as it is:
#   cmake -S . -B build-profile/no-math -DCMAKE_CUDA_ARCHITECTURES=90a -DCMAKE_BUILD_TYPE=Release \
#         -DFP8MOE_BUILD_TESTS=OFF -DCMAKE_CUDA_FLAGS=-DFP8MOE_GEMM_ABLATE=2
#   cmake --build build-profile/no-math --target fp8moe-gemm-bench
set -uo pipefail
cd "$(dirname "$0")/.."

OUT=${OUT:-./gpu-out}
CASE=${CASE:-4096/4096}
GEMM=${GEMM:-1}
SAMPLES=${SAMPLES:-1200}
BUILDS=${PROFILE_BUILDS:-build-profile}
variants=("$@")
[[ ${#variants[@]} -eq 0 ]] &&
  variants=(default no-loads no-math default+FP8MOE_GEMM_CLUSTER=2 default+FP8MOE_GEMM_CLUSTER=2m timeline)
work=$OUT/gemm-profile
mkdir -p "$work"
export PATH="$PATH:/usr/local/cuda/bin"
for d in /usr/local/cuda/lib64 /usr/local/cuda-*/targets/x86_64-linux/lib; do
  [[ -e $d/libcublasLt.so.13 ]] && export LD_LIBRARY_PATH="$d${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" && break
done

flags_of() {
  case $1 in
    default) echo "" ;;
    no-math) echo "-DFP8MOE_GEMM_ABLATE=2" ;;
    no-loads) echo "-DFP8MOE_GEMM_ABLATE=3" ;;
    timeline) echo "-DFP8MOE_GEMM_TRACE=1" ;;
    *) return 1 ;;
  esac
}

bench_of() {  # builds the variant unless its binary exists; prints the binary's path
  local build=$BUILDS/$1 flags
  flags=$(flags_of "$1") || { echo "unknown variant $1" >&2; return 1; }
  if [[ ! -x $build/bench/fp8moe-gemm-bench ]]; then
    cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90a -DFP8MOE_BUILD_TESTS=OFF \
      -DCMAKE_CUDA_FLAGS="$flags" >"$work/build-$1.log" 2>&1 &&
      cmake --build "$build" --target fp8moe-gemm-bench -j "$(nproc)" >>"$work/build-$1.log" 2>&1 ||
      { echo "build of $1 failed: $work/build-$1.log" >&2; return 1; }
  fi
  echo "$build/bench/fp8moe-gemm-bench"
}

nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv >"$work/gpu.txt" 2>&1
fields=timestamp,power.draw,clocks.sm,clocks.mem,temperature.gpu
args=(--no-ceilings --schedule live --gemm "$GEMM" --case "$CASE")
for v in "${variants[@]}"; do
  build=${v%%+*}
  env_kv=()
  [[ $v == *+* ]] && env_kv=("${v#*+}")
  name=${v//[^A-Za-z0-9_.-]/_}
  bin=$(bench_of "$build") || continue
  echo "== $v"
  if [[ $build == timeline ]]; then
    env "${env_kv[@]}" "$bin" "${args[@]}" --samples 6 --trace "$work/trace-$name.txt" >"$work/timeline-$name.txt" 2>&1
    [[ -s $work/trace-$name.txt ]] && python3 scripts/gemm-timeline.py "$work/trace-$name.txt" | tee -a "$work/timeline-$name.txt"
    continue
  fi
  nvidia-smi --query-gpu=$fields --format=csv,noheader -lms 50 >"$work/power-$name.csv" 2>&1 &
  smi=$!
  env "${env_kv[@]}" "$bin" "${args[@]}" --samples "$SAMPLES" >"$work/sustained-$name.txt" 2>&1
  kill "$smi" 2>/dev/null
  wait "$smi" 2>/dev/null
  grep ' live ' "$work/sustained-$name.txt"
  # Power and clock while loaded (readings above 250 W; the H200 idles near 130 W).
  awk -F', ' '{ split($2, p, " "); split($3, c, " "); if (p[1] > 250) { n++; w += p[1]; mhz += c[1] } }
      END { if (n) printf "  %d readings under load: mean %.0f W, mean SM clock %.0f MHz\n", n, w / n, mhz / n }' \
    "$work/power-$name.csv" | tee -a "$work/sustained-$name.txt"
  if command -v ncu >/dev/null; then
    env "${env_kv[@]}" ncu --clock-control none -k regex:sm90_fp8 -c 1 --section SpeedOfLight \
      --section MemoryWorkloadAnalysis "$bin" "${args[@]}" --samples 2 >"$work/ncu-$name.txt" 2>&1
    grep -E "SM Frequency|Elapsed Cycles|Duration|L2 Cache Throughput|DRAM Throughput|Compute \(SM\) Throughput" \
      "$work/ncu-$name.txt" | sed 's/^/  /'
  fi
done
tar czf "$OUT/gemm-profile.tgz" -C "$OUT" gemm-profile && echo "packed $OUT/gemm-profile.tgz"
