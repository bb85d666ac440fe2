// Step 6 of SPEC section 2: unpermute + reduce.
//   out[t] = BF16( sum over slots j = 0..k-1 (in order) with row_of[t, j] >= 0 of
//                  num::reduce_step(acc, topk_weights[t, j], Y2[row_of[t, j]]) ),  acc starting at 0.
// Every row t < T is written: zeros for tokens without a live slot and for t >= *num_tokens.
// Only live rows of Y2 are read. The grid depends only on T and H (graph-capturable).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace fp8moe::kernels {

struct UnpermuteParams {
  int64_t tokens = 0;       // T: rows of out / topk_weights / row_of
  int64_t hidden_size = 0;  // H, multiple of 128
  int top_k = 0;            // k >= 1
  int64_t m_cap = 0;        // rows of Y2; row_of entries outside [0, m_cap) are treated as -1
  const void* y2 = nullptr;              // BF16 [m_cap, H]
  const float* topk_weights = nullptr;   // FP32 [T, k]
  const int32_t* row_of = nullptr;       // int32 [T, k] from the permutation
  const int32_t* num_tokens = nullptr;   // optional device scalar
  void* out = nullptr;                   // BF16 [T, H]
  // Y2 is dead once read: each 128-byte line of it this kernel reads is then dropped from L2
  // without a write-back (its contents become undefined). The pipeline's live schedule, whose
  // GEMM2 keeps Y2's decode rows in L2 (GroupedGemmArgs::d_evict_last) for this read.
  bool discard_y2 = false;
};

// cudaErrorInvalidValue on bad shapes or missing pointers.
cudaError_t launch_unpermute(const UnpermuteParams& p, cudaStream_t stream);

// Timeline builds, for investigation only (never the default): -DFP8MOE_UNPERMUTE_TRACE=1 makes
// thread 0 of each of the first kUnpermuteTraceCtas CTAs record, at each launch, its SM, its
// entry, the end of its wait for GEMM2 and its end (after the CTA's last store, %globaltimer ns)
// into [cta][kUnpermuteTraceSlots]; unpermute_trace(host) copies the last launch's records out
// (null: zeroes them). The bench writes them with FP8MOE_UNPERMUTE_TRACE_OUT=PATH.
#ifndef FP8MOE_UNPERMUTE_TRACE
#define FP8MOE_UNPERMUTE_TRACE 0
#endif
#if FP8MOE_UNPERMUTE_TRACE
constexpr int kUnpermuteTraceCtas = 1024, kUnpermuteTraceSlots = 4;
cudaError_t unpermute_trace(uint64_t* host);
#endif

}  // namespace fp8moe::kernels
