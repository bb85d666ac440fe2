// Steps 3 and 5 of SPEC section 2: the block-FP8 grouped GEMM over live rows.
//
// Exactness of the 128-K block partial: an E4M3 value is a multiple of 2^-9 of magnitude <= 448,
// so a product of two is a multiple of 2^-18 below 2^18 and a sum of 128 such products is a
// multiple of 2^-18 below 2^25: 43 significant bits, exact in a double whatever the summation
// order. The partial is therefore the exact dot product, rounded once to FP32; the FP32 part then
// follows the contract: acc = fma(scale_a * scale_b, partial, acc), block by block in K order.
//
// Speed (the seed shape must run in seconds on two cores): work is split into (row chunk of one
// expert, 128-column block) items run in parallel; per 128-K block each item decodes its A and B
// sub-blocks into doubles once (L1/L2 resident) and runs vectorisable fixed-length dot products.
#include <algorithm>
#include <cstring>
#include <vector>

#include "reference/checks.hpp"
#include "reference/parallel.hpp"
#include "reference/reference.hpp"

namespace fp8moe::ref {
namespace {

constexpr int64_t kBlk = 128;         // K block = N block = scale block
constexpr int64_t kRowsPerItem = 32;  // rows of one expert per work item

struct E4m3Table {
  double value[256];
  E4m3Table() {
    for (int c = 0; c < 256; ++c) value[c] = num::float_from_e4m3(static_cast<uint8_t>(c));
  }
};
const double* e4m3_table() {
  static const E4m3Table table;
  return table.value;
}

// Exact (see above) dot products of four 128-vectors of decoded A values (row stride 128) with
// one 128-vector of decoded B values. Independent vector sums keep the loop free of a serial
// dependency, and each B load serves four rows. Vec2 (a GCC/Clang vector extension) is 128 bits,
// the baseline vector width of x86-64 (SSE2) and AArch64 (NEON), so no build flag is needed.
typedef double Vec2 __attribute__((vector_size(16)));
constexpr int64_t kRowGroup = 4;
void dot128_x4(const double* a, const double* b, double out[kRowGroup]) {
  Vec2 s[kRowGroup][2] = {};
  for (int64_t i = 0; i < kBlk; i += 4) {
    Vec2 b0, b1;
    std::memcpy(&b0, b + i, sizeof(Vec2));
    std::memcpy(&b1, b + i + 2, sizeof(Vec2));
#pragma GCC unroll 4
    for (int64_t r = 0; r < kRowGroup; ++r) {
      Vec2 a0, a1;
      std::memcpy(&a0, a + r * kBlk + i, sizeof(Vec2));
      std::memcpy(&a1, a + r * kBlk + i + 2, sizeof(Vec2));
      s[r][0] += a0 * b0;
      s[r][1] += a1 * b1;
    }
  }
  for (int64_t r = 0; r < kRowGroup; ++r) {
    const Vec2 t = s[r][0] + s[r][1];
    out[r] = t[0] + t[1];
  }
}

void decode_block(const uint8_t* src, int64_t stride, int64_t rows, double* dst) {
  const double* table = e4m3_table();
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t i = 0; i < kBlk; ++i) dst[r * kBlk + i] = table[src[r * stride + i]];
}

}  // namespace

void grouped_gemm(const Permutation& p, int num_experts, const uint8_t* a, const void* a_scale,
                  ScaleFormat f, const uint8_t* b, const float* b_scale, int64_t n, int64_t k,
                  uint16_t* d) {
  detail::require_groups(n, "ref::grouped_gemm", "N");
  detail::require_groups(k, "ref::grouped_gemm", "K");
  detail::require_format(f, "ref::grouped_gemm");
  const int64_t n_blocks = n / kBlk, k_blocks = k / kBlk;
  const auto chunks = detail::live_row_chunks(p.ends.data(), num_experts, kRowsPerItem);
  const int64_t items = static_cast<int64_t>(chunks.size()) * n_blocks;

  detail::parallel_for(items, [&](int64_t item) {
    const detail::RowChunk& c = chunks[item / n_blocks];
    const int64_t nb = item % n_blocks;
    const int64_t rows = c.rows;
    const uint8_t* b_rows = b + (static_cast<int64_t>(c.expert) * n + nb * kBlk) * k;
    const float* sb_row = b_scale + (static_cast<int64_t>(c.expert) * n_blocks + nb) * k_blocks;

    // A rows padded with zero rows to a multiple of kRowGroup (their partials are ignored).
    const int64_t rows_padded = layout::round_up(rows, kRowGroup);
    std::vector<double> ad(rows_padded * kBlk, 0.0), bd(kBlk * kBlk);
    std::vector<float> sab(rows), acc(rows * kBlk, 0.0f);
    double partial[kRowGroup];
    for (int64_t kb = 0; kb < k_blocks; ++kb) {
      decode_block(a + c.row0 * k + kb * kBlk, k, rows, ad.data());
      decode_block(b_rows + kb * kBlk, k, kBlk, bd.data());
      for (int64_t r = 0; r < rows; ++r)
        sab[r] = num::mul_rn(load_scale(f, a_scale, p.m_pad, c.row0 + r, kb), sb_row[kb]);
      for (int64_t j = 0; j < kBlk; ++j)
        for (int64_t r0 = 0; r0 < rows; r0 += kRowGroup) {
          dot128_x4(&ad[r0 * kBlk], &bd[j * kBlk], partial);
          for (int64_t r = r0; r < std::min(rows, r0 + kRowGroup); ++r)
            acc[r * kBlk + j] = num::fma_rn(sab[r], static_cast<float>(partial[r - r0]), acc[r * kBlk + j]);
        }
    }
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t j = 0; j < kBlk; ++j)
        d[(c.row0 + r) * n + nb * kBlk + j] = num::bf16_bits_from_float(acc[r * kBlk + j]);
  });
}

}  // namespace fp8moe::ref
