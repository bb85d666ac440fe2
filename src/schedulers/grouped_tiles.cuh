// Tile schedulers of the grouped GEMMs (SPEC section 4). A persistent CTA walks linear tile ids
// blockIdx.x, blockIdx.x + gridDim.x, ... and asks a scheduler what each id means. Producer and
// math warpgroups run their own copy of the same scheduler, so they agree without talking.
//
// - LiveTileScheduler reads the prefix-sum layout ends[] (the kernel stages it in shared memory:
//   the walk over experts is a chain of dependent loads, E global round trips otherwise) and
//   enumerates only the
//   ceil(n_e / 128) x ceil(N / BLOCK_N) tiles of each expert. Ids past the last live tile end the
//   walk, so nothing past an expert's last live tile is ever loaded or stored.
// - PaddedTileScheduler is the baseline engines run today: every 128-row tile of M_cap, the
//   expert taken from the per-row index of the tile's first row. A tile whose first row is padding
//   (-1) still streams its A rows and expert 0's weights (as DeepGEMM's contiguous m_indices mode
//   does after clamping -1 to 0) but skips the math of dead 64-row halves and stores zeros there.
//
// Both use the same rasterisation inside a group of M-blocks: bands of up to kBandM M-blocks,
// walking the band's M-blocks first, so a wave of CTAs shares a few weight tiles through L2.
#pragma once

#include <cstdint>

#include "layout/layout.cuh"

namespace fp8moe::sched {

constexpr int kBandM = 16;

struct TileInfo {
  int32_t expert = 0;   // expert whose weights the tile multiplies
  int32_t m_row = 0;    // first permuted row of the tile
  int32_t n_col = 0;    // first output column
  int32_t row_end = 0;  // rows >= row_end are not stored
  bool live_half[2] = {false, false};  // 64-row halves that carry live rows (get math)
};

// Local tile id inside a group of num_m x num_n tiles -> (m, n), band-rasterised.
__device__ __forceinline__ void raster(int64_t local, int num_m, int num_n, int& m, int& n) {
  const int64_t band_tiles = static_cast<int64_t>(kBandM) * num_n;
  const int band = static_cast<int>(local / band_tiles);
  const int band_start = band * kBandM;
  const int height = num_m - band_start < kBandM ? num_m - band_start : kBandM;
  const int64_t rest = local - band * band_tiles;
  m = band_start + static_cast<int>(rest % height);
  n = static_cast<int>(rest / height);
}

template <int kBlockM, int kBlockN>
struct LiveTileScheduler {
  static_assert(kBlockM == layout::kTileM, "experts are aligned to the 128-row tile");
  const int32_t* ends;
  int num_experts;
  int num_n;
  // Cursor: the expert that holds the ids [first_id, first_id + num_m * num_n).
  int expert = -1;
  int64_t first_id = 0;
  int num_m = 0;
  int64_t start = 0, end = 0;

  __device__ LiveTileScheduler(const int32_t* ends_, int num_experts_, int n)
      : ends(ends_), num_experts(num_experts_), num_n(static_cast<int>(layout::ceil_div(n, kBlockN))) {}

  // Ids must be asked for in increasing order. False once the id is past every live tile.
  __device__ bool get(int64_t id, TileInfo& t) {
    while (expert < 0 || id >= first_id + static_cast<int64_t>(num_m) * num_n) {
      if (expert + 1 >= num_experts) return false;
      first_id += static_cast<int64_t>(num_m) * num_n;
      ++expert;
      start = expert == 0 ? 0 : layout::round_up(ends[expert - 1], kBlockM);  // generic: shared or global
      end = ends[expert];
      num_m = static_cast<int>(layout::live_m_tiles(start, end));
    }
    int m, n;
    raster(id - first_id, num_m, num_n, m, n);
    t.expert = expert;
    t.m_row = static_cast<int32_t>(start + static_cast<int64_t>(m) * kBlockM);
    t.n_col = n * kBlockN;
    t.row_end = static_cast<int32_t>(end);
    t.live_half[0] = t.m_row < end;
    t.live_half[1] = t.m_row + kBlockM / 2 < end;
    return true;
  }
};

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
    raster(id, num_m, num_n, m, n);
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

}  // namespace fp8moe::sched
