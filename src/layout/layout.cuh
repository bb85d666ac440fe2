// fp8moe layout math (SPEC sections 2-4): workspace row counts, the prefix-sum ("ends") layout of
// permuted rows, live tiles, and the activation-scale index functions. One implementation, used by
// the CPU reference, the host API and every kernel.
#pragma once

#include <cstdint>

#include "numerics/numerics.cuh"  // FP8MOE_HD

namespace fp8moe::layout {

constexpr int kGroup = 128;  // quantization group along K, and the row alignment of every expert
constexpr int kTileM = 128;  // rows per GEMM tile = expert alignment

FP8MOE_HD int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }
FP8MOE_HD int64_t round_up(int64_t a, int64_t b) { return ceil_div(a, b) * b; }

// Workspace rows always sufficient for C tokens with top-k over E experts:
// sum_e round_up(n_e, 128) <= sum_{n_e>0} (n_e + 127) <= C*k + min(C*k, E) * 127.
FP8MOE_HD int64_t m_cap(int64_t capacity, int64_t top_k, int64_t num_experts) {
  const int64_t rows = capacity * top_k;
  const int64_t active = rows < num_experts ? rows : num_experts;
  return round_up(rows + active * (kTileM - 1), kTileM);
}
// Row stride of the MN-major scale layouts (TMA needs a 16-byte stride).
FP8MOE_HD int64_t m_pad(int64_t mcap) { return round_up(mcap, 4); }

// ---- the prefix-sum layout ------------------------------------------------------------------
// ends[e] = start_e + n_e, start_0 = 0, start_e = round_up(ends[e-1], 128).
FP8MOE_HD int64_t expert_start(const int32_t* ends, int e) {
  return e == 0 ? 0 : round_up(ends[e - 1], kTileM);
}
inline void ends_from_counts(const int32_t* counts, int num_experts, int32_t* ends) {
  int64_t start = 0;
  for (int e = 0; e < num_experts; ++e) {
    ends[e] = static_cast<int32_t>(start + counts[e]);
    start = round_up(ends[e], kTileM);
  }
}
// Rows of the whole layout in use (up to the last expert's 128-row boundary).
FP8MOE_HD int64_t used_rows(const int32_t* ends, int num_experts) {
  return num_experts == 0 ? 0 : round_up(ends[num_experts - 1], kTileM);
}
// 128-row tiles holding live rows of an expert whose rows are [start, end).
FP8MOE_HD int64_t live_m_tiles(int64_t start, int64_t end) { return ceil_div(end - start, kTileM); }

// ---- per-row expert index of the padded schedule --------------------------------------------
// row_expert[r] = e for r in [start_e, end_e), -1 everywhere else (gaps and the unused tail).
inline void padded_row_expert(const int32_t* ends, int num_experts, int64_t mcap, int32_t* row_expert) {
  for (int64_t r = 0; r < mcap; ++r) row_expert[r] = -1;
  for (int e = 0; e < num_experts; ++e)
    for (int64_t r = expert_start(ends, e); r < ends[e]; ++r) row_expert[r] = e;
}

// ---- the two schedules (SPEC section 4), taken by every stage that has a choice -----------------
// kLive: read ends[] on the device and touch only live tiles / rows. kPadded: sweep all of M_cap,
// the expert of a row from row_expert[] (-1 = padding), the way engines run today.
enum class Schedule : int { kLive = 0, kPadded = 1 };

// ---- activation-scale layouts (SPEC section 3) ----------------------------------------------
enum class ScaleFormat : int { kFp32 = 0, kFp32Pow2 = 1, kUe8m0Packed = 2 };

FP8MOE_HD bool is_pow2_format(ScaleFormat f) { return f != ScaleFormat::kFp32; }
FP8MOE_HD int64_t groups_of(int64_t k) { return k / kGroup; }
// fp32 / fp32_pow2: float at group * M_pad + row.
FP8MOE_HD int64_t fp32_scale_index(int64_t row, int64_t group, int64_t mpad) { return group * mpad + row; }
// ue8m0_packed: int32 word (row, group / 4) at (group / 4) * M_pad + row, byte group % 4.
FP8MOE_HD int64_t ue8m0_word_index(int64_t row, int64_t group, int64_t mpad) { return (group / 4) * mpad + row; }
FP8MOE_HD int ue8m0_byte_of(int64_t group) { return static_cast<int>(group % 4); }
FP8MOE_HD int64_t ue8m0_words_per_row(int64_t groups) { return ceil_div(groups, 4); }
// Bytes of one scale buffer for M_pad rows of K columns (both formats use 4-byte elements).
FP8MOE_HD int64_t scale_buffer_bytes(ScaleFormat f, int64_t mpad, int64_t k) {
  const int64_t cols = f == ScaleFormat::kUe8m0Packed ? ue8m0_words_per_row(groups_of(k)) : groups_of(k);
  return cols * mpad * 4;
}

}  // namespace fp8moe::layout
