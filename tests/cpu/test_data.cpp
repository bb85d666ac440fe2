// The benchmarks' and tests' random FP8 data (tests/common/data.hpp): never a NaN code, and the
// normal codes have the distribution they claim (fp8moe-bench --weights normal).
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "common/data.hpp"

namespace fp8moe {
namespace {

bool is_nan_code(uint8_t c) { return (c & 0x7F) == 0x7F; }

TEST(TestData, UniformCodesCoverEveryCodeButNaN) {
  test::Rng rng(test::fresh_seed());
  const auto v = test::random_fp8_codes(rng, 1 << 20);
  std::vector<int> seen(256, 0);
  for (uint8_t c : v) ++seen[c];
  for (int c = 0; c < 256; ++c) {
    if (is_nan_code(static_cast<uint8_t>(c))) EXPECT_EQ(seen[c], 0) << "code " << c;
    else EXPECT_GT(seen[c], 0) << "code " << c;
  }
  // The two NaN codes' draws become +-448, so 448 has twice every other code's share.
  double sum2 = 2 * 448.0 * 448.0;
  for (int c = 0; c < 256; ++c)
    if (!is_nan_code(static_cast<uint8_t>(c))) sum2 += std::pow(num::float_from_e4m3(static_cast<uint8_t>(c)), 2);
  const double expected = std::sqrt(sum2 / 256);
  EXPECT_NEAR(test::fp8_codes_rms(v), expected, 0.02 * expected);
}

TEST(TestData, NormalCodesFollowTheirSigma) {
  test::Rng rng(test::fresh_seed());
  const float sigma = test::kWeightBlockSigma;
  const size_t n = (1 << 20) + 3;  // not a multiple of the generator's 4 codes per draw
  const auto v = test::random_fp8_normal_codes(rng, n, sigma);
  ASSERT_EQ(v.size(), n);
  double sum = 0, sum2 = 0, within1 = 0, saturated = 0;
  for (uint8_t c : v) {
    ASSERT_FALSE(is_nan_code(c));
    const double x = num::float_from_e4m3(c);
    sum += x;
    sum2 += x * x;
    within1 += std::fabs(x) <= sigma;
    saturated += std::fabs(x) == 448.0;
  }
  // The codes are drawn from a table of 65536 normal draws, so their mean's spread is that of the
  // table's, sigma / 256 (not sigma / 1024 for the 2^20 codes): 0.03 sigma is ~8 of those
  // standard errors (0.01 sigma, ~2.6 of them, failed about one seed in a hundred).
  EXPECT_NEAR(sum / n, 0.0, 0.03 * sigma);
  EXPECT_NEAR(std::sqrt(sum2 / n), sigma, 0.03 * sigma);           // E4M3 rounding moves it ~1%
  EXPECT_NEAR(within1 / n, 0.6827, 0.03);                          // a normal's one-sigma mass
  EXPECT_LT(saturated / n, 1e-3);                                  // beyond 4.2 sigma: ~3e-5
  EXPECT_NEAR(test::fp8_codes_rms(v), std::sqrt(sum2 / n), 0.01 * sigma);  // (its first 2^22 codes: all)
}

}  // namespace
}  // namespace fp8moe
