#!/usr/bin/env bash
# The GPU machine's check (an H200 with CUDA, cmake and nvidia-smi; no GoogleTest, no network):
# GPU summary, every test, compute-sanitizer memcheck and synccheck, a SASS check for FP8 wgmma
# (QGMMA), the benchmark. Keeps going after a failing step; exits non-zero if any step failed.
#
#   BUILD_DIR=build-gpu OUT=./gpu-out scripts/gpu-check.sh
#
# BUILD_DIR (default build-gpu) is normally built on the dev machine and carried over:
#   cmake -S . -B build-gpu -DCMAKE_CUDA_ARCHITECTURES=90a && cmake --build build-gpu -j
# The test binaries are run directly rather than through ctest, because CTest files hold the dev
# machine's absolute paths. Without test binaries the script tries to build here (needs GoogleTest).
# Everything it writes goes to OUT (default ./gpu-out), its own output too (OUT/gpu-check.txt).
# PACK_TO=FILE also packs OUT into one tarball at the end (the device tool brings back only a few
# files of a run), e.g.
#   OUT=/tmp/gpu-check PACK_TO=$OUT/gpu-check.tgz BUILD_DIR=... scripts/gpu-check.sh
# FULL=1 adds everything docs/benchmarks.md tabulates (both Qwen presets, --act-only, --sweep) and
# fp8moe-wgmma-rate and fp8moe-tma-stream, about two more minutes on an H200.
set -uo pipefail
cd "$(dirname "$0")/.."

BUILD_DIR=${BUILD_DIR:-build-gpu}
OUT=${OUT:-./gpu-out}
MEMCHECK_FILTER=${MEMCHECK_FILTER:-}  # optional --gtest_filter for the memcheck run
SYNCCHECK_FILTER=${SYNCCHECK_FILTER:-'Sm90*:Op*'}  # the tests synccheck runs (the GEMMs' barriers; ~20 s)
mkdir -p "$OUT"
# Everything this script prints also goes to OUT/gpu-check.txt, so the log travels with OUT (fds 3
# and 4 keep the terminal's, so that the log can be closed and complete before OUT is packed).
exec 3>&1 4>&2 > >(tee "$OUT/gpu-check.txt" >&3) 2>&1
tee_pid=$!
# shellcheck source=scripts/gpu-env.sh
source scripts/gpu-env.sh  # (the working directory is the repository root now)

CPU_TESTS=$BUILD_DIR/tests/fp8moe_cpu_tests
GPU_TESTS=$BUILD_DIR/tests/fp8moe_gpu_tests
C_SMOKE=$BUILD_DIR/tests/fp8moe_c_abi_smoke
BENCH=$BUILD_DIR/bench/fp8moe-bench
GEMM_BENCH=$BUILD_DIR/bench/fp8moe-gemm-bench
LIB=$BUILD_DIR/libfp8moe.a

names=()
results=()
step() {  # step NAME COMMAND...: runs COMMAND, records PASS or FAIL
  local name=$1
  shift
  echo
  echo "=== $name"
  if "$@"; then results+=(PASS); else results+=(FAIL); fi
  names+=("$name")
}

build() {
  if [[ -x $CPU_TESTS && -x $GPU_TESTS ]]; then
    echo "using the prebuilt $BUILD_DIR"
    return 0
  fi
  echo "$BUILD_DIR has no test binaries: configuring and building here (sm_90a)"
  if ! cmake -S . -B "$BUILD_DIR" -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90a >"$OUT/configure.log" 2>&1; then
    tail -n 20 "$OUT/configure.log"
    if grep -q GTest "$OUT/configure.log"; then
      echo "GoogleTest is not installed on this machine and cannot be fetched here: build $BUILD_DIR on the"
      echo "dev machine (see the top of this script) and carry it over."
    fi
    return 1
  fi
  if ! cmake --build "$BUILD_DIR" -j "$(nproc)" >"$OUT/build.log" 2>&1; then
    tail -n 40 "$OUT/build.log"
    return 1
  fi
}

gpu_summary() {
  nvidia-smi --query-gpu=index,name,driver_version,memory.total,clocks.max.sm,power.limit --format=csv |
    tee "$OUT/nvidia-smi.txt"
}

tests() {
  local rc=0
  {
    "$CPU_TESTS" --gtest_output="xml:$OUT/cpu-tests.xml" || rc=1
    "$GPU_TESTS" --gtest_output="xml:$OUT/gpu-tests.xml" || rc=1
    "$C_SMOKE" || rc=1
  } >"$OUT/tests.log" 2>&1
  grep -E '^\[==========\] .* ran|^\[  PASSED  \]|^\[  SKIPPED \] [0-9]+ test|^\[  FAILED  \]|^c_abi_smoke:' "$OUT/tests.log"
  return $rc
}

# compute-sanitizer TOOL over the GPU tests (FILTER: a --gtest_filter, empty for all), log in OUT/TOOL.log.
sanitize() {
  local tool=$1 filter=$2
  compute-sanitizer --tool "$tool" --error-exitcode 1 "$GPU_TESTS" ${filter:+--gtest_filter="$filter"} \
    >"$OUT/$tool.log" 2>&1
  local rc=$?
  grep -E 'ERROR SUMMARY|^\[  PASSED  \]|^\[  FAILED  \]' "$OUT/$tool.log" || tail -n 5 "$OUT/$tool.log"
  return $rc
}
memcheck() { sanitize memcheck "$MEMCHECK_FILTER"; }
# Barrier use (mbarrier phases, named barriers, __syncwarp) in the GEMMs and the whole op.
synccheck() { sanitize synccheck "$SYNCCHECK_FILTER"; }

# QGMMA is the SASS of FP8 wgmma: the SM90 GEMM must contain it. Counts per binary and per kernel.
sass() {
  local binary dump rc=0
  dump=$(mktemp)
  : >"$OUT/sass-summary.txt"
  for binary in "$LIB" "$GPU_TESTS"; do
    if ! cuobjdump --dump-sass "$binary" >"$dump" 2>&1; then
      echo "$binary: cuobjdump failed: $(head -n 3 "$dump")" >>"$OUT/sass-summary.txt"
      rc=1
      continue
    fi
    echo "$binary: $(grep -c 'Function :' "$dump") kernels, $(grep -c QGMMA "$dump") QGMMA instructions" \
      >>"$OUT/sass-summary.txt"
    awk '/Function :/ { f = $3 } /QGMMA/ { n[f]++ } END { for (k in n) print "  " n[k] " QGMMA in " k }' "$dump" |
      sort -rn >>"$OUT/sass-summary.txt"
  done
  rm -f "$dump"
  cat "$OUT/sass-summary.txt"
  # The GEMM kernels' k-loops as scheduled (perf notes v31), kept with the run for later diffs.
  if command -v python3 >/dev/null && [[ -f $LIB ]]; then
    "$(dirname "$0")/gemm-sass.py" "$LIB" >"$OUT/gemm-kloops.txt" 2>&1 || echo "gemm-sass.py failed (see gemm-kloops.txt)"
  fi
  return $rc
}

bench() {
  "$BENCH" --json "$OUT/bench.json" 2>&1 | tee "$OUT/bench.log"
}

gemm_bench() {
  "$GEMM_BENCH" --json "$OUT/gemm-bench.json" ${GEMM_BENCH_ARGS:-} 2>&1 | tee "$OUT/gemm-bench.log"
}

step "build or reuse $BUILD_DIR" build
step "nvidia-smi" gpu_summary
step "tests (cpu, gpu, c abi)" tests
step "compute-sanitizer memcheck" memcheck
step "compute-sanitizer synccheck" synccheck
step "SASS (QGMMA count)" sass
if [[ -x $GEMM_BENCH ]]; then
  step "fp8moe-gemm-bench" gemm_bench
fi
if [[ -x $BENCH ]]; then
  step "fp8moe-bench" bench
else
  names+=("fp8moe-bench")
  results+=("SKIP (no $BENCH)")
fi

full_runs() {
  local rc=0
  "$BENCH" --preset qwen3-30b-a3b --json "$OUT/qwen3-30b-a3b.json" >"$OUT/qwen3-30b-a3b.log" 2>&1 || rc=1
  "$BENCH" --preset qwen3-235b-a22b --json "$OUT/qwen3-235b-a22b.json" >"$OUT/qwen3-235b-a22b.log" 2>&1 || rc=1
  "$BENCH" --act-only --json "$OUT/act-only.json" >"$OUT/act-only.log" 2>&1 || rc=1
  "$BENCH" --sweep --json "$OUT/sweep.json" >"$OUT/sweep.log" 2>&1 || rc=1
  if [[ -x $BUILD_DIR/bench/fp8moe-wgmma-rate ]]; then
    "$BUILD_DIR/bench/fp8moe-wgmma-rate" >"$OUT/wgmma-rate.txt" 2>&1 || rc=1
  fi
  if [[ -x $BUILD_DIR/bench/fp8moe-tma-stream ]]; then
    "$BUILD_DIR/bench/fp8moe-tma-stream" >"$OUT/tma-stream.txt" 2>&1 || rc=1
  fi
  ls "$OUT"/*.json
  return $rc
}
if [[ ${FULL:-0} == 1 && -x $BENCH ]]; then
  step "FULL: presets, act-only, sweep" full_runs
fi

echo
echo "=== summary (logs in $OUT)"
failed=0
for i in "${!names[@]}"; do
  printf '  %-32s %s\n' "${names[$i]}" "${results[$i]}"
  [[ ${results[$i]} == FAIL ]] && failed=1
done
exec 1>&3 2>&4 3>&- 4>&-  # the log ends here: tee sees its input close and finishes writing it
wait "$tee_pid"
if [[ -n ${PACK_TO:-} ]]; then  # written outside OUT first: PACK_TO may lie inside it
  pack=$(mktemp)
  tar czf "$pack" -C "$(dirname "$OUT")" "$(basename "$OUT")" && mv "$pack" "$PACK_TO" &&
    echo "packed $OUT into $PACK_TO"
fi
exit $failed
