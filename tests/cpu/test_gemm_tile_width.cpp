// The SM90 GEMM's tile width: where a full capacity gives an expert more than 192 rows on average
// the host takes 192 columns (compute tiles), or 256 where N is a multiple of 256 but not of 192
// (192 would compute a partial last tile); below that the live schedule's kernel chooses on the
// device from the live rows (block_n 0 here; sched::wide_tiles, tested below), because a captured
// graph keeps its kernels while the routing changes; the padded baseline always takes 128. All
// host-only, so this runs without a GPU.
#include <gtest/gtest.h>

#include <cstdlib>
#include <vector>

#include "gemm/grouped_gemm.hpp"
#include "layout/layout.cuh"
#include "schedulers/grouped_tiles.cuh"

namespace fp8moe {
namespace {

// A GEMM's arguments at a full capacity (nothing is launched: no pointers).
gemm::GroupedGemmArgs args_at(int capacity, int top_k, int experts, int n, layout::Schedule schedule,
                              gemm::GemmCluster cluster) {
  gemm::GroupedGemmArgs a;
  a.m_cap = layout::m_cap(capacity, top_k, experts);
  a.m_pad = layout::m_pad(a.m_cap);
  a.n = n;
  a.k = 2048;
  a.num_experts = experts;
  a.schedule = schedule;
  a.cluster = cluster;
  return a;
}

int block_n(int capacity, int top_k, int experts, int n, layout::Schedule schedule,
            gemm::GemmCluster cluster = gemm::GemmCluster::kSingle) {
  return gemm::sm90_fp8_grouped_gemm_1d2d_info(args_at(capacity, top_k, experts, n, schedule, cluster)).block_n;
}

TEST(GemmTileWidth, FollowsRowsPerExpertAtFullCapacity) {
  if (std::getenv("FP8MOE_GEMM_BLOCK_N") || std::getenv("FP8MOE_GEMM_CLUSTER"))
    GTEST_SKIP() << "FP8MOE_GEMM_BLOCK_N / FP8MOE_GEMM_CLUSTER override the choice";
  constexpr auto kLive = layout::Schedule::kLive;
  constexpr int kOnDevice = 0;
  // DeepSeek-V3 EP=8 (E=32, k=8): 128 rows per expert at capacity 512, 1024 at 4096.
  EXPECT_EQ(block_n(512, 8, 32, 4096, kLive), kOnDevice);
  EXPECT_EQ(block_n(4096, 8, 32, 4096, kLive), 256);  // GEMM1: 4096 = 16 x 256 = 21.3 x 192
  EXPECT_EQ(block_n(4096, 8, 32, 7168, kLive), 256);  // GEMM2: 7168 = 28 x 256 = 37.3 x 192
  // Qwen3-30B-A3B (E=128, k=8): 32 rows per expert at 512, 256 at 4096.
  EXPECT_EQ(block_n(512, 8, 128, 1536, kLive), kOnDevice);
  EXPECT_EQ(block_n(4096, 8, 128, 1536, kLive), 192);  // 1536 = 8 x 192: no partial tile
  EXPECT_EQ(block_n(4096, 8, 128, 2048, kLive), 256);
  EXPECT_EQ(block_n(4096, 8, 128, 3072, kLive), 192);  // Qwen3-235B GEMM1 (and 12 x 256)
  EXPECT_EQ(block_n(4096, 8, 128, 640, kLive), 192);   // not a multiple of 256
  // Near the boundary: 184 rows per expert leave it to the device, 200 take the host's width.
  EXPECT_EQ(block_n(736, 8, 32, 4096, kLive), kOnDevice);
  EXPECT_EQ(block_n(800, 8, 32, 4096, kLive), 256);
  EXPECT_EQ(block_n(800, 8, 32, 1536, kLive), 192);
  // 256-wide tiles run as single CTAs only: 2-CTA clusters keep 192.
  EXPECT_EQ(block_n(4096, 8, 32, 4096, kLive, gemm::GemmCluster::kPairN), 192);
  EXPECT_EQ(block_n(4096, 8, 32, 4096, kLive, gemm::GemmCluster::kPairM), 192);
  // Fewer capacity slots than experts: no underflow.
  EXPECT_EQ(block_n(1, 8, 128, 2048, kLive), kOnDevice);
  // The padded baseline keeps today's 128x128 tiles.
  EXPECT_EQ(block_n(4096, 8, 32, 4096, layout::Schedule::kPadded), 128);
  EXPECT_EQ(block_n(512, 8, 32, 4096, layout::Schedule::kPadded), 128);
}

// GEMM1's activation epilogue (GroupedGemmArgs::fused_act) runs where the host fixes the width
// (prefill capacities), at 256 columns (128 gate + 128 up) even where N is a multiple of 192, or
// where 256 is forced; not on the padded baseline, clusters, a forced 128 or 192, or the auto kernel.
TEST(GemmTileWidth, FusedActivationAtPrefillCapacities) {
  if (std::getenv("FP8MOE_GEMM_BLOCK_N") || std::getenv("FP8MOE_GEMM_CLUSTER") || std::getenv("FP8MOE_FUSED_ACT"))
    GTEST_SKIP() << "FP8MOE_GEMM_BLOCK_N / FP8MOE_GEMM_CLUSTER / FP8MOE_FUSED_ACT override the choice";
  const gemm::FusedActQuant fused;  // (pointers unused: nothing is launched)
  auto info = [&](int capacity, int experts, int n, layout::Schedule schedule, bool with_fused,
                  gemm::GemmCluster cluster = gemm::GemmCluster::kSingle, int force = 0) {
    gemm::GroupedGemmArgs a = args_at(capacity, 8, experts, n, schedule, cluster);
    a.block_n = force;
    a.fused_act = with_fused ? &fused : nullptr;
    const gemm::GemmLaunchInfo got = gemm::sm90_fp8_grouped_gemm_1d2d_info(a);
    if (got.fused_act) EXPECT_EQ(got.block_n, 256) << "the epilogue runs on 128 gate + 128 up columns";
    return got;
  };
  constexpr auto kLive = layout::Schedule::kLive;
  auto seed = info(4096, 32, 4096, kLive, true);
  EXPECT_TRUE(seed.fused_act);
  EXPECT_EQ(seed.block_n, 256);
  auto qwen = info(4096, 128, 1536, kLive, true);  // 192 without the epilogue (1536 = 8 x 192)
  EXPECT_TRUE(qwen.fused_act);
  EXPECT_EQ(qwen.block_n, 256);
  EXPECT_EQ(info(4096, 128, 1536, kLive, false).block_n, 192);
  EXPECT_FALSE(info(4096, 128, 1536, kLive, false).fused_act);
  EXPECT_FALSE(info(512, 32, 4096, kLive, true).fused_act);  // the auto kernel (decode, 512/512)
  EXPECT_EQ(info(512, 32, 4096, kLive, true).block_n, 0);
  EXPECT_TRUE(info(512, 32, 4096, kLive, true, gemm::GemmCluster::kSingle, 256).fused_act);  // forced
  EXPECT_FALSE(info(4096, 32, 4096, kLive, true, gemm::GemmCluster::kSingle, 192).fused_act);
  EXPECT_FALSE(info(4096, 32, 4096, layout::Schedule::kPadded, true).fused_act);
  EXPECT_FALSE(info(4096, 32, 4096, kLive, true, gemm::GemmCluster::kPairN).fused_act);
  EXPECT_FALSE(info(4096, 32, 640, kLive, true).fused_act);  // N = 2I with I = 320: not a multiple of 128
}

// GroupedGemmArgs::d_evict_last takes effect (GemmLaunchInfo::d_in_l2, which the pipeline's drops
// in act_quant and the unpermutation follow) only where D is written by tiles that can be 128 wide:
// the auto kernel (decode, 512/512) and the padded 128-wide kernels, not the 192/256-wide
// prefill kernels nor GEMM1 with the activation epilogue (no D at all).
TEST(GemmTileWidth, KeepsDInL2OnlyWhere128WideTilesWriteIt) {
  if (std::getenv("FP8MOE_GEMM_BLOCK_N") || std::getenv("FP8MOE_GEMM_CLUSTER") || std::getenv("FP8MOE_FUSED_ACT"))
    GTEST_SKIP() << "FP8MOE_GEMM_BLOCK_N / FP8MOE_GEMM_CLUSTER / FP8MOE_FUSED_ACT override the choice";
  const gemm::FusedActQuant fused;  // (pointers unused: nothing is launched)
  auto in_l2 = [&](int capacity, int n, layout::Schedule schedule, bool evict_last, bool with_fused) {
    gemm::GroupedGemmArgs a = args_at(capacity, 8, 32, n, schedule, gemm::GemmCluster::kSingle);
    a.d_evict_last = evict_last;
    a.fused_act = with_fused ? &fused : nullptr;
    return gemm::sm90_fp8_grouped_gemm_1d2d_info(a).d_in_l2;
  };
  constexpr auto kLive = layout::Schedule::kLive;
  EXPECT_TRUE(in_l2(512, 7168, kLive, true, false));    // GEMM2 at decode: the auto kernel
  EXPECT_TRUE(in_l2(512, 4096, kLive, true, true));     // GEMM1 at decode: no epilogue there
  EXPECT_FALSE(in_l2(512, 7168, kLive, false, false));  // not asked for
  EXPECT_FALSE(in_l2(4096, 7168, kLive, true, false));  // 256 wide
  EXPECT_FALSE(in_l2(4096, 4096, kLive, true, true));   // the epilogue writes A2, not D
  EXPECT_TRUE(in_l2(4096, 7168, layout::Schedule::kPadded, true, false));  // 128 wide
}

// The device's rule: 192 columns once the touched experts average more than one 128-row M-tile.
TEST(GemmTileWidth, DeviceRuleFollowsLiveRows) {
  auto wide = [](const std::vector<int32_t>& counts) {
    const sched::TouchedTiles m = sched::touched_tiles(counts.data(), static_cast<int>(counts.size()));
    return sched::wide_tiles(m.m_tiles, m.touched);
  };
  EXPECT_FALSE(wide({4, 0, 3, 5, 1, 7, 2, 6}));     // decode: one M-tile per touched expert
  EXPECT_FALSE(wide({128, 128, 0, 128}));           // full single tiles
  EXPECT_TRUE(wide({129, 128, 0, 128}));            // one expert needs a second tile
  EXPECT_TRUE(wide({140, 115, 130, 150}));          // 512/512 of DeepSeek-V3 EP=8: ~128 per expert
  EXPECT_FALSE(wide({0, 0, 0}));                    // nothing live
  EXPECT_FALSE(wide(std::vector<int32_t>(128, 32)));  // Qwen3-30B at 512/512: 32 per expert
}

}  // namespace
}  // namespace fp8moe
