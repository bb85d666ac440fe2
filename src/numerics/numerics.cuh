// fp8moe numerics: the number formats and rounding rules of SPEC section 2, written once and
// compiled for both the CPU reference and the kernels, so the two agree bit for bit.
//
// Every FP32 operation that matters goes through add_rn / mul_rn / div_rn / fma_rn: on the device
// these are the explicitly rounded intrinsics (never contracted into an FMA by nvcc), on the host
// plain IEEE operations (the build passes -ffp-contract=off). Nothing here depends on libm, whose
// results differ between glibc and CUDA.
#pragma once

#include <cstdint>
#include <cstring>
#ifndef __CUDACC__
#include <cmath>
#endif

#if defined(__CUDACC__)
#define FP8MOE_HD __host__ __device__ __forceinline__
#else
#define FP8MOE_HD inline
#endif

namespace fp8moe::num {

// ---- exactly rounded FP32 primitives -------------------------------------------------------
FP8MOE_HD float add_rn(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fadd_rn(a, b);
#else
  return a + b;
#endif
}
FP8MOE_HD float mul_rn(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fmul_rn(a, b);
#else
  return a * b;
#endif
}
FP8MOE_HD float div_rn(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fdiv_rn(a, b);
#else
  return a / b;
#endif
}
FP8MOE_HD float fma_rn(float a, float b, float c) {
#if defined(__CUDA_ARCH__)
  return __fmaf_rn(a, b, c);
#else
  return std::fma(a, b, c);
#endif
}
FP8MOE_HD uint32_t bits_of(float x) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(x);
#else
  uint32_t u;
  std::memcpy(&u, &x, 4);
  return u;
#endif
}
FP8MOE_HD float float_of(uint32_t u) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(u);
#else
  float x;
  std::memcpy(&x, &u, 4);
  return x;
#endif
}
FP8MOE_HD float abs_f(float x) { return float_of(bits_of(x) & 0x7FFFFFFFu); }
FP8MOE_HD bool is_nan(float x) { return (bits_of(x) & 0x7FFFFFFFu) > 0x7F800000u; }
// max that ignores NaN in b (amax reductions start from 0 and never see NaN from valid inputs)
FP8MOE_HD float max_f(float a, float b) { return b > a ? b : a; }
FP8MOE_HD float min_f(float a, float b) { return b < a ? b : a; }

// ---- BF16 ----------------------------------------------------------------------------------
// Round to nearest even; NaN stays a quiet NaN with its sign.
FP8MOE_HD uint16_t bf16_bits_from_float(float x) {
  uint32_t u = bits_of(x);
  if ((u & 0x7FFFFFFFu) > 0x7F800000u) return static_cast<uint16_t>((u >> 16) | 0x0040u);
  u += 0x7FFFu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}
FP8MOE_HD float float_from_bf16_bits(uint16_t b) { return float_of(static_cast<uint32_t>(b) << 16); }
FP8MOE_HD float round_to_bf16(float x) { return float_from_bf16_bits(bf16_bits_from_float(x)); }

// ---- FP8 E4M3 (OCP "e4m3fn": bias 7, max 448, no infinities, S.1111.111 is NaN) ---------------
constexpr float kE4M3Max = 448.0f;

// Round to nearest even, saturate to +-448 (infinities too); NaN -> 0x7F.
// The definition, in software: the host uses it, and the GPU tests hold the hardware path to it.
FP8MOE_HD uint8_t e4m3_from_float_soft(float x) {
  const uint32_t u = bits_of(x);
  const uint32_t sign = (u >> 24) & 0x80u;
  const uint32_t a = u & 0x7FFFFFFFu;
  if (a > 0x7F800000u) return 0x7Fu;
  if (a >= 0x43E00000u) return static_cast<uint8_t>(sign | 0x7Eu);  // |x| >= 448
  if (a < 0x3C800000u) {                                             // |x| < 2^-6: subnormal grid m*2^-9
    // |x| * 512 < 8 is exact; adding and removing 1.5*2^23 rounds it to an integer, ties to even.
    const float scaled = mul_rn(float_of(a), 512.0f);
    const float r = add_rn(add_rn(scaled, 12582912.0f), -12582912.0f);
    return static_cast<uint8_t>(sign | static_cast<uint32_t>(r));  // r == 8 is the smallest normal
  }
  const uint32_t exp = (a >> 23) - 127u + 7u;  // 1..15
  const uint32_t mant = a & 0x7FFFFFu;
  const uint32_t keep = mant >> 20;
  const uint32_t rest = mant & 0xFFFFFu;
  const uint32_t up = (rest > 0x80000u) || (rest == 0x80000u && (keep & 1u));
  uint32_t code = (exp << 3) + keep + up;  // a mantissa carry moves into the exponent
  if (code > 0x7Eu) code = 0x7Eu;
  return static_cast<uint8_t>(sign | code);
}

// On sm_89+ the device converts with the hardware (cvt.rn.satfinite.e4m3x2.f32: round to nearest
// even, saturation to +-448 that includes infinities), which equals e4m3_from_float_soft on every
// non-NaN float (tests/gpu/test_conversions.cu sweeps all 2^32 inputs). A NaN gives a NaN code,
// S.1111.111, whose sign the definition drops: e4m3_nan_to_7f makes every such byte 0x7F.
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 890
#define FP8MOE_E4M3_HARDWARE 1
// Byte 0 = code of lo, byte 1 = code of hi, bytes 2-3 zero. NaN codes as the hardware gives them.
__device__ __forceinline__ uint32_t e4m3x2_hw(float lo, float hi) {
  uint16_t r;
  asm("cvt.rn.satfinite.e4m3x2.f32 %0, %1, %2;" : "=h"(r) : "f"(hi), "f"(lo));
  return r;
}
// Every byte S.1111.111 (a NaN code) becomes 0x7F; other bytes are unchanged. Bit 7 of a byte of
// (w & 0x7F7F7F7F) + 0x01010101 is set exactly when its low 7 bits are all ones (no carry crosses
// a byte); that bit is cleared in w. 3 instructions for 4 codes.
__device__ __forceinline__ uint32_t e4m3_nan_to_7f(uint32_t w) {
  const uint32_t t = (w & 0x7F7F7F7Fu) + 0x01010101u;
  uint32_t r;
  asm("lop3.b32 %0, %1, %2, %3, 0x70;" : "=r"(r) : "r"(w), "n"(0x80808080u), "r"(t));  // w & ~(0x80808080 & t)
  return r;
}
#endif

FP8MOE_HD uint8_t e4m3_from_float(float x) {
#if defined(FP8MOE_E4M3_HARDWARE)
  return static_cast<uint8_t>(e4m3_nan_to_7f(e4m3x2_hw(x, 0.0f)));
#else
  return e4m3_from_float_soft(x);
#endif
}
// Four codes in one word, byte j = e4m3_from_float of the j-th argument.
FP8MOE_HD uint32_t e4m3x4_from_float(float x0, float x1, float x2, float x3) {
#if defined(FP8MOE_E4M3_HARDWARE)
  return e4m3_nan_to_7f(e4m3x2_hw(x0, x1) | (e4m3x2_hw(x2, x3) << 16));
#else
  return static_cast<uint32_t>(e4m3_from_float_soft(x0)) | (static_cast<uint32_t>(e4m3_from_float_soft(x1)) << 8) |
         (static_cast<uint32_t>(e4m3_from_float_soft(x2)) << 16) |
         (static_cast<uint32_t>(e4m3_from_float_soft(x3)) << 24);
#endif
}

FP8MOE_HD float float_from_e4m3(uint8_t c) {
  const uint32_t sign = static_cast<uint32_t>(c & 0x80u) << 24;
  const uint32_t exp = (c >> 3) & 0xFu;
  const uint32_t mant = c & 0x7u;
  if ((c & 0x7Fu) == 0x7Fu) return float_of(0x7FC00000u | sign);
  if (exp == 0) {  // m * 2^-9, exact in FP32
    return float_of(sign | bits_of(mul_rn(static_cast<float>(mant), 0.001953125f)));
  }
  return float_of(sign | ((exp - 7u + 127u) << 23) | (mant << 20));
}

// ---- UE8M0 (unsigned, 8 exponent bits, value 2^(b-127), 0xFF is NaN) --------------------------
FP8MOE_HD float float_from_ue8m0(uint8_t b) {
  if (b == 0xFFu) return float_of(0x7FC00000u);
  if (b == 0) return float_of(0x00400000u);  // 2^-127 is an FP32 subnormal
  return float_of(static_cast<uint32_t>(b) << 23);
}
// Smallest UE8M0 value >= s (ceil(log2 s) + 127, clamped to [0, 254]); s must be > 0 and finite.
FP8MOE_HD uint8_t ue8m0_ceil_from_float(float s) {
  const uint32_t u = bits_of(s) & 0x7FFFFFFFu;
  if (u >= 0x7F800000u) return 0xFFu;
  const uint32_t exp = u >> 23;
  const uint32_t mant = u & 0x7FFFFFu;
  if (exp == 0) return (mant <= 0x400000u) ? 0u : 1u;  // subnormal: <= 2^-127 -> 0, else 2^-126
  const uint32_t e = exp + (mant != 0u ? 1u : 0u);
  return static_cast<uint8_t>(e > 254u ? 254u : e);
}
// Smallest power of two >= s, for normal positive s (all scales are >= 1e-10).
FP8MOE_HD float pow2_ceil(float s) {
  const uint32_t u = bits_of(s);
  const uint32_t exp = u >> 23;
  const uint32_t mant = u & 0x7FFFFFu;
  return float_of((exp + (mant != 0u ? 1u : 0u)) << 23);
}

// ---- group quantization (SPEC section 2, step 1) ---------------------------------------------
constexpr float kScaleFloor = 1e-10f;

// Scale of a 128-element group from its amax (FP32): max(amax / 448, 1e-10), then optionally
// rounded up to a power of two.
FP8MOE_HD float group_scale(float amax, bool pow2) {
  float s = div_rn(amax, kE4M3Max);
  s = s > kScaleFloor ? s : kScaleFloor;
  return pow2 ? pow2_ceil(s) : s;
}
FP8MOE_HD uint8_t quantize_e4m3(float x, float scale) { return e4m3_from_float(div_rn(x, scale)); }

// ---- activations (SPEC section 1) -------------------------------------------------------------
// exp(x) from exactly rounded operations only: x = n ln 2 + r with n = round(x log2 e) and
// r = fma(-n, RN(ln 2), x) (|r| <= ln(2) / 2), e^r by a degree-5 polynomial fitted for relative
// error on that interval (minimax, 8.4e-8 before its coefficients' rounding; constant term exactly
// 1, so exp_f(0) = 1), then the product by 2^n. Against e^x over every float x in [-87, 87]
// (checked with long double when it was written): at most 5.1 ulp, at the ends, where the single
// reduction constant's error n (ln 2 - RN(ln 2)) is largest (2.4 ulp with a two-constant
// reduction; 0.94 for the degree-7 Taylor polynomial used before); sigmoid_f within 4.4e-7
// relative, far below the BF16 rounding that follows the activation. One FMA for the reduction
// and five for the polynomial instead of two and seven: act_quant and GEMM1's activation
// epilogue are bound by their instruction issue (perf notes v14, v34, v50). Not libm's expf: its
// point is to give the same bits on host and device.
// The steps exp_f shares with the kernels' exact fast path (kernels/common.cuh: sigmoid_fast), so
// that both run the same operations by construction.
constexpr float kLog2e = 1.44269504089f;    // RN(log2 e)
constexpr float kRoundMagic = 12582912.0f;  // 1.5 * 2^23: adding it rounds |v| < 2^22 to an integer
constexpr float kLn2 = 0.693147182f;        // RN(ln 2)
// e^r for |r| <= ln(2) / 2 (Horner, five FMAs).
FP8MOE_HD float exp_poly(float r) {
  float p = 0.00826306362f;
  p = fma_rn(p, r, 0.041892495f);
  p = fma_rn(p, r, 0.166679308f);
  p = fma_rn(p, r, 0.499991953f);
  p = fma_rn(p, r, 0.999999642f);
  return fma_rn(p, r, 1.0f);
}
FP8MOE_HD float exp_f(float x) {
  if (is_nan(x)) return x;
  if (x > 88.7f) return float_of(0x7F800000u);
  if (x < -103.5f) return 0.0f;
  const float n = add_rn(fma_rn(x, kLog2e, kRoundMagic), -kRoundMagic);  // round(x*log2 e)
  const float r = fma_rn(n, -kLn2, x);  // one rounding; ln 2's own rounding adds |n| 1.9e-9
  float p = exp_poly(r);
  const int ni = static_cast<int>(n);  // in [-150, 128]
  const int n1 = ni / 2, n2 = ni - n1;  // each half is a normal power of two
  p = mul_rn(p, float_of(static_cast<uint32_t>(n1 + 127) << 23));
  return mul_rn(p, float_of(static_cast<uint32_t>(n2 + 127) << 23));
}
FP8MOE_HD float sigmoid_f(float x) { return div_rn(1.0f, add_rn(1.0f, exp_f(-x))); }

enum class ActKind : int { kSilu = 0, kSwigluOai = 1 };
struct ActParams {
  ActKind kind = ActKind::kSilu;
  float alpha = 1.0f, beta = 0.0f, limit = 0.0f;  // swiglu_oai only
};

// a = act(g, u) in FP32 from the BF16 values g, u (already widened). Not yet rounded to BF16.
FP8MOE_HD float activation(float g, float u, const ActParams& p) {
  if (p.kind == ActKind::kSilu) return mul_rn(mul_rn(g, sigmoid_f(g)), u);
  g = min_f(g, p.limit);
  u = max_f(min_f(u, p.limit), -p.limit);
  return mul_rn(mul_rn(add_rn(u, p.beta), g), sigmoid_f(mul_rn(p.alpha, g)));
}

// One step of the unpermute reduction: acc += w * y, one rounding.
FP8MOE_HD float reduce_step(float acc, float w, float y) { return fma_rn(w, y, acc); }

}  // namespace fp8moe::num
