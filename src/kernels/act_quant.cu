// Step 4 of SPEC section 2 (see act_quant.cuh).
//
// Persistent grid of 8-warp CTAs. A warp item is 4 consecutive groups of 128 outputs in the walk
// over (row, group) in row-major order; the 8 lanes of item group j take its j-th group: lane l
// loads 16 gate and 16 up values (four 16-byte loads), computes a = BF16(act(g, u)) for them
// (common.cuh: activate_lane_fast, an exact fast path of num::activation, with a per-lane fallback
// to num::activation itself, activate_lane_exact, for sigmoid arguments outside its range) and
// quantizes them with the other 7 lanes of its group (quantize_lane; the two as activate_quantize_lane,
// which GEMM1's activation epilogue runs too), then stores 16 FP8 codes (one
// 16-byte store) and its group's scale. Where I / 128 is not a multiple of 4 an item spans two
// rows, so that no lane idles (Qwen3-30B, I = 768: 6 groups a row, a quarter of the lanes idled
// when an item was a row's 4-group chunk); the packed ue8m0 format keeps items within a row's
// scale words (walk_groups). Kernels are specialised on the activation and the scale format, so
// the hot loop has no format or activation branches.
// Each warp takes a contiguous range of items in row-major order, so it walks rows (and, in kLive,
// experts) forward: one division and one binary search per lane at its start, not per item.
// kLive: every CTA first turns ends[] into shared tables (warp 0, a shuffle scan 32 experts at a
// time): start_e and before_e = live rows of experts < e. Live row i (0 <= i < before_E) belongs to
// the last expert with before_e <= i and sits at row start_e + i - before_e. Where no expert has a
// gap before it (start_e == before_e for all e: every expert but the last fills whole tiles), live
// row i is row i, and the kernel walks rows [0, before_E) exactly as the padded schedule walks
// [0, m_cap), without the per-row expert bookkeeping.
// Unlike the other kernels, act_quant lets the next kernel (GEMM2) start before its own wait for
// GEMM1, and its CTAs without items exit without waiting (kernels/launch.cuh, perf notes v29).
#include "kernels/act_quant.cuh"

#include "kernels/common.cuh"
#include "kernels/launch.cuh"

namespace fp8moe::kernels {
namespace {

using detail::kFullMask;
using detail::kWarp;

constexpr int kThreads = 256;
constexpr int kBlocksPerSm = 3;  // 24 warps per SM: <= 80 registers (two items in flight per warp)
constexpr int kMaxLiveExperts = 6000;  // (2E + 2) int32 tables in 48 KB of shared memory

// Turns the raw ends[] that the CTA staged in before[0..E) into the tables before[0..E] (live rows
// of the experts before e) and start[0..E) (first row of e), in place, and sets *dense to whether
// start[e] == before[e] for every e (live row i is row i). Warp 0 only; the caller synchronizes.
// Each lane reads only its own entry; the previous expert's end comes by shuffle.
__device__ void live_tables(int num_experts, int lane, int32_t* before, int32_t* start, int32_t* dense) {
  int carry = 0, prev_chunk_end = 0;
  bool gapless = true;
  for (int e0 = 0; e0 < num_experts; e0 += kWarp) {
    const int e = e0 + lane;
    const int end = e < num_experts ? before[e] : 0;
    int prev_end = __shfl_up_sync(kFullMask, end, 1);
    if (lane == 0) prev_end = prev_chunk_end;
    const int first = e == 0 ? 0 : static_cast<int>(layout::round_up(prev_end, layout::kTileM));
    const int n = e < num_experts ? max(end - first, 0) : 0;
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
    gapless = __all_sync(kFullMask, e >= num_experts || first == carry + inclusive - n) && gapless;
    carry += __shfl_sync(kFullMask, inclusive, kWarp - 1);
    prev_chunk_end = __shfl_sync(kFullMask, end, kWarp - 1);
  }
  if (lane == 0) {
    before[num_experts] = carry;
    *dense = gapless;
  }
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

// A lane's 16 gate values (from `gate`) and the 16 up values I columns further, as BF16-pair words;
// zeros for an inactive lane.
__device__ __forceinline__ void load_lane(const uint16_t* gate, int64_t inter, bool active, uint32_t (&gw)[8],
                                          uint32_t (&uw)[8]) {
  uint4 g0 = make_uint4(0, 0, 0, 0), g1 = g0, u0 = g0, u1 = g0;
  if (active) {
    const uint4* g = reinterpret_cast<const uint4*>(gate);
    const uint4* u = reinterpret_cast<const uint4*>(gate + inter);
    g0 = __ldg(g), g1 = __ldg(g + 1), u0 = __ldg(u), u1 = __ldg(u + 1);
  }
  gw[0] = g0.x, gw[1] = g0.y, gw[2] = g0.z, gw[3] = g0.w, gw[4] = g1.x, gw[5] = g1.y, gw[6] = g1.z, gw[7] = g1.w;
  uw[0] = u0.x, uw[1] = u0.y, uw[2] = u0.z, uw[3] = u0.w, uw[4] = u1.x, uw[5] = u1.y, uw[6] = u1.z, uw[7] = u1.w;
}

// Groups of 128 outputs per row in the kernel's walk: I / 128, or, for the packed ue8m0 format,
// that rounded up to whole scale words (the groups past a row's end are then inactive lanes), so
// that an item's four groups share one word.
__host__ __device__ __forceinline__ int walk_groups(int64_t inter, layout::ScaleFormat fmt) {
  const int64_t groups = layout::groups_of(inter);
  return static_cast<int>(fmt == layout::ScaleFormat::kUe8m0Packed ? layout::round_up(groups, detail::kGroupsPerChunk)
                                                                    : groups);
}

template <num::ActKind kKind, layout::ScaleFormat kFmt>
__global__ void __launch_bounds__(kThreads, kBlocksPerSm) act_quant_kernel(const ActQuantParams p) {
  extern __shared__ int32_t smem[];  // kLive: before[E + 1], start[E], the dense flag
  const int lane = threadIdx.x % kWarp;
  const int warps_per_block = blockDim.x / kWarp;
  const int64_t inter = p.intermediate;
  const int groups = static_cast<int>(layout::groups_of(inter));
  const int wgroups = walk_groups(inter, kFmt);
  const int64_t m_cap = p.m_cap;
  const int64_t m_pad = layout::m_pad(m_cap);
  constexpr bool kPow2 = kFmt != layout::ScaleFormat::kFp32;
  constexpr bool kPacked = kFmt == layout::ScaleFormat::kUe8m0Packed;
  bool live = p.schedule == layout::Schedule::kLive;  // (false below for a dense live layout)
  const int num_experts = p.num_experts;
  num::ActParams act = p.act;
  act.kind = kKind;  // lets the compiler drop the other activation
  const uint16_t* __restrict__ y1 = static_cast<const uint16_t*>(p.y1);

  int32_t* before = smem;
  int32_t* start = smem + num_experts + 1;
  int64_t rows = m_cap;
  if (live) {
    // One global round trip for all of ends[] (the whole CTA loads it), then the tables in shared
    // memory: this start-up is what the live schedule costs over the padded one. ends[] comes from
    // the permutation, several launches back, so this runs before the wait for GEMM1
    // (kernels/launch.cuh) and overlaps GEMM1's last tiles.
    for (int e = threadIdx.x; e < num_experts; e += blockDim.x) before[e] = __ldg(p.ends + e);
    __syncthreads();
    if (threadIdx.x < kWarp) live_tables(num_experts, lane, before, start, start + num_experts);
    __syncthreads();
    rows = before[num_experts];
    if (start[num_experts] != 0) live = false;  // dense: live row i is row i, as in the padded walk
  }
  // This warp's items [first, first + count): item k is groups 4k .. 4k + 3 of the walk over
  // (live row i, group g) in row-major order, wgroups groups per row.
  const int64_t items = layout::ceil_div(rows * wgroups, detail::kGroupsPerChunk);
  const int64_t warps = static_cast<int64_t>(gridDim.x) * warps_per_block;
  const int64_t per_warp = layout::ceil_div(items, warps);
  const int64_t first = (static_cast<int64_t>(blockIdx.x) * warps_per_block + threadIdx.x / kWarp) * per_warp;
  // (Y1 fits in device memory, so a warp's count of 2 KB items fits an int)
  int count = static_cast<int>(items - first < per_warp ? items - first : per_warp);
  // GEMM2 may start now (its part before the wait reads only the metadata and its weights; launch.cuh),
  // and a CTA without items leaves without waiting, so that at decode GEMM2's CTAs take the SMs
  // GEMM1 leaves while act_quant's few working CTAs run. CTA 0 always waits: act_quant completes
  // only after GEMM1 has.
  ptx::griddep_launch_dependents();
  if (blockIdx.x != 0 && static_cast<int64_t>(blockIdx.x) * warps_per_block * per_warp >= items) return;
  ptx::griddep_wait();
#if defined(FP8MOE_PIPELINE_ABLATE) && (FP8MOE_PIPELINE_ABLATE & 4)
  return;  // (investigation build: api/pipeline.cpp)
#endif
  if (count <= 0) return;
  // The lane's group of the first item: the 8 lanes of group j of an item take its j-th group, each
  // 16 of its 128 values. Where I / 128 is not a multiple of 4 (Qwen3-30B: 6 groups), an item's
  // groups span two rows, so no lane idles; rows past the last one (i >= rows) are inactive.
  const int64_t flat = first * detail::kGroupsPerChunk + lane / detail::kLanesPerGroup;
  const int last_row = static_cast<int>(rows);  // (rows <= m_cap < 2^31: launch_act_quant checks it)
  int i = static_cast<int>(flat / wgroups);
  int g = static_cast<int>(flat - static_cast<int64_t>(i) * wgroups);
  int e = 0;  // kLive: the expert of live row i
  if (live && i < last_row) e = live_expert(i, before, num_experts);

  // Per-row state of the lane, set when its row changes: its first gate value and output byte in
  // group 0, and group 0's scale (packed: word 0); group g adds g * 128 values and g (packed: g / 4)
  // scale columns of m_pad.
  const int lane_col = (lane % detail::kLanesPerGroup) * detail::kValuesPerLane;  // within its group
  bool row_ok = false;
  const uint16_t* gate_row = nullptr;
  uint8_t* out_row = nullptr;
  void* scale_row = nullptr;
  auto set_row = [&]() {
    const int64_t row = live ? start[e] + (i - before[e]) : i;
    row_ok = i < last_row && row >= 0 && row < m_cap;  // row < 0 or >= m_cap only with an inconsistent ends[]
    gate_row = y1 + row * 2 * inter + lane_col;
    out_row = p.a2 + row * inter + lane_col;
    if constexpr (kPacked)
      scale_row = static_cast<uint32_t*>(p.a2_scale) + layout::ue8m0_word_index(row, 0, m_pad);
    else
      scale_row = static_cast<float*>(p.a2_scale) + layout::fp32_scale_index(row, 0, m_pad);
  };
  // An item's addresses and flag for this lane, taken from the row state when its loads are issued.
  struct Item {
    const uint16_t* gate;
    uint8_t* out;
    void* scale;
    bool active;
  };
  auto item_here = [&]() {
    Item it;
    it.gate = gate_row + g * layout::kGroup;
    it.out = out_row + g * layout::kGroup;
    if constexpr (kPacked)
      it.scale = static_cast<uint32_t*>(scale_row) + (g / detail::kGroupsPerChunk) * m_pad;
    else
      it.scale = static_cast<float*>(scale_row) + g * m_pad;
    it.active = row_ok && g < groups;
    return it;
  };
  auto next_item = [&]() {
    g += detail::kGroupsPerChunk;
    if (g >= wgroups) {  // next row (several when a row has fewer than 4 groups)
      do {
        g -= wgroups;
        ++i;
      } while (g >= wgroups);
      if (live && i < last_row) {
        while (e + 1 < num_experts && i >= before[e + 1]) ++e;
      }
      set_row();
    }
  };
  set_row();

  // One item ahead: the next item's loads are in flight while this one is activated, quantized
  // and stored, so each warp keeps two items' 2 KB of loads outstanding instead of one.
  Item cur = item_here();
  uint32_t gw[8], uw[8];
  load_lane(cur.gate, inter, cur.active, gw, uw);
  for (; count > 0; --count) {
    Item nxt = cur;
    uint32_t gn[8], un[8];
    if (count > 1) {
      next_item();
      nxt = item_here();
    }
    load_lane(nxt.gate, inter, count > 1 && nxt.active, gn, un);
    uint4 codes;  // (inactive lanes quantize zeros and store nothing)
    const float scale = detail::activate_quantize_lane<kKind, kPow2>(
        gw, uw, act, [&](uint32_t(&g)[8], uint32_t(&u)[8]) { load_lane(cur.gate, inter, cur.active, g, u); }, codes);
    if (cur.active) *reinterpret_cast<uint4*>(cur.out) = codes;
    if (p.discard_y1) {
      // The item's 8 gate and 8 up lines (4 groups x 256 bytes each): line i is read by lanes
      // 4i..4i+3, so once the warp has its values (every lane has used them to reach the
      // shuffles) lane i drops gate line i and lane 8 + i up line i.
      const int reader = 4 * (lane % 8);
      const uint64_t line = __shfl_sync(detail::kFullMask, reinterpret_cast<uint64_t>(cur.gate), reader);
      const bool live_line = __shfl_sync(detail::kFullMask, cur.active, reader);
      if (lane < 16 && live_line)
        ptx::discard_l2_line(reinterpret_cast<const uint16_t*>(line) + (lane < 8 ? 0 : inter));
    }
    if constexpr (kPacked) {
      const uint32_t word = detail::ue8m0_chunk_word(scale, cur.active);
      if (lane == 0 && cur.active) *static_cast<uint32_t*>(cur.scale) = word;  // (lane 0: the word's group 0)
    } else {
      if (cur.active && lane % detail::kLanesPerGroup == 0) *static_cast<float*>(cur.scale) = scale;
    }
    cur = nxt;
#pragma unroll
    for (int k = 0; k < 8; ++k) gw[k] = gn[k], uw[k] = un[k];
  }
}

template <num::ActKind kKind>
cudaError_t launch(const ActQuantParams& p, cudaStream_t stream) {
  const bool live = p.schedule == layout::Schedule::kLive;
  const size_t smem = live ? (2 * static_cast<size_t>(p.num_experts) + 2) * sizeof(int32_t) : 0;
  int64_t max_rows = p.m_cap;
  if (live && p.max_live_rows > 0 && p.max_live_rows < max_rows) max_rows = p.max_live_rows;
  const int wgroups = walk_groups(p.intermediate, p.scale_format);
  int blocks = 0;
  const int64_t needed = layout::ceil_div(layout::ceil_div(max_rows * wgroups, detail::kGroupsPerChunk), kThreads / kWarp);
  FP8MOE_KERNEL_TRY(detail::persistent_blocks(kBlocksPerSm, needed, &blocks));
  switch (p.scale_format) {
    case layout::ScaleFormat::kFp32:
      return launch_dependent(act_quant_kernel<kKind, layout::ScaleFormat::kFp32>, blocks, kThreads, smem, stream, p);
    case layout::ScaleFormat::kFp32Pow2:
      return launch_dependent(act_quant_kernel<kKind, layout::ScaleFormat::kFp32Pow2>, blocks, kThreads, smem, stream, p);
    case layout::ScaleFormat::kUe8m0Packed:
      return launch_dependent(act_quant_kernel<kKind, layout::ScaleFormat::kUe8m0Packed>, blocks, kThreads, smem, stream, p);
    default:
      return cudaErrorInvalidValue;
  }
}

}  // namespace

cudaError_t launch_act_quant(const ActQuantParams& p, cudaStream_t stream) {
  if (p.m_cap < 0 || p.m_cap >= (int64_t{1} << 31) || p.intermediate <= 0 || p.intermediate % layout::kGroup != 0 ||
      p.intermediate >= (int64_t{1} << 30))  // column offsets are int32 inside the kernel
    return cudaErrorInvalidValue;
  if (p.schedule != layout::Schedule::kLive && p.schedule != layout::Schedule::kPadded) return cudaErrorInvalidValue;
  if (p.schedule == layout::Schedule::kLive &&
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
