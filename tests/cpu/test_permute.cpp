// ref::permute (SPEC section 2, step 2): counts, the prefix-sum layout, ascending (token, slot) row
// order, *num_tokens, expert_map, invalid ids.
#include <gtest/gtest.h>

#include <algorithm>
#include <climits>
#include <string>
#include <vector>

#include "common/data.hpp"
#include "kernels/permute.cuh"
#include "reference/reference.hpp"

namespace fp8moe {
namespace {

ref::Shape shape(int64_t T, int64_t C, int E, int k) {
  ref::Shape s;
  s.tokens = T, s.capacity = C, s.hidden = 128, s.intermediate = 128, s.num_experts = E, s.top_k = k;
  return s;
}

void expect_same(const ref::Permutation& a, const ref::Permutation& b) {
  EXPECT_EQ(a.m_cap, b.m_cap);
  EXPECT_EQ(a.m_pad, b.m_pad);
  EXPECT_EQ(a.counts, b.counts);
  EXPECT_EQ(a.ends, b.ends);
  EXPECT_EQ(a.row_of, b.row_of);
  EXPECT_EQ(a.row_expert, b.row_expert);
}

// The whole permutation rebuilt from its definition for local ids in [0, E) or -1.
void check_against_definition(const ref::Shape& s, const std::vector<int32_t>& ids, const ref::Permutation& p) {
  const int E = s.num_experts, k = s.top_k;
  ASSERT_EQ(p.m_cap, layout::m_cap(s.capacity, k, E));
  ASSERT_EQ(p.m_pad, (p.m_cap + 3) / 4 * 4);
  ASSERT_EQ(p.row_of.size(), size_t(s.tokens * k));
  ASSERT_EQ(p.row_expert.size(), size_t(p.m_cap));
  int64_t start = 0;
  std::vector<int32_t> row_expert(p.m_cap, -1);
  for (int e = 0; e < E; ++e) {
    // Slots routed to e, in ascending (token, slot) order, take rows start, start + 1, ...
    int64_t row = start;
    for (int64_t t = 0; t < s.tokens; ++t)
      for (int j = 0; j < k; ++j)
        if (ids[t * k + j] == e) {
          ASSERT_EQ(p.row_of[t * k + j], row) << "token " << t << " slot " << j << " expert " << e;
          row_expert[row++] = e;
        }
    ASSERT_EQ(p.counts[e], row - start) << "expert " << e;
    ASSERT_EQ(p.ends[e], row) << "expert " << e;
    start = (row + 127) / 128 * 128;
  }
  ASSERT_LE(start, p.m_cap);
  for (int64_t i = 0; i < s.tokens * k; ++i) {
    if (ids[i] < 0) {
      ASSERT_EQ(p.row_of[i], -1) << "slot " << i;
    }
  }
  ASSERT_EQ(p.row_expert, row_expert);
}

TEST(Permute, RowsFollowTokenSlotOrder) {
  test::Rng rng(test::fresh_seed());
  for (auto [T, E, k] : {std::tuple{300, 8, 4}, {37, 4, 2}, {1, 1, 1}, {200, 2, 2}, {64, 32, 8}}) {
    const auto s = shape(T, T + 5, E, k);
    auto ids = test::random_routing(rng, T, k, E);
    for (auto& id : ids)
      if (rng() % 7 == 0) id = -1;  // some slots not routed here
    const auto p = ref::permute(s, ids.data(), nullptr, nullptr, 0);
    EXPECT_EQ(p.invalid_ids, 0);
    check_against_definition(s, ids, p);
  }
}

TEST(Permute, AllTokensOnOneExpertAndEmptyRouting) {
  const auto s = shape(300, 300, 4, 1);
  std::vector<int32_t> ids(300, 2);
  auto p = ref::permute(s, ids.data(), nullptr, nullptr, 0);
  EXPECT_EQ(p.counts, (std::vector<int32_t>{0, 0, 300, 0}));
  EXPECT_EQ(p.ends, (std::vector<int32_t>{0, 0, 300, 384}));
  check_against_definition(s, ids, p);

  std::fill(ids.begin(), ids.end(), -1);
  p = ref::permute(s, ids.data(), nullptr, nullptr, 0);
  EXPECT_EQ(p.ends, (std::vector<int32_t>{0, 0, 0, 0}));
  EXPECT_TRUE(std::all_of(p.row_of.begin(), p.row_of.end(), [](int32_t r) { return r == -1; }));
  EXPECT_TRUE(std::all_of(p.row_expert.begin(), p.row_expert.end(), [](int32_t e) { return e == -1; }));
}

TEST(Permute, NumTokensCutsRouting) {
  test::Rng rng(test::fresh_seed());
  const int T = 50, E = 6, k = 3;
  const auto s = shape(T, 64, E, k);
  auto ids = test::random_routing(rng, T, k, E);
  ids[49 * k + 1] = 1000;  // an invalid id past *num_tokens is never read, so never counted
  for (int32_t n : {0, 1, 17, 49}) {
    const auto p = ref::permute(s, ids.data(), &n, nullptr, 0);
    auto cut = ids;
    std::fill(cut.begin() + int64_t(n) * k, cut.end(), -1);
    EXPECT_EQ(p.invalid_ids, 0) << "num_tokens " << n;
    check_against_definition(s, cut, p);
  }
  // Out-of-range counts clamp to [0, T].
  for (int32_t n : {-5, 0}) {
    const auto p = ref::permute(s, ids.data(), &n, nullptr, 0);
    EXPECT_EQ(p.ends.back(), 0);
  }
  ids[49 * k + 1] = -1;
  const int32_t big = 1 << 30;
  expect_same(ref::permute(s, ids.data(), &big, nullptr, 0), ref::permute(s, ids.data(), nullptr, nullptr, 0));
}

TEST(Permute, ExpertMapSelectsLocalExperts) {
  test::Rng rng(test::fresh_seed());
  const int G = 16, E = 4, T = 40, k = 4;
  std::vector<int32_t> map(G, -1);
  for (int g = 8; g < 12; ++g) map[g] = 11 - g;  // global 8..11 -> local 3..0
  const auto s = shape(T, T, E, k);
  const auto ids = test::random_routing(rng, T, k, G);
  std::vector<int32_t> local(ids.size());
  for (size_t i = 0; i < ids.size(); ++i) local[i] = map[ids[i]];
  const auto p = ref::permute(s, ids.data(), nullptr, map.data(), G);
  EXPECT_EQ(p.invalid_ids, 0);  // non-local experts are not errors
  check_against_definition(s, local, p);
  EXPECT_GT(p.ends.back(), 0);
}

TEST(Permute, InvalidIdsAreCountedAndIgnored) {
  test::Rng rng(test::fresh_seed());
  const int E = 5, T = 30, k = 2;
  const auto s = shape(T, T, E, k);
  auto ids = test::random_routing(rng, T, k, E);
  auto cleaned = ids;
  const int32_t bad[] = {E, E + 100, -2, INT_MIN, INT_MAX};
  for (int i = 0; i < 5; ++i) {
    ids[i * 5 + 1] = bad[i];
    cleaned[i * 5 + 1] = -1;
  }
  const auto p = ref::permute(s, ids.data(), nullptr, nullptr, 0);
  EXPECT_EQ(p.invalid_ids, 5);
  check_against_definition(s, cleaned, p);

  // With a map: ids outside [0, G) are invalid, and so is a map entry outside [0, E) other than -1.
  const int G = 8;
  std::vector<int32_t> map{0, 1, 2, 3, 4, -1, 7, -3};
  std::vector<int32_t> gids{0, 5, 8, -1, 6, 7, 4, -4};  // T = 4 tokens, k = 2
  const auto sm = shape(4, 4, E, k);
  const auto pm = ref::permute(sm, gids.data(), nullptr, map.data(), G);
  EXPECT_EQ(pm.invalid_ids, 4);  // 8, 6 (-> 7), 7 (-> -3), -4
  check_against_definition(sm, {0, -1, -1, -1, -1, -1, 4, -1}, pm);
}

// ---- the metadata kernels' work split (kernels/permute.cuh), replayed on the CPU ----------------

// What permute_count + permute_metadata compute when `ctas` CTAs of `warps` warps cut the live slots
// with metadata_slot_range: per-CTA counts, each CTA's base inside each expert, each warp's first
// row, then rows in ascending slot order inside every warp's range. ids are local (-1 = not routed).
struct Emulated {
  std::vector<int32_t> counts, ends, row_of;
};
Emulated emulate_metadata(const ref::Shape& s, const std::vector<int32_t>& ids, int64_t live_tokens, int ctas,
                          int warps, int min_per_warp = 1) {
  const int E = s.num_experts, k = s.top_k;
  const int live = static_cast<int>(live_tokens * k);
  auto expert_of = [&](int slot) { return ids[slot] >= 0 && ids[slot] < E ? ids[slot] : -1; };
  // permute_count: cta_counts[b][e]
  std::vector<std::vector<int32_t>> cta_counts(ctas, std::vector<int32_t>(E, 0));
  for (int b = 0; b < ctas; ++b)
    for (int w = 0; w < warps; ++w) {
      const kernels::SlotRange r = kernels::metadata_slot_range(live, b, ctas, w, warps, min_per_warp);
      for (int slot = r.lo; slot < r.hi; ++slot)
        if (expert_of(slot) >= 0) ++cta_counts[b][expert_of(slot)];
    }
  // permute_metadata<grid>: every CTA derives the same layout
  Emulated out;
  out.counts.assign(E, 0);
  out.ends.assign(E, 0);
  std::vector<int32_t> start(E);
  int64_t next = 0;
  for (int e = 0; e < E; ++e) {
    for (int b = 0; b < ctas; ++b) out.counts[e] += cta_counts[b][e];
    start[e] = static_cast<int32_t>(next);
    out.ends[e] = static_cast<int32_t>(next + out.counts[e]);
    next = layout::round_up(out.ends[e], 128);
  }
  out.row_of.assign(s.tokens * k, -1);
  for (int b = 0; b < ctas; ++b) {
    std::vector<int32_t> first(E);  // start_e + base of CTA b, then of each warp in turn
    for (int e = 0; e < E; ++e) {
      first[e] = start[e];
      for (int earlier = 0; earlier < b; ++earlier) first[e] += cta_counts[earlier][e];
    }
    for (int w = 0; w < warps; ++w) {
      const kernels::SlotRange r = kernels::metadata_slot_range(live, b, ctas, w, warps, min_per_warp);
      for (int slot = r.lo; slot < r.hi; ++slot)
        if (expert_of(slot) >= 0) out.row_of[slot] = first[expert_of(slot)]++;
    }
  }
  return out;
}

TEST(PermuteMetadataSplit, RangesCoverTheLiveSlotsOnceInOrder) {
  for (int live : {0, 1, 5, 127, 128, 1000, 4097, 32768, 40000})
    for (int ctas : {1, 2, 3, 7, 32, 128})
      for (int warps : {1, 3, 8, 32})
        for (int min_per_warp : {1, kernels::kMetadataBatchSlots}) {
          int expected_lo = 0, busy = 0;
          for (int b = 0; b < ctas; ++b)
            for (int w = 0; w < warps; ++w) {
              const kernels::SlotRange r = kernels::metadata_slot_range(live, b, ctas, w, warps, min_per_warp);
              ASSERT_EQ(r.lo, expected_lo) << "live " << live << " ctas " << ctas << " warps " << warps;
              ASSERT_LE(r.lo, r.hi);
              // The kernel sums the tables of the first busy warps only: an idle warp follows none.
              if (ctas == 1 && r.hi > r.lo) ASSERT_EQ(busy++, w) << "live " << live << " warps " << warps;
              if (ctas == 1 && r.hi > r.lo && r.hi < live) ASSERT_GE(r.hi - r.lo, min_per_warp);
              expected_lo = r.hi;
            }
          EXPECT_EQ(expected_lo, live) << "live " << live << " ctas " << ctas << " warps " << warps;
        }
}

TEST(PermuteMetadataSplit, OneCtaGivesEveryWarpABatch) {
  // Decode: one warp takes the slots; the seed's 512/512 (4096 slots) still uses all 32 warps.
  EXPECT_EQ(kernels::metadata_slot_range(128, 0, 1, 0, 32, kernels::kMetadataBatchSlots).hi, 128);
  EXPECT_EQ(kernels::metadata_slot_range(128, 0, 1, 1, 32, kernels::kMetadataBatchSlots).hi, 128);
  EXPECT_EQ(kernels::metadata_slot_range(129, 0, 1, 1, 32, kernels::kMetadataBatchSlots).lo, 128);
  for (int w = 0; w < 32; ++w) {
    const kernels::SlotRange r = kernels::metadata_slot_range(4096, 0, 1, w, 32, kernels::kMetadataBatchSlots);
    EXPECT_EQ(r.lo, 128 * w);
    EXPECT_EQ(r.hi, 128 * w + 128);
  }
}

TEST(PermuteMetadataSplit, AnyGridGivesTheReferencePermutation) {
  test::Rng rng(test::fresh_seed());
  struct Case {
    int64_t tokens;
    int experts, top_k;
  };
  for (const Case c : {Case{4096, 32, 8}, Case{600, 128, 8}, Case{37, 5, 3}, Case{300, 1, 1}, Case{1, 4, 2}}) {
    const auto s = shape(c.tokens, c.tokens, c.experts, c.top_k);
    auto ids = test::random_routing(rng, c.tokens, c.top_k, c.experts);
    for (auto& id : ids) {
      if (rng() % 11 == 0) id = -1;                // not routed here
      else if (rng() % 53 == 0) id = c.experts + 3;  // invalid: ignored
    }
    for (int32_t live : {static_cast<int32_t>(c.tokens), static_cast<int32_t>(c.tokens / 3)}) {
      const ref::Permutation want = ref::permute(s, ids.data(), &live, nullptr, 0);
      for (int ctas : {1, 2, 5, 32, 128})
        for (int warps : {1, 8, 32})
          for (int min_per_warp : {1, kernels::kMetadataBatchSlots}) {
            SCOPED_TRACE("T " + std::to_string(c.tokens) + " live " + std::to_string(live) + " ctas " +
                         std::to_string(ctas) + " warps " + std::to_string(warps) + " min " +
                         std::to_string(min_per_warp));
            const Emulated got = emulate_metadata(s, ids, live, ctas, warps, min_per_warp);
            ASSERT_EQ(got.counts, want.counts);
            ASSERT_EQ(got.ends, want.ends);
            ASSERT_EQ(got.row_of, want.row_of);
          }
    }
  }
}

TEST(PermuteMetadataSplit, GridOnlyAboveOneCtaOfSlots) {
  EXPECT_EQ(kernels::metadata_ctas(512, 8), 1);     // 4096 slots: one CTA, one batch per warp
  EXPECT_EQ(kernels::metadata_ctas(1, 1), 1);
  EXPECT_EQ(kernels::metadata_ctas(513, 8), 5);     // 4104 slots: ceil(4104 / 1024)
  EXPECT_EQ(kernels::metadata_ctas(4096, 8), 32);   // the seed prefill case
  EXPECT_EQ(kernels::metadata_ctas(16384, 8), 128);
  EXPECT_EQ(kernels::metadata_ctas(1 << 20, 8), kernels::kMetadataMaxCtas);
}

TEST(Permute, CapacityBelowTokensIsRejected) {
  std::vector<int32_t> ids(10, 0);
  EXPECT_THROW(ref::permute(shape(10, 9, 2, 1), ids.data(), nullptr, nullptr, 0), std::invalid_argument);
}

}  // namespace
}  // namespace fp8moe
