// SM90 grouped GEMM against the CPU reference: relative error < 2e-3 on live rows, live vs padded
// bit-identical on live rows (the live schedule with claimed tiles and with the fixed stride),
// nothing written past an expert's last live tile by the live schedule.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "common/gpu.hpp"
#include "gemm/grouped_gemm.hpp"
#include "kernels/act_quant.cuh"
#include "layout/layout.cuh"
#include "numerics/numerics.cuh"
#include "reference/reference.hpp"
#include "schedulers/grouped_tiles.cuh"

namespace {

using fp8moe::gemm::GemmCluster;
using fp8moe::gemm::GroupedGemmArgs;
using fp8moe::layout::Schedule;
using fp8moe::test::DeviceBuffer;
namespace layout = fp8moe::layout;
namespace num = fp8moe::num;

constexpr uint16_t kPoison = 0xFFFF;  // BF16 NaN: a written output can never look like poison

uint8_t random_fp8(std::mt19937_64& rng) {
  for (;;) {
    const uint8_t c = static_cast<uint8_t>(rng());
    if ((c & 0x7F) != 0x7F) return c;  // no NaN codes in live data
  }
}

struct GemmCase {
  int n, k;
  std::vector<int32_t> counts;  // live rows per expert
  int64_t extra_tail_tiles = 1;  // dead 128-row tiles after the last expert (capacity slack)
  GemmCluster cluster = GemmCluster::kAuto;  // kernel variant of the live run
  int block_n = 0;  // the live run's tile width (GroupedGemmArgs::block_n; 0: the rule)
  bool d_evict_last = false;  // the live runs' GroupedGemmArgs::d_evict_last
};

struct GemmRun {
  std::vector<uint16_t> live, live_fixed, padded, expect;
  fp8moe::ref::Permutation perm;
  bool dynamic = false;      // the live run claimed its tiles from a counter
  int32_t claimed = 0;       // the counter after that run
  int64_t live_tiles = 0;    // tiles of the live run's schedule
};

// Tiles the live schedule visits with single CTAs: ceil(n_e / 128) x ceil(N / BN) per expert, BN
// as the kernel chooses it (block_n 0: on the device from the live rows, sched::wide_tiles, where
// at 192 an expert with 129..192 rows takes ceil(N / 128) tall tiles instead).
int64_t live_tiles(const fp8moe::ref::Permutation& p, int n, int block_n) {
  const auto m = fp8moe::sched::touched_tiles(p.counts.data(), static_cast<int>(p.counts.size()));
  const bool tall = block_n == 0 && fp8moe::sched::wide_tiles(m.m_tiles, m.touched);  // (the auto kernel at 192)
  if (block_n == 0) block_n = tall ? 192 : 128;
  int64_t tiles = 0;
  for (const int32_t rows : p.counts) {
    const int64_t m_tiles = layout::ceil_div(rows, 128);
    if (tall && rows > 128 && rows <= 192)
      tiles += layout::ceil_div(n, 128);
    else
      tiles += m_tiles * layout::ceil_div(n, block_n);
  }
  return tiles;
}

// Random operands of one grouped GEMM (N x K per expert, `counts` live rows per expert, then
// `extra_tail_tiles` dead 128-row tiles), on the host and the device: A with NaN codes and scales
// in its gap rows, B and its scales; `scale_b` may change the B scales before they are uploaded.
struct GemmOperands {
  fp8moe::ref::Permutation perm;
  std::vector<uint8_t> a, b;
  std::vector<float> a_scale, b_scale;
  DeviceBuffer<uint8_t> d_a, d_b;
  DeviceBuffer<float> d_as, d_bs;
  DeviceBuffer<int32_t> d_ends, d_rows;

  template <typename ScaleB>
  GemmOperands(int n, int k, const std::vector<int32_t>& counts, int64_t extra_tail_tiles, ScaleB scale_b) {
    const int num_experts = static_cast<int>(counts.size());
    std::mt19937_64 rng(fp8moe::test::fresh_seed());
    auto& p = perm;
    p.counts = counts;
    p.ends.resize(num_experts);
    layout::ends_from_counts(p.counts.data(), num_experts, p.ends.data());
    p.m_cap = layout::used_rows(p.ends.data(), num_experts) + extra_tail_tiles * layout::kTileM;
    p.m_pad = layout::m_pad(p.m_cap);
    p.row_expert.resize(p.m_cap);
    layout::padded_row_expert(p.ends.data(), num_experts, p.m_cap, p.row_expert.data());

    const int64_t groups = k / 128;
    a.resize(p.m_cap * k);
    a_scale.resize(groups * p.m_pad);
    std::uniform_real_distribution<float> scale_dist(1e-3f, 1e-2f);
    for (int64_t row = 0; row < p.m_cap; ++row) {
      const bool live_row = p.row_expert[row] >= 0;
      for (int64_t i = 0; i < k; ++i) a[row * k + i] = live_row ? random_fp8(rng) : 0x7F;  // NaN in gaps
      for (int64_t g = 0; g < groups; ++g)
        a_scale[layout::fp32_scale_index(row, g, p.m_pad)] = live_row ? scale_dist(rng) : NAN;
    }
    b.resize(static_cast<size_t>(num_experts) * n * k);
    for (auto& v : b) v = random_fp8(rng);
    b_scale.resize(static_cast<size_t>(num_experts) * (n / 128) * groups);
    for (auto& v : b_scale) v = scale_dist(rng);
    scale_b(b_scale);

    d_a = DeviceBuffer<uint8_t>(a.size());
    d_b = DeviceBuffer<uint8_t>(b.size());
    d_as = DeviceBuffer<float>(a_scale.size());
    d_bs = DeviceBuffer<float>(b_scale.size());
    d_ends = DeviceBuffer<int32_t>(num_experts);
    d_rows = DeviceBuffer<int32_t>(p.m_cap);
    d_a.upload(a);
    d_b.upload(b);
    d_as.upload(a_scale);
    d_bs.upload(b_scale);
    d_ends.upload(p.ends);
    d_rows.upload(p.row_expert);
  }
  // Arguments of the live schedule on these operands (D, width and counter left to the caller).
  GroupedGemmArgs live_args(int n, int k) const {
    GroupedGemmArgs args;
    args.a = d_a.ptr;
    args.a_scale = d_as.ptr;
    args.b = d_b.ptr;
    args.b_scale = d_bs.ptr;
    args.ends = d_ends.ptr;
    args.row_expert = d_rows.ptr;
    args.m_cap = perm.m_cap;
    args.m_pad = perm.m_pad;
    args.n = n;
    args.k = k;
    args.num_experts = static_cast<int>(perm.counts.size());
    args.schedule = Schedule::kLive;
    return args;
  }
};

// Builds random operands for `c`, runs both schedules and the reference.
void run_case(const GemmCase& c, GemmRun& r) {
  const int num_experts = static_cast<int>(c.counts.size());
  GemmOperands ops(c.n, c.k, c.counts, c.extra_tail_tiles, [](std::vector<float>&) {});
  if (::testing::Test::HasFatalFailure()) return;
  r.perm = ops.perm;
  const auto& p = r.perm;
  DeviceBuffer<uint16_t> d_live(p.m_cap * c.n), d_fixed(p.m_cap * c.n), d_padded(p.m_cap * c.n);
  DeviceBuffer<int32_t> d_counter(1);
  d_live.poison(0xFF);
  d_fixed.poison(0xFF);
  d_padded.poison(0xFF);
  CUDA_OK(cudaMemset(d_counter.ptr, 0, sizeof(int32_t)));

  GroupedGemmArgs args = ops.live_args(c.n, c.k);
  args.d = d_live.ptr;
  args.cluster = c.cluster;
  args.block_n = c.block_n;
  args.d_evict_last = c.d_evict_last;
  if (c.cluster == GemmCluster::kPairM) {  // the variant asked for is the one that runs
    const auto info = fp8moe::gemm::sm90_fp8_grouped_gemm_1d2d_info(args);
    EXPECT_TRUE(info.cluster == 2 && info.pair_m) << "M-pair clusters not selected";
  }
  // The live schedule twice: tiles claimed from a counter (what the pipeline runs), then the fixed
  // stride; both must match the padded baseline bit for bit.
  args.tile_counter = d_counter.ptr;
  const auto info = fp8moe::gemm::sm90_fp8_grouped_gemm_1d2d_info(args);
  if (c.block_n) EXPECT_EQ(info.block_n, c.block_n) << "the tile width asked for is not the one that runs";
  r.dynamic = info.dynamic;
  r.live_tiles = live_tiles(p, c.n, info.block_n);
  CUDA_OK(fp8moe::gemm::sm90_fp8_grouped_gemm_1d2d(args, nullptr));
  args.tile_counter = nullptr;
  args.d = d_fixed.ptr;
  CUDA_OK(fp8moe::gemm::sm90_fp8_grouped_gemm_1d2d(args, nullptr));
  args.d = d_padded.ptr;
  args.schedule = Schedule::kPadded;
  args.cluster = GemmCluster::kAuto;
  CUDA_OK(fp8moe::gemm::sm90_fp8_grouped_gemm_1d2d(args, nullptr));
  CUDA_OK(cudaDeviceSynchronize());
  r.live = d_live.download();
  r.live_fixed = d_fixed.download();
  r.padded = d_padded.download();
  r.claimed = d_counter.download()[0];

  r.expect.assign(p.m_cap * c.n, 0);
  fp8moe::ref::grouped_gemm(p, num_experts, ops.a.data(), ops.a_scale.data(), layout::ScaleFormat::kFp32, ops.b.data(),
                            ops.b_scale.data(), c.n, c.k, r.expect.data());
}

void check_case(const GemmCase& c) {
  GemmRun r;
  run_case(c, r);
  if (::testing::Test::HasFatalFailure()) return;
  const auto& p = r.perm;
  // SPEC section 4: the live schedule may write the gap rows of an expert's last live tile (it
  // now stores live rows only; either passes), and
  // nothing past it.
  std::vector<bool> in_live_tile(p.m_cap, false);
  for (size_t e = 0; e < p.ends.size(); ++e) {
    const int64_t start = layout::expert_start(p.ends.data(), static_cast<int>(e));
    for (int64_t row = start; row < layout::round_up(p.ends[e], layout::kTileM) && p.ends[e] > start; ++row)
      in_live_tile[row] = true;
  }
  double err2 = 0, ref2 = 0;
  int64_t not_identical = 0, poison_lost = 0, unwritten = 0;
  for (int64_t row = 0; row < p.m_cap; ++row) {
    const bool live_row = p.row_expert[row] >= 0;
    for (int64_t col = 0; col < c.n; ++col) {
      const int64_t i = row * c.n + col;
      if (!live_row) {
        if (!in_live_tile[row]) poison_lost += r.live[i] != kPoison;
        continue;
      }
      unwritten += r.live[i] == kPoison;
      not_identical += r.live[i] != r.padded[i];
      const double got = num::float_from_bf16_bits(r.live[i]);
      const double want = num::float_from_bf16_bits(r.expect[i]);
      err2 += (got - want) * (got - want);
      ref2 += want * want;
    }
  }
  EXPECT_EQ(unwritten, 0) << "live rows left unwritten";
  EXPECT_EQ(poison_lost, 0) << "live schedule wrote past an expert's last live tile";
  EXPECT_EQ(not_identical, 0) << "live and padded differ on live rows";
  EXPECT_TRUE(r.live == r.live_fixed) << "claimed tiles and the fixed stride wrote different outputs";
  // Single CTAs claim every tile once (each CTA's first by its index, then one claim per tile it
  // ran, the last one past the end), so the counter ends at the tile count; clusters never claim.
  if (c.cluster == GemmCluster::kAuto) EXPECT_TRUE(r.dynamic) << "the live run did not use its counter";
  EXPECT_EQ(r.claimed, r.dynamic ? r.live_tiles : 0) << "tile claims";
  if (ref2 > 0) {
    const double rel = std::sqrt(err2 / ref2);
    EXPECT_LT(rel, 2e-3) << "relative error vs reference";
    std::printf("[ gemm     ] n=%d k=%d rows=%lld rel_err=%.3g\n", c.n, c.k,
                static_cast<long long>(p.m_cap), rel);
  }
}

TEST(Sm90GroupedGemm, SmallMixedExperts) {
  FP8MOE_REQUIRE_SM90();
  check_case({256, 512, {0, 1, 129, 256, 0, 64}});
}

TEST(Sm90GroupedGemm, EmptyRoutingWritesNothing) {
  FP8MOE_REQUIRE_SM90();
  check_case({256, 256, {0, 0, 0}, 2});
}

TEST(Sm90GroupedGemm, OneLiveRow) {
  FP8MOE_REQUIRE_SM90();
  check_case({384, 1024, {0, 0, 1, 0}});
}

TEST(Sm90GroupedGemm, AllRowsOneExpertAndTileBoundaries) {
  FP8MOE_REQUIRE_SM90();
  check_case({256, 384, {0, 1000, 0, 128, 257, 384}});
}

TEST(Sm90GroupedGemm, SeedGemm1DecodeShape) {  // N = 2I = 4096, K = H = 7168
  FP8MOE_REQUIRE_SM90();
  check_case({4096, 7168, {4, 0, 3, 5, 1, 7, 2, 6}});
}

TEST(Sm90GroupedGemm, SeedGemm2DecodeShape) {  // N = H = 7168, K = I = 2048
  FP8MOE_REQUIRE_SM90();
  check_case({7168, 2048, {4, 0, 3, 5, 1, 7, 2, 6}});
}

// Tiles with 17..64 live rows: the live kernel splits the tile's columns between its two math
// warpgroups (16 rows or fewer, and 65 or more, keep the usual split by rows): still equal to the
// reference and bit-identical to the padded baseline.
TEST(Sm90GroupedGemm, SmallTilesSplitColumnsBetweenWarpgroups) {
  FP8MOE_REQUIRE_SM90();
  check_case({4096, 7168, {17, 40, 64, 16, 65, 0, 33, 1}});
  check_case({7168, 2048, {64, 17, 128, 50}});
}

// D's copied-out rows written with an L2 evict_last policy (the pipeline's GEMM2 at decode):
// decode tiles, column-split tiles and full 128-row tiles of the 128-wide body, the same bits.
TEST(Sm90GroupedGemm, EvictLastStoresMatchPadded) {
  FP8MOE_REQUIRE_SM90();
  GemmCase decode{7168, 2048, {4, 0, 3, 5, 1, 7, 2, 6}};
  decode.d_evict_last = true;
  check_case(decode);
  GemmCase mixed{4096, 1024, {17, 40, 64, 16, 65, 0, 33, 1, 128}};  // (one M-tile per expert: 128 wide)
  mixed.d_evict_last = true;
  check_case(mixed);
}

// More than 192 workspace rows per expert (beyond the 127 of alignment): the live schedule takes
// 192-wide tiles (straddling two B-scale blocks, partial last tile) while the padded one stays at
// 128: still bit-identical.
TEST(Sm90GroupedGemm, PrefillTileWidthsMatchPadded) {
  FP8MOE_REQUIRE_SM90();
  check_case({4096, 1024, {700, 1, 650, 0}, 4});
  check_case({7168, 512, {600, 700}, 2});
  check_case({640, 384, {1100, 5}, 1});
}

// Below capacities where the host fixes the width, the live kernel chooses it on the device from
// the live rows (sched::wide_tiles): experts averaging more than one 128-row M-tile take 192-wide
// tiles (including a partial last N tile), decode-like routing 128 (with the column split).
// Either way: equal to the reference and bit-identical to the padded baseline.
TEST(Sm90GroupedGemm, AutoWidthFollowsLiveRows) {
  FP8MOE_REQUIRE_SM90();
  check_case({4096, 1024, {140, 115, 130, 150}});  // 6 M-tiles, 4 experts: 192
  check_case({7168, 512, {150, 0, 129, 40}});      // 5 M-tiles, 3 experts: 192, partial last N tile
  check_case({4096, 1024, {40, 100, 0, 17}});      // one M-tile each: 128
}

// Tall tiles (the auto-width kernel at 192 wide): an expert with 129..192 rows is computed in
// 128-wide tiles of all its rows, each warpgroup its 64 rows and half the columns of rows 128..
// (a 64-row box: TMA stores when all 64 are live, else copied row by row; a 16-row box for up to
// 16): experts of 129, 144, 150 and 192 rows; 193, 320 and 449 keep 128-row tiles. Up to 32 rows
// past 128 are computed with swapped operands (rounded up to 16 or 32): every count around those
// buckets, at GEMM1's and GEMM2's seed shapes.
TEST(Sm90GroupedGemm, TallTilesMatchPadded) {
  FP8MOE_REQUIRE_SM90();
  check_case({4096, 1024, {129, 192, 0, 150, 193, 320, 144, 449}});
  check_case({7168, 2048, {150, 192, 129}});
  check_case({640, 1024, {140, 190, 64}});  // partial last 192-wide tile of the 64-row expert
  check_case({4096, 1024, {129, 143, 144, 145, 159, 160, 161, 176, 177, 100}});
  check_case({7168, 2048, {130, 160, 161, 145, 0, 131}});
}

// 2-CTA clusters (opt-in): N-neighbours sharing A, M-neighbours sharing B. Experts with an odd
// number of 128-row tiles leave the second CTA of their last M-pair without rows (it only sends
// its half of B); decode shapes leave it idle on every tile. Both widths, both still bit-identical
// to the single-CTA padded baseline and within tolerance of the reference.
TEST(Sm90GroupedGemm, ClusterPairsMatchSingleCtas) {
  FP8MOE_REQUIRE_SM90();
  for (GemmCluster cluster : {GemmCluster::kPairN, GemmCluster::kPairM}) {
    SCOPED_TRACE(cluster == GemmCluster::kPairN ? "pairs along N" : "pairs along M");
    check_case({4096, 1024, {700, 1, 650, 0}, 4, cluster});        // 192 wide
    check_case({640, 384, {1100, 5, 300}, 1, cluster});            // 192 wide, partial last N tile
    check_case({256, 512, {0, 1, 129, 256, 0, 64, 385}, 1, cluster});  // 128 wide
    check_case({7168, 2048, {4, 0, 3, 5, 1, 7, 2, 6}, 1, cluster});   // decode: one M tile per expert
  }
}

// 256-wide tiles (N a multiple of 256): each warpgroup computes its 64 rows as four 64-column
// quarters, two wgmma groups in flight, with a 3-stage ring and a 64 KB staging tile. Prefill-like
// experts, an expert of one row and ones ending on and just past a tile boundary, a decode-like
// routing and the Qwen3-30B GEMM shapes: equal to the reference and bit-identical to the padded
// baseline (128 wide).
TEST(Sm90GroupedGemm, WideTilesMatchPadded) {
  FP8MOE_REQUIRE_SM90();
  check_case({4096, 1024, {700, 1, 650, 0}, 4, GemmCluster::kAuto, 256});
  check_case({7168, 512, {600, 128, 129, 64, 0, 16}, 2, GemmCluster::kAuto, 256});
  check_case({512, 384, {1100, 5, 256, 257}, 1, GemmCluster::kAuto, 256});
  check_case({7168, 2048, {4, 0, 3, 5, 1, 7, 2, 6}, 1, GemmCluster::kAuto, 256});
  std::vector<int32_t> counts(128);
  std::mt19937 rng(11);
  for (auto& v : counts) v = static_cast<int32_t>(rng() % 300);
  check_case({1536, 2048, counts, 1, GemmCluster::kAuto, 256});
  check_case({2048, 768, counts, 1, GemmCluster::kAuto, 256});
}

// A 256-wide live tile's 64-row half with 1..48 live rows is computed with swapped operands (the
// weights as wgmma's M side, the rows rounded up to 16, 32 or 48 as N) and stored from a
// transposed fragment: every row count of a half around those buckets (the first half alone,
// the second half after 64 full rows, and an expert's third tile), at GEMM2's and GEMM1's
// Qwen3-30B shapes: equal to the reference and bit-identical to the padded baseline (64-row
// halves, 128 wide), nothing written past an expert's rows.
TEST(Sm90GroupedGemm, SwappedPartialHalvesMatchPadded) {
  FP8MOE_REQUIRE_SM90();
  const std::vector<int32_t> counts = {1,  15, 16, 17, 31, 32, 33, 47, 48,  49,  63,  64,
                                       65, 80, 81, 96, 97, 112, 113, 127, 128, 304, 273, 0};
  check_case({2048, 768, counts, 1, GemmCluster::kAuto, 256});
  check_case({1536, 2048, counts, 1, GemmCluster::kAuto, 256});
}

// GEMM1 with the activation + quantization in its epilogue (GroupedGemmArgs::fused_act, 128 gate +
// 128 up columns per 256-wide tile): A2 and its scales must be exactly what act_quant writes from
// the unfused kernel's Y1 (the same tiles at 256 wide), for both activations and both SM90 scale
// formats, with claimed tiles and the fixed stride; no byte of Y1 and no A2 row or scale outside
// the live rows is written. One expert's gate weights are scaled up so that some |g| exceed
// activate_lane_fast's range (its exact fallback) and swiglu_oai's limit clamps.
void check_fused_act(int inter, int k, const std::vector<int32_t>& counts) {
  namespace kernels = fp8moe::kernels;
  const int n = 2 * inter;
  const GemmOperands ops(n, k, counts, 1, [&](std::vector<float>& b_scale) {
    for (int64_t i = 0; i < (inter / 128) * (k / 128); ++i) b_scale[i] *= 300.0f;  // expert 0's gate blocks
  });
  if (::testing::Test::HasFatalFailure()) return;
  const auto& p = ops.perm;
  DeviceBuffer<uint8_t> d_a2(p.m_cap * inter), d_a2_fused(p.m_cap * inter);
  DeviceBuffer<float> d_s2((inter / 128) * p.m_pad), d_s2_fused((inter / 128) * p.m_pad);
  DeviceBuffer<int32_t> d_counter(1);
  DeviceBuffer<uint16_t> d_y1(p.m_cap * n), d_y1_fused(p.m_cap * n);

  num::ActParams swiglu;
  swiglu.kind = num::ActKind::kSwigluOai;
  swiglu.alpha = 1.702f;
  swiglu.beta = 1.0f;
  swiglu.limit = 7.0f;
  for (const num::ActParams& act : {num::ActParams{}, swiglu}) {
    for (const bool pow2 : {false, true}) {
      for (const bool dynamic : {true, false}) {
        SCOPED_TRACE(std::string(act.kind == num::ActKind::kSilu ? "silu" : "swiglu_oai") + (pow2 ? ", fp32_pow2" : ", fp32") +
                     (dynamic ? ", claimed tiles" : ", fixed stride"));
        GroupedGemmArgs args = ops.live_args(n, k);
        args.block_n = 256;
        args.tile_counter = dynamic ? d_counter.ptr : nullptr;
        // Unfused: Y1, then act_quant on the live rows.
        d_y1.poison(0xFF);
        d_a2.poison(0xFF);
        d_s2.poison(0xFF);
        CUDA_OK(cudaMemset(d_counter.ptr, 0, sizeof(int32_t)));
        args.d = d_y1.ptr;
        ASSERT_FALSE(fp8moe::gemm::sm90_fp8_grouped_gemm_1d2d_info(args).fused_act);
        CUDA_OK(fp8moe::gemm::sm90_fp8_grouped_gemm_1d2d(args, nullptr));
        kernels::ActQuantParams q;
        q.m_cap = p.m_cap;
        q.intermediate = inter;
        q.num_experts = static_cast<int>(counts.size());
        q.ends = ops.d_ends.ptr;
        q.act = act;
        q.scale_format = pow2 ? layout::ScaleFormat::kFp32Pow2 : layout::ScaleFormat::kFp32;
        q.y1 = d_y1.ptr;
        q.a2 = d_a2.ptr;
        q.a2_scale = d_s2.ptr;
        CUDA_OK(kernels::launch_act_quant(q, nullptr));
        // Fused.
        fp8moe::gemm::FusedActQuant fused;
        fused.a2 = d_a2_fused.ptr;
        fused.a2_scale = d_s2_fused.ptr;
        fused.act = act;
        fused.pow2 = pow2;
        d_y1_fused.poison(0x5A);
        d_a2_fused.poison(0xFF);
        d_s2_fused.poison(0xFF);
        CUDA_OK(cudaMemset(d_counter.ptr, 0, sizeof(int32_t)));
        args.d = d_y1_fused.ptr;
        args.fused_act = &fused;
        const auto info = fp8moe::gemm::sm90_fp8_grouped_gemm_1d2d_info(args);
        ASSERT_TRUE(info.fused_act);
        EXPECT_EQ(info.block_n, 256);
        CUDA_OK(fp8moe::gemm::sm90_fp8_grouped_gemm_1d2d(args, nullptr));
        CUDA_OK(cudaDeviceSynchronize());

        const auto want_a2 = d_a2.download(), got_a2 = d_a2_fused.download();
        const auto want_s2 = d_s2.download(), got_s2 = d_s2_fused.download();
        int64_t live_codes = 0;
        for (int64_t row = 0; row < p.m_cap; ++row) live_codes += p.row_expert[row] >= 0;
        ASSERT_GT(live_codes, 0);
        int64_t bad_a2 = 0, bad_s2 = 0, gap_written = 0;
        for (int64_t row = 0; row < p.m_cap; ++row) {
          const bool live_row = p.row_expert[row] >= 0;
          for (int64_t i = 0; i < inter; ++i) {
            bad_a2 += got_a2[row * inter + i] != want_a2[row * inter + i];
            gap_written += !live_row && got_a2[row * inter + i] != 0xFF;
          }
        }
        for (size_t i = 0; i < want_s2.size(); ++i) {
          uint32_t w, g;
          std::memcpy(&w, &want_s2[i], 4);
          std::memcpy(&g, &got_s2[i], 4);
          bad_s2 += w != g;
        }
        EXPECT_EQ(bad_a2, 0) << "A2 codes differ from act_quant's";
        EXPECT_EQ(bad_s2, 0) << "A2 scales differ from act_quant's (or were written outside live rows)";
        EXPECT_EQ(gap_written, 0) << "A2 written outside live rows";
        const auto y1 = d_y1_fused.download();
        EXPECT_TRUE(std::all_of(y1.begin(), y1.end(), [](uint16_t v) { return v == 0x5A5A; })) << "Y1 written";
        if (dynamic) {
          const int64_t tiles = live_tiles(p, n, 256);
          EXPECT_EQ(d_counter.download()[0], tiles) << "tile claims";
        }
      }
    }
  }
}

TEST(Sm90GroupedGemm, FusedActQuantMatchesActQuant) {
  FP8MOE_REQUIRE_SM90();
  check_fused_act(384, 512, {700, 1, 650, 0, 129, 128, 257});  // 3 groups; one row; tile boundaries
  check_fused_act(2048, 1024, {300, 5, 64, 17});                 // the seed's I, decode-like and mid rows
  std::vector<int32_t> counts(48);
  std::mt19937 rng(13);
  for (auto& v : counts) v = static_cast<int32_t>(rng() % 300);
  check_fused_act(768, 2048, counts);  // Qwen3-30B's GEMM1 (48 of its 128 experts)
}

TEST(Sm90GroupedGemm, Qwen3_30B_Shapes) {  // E=128, H=2048, I=768
  FP8MOE_REQUIRE_SM90();
  std::vector<int32_t> counts(128);
  std::mt19937 rng(7);
  for (auto& v : counts) v = static_cast<int32_t>(rng() % 9);
  check_case({1536, 2048, counts});
  check_case({2048, 768, counts});
}

}  // namespace
