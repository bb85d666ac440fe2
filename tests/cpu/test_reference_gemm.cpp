// ref::grouped_gemm (SPEC section 2, steps 3 and 5): against FP64 within the FP32/BF16 error
// bound, and on hand-built operands that pin the contract bit for bit: the 128-K block partial is
// exact, and blocks are combined in K order as acc = fma(scale_a * scale_b, partial, acc).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "common/data.hpp"
#include "cpu/fp64_model.hpp"
#include "reference/reference.hpp"

namespace fp8moe {
namespace {

using layout::ScaleFormat;

const ScaleFormat kFormats[] = {ScaleFormat::kFp32, ScaleFormat::kFp32Pow2, ScaleFormat::kUe8m0Packed};

constexpr uint8_t kOne = 0x38, kTiny = 0x01, kTwoTiny = 0x02, k448 = 0x7E, kMinus448 = 0xFE;  // 1, 2^-9, 2^-8, +-448

// One token routed to the only expert: one live row (row 0).
ref::Permutation one_row() {
  ref::Shape s;
  s.tokens = s.capacity = 1, s.hidden = 128, s.intermediate = 128, s.num_experts = 1, s.top_k = 1;
  const int32_t id = 0;
  return ref::permute(s, &id, nullptr, nullptr, 0);
}

std::vector<int32_t> unit_scales(ScaleFormat f, const ref::Permutation& p, int64_t k) {
  std::vector<int32_t> sc(ref::scale_elems(f, p.m_pad, k), 0);
  for (int64_t g = 0; g < k / 128; ++g) ref::store_scale(f, sc.data(), p.m_pad, 0, g, 1.0f);
  return sc;
}

// Column n sums 2^-9 * 2^-9 (at an even position t) with 448 * 448 and 448 * -448 (at odd
// positions p, q), in positions that vary with n: the exact partial is 2^-18, which any FP32
// accumulation that meets a +-200704 before the tiny term loses (giving 0).
TEST(ReferenceGemm, BlockPartialIsExact) {
  const auto p = one_row();
  const int64_t N = 128, K = 128;
  std::vector<uint8_t> a(p.m_cap * K, 0), b(N * K, 0);
  for (int64_t i = 0; i < K; ++i) a[i] = i % 2 == 0 ? kTiny : k448;
  for (int64_t n = 0; n < N; ++n) {
    const int64_t t = (2 * n) % K, pp = (2 * ((n * 37 + 5) % 64)) + 1, q = (2 * ((n * 59 + 11) % 64)) + 1;
    if (pp == q) continue;  // column left all zero
    b[n * K + t] = kTiny, b[n * K + pp] = k448, b[n * K + q] = kMinus448;
  }
  const std::vector<float> b_scale(1, 1.0f);
  for (ScaleFormat f : kFormats) {
    const auto a_scale = unit_scales(f, p, K);
    std::vector<uint16_t> d(p.m_cap * N, 0xFFFF);
    ref::grouped_gemm(p, 1, a.data(), a_scale.data(), f, b.data(), b_scale.data(), N, K, d.data());
    int64_t nonzero_columns = 0;
    for (int64_t n = 0; n < N; ++n) {
      const bool zero = std::all_of(&b[n * K], &b[(n + 1) * K], [](uint8_t c) { return c == 0; });
      ASSERT_EQ(d[n], zero ? 0x0000 : 0x3680) << "column " << n << " format " << int(f);  // 0x3680 = 2^-18
      nonzero_columns += !zero;
    }
    EXPECT_GT(nonzero_columns, 100);
  }
}

// Two K blocks: block 0 gives acc = 1; block 1 has partial 1 + 2^-17 and scales 2^-8 * (1 + 2^-17),
// so the exact product is 2^-8 (1 + 2^-16 + 2^-34). fma(scale product, partial, 1) rounds to the
// FP32 value 1 + 2^-8 + 2^-23, whose BF16 is 0x3F81. Rounding the product first (2^-8 + 2^-24) gives
// a tie 1 + 2^-8 + 2^-24 -> 1 + 2^-8, then BF16 0x3F80; so does summing block 1 before block 0.
TEST(ReferenceGemm, BlocksCombineWithFmaInKOrder) {
  const auto p = one_row();
  const int64_t N = 128, K = 256;
  std::vector<uint8_t> a(p.m_cap * K, 0), b(N * K, 0);
  a[0] = kOne, a[128] = kOne, a[129] = kTiny;
  for (int64_t n = 0; n < N; ++n) b[n * K] = kOne, b[n * K + 128] = kOne, b[n * K + 129] = kTwoTiny;
  const std::vector<float> b_scale{1.0f, 1.0f + std::ldexp(1.0f, -17)};
  for (ScaleFormat f : kFormats) {
    std::vector<int32_t> a_scale(ref::scale_elems(f, p.m_pad, K), 0);
    ref::store_scale(f, a_scale.data(), p.m_pad, 0, 0, 1.0f);
    ref::store_scale(f, a_scale.data(), p.m_pad, 0, 1, std::ldexp(1.0f, -8));
    std::vector<uint16_t> d(p.m_cap * N, 0);
    ref::grouped_gemm(p, 1, a.data(), a_scale.data(), f, b.data(), b_scale.data(), N, K, d.data());
    for (int64_t n = 0; n < N; ++n) ASSERT_EQ(d[n], 0x3F81) << "column " << n << " format " << int(f);
  }
}

// The GEMM alone on random FP8 operands spanning the whole E4M3 range, random scales, several K
// blocks, and an expert with 150 rows (two tiles, several of the reference's row chunks).
TEST(ReferenceGemm, WithinFp32BoundOfFp64) {
  test::Rng rng(test::fresh_seed());
  ref::Shape s;
  s.tokens = s.capacity = 150, s.hidden = 128, s.intermediate = 128, s.num_experts = 3, s.top_k = 2;
  std::vector<int32_t> ids(s.tokens * 2);
  for (int64_t t = 0; t < s.tokens; ++t) {
    ids[t * 2] = 1;
    ids[t * 2 + 1] = rng() % 3 == 0 ? -1 : (rng() % 2 ? 0 : 2);
  }
  const auto p = ref::permute(s, ids.data(), nullptr, nullptr, 0);
  const int64_t N = 384, K = 640;
  const auto a = test::random_fp8_codes(rng, p.m_cap * K);
  const auto b = test::random_fp8_codes(rng, s.num_experts * N * K);
  const auto b_scale = test::random_scales(rng, s.num_experts * (N / 128) * (K / 128), 1e-3, 8.0);
  for (ScaleFormat f : kFormats) {
    std::vector<int32_t> a_scale(ref::scale_elems(f, p.m_pad, K), 0);
    for (int64_t r = 0; r < p.m_cap; ++r)
      for (int64_t g = 0; g < K / 128; ++g) {
        const float sc = test::random_scales(rng, 1, 1e-2, 8.0)[0];
        ref::store_scale(f, a_scale.data(), p.m_pad, r, g, f == ScaleFormat::kFp32 ? sc : num::pow2_ceil(sc));
      }
    std::vector<uint16_t> d(p.m_cap * N, 0);
    ref::grouped_gemm(p, s.num_experts, a.data(), a_scale.data(), f, b.data(), b_scale.data(), N, K, d.data());
    const auto want = fp64::gemm(p, s.num_experts, a.data(), a_scale.data(), f, b.data(), b_scale.data(), N, K);
    fp64::expect_gemm_within_bound(p, s.num_experts, want, d.data(), N, K);
  }
}

}  // namespace
}  // namespace fp8moe
