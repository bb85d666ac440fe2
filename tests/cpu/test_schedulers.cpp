// The live tile scheduler (src/schedulers/grouped_tiles.cuh) walked on the CPU the way the GEMM's
// persistent CTAs walk it (ids cta, cta + grid, ...): every live 128-row tile x N-tile is handed
// out exactly once and nothing past an expert's last live tile; with 256-row blocks (2-CTA clusters
// of M-neighbours) a block's second 128 rows are either live or past the end of the expert's last
// block. tile_end[] is built here from its definition, independently of the device's stage().
#include <gtest/gtest.h>

#include <map>
#include <string>
#include <utility>
#include <vector>

#include "common/data.hpp"
#include "layout/layout.cuh"
#include "schedulers/grouped_tiles.cuh"

namespace fp8moe {
namespace {

template <int kBlockM, int kBlockN>
void check_live_walk(const std::vector<int32_t>& counts, int n, int grid) {
  const int E = static_cast<int>(counts.size());
  std::vector<int32_t> ends(E), tile_end(E);
  layout::ends_from_counts(counts.data(), E, ends.data());
  const int num_n = static_cast<int>(layout::ceil_div(n, kBlockN));
  int total = 0;
  for (int e = 0; e < E; ++e) {
    const int64_t start = layout::expert_start(ends.data(), e);
    total += static_cast<int>(layout::ceil_div(ends[e] - start, kBlockM)) * num_n;
    tile_end[e] = total;
  }

  std::map<std::pair<int, int>, int> visits;  // (first row of a 128-row tile, first column) -> count
  int handed_out = 0;
  for (int cta = 0; cta < grid; ++cta) {
    sched::LiveTileScheduler<kBlockM, kBlockN> s(ends.data(), tile_end.data(), E, n);
    sched::TileInfo t;
    for (int64_t id = cta; s.get(id, t); id += grid) {
      ++handed_out;
      ASSERT_GE(t.expert, 0);
      ASSERT_LT(t.expert, E);
      const int64_t start = layout::expert_start(ends.data(), t.expert);
      const int64_t end = ends[t.expert];
      ASSERT_EQ(t.row_end, end);
      ASSERT_EQ((t.m_row - start) % kBlockM, 0) << "block " << t.m_row << " of expert " << t.expert;
      ASSERT_LT(t.m_row, end) << "a block without live rows in its first 128";
      ASSERT_EQ(t.live_half[0], t.m_row < end);
      ASSERT_EQ(t.live_half[1], t.m_row + 64 < end);
      ASSERT_EQ(t.n_col % kBlockN, 0);
      ASSERT_LT(t.n_col, n);
      for (int half = 0; half < kBlockM / layout::kTileM; ++half) {
        const int row = t.m_row + half * layout::kTileM;
        if (row < end) {
          ++visits[{row, t.n_col}];
        } else {  // only the rest of the expert's last block may be past its end
          ASSERT_GE(t.m_row + kBlockM, layout::round_up(end, layout::kTileM)) << "dead rows before the last block";
        }
      }
    }
  }
  EXPECT_EQ(handed_out, total);
  size_t live_tiles = 0;
  for (int e = 0; e < E; ++e)
    for (int64_t row = layout::expert_start(ends.data(), e); row < ends[e]; row += layout::kTileM)
      for (int col = 0; col < n; col += kBlockN) {
        ++live_tiles;
        EXPECT_EQ((visits[{static_cast<int>(row), col}]), 1) << "expert " << e << " row " << row << " col " << col;
      }
  EXPECT_EQ(visits.size(), live_tiles) << "tiles outside the live ones were handed out";
}

template <int kBlockM, int kBlockN>
void check_shapes(test::Rng& rng) {
  const std::vector<std::vector<int32_t>> fixed = {
      {0, 1, 127, 128, 129, 255, 256, 257, 0, 1000}, {0, 0, 0}, {5}, {384, 0, 385}};
  std::vector<int32_t> many(128), sparse(128, 0);  // sparse: decode, runs of empty experts
  for (auto& c : many) c = static_cast<int32_t>(rng() % 300);
  for (int e = 0; e < 128; e += 1 + static_cast<int>(rng() % 9)) sparse[e] = 1 + static_cast<int32_t>(rng() % 20);
  for (int n : {256, 640, 4096}) {
    for (int grid : {1, 7, 66, 132}) {
      SCOPED_TRACE("BLOCK_M " + std::to_string(kBlockM) + " BLOCK_N " + std::to_string(kBlockN) + " N " +
                   std::to_string(n) + " grid " + std::to_string(grid));
      for (const auto& counts : fixed) check_live_walk<kBlockM, kBlockN>(counts, n, grid);
      check_live_walk<kBlockM, kBlockN>(many, n, grid);
      check_live_walk<kBlockM, kBlockN>(sparse, n, grid);
    }
  }
}

TEST(LiveTileScheduler, EveryLiveTileOnceNothingPastTheEnd) {
  test::Rng rng(test::fresh_seed());
  check_shapes<128, 128>(rng);
  check_shapes<128, 192>(rng);
}

// 2-CTA clusters of M-neighbours (FP8MOE_GEMM_CLUSTER=2m): 256-row blocks, each CTA a 128-row half.
TEST(LiveTileScheduler, PairsOfMNeighbours) {
  test::Rng rng(test::fresh_seed());
  check_shapes<256, 128>(rng);
  check_shapes<256, 192>(rng);
}

}  // namespace
}  // namespace fp8moe
