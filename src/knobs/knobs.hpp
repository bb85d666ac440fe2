// Every environment variable the library reads, in one place. Each is a switch for A/B
// measurements (docs/perf-notes.md names the run that chose each default); none is needed in use.
// Each is read once per process, on first use.
//   FP8MOE_PDL=0            plain launches instead of programmatic dependent ones (kernels/launch.cuh)
//   FP8MOE_WARM=N           k-blocks of GEMM1's first weights warmed into L2 by the input
//                           quantization (default 8; 0: none) (kernels/permute.cu)
//   FP8MOE_GEMM_BLOCK_N=128|192|256  the live GEMMs' tile width instead of the rule (gemm/*.cu)
//   FP8MOE_GEMM_CLUSTER=2|2n|2m  2-CTA clusters sharing A (N-pairs) or B (M-pairs) (gemm/*.cu)
//   FP8MOE_GEMM_DYNAMIC=0   the live GEMMs' fixed tile stride instead of claimed tiles (gemm/*.cu)
//   FP8MOE_FUSED_ACT=0      GEMM1 writes Y1 and act_quant runs, instead of the activation in
//                           GEMM1's epilogue at prefill capacities (gemm/*.cu, api/pipeline.cpp)
//   FP8MOE_Y2_IN_L2=0       GEMM2 writes Y2's decode rows with no L2 policy and the unpermutation
//                           leaves Y2's lines, instead of evict_last and a drop once read
//                           (api/pipeline.cpp)
//   FP8MOE_Y1_IN_L2=0       the same for Y1: GEMM1's decode rows without the policy and act_quant
//                           without the drop (api/pipeline.cpp)
#pragma once

#include <cstdlib>
#include <cstring>

namespace fp8moe::knobs {

// The variable's text, or nullptr when it is not set.
inline const char* text(const char* name) { return std::getenv(name); }
// Its value as an integer (atoi), or `fallback` when it is not set.
inline int integer(const char* name, int fallback) {
  const char* v = text(name);
  return v ? std::atoi(v) : fallback;
}
// Whether it is set to exactly `value`.
inline bool equals(const char* name, const char* value) {
  const char* v = text(name);
  return v != nullptr && !std::strcmp(v, value);
}

inline bool pdl() {
  static const bool on = [] {
    const char* v = text("FP8MOE_PDL");
    return !(v && v[0] == '0');
  }();
  return on;
}
inline int warm_kblocks() {
  static const int n = integer("FP8MOE_WARM", 8);
  return n;
}
inline int gemm_block_n() {  // 0: not set (the rule decides)
  static const int n = integer("FP8MOE_GEMM_BLOCK_N", 0);
  return n;
}
// FP8MOE_GEMM_CLUSTER: 'n' for 2 or 2n (N-pairs sharing A), 'm' for 2m (M-pairs sharing B), 0 otherwise.
inline char gemm_cluster() {
  static const char c = equals("FP8MOE_GEMM_CLUSTER", "2") || equals("FP8MOE_GEMM_CLUSTER", "2n") ? 'n'
                        : equals("FP8MOE_GEMM_CLUSTER", "2m")                                       ? 'm'
                                                                                                   : 0;
  return c;
}
inline bool gemm_dynamic_off() {
  static const bool off = equals("FP8MOE_GEMM_DYNAMIC", "0");
  return off;
}
inline bool fused_act_off() {
  static const bool off = equals("FP8MOE_FUSED_ACT", "0");
  return off;
}
inline bool y2_in_l2_off() {
  static const bool off = equals("FP8MOE_Y2_IN_L2", "0");
  return off;
}
inline bool y1_in_l2_off() {
  static const bool off = equals("FP8MOE_Y1_IN_L2", "0");
  return off;
}

}  // namespace fp8moe::knobs
