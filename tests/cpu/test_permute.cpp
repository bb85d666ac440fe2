// ref::permute (SPEC section 2, step 2): counts, the prefix-sum layout, ascending (token, slot) row
// order, *num_tokens, expert_map, invalid ids.
#include <gtest/gtest.h>

#include <algorithm>
#include <climits>
#include <vector>

#include "common/data.hpp"
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

TEST(Permute, CapacityBelowTokensIsRejected) {
  std::vector<int32_t> ids(10, 0);
  EXPECT_THROW(ref::permute(shape(10, 9, 2, 1), ids.data(), nullptr, nullptr, 0), std::invalid_argument);
}

}  // namespace
}  // namespace fp8moe
