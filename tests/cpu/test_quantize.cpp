// SPEC section 2, step 1: group scales (1e-10 floor, power-of-two ceiling) and the group
// quantization of ref::quantize_row, against the independent format model.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "common/data.hpp"
#include "cpu/independent.hpp"
#include "reference/reference.hpp"

namespace fp8moe {
namespace {

TEST(GroupScale, ZeroGroupHitsTheFloor) {
  EXPECT_EQ(num::group_scale(0.0f, false), 1e-10f);
  EXPECT_EQ(num::group_scale(0.0f, true), std::ldexp(1.0f, -33));  // pow2_ceil(1e-10f) = 2^-33
  EXPECT_EQ(num::group_scale(1e-9f, false), 1e-10f);                 // 1e-9 / 448 < 1e-10
  EXPECT_EQ(num::group_scale(448e-10f, false), 1e-10f);
}

TEST(GroupScale, AmaxOverE4M3Max) {
  EXPECT_EQ(num::group_scale(448.0f, false), 1.0f);
  EXPECT_EQ(num::group_scale(448.0f, true), 1.0f);
  EXPECT_EQ(num::group_scale(896.0f, true), 2.0f);
  EXPECT_EQ(num::group_scale(449.0f, true), 2.0f);
  EXPECT_EQ(num::group_scale(447.0f, true), 1.0f);
  test::Rng rng(test::fresh_seed());
  std::uniform_real_distribution<double> log_amax(std::log(1e-6), std::log(1e6));
  for (int i = 0; i < 100000; ++i) {
    const float amax = static_cast<float>(std::exp(log_amax(rng)));
    // FP32 division is the double quotient rounded once to float.
    const double s = static_cast<float>(static_cast<double>(amax) / 448.0);
    ASSERT_EQ(num::group_scale(amax, false), static_cast<float>(s)) << "amax " << amax;
    ASSERT_EQ(num::group_scale(amax, true), static_cast<float>(indep::pow2_ceil(s))) << "amax " << amax;
  }
}

// Quantizes random groups of very different magnitudes (and an all-zero group) and checks codes
// against the independent encoder, the scale rule, and the reconstruction error.
void check_quantize_row(bool pow2, uint64_t seed) {
  test::Rng rng(seed);
  constexpr int kGroups = 24;
  std::vector<float> x(128 * kGroups);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_real_distribution<float> binades(-24.0f, 0.0f);
  for (int g = 0; g < kGroups; ++g) {
    // Group magnitudes 2^-24 .. 2^22. Even groups: normal values; odd groups: log-uniform over 24
    // binades below the magnitude, so every E4M3 binade and the subnormals are hit; group 3: +-0.
    const float mag = std::ldexp(1.0f, 2 * g - 24);
    for (int i = 0; i < 128; ++i) {
      float& xi = x[g * 128 + i];
      if (g == 3) xi = i % 2 ? -0.0f : 0.0f;
      else if (g % 2 == 0) xi = mag * normal(rng);
      else xi = (rng() % 2 ? -mag : mag) * std::exp2(binades(rng));
    }
  }
  std::vector<uint8_t> q(x.size());
  std::vector<float> scales(kGroups);
  ref::quantize_row(x.data(), static_cast<int64_t>(x.size()), pow2, q.data(), scales.data());
  for (int g = 0; g < kGroups; ++g) {
    double amax = 0;
    for (int i = 0; i < 128; ++i) amax = std::max(amax, std::fabs(double(x[g * 128 + i])));
    double s = std::max(double(static_cast<float>(amax / 448.0)), double(1e-10f));
    if (pow2) s = indep::pow2_ceil(s);
    ASSERT_EQ(scales[g], static_cast<float>(s)) << "group " << g;
    for (int i = 0; i < 128; ++i) {
      const float xi = x[g * 128 + i];
      const uint8_t want = indep::e4m3_encode(static_cast<float>(double(xi) / scales[g]));
      ASSERT_EQ(q[g * 128 + i], want) << "group " << g << " element " << i << " x " << xi;
      const double y = xi / double(scales[g]);
      // A correctly rounded code reproduces x within half an E4M3 step at x's magnitude.
      EXPECT_LE(std::fabs(indep::e4m3_value(q[g * 128 + i]) - y), indep::e4m3_half_spacing(y) * (1 + 1e-6))
          << "group " << g << " element " << i;
    }
    if (g == 3) {
      for (int i = 0; i < 128; ++i) EXPECT_EQ(q[g * 128 + i], i % 2 ? 0x80 : 0x00);
      EXPECT_EQ(scales[g], pow2 ? std::ldexp(1.0f, -33) : 1e-10f);
    } else if (!pow2) {
      // The group's amax element lands on +-448: nothing of the E4M3 range is wasted.
      int at_max = 0;
      for (int i = 0; i < 128; ++i) at_max += (q[g * 128 + i] & 0x7F) == 0x7E;
      EXPECT_GE(at_max, 1) << "group " << g;
    }
  }
}

TEST(QuantizeRow, Fp32Scales) { check_quantize_row(false, test::fresh_seed()); }
TEST(QuantizeRow, Pow2Scales) { check_quantize_row(true, test::fresh_seed()); }

TEST(QuantizeRow, RejectsPartialGroups) {
  std::vector<float> x(100);
  std::vector<uint8_t> q(100);
  float s[1];
  EXPECT_THROW(ref::quantize_row(x.data(), 100, false, q.data(), s), std::invalid_argument);
}

}  // namespace
}  // namespace fp8moe
