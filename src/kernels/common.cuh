// Pieces shared by the kernels around the GEMMs (permute.cu, act_quant.cu, unpermute.cu): launch
// helpers, BF16 vector unpacking, and the warp-level group quantizer that writes FP8 rows and their
// scales in the layouts of SPEC section 3. All rounding goes through src/numerics/numerics.cuh.
//
// Quantization work unit ("chunk"): one warp quantizes 4 groups of 128 values of one row. Lane l
// owns the 16 consecutive values [16 * (l % 8), 16 * (l % 8) + 16) of group 4 * chunk + l / 8, so
// each group is held by 8 consecutive lanes, every load and store is 16 bytes (or two), and the 4
// groups of one chunk are exactly the 4 groups packed into one ue8m0 scale word.
#pragma once

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
  int64_t group;  // group index along the row
  int64_t col;    // first of the lane's 16 columns
  bool active;    // false for lanes whose group is past the end of the row (last chunk only)
};
__device__ __forceinline__ LaneSlice lane_slice(int64_t chunk, int64_t groups, int lane) {
  LaneSlice s;
  s.group = chunk * kGroupsPerChunk + lane / kLanesPerGroup;
  s.col = s.group * layout::kGroup + (lane % kLanesPerGroup) * kValuesPerLane;
  s.active = s.group < groups;
  return s;
}

// Quantizes one lane's 16 values: FP32 amax over the 128 values of the lane's group (the 8 lanes
// of the group exchange maxima), num::group_scale, num::quantize_e4m3. Returns the group scale and
// the 16 codes in `codes` (lowest column in the lowest byte). All 32 lanes must call it; inactive
// lanes pass zeros and their results are not used.
__device__ __forceinline__ float quantize_lane(const float* x, bool pow2, uint4& codes) {
  float amax = 0.0f;
#pragma unroll
  for (int i = 0; i < kValuesPerLane; ++i) amax = num::max_f(amax, num::abs_f(x[i]));
#pragma unroll
  for (int offset = kLanesPerGroup / 2; offset > 0; offset /= 2)
    amax = num::max_f(amax, __shfl_xor_sync(kFullMask, amax, offset));
  const float scale = num::group_scale(amax, pow2);
  uint32_t w[4];
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    w[i] = 0;
#pragma unroll
    for (int b = 0; b < 4; ++b)
      w[i] |= static_cast<uint32_t>(num::quantize_e4m3(x[4 * i + b], scale)) << (8 * b);
  }
  codes = make_uint4(w[0], w[1], w[2], w[3]);
  return scale;
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

}  // namespace fp8moe::kernels::detail
