// Step 4 of SPEC section 2 (see act_quant.cuh).
//
// Persistent grid of 8-warp CTAs. A warp item is (row, chunk of 4 groups of 128 outputs); lane l
// loads 16 gate and 16 up values (four 16-byte loads), computes a = BF16(act(g, u)) for them
// (common.cuh: activate_lane_fast, an exact fast path of num::activation, with a per-lane fallback
// to num::activation itself, activate_lane_exact, for sigmoid arguments outside its range) and
// quantizes them with the other 7 lanes of its group (quantize_lane), then stores 16 FP8 codes (one
// 16-byte store) and its group's scale. Kernels are specialised on the activation and the scale
// format, so the hot loop has no format or activation branches.
// Each warp takes a contiguous range of items in row-major order (ranges differ by at most one
// item, so no warp is a tail), so it walks rows (and, in kLive, experts) forward: one division and
// one binary search per warp, not per item.
// Memory-level parallelism: the loads of item n + 1 are issued before item n is computed, so a
// warp always has its next 2 KB in flight while it computes (24 warps: ~48 KB per SM, what ~1 us of
// loaded HBM latency at ~30 GB/s per SM needs); the item's compute (~570 instructions per warp) is
// of the same order as its memory time, so the two must overlap.
// kLive: every CTA first turns ends[] into shared tables (warp 0, a shuffle scan 32 experts at a
// time): start_e and before_e = live rows of experts < e. Live row i (0 <= i < before_E) belongs to
// the last expert with before_e <= i and sits at row start_e + i - before_e.
#include "kernels/act_quant.cuh"

#include "kernels/common.cuh"

namespace fp8moe::kernels {
namespace {

using detail::kFullMask;
using detail::kWarp;

constexpr int kThreads = 256;
// 24 warps per SM: <= 80 registers. At 32 warps (64 registers) ptxas had to split a lane's four
// loads into 1 + 3 around the first compute (two memory latencies per item) and there is no room
// for the next item's 16 registers.
constexpr int kBlocksPerSm = 3;
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

// Expert of live row i (0 <= i < before[E]): the last expert e with before[e] <= i (it has live rows).
__device__ __forceinline__ int live_expert(int64_t i, const int32_t* before, int num_experts) {
  int lo = 1, hi = num_experts;  // the first e with before[e] > i is in [1, E] since before[E] > i
  while (lo < hi) {
    const int mid = (lo + hi) / 2;
    if (before[mid] > i) hi = mid;
    else lo = mid + 1;
  }
  return lo - 1;
}

// A lane's raw input of one item: 16 gate values and the 16 up values I columns further, as two
// 16-byte words each.
struct LaneInput {
  uint4 g0, g1, u0, u1;
};

// Issues the lane's four 16-byte loads of an item (`gate` = its first gate value); zeros, and no
// load, for a lane that is not `active`.
__device__ __forceinline__ LaneInput load_input(const uint16_t* gate, int64_t inter, bool active) {
  LaneInput in;
  in.g0 = in.g1 = in.u0 = in.u1 = make_uint4(0, 0, 0, 0);
  if (active) {
    in.g0 = detail::load_once_16(gate);
    in.g1 = detail::load_once_16(gate + 8);
    in.u0 = detail::load_once_16(gate + inter);
    in.u1 = detail::load_once_16(gate + inter + 8);
  }
  return in;
}

// The same values as BF16-pair words (lowest column in the low half of word 0).
__device__ __forceinline__ void unpack_input(const LaneInput& in, uint32_t (&gw)[8], uint32_t (&uw)[8]) {
  gw[0] = in.g0.x, gw[1] = in.g0.y, gw[2] = in.g0.z, gw[3] = in.g0.w;
  gw[4] = in.g1.x, gw[5] = in.g1.y, gw[6] = in.g1.z, gw[7] = in.g1.w;
  uw[0] = in.u0.x, uw[1] = in.u0.y, uw[2] = in.u0.z, uw[3] = in.u0.w;
  uw[4] = in.u1.x, uw[5] = in.u1.y, uw[6] = in.u1.z, uw[7] = in.u1.w;
}

// A warp's position in its item range: chunk `chunk` of row index i (kLive: the i-th live row,
// counted over all experts in order, which belongs to expert e), and the Y1 / A2 row it maps to.
struct ItemCursor {
  int64_t i;
  int chunk;
  int e;
  int64_t row;
};

// Row of the cursor's row index (kLive: start_e + i - before_e).
__device__ __forceinline__ int64_t cursor_row(const ItemCursor& c, bool live, const int32_t* before,
                                              const int32_t* start) {
  return live ? start[c.e] + (c.i - before[c.e]) : c.i;
}

// Moves the cursor to the next item (the caller knows there is one).
__device__ __forceinline__ void advance(ItemCursor& c, int chunks, bool live, const int32_t* before,
                                        const int32_t* start, int num_experts) {
  if (++c.chunk < chunks) return;
  c.chunk = 0;
  ++c.i;
  if (live) {
    while (c.e + 1 < num_experts && c.i >= before[c.e + 1]) ++c.e;
  }
  c.row = cursor_row(c, live, before, start);
}

template <num::ActKind kKind, layout::ScaleFormat kFmt>
__global__ void __launch_bounds__(kThreads, kBlocksPerSm) act_quant_kernel(const ActQuantParams p) {
  extern __shared__ int32_t smem[];  // kLive: before[E + 1], start[E]
  const int lane = threadIdx.x % kWarp;
  const int warps_per_block = blockDim.x / kWarp;
  const int64_t inter = p.intermediate;
  const int groups = static_cast<int>(layout::groups_of(inter));
  const int chunks = static_cast<int>(layout::ceil_div(groups, detail::kGroupsPerChunk));
  const int64_t m_cap = p.m_cap;
  const int64_t m_pad = layout::m_pad(m_cap);
  constexpr bool kPow2 = kFmt != layout::ScaleFormat::kFp32;
  constexpr bool kPacked = kFmt == layout::ScaleFormat::kUe8m0Packed;
  const bool live = p.schedule == RowSchedule::kLive;
  const int num_experts = p.num_experts;
  num::ActParams act = p.act;
  act.kind = kKind;  // lets the compiler drop the other activation
  const uint16_t* __restrict__ y1 = static_cast<const uint16_t*>(p.y1);

  int32_t* before = smem;
  int32_t* start = smem + num_experts + 1;
  int64_t rows = m_cap;
  if (live) {
    if (threadIdx.x < kWarp) live_tables(p.ends, num_experts, lane, before, start);
    __syncthreads();
    rows = before[num_experts];
  }

  // This warp's items [first, first + count): item = i * chunks + chunk, i the (live) row index.
  int64_t first = 0, count = 0;
  detail::balanced_range(rows * chunks, static_cast<int64_t>(gridDim.x) * warps_per_block,
                         static_cast<int64_t>(blockIdx.x) * warps_per_block + threadIdx.x / kWarp, &first, &count);
  if (count <= 0) return;
  ItemCursor cur;
  cur.i = first / chunks;
  cur.chunk = static_cast<int>(first - cur.i * chunks);
  cur.e = live ? live_expert(cur.i, before, num_experts) : 0;
  cur.row = cursor_row(cur, live, before, start);

  // Chunk c of a row covers columns [512 c, 512 c + 512); the lane's 16 are at 512 c + lane_col,
  // in group 4 c + lane / 8 (past the row's end, for the last chunk of a row of groups % 4 != 0,
  // the lane is inactive: no load, no store).
  const int lane_col = lane * detail::kValuesPerLane;
  const int lane_group = lane / detail::kLanesPerGroup;
  auto row_ok = [&](const ItemCursor& c) { return c.row >= 0 && c.row < m_cap; };  // warp-uniform
  auto lane_active = [&](const ItemCursor& c) { return c.chunk * detail::kGroupsPerChunk + lane_group < groups; };
  auto gate_ptr = [&](const ItemCursor& c) {
    return y1 + c.row * 2 * inter + c.chunk * layout::kGroup * detail::kGroupsPerChunk + lane_col;
  };

  // Software pipeline: `next` holds the loads of the item after `cur`, issued before `cur` is computed.
  LaneInput next = load_input(gate_ptr(cur), inter, row_ok(cur) && lane_active(cur));
  for (; count > 0; --count) {
    const ItemCursor item = cur;
    const LaneInput in = next;
    if (count > 1) {
      advance(cur, chunks, live, before, start, num_experts);
      next = load_input(gate_ptr(cur), inter, row_ok(cur) && lane_active(cur));
    }
    if (!row_ok(item)) continue;  // only with an inconsistent ends[]: nothing loaded, nothing stored

    const bool active = lane_active(item);
    uint32_t gw[8], uw[8], aw[8];
    unpack_input(in, gw, uw);
    if (!detail::activate_lane_fast<kKind>(gw, uw, act, aw)) {  // rare, divergent: reload, exact path
      unpack_input(load_input(gate_ptr(item), inter, active), gw, uw);
      detail::activate_lane_exact(gw, uw, act, aw);
    }
    uint4 codes;
    const float scale = detail::quantize_lane<kPow2>(aw, codes);
    const int col = item.chunk * layout::kGroup * detail::kGroupsPerChunk + lane_col;
    if (active) *reinterpret_cast<uint4*>(p.a2 + item.row * inter + col) = codes;
    if constexpr (kPacked) {
      const uint32_t word = detail::ue8m0_chunk_word(scale, active);
      if (lane == 0)
        static_cast<uint32_t*>(p.a2_scale)[layout::ue8m0_word_index(
            item.row, int64_t{item.chunk} * detail::kGroupsPerChunk, m_pad)] = word;
    } else {
      if (active && lane % detail::kLanesPerGroup == 0)
        static_cast<float*>(p.a2_scale)[layout::fp32_scale_index(
            item.row, int64_t{item.chunk} * detail::kGroupsPerChunk + lane_group, m_pad)] = scale;
    }
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
  switch (p.scale_format) {
    case layout::ScaleFormat::kFp32:
      act_quant_kernel<kKind, layout::ScaleFormat::kFp32><<<blocks, kThreads, smem, stream>>>(p);
      break;
    case layout::ScaleFormat::kFp32Pow2:
      act_quant_kernel<kKind, layout::ScaleFormat::kFp32Pow2><<<blocks, kThreads, smem, stream>>>(p);
      break;
    case layout::ScaleFormat::kUe8m0Packed:
      act_quant_kernel<kKind, layout::ScaleFormat::kUe8m0Packed><<<blocks, kThreads, smem, stream>>>(p);
      break;
    default:
      return cudaErrorInvalidValue;
  }
  return cudaGetLastError();
}

}  // namespace

cudaError_t launch_act_quant(const ActQuantParams& p, cudaStream_t stream) {
  if (p.m_cap < 0 || p.m_cap >= (int64_t{1} << 31) || p.intermediate <= 0 || p.intermediate % layout::kGroup != 0 ||
      p.intermediate >= (int64_t{1} << 30))  // column offsets are int32 inside the kernel
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
