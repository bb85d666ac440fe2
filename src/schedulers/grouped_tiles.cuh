// Tile schedulers of the grouped GEMMs (SPEC section 4). A persistent CTA takes linear tile ids in
// increasing order, blockIdx.x first, then either blockIdx.x + gridDim.x, ... (fixed stride) or
// ids its producer claims from a counter (dynamic tiles, the live single-CTA GEMMs: see the
// kernel), and asks a scheduler what each id means. Producer and math warpgroups run their own
// copy of the same scheduler on the same ids, so they agree on the tiles.
//
// - LiveTileScheduler reads the prefix-sum layout ends[] (staged in shared memory with a prefix
//   of live tiles per expert and, for prefill-sized GEMMs, a coarse table from tile ids to
//   experts, so finding a tile's expert is a short search in shared memory instead of a chain of
//   dependent global loads and arithmetic) and enumerates only the
//   ceil(n_e / BLOCK_M) x ceil(N / BLOCK_N) tiles of each expert (kTall: an expert with 129..192
//   rows in ceil(N / 128) tall tiles instead). Ids past the last live tile end the walk, so
//   nothing past an expert's last live tile is ever loaded or stored. BLOCK_M is 128
//   or, for clusters of M-neighbours, a multiple of it; experts still start on 128-row boundaries,
//   and TileInfo describes the block's first 128 rows.
// - PaddedTileScheduler is the baseline engines run today: every 128-row tile of M_cap, the
//   expert taken from the per-row index of the tile's first row. A tile whose first row is padding
//   (-1) still streams its A rows and expert 0's weights (as DeepGEMM's contiguous m_indices mode
//   does after clamping -1 to 0) but skips the math of dead 64-row halves and stores zeros there.
//
// Both use the same rasterisation inside a group of M-blocks: bands of up to kBandM M-blocks,
// walking the band's M-blocks first, so a wave of CTAs shares a few weight tiles through L2.
// raster() and the live scheduler's get() also compile for the host, where
// tests/cpu/test_schedulers.cpp enumerates the tiles they hand out.
#pragma once

#include <cstdint>

#include "layout/layout.cuh"

namespace fp8moe::sched {

constexpr int kBandM = 16;
constexpr int kMaxLiveExperts = 512;  // the live scheduler's shared tables (fp8moe::kMaxExperts)

// The tile lookup table that follows tile_end[kMaxLiveExperts] in the live scheduler's tables
// (kLut: the prefill-sized GEMMs; building it at a decode GEMM's start cost more than it saved):
// [shift, entries, lut[0 .. entries - 1], E, E] with lut[j] the expert of tile id j << shift and
// entries = ceil(tiles / 2^shift) <= kTileLutEntries. A tile's expert then lies between lut[j] and
// lut[j + 1] (j = id >> shift): a binary search over a few experts instead of all of them (a
// dependent chain of ~7 shared-memory loads for E = 128 took ~1 us per tile change under a
// prefill's load: perf notes v19).
constexpr int kTileLutEntries = 256;
constexpr int kTileLutInts = kTileLutEntries + 4;
FP8MOE_HD int tile_lut_shift(int total_tiles) {
  int shift = 0;
  while ((total_tiles >> shift) >= kTileLutEntries) ++shift;
  return shift;
}
// Fills the entries of expert e, whose tiles are ids [first, end), and (e + 1 == num_experts) the
// header and end markers; the caller calls it for every expert.
FP8MOE_HD void fill_tile_lut(int32_t* lut, int e, int num_experts, int first, int end, int total_tiles) {
  const int shift = tile_lut_shift(total_tiles);
  for (int j = (first + (1 << shift) - 1) >> shift; (j << shift) < end; ++j) lut[2 + j] = e;
  if (e + 1 == num_experts) {
    const int entries = (total_tiles + (1 << shift) - 1) >> shift;
    lut[0] = shift;
    lut[1] = entries;
    lut[2 + entries] = lut[3 + entries] = num_experts;
  }
}

// Tall tiles (the auto-width GEMM kernel's 192-wide body): an expert with 129..192 live rows is
// computed in tiles of all its rows x 128 columns instead of two 128-row M-tiles, so that its
// rows past 128 do not stream its weights a second time (at 512/512, ~128 +- 11 rows per expert,
// about half the experts: -26% of their L2 -> SM bytes; perf notes v22). A tall tile moves at
// most the bytes per k-block of a 128 x 192 one (A 16 + 2..8 KB, B 16 KB). Larger experts keep
// 128-row tiles.
constexpr int kTallBlockN = 128;
FP8MOE_HD bool tall_expert(int rows) { return rows > layout::kTileM && rows <= layout::kTileM * 3 / 2; }

struct TileInfo {
  int32_t expert = 0;   // expert whose weights the tile multiplies
  int32_t m_row = 0;    // first permuted row of the tile
  int32_t n_col = 0;    // first output column
  int32_t row_end = 0;  // rows >= row_end are not stored
  bool tall = false;    // a tall tile: rows [m_row, row_end) (129..192), kTallBlockN columns
  bool live_half[2] = {false, false};  // 64-row halves that carry live rows (get math)
  // A tall tile's rows past its first 128 (1..64): the third block of rows its stage holds.
  FP8MOE_HD int tall_rows() const { return row_end - m_row - layout::kTileM; }
  // A live tile's halves from its rows (the live schedule: rows [m_row, row_end) are live).
  FP8MOE_HD void set_live_halves() {
    live_half[0] = m_row < row_end;
    live_half[1] = m_row + layout::kTileM / 2 < row_end;
  }
  // The tile as a GEMM hands it between its warps in shared memory: expert (-1: no tile left),
  // first row, first column, row end and, kTall, the tall flag (`is_tall`: where the writer knows
  // it at compile time, so that it stores a constant).
  template <bool kTall>
  FP8MOE_HD void publish(int32_t* q, bool is_tall) const {
    q[0] = expert, q[1] = m_row, q[2] = n_col, q[3] = row_end;
    if (kTall) q[4] = is_tall;
  }
  // The tile publish() wrote, with its live halves; false at the end of the tiles.
  template <bool kTall>
  FP8MOE_HD bool read_published(const int32_t* q) {
    expert = q[0], m_row = q[1], n_col = q[2], row_end = q[3];
    if (kTall) tall = q[4] != 0;
    set_live_halves();
    return expert >= 0;
  }
};

// Local tile id inside a group of num_m x num_n tiles -> (m, n), band-rasterised. In 32 bits
// (tile counts are below 2^31): the 64-bit divisions it had were a software routine of hundreds
// of instructions that every GEMM thread ran at every tile change (perf notes v18).
FP8MOE_HD void raster(int local, int num_m, int num_n, int& m, int& n) {
  const int band_tiles = kBandM * num_n;
  const int band = local / band_tiles;
  const int band_start = band * kBandM;
  const int height = num_m - band_start < kBandM ? num_m - band_start : kBandM;
  const int rest = local - band * band_tiles;
  m = band_start + rest % height;
  n = rest / height;
}

// The live GEMM's tile width where the capacity leaves it open (decode capacities): 192 columns
// when the touched experts need more than one 128-row M-tile each on average (mid-size batches,
// e.g. 512 tokens of DeepSeek-V3 EP=8 at ~128 rows per expert: 192 measured 7-8% faster on the
// H200), 128 otherwise (decode: weight streaming, where 128 measured 3-4% faster).
FP8MOE_HD bool wide_tiles(int64_t m_tiles, int64_t touched_experts) { return m_tiles > touched_experts; }

// The inputs of wide_tiles() (and of a live GEMM's tile count) from the live rows per expert: the
// 128-row M-tiles of all experts and the experts with any row. For the host (tests, tools); the
// device counts the same from ends[] (wide_tiles_warp below).
struct TouchedTiles {
  int64_t m_tiles = 0, touched = 0;
};
FP8MOE_HD TouchedTiles touched_tiles(const int32_t* counts, int num_experts) {
  TouchedTiles r;
  for (int e = 0; e < num_experts; ++e) {
    r.m_tiles += layout::live_m_tiles(0, counts[e]);
    r.touched += counts[e] > 0;
  }
  return r;
}

// An expert's first row from the previous expert's end, layout::expert_start's rounding in 32-bit
// arithmetic (rows are below 2^31; expert 0 starts at 0): the GEMM's scheduler and width rule use
// this form, as the 64-bit one changes the GEMM kernels' register allocation throughout.
FP8MOE_HD int tile_aligned32(int32_t previous_end) {
  return (previous_end + layout::kTileM - 1) / layout::kTileM * layout::kTileM;
}

#if defined(__CUDA_ARCH__)
// ends[] in one warp's registers, lane l holding experts l, l + 32, ... (0 past the last expert):
// every load is issued before any is used, one memory round trip for any E <= kMaxLiveExperts.
struct EndsInWarp {
  static constexpr int kPerLane = kMaxLiveExperts / 32;
  int end[kPerLane];
};
__device__ inline EndsInWarp load_ends_warp(const int32_t* __restrict__ ends, int num_experts) {
  const int lane = threadIdx.x % 32;
  EndsInWarp r;
#pragma unroll
  for (int i = 0; i < EndsInWarp::kPerLane; ++i) {
    const int e = lane + 32 * i;
    r.end[i] = e < num_experts ? __ldg(ends + e) : 0;
  }
  return r;
}
// wide_tiles() from ends[] in a warp's registers (every lane gets the answer).
__device__ inline bool wide_tiles_warp(const EndsInWarp& w, int num_experts) {
  const int lane = threadIdx.x % 32;
  int m_tiles = 0, touched = 0;
#pragma unroll
  for (int i = 0; i < EndsInWarp::kPerLane; ++i) {
    if (32 * i >= num_experts) break;
    // The previous expert's end: the lane below, or lane 31 of the previous group.
    int previous = __shfl_up_sync(0xFFFFFFFFu, w.end[i], 1);
    const int wrapped = i > 0 ? __shfl_sync(0xFFFFFFFFu, w.end[i - 1], 31) : 0;  // (expert 0: none)
    if (lane == 0) previous = wrapped;
    const int rows = w.end[i] - tile_aligned32(previous);  // (<= 0 past the last expert)
    m_tiles += rows > 0 ? (rows + layout::kTileM - 1) / layout::kTileM : 0;
    touched += rows > 0;
  }
  for (int offset = 16; offset > 0; offset /= 2) {
    m_tiles += __shfl_xor_sync(0xFFFFFFFFu, m_tiles, offset);
    touched += __shfl_xor_sync(0xFFFFFFFFu, touched, offset);
  }
  return wide_tiles(m_tiles, touched);
}
#endif

template <int kBlockM, int kBlockN, bool kLut = false, bool kTall = false>
struct LiveTileScheduler {
  static_assert(kBlockM % layout::kTileM == 0, "experts are aligned to the 128-row tile");
  static_assert(!kTall || (kBlockM == layout::kTileM && kBlockN == 192), "tall tiles: the 192-wide single CTAs");
  // Experts start on 128-row boundaries (tile_aligned32).

  // Tiles of an expert with `rows` live rows (-127..0: none): ceil(rows / BLOCK_M) x num_n, or
  // (kTall and tall_expert(rows)) num_n_tall tall tiles.
  FP8MOE_HD static int expert_tiles(int rows, int num_n, int num_n_tall) {
    if (kTall && tall_expert(rows)) return num_n_tall;
    return (rows + kBlockM - 1) / kBlockM * num_n;
  }

  const int32_t* ends;      // shared [E]: the prefix-sum layout
  const int32_t* tile_end;  // shared [kMaxLiveExperts]: live tiles of experts 0..e (inclusive prefix),
                            // then (kLut) the tile lookup table (kTileLutInts)
  int num_experts;
  int num_n;
  int expert = 0;           // cursor: tile ids only grow, so the expert only moves forward

#if defined(__CUDACC__)
  // Stages ends[] in shared memory and builds tile_end[] and the lookup table after it (every
  // thread of the CTA calls this; it synchronises the CTA once inside, and the caller must
  // synchronise once more before get()).
  // 32-bit arithmetic throughout: tile ids and rows are < 2^31.
  __device__ static void stage(const int32_t* __restrict__ ends_global, int num_experts, int n, int32_t* ends_smem,
                               int32_t* tile_end_smem) {
    for (int e = threadIdx.x; e < num_experts; e += blockDim.x) ends_smem[e] = __ldg(ends_global + e);
    __syncthreads();
    if (threadIdx.x < 32) build(num_experts, n, ends_smem, tile_end_smem);
  }
  // Warp 0 only: tile_end[] (and the lookup table) from ends[] already in shared memory (stage()'s
  // second half; the auto-width GEMM kernel stages ends[] itself). No CTA barrier inside.
  __device__ static void build(int num_experts, int n, const int32_t* ends_smem, int32_t* tile_end_smem) {
    const int lane = threadIdx.x;
    const int num_n = static_cast<int>(layout::ceil_div(n, kBlockN));
    const int num_n_tall = static_cast<int>(layout::ceil_div(n, kTallBlockN));
    int carry = 0;
    for (int e0 = 0; e0 < num_experts; e0 += 32) {
      const int e = e0 + lane;
      int tiles = 0;
      if (e < num_experts) {
        const int start = e == 0 ? 0 : tile_aligned32(ends_smem[e - 1]);
        tiles = expert_tiles(ends_smem[e] - start, num_n, num_n_tall);
      }
      int inclusive = tiles;
#pragma unroll
      for (int offset = 1; offset < 32; offset *= 2) {
        const int v = __shfl_up_sync(0xFFFFFFFFu, inclusive, offset);
        if (lane >= offset) inclusive += v;
      }
      if (e < num_experts) tile_end_smem[e] = carry + inclusive;
      carry += __shfl_sync(0xFFFFFFFFu, inclusive, 31);
    }
    if constexpr (kLut) {
      __syncwarp();
      for (int e = lane; e < num_experts; e += 32)
        fill_tile_lut(tile_end_smem + kMaxLiveExperts, e, num_experts, e == 0 ? 0 : tile_end_smem[e - 1],
                      tile_end_smem[e], carry);
    }
  }
#endif

  FP8MOE_HD LiveTileScheduler(const int32_t* ends_smem, const int32_t* tile_end_smem, int num_experts_, int n)
      : ends(ends_smem),
        tile_end(tile_end_smem),
        num_experts(num_experts_),
        num_n(static_cast<int>(layout::ceil_div(n, kBlockN))) {}

  // Ids must be asked for in increasing order; false once the id is past every live tile. The
  // expert of a tile is the first whose tile_end exceeds the id: usually the cursor's, else a
  // binary search past it, with kLut only between the lookup table's two entries around the id (a
  // walk cost ~80 cycles per expert passed, ~4 us for E = 128 on the H200, paid by every CTA of a
  // decode GEMM). (Written so that the 192-wide GEMM's math warpgroups, which sit at their
  // register budget, do not spill: e.g. an early 64-bit bound check did.)
  FP8MOE_HD bool get(int64_t id64, TileInfo& t) {
    const int id = static_cast<int>(id64);
    if (expert < num_experts && tile_end[expert] <= id) {
      int lo = expert + 1, hi = num_experts;  // the answer lies in [lo, hi]
      if constexpr (kLut) {
        const int32_t* lut = tile_end + kMaxLiveExperts;
        const int j = id >> lut[0] < lut[1] ? id >> lut[0] : lut[1];  // past the last tile: the end markers
        lo = lo > lut[2 + j] ? lo : lut[2 + j];
        hi = lut[3 + j];
      }
      while (lo < hi) {
        const int mid = (lo + hi) / 2;
        if (tile_end[mid] <= id) lo = mid + 1;
        else hi = mid;
      }
      expert = lo;
    }
    if (expert == num_experts) return false;
    const int first_id = expert == 0 ? 0 : tile_end[expert - 1];
    const int start = expert == 0 ? 0 : tile_aligned32(ends[expert - 1]);
    const int end = ends[expert];
    const int local = id - first_id;
    t.expert = expert;
    t.row_end = end;
    t.tall = kTall && tall_expert(end - start);
    if (t.tall) {
      t.m_row = start;
      t.n_col = local * kTallBlockN;
      t.set_live_halves();
      return true;
    }
    int m, n;
    raster(local, (end - start + kBlockM - 1) / kBlockM, num_n, m, n);
    t.m_row = start + m * kBlockM;
    t.n_col = n * kBlockN;
    t.set_live_halves();
    return true;
  }
};

#if defined(__CUDACC__)
template <int kBlockM, int kBlockN>
struct PaddedTileScheduler {
  const int32_t* row_expert;
  int num_m;
  int num_n;

  __device__ PaddedTileScheduler(const int32_t* row_expert_, int64_t m_cap, int n)
      : row_expert(row_expert_),
        num_m(static_cast<int>(m_cap / kBlockM)),
        num_n(static_cast<int>(layout::ceil_div(n, kBlockN))) {}

  __device__ bool get(int64_t id, TileInfo& t) {
    if (id >= static_cast<int64_t>(num_m) * num_n) return false;
    int m, n;
    raster(static_cast<int>(id), num_m, num_n, m, n);  // id < num_m * num_n < 2^31
    t.m_row = m * kBlockM;
    t.n_col = n * kBlockN;
    const int32_t e = __ldg(row_expert + t.m_row);
    t.expert = e < 0 ? 0 : e;
    t.row_end = t.m_row + kBlockM;
    t.live_half[0] = e >= 0;
    t.live_half[1] = __ldg(row_expert + t.m_row + kBlockM / 2) >= 0;
    return true;
  }
};
#endif

}  // namespace fp8moe::sched
