// Data movement of the reference stages: which rows each stage reads and writes, slot-order
// reduction, zero outputs, and the pipeline's handling of *num_tokens, expert_map, invalid ids and
// empty routing (SPEC sections 1-2).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <stdexcept>
#include <vector>

#include "common/problem.hpp"
#include "reference/reference.hpp"

namespace fp8moe {
namespace {

using layout::ScaleFormat;

ref::Shape small_shape(int64_t T = 37) {
  ref::Shape s;
  s.tokens = T, s.capacity = T + 3, s.hidden = 256, s.intermediate = 256, s.num_experts = 4, s.top_k = 2;
  return s;
}

std::vector<bool> live_rows(const ref::Permutation& p) {
  std::vector<bool> live(p.m_cap, false);
  for (int32_t r : p.row_of)
    if (r >= 0) live[r] = true;
  return live;
}

TEST(Stages, QuantizePermutedWritesEachLiveRowOnce) {
  test::Rng rng(test::fresh_seed());
  const auto s = small_shape();
  const auto prob = test::make_problem(rng, s);
  const auto p = ref::permute(s, prob.topk_ids.data(), nullptr, nullptr, 0);
  for (ScaleFormat f : {ScaleFormat::kFp32, ScaleFormat::kFp32Pow2, ScaleFormat::kUe8m0Packed}) {
    std::vector<uint8_t> a1(p.m_cap * s.hidden, 0xAB);
    std::vector<int32_t> sc(ref::scale_elems(f, p.m_pad, s.hidden), 0x5A5A5A5A);
    ref::quantize_permuted(s, p, prob.hidden.data(), f, a1.data(), sc.data());
    const auto live = live_rows(p);
    std::vector<float> x(s.hidden), want_scale(s.hidden / 128);
    std::vector<uint8_t> want_q(s.hidden);
    for (int64_t t = 0; t < s.tokens; ++t) {
      for (int64_t h = 0; h < s.hidden; ++h) x[h] = num::float_from_bf16_bits(prob.hidden[t * s.hidden + h]);
      ref::quantize_row(x.data(), s.hidden, f != ScaleFormat::kFp32, want_q.data(), want_scale.data());
      for (int j = 0; j < s.top_k; ++j) {
        const int64_t r = p.row_of[t * s.top_k + j];
        ASSERT_EQ(std::memcmp(&a1[r * s.hidden], want_q.data(), s.hidden), 0) << "token " << t << " slot " << j;
        for (int64_t g = 0; g < s.hidden / 128; ++g) {
          const float want = f == ScaleFormat::kUe8m0Packed ? num::pow2_ceil(want_scale[g]) : want_scale[g];
          ASSERT_EQ(ref::load_scale(f, sc.data(), p.m_pad, r, g), want);
        }
      }
    }
    for (int64_t r = 0; r < p.m_cap; ++r)
      if (!live[r]) {
        ASSERT_TRUE(std::all_of(&a1[r * s.hidden], &a1[(r + 1) * s.hidden], [](uint8_t c) { return c == 0xAB; }))
            << "non-live row " << r << " written";
        for (size_t col = 0; col < sc.size() / p.m_pad; ++col) ASSERT_EQ(sc[col * p.m_pad + r], 0x5A5A5A5A);
      }
  }
}

// GEMM and activation+quant leave every non-live row (gaps, unused tail) untouched.
TEST(Stages, GemmAndActQuantTouchOnlyLiveRows) {
  test::Rng rng(test::fresh_seed());
  const auto s = small_shape();
  const auto prob = test::make_problem(rng, s);
  const auto p = ref::permute(s, prob.topk_ids.data(), nullptr, nullptr, 0);
  const auto live = live_rows(p);
  const ScaleFormat f = ScaleFormat::kFp32;
  std::vector<uint8_t> a1(p.m_cap * s.hidden, 0);
  std::vector<int32_t> sc1(ref::scale_elems(f, p.m_pad, s.hidden), 0);
  ref::quantize_permuted(s, p, prob.hidden.data(), f, a1.data(), sc1.data());
  const int64_t N = 2 * s.intermediate;
  std::vector<uint16_t> y1(p.m_cap * N, 0xDEAD);
  ref::grouped_gemm(p, s.num_experts, a1.data(), sc1.data(), f, prob.w13.data(), prob.w13_scale.data(), N,
                    s.hidden, y1.data());
  std::vector<uint8_t> a2(p.m_cap * s.intermediate, 0xAB);
  std::vector<int32_t> sc2(ref::scale_elems(f, p.m_pad, s.intermediate), 0x5A5A5A5A);
  ref::act_quant(p, s.num_experts, y1.data(), s.intermediate, {}, f, a2.data(), sc2.data());
  int64_t live_count = 0;
  for (int64_t r = 0; r < p.m_cap; ++r) {
    const bool y1_poisoned = std::all_of(&y1[r * N], &y1[(r + 1) * N], [](uint16_t v) { return v == 0xDEAD; });
    const bool a2_poisoned = std::all_of(&a2[r * s.intermediate], &a2[(r + 1) * s.intermediate],
                                         [](uint8_t v) { return v == 0xAB; });
    ASSERT_EQ(y1_poisoned, !live[r]) << "row " << r;
    ASSERT_EQ(a2_poisoned, !live[r]) << "row " << r;
    for (size_t col = 0; col < sc2.size() / p.m_pad; ++col)
      ASSERT_EQ(sc2[col * p.m_pad + r] == 0x5A5A5A5A, !live[r]) << "row " << r;
    live_count += live[r];
  }
  EXPECT_EQ(live_count, s.tokens * s.top_k);
}

// The weighted sum runs in slot order j = 0..k-1, not in row (expert) order: with slot values
// 2^30, 0.5 * 1, -2^30 the FP32 sum is 0 in slot order (0.5 is absorbed), 0.5 in row order.
TEST(Stages, ReductionFollowsSlotOrder) {
  ref::Shape s;
  s.tokens = 2, s.capacity = 2, s.hidden = 128, s.intermediate = 128, s.num_experts = 3, s.top_k = 3;
  const std::vector<int32_t> ids{0, 2, 1, -1, -1, -1};  // token 1 has no live slot
  const auto p = ref::permute(s, ids.data(), nullptr, nullptr, 0);
  ASSERT_EQ(p.row_of, (std::vector<int32_t>{0, 256, 128, -1, -1, -1}));
  std::vector<uint16_t> y2(p.m_cap * s.hidden, 0x7FC0);  // NaN outside live rows: must not be read
  const float vals[3] = {std::ldexp(1.0f, 30), 1.0f, -std::ldexp(1.0f, 30)};  // by slot
  for (int j = 0; j < 3; ++j)
    for (int64_t h = 0; h < s.hidden; ++h) y2[p.row_of[j] * s.hidden + h] = num::bf16_bits_from_float(vals[j]);
  y2[p.row_of[1] * s.hidden + 5] = num::bf16_bits_from_float(3.0f);
  const std::vector<float> w{1.0f, 0.5f, 1.0f, 9.0f, 9.0f, 9.0f};
  std::vector<uint16_t> out(2 * s.hidden, 0x1234);
  ref::unpermute_reduce(s, p, y2.data(), w.data(), out.data());
  for (int64_t h = 0; h < s.hidden; ++h) {
    ASSERT_EQ(out[h], 0x0000) << h;  // (2^30 + 0.5 * y) - 2^30 = 0: the small term is absorbed
    ASSERT_EQ(out[s.hidden + h], 0x0000) << h;  // no live slot: +0 exactly
  }
  // Without the large terms the weights apply: 0.5 * 3 = 1.5.
  std::vector<uint16_t> y2b = y2;
  for (int j : {0, 2})
    for (int64_t h = 0; h < s.hidden; ++h) y2b[p.row_of[j] * s.hidden + h] = 0;
  ref::unpermute_reduce(s, p, y2b.data(), w.data(), out.data());
  EXPECT_EQ(num::float_from_bf16_bits(out[5]), 1.5f);
  EXPECT_EQ(num::float_from_bf16_bits(out[6]), 0.5f);
}

TEST(Stages, RejectBadArgumentsBeforeWorking) {
  const auto s = small_shape(4);
  const std::vector<int32_t> ids(8, 1);
  const auto p = ref::permute(s, ids.data(), nullptr, nullptr, 0);
  const auto bad = static_cast<ScaleFormat>(7);
  std::vector<uint8_t> codes(p.m_cap * 512, 0);
  std::vector<uint16_t> bf16(p.m_cap * 512, 0);
  std::vector<int32_t> scales(4 * p.m_pad, 0);
  std::vector<float> b_scale(64, 1.0f);
  EXPECT_THROW(ref::quantize_permuted(s, p, bf16.data(), bad, codes.data(), scales.data()), std::invalid_argument);
  EXPECT_THROW(ref::grouped_gemm(p, 4, codes.data(), scales.data(), bad, codes.data(), b_scale.data(), 256, 256,
                                 bf16.data()),
               std::invalid_argument);
  EXPECT_THROW(ref::grouped_gemm(p, 4, codes.data(), scales.data(), ScaleFormat::kFp32, codes.data(), b_scale.data(),
                                 200, 256, bf16.data()),
               std::invalid_argument);
  EXPECT_THROW(ref::act_quant(p, 4, bf16.data(), 256, {}, bad, codes.data(), scales.data()), std::invalid_argument);
  EXPECT_THROW(ref::act_quant(p, 4, bf16.data(), 100, {}, ScaleFormat::kFp32, codes.data(), scales.data()),
               std::invalid_argument);
  EXPECT_THROW(ref::store_scale(bad, scales.data(), p.m_pad, 0, 0, 1.0f), std::invalid_argument);
}

// ---- the whole pipeline ------------------------------------------------------------------------
std::vector<uint16_t> run(const test::MoeProblem& prob, const ref::Inputs& in, ScaleFormat f,
                          ref::Intermediates* st = nullptr) {
  std::vector<uint16_t> out(prob.shape.tokens * prob.shape.hidden, 0xFFFF);
  ref::run_pipeline(prob.shape, in, {}, f, out.data(), st);
  return out;
}

TEST(Pipeline, EmptyRoutingGivesZeros) {
  test::Rng rng(test::fresh_seed());
  auto prob = test::make_problem(rng, small_shape());
  std::fill(prob.topk_ids.begin(), prob.topk_ids.end(), -1);
  ref::Intermediates st;
  const auto out = run(prob, prob.inputs(), ScaleFormat::kFp32, &st);
  EXPECT_TRUE(std::all_of(out.begin(), out.end(), [](uint16_t v) { return v == 0; }));
  EXPECT_TRUE(std::all_of(st.y2.begin(), st.y2.end(), [](uint16_t v) { return v == 0; }));
  EXPECT_TRUE(std::all_of(st.a1.begin(), st.a1.end(), [](uint8_t v) { return v == 0; }));
}

// Rows t >= *num_tokens are zeros; rows below equal a run on just those tokens.
TEST(Pipeline, NumTokensZeroesTheTail) {
  test::Rng rng(test::fresh_seed());
  const auto prob = test::make_problem(rng, small_shape());
  const int32_t n = 20;
  auto in = prob.inputs();
  in.num_tokens = &n;
  const auto out = run(prob, in, ScaleFormat::kFp32Pow2);

  test::MoeProblem head = prob;
  head.shape.tokens = n;
  head.hidden.resize(n * prob.shape.hidden);
  head.topk_ids.resize(n * prob.shape.top_k);
  head.topk_weights.resize(n * prob.shape.top_k);
  const auto out_head = run(head, head.inputs(), ScaleFormat::kFp32Pow2);
  const int64_t H = prob.shape.hidden;
  EXPECT_TRUE(std::equal(out_head.begin(), out_head.end(), out.begin()));
  EXPECT_TRUE(std::all_of(out.begin() + n * H, out.end(), [](uint16_t v) { return v == 0; }));
  EXPECT_TRUE(std::any_of(out.begin(), out.begin() + n * H, [](uint16_t v) { return (v & 0x7FFF) != 0; }));
}

// With an expert map, global ids give the same output as the equivalent local ids; invalid ids
// are counted and give the same output as -1.
TEST(Pipeline, ExpertMapAndInvalidIds) {
  test::Rng rng(test::fresh_seed());
  const auto prob = test::make_problem(rng, small_shape());
  const int G = 12;
  std::vector<int32_t> map(G, -1);
  for (int e = 0; e < 4; ++e) map[3 * e + 1] = e;  // global 1, 4, 7, 10 -> local 0..3
  test::MoeProblem global = prob;
  test::MoeProblem local = prob;
  for (size_t i = 0; i < prob.topk_ids.size(); ++i) {
    const int32_t e = prob.topk_ids[i];
    switch (i % 5) {
      case 0: global.topk_ids[i] = 3 * e + 2, local.topk_ids[i] = -1; break;  // non-local expert
      case 1: global.topk_ids[i] = G + e, local.topk_ids[i] = -1; break;      // invalid
      default: global.topk_ids[i] = 3 * e + 1; break;
    }
  }
  auto in = global.inputs();
  in.expert_map = map.data();
  in.num_global_experts = G;
  ref::Intermediates st;
  const auto out_global = run(global, in, ScaleFormat::kUe8m0Packed, &st);
  const auto out_local = run(local, local.inputs(), ScaleFormat::kUe8m0Packed);
  EXPECT_EQ(out_global, out_local);
  int64_t invalid = 0;
  for (size_t i = 0; i < prob.topk_ids.size(); ++i) invalid += (i % 5 == 1);
  EXPECT_EQ(st.perm.invalid_ids, invalid);
  // Intermediates hold zeros outside live rows.
  const auto live = live_rows(st.perm);
  const int64_t H = prob.shape.hidden, I = prob.shape.intermediate;
  for (int64_t r = 0; r < st.perm.m_cap; ++r) {
    if (live[r]) continue;
    ASSERT_TRUE(std::all_of(&st.a1[r * H], &st.a1[(r + 1) * H], [](uint8_t v) { return v == 0; })) << r;
    ASSERT_TRUE(std::all_of(&st.y1[r * 2 * I], &st.y1[(r + 1) * 2 * I], [](uint16_t v) { return v == 0; })) << r;
    ASSERT_TRUE(std::all_of(&st.a2[r * I], &st.a2[(r + 1) * I], [](uint8_t v) { return v == 0; })) << r;
    ASSERT_TRUE(std::all_of(&st.y2[r * H], &st.y2[(r + 1) * H], [](uint16_t v) { return v == 0; })) << r;
  }
  EXPECT_TRUE(std::any_of(out_local.begin(), out_local.end(), [](uint16_t v) { return (v & 0x7FFF) != 0; }));
}

}  // namespace
}  // namespace fp8moe
