// Step 4 of SPEC section 2 (see act_quant.cuh).
//
// Persistent grid of 8-warp CTAs. A warp item is (row, chunk of 4 groups of 128 outputs); lane l
// loads 16 gate and 16 up values (four 16-byte loads), computes a = BF16(act(g, u)) for them and
// quantizes them with the other 7 lanes of its group (common.cuh), then stores 16 FP8 codes
// (one 16-byte store) and its group's scale.
// kLive: every CTA first turns ends[] into shared tables (warp 0, a shuffle scan 32 experts at a
// time): start_e and before_e = live rows of experts < e. Live row i (0 <= i < before_E) belongs to
// the last expert with before_e <= i (binary search) and sits at row start_e + i - before_e.
#include "kernels/act_quant.cuh"

#include "kernels/common.cuh"

namespace fp8moe::kernels {
namespace {

using detail::kFullMask;
using detail::kWarp;

constexpr int kThreads = 256;
constexpr int kBlocksPerSm = 4;  // 32 warps per SM: <= 64 registers
constexpr int kMaxLiveExperts = 6000;  // (2E + 1) int32 tables in 48 KB of shared memory

// Fills before[0..E] and start[0..E) from ends[] (warp 0 only; the caller synchronizes).
__device__ void live_tables(const int32_t* __restrict__ ends, int num_experts, int lane, int32_t* before,
                            int32_t* start) {
  int carry = 0;
  for (int e0 = 0; e0 < num_experts; e0 += kWarp) {
    const int e = e0 + lane;
    int first = 0, n = 0;
    if (e < num_experts) {
      first = e == 0 ? 0 : static_cast<int>(layout::round_up(__ldg(ends + e - 1), layout::kTileM));
      n = max(__ldg(ends + e) - first, 0);
    }
    int inclusive = n;
#pragma unroll
    for (int offset = 1; offset < kWarp; offset *= 2) {
      const int v = __shfl_up_sync(kFullMask, inclusive, offset);
      if (lane >= offset) inclusive += v;
    }
    if (e < num_experts) {
      before[e] = carry + inclusive - n;
      start[e] = first;
    }
    carry += __shfl_sync(kFullMask, inclusive, kWarp - 1);
  }
  if (lane == 0) before[num_experts] = carry;
}

// Row of live row i: the last expert e with before[e] <= i (it has live rows) holds it.
__device__ __forceinline__ int64_t live_row(int64_t i, const int32_t* before, const int32_t* start,
                                            int num_experts) {
  int lo = 1, hi = num_experts;  // the first e with before[e] > i is in [1, E] since before[E] > i
  while (lo < hi) {
    const int mid = (lo + hi) / 2;
    if (before[mid] > i) hi = mid;
    else lo = mid + 1;
  }
  const int e = lo - 1;
  return start[e] + (i - before[e]);
}

template <num::ActKind kKind>
__global__ void __launch_bounds__(kThreads, kBlocksPerSm) act_quant_kernel(const ActQuantParams p) {
  extern __shared__ int32_t smem[];  // kLive: before[E + 1], start[E]
  const int lane = threadIdx.x % kWarp;
  const int warps_per_block = blockDim.x / kWarp;
  const int64_t inter = p.intermediate;
  const int64_t groups = layout::groups_of(inter);
  const int64_t chunks = layout::ceil_div(groups, detail::kGroupsPerChunk);
  const int64_t m_cap = p.m_cap;
  const int64_t m_pad = layout::m_pad(m_cap);
  const bool pow2 = layout::is_pow2_format(p.scale_format);
  const bool packed = p.scale_format == layout::ScaleFormat::kUe8m0Packed;
  const bool live = p.schedule == RowSchedule::kLive;
  num::ActParams act = p.act;
  act.kind = kKind;  // lets the compiler drop the other activation
  const uint16_t* __restrict__ y1 = static_cast<const uint16_t*>(p.y1);

  int32_t* before = smem;
  int32_t* start = smem + p.num_experts + 1;
  int64_t rows = m_cap;
  if (live) {
    if (threadIdx.x < kWarp) live_tables(p.ends, p.num_experts, lane, before, start);
    __syncthreads();
    rows = before[p.num_experts];
  }

  const int64_t items = rows * chunks;
  for (int64_t item = static_cast<int64_t>(blockIdx.x) * warps_per_block + threadIdx.x / kWarp; item < items;
       item += static_cast<int64_t>(gridDim.x) * warps_per_block) {
    const int64_t i = item / chunks;
    const int64_t chunk = item % chunks;
    const int64_t row = live ? live_row(i, before, start, p.num_experts) : i;
    if (row < 0 || row >= m_cap) continue;  // only with an inconsistent ends[]; warp-uniform
    const detail::LaneSlice slice = detail::lane_slice(chunk, groups, lane);
    float a[detail::kValuesPerLane] = {};
    if (slice.active) {
      const uint4* gate = reinterpret_cast<const uint4*>(y1 + row * 2 * inter + slice.col);
      const uint4* up = reinterpret_cast<const uint4*>(y1 + row * 2 * inter + inter + slice.col);
      const uint4 g0 = __ldg(gate), g1 = __ldg(gate + 1), u0 = __ldg(up), u1 = __ldg(up + 1);
      float g[detail::kValuesPerLane], u[detail::kValuesPerLane];
      detail::unpack_bf16x8(g0, g);
      detail::unpack_bf16x8(g1, g + 8);
      detail::unpack_bf16x8(u0, u);
      detail::unpack_bf16x8(u1, u + 8);
#pragma unroll
      for (int v = 0; v < detail::kValuesPerLane; ++v) a[v] = num::round_to_bf16(num::activation(g[v], u[v], act));
    }
    uint4 codes;
    const float scale = detail::quantize_lane(a, pow2, codes);
    const uint32_t word = packed ? detail::ue8m0_chunk_word(scale, slice.active) : 0u;
    detail::store_chunk(p.a2 + row * inter, p.a2_scale, p.scale_format, m_pad, row, chunk, slice, lane, codes,
                        scale, word);
  }
}

template <num::ActKind kKind>
cudaError_t launch(const ActQuantParams& p, cudaStream_t stream) {
  const bool live = p.schedule == RowSchedule::kLive;
  const size_t smem = live ? (2 * static_cast<size_t>(p.num_experts) + 1) * sizeof(int32_t) : 0;
  int64_t max_rows = p.m_cap;
  if (live && p.max_live_rows > 0 && p.max_live_rows < max_rows) max_rows = p.max_live_rows;
  const int64_t chunks = layout::ceil_div(layout::groups_of(p.intermediate), detail::kGroupsPerChunk);
  int blocks = 0;
  const int64_t needed = layout::ceil_div(max_rows * chunks, kThreads / kWarp);
  FP8MOE_KERNEL_TRY(detail::persistent_blocks(kBlocksPerSm, needed, &blocks));
  act_quant_kernel<kKind><<<blocks, kThreads, smem, stream>>>(p);
  return cudaGetLastError();
}

}  // namespace

cudaError_t launch_act_quant(const ActQuantParams& p, cudaStream_t stream) {
  if (p.m_cap < 0 || p.m_cap >= (int64_t{1} << 31) || p.intermediate <= 0 || p.intermediate % layout::kGroup != 0)
    return cudaErrorInvalidValue;
  if (p.schedule != RowSchedule::kLive && p.schedule != RowSchedule::kPadded) return cudaErrorInvalidValue;
  if (p.schedule == RowSchedule::kLive &&
      (p.num_experts < 1 || p.num_experts > kMaxLiveExperts || p.ends == nullptr))
    return cudaErrorInvalidValue;
  if (p.m_cap == 0) return cudaSuccess;  // no rows
  if (p.y1 == nullptr || p.a2 == nullptr || p.a2_scale == nullptr) return cudaErrorInvalidValue;
  switch (p.act.kind) {
    case num::ActKind::kSilu: return launch<num::ActKind::kSilu>(p, stream);
    case num::ActKind::kSwigluOai: return launch<num::ActKind::kSwigluOai>(p, stream);
  }
  return cudaErrorInvalidValue;
}

}  // namespace fp8moe::kernels
