// Step 2 of SPEC section 2: routing metadata (counts, the prefix-sum layout, each slot's row).
#include <algorithm>
#include <stdexcept>
#include <string>

#include "reference/reference.hpp"

namespace fp8moe::ref {
namespace {

constexpr int32_t kNotRouted = -1;
constexpr int32_t kInvalid = -2;

// Local expert of one top-k id: [0, E), kNotRouted (-1, or a global expert that is not local), or
// kInvalid (any other value; never used as an index).
int32_t local_expert(int32_t id, int num_experts, const int32_t* expert_map, int num_global) {
  if (id == -1) return kNotRouted;
  if (expert_map == nullptr) return (id >= 0 && id < num_experts) ? id : kInvalid;
  if (id < 0 || id >= num_global) return kInvalid;
  const int32_t local = expert_map[id];
  if (local == -1) return kNotRouted;
  // A map entry outside [0, E) is a broken map: treated like an invalid id, never an index.
  return (local >= 0 && local < num_experts) ? local : kInvalid;
}

}  // namespace

Permutation permute(const Shape& s, const int32_t* topk_ids, const int32_t* num_tokens,
                    const int32_t* expert_map, int num_global_experts) {
  if (s.capacity < s.tokens)
    throw std::invalid_argument("ref::permute: capacity " + std::to_string(s.capacity) +
                                " < tokens " + std::to_string(s.tokens));
  const int E = s.num_experts, k = s.top_k;
  const int64_t live = num_tokens ? std::clamp<int64_t>(*num_tokens, 0, s.tokens) : s.tokens;

  Permutation p;
  p.m_cap = layout::m_cap(s.capacity, k, E);
  p.m_pad = layout::m_pad(p.m_cap);
  p.counts.assign(E, 0);
  p.ends.assign(E, 0);
  p.row_of.assign(s.tokens * k, kNotRouted);

  // Resolve every live slot once; tokens t >= live are not read at all.
  std::vector<int32_t> local(live * k);
  for (int64_t i = 0; i < live * k; ++i) {
    local[i] = local_expert(topk_ids[i], E, expert_map, num_global_experts);
    if (local[i] == kInvalid) ++p.invalid_ids;
    if (local[i] >= 0) ++p.counts[local[i]];
  }
  layout::ends_from_counts(p.counts.data(), E, p.ends.data());

  // Rows inside an expert in ascending (token, slot) order: one pass in that order.
  std::vector<int64_t> next_row(E);
  for (int e = 0; e < E; ++e) next_row[e] = layout::expert_start(p.ends.data(), e);
  for (int64_t i = 0; i < live * k; ++i)
    if (local[i] >= 0) p.row_of[i] = static_cast<int32_t>(next_row[local[i]]++);

  p.row_expert.resize(p.m_cap);
  layout::padded_row_expert(p.ends.data(), E, p.m_cap, p.row_expert.data());
  return p;
}

}  // namespace fp8moe::ref
