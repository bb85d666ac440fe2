// The reference at the seed shape of SPEC section 7 (DeepSeek-V3 experts with EP=8: E=32, H=7168,
// I=2048, k=8) at decode (16 live tokens, capacity 512): it must run in seconds so that the GPU
// tests can compare against it at the real shape.
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <vector>

#include "common/problem.hpp"
#include "reference/reference.hpp"

namespace fp8moe {
namespace {

TEST(ReferenceSeedShape, DecodePipelineRunsInSeconds) {
  test::Rng rng(test::fresh_seed());
  ref::Shape s;
  s.tokens = 16, s.capacity = 512, s.hidden = 7168, s.intermediate = 2048, s.num_experts = 32, s.top_k = 8;
  const auto t0 = std::chrono::steady_clock::now();
  const auto prob = test::make_problem(rng, s);  // 1.4 GB of FP8 weights
  const auto t1 = std::chrono::steady_clock::now();
  std::vector<uint16_t> out(s.tokens * s.hidden, 0xFFFF);
  ref::Intermediates st;
  ref::run_pipeline(s, prob.inputs(), {}, layout::ScaleFormat::kFp32, out.data(), &st);
  const auto t2 = std::chrono::steady_clock::now();
  const double gen_s = std::chrono::duration<double>(t1 - t0).count();
  const double run_s = std::chrono::duration<double>(t2 - t1).count();
  std::printf("seed shape E=32 H=7168 I=2048 k=8, 16 of 512 tokens: inputs %.2f s, reference pipeline %.2f s\n",
              gen_s, run_s);

  EXPECT_EQ(st.perm.m_cap, 8192);
  EXPECT_EQ(st.perm.ends.size(), 32u);
  // Every token has 8 live slots, so every output is finite and most are non-zero.
  int64_t nonzero = 0;
  for (uint16_t v : out) {
    ASSERT_TRUE(std::isfinite(num::float_from_bf16_bits(v)));
    nonzero += (v & 0x7FFF) != 0;
  }
  EXPECT_GT(nonzero, static_cast<int64_t>(out.size()) * 9 / 10);
  EXPECT_LT(run_s, 60.0) << "the reference is far too slow for the GPU tests";
}

}  // namespace
}  // namespace fp8moe
