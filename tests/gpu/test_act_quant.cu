// Step 4 on the GPU (kernels/act_quant.cu) against the CPU reference, bit for bit, for both
// activations (swiglu_oai with a limit that clamps), all three scale layouts and both schedules.
// `live` must leave every byte outside live rows (gaps, tiles past the live ones, the m_pad tail)
// as poisoned; `padded` must equal `live` on live rows.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "kernels/act_quant.cuh"
#include "kernels_testing.hpp"

namespace {

using namespace fp8moe::test;
using fp8moe::layout::ScaleFormat;
using fp8moe::layout::Schedule;
namespace ref = fp8moe::ref;
namespace num = fp8moe::num;
namespace layout = fp8moe::layout;
namespace kernels = fp8moe::kernels;

num::ActParams silu() { return num::ActParams{}; }
num::ActParams swiglu_oai() {
  num::ActParams a;
  a.kind = num::ActKind::kSwigluOai;
  a.alpha = 1.702f;
  a.beta = 1.0f;
  a.limit = 1.5f;  // well inside the data's range: both clamps are exercised
  return a;
}

// Gate/up rows for every one of the m_cap rows. Besides random_rows' group shapes, some gate
// groups are zero (a zero output group) and some values are large (clamped by swiglu_oai).
std::vector<uint16_t> make_y1(Rng& rng, int64_t rows, int64_t inter) {
  std::vector<uint16_t> y1 = random_rows(rng, rows, 2 * inter);
  std::uniform_int_distribution<int> pick(0, 15);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t g = 0; g < inter / layout::kGroup; ++g)
      if (pick(rng) == 0)
        for (int i = 0; i < layout::kGroup; ++i) y1[r * 2 * inter + g * layout::kGroup + i] = 0;
  return y1;
}

// Runs both schedules for every format and activation and both poisons. discard_y1: the live run
// drops each Y1 line it has read from L2 (ActQuantParams::discard_y1), so Y1 is uploaded afresh
// before each run, over a NaN decoy in HBM (upload_over_decoy): a line dropped before all its
// readers had it would give them NaN.
void check_act_quant(const ref::Permutation& perm, int64_t inter, int64_t max_live_rows, Rng& rng,
                     bool discard_y1 = false) {
  const int E = static_cast<int>(perm.ends.size());
  const int64_t m_cap = perm.m_cap, m_pad = perm.m_pad, groups = layout::groups_of(inter);
  const std::vector<bool> live = live_row_mask(perm);
  const std::vector<uint16_t> y1 = make_y1(rng, m_cap, inter);
  Uploaded<uint16_t> d_y1(y1);
  Uploaded<int32_t> d_ends(perm.ends);
  DeviceBuffer<uint8_t> d_a2(m_cap * inter);

  for (const num::ActParams& act : {silu(), swiglu_oai()}) {
    for (ScaleFormat f : kAllFormats) {
      DeviceBuffer<int32_t> d_scale(ref::scale_elems(f, m_pad, inter));
      for (uint8_t poison : kPoisons) {
        SCOPED_TRACE(std::string(act.kind == num::ActKind::kSilu ? "silu" : "swiglu_oai") + ", format " +
                     format_name(f) + ", poison " + hex_bits(poison));
        std::vector<uint8_t> want_a2(d_a2.count, poison);
        std::vector<int32_t> want_scale(d_scale.count, poison_word(poison));
        ref::act_quant(perm, E, y1.data(), inter, act, f, want_a2.data(), want_scale.data());
        clear_missing_ue8m0_bytes(f, want_scale, m_pad, inter, live);

        kernels::ActQuantParams p;
        p.m_cap = m_cap;
        p.max_live_rows = max_live_rows;
        p.intermediate = inter;
        p.num_experts = E;
        p.ends = d_ends.ptr;
        p.act = act;
        p.scale_format = f;
        p.y1 = d_y1.ptr;
        p.a2 = d_a2.ptr;
        p.a2_scale = d_scale.ptr;

        // live: the whole buffers equal the reference's, poison included.
        d_a2.poison(poison);
        d_scale.poison(poison);
        p.schedule = Schedule::kLive;
        p.discard_y1 = discard_y1;
        if (discard_y1) upload_over_decoy(d_y1, y1);
        CUDA_OK(kernels::launch_act_quant(p, nullptr));
        CUDA_OK(cudaDeviceSynchronize());
        const std::vector<uint8_t> live_a2 = d_a2.download();
        const std::vector<int32_t> live_scale = d_scale.download();
        EXPECT_TRUE(same_bits(live_a2, want_a2, "a2 (live)"));
        EXPECT_TRUE(same_bits(live_scale, want_scale, "a2_scale (live)"));

        // padded: every row is written; live rows equal the reference and the live schedule.
        d_a2.poison(poison ^ 0x80);
        d_scale.poison(poison ^ 0x80);
        p.schedule = Schedule::kPadded;
        p.discard_y1 = false;
        if (discard_y1) d_y1.upload(y1);
        CUDA_OK(kernels::launch_act_quant(p, nullptr));
        CUDA_OK(cudaDeviceSynchronize());
        const std::vector<uint8_t> pad_a2 = d_a2.download();
        const std::vector<int32_t> pad_scale = d_scale.download();
        size_t bad_rows = 0;
        for (int64_t r = 0; r < m_cap; ++r) {
          if (!live[r]) continue;
          const auto row_begin = r * inter;
          bool same = std::equal(pad_a2.begin() + row_begin, pad_a2.begin() + row_begin + inter,
                                 want_a2.begin() + row_begin);
          const int64_t cols = f == ScaleFormat::kUe8m0Packed ? layout::ue8m0_words_per_row(groups) : groups;
          for (int64_t c = 0; c < cols; ++c) same = same && pad_scale[c * m_pad + r] == want_scale[c * m_pad + r];
          if (!same && bad_rows++ < 3) ADD_FAILURE() << "padded schedule differs on live row " << r;
        }
        EXPECT_EQ(bad_rows, 0u) << "live rows where padded differs from the reference";
      }
    }
  }
}

// Row counts with every kind of tile: empty experts, exactly 128, 129, 1, 255, 300.
TEST(ActQuant, MixedExpertSizes) {
  FP8MOE_REQUIRE_GPU();
  Rng rng(fresh_seed());
  const std::vector<int32_t> counts = {5, 0, 128, 129, 1, 0, 255, 300};
  // 1..6 groups a row: partly filled and full ue8m0 words, and (fp32 scales) warp items of four
  // groups that span two rows, or several (act_quant.cu's walk); 768 is Qwen3-30B's I.
  for (int64_t inter : {128, 256, 384, 512, 640, 768}) {
    SCOPED_TRACE("I " + std::to_string(inter));
    check_act_quant(permutation_from_counts(counts, 300, 4), inter, 300 * 4, rng);
  }
}

// No gap rows before any expert (every expert but the last fills whole tiles, empty ones between):
// live row i is row i, and the live kernel walks the rows as the padded one does (act_quant.cu).
// The last expert's partly filled tile and the rows after it must keep their poison.
TEST(ActQuant, GaplessExperts) {
  FP8MOE_REQUIRE_GPU();
  Rng rng(fresh_seed());
  check_act_quant(permutation_from_counts({128, 256, 0, 128, 77}, 300, 2), 384, 600, rng);
  check_act_quant(permutation_from_counts({0, 384}, 200, 2), 256, 400, rng);
}

TEST(ActQuant, RandomRouting) {
  FP8MOE_REQUIRE_GPU();
  Rng rng(fresh_seed());
  ref::Shape s;
  s.tokens = 280;
  s.capacity = 300;
  s.hidden = 256;
  s.intermediate = 512;
  s.num_experts = 6;
  s.top_k = 3;
  const std::vector<int32_t> ids = random_ids(rng, s.tokens, s.top_k, s.num_experts, 0.1, 0.0);
  const ref::Permutation perm = ref::permute(s, ids.data(), nullptr, nullptr, 0);
  check_act_quant(perm, s.intermediate, s.capacity * s.top_k, rng);
}

TEST(ActQuant, AllRowsOnOneExpert) {
  FP8MOE_REQUIRE_GPU();
  Rng rng(fresh_seed());
  check_act_quant(permutation_from_counts({0, 0, 260, 0}, 130, 2), 256, 260, rng);
}

TEST(ActQuant, OneLiveRow) {
  FP8MOE_REQUIRE_GPU();
  Rng rng(fresh_seed());
  check_act_quant(permutation_from_counts({0, 0, 0, 1, 0}, 64, 4), 256, 256, rng);
}

TEST(ActQuant, NoLiveRows) {
  FP8MOE_REQUIRE_GPU();
  Rng rng(fresh_seed());
  check_act_quant(permutation_from_counts({0, 0, 0, 0}, 64, 2), 256, 128, rng);
}

// Seed shape at decode: E=32, I=2048, k=8, 16 tokens of a 512-token capacity (M_cap 8192).
void check_seed_decode(Rng& rng, bool discard_y1) {
  ref::Shape s;
  s.tokens = 16;
  s.capacity = 512;
  s.hidden = 7168;
  s.intermediate = 2048;
  s.num_experts = 32;
  s.top_k = 8;
  const std::vector<int32_t> ids = random_routing(rng, s.tokens, s.top_k, s.num_experts);
  const ref::Permutation perm = ref::permute(s, ids.data(), nullptr, nullptr, 0);
  check_act_quant(perm, s.intermediate, s.capacity * s.top_k, rng, discard_y1);
}

TEST(ActQuant, SeedShapeDecode) {
  FP8MOE_REQUIRE_GPU();
  Rng rng(fresh_seed());
  check_seed_decode(rng, false);
}

// discard_y1 (GEMM1 keeps Y1's decode rows in L2 for act_quant, which drops each line once its
// warp has read it): the output must not change, for items within a row, spanning rows (I 384 and
// 768: 3 and 6 groups a row) and the packed format's walk, at the seed's decode shape (one item
// per warp), and with several items per warp (3180 rows of I = 2048: ~4 items for each of the
// H200's 3168 warps), where a warp's next item is loaded while it drops the current one's lines.
TEST(ActQuant, DiscardingY1KeepsTheOutput) {
  FP8MOE_REQUIRE_GPU();
  Rng rng(fresh_seed());
  for (int64_t inter : {128, 384, 768}) {
    SCOPED_TRACE("I " + std::to_string(inter));
    check_act_quant(permutation_from_counts({5, 0, 128, 129, 1, 0, 255, 300}, 300, 4), inter, 300 * 4, rng, true);
  }
  check_seed_decode(rng, true);
  SCOPED_TRACE("several items per warp");
  check_act_quant(permutation_from_counts({700, 0, 650, 800, 129, 1, 0, 900}, 1000, 4), 2048, 1000 * 4, rng, true);
}

TEST(ActQuant, RejectsBadShapes) {
  FP8MOE_REQUIRE_GPU();
  kernels::ActQuantParams p;
  p.m_cap = 128;
  p.intermediate = 200;  // not a multiple of 128
  EXPECT_EQ(kernels::launch_act_quant(p, nullptr), cudaErrorInvalidValue);
  p.intermediate = 256;
  p.num_experts = 4;  // live without ends
  EXPECT_EQ(kernels::launch_act_quant(p, nullptr), cudaErrorInvalidValue);
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);
}

}  // namespace
