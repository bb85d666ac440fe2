// The live tile scheduler (src/schedulers/grouped_tiles.cuh) walked on the CPU the way the GEMM's
// persistent CTAs walk it, with the fixed stride (ids cta, cta + grid, ...) and with dynamic tiles
// (first id cta, then ids claimed from a shared counter, grid + 0, 1, 2, ..., by CTAs in a random
// order as their speeds would have it): every live 128-row tile x N-tile is handed out exactly once
// and nothing past an expert's last live tile, and the counter ends at the number of tiles; with
// 256-row blocks (2-CTA clusters of M-neighbours) a block's second 128 rows are either live or past
// the end of the expert's last block; with tall tiles (the 192-wide single CTAs) an expert with
// 129..192 rows gets 128-wide tall tiles over all its rows and no other tile. Coverage is counted
// per 128-row tile x 64-column block, so that tiles of both widths add up. tile_end[] is built
// here from its definition, independently of the device's stage(); the lookup table after it with
// the scheduler's own fill_tile_lut() (a wrong table would hand out wrong tiles, which the walk
// catches).
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

enum class Walk { kFixedStride, kClaimed };

template <int kBlockM, int kBlockN, bool kLut, bool kTall>
void check_live_walk(const std::vector<int32_t>& counts, int n, int grid, Walk walk, test::Rng& rng) {
  const int E = static_cast<int>(counts.size());
  std::vector<int32_t> ends(E), tile_end(sched::kMaxLiveExperts + sched::kTileLutInts);
  layout::ends_from_counts(counts.data(), E, ends.data());
  const int num_n = static_cast<int>(layout::ceil_div(n, kBlockN));
  // An expert in tall tiles: 129..192 rows.
  auto has_tall = [&](int64_t rows) { return kTall && rows > 128 && rows <= 192; };
  int total = 0;
  for (int e = 0; e < E; ++e) {
    const int64_t rows = ends[e] - layout::expert_start(ends.data(), e);
    const int m_tiles = static_cast<int>(layout::ceil_div(rows, kBlockM));
    total += has_tall(rows) ? static_cast<int>(layout::ceil_div(n, 128)) : m_tiles * num_n;
    tile_end[e] = total;
  }
  for (int e = 0; e < E; ++e)
    sched::fill_tile_lut(tile_end.data() + sched::kMaxLiveExperts, e, E, e == 0 ? 0 : tile_end[e - 1], tile_end[e],
                         total);

  // Each CTA's ids, in the order it asks for them. Claimed: each CTA keeps its own scheduler (its
  // cursor only moves forward) and, after every tile it got, claims the next id from the counter;
  // which CTA claims next is random. Every CTA's last claim is past the end.
  std::vector<std::vector<int64_t>> ids(grid);
  int counter = 0;
  {
    std::vector<sched::LiveTileScheduler<kBlockM, kBlockN, kLut, kTall>> s(
        grid, sched::LiveTileScheduler<kBlockM, kBlockN, kLut, kTall>(ends.data(), tile_end.data(), E, n));
    std::vector<int> running;  // CTAs whose last id was a tile
    sched::TileInfo t;
    for (int cta = 0; cta < grid; ++cta) {
      ids[cta].push_back(cta);
      if (s[cta].get(cta, t)) running.push_back(cta);
    }
    while (!running.empty()) {
      const size_t pick = walk == Walk::kClaimed ? rng() % running.size() : 0;
      const int cta = running[pick];
      const int64_t next = walk == Walk::kClaimed ? grid + counter++ : ids[cta].back() + grid;
      ids[cta].push_back(next);
      if (!s[cta].get(next, t)) running.erase(running.begin() + static_cast<std::ptrdiff_t>(pick));
    }
  }
  // One claim per tile a CTA ran (the one after its last is past the end): the GEMM's counter ends
  // at the tile count, which the GPU test checks.
  if (walk == Walk::kClaimed) EXPECT_EQ(counter, total);

  std::map<std::pair<int, int>, int> visits;  // (first row of a 128-row tile, first of 64 columns) -> count
  int handed_out = 0;
  for (int cta = 0; cta < grid; ++cta) {
    sched::LiveTileScheduler<kBlockM, kBlockN, kLut, kTall> s(ends.data(), tile_end.data(), E, n);
    sched::TileInfo t;
    for (size_t i = 0; i < ids[cta].size(); ++i) {
      const bool got = s.get(ids[cta][i], t);
      ASSERT_EQ(got, i + 1 < ids[cta].size()) << "a CTA's ids are tiles up to its last, which is past the end";
      if (!got) break;
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
      ASSERT_LT(t.n_col, n);
      if (t.tall) {  // all the expert's 129..192 rows, 128 columns
        ASSERT_TRUE(has_tall(end - start)) << "a tall tile of expert " << t.expert;
        ASSERT_EQ(t.m_row, start);
        ASSERT_EQ(t.n_col % 128, 0);
        for (int col = t.n_col; col < t.n_col + 128; col += 64) {
          ++visits[{t.m_row, col}];
          ++visits[{t.m_row + 128, col}];
        }
        continue;
      }
      ASSERT_FALSE(has_tall(end - start)) << "a wide tile of an expert in tall tiles";
      ASSERT_EQ(t.n_col % kBlockN, 0);
      for (int half = 0; half < kBlockM / layout::kTileM; ++half) {
        const int row = t.m_row + half * layout::kTileM;
        if (row < end) {
          for (int col = t.n_col; col < t.n_col + kBlockN && col < n; col += 64) ++visits[{row, col}];
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
      for (int col = 0; col < n; col += 64) {
        ++live_tiles;
        EXPECT_EQ((visits[{static_cast<int>(row), col}]), 1) << "expert " << e << " row " << row << " col " << col;
      }
  EXPECT_EQ(visits.size(), live_tiles) << "tiles outside the live ones were handed out";
}

template <int kBlockM, int kBlockN, bool kLut, bool kTall = false>
void check_shapes(test::Rng& rng) {
  const std::vector<std::vector<int32_t>> fixed = {
      {0, 1, 127, 128, 129, 255, 256, 257, 0, 1000}, {0, 0, 0}, {5}, {384, 0, 385},
      {192, 193, 320, 321, 140, 0, 64, 129}};  // tall tiles at 192, 140, 129 rows
  std::vector<int32_t> many(128), sparse(128, 0);  // sparse: decode, runs of empty experts
  for (auto& c : many) c = static_cast<int32_t>(rng() % 300);
  for (int e = 0; e < 128; e += 1 + static_cast<int>(rng() % 9)) sparse[e] = 1 + static_cast<int32_t>(rng() % 20);
  for (int n : {256, 640, 4096}) {
    for (int grid : {1, 7, 66, 132}) {
      SCOPED_TRACE("BLOCK_M " + std::to_string(kBlockM) + " BLOCK_N " + std::to_string(kBlockN) + " N " +
                   std::to_string(n) + " grid " + std::to_string(grid));
      for (Walk walk : {Walk::kFixedStride, Walk::kClaimed}) {
        SCOPED_TRACE(walk == Walk::kClaimed ? "claimed" : "fixed stride");
        for (const auto& counts : fixed) check_live_walk<kBlockM, kBlockN, kLut, kTall>(counts, n, grid, walk, rng);
        check_live_walk<kBlockM, kBlockN, kLut, kTall>(many, n, grid, walk, rng);
        check_live_walk<kBlockM, kBlockN, kLut, kTall>(sparse, n, grid, walk, rng);
      }
    }
  }
}

TEST(LiveTileScheduler, EveryLiveTileOnceNothingPastTheEnd) {
  test::Rng rng(test::fresh_seed());
  check_shapes<128, 128, false>(rng);
  check_shapes<128, 192, true>(rng);
  check_shapes<128, 192, false>(rng);
  check_shapes<128, 256, true>(rng);  // the 256-wide prefill kernel (with the lookup table)
}

// The 192-wide single CTAs' tall tiles: the same walk, the same coverage.
TEST(LiveTileScheduler, TallTiles) {
  test::Rng rng(test::fresh_seed());
  check_shapes<128, 192, true, true>(rng);
  check_shapes<128, 192, false, true>(rng);
}

TEST(LiveTileScheduler, TallExpertRule) {
  for (int rows : {129, 140, 192}) EXPECT_TRUE(sched::tall_expert(rows)) << rows;
  for (int rows : {-5, 0, 1, 64, 128, 193, 256, 257, 320}) EXPECT_FALSE(sched::tall_expert(rows)) << rows;
}

// 2-CTA clusters of M-neighbours (FP8MOE_GEMM_CLUSTER=2m): 256-row blocks, each CTA a 128-row half.
TEST(LiveTileScheduler, PairsOfMNeighbours) {
  test::Rng rng(test::fresh_seed());
  check_shapes<256, 128, false>(rng);
  check_shapes<256, 192, true>(rng);
}

}  // namespace
}  // namespace fp8moe
