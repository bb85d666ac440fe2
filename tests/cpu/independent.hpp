// Independent models of the number formats, written from their definitions in double precision
// (std::ldexp, exhaustive nearest search) and never from src/numerics. The CPU tests compare the
// shared numerics and the reference against these.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>

namespace fp8moe::indep {

// FP8 E4M3 ("e4m3fn"): 1 sign, 4 exponent (bias 7), 3 mantissa bits; S.1111.111 is NaN, no inf.
inline double e4m3_value(int code) {
  const int sign = (code >> 7) & 1, exp = (code >> 3) & 15, mant = code & 7;
  if (exp == 15 && mant == 7) return std::numeric_limits<double>::quiet_NaN();
  const double mag = exp == 0 ? std::ldexp(mant, -9) : std::ldexp(8 + mant, exp - 10);
  return sign ? -mag : mag;
}

// Round to nearest E4M3, ties to the even code, saturating to +-448; NaN -> 0x7F.
inline uint8_t e4m3_encode(double x) {
  if (std::isnan(x)) return 0x7F;
  const uint8_t sign = std::signbit(x) ? 0x80 : 0x00;
  const double a = std::fabs(x);
  // Positive codes 0..126 are ordered by value; binary search for the last code <= a.
  int lo = 0, hi = 126;
  if (a >= e4m3_value(126)) return sign | 126;
  while (hi - lo > 1) {
    const int mid = (lo + hi) / 2;
    (e4m3_value(mid) <= a ? lo : hi) = mid;
  }
  const double dlo = a - e4m3_value(lo), dhi = e4m3_value(hi) - a;
  const int code = dlo < dhi ? lo : dhi < dlo ? hi : (lo % 2 == 0 ? lo : hi);
  return static_cast<uint8_t>(sign | code);
}

// Half the distance to the next E4M3 magnitude above |x| (x inside the finite range): the largest
// error of a correct rounding of x.
inline double e4m3_half_spacing(double x) {
  const double a = std::fabs(x);
  if (a < std::ldexp(1.0, -6)) return std::ldexp(1.0, -10);
  int e = 0;
  std::frexp(a, &e);  // a in [2^(e-1), 2^e)
  return std::ldexp(1.0, e - 1 - 3 - 1);
}

// UE8M0: value 2^(b - 127), 0xFF is NaN.
inline double ue8m0_value(int b) {
  return b == 0xFF ? std::numeric_limits<double>::quiet_NaN() : std::ldexp(1.0, b - 127);
}

// BF16 value of bits h, with exponent 255 read as an unbounded 2^128 (for rounding overflow).
inline double bf16_value_unbounded(uint16_t h) {
  const int sign = h >> 15, exp = (h >> 7) & 0xFF, mant = h & 0x7F;
  const double mag = exp == 0 ? std::ldexp(mant, -133) : std::ldexp(128 + mant, exp - 134);
  return sign ? -mag : mag;
}

inline double sigmoid(double x) { return 1.0 / (1.0 + std::exp(-x)); }
inline double silu_glu(double g, double u) { return g * sigmoid(g) * u; }
inline double swiglu_oai(double g, double u, double alpha, double beta, double limit) {
  g = std::min(g, limit);
  u = std::clamp(u, -limit, limit);
  return (u + beta) * g * sigmoid(alpha * g);
}

// Smallest power of two >= s > 0.
inline double pow2_ceil(double s) {
  int e = 0;
  const double m = std::frexp(s, &e);  // s = m * 2^e, m in [0.5, 1)
  return m == 0.5 ? s : std::ldexp(1.0, e);
}

}  // namespace fp8moe::indep
