// Pieces shared by the kernels around the GEMMs (permute.cu, act_quant.cu, unpermute.cu): launch
// helpers, BF16 vector unpacking, and the warp-level group quantizer that writes FP8 rows and their
// scales in the layouts of SPEC section 3. All rounding goes through src/numerics/numerics.cuh or
// is proven (and tested, tests/gpu/test_conversions.cu) to give the same bits as it.
//
// Quantization work unit ("chunk"): one warp quantizes 4 groups of 128 values of one row. Lane l
// owns the 16 consecutive values [16 * (l % 8), 16 * (l % 8) + 16) of group 4 * chunk + l / 8, so
// each group is held by 8 consecutive lanes, every load and store is 16 bytes (or two), and the 4
// groups of one chunk are exactly the 4 groups packed into one ue8m0 scale word.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "layout/layout.cuh"
#include "numerics/numerics.cuh"

// Returns the error of a CUDA runtime call from the enclosing function (which returns cudaError_t).
#define FP8MOE_KERNEL_TRY(expr)            \
  do {                                     \
    const cudaError_t err_ = (expr);       \
    if (err_ != cudaSuccess) return err_;  \
  } while (0)

namespace fp8moe::kernels::detail {

constexpr unsigned kFullMask = 0xFFFFFFFFu;
constexpr int kWarp = 32;
constexpr int kValuesPerLane = 16;                             // two 16-byte BF16 loads
constexpr int kLanesPerGroup = layout::kGroup / kValuesPerLane;  // 8
constexpr int kGroupsPerChunk = kWarp / kLanesPerGroup;          // 4 = groups of one ue8m0 word
static_assert(kGroupsPerChunk == 4, "a chunk must match one packed ue8m0 word");

// Live token count: *num_tokens clamped to [0, tokens], or all tokens without the scalar.
__device__ __forceinline__ int64_t live_tokens(const int32_t* num_tokens, int64_t tokens) {
  if (num_tokens == nullptr) return tokens;
  const int64_t n = *num_tokens;
  return n < 0 ? 0 : (n > tokens ? tokens : n);
}

// ---- BF16 vectors ------------------------------------------------------------------------------
// Eight BF16 values (one 16-byte word, lowest address first) widened to FP32.
__device__ __forceinline__ void unpack_bf16x8(const uint4& v, float* x) {
  const uint32_t w[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    x[2 * i] = num::float_from_bf16_bits(static_cast<uint16_t>(w[i] & 0xFFFFu));
    x[2 * i + 1] = num::float_from_bf16_bits(static_cast<uint16_t>(w[i] >> 16));
  }
}
// Eight FP32 values rounded to BF16 and packed into one 16-byte word.
__device__ __forceinline__ uint4 pack_bf16x8(const float* x) {
  uint32_t w[4];
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    w[i] = static_cast<uint32_t>(num::bf16_bits_from_float(x[2 * i])) |
           (static_cast<uint32_t>(num::bf16_bits_from_float(x[2 * i + 1])) << 16);
  }
  return make_uint4(w[0], w[1], w[2], w[3]);
}

// ---- warp-level group quantization ------------------------------------------------------------
// Where a lane's 16 values sit inside a row, for chunk `chunk` of a row with `groups` groups.
struct LaneSlice {
  int group;    // group index along the row
  int col;      // first of the lane's 16 columns (rows are shorter than 2^30 values: launchers check)
  bool active;  // false for lanes whose group is past the end of the row (last chunk only)
};
__device__ __forceinline__ LaneSlice lane_slice(int chunk, int groups, int lane) {
  LaneSlice s;
  s.group = chunk * kGroupsPerChunk + lane / kLanesPerGroup;
  s.col = s.group * layout::kGroup + (lane % kLanesPerGroup) * kValuesPerLane;
  s.active = s.group < groups;
  return s;
}

// ---- BF16 pairs (a 32-bit word holds two BF16 values, the lower column in the low half) -------
__device__ __forceinline__ float bf16_lo(uint32_t w) { return __uint_as_float(w << 16); }
__device__ __forceinline__ float bf16_hi(uint32_t w) { return __uint_as_float(w & 0xFFFF0000u); }

// Two FP32 values rounded to BF16 (nearest even) by the hardware (cvt.rn.bf16x2.f32), `lo` in the
// low half. Equal to num::bf16_bits_from_float for every non-NaN input (tests/gpu/test_conversions.cu
// sweeps all 2^32); a NaN gives a NaN, but not necessarily num's (sign and payload). Only for values
// whose NaN bits are never observed: in act_quant a NaN is skipped by the group amax and becomes
// the E4M3 code 0x7F whatever its bits.
__device__ __forceinline__ uint32_t bf16x2_rn_any_nan(float lo, float hi) {
  uint32_t r;
  asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
  return r;
}

// max |x| over the 16 BF16 values of `w` with NaNs skipped, 0 if all are NaN: the amax num's
// reference computes (max_f over abs_f, from 0), for this lane's share of a group. The bf16x2
// max / min are IEEE maxNum / minNum (a NaN operand yields the other operand), the largest
// magnitude is that of the max or of the min, and BF16 -> FP32 is exact. About 0.6 instructions
// per value (three-input VHMNMX on sm_90). Should the bf16x2 min / max flush BF16 subnormals, only
// an amax below 2^-126 could change, and every amax below 448e-10 gives the same scale (the floor).
__device__ __forceinline__ __nv_bfloat162 lane_absmax_bf16x2(const uint32_t (&w)[8]) {
  __nv_bfloat162 mx = *reinterpret_cast<const __nv_bfloat162*>(&w[0]), mn = mx;
#pragma unroll
  for (int k = 1; k < 8; ++k) {
    const __nv_bfloat162 v = *reinterpret_cast<const __nv_bfloat162*>(&w[k]);
    mx = __hmax2(mx, v);
    mn = __hmin2(mn, v);
  }
  return __hmax2(mx, __hneg2(mn));  // per half: max(max x, -min x) = max |x| (NaN if all were NaN)
}
__device__ __forceinline__ float lane_amax_bf16x16(const uint32_t (&w)[8]) {
  const __nv_bfloat162 m = lane_absmax_bf16x2(w);
  const uint32_t u = *reinterpret_cast<const uint32_t*>(&m);
  // fmaxf skips NaN; |.| and the 0 make an all-NaN or all-zero lane give +0.
  return fmaxf(fmaxf(fabsf(bf16_lo(u)), fabsf(bf16_hi(u))), 0.0f);
}

// RN(1/d), as __frcp_rn(d) (== __fdiv_rn(1, d) == num::div_rn(1, d)) computes it, for d whose
// exponent field is 1..252 (|d| in [2^-126, 2^126)): that function's fast path, MUFU.RCP y0, then
// y0 + y0 * RN(1 - d * y0), the same on sm_90 and sm_100. (__frcp_rn writes the middle term as
// -RN(d * y0 - 1) with an FTZ negation: the same value, as round to nearest is symmetric and
// d * y0 - 1 is 0 or a multiple of 2^-47, never subnormal.) Other d: the caller's business.
__device__ __forceinline__ float rcp_rn_fast(float d) {
  float y0;
  asm("rcp.approx.ftz.f32 %0, %1;" : "=f"(y0) : "f"(d));
  return __fmaf_rn(y0, __fmaf_rn(-d, y0, 1.0f), y0);
}

// num::group_scale(amax, pow2) for a BF16 amax >= 0 (finite or +inf), without a division:
// amax / 448 as RN(amax * RN(1/448)) with one correction, r = fma(448, q, -amax),
// q' = fma(-r, RN(1/448), q), equals div_rn(amax, 448) for every such amax but +inf (checked for
// all 32641 of them: on the CPU when this was written, and in tests/gpu/test_conversions.cu);
// +inf is selected through. The floor and the power-of-two rounding are num's.
__device__ __forceinline__ float group_scale_bf16(float amax, bool pow2) {
  constexpr float kInv448 = 1.0f / num::kE4M3Max;  // RN(1/448), folded by the compiler
  const float q = __fmul_rn(amax, kInv448);
  const float r = __fmaf_rn(num::kE4M3Max, q, -amax);
  float s = amax < __uint_as_float(0x7F800000u) ? __fmaf_rn(-r, kInv448, q) : amax;
  s = s > num::kScaleFloor ? s : num::kScaleFloor;
  return pow2 ? num::pow2_ceil(s) : s;
}

// num::div_rn(x, s) for the values x of a group, without a division per value. Domain: x is
// BF16-representable (or NaN), |x| <= amax, s = num::group_scale(amax, kPow2), amax a BF16 value
// >= 0 (finite or +inf). Those are exactly the values quantize_lane sees.
//  kPow2: s = 2^k with -33 <= k <= 120 (amax < 2^128), or +inf when amax is. y = 1/s = 2^-k is
//    exact, and x * 2^-k and x / 2^k are the roundings of one real number, so they are the same
//    float (subnormal or not). For s = inf, y = 0: x * 0 is +-0 with the sign of x = x / inf for
//    finite x, and NaN for x = +-inf (as inf / inf).
//  fp32: y = RN(1/s) (s in [1e-10, 2^120): rcp_rn_fast applies), q = RN(x * y),
//    r = fma(s, q, -x) (the remainder, exact unless it underflows), q' = fma(-r, y, q) (one
//    Markstein correction). For s = inf, y = 0 and s is replaced by 0: q' = q = x * 0 as above.
//    The E4M3 code of q' equals that of x / s on the whole domain; checked exhaustively (every
//    amax, every |x| <= amax, both signs: 2.1e9 pairs, on the CPU when this was written, and in
//    tests/gpu/test_conversions.cu). q' itself equals x / s except for tiny x whose remainder
//    underflows; those quotients are below 2^-80, code 0 (0x80) either way. Signed zeros: x = -0
//    gives q = -0, r = +0, q' = -0 * y + -0 = -0 (hence fma(-r, y, q), not fma(r', y, q) with
//    r' = fma(-s, q, x), which would give +0).
template <bool kPow2>
struct GroupDivider {
  float y;  // 1 / s (exact for kPow2; RN(1/s) otherwise), 0 for s = inf
  float s;  // s, or 0 for s = inf (fp32 only)
  __device__ __forceinline__ explicit GroupDivider(float scale) {
    const uint32_t bits = __float_as_uint(scale);
    const bool inf = bits >= 0x7F800000u;
    if constexpr (kPow2) {
      y = inf ? 0.0f : __uint_as_float(0x7F000000u - bits);  // 2^-k from 2^k
      s = scale;
    } else {
      y = inf ? 0.0f : rcp_rn_fast(scale);
      s = inf ? 0.0f : scale;
    }
  }
  __device__ __forceinline__ float operator()(float x) const {
    const float q = __fmul_rn(x, y);
    if constexpr (kPow2) {
      return q;
    } else {
      const float r = __fmaf_rn(s, q, -x);
      return __fmaf_rn(-r, y, q);
    }
  }
};

// Quantizes one lane's 16 values, given as 8 words of BF16 pairs (lowest column in the low half of
// w[0]): FP32 amax over the 128 values of the lane's group (the 8 lanes of the group exchange
// maxima), num::group_scale (as group_scale_bf16), then num::quantize_e4m3 of every value
// (GroupDivider for the division, the hardware E4M3 conversion four values at a time). Returns the
// group scale and the 16 codes in `codes` (lowest column in the lowest byte). All 32 lanes must
// call it; inactive lanes pass zeros and their results are not used.
template <bool kPow2>
__device__ __forceinline__ float quantize_lane(const uint32_t (&w)[8], uint4& codes) {
  float amax = lane_amax_bf16x16(w);
#pragma unroll
  for (int offset = kLanesPerGroup / 2; offset > 0; offset /= 2)
    amax = fmaxf(amax, __shfl_xor_sync(kFullMask, amax, offset));  // no NaN here: fmaxf == num::max_f
  const float scale = group_scale_bf16(amax, kPow2);
  const GroupDivider<kPow2> div(scale);
  uint32_t c[4];
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    c[i] = num::e4m3x4_from_float(div(bf16_lo(w[2 * i])), div(bf16_hi(w[2 * i])), div(bf16_lo(w[2 * i + 1])),
                                  div(bf16_hi(w[2 * i + 1])));
  }
  codes = make_uint4(c[0], c[1], c[2], c[3]);
  return scale;
}

// ---- activation fast path -----------------------------------------------------------------------
// num::sigmoid_f(x) = div_rn(1, add_rn(1, exp_f(-x))) without exp_f's special cases and without
// the division's slow path. `n` receives round(-x * log2 e) (NaN for a NaN x). The result is
// num::sigmoid_f(x), bit for bit, whenever |n| <= 125 (callers check it and fall back to num::):
//  - |n| <= 125 puts -x inside (-87, 87), where exp_f takes its polynomial path: the same
//    operations (num::kLog2e, kRoundMagic, kLn2, exp_poly) give the same n, r and p. exp_f then
//    scales p by 2^n1 and 2^n2 (n1 + n2 = n); with p in [0.70, 1.42] and the result normal and
//    finite, both products are exact, so one product by 2^n (a normal power of two:
//    ((n + 127) << 23), taken from the bits of t = 1.5 * 2^23 + n, whose low 9 bits are those of
//    n) is the same value.
//    Since that product is exact, fma(p, 2^n, 1) is add_rn(1, e) in one operation.
//  - d = 1 + e lies in [1, 2^126), where rcp_rn_fast(d) is RN(1/d) = num::div_rn(1, d).
// Checked on every float x in tests/gpu/test_conversions.cu. A NaN x gives a NaN (other payload).
__device__ __forceinline__ float sigmoid_fast(float x, float& n) {
  const float t = __fmaf_rn(-x, num::kLog2e, num::kRoundMagic);
  n = __fadd_rn(t, -num::kRoundMagic);
  const float p = num::exp_poly(__fmaf_rn(n, -num::kLn2, -x));
  // d = 1 + e with e = p * 2^n exact: one fma, fma(p, 2^n, 1) = RN(p * 2^n + 1) = RN(1 + e).
  const float d = __fmaf_rn(p, __uint_as_float((__float_as_uint(t) << 23) + 0x3F800000u), 1.0f);
  return rcp_rn_fast(d);
}
constexpr float kSigmoidFastMaxN = 125.0f;

// num::activation for one value through sigmoid_fast: the same operations in the same order.
// swiglu_oai: `nmax` accumulates max |n| of its sigmoid arguments (NaN skipped).
template <num::ActKind kKind>
__device__ __forceinline__ float activation_fast(float g, float u, const num::ActParams& p, float& nmax) {
  float n;
  if constexpr (kKind == num::ActKind::kSilu) {
    return __fmul_rn(__fmul_rn(g, sigmoid_fast(g, n)), u);
  } else {
    g = num::min_f(g, p.limit);
    u = num::max_f(num::min_f(u, p.limit), -p.limit);
    const float s = sigmoid_fast(__fmul_rn(p.alpha, g), n);
    nmax = fmaxf(nmax, fabsf(n));
    return __fmul_rn(__fmul_rn(__fadd_rn(u, p.beta), g), s);
  }
}
// Largest |g| for which silu's sigmoid argument is in sigmoid_fast's range: |g| <= 86 gives
// |n| <= round(86 * log2 e) = 124.
constexpr float kSiluFastMaxAbsGate = 86.0f;

// a = BF16(num::activation(g, u)) for a lane's 16 (gate, up) pairs, all as BF16-pair words, through
// activation_fast. Returns false if some sigmoid argument is outside sigmoid_fast's range (silu:
// some |g| > 86, checked on the BF16 words; swiglu_oai: some |n| > 125; a NaN is inside either
// way, as it propagates to a NaN activation like num's): then `aw` is not valid and the caller must
// use activate_lane_exact. Lets gw and uw die as it goes (the caller reloads them for the fallback).
template <num::ActKind kKind>
__device__ __forceinline__ bool activate_lane_fast(const uint32_t (&gw)[8], const uint32_t (&uw)[8],
                                                   const num::ActParams& p, uint32_t (&aw)[8]) {
  float nmax = 0.0f;
#pragma unroll
  for (int k = 0; k < 8; ++k) {
    const float lo = activation_fast<kKind>(bf16_lo(gw[k]), bf16_lo(uw[k]), p, nmax);
    const float hi = activation_fast<kKind>(bf16_hi(gw[k]), bf16_hi(uw[k]), p, nmax);
    aw[k] = bf16x2_rn_any_nan(lo, hi);
  }
  if constexpr (kKind == num::ActKind::kSilu) {
    // both halves of max |g| <= 86 (false for a half that is NaN: all 8 of its values NaN)
    return __hble2(lane_absmax_bf16x2(gw), __float2bfloat162_rn(kSiluFastMaxAbsGate));
  } else {
    return nmax <= kSigmoidFastMaxN;
  }
}
// The same with num::activation itself (any input).
__device__ __forceinline__ void activate_lane_exact(const uint32_t (&gw)[8], const uint32_t (&uw)[8],
                                                    const num::ActParams& p, uint32_t (&aw)[8]) {
#pragma unroll
  for (int k = 0; k < 8; ++k) {
    aw[k] = bf16x2_rn_any_nan(num::activation(bf16_lo(gw[k]), bf16_lo(uw[k]), p),
                              num::activation(bf16_hi(gw[k]), bf16_hi(uw[k]), p));
  }
}

// SPEC section 2's step 4 for a lane's 16 (gate, up) pairs, as act_quant and GEMM1's activation
// epilogue both run it: activate_lane_fast, or where it declines (rare, divergent) `reload(gw, uw)`
// and activate_lane_exact, then quantize_lane with the lane's group. Returns the group scale and
// the 16 codes in `codes`. All 32 lanes must call it (quantize_lane shuffles).
template <num::ActKind kKind, bool kPow2, typename Reload>
__device__ __forceinline__ float activate_quantize_lane(uint32_t (&gw)[8], uint32_t (&uw)[8], const num::ActParams& p,
                                                        Reload&& reload, uint4& codes) {
  uint32_t aw[8];
  if (!activate_lane_fast<kKind>(gw, uw, p, aw)) {
    reload(gw, uw);
    activate_lane_exact(gw, uw, p, aw);
  }
  return quantize_lane<kPow2>(aw, codes);
}

// The packed ue8m0 word of a chunk: byte j = biased exponent of group 4 * chunk + j (held by lane
// 8 * j), 0 for groups past the end of the row. All 32 lanes must call it; every lane gets the word.
__device__ __forceinline__ uint32_t ue8m0_chunk_word(float scale, bool active) {
  const uint32_t byte = active ? static_cast<uint32_t>(num::ue8m0_ceil_from_float(scale)) : 0u;
  uint32_t word = 0;
#pragma unroll
  for (int j = 0; j < kGroupsPerChunk; ++j)
    word |= __shfl_sync(kFullMask, byte, j * kLanesPerGroup) << (8 * j);
  return word;
}

// Stores a chunk's result for one destination row: the lane's 16 codes into the FP8 row and the
// group scales into the MN-major scale buffer. `word` is ue8m0_chunk_word (used by that format only).
__device__ __forceinline__ void store_chunk(uint8_t* row_ptr, void* scale_buf, layout::ScaleFormat fmt,
                                            int64_t m_pad, int64_t row, int64_t chunk, const LaneSlice& s,
                                            int lane, const uint4& codes, float scale, uint32_t word) {
  if (s.active) *reinterpret_cast<uint4*>(row_ptr + s.col) = codes;
  if (fmt == layout::ScaleFormat::kUe8m0Packed) {
    if (lane == 0)
      static_cast<uint32_t*>(scale_buf)[layout::ue8m0_word_index(row, chunk * kGroupsPerChunk, m_pad)] = word;
  } else if (s.active && lane % kLanesPerGroup == 0) {
    static_cast<float*>(scale_buf)[layout::fp32_scale_index(row, s.group, m_pad)] = scale;
  }
}

// ---- launch helpers ----------------------------------------------------------------------------
// Blocks of a persistent grid: `per_sm` resident blocks on every SM (the kernel's
// __launch_bounds__ minimum, so they are sure to fit), but no more than `needed` (at least one).
// Only device-attribute queries, so it is legal during stream capture in any mode.
inline cudaError_t persistent_blocks(int per_sm, int64_t needed, int* blocks) {
  int device = 0, sms = 0;
  FP8MOE_KERNEL_TRY(cudaGetDevice(&device));
  FP8MOE_KERNEL_TRY(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
  int64_t n = static_cast<int64_t>(sms) * per_sm;
  if (needed < n) n = needed;
  *blocks = static_cast<int>(n < 1 ? 1 : n);
  return cudaSuccess;
}

// Timeline builds (investigation only): copies a __device__ trace array to `host`, or with a null
// `host` zeroes it. Synchronous (the caller reads the results of finished launches).
template <typename T, size_t N>
cudaError_t read_or_clear_trace(const T (&trace)[N], T* host) {
  if (host != nullptr) return cudaMemcpyFromSymbol(host, trace, sizeof(trace));
  void* device = nullptr;
  FP8MOE_KERNEL_TRY(cudaGetSymbolAddress(&device, trace));
  return cudaMemset(device, 0, sizeof(trace));
}

}  // namespace fp8moe::kernels::detail
