#!/usr/bin/env bash
# Codegen guard for the SM90 grouped GEMM (runs without a GPU: ptxas only).
#  - ptxas must not serialise the wgmma pipeline (its C75xx "Potential Performance Loss" notes:
#    e.g. a wgmma committed and waited for in different branches silently costs ~25%);
#  - the default (single-CTA) kernels must not use local memory: the math warpgroups run at their
#    register budget, and a spill or a run-time-indexed accumulator array lands in the k-loop;
#  - the investigation builds (FP8MOE_GEMM_ABLATE=2|3|4|8|9|10, FP8MOE_GEMM_SWAP_TAIL=0,
#    FP8MOE_GEMM_TRACE=1 with the GEMM bench's
#    timeline dump, =2 with six times per tile, =3, =4 and =5 with the producer's stamps, =6 with the
#    epilogue's steps) still compile, so a profiling session does not start by repairing them; and
#    the builds that keep the math (ablations 3, 4, 8, 9, 10; SWAP_TAIL=0) keep it pipelined too (no C75xx), or their times
#    describe another loop (perf notes v25: v24's decoupled build had serialised wgmma).
#   check_gemm_codegen.sh NVCC SOURCE_DIR
set -euo pipefail
nvcc=$1
src=$2
log=$("$nvcc" -std=c++17 -arch=sm_90a --expt-relaxed-constexpr -I"$src/src" -I"$src/include" -cubin -o /dev/null \
  -Xptxas -v "$src/src/gemm/sm90_fp8_grouped_gemm_1d2d.cu" 2>&1)
status=0
if grep -E "C75[0-9][0-9]" <<<"$log"; then
  echo "FAIL: ptxas serialises wgmma (see above)"
  status=1
fi
kernels=0
while read -r name; do
  read -r props
  kernels=$((kernels + 1))
  spill=$(sed -E 's/.* ([0-9]+) bytes spill stores.*/\1/' <<<"$props")
  stack=$(sed -E 's/^ *([0-9]+) bytes stack frame.*/\1/' <<<"$props")
  # Template arguments: <BLOCK_N, stages, cluster, live>; cluster 1 and the auto-width kernel are
  # the default dispatch. A stack frame without spills is a local array (e.g. accumulators indexed
  # at run time).
  if [[ ($name == *Li1ELb* || $name == *auto_kernel*) && ($spill != 0 || $stack != 0) ]]; then
    echo "FAIL: $name uses local memory ($props)"
    status=1
  fi
  echo "$name: $props"
done < <(grep -A1 "Function properties for .*grouped_gemm" <<<"$log" | grep -v "^--" | sed -E 's/.*Function properties for //')
if [[ $kernels -lt 4 ]]; then
  echo "FAIL: expected the grouped GEMM kernels in ptxas' report, found $kernels"
  status=1
fi
# The investigation builds, two compiles at a time (CI machines have two cores). Each job writes
# its verdict to its own log; a math-bearing ablation is compiled to a cubin with ptxas' notes (so
# it is checked for C75xx as well as for compiling), the others only compiled.
jobs_dir=$(mktemp -d)
trap 'rm -rf "$jobs_dir"' EXIT
check_build() {  # FLAG FILE PTXAS: "PASS" or the reason in $jobs_dir/<n>.log
  local flag=$1 file=$2 ptxas=$3 out
  if [[ $ptxas == 1 ]]; then
    if ! out=$("$nvcc" -std=c++17 -arch=sm_90a --expt-relaxed-constexpr -I"$src" -I"$src/src" -I"$src/include" "$flag" \
      -cubin -o /dev/null -Xptxas -v "$src/$file" 2>&1); then
      printf '%s\nFAIL: %s does not compile with %s\n' "$out" "$file" "$flag"
    elif grep -E "C75[0-9][0-9]" <<<"$out"; then
      echo "FAIL: ptxas serialises wgmma with $flag (see above)"
    else
      echo PASS
    fi
  elif ! "$nvcc" -std=c++17 -arch=sm_90a --expt-relaxed-constexpr -I"$src" -I"$src/src" -I"$src/include" "$flag" \
    -c -o /dev/null "$src/$file" 2>&1; then
    echo "FAIL: $file does not compile with $flag"
  else
    echo PASS
  fi
}
n=0
for flag in -DFP8MOE_GEMM_ABLATE=2 -DFP8MOE_GEMM_ABLATE=3 -DFP8MOE_GEMM_ABLATE=4 -DFP8MOE_GEMM_ABLATE=8 -DFP8MOE_GEMM_ABLATE=9 \
  -DFP8MOE_GEMM_ABLATE=10 -DFP8MOE_GEMM_SWAP_TAIL=0 -DFP8MOE_GEMM_SWAP_TALL=0 \
  -DFP8MOE_GEMM_TRACE=1 -DFP8MOE_GEMM_TRACE=2 -DFP8MOE_GEMM_TRACE=3 -DFP8MOE_GEMM_TRACE=4 -DFP8MOE_GEMM_TRACE=5 -DFP8MOE_GEMM_TRACE=6; do
  for file in src/gemm/sm90_fp8_grouped_gemm_1d2d.cu bench/gemm_bench.cu; do
    [[ ($flag == *ABLATE* || $flag == *SWAP_TA*) && $file == bench/* ]] && continue
    ptxas=0
    [[ $flag == *ABLATE=[3489] || $flag == *ABLATE=10 || $flag == *SWAP_TA* ]] && ptxas=1  # the builds that keep the math
    while (($(jobs -rp | wc -l) >= 2)); do wait -n || true; done
    check_build "$flag" "$file" "$ptxas" >"$jobs_dir/$n.log" 2>&1 &
    n=$((n + 1))
  done
done
wait
for ((i = 0; i < n; i++)); do
  if [[ $(tail -n 1 "$jobs_dir/$i.log") != PASS ]]; then
    cat "$jobs_dir/$i.log"
    status=1
  fi
done
exit $status
