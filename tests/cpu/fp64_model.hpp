// FP64 models of the pipeline stages for the CPU tests, written independently of the reference
// (the only shared pieces are the layout index functions and load_scale, which test_layout checks
// on their own), with the error bounds that the reference must meet against them.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "cpu/independent.hpp"
#include "reference/reference.hpp"

namespace fp8moe::fp64 {

using layout::ScaleFormat;

template <typename Fn>
void for_live_rows(const ref::Permutation& p, int num_experts, Fn&& fn) {
  for (int e = 0; e < num_experts; ++e)
    for (int64_t r = layout::expert_start(p.ends.data(), e); r < p.ends[e]; ++r) fn(e, r);
}

// ---- step 1: the group quantization from its definition ------------------------------------------
// FP32 arithmetic where the contract says FP32 (x / s and amax / 448 are FP32 divisions, which
// equal the double quotient rounded once to float); codes from the nearest-search encoder.
inline void quantize_group_fp32(const float* x, bool pow2, uint8_t* q, float* scale) {
  float amax = 0;
  for (int i = 0; i < 128; ++i) amax = std::max(amax, std::fabs(x[i]));
  double s = std::max(static_cast<double>(static_cast<float>(amax / 448.0)), static_cast<double>(1e-10f));
  if (pow2) s = indep::pow2_ceil(s);
  *scale = static_cast<float>(s);
  for (int i = 0; i < 128; ++i) q[i] = indep::e4m3_encode(static_cast<float>(x[i] / s));
}

// Step 1 in FP64 throughout; returns the dequantized values.
inline void quantize_dequantize_fp64(const double* x, int64_t k, bool pow2, double* out) {
  for (int64_t g = 0; g < k / 128; ++g) {
    double amax = 0;
    for (int i = 0; i < 128; ++i) amax = std::max(amax, std::fabs(x[g * 128 + i]));
    double s = std::max(amax / 448.0, 1e-10);
    if (pow2) s = indep::pow2_ceil(s);
    for (int i = 0; i < 128; ++i) out[g * 128 + i] = indep::e4m3_value(indep::e4m3_encode(x[g * 128 + i] / s)) * s;
  }
}

// A1 must equal the independent quantization of each routed token bit for bit.
inline void expect_a1_exact(const ref::Shape& s, const ref::Permutation& p, const uint16_t* hidden, ScaleFormat f,
                            const uint8_t* a1, const void* a1_scale) {
  const int64_t H = s.hidden;
  std::vector<float> x(H);
  std::vector<uint8_t> q(H);
  std::vector<float> scale(H / 128);
  int64_t checked = 0;
  for (int64_t t = 0; t < s.tokens; ++t)
    for (int j = 0; j < s.top_k; ++j) {
      const int64_t r = p.row_of[t * s.top_k + j];
      if (r < 0) continue;
      for (int64_t h = 0; h < H; ++h) x[h] = indep::bf16_value_unbounded(hidden[t * H + h]);
      for (int64_t g = 0; g < H / 128; ++g) {
        quantize_group_fp32(&x[g * 128], f != ScaleFormat::kFp32, &q[g * 128], &scale[g]);
        ASSERT_EQ(ref::load_scale(f, a1_scale, p.m_pad, r, g), scale[g]) << "token " << t << " group " << g;
      }
      for (int64_t h = 0; h < H; ++h) ASSERT_EQ(a1[r * H + h], q[h]) << "token " << t << " slot " << j << " h " << h;
      ++checked;
    }
  EXPECT_GT(checked, 0);
}

// ---- steps 3 and 5: the grouped GEMM ------------------------------------------------------------
struct Gemm {
  std::vector<double> y;        // [m_cap, N]: sum over K blocks of scale_a * scale_b * partial
  std::vector<double> abs_sum;  // [m_cap, N]: sum over K blocks of |scale_a * scale_b * partial|
};

// Partials are exact in double (products of E4M3 values are multiples of 2^-18 below 2^18; 128 of
// them sum to below 2^25), so y is the exact result up to a few double roundings.
inline Gemm gemm(const ref::Permutation& p, int num_experts, const uint8_t* a, const void* a_scale, ScaleFormat f,
                 const uint8_t* b, const float* b_scale, int64_t N, int64_t K) {
  Gemm out{std::vector<double>(p.m_cap * N, 0.0), std::vector<double>(p.m_cap * N, 0.0)};
  const int64_t nb = N / 128, kb = K / 128;
  double value[256];
  for (int c = 0; c < 256; ++c) value[c] = indep::e4m3_value(c);
  for_live_rows(p, num_experts, [&](int e, int64_t r) {
    for (int64_t n = 0; n < N; ++n) {
      const uint8_t* brow = b + (e * N + n) * K;
      for (int64_t blk = 0; blk < kb; ++blk) {
        double partial = 0;
        for (int64_t i = blk * 128; i < (blk + 1) * 128; ++i)
          partial += value[a[r * K + i]] * value[brow[i]];
        const double term = double(ref::load_scale(f, a_scale, p.m_pad, r, blk)) *
                            double(b_scale[(e * nb + n / 128) * kb + blk]) * partial;
        out.y[r * N + n] += term;
        out.abs_sum[r * N + n] += std::fabs(term);
      }
    }
  });
  return out;
}

// The reference rounds each block partial to FP32 once, multiplies the two scales in FP32, and
// accumulates the K/128 blocks with FP32 fmas: error <= (K/128 + 2) 2^-24 S with S = abs_sum (one
// rounding per block for the scale product, the partial and the running sum). The BF16 output
// adds 2^-8 of the value. Every live element must be within that bound.
inline void expect_gemm_within_bound(const ref::Permutation& p, int num_experts, const Gemm& want, const uint16_t* d,
                                     int64_t N, int64_t K) {
  const double fp32_part = (K / 128 + 2) * std::ldexp(1.0, -24) * (1 + std::ldexp(1.0, -8));
  int64_t elements = 0, not_nearest = 0, failures = 0;
  for_live_rows(p, num_experts, [&](int, int64_t r) {
    for (int64_t n = 0; n < N; ++n) {
      const double y = want.y[r * N + n];
      const double got = indep::bf16_value_unbounded(d[r * N + n]);
      const double bound = std::ldexp(std::fabs(y), -8) + fp32_part * want.abs_sum[r * N + n] + 1e-30;
      if (!(std::fabs(got - y) <= bound) && failures++ < 5)
        ADD_FAILURE() << "row " << r << " col " << n << ": got " << got << ", FP64 " << y << ", bound " << bound;
      not_nearest += d[r * N + n] != num::bf16_bits_from_float(static_cast<float>(y));
      ++elements;
    }
  });
  EXPECT_EQ(failures, 0);
  EXPECT_GT(elements, 0);
  // Almost every element is the BF16 rounding of the exact value (a different one only where the
  // exact value sits within the FP32 error of a BF16 rounding boundary).
  EXPECT_LE(not_nearest, elements / 100) << not_nearest << " of " << elements << " not the nearest BF16";
}

// ---- step 4: activation + quantization ---------------------------------------------------------
inline double activation(double g, double u, const num::ActParams& act) {
  return act.kind == num::ActKind::kSilu ? indep::silu_glu(g, u) : indep::swiglu_oai(g, u, act.alpha, act.beta, act.limit);
}

// Nearest BF16 (ties to even) of a float, from the value grid rather than from bit tricks.
inline uint16_t bf16_nearest(float x) {
  uint32_t u;
  std::memcpy(&u, &x, 4);
  const uint16_t lo = static_cast<uint16_t>(u >> 16);  // truncation: same sign, not larger in magnitude
  if ((u & 0xFFFFu) == 0) return lo;
  const double dlo = std::fabs(x - indep::bf16_value_unbounded(lo));
  const double dhi = std::fabs(indep::bf16_value_unbounded(static_cast<uint16_t>(lo + 1)) - x);
  return dlo < dhi ? lo : dhi < dlo ? static_cast<uint16_t>(lo + 1) : ((lo & 1) ? static_cast<uint16_t>(lo + 1) : lo);
}

// Whether s = FP32(b / 448) for some BF16 value b (one of the BF16 values around s * 448).
inline bool scale_is_bf16_over_448(float s) {
  const float m = static_cast<float>(double(s) * 448.0);
  uint32_t u;
  std::memcpy(&u, &m, 4);
  for (int d = -1; d <= 1; ++d) {
    const double b = indep::bf16_value_unbounded(static_cast<uint16_t>((u >> 16) + d));
    if (static_cast<float>(b / 448.0) == s) return true;
  }
  return false;
}

// Relative error bound of the reference's FP32 activation (test_activation checks it): 1e-6 for
// the FP32 operations, plus |alpha g| 2^-24 for swiglu_oai's rounded alpha * g in the sigmoid.
inline double activation_rel_error(double g, const num::ActParams& act) {
  if (act.kind == num::ActKind::kSilu) return 1e-6;
  return 1e-6 + std::fabs(act.alpha * std::min(g, double(act.limit))) * std::ldexp(1.0, -24);
}

// The reference computes a' = act(g, u) in FP32 (relative error eps above), b = BF16(a') (2^-8
// more), s from the group amax of b, q = E4M3(b / s). So, with rho = 2^-8 + 2 eps per element:
//  - the FP32 scale lies within [amax (1 - rho), amax (1 + rho)] / 448 (one more FP32 rounding,
//    then the 1e-10 floor); a power-of-two scale is the ceiling power of two of that value;
//  - each element: |q s - act(g, u)| <= half an E4M3 step at |b / s| times s, plus rho |act|.
// The BF16 step is pinned further: an FP32 scale is a BF16 value divided by 448 (or the floor),
// and the codes are those of BF16(act) / s except for the rare element whose FP32 activation
// error straddles a BF16 rounding boundary (quantizing the unrounded FP32 value instead moves
// about 3% of the codes).
// Returns the dequantized A2 of live rows.
inline std::vector<double> expect_act_quant_within_bound(const ref::Permutation& p, int num_experts, const uint16_t* y1,
                                                         int64_t I, const num::ActParams& act, ScaleFormat f,
                                                         const uint8_t* a2, const void* a2_scale) {
  const double floor_s = 1e-10f;
  std::vector<double> a(I), rho(I), deq(p.m_cap * I, 0.0);
  int64_t failures = 0, codes = 0, codes_not_of_bf16 = 0;
  for_live_rows(p, num_experts, [&](int, int64_t r) {
    for (int64_t i = 0; i < I; ++i) {
      const double g = indep::bf16_value_unbounded(y1[r * 2 * I + i]);
      a[i] = activation(g, indep::bf16_value_unbounded(y1[r * 2 * I + I + i]), act);
      rho[i] = std::ldexp(1.0, -8) + 2 * activation_rel_error(g, act);
    }
    for (int64_t g = 0; g < I / 128; ++g) {
      double lo = floor_s, hi = floor_s;
      for (int i = 0; i < 128; ++i) {
        const double m = std::fabs(a[g * 128 + i]) / 448;
        lo = std::max(lo, m * (1 - rho[g * 128 + i]) * (1 - 1e-7));
        hi = std::max(hi, m * (1 + rho[g * 128 + i]) * (1 + 1e-7));
      }
      const double s = ref::load_scale(f, a2_scale, p.m_pad, r, g);
      const bool scale_ok = f == ScaleFormat::kFp32 ? (s >= lo && s <= hi)
                                                     : (s == indep::pow2_ceil(s) && s >= lo && s < 2 * hi);
      if (!scale_ok && failures++ < 5)
        ADD_FAILURE() << "row " << r << " group " << g << ": scale " << s << " outside [" << lo << ", " << hi << "]";
      if (f == ScaleFormat::kFp32 && s != floor_s && !scale_is_bf16_over_448(static_cast<float>(s)) && failures++ < 5)
        ADD_FAILURE() << "row " << r << " group " << g << ": scale " << s << " is no BF16 value / 448";
      for (int i = 0; i < 128; ++i) {
        const double want = a[g * 128 + i], rh = rho[g * 128 + i];
        const double got = indep::e4m3_value(a2[r * I + g * 128 + i]) * s;
        const double bound = indep::e4m3_half_spacing((1 + rh) * std::fabs(want) / s) * s * (1 + 1e-6) +
                             rh * std::fabs(want) + 1e-37;
        if (!(std::fabs(got - want) <= bound) && failures++ < 5)
          ADD_FAILURE() << "row " << r << " col " << g * 128 + i << ": got " << got << ", FP64 " << want
                        << ", bound " << bound;
        deq[r * I + g * 128 + i] = got;
        const float b = static_cast<float>(indep::bf16_value_unbounded(bf16_nearest(static_cast<float>(want))));
        codes_not_of_bf16 += a2[r * I + g * 128 + i] != indep::e4m3_encode(static_cast<float>(b / s));
        ++codes;
      }
    }
  });
  EXPECT_EQ(failures, 0);
  EXPECT_LE(codes_not_of_bf16, codes / 200) << codes_not_of_bf16 << " of " << codes << " codes not those of BF16(act)";
  return deq;
}

}  // namespace fp8moe::fp64
