// Steps 1-2 of SPEC section 2: routing metadata (rows per expert, the prefix-sum layout ends[],
// the permuted row of every (token, slot), the padded schedule's per-row expert, the invalid-id
// counter) and the quantization of every input row straight into each permuted FP8 row it feeds.
//
// Kernels, launched in this order on one stream:
//   permute_metadata   deterministic (no atomics decide any order); resets and sets the error
//                      counter and zeroes the GEMMs' tile counters, so every run (and every
//                      graph replay) starts from zero. One CTA up to kMetadataOneCtaSlots slots
//                      of capacity; above, a grid of CTAs over contiguous slot ranges, preceded
//                      by a count kernel that writes each CTA's per-expert counts to a scratch
//                      table (two launches, same results).
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
  int32_t* gemm_tile_counters = nullptr;  // optional int32 [2]: zeroed for the GEMMs' tile claims
  // ---- metadata grid: CTAs of permute_metadata (1, or metadata_ctas(...) with a scratch table)
  int metadata_ctas = 1;
  int32_t* cta_counts = nullptr;   // int32 [metadata_ctas, E + 1] when metadata_ctas > 1
  // ---- input quantization
  const void* hidden = nullptr;  // BF16 [T, H]
  layout::ScaleFormat scale_format = layout::ScaleFormat::kFp32;
  uint8_t* a1 = nullptr;         // FP8 [m_cap, H]; only rows named by row_of are written
  void* a1_scale = nullptr;      // scales of a1 in scale_format, row stride m_pad
  // ---- GEMM1's first weights into L2 (optional, a performance hint; see quantize_permuted): the
  //      weights GEMM1 multiplies and how many rows of the touched experts' weights, taken in
  //      order, its first wave of tiles streams (gemm::sm90_fp8_grouped_gemm_1d2d_first_wave_rows).
  const uint8_t* w13 = nullptr;  // FP8 [E, w13_rows, hidden_size]; null: no prefetch
  int w13_rows = 0;              // 2I
  int warm_rows = 0;             // rows to prefetch (one per thread of the first CTAs)
  int warm_kblocks = 0;          // k-blocks of 128 bytes from the start of each row
};

// ---- how the metadata kernels cut the work (host and device; tested against the reference on the CPU)
// Up to this many slots (capacity * top_k) one CTA of up to 32 warps takes every slot in one batch
// of 128 per warp; above, a grid does.
constexpr int kMetadataBatchSlots = 128;  // one batch of a metadata warp: 4 slots per lane
constexpr int kMetadataMaxWarps = 32;     // warps of the one-CTA kernel
constexpr int64_t kMetadataOneCtaSlots = kMetadataMaxWarps * kMetadataBatchSlots;  // 4096
constexpr int kMetadataMaxCtas = 128;
constexpr int kMetadataGridSlotsPerCta = 8 * kMetadataBatchSlots;  // 8 warps x one batch each
// CTAs of permute_metadata for a configuration: 1, or the grid (a pure function of the shapes, so
// graph-capturable and known to the workspace planner).
inline int metadata_ctas(int64_t capacity, int top_k) {
  const int64_t slots = capacity * top_k;
  if (slots <= kMetadataOneCtaSlots) return 1;
  const int64_t ctas = layout::ceil_div(slots, kMetadataGridSlotsPerCta);
  return static_cast<int>(ctas < kMetadataMaxCtas ? ctas : kMetadataMaxCtas);
}
// The live slots [0, live) are cut into `ctas` contiguous ranges and each of those into `warps`:
// the range [lo, hi) of warp `warp` of CTA `cta`, at least `min_per_warp` slots long (so the last
// warps may get none). Taken in (cta, warp) order the ranges visit the slots in ascending order,
// which is what makes rows ascend in (token, slot) inside every expert. The one-CTA kernel gives
// every warp at least one batch (kMetadataBatchSlots): at decode one warp then takes all the slots
// and the per-expert sums over the warps' tables stop at the busy warps.
struct SlotRange {
  int lo, hi;
};
FP8MOE_HD SlotRange metadata_slot_range(int live, int cta, int ctas, int warp, int warps, int min_per_warp = 1) {
  const int per_cta = (live + ctas - 1) / ctas;
  const int cta_lo = cta * per_cta < live ? cta * per_cta : live;
  const int cta_hi = cta_lo + per_cta < live ? cta_lo + per_cta : live;
  const int even = (cta_hi - cta_lo + warps - 1) / warps;
  const int per_warp = even > min_per_warp ? even : min_per_warp;
  const int lo = cta_lo + warp * per_warp < cta_hi ? cta_lo + warp * per_warp : cta_hi;
  return {lo, lo + per_warp < cta_hi ? lo + per_warp : cta_hi};
}

// Invalid ids: a value other than -1 outside [0, E), or with an expert map outside
// [0, num_global_experts); also a map entry other than -1 outside [0, E). Only tokens below the
// live count are looked at. Invalid slots are treated as not routed and counted.
//
// Limits: E <= 4085 (the per-warp tables live in 48 KB of shared memory; the grid's CTAs need one
// more row, E <= 3064 there), C * k < 2^30, m_cap < 2^31, 1 <= metadata_ctas <= kMetadataMaxCtas.
// Outside them, or with a missing pointer, the launches return cudaErrorInvalidValue.
cudaError_t launch_permute_metadata(const PermuteParams& p, cudaStream_t stream);
cudaError_t launch_quantize_permuted(const PermuteParams& p, cudaStream_t stream);

// Both, in order.
cudaError_t launch_permute(const PermuteParams& p, cudaStream_t stream);

}  // namespace fp8moe::kernels
