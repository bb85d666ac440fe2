// The SM90 GEMM's tile width follows the capacity, not the live tokens (a captured graph keeps its
// kernels): 192 columns where a full capacity gives an expert more than 192 rows on average
// (compute tiles), 128 at decode capacities (weight streaming), and always 128 for the padded
// baseline. The choice is host-only, so this runs without a GPU.
#include <gtest/gtest.h>

#include <cstdlib>

#include "gemm/grouped_gemm.hpp"
#include "layout/layout.cuh"

namespace fp8moe {
namespace {

int block_n(int capacity, int top_k, int experts, int n, layout::Schedule schedule) {
  gemm::GroupedGemmArgs a;
  a.m_cap = layout::m_cap(capacity, top_k, experts);
  a.m_pad = layout::m_pad(a.m_cap);
  a.n = n;
  a.k = 2048;
  a.num_experts = experts;
  a.schedule = schedule;
  a.cluster = gemm::GemmCluster::kSingle;
  return gemm::sm90_fp8_grouped_gemm_1d2d_info(a).block_n;
}

TEST(GemmTileWidth, FollowsRowsPerExpertAtFullCapacity) {
  if (std::getenv("FP8MOE_GEMM_BLOCK_N")) GTEST_SKIP() << "FP8MOE_GEMM_BLOCK_N overrides the choice";
  constexpr auto kLive = layout::Schedule::kLive;
  // DeepSeek-V3 EP=8 (E=32, k=8): 128 rows per expert at capacity 512, 1024 at 4096.
  EXPECT_EQ(block_n(512, 8, 32, 4096, kLive), 128);
  EXPECT_EQ(block_n(4096, 8, 32, 4096, kLive), 192);
  // Qwen3-30B-A3B (E=128, k=8): 32 rows per expert at 512, 256 at 4096.
  EXPECT_EQ(block_n(512, 8, 128, 1536, kLive), 128);
  EXPECT_EQ(block_n(4096, 8, 128, 1536, kLive), 192);
  EXPECT_EQ(block_n(4096, 8, 128, 2048, kLive), 192);
  // Near the boundary: 184 rows per expert stay at 128, 200 take 192.
  EXPECT_EQ(block_n(736, 8, 32, 4096, kLive), 128);
  EXPECT_EQ(block_n(800, 8, 32, 4096, kLive), 192);
  // Fewer capacity slots than experts: no underflow.
  EXPECT_EQ(block_n(1, 8, 128, 2048, kLive), 128);
  // The padded baseline keeps today's 128x128 tiles.
  EXPECT_EQ(block_n(4096, 8, 32, 4096, layout::Schedule::kPadded), 128);
}

}  // namespace
}  // namespace fp8moe
