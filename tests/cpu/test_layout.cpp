// Layout math (SPEC sections 2-3): the prefix-sum "ends" layout, the M_cap bound on adversarial
// routings, the padded schedule's row_expert, and the activation-scale layouts.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <functional>
#include <set>
#include <vector>

#include "common/data.hpp"
#include "layout/layout.cuh"
#include "reference/reference.hpp"

namespace fp8moe {
namespace {

using layout::ScaleFormat;

int64_t round_up128(int64_t x) { return (x + 127) / 128 * 128; }

// Ends from the definition: start_0 = 0, start_e = round_up(end_{e-1}, 128), end_e = start_e + n_e.
std::vector<int32_t> ends_by_definition(const std::vector<int32_t>& counts) {
  std::vector<int32_t> ends(counts.size());
  int64_t start = 0;
  for (size_t e = 0; e < counts.size(); ++e) {
    ends[e] = static_cast<int32_t>(start + counts[e]);
    start = round_up128(ends[e]);
  }
  return ends;
}

std::vector<int32_t> ends_of(const std::vector<int32_t>& counts) {
  std::vector<int32_t> ends(counts.size(), -7);
  layout::ends_from_counts(counts.data(), static_cast<int>(counts.size()), ends.data());
  return ends;
}

TEST(Ends, HandWorkedCases) {
  EXPECT_EQ(ends_of({0, 0, 0}), (std::vector<int32_t>{0, 0, 0}));
  EXPECT_EQ(ends_of({0, 5, 0, 130, 0}), (std::vector<int32_t>{0, 5, 128, 258, 384}));
  EXPECT_EQ(ends_of({0, 0, 4096, 0}), (std::vector<int32_t>{0, 0, 4096, 4096}));  // one expert takes all
  EXPECT_EQ(ends_of({128, 128, 256}), (std::vector<int32_t>{128, 256, 512}));       // 128k: no gaps
  EXPECT_EQ(ends_of({129, 1, 257}), (std::vector<int32_t>{129, 257, 641}));         // 128k + 1
  EXPECT_EQ(ends_of({1}), (std::vector<int32_t>{1}));
}

TEST(Ends, RandomCountsMatchDefinitionAndTiles) {
  test::Rng rng(test::fresh_seed());
  for (int trial = 0; trial < 1000; ++trial) {
    const int E = 1 + static_cast<int>(rng() % 64);
    std::vector<int32_t> counts(E);
    for (auto& c : counts) c = (rng() % 3 == 0) ? 0 : static_cast<int32_t>(rng() % 600);
    const auto ends = ends_of(counts);
    ASSERT_EQ(ends, ends_by_definition(counts));
    int64_t tiles = 0;
    for (int e = 0; e < E; ++e) {
      const int64_t start = layout::expert_start(ends.data(), e);
      ASSERT_EQ(start % 128, 0);
      ASSERT_EQ(ends[e] - start, counts[e]);
      ASSERT_EQ(layout::live_m_tiles(start, ends[e]), (counts[e] + 127) / 128);
      tiles += layout::live_m_tiles(start, ends[e]);
    }
    ASSERT_EQ(layout::used_rows(ends.data(), E), tiles * 128);
  }
}

TEST(RowExpert, MarksLiveRowsOnly) {
  const std::vector<int32_t> counts{3, 0, 130, 1};
  const auto ends = ends_of(counts);  // {3, 128, 258, 385}
  const int64_t mcap = 640;
  std::vector<int32_t> row_expert(mcap, 99);
  layout::padded_row_expert(ends.data(), 4, mcap, row_expert.data());
  for (int64_t r = 0; r < mcap; ++r) {
    const int want = r < 3 ? 0 : r < 128 ? -1 : r < 258 ? 2 : r < 384 ? -1 : r < 385 ? 3 : -1;
    ASSERT_EQ(row_expert[r], want) << "row " << r;
  }
}

// ---- the M_cap bound --------------------------------------------------------------------------
int64_t rows_needed(const std::vector<int32_t>& counts) {
  int64_t sum = 0;
  for (int32_t n : counts) sum += round_up128(n);
  return sum;
}

TEST(MCap, FormulaAndPad) {
  EXPECT_EQ(layout::m_cap(512, 8, 32), 8192);    // 4096 + 32 * 127 = 8160 -> 8192
  EXPECT_EQ(layout::m_cap(16, 8, 32), 4224);     // 128 + 32 * 127 = 4192 -> 4224
  EXPECT_EQ(layout::m_cap(1, 1, 256), 128);      // one row, one expert
  EXPECT_EQ(layout::m_cap(0, 8, 32), 0);
  EXPECT_EQ(layout::m_pad(4224), 4224);
  EXPECT_EQ(layout::m_pad(130), 132);
}

// Adversarial count vectors for R = C*k routed rows over E experts.
std::vector<std::vector<int32_t>> adversarial_counts(int64_t C, int k, int E, test::Rng& rng) {
  const int64_t R = C * k;
  std::vector<std::vector<int32_t>> cases;
  std::vector<int32_t> v(E, 0);
  cases.push_back(v);  // empty routing
  v[E - 1] = static_cast<int32_t>(R);
  cases.push_back(v);  // everything on one expert
  // One row on each of min(R, E) experts, the rest on the last one (the worst case, see below).
  v.assign(E, 0);
  const int64_t spread = std::min<int64_t>(R, E);
  for (int64_t e = 0; e < spread; ++e) v[e] = 1;
  v[spread - 1] += static_cast<int32_t>(R - spread);
  cases.push_back(v);
  // 128q + 1 rows on as many experts as possible, for q = 1, 2, 3.
  for (int q = 1; q <= 3; ++q) {
    v.assign(E, 0);
    int64_t left = R;
    for (int e = 0; e < E && left > 0; ++e) {
      v[e] = static_cast<int32_t>(std::min<int64_t>(left, 128 * q + 1));
      left -= v[e];
    }
    if (left > 0) v[0] += static_cast<int32_t>(left);
    cases.push_back(v);
  }
  // Uniform random top-k routing of C tokens, and random compositions of R.
  for (int t = 0; t < 20; ++t) {
    v.assign(E, 0);
    if (k <= E && t % 2 == 0) {
      for (int32_t id : test::random_routing(rng, C, k, E)) ++v[id];
    } else {
      for (int64_t r = 0; r < R; ++r) ++v[rng() % E];
    }
    cases.push_back(v);
  }
  return cases;
}

TEST(MCap, BoundHoldsOnAdversarialRoutings) {
  test::Rng rng(test::fresh_seed());
  const struct { int64_t C; int k; int E; } shapes[] = {
      {512, 8, 32}, {16, 8, 32}, {1, 1, 1}, {4096, 8, 256}, {3, 2, 256}, {129, 1, 1},
      {1, 8, 8}, {4096, 8, 32}, {512, 8, 128}, {37, 2, 4}, {2, 4, 300},
  };
  for (const auto& sh : shapes) {
    const int64_t mcap = layout::m_cap(sh.C, sh.k, sh.E);
    const int64_t R = sh.C * sh.k;
    int64_t worst = 0;
    for (const auto& counts : adversarial_counts(sh.C, sh.k, sh.E, rng)) {
      const auto ends = ends_of(counts);
      ASSERT_LE(rows_needed(counts), mcap) << "C " << sh.C << " k " << sh.k << " E " << sh.E;
      ASSERT_EQ(layout::used_rows(ends.data(), sh.E), rows_needed(counts));
      worst = std::max(worst, rows_needed(counts));
    }
    // Tight: with R <= E rows the bound is reached exactly (one row per expert); otherwise the
    // worst case found is within two tiles of it (M_cap rounds R + 127 E up to a tile).
    if (R <= sh.E) {
      EXPECT_EQ(worst, mcap) << "C " << sh.C << " k " << sh.k << " E " << sh.E;
    } else {
      EXPECT_GT(worst, mcap - 256) << "C " << sh.C << " k " << sh.k << " E " << sh.E;
    }
  }
}

// Exhaustive over every split of R rows into E = 2 or 3 experts: the true maximum of
// sum round_up(n_e, 128) never exceeds M_cap and is within two tiles of it.
TEST(MCap, BoundHoldsExhaustivelyForSmallExpertCounts) {
  for (int E = 2; E <= 3; ++E) {
    for (int64_t R = 1; R <= (E == 2 ? 1200 : 420); ++R) {
      int64_t worst = 0;
      if (E == 2) {
        for (int64_t a = 0; a <= R; ++a) worst = std::max(worst, round_up128(a) + round_up128(R - a));
      } else {
        for (int64_t a = 0; a <= R; ++a)
          for (int64_t b = 0; a + b <= R; ++b)
            worst = std::max(worst, round_up128(a) + round_up128(b) + round_up128(R - a - b));
      }
      const int64_t mcap = layout::m_cap(R, 1, E);  // C = R tokens, k = 1
      ASSERT_LE(worst, mcap) << "R " << R << " E " << E;
      ASSERT_GT(worst, mcap - 256) << "R " << R << " E " << E;
    }
  }
}

// ---- activation-scale layouts ---------------------------------------------------------------------
TEST(ScaleLayout, IndexFunctionsAreABijection) {
  for (int64_t mpad : {4, 132, 4224}) {
    for (int64_t groups : {1, 2, 4, 7, 16, 56}) {
      std::vector<char> hit(groups * mpad, 0);
      for (int64_t r = 0; r < mpad; ++r)
        for (int64_t g = 0; g < groups; ++g) {
          const int64_t i = layout::fp32_scale_index(r, g, mpad);
          ASSERT_TRUE(i >= 0 && i < groups * mpad);
          ASSERT_EQ(hit[i]++, 0) << "fp32 index reused";
        }
      const int64_t words = layout::ue8m0_words_per_row(groups);
      ASSERT_EQ(words, (groups + 3) / 4);
      std::vector<char> byte_hit(words * mpad * 4, 0);
      for (int64_t r = 0; r < mpad; ++r)
        for (int64_t g = 0; g < groups; ++g) {
          const int64_t w = layout::ue8m0_word_index(r, g, mpad);
          const int b = layout::ue8m0_byte_of(g);
          ASSERT_TRUE(w >= 0 && w < words * mpad && b >= 0 && b < 4);
          ASSERT_EQ(w % mpad, r);  // MN-major: consecutive rows are consecutive words
          ASSERT_EQ(byte_hit[w * 4 + b]++, 0) << "ue8m0 byte reused";
        }
      EXPECT_EQ(ref::scale_elems(ScaleFormat::kFp32, mpad, groups * 128), groups * mpad);
      EXPECT_EQ(ref::scale_elems(ScaleFormat::kFp32Pow2, mpad, groups * 128), groups * mpad);
      EXPECT_EQ(ref::scale_elems(ScaleFormat::kUe8m0Packed, mpad, groups * 128), words * mpad);
    }
  }
}

// store_scale of every (row, group) in random order, then load_scale of all of them.
void round_trip(ScaleFormat f, int64_t rows, int64_t mpad, int64_t groups, test::Rng& rng) {
  std::vector<int32_t> buf(ref::scale_elems(f, mpad, groups * 128), 0);
  std::vector<float> want(rows * groups);
  std::vector<int64_t> order(rows * groups);
  for (int64_t i = 0; i < rows * groups; ++i) order[i] = i;
  std::shuffle(order.begin(), order.end(), rng);
  std::uniform_real_distribution<float> mant(1.0f, 2.0f);
  for (int64_t i : order) {
    const int64_t r = i / groups, g = i % groups;
    const int e = static_cast<int>(rng() % 60) - 40;  // 2^-40 .. 2^19
    const float s = f == ScaleFormat::kFp32 ? std::ldexp(mant(rng), e) : std::ldexp(1.0f, e);
    want[i] = s;
    ref::store_scale(f, buf.data(), mpad, r, g, s);
  }
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t g = 0; g < groups; ++g)
      ASSERT_EQ(ref::load_scale(f, buf.data(), mpad, r, g), want[r * groups + g])
          << "format " << int(f) << " row " << r << " group " << g;
  if (f == ScaleFormat::kUe8m0Packed) {
    // Groups past the last one of a partial word stay 0; rows past `rows` are untouched.
    const int64_t words = layout::ue8m0_words_per_row(groups);
    for (int64_t r = 0; r < mpad; ++r)
      for (int64_t w = 0; w < words; ++w) {
        uint32_t word;
        std::memcpy(&word, &buf[w * mpad + r], 4);
        for (int b = 0; b < 4; ++b) {
          const bool live = r < rows && w * 4 + b < groups;
          if (!live) {
            ASSERT_EQ((word >> (8 * b)) & 0xFF, 0u) << "row " << r << " word " << w << " byte " << b;
          }
        }
      }
  } else {
    for (int64_t r = rows; r < mpad; ++r)
      for (int64_t g = 0; g < groups; ++g) ASSERT_EQ(buf[g * mpad + r], 0);
  }
}

TEST(ScaleLayout, StoreLoadRoundTripAllFormats) {
  test::Rng rng(test::fresh_seed());
  for (ScaleFormat f : {ScaleFormat::kFp32, ScaleFormat::kFp32Pow2, ScaleFormat::kUe8m0Packed})
    for (int64_t groups : {1, 3, 4, 7, 56}) round_trip(f, 37, 40, groups, rng);
}

TEST(ScaleLayout, Ue8m0StoresTheCeilingExponent) {
  std::vector<int32_t> buf(ref::scale_elems(ScaleFormat::kUe8m0Packed, 4, 5 * 128), 0);
  ref::store_scale(ScaleFormat::kUe8m0Packed, buf.data(), 4, 1, 4, 3.0f);  // word 1, byte 0
  ref::store_scale(ScaleFormat::kUe8m0Packed, buf.data(), 4, 1, 2, 1.0f);  // word 0, byte 2
  EXPECT_EQ(static_cast<uint32_t>(buf[1 * 4 + 1]), 129u);                  // 3 -> 2^2 = 2^(129-127)
  EXPECT_EQ(static_cast<uint32_t>(buf[0 * 4 + 1]), 127u << 16);
  EXPECT_EQ(ref::load_scale(ScaleFormat::kUe8m0Packed, buf.data(), 4, 1, 4), 4.0f);
}

}  // namespace
}  // namespace fp8moe
