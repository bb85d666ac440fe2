// FP8 E4M3, UE8M0 and BF16 conversions of src/numerics against the format definitions
// (independent.hpp): every code, every rounding tie, saturation, subnormals, NaN.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>

#include "cpu/independent.hpp"
#include "numerics/numerics.cuh"

namespace fp8moe {
namespace {

float next_up(float x) { return std::nextafter(x, std::numeric_limits<float>::infinity()); }
float next_down(float x) { return std::nextafter(x, -std::numeric_limits<float>::infinity()); }
bool same_bits(float a, double b) { return num::bits_of(a) == num::bits_of(static_cast<float>(b)); }

// ---- E4M3 ------------------------------------------------------------------------------------
TEST(E4M3, DecodesAllCodes) {
  for (int c = 0; c < 256; ++c) {
    const float got = num::float_from_e4m3(static_cast<uint8_t>(c));
    const double want = indep::e4m3_value(c);
    if (std::isnan(want)) {
      EXPECT_TRUE(std::isnan(got)) << "code " << c;
    } else {
      EXPECT_TRUE(same_bits(got, want)) << "code " << c << ": " << got << " vs " << want;  // -0 too
    }
  }
  EXPECT_EQ(num::float_from_e4m3(0x7E), 448.0f);
  EXPECT_EQ(num::float_from_e4m3(0x01), std::ldexp(1.0f, -9));
  EXPECT_EQ(num::float_from_e4m3(0x08), std::ldexp(1.0f, -6));
}

TEST(E4M3, EncodeOfDecodeIsIdentity) {
  for (int c = 0; c < 256; ++c) {
    if ((c & 0x7F) == 0x7F) continue;
    EXPECT_EQ(num::e4m3_from_float(num::float_from_e4m3(static_cast<uint8_t>(c))), c) << "code " << c;
  }
  EXPECT_EQ(num::e4m3_from_float(0.0f), 0x00);
  EXPECT_EQ(num::e4m3_from_float(-0.0f), 0x80);
}

TEST(E4M3, MidpointsRoundToEvenCode) {
  for (int sign = 0; sign < 2; ++sign) {
    for (int c = 0; c < 126; ++c) {  // neighbours c, c + 1 among the positive finite codes
      const double lo = indep::e4m3_value(c), hi = indep::e4m3_value(c + 1);
      const float mid = static_cast<float>((lo + hi) / 2);  // exact: one more bit than E4M3
      ASSERT_EQ(static_cast<double>(mid), (lo + hi) / 2);
      const int even = (c % 2 == 0) ? c : c + 1;
      const float s = sign ? -1.0f : 1.0f;
      const int sbit = sign ? 0x80 : 0;
      EXPECT_EQ(num::e4m3_from_float(s * mid), sbit | even) << "midpoint of codes " << c << ", " << c + 1;
      EXPECT_EQ(num::e4m3_from_float(s * next_up(mid)), sbit | (c + 1)) << "just above midpoint " << mid;
      EXPECT_EQ(num::e4m3_from_float(s * next_down(mid)), sbit | c) << "just below midpoint " << mid;
    }
  }
}

TEST(E4M3, SaturatesAndHandlesNaN) {
  const float inf = std::numeric_limits<float>::infinity();
  for (float x : {448.0f, next_up(448.0f), 449.0f, 464.0f, 480.0f, 1e30f, std::numeric_limits<float>::max(), inf}) {
    EXPECT_EQ(num::e4m3_from_float(x), 0x7E) << x;
    EXPECT_EQ(num::e4m3_from_float(-x), 0xFE) << -x;
  }
  EXPECT_EQ(num::e4m3_from_float(std::numeric_limits<float>::quiet_NaN()), 0x7F);
  EXPECT_EQ(num::e4m3_from_float(-std::numeric_limits<float>::quiet_NaN()), 0x7F);
  EXPECT_EQ(num::e4m3_from_float(num::float_of(0x7F800001u)), 0x7F);  // signalling NaN
  // 432 is the midpoint of 416 (0x7D) and 448 (0x7E): ties to the even code 0x7E.
  EXPECT_EQ(num::e4m3_from_float(432.0f), 0x7E);
  EXPECT_EQ(num::e4m3_from_float(next_down(432.0f)), 0x7D);
}

TEST(E4M3, Subnormals) {
  for (int m = 0; m < 8; ++m) EXPECT_EQ(num::e4m3_from_float(std::ldexp(float(m), -9)), m);
  // Below half the smallest subnormal -> 0; the midpoint 2^-10 ties to the even code 0.
  EXPECT_EQ(num::e4m3_from_float(std::ldexp(1.0f, -10)), 0x00);
  EXPECT_EQ(num::e4m3_from_float(next_up(std::ldexp(1.0f, -10))), 0x01);
  EXPECT_EQ(num::e4m3_from_float(1e-30f), 0x00);
  EXPECT_EQ(num::e4m3_from_float(-1e-30f), 0x80);
  EXPECT_EQ(num::e4m3_from_float(std::numeric_limits<float>::denorm_min()), 0x00);
  // 7.5 * 2^-9 ties between code 7 (odd) and 8 (the smallest normal, even).
  EXPECT_EQ(num::e4m3_from_float(std::ldexp(7.5f, -9)), 0x08);
  EXPECT_EQ(num::e4m3_from_float(std::ldexp(6.5f, -9)), 0x06);
}

// A strided sweep over the bit patterns of all floats up to 2^9 (and their negatives) against the
// independent nearest-search encoder.
TEST(E4M3, MatchesNearestSearchOnFloatSweep) {
  int64_t checked = 0;
  for (uint32_t u = 0; u <= 0x44000000u; u += 97) {
    for (uint32_t sign : {0u, 0x80000000u}) {
      const float x = num::float_of(u | sign);
      const uint8_t want = indep::e4m3_encode(x);
      const uint8_t got = num::e4m3_from_float(x);
      if (got != want) {
        ADD_FAILURE() << "x = " << x << " (bits 0x" << std::hex << (u | sign) << "): got 0x" << int(got)
                      << ", want 0x" << int(want);
        return;
      }
      ++checked;
    }
  }
  EXPECT_GT(checked, 20000000);
}

// ---- UE8M0 -----------------------------------------------------------------------------------
TEST(UE8M0, DecodesAllCodesAndRoundTrips) {
  for (int b = 0; b < 256; ++b) {
    const float got = num::float_from_ue8m0(static_cast<uint8_t>(b));
    if (b == 0xFF) {
      EXPECT_TRUE(std::isnan(got));
      continue;
    }
    EXPECT_TRUE(same_bits(got, indep::ue8m0_value(b))) << "byte " << b;
    EXPECT_EQ(num::ue8m0_ceil_from_float(got), b) << "byte " << b;
  }
  EXPECT_EQ(num::float_from_ue8m0(0), std::ldexp(1.0f, -127));
  EXPECT_EQ(num::float_from_ue8m0(127), 1.0f);
}

TEST(UE8M0, CeilRoundsNonPowersUp) {
  for (int b = 1; b < 254; ++b) {
    const float p = std::ldexp(1.0f, b - 127);
    EXPECT_EQ(num::ue8m0_ceil_from_float(next_up(p)), b + 1) << "just above 2^" << b - 127;
    EXPECT_EQ(num::ue8m0_ceil_from_float(1.5f * p), b + 1) << "1.5 * 2^" << b - 127;
    EXPECT_EQ(num::ue8m0_ceil_from_float(next_down(p)), b) << "just below 2^" << b - 127;
  }
  EXPECT_EQ(num::ue8m0_ceil_from_float(1e-10f), 127 - 33);  // 2^-34 < 1e-10 <= 2^-33
  EXPECT_EQ(num::ue8m0_ceil_from_float(std::ldexp(1.0f, -128)), 0);
  EXPECT_EQ(num::ue8m0_ceil_from_float(std::ldexp(1.5f, -127)), 1);
  EXPECT_EQ(num::ue8m0_ceil_from_float(std::numeric_limits<float>::max()), 254);  // clamped
  EXPECT_EQ(num::ue8m0_ceil_from_float(std::numeric_limits<float>::infinity()), 0xFF);
}

TEST(Pow2Ceil, PowersUnchangedOthersUp) {
  for (int e = -126; e <= 126; ++e) {
    const float p = std::ldexp(1.0f, e);
    EXPECT_EQ(num::pow2_ceil(p), p);
    EXPECT_EQ(num::pow2_ceil(next_up(p)), 2 * p);
    EXPECT_EQ(num::pow2_ceil(1.75f * p), 2 * p);
    if (e > -126) {
      EXPECT_EQ(num::pow2_ceil(next_down(p)), p);
    }
  }
  EXPECT_EQ(num::pow2_ceil(1e-10f), std::ldexp(1.0f, -33));
}

// ---- BF16 ------------------------------------------------------------------------------------
// Every finite BF16 value h with low halves 0, just below / at / just above the tie, and the top.
TEST(BF16, RoundsToNearestEven) {
  for (uint32_t h = 0; h < 0x10000u; ++h) {
    if (((h >> 7) & 0xFF) == 0xFF) continue;  // inf / NaN
    const double lo = indep::bf16_value_unbounded(static_cast<uint16_t>(h));
    const double hi = indep::bf16_value_unbounded(static_cast<uint16_t>(h + 1));  // next magnitude
    for (uint32_t low : {0x0000u, 0x0001u, 0x7FFFu, 0x8000u, 0x8001u, 0xFFFFu}) {
      const float x = num::float_of((h << 16) | low);
      const double dlo = std::fabs(x - lo), dhi = std::fabs(hi - x);
      const uint32_t want = dlo < dhi ? h : dhi < dlo ? h + 1 : ((h & 1u) ? h + 1 : h);
      ASSERT_EQ(num::bf16_bits_from_float(x), want) << "bits 0x" << std::hex << ((h << 16) | low);
    }
  }
  EXPECT_EQ(num::bf16_bits_from_float(num::float_of(0x7F7F8000u)), 0x7F80);  // tie at the top -> inf
  EXPECT_EQ(num::bf16_bits_from_float(num::float_of(0x3F808000u)), 0x3F80);  // tie to even (down)
  EXPECT_EQ(num::bf16_bits_from_float(num::float_of(0x3F818000u)), 0x3F82);  // tie to even (up)
}

TEST(BF16, InfinityNaNAndWidening) {
  const float inf = std::numeric_limits<float>::infinity();
  EXPECT_EQ(num::bf16_bits_from_float(inf), 0x7F80);
  EXPECT_EQ(num::bf16_bits_from_float(-inf), 0xFF80);
  for (uint32_t nan : {0x7FC00000u, 0x7F800001u, 0x7FFFFFFFu, 0xFF800001u, 0xFFC00000u}) {
    const uint16_t b = num::bf16_bits_from_float(num::float_of(nan));
    EXPECT_EQ(b & 0x7F80, 0x7F80) << std::hex << nan;  // exponent all ones ...
    EXPECT_NE(b & 0x007F, 0) << std::hex << nan;       // ... and a non-zero mantissa: still NaN
    EXPECT_EQ(b >> 15, nan >> 31) << std::hex << nan;  // sign kept
  }
  for (uint32_t h = 0; h < 0x10000u; ++h)
    ASSERT_EQ(num::bits_of(num::float_from_bf16_bits(static_cast<uint16_t>(h))), h << 16);
}

}  // namespace
}  // namespace fp8moe
