// A tiny work-sharing loop for the CPU reference: items [0, n) are handed out one at a time to
// std::thread workers through an atomic counter. Each item must write disjoint output, so the
// result never depends on the number of threads or the order in which items run.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <thread>
#include <vector>

#include "layout/layout.cuh"

namespace fp8moe::ref::detail {

template <typename Fn>
void parallel_for(int64_t n, Fn&& fn) {
  if (n <= 0) return;
  const int64_t hw = std::max<int64_t>(1, std::thread::hardware_concurrency());
  const int64_t workers = std::min<int64_t>(hw, n);
  if (workers == 1) {
    for (int64_t i = 0; i < n; ++i) fn(i);
    return;
  }
  std::atomic<int64_t> next{0};
  auto work = [&] {
    for (int64_t i = next.fetch_add(1); i < n; i = next.fetch_add(1)) fn(i);
  };
  std::vector<std::thread> pool;
  pool.reserve(workers - 1);
  for (int64_t w = 1; w < workers; ++w) pool.emplace_back(work);
  work();
  for (auto& t : pool) t.join();
}

// Rows [start, end) of every expert, as (expert, first row, row count) chunks of at most max_rows.
struct RowChunk {
  int expert;
  int64_t row0;
  int64_t rows;
};
inline std::vector<RowChunk> live_row_chunks(const int32_t* ends, int num_experts, int64_t max_rows) {
  std::vector<RowChunk> chunks;
  for (int e = 0; e < num_experts; ++e) {
    const int64_t end = ends[e];
    for (int64_t r = layout::expert_start(ends, e); r < end; r += max_rows)
      chunks.push_back({e, r, std::min(max_rows, end - r)});
  }
  return chunks;
}

}  // namespace fp8moe::ref::detail
