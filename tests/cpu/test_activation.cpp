// exp_f, silu and swiglu_oai of src/numerics against FP64 formulas (SPEC section 1).
#include <gtest/gtest.h>

#include <algorithm>
#include <cfloat>
#include <cmath>

#include "common/data.hpp"
#include "cpu/independent.hpp"
#include "numerics/numerics.cuh"

namespace fp8moe {
namespace {

// Max relative error below 4.5e-7 (about 3.8 ulp) wherever the result is a normal float, and below
// 2.5e-7 for |x| <= 20 (the part of silu's range where the sigmoid is not saturated): the
// reduction's one constant, RN(ln 2), contributes |n| 1.9e-9 relative, so the error grows towards
// the ends. In the subnormal range (x < -87.34) the final rounding to the subnormal grid adds up
// to half of 2^-149.
TEST(ExpF, MatchesFp64ExpOnDenseSweep) {
  double max_rel = 0, worst_x = 0, max_rel_center = 0;
  const int64_t n = 4000000;
  for (int64_t i = 0; i <= n; ++i) {
    const float x = static_cast<float>(-100.0 + 188.0 * double(i) / double(n));
    const double want = std::exp(double(x));
    const double got = num::exp_f(x);
    const double err = std::fabs(got - want);
    if (want >= FLT_MIN) {
      if (err / want > max_rel) max_rel = err / want, worst_x = x;
      if (std::fabs(x) <= 20.0f) max_rel_center = std::max(max_rel_center, err / want);
    } else {
      ASSERT_LE(err, 4.5e-7 * want + std::ldexp(1.0, -150)) << "x = " << x;
    }
  }
  std::printf("exp_f: max relative error %.3g at x = %.9g, %.3g for |x| <= 20\n", max_rel, worst_x,
              max_rel_center);
  EXPECT_LT(max_rel, 4.5e-7) << "at x = " << worst_x;
  EXPECT_LT(max_rel_center, 2.5e-7);
}

TEST(ExpF, SpecialValues) {
  EXPECT_EQ(num::exp_f(0.0f), 1.0f);
  EXPECT_EQ(num::exp_f(-200.0f), 0.0f);
  EXPECT_TRUE(std::isinf(num::exp_f(100.0f)));
  EXPECT_TRUE(std::isnan(num::exp_f(NAN)));
}

// silu(g) * u: five FP32 operations after exp_f; 1e-6 relative covers them with margin.
TEST(Activation, SiluMatchesFp64) {
  test::Rng rng(test::fresh_seed());
  std::uniform_real_distribution<float> gate(-30.0f, 30.0f), up(-10.0f, 10.0f);
  num::ActParams p;  // kSilu; limit etc. must be ignored
  p.limit = 0.5f;
  for (int i = 0; i < 1000000; ++i) {
    const float g = gate(rng), u = up(rng);
    const double want = indep::silu_glu(g, u);
    const double got = num::activation(g, u, p);
    ASSERT_LE(std::fabs(got - want), 1e-6 * std::fabs(want) + 1e-37) << "g " << g << " u " << u;
  }
  EXPECT_EQ(num::activation(0.0f, 5.0f, p), 0.0f);
  EXPECT_EQ(num::activation(2.0f, 0.0f, p), 0.0f);
}

// (u + beta) * g * sigmoid(alpha * g), g clamped above only, u clamped on both sides. alpha * g
// is rounded in FP32, which moves the sigmoid by up to |alpha g| 2^-24 relative (g is not clamped
// below, so that term grows with -g); the other FP32 operations stay below 1e-6.
TEST(Activation, SwigluOaiMatchesFp64WithClamping) {
  test::Rng rng(test::fresh_seed());
  std::uniform_real_distribution<float> dist(-20.0f, 20.0f);
  num::ActParams p;
  p.kind = num::ActKind::kSwigluOai;
  p.alpha = 1.702f, p.beta = 1.0f, p.limit = 7.0f;
  int clamped_g = 0, clamped_u = 0;
  for (int i = 0; i < 1000000; ++i) {
    const float g = dist(rng), u = dist(rng);
    clamped_g += g > p.limit;
    clamped_u += std::fabs(u) > p.limit;
    const double want = indep::swiglu_oai(g, u, p.alpha, p.beta, p.limit);
    const double got = num::activation(g, u, p);
    const double rel = 1e-6 + std::fabs(p.alpha * std::min(g, p.limit)) * std::ldexp(1.0, -24);
    ASSERT_LE(std::fabs(got - want), rel * std::fabs(want) + 1e-37) << "g " << g << " u " << u;
  }
  EXPECT_GT(clamped_g, 100000);
  EXPECT_GT(clamped_u, 100000);
  // The clamps, bit for bit: g above the limit acts as the limit, g below -limit is not clamped.
  for (float u : {-3.0f, 0.5f, 6.0f}) {
    EXPECT_EQ(num::activation(100.0f, u, p), num::activation(7.0f, u, p));
    EXPECT_NE(num::activation(-12.0f, u, p), num::activation(-7.0f, u, p));
  }
  for (float g : {-3.0f, 0.5f, 6.0f}) {
    EXPECT_EQ(num::activation(g, 100.0f, p), num::activation(g, 7.0f, p));
    EXPECT_EQ(num::activation(g, -100.0f, p), num::activation(g, -7.0f, p));
  }
  // Unclamped negative gate: tiny but exactly the formula's value, e.g. g = -12, u = 0.
  const double tiny = indep::swiglu_oai(-12.0, 0.0, 1.702f, 1.0, 7.0);
  EXPECT_NEAR(num::activation(-12.0f, 0.0f, p), tiny, 3e-6 * std::fabs(tiny));
}

TEST(ReduceStep, IsOneFusedMultiplyAdd) {
  // w * y = 1 + 2^-11 + 2^-24 exactly; with acc = -1 one rounding gives 2^-11 + 2^-24, whereas
  // rounding the product first (a tie, to even) would lose the 2^-24.
  const float w = 1.0f + std::ldexp(1.0f, -12), y = w;
  EXPECT_EQ(num::reduce_step(-1.0f, w, y), std::ldexp(1.0f, -11) + std::ldexp(1.0f, -24));
  EXPECT_EQ(num::reduce_step(0.5f, 2.0f, 3.0f), 6.5f);
}

}  // namespace
}  // namespace fp8moe
