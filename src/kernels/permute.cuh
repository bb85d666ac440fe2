// Steps 1-2 of SPEC section 2: routing metadata (rows per expert, the prefix-sum layout ends[],
// the permuted row of every (token, slot), the padded schedule's per-row expert, the invalid-id
// counter) and the quantization of every input row straight into each permuted FP8 row it feeds.
//
// Two kernels, launched in this order on one stream:
//   permute_metadata   one CTA; deterministic (no atomics decide any order); resets and sets the
//                      error counter, so every run (and every graph replay) starts from zero.
//   quantize_permuted  persistent grid; reads row_of[] and writes A1 rows and their scales.
// Grids depend only on shapes and capacity, never on device data: both are graph-capturable and
// correct on replay with new routing and *num_tokens.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "layout/layout.cuh"

namespace fp8moe::kernels {

struct PermuteParams {
  // ---- shapes
  int64_t tokens = 0;          // T: rows of topk_ids / hidden
  int64_t capacity = 0;        // C >= T: what m_cap (and row_expert's length) is sized for
  int64_t hidden_size = 0;     // H, multiple of 128
  int num_experts = 0;         // E local experts
  int top_k = 0;               // k >= 1
  int num_global_experts = 0;  // length of expert_map (0: no map, ids are local)
  // ---- routing inputs
  const int32_t* topk_ids = nullptr;    // int32 [T, k]; -1 = not routed here
  const int32_t* num_tokens = nullptr;  // optional device scalar: tokens >= *num_tokens not routed
  const int32_t* expert_map = nullptr;  // optional int32 [num_global_experts] -> local id or -1
  // ---- metadata outputs
  int32_t* counts = nullptr;       // int32 [E]      live rows per expert
  int32_t* ends = nullptr;         // int32 [E]      prefix-sum layout
  int32_t* error_count = nullptr;  // int32 [1]      invalid ids of this run
  int32_t* row_of = nullptr;       // int32 [T, k]   permuted row of (t, j), -1 if not routed
  int32_t* row_expert = nullptr;   // optional int32 [m_cap]: expert of each row, -1 in gaps and tail
  // ---- input quantization
  const void* hidden = nullptr;  // BF16 [T, H]
  layout::ScaleFormat scale_format = layout::ScaleFormat::kFp32;
  uint8_t* a1 = nullptr;         // FP8 [m_cap, H]; only rows named by row_of are written
  void* a1_scale = nullptr;      // scales of a1 in scale_format, row stride m_pad
};

// Invalid ids: a value other than -1 outside [0, E), or with an expert map outside
// [0, num_global_experts); also a map entry other than -1 outside [0, E). Only tokens below the
// live count are looked at. Invalid slots are treated as not routed and counted.
//
// Limits: E <= 4085 (the per-warp tables live in 48 KB of shared memory), C * k < 2^30,
// m_cap < 2^31. Outside them, or with a missing pointer, the launches return cudaErrorInvalidValue.
cudaError_t launch_permute_metadata(const PermuteParams& p, cudaStream_t stream);
cudaError_t launch_quantize_permuted(const PermuteParams& p, cudaStream_t stream);
// Both, in order.
cudaError_t launch_permute(const PermuteParams& p, cudaStream_t stream);

}  // namespace fp8moe::kernels
