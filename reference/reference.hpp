// CPU reference of the whole fp8moe pipeline (SPEC section 2), stage by stage. Clear code over
// fast code. Every rounding decision goes through src/numerics/numerics.cuh and every index through
// src/layout/layout.cuh, which the kernels use too, so the non-GEMM stages can be compared with
// the GPU bit for bit.
//
// Conventions: BF16 values travel as uint16_t bit patterns, FP8 E4M3 as uint8_t codes. Scale buffers
// are `void*` in the layout of a ScaleFormat (float for fp32 / fp32_pow2, int32 words for
// ue8m0_packed) with row stride m_pad.
#pragma once

#include <cstdint>
#include <vector>

#include "layout/layout.cuh"
#include "numerics/numerics.cuh"

namespace fp8moe::ref {

using layout::ScaleFormat;

struct Shape {
  int64_t tokens = 0;        // T: rows of hidden / topk / out
  int64_t capacity = 0;      // C >= T: what M_cap is sized for
  int64_t hidden = 0;        // H
  int64_t intermediate = 0;  // I
  int num_experts = 0;       // E local
  int top_k = 0;             // k
};

// ---- steps 1-2: routing metadata ---------------------------------------------------------------
struct Permutation {
  int64_t m_cap = 0, m_pad = 0;
  std::vector<int32_t> counts;      // [E] live rows per expert
  std::vector<int32_t> ends;        // [E] prefix-sum layout
  std::vector<int32_t> row_of;      // [T*k] permuted row of (t, j), -1 if not routed
  std::vector<int32_t> row_expert;  // [m_cap] padded schedule's per-row expert, -1 in padding
  int32_t invalid_ids = 0;          // ids outside [0, E) (or [0, E_global) with a map), not -1
};
// topk_ids [T*k]; num_tokens: nullptr = all T live; expert_map: nullptr or [num_global_experts].
Permutation permute(const Shape& s, const int32_t* topk_ids, const int32_t* num_tokens,
                    const int32_t* expert_map, int num_global_experts);

// ---- group quantization and scale layouts -------------------------------------------------------
// Quantizes K values (K % 128 == 0) into codes q[K] and one scale per group scales[K/128].
void quantize_row(const float* x, int64_t k, bool pow2, uint8_t* q, float* scales);
// Scale storage in the MN-major layouts of SPEC section 3 (`buf` has groups-or-words x m_pad entries).
void store_scale(ScaleFormat f, void* buf, int64_t m_pad, int64_t row, int64_t group, float scale);
float load_scale(ScaleFormat f, const void* buf, int64_t m_pad, int64_t row, int64_t group);
// Number of 4-byte scale elements of a buffer for m_pad rows of K columns.
int64_t scale_elems(ScaleFormat f, int64_t m_pad, int64_t k);

// Step 1-2 data movement: quantizes hidden row t into A1 row row_of[t, j] for every routed slot.
// Only live rows of a1 / a1_scale are written.
void quantize_permuted(const Shape& s, const Permutation& p, const uint16_t* hidden, ScaleFormat f,
                       uint8_t* a1, void* a1_scale);

// ---- steps 3 and 5: block-FP8 grouped GEMM ------------------------------------------------------
// D[r, n] = BF16( sum over 128-K blocks kb of  scale_a(r, kb) * scale_b(e, n/128, kb) * partial ),
// partial = the exact dot product of the FP8 values of that block, for every live row r of every
// expert e (rows of d outside live rows are not written). b: [E, N, K] codes, b_scale [E, N/128, K/128].
void grouped_gemm(const Permutation& p, int num_experts, const uint8_t* a, const void* a_scale,
                  ScaleFormat f, const uint8_t* b, const float* b_scale, int64_t n, int64_t k,
                  uint16_t* d);

// ---- step 4: activation + quantization ----------------------------------------------------------
// For every live row: g = y1[r, :I], u = y1[r, I:], a = BF16(act(g, u)), quantized into a2 / a2_scale.
void act_quant(const Permutation& p, int num_experts, const uint16_t* y1, int64_t intermediate,
               const num::ActParams& act, ScaleFormat f, uint8_t* a2, void* a2_scale);

// ---- step 6: unpermute + reduce ------------------------------------------------------------------
// out[t] = BF16(sum_j w[t, j] * y2[row_of[t, j]]) in slot order (num::reduce_step); zeros if no slot.
void unpermute_reduce(const Shape& s, const Permutation& p, const uint16_t* y2, const float* topk_weights,
                      uint16_t* out);

// ---- the whole pipeline ---------------------------------------------------------------------------
struct Inputs {
  const uint16_t* hidden = nullptr;      // [T, H] BF16 bits
  const int32_t* topk_ids = nullptr;     // [T, k]
  const float* topk_weights = nullptr;   // [T, k]
  const int32_t* num_tokens = nullptr;   // optional
  const int32_t* expert_map = nullptr;   // optional [num_global_experts]
  int num_global_experts = 0;
  const uint8_t* w13 = nullptr;          // [E, 2I, H]
  const float* w13_scale = nullptr;      // [E, 2I/128, H/128]
  const uint8_t* w2 = nullptr;           // [E, H, I]
  const float* w2_scale = nullptr;       // [E, H/128, I/128]
};
struct Intermediates {  // every stage's output, for stage-by-stage comparison
  Permutation perm;
  std::vector<uint8_t> a1;        // [m_cap, H]
  std::vector<int32_t> a1_scale;  // raw 4-byte elements in the format's layout
  std::vector<uint16_t> y1;       // [m_cap, 2I]
  std::vector<uint8_t> a2;        // [m_cap, I]
  std::vector<int32_t> a2_scale;
  std::vector<uint16_t> y2;       // [m_cap, H]
};
// out: [T, H] BF16 bits. Unwritten (non-live) rows of the intermediates hold zeros.
void run_pipeline(const Shape& s, const Inputs& in, const num::ActParams& act, ScaleFormat f,
                  uint16_t* out, Intermediates* stages = nullptr);

}  // namespace fp8moe::ref
