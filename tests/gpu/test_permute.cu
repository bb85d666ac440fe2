// Steps 1-2 on the GPU (kernels/permute.cu) against the CPU reference, bit for bit: counts, ends,
// row_of, row_expert, the invalid-id count, and A1 with its scales in all three layouts. Outputs
// are poisoned before every run; rows the permutation does not own must keep the poison.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>
#include <string>
#include <vector>

#include "kernels/permute.cuh"
#include "kernels_testing.hpp"

namespace {

using namespace fp8moe::test;
using fp8moe::layout::ScaleFormat;
namespace ref = fp8moe::ref;
namespace kernels = fp8moe::kernels;

// Device outputs of one permutation, sized for shape s.
struct PermuteBuffers {
  DeviceBuffer<int32_t> counts, ends, error, row_of, row_expert, a1_scale;
  DeviceBuffer<uint8_t> a1;
  PermuteBuffers(const ref::Shape& s, ScaleFormat f)
      : counts(s.num_experts),
        ends(s.num_experts),
        error(1),
        row_of(s.capacity * s.top_k),
        row_expert(fp8moe::layout::m_cap(s.capacity, s.top_k, s.num_experts)),
        a1_scale(ref::scale_elems(f, fp8moe::layout::m_pad(row_expert.count), s.hidden)),
        a1(row_expert.count * s.hidden) {}
  void poison(uint8_t byte) {
    counts.poison(byte);
    ends.poison(byte);
    error.poison(byte);
    row_of.poison(byte);
    row_expert.poison(byte);
    a1_scale.poison(byte);
    a1.poison(byte);
  }
};

// The metadata kernel's CTA counts worth testing for a shape: one CTA, the grid the pipeline
// would take, and a small odd grid (the grid needs E <= 3064, see permute.cuh).
std::vector<int> metadata_grids(const ref::Shape& s) {
  std::vector<int> grids{1};
  if (s.num_experts > 3064) return grids;
  for (int g : {3, kernels::metadata_ctas(s.capacity, s.top_k)})
    if (g > 1 && std::find(grids.begin(), grids.end(), g) == grids.end()) grids.push_back(g);
  return grids;
}

kernels::PermuteParams make_params(const ref::Shape& s, ScaleFormat f, const Routing& r, const int32_t* d_ids,
                                   const int32_t* d_num_tokens, const int32_t* d_map, const uint16_t* d_hidden,
                                   PermuteBuffers& b) {
  kernels::PermuteParams p;
  p.tokens = s.tokens;
  p.capacity = s.capacity;
  p.hidden_size = s.hidden;
  p.num_experts = s.num_experts;
  p.top_k = s.top_k;
  p.num_global_experts = r.num_global();
  p.topk_ids = d_ids;
  p.num_tokens = r.has_num_tokens ? d_num_tokens : nullptr;
  p.expert_map = r.expert_map.empty() ? nullptr : d_map;
  p.counts = b.counts.ptr;
  p.ends = b.ends.ptr;
  p.error_count = b.error.ptr;
  p.row_of = b.row_of.ptr;
  p.row_expert = b.row_expert.ptr;
  p.hidden = d_hidden;
  p.scale_format = f;
  p.a1 = b.a1.ptr;
  p.a1_scale = b.a1_scale.ptr;
  return p;
}

// Runs the permutation on the GPU for every scale format and both poisons, and compares everything
// it produces with the reference.
void check_permute(const ref::Shape& s, const Routing& r, const std::vector<uint16_t>& hidden) {
  const int64_t T = s.tokens, C = s.capacity, H = s.hidden;
  const int k = s.top_k;
  const ref::Permutation want = ref::permute(s, r.ids.data(), r.num_tokens_ptr(), r.map_ptr(), r.num_global());
  const std::vector<bool> live_rows = live_row_mask(want);
  Uploaded<int32_t> d_ids(r.ids), d_map(r.expert_map), d_num_tokens(std::vector<int32_t>{r.num_tokens});
  Uploaded<uint16_t> d_hidden(hidden);

  const std::vector<int> grids = metadata_grids(s);
  DeviceBuffer<int32_t> cta_counts(kernels::kMetadataMaxCtas * (s.num_experts + 1));
  // GEMM1's weights for the L2 warm-up (quantize_permuted before its wait): a performance hint that
  // must leave every output as it is. 128 rows per expert, 512 rows in all, two k-blocks.
  constexpr int kWarmRows = 128;
  DeviceBuffer<uint8_t> w13(static_cast<int64_t>(s.num_experts) * kWarmRows * H);
  for (ScaleFormat f : kAllFormats) {
    PermuteBuffers b(s, f);
    for (uint8_t poison : kPoisons) {
      // Every format and poison once; the metadata grids take turns (each also meets every poison).
      const int grid = grids[(static_cast<int>(f) + (poison != kPoisons[0])) % grids.size()];
      SCOPED_TRACE(std::string("format ") + format_name(f) + ", poison " + hex_bits(poison) + ", metadata CTAs " +
                   std::to_string(grid));
      std::vector<uint8_t> want_a1(b.a1.count, poison);
      std::vector<int32_t> want_scale(b.a1_scale.count, poison_word(poison));
      ref::quantize_permuted(s, want, hidden.data(), f, want_a1.data(), want_scale.data());
      clear_missing_ue8m0_bytes(f, want_scale, want.m_pad, H, live_rows);

      b.poison(poison);
      cta_counts.poison(poison);
      kernels::PermuteParams p = make_params(s, f, r, d_ids.ptr, d_num_tokens.ptr, d_map.ptr, d_hidden.ptr, b);
      p.metadata_ctas = grid;
      p.cta_counts = cta_counts.ptr;
      if (poison != kPoisons[0]) {  // every other run also warms "GEMM1's weights"
        p.w13 = w13.ptr;
        p.w13_rows = kWarmRows;
        p.warm_rows = 4 * kWarmRows;
        p.warm_kblocks = 2;
      }
      CUDA_OK(kernels::launch_permute(p, nullptr));
      CUDA_OK(cudaDeviceSynchronize());

      EXPECT_TRUE(same_bits(b.counts.download(), want.counts, "counts"));
      EXPECT_TRUE(same_bits(b.ends.download(), want.ends, "ends"));
      EXPECT_EQ(b.error.download()[0], want.invalid_ids) << "invalid-id count";
      const std::vector<int32_t> row_of = b.row_of.download();
      EXPECT_TRUE(same_bits(row_of, want.row_of, T * k, "row_of"));
      EXPECT_TRUE(all_equal(row_of, T * k, C * k, poison_word(poison), "row_of past T"));
      EXPECT_TRUE(same_bits(b.row_expert.download(), want.row_expert, "row_expert"));
      EXPECT_TRUE(same_bits(b.a1.download(), want_a1, "a1"));
      EXPECT_TRUE(same_bits(b.a1_scale.download(), want_scale, "a1_scale"));
    }
  }
}

TEST(Permute, RandomRoutingWithUnroutedAndInvalidSlots) {
  FP8MOE_REQUIRE_GPU();
  Rng rng(fresh_seed());
  const ref::Shape s = make_shape(300, 320, 384, 8, 4);  // 3 groups: a partly filled ue8m0 word
  Routing r;
  r.ids = random_ids(rng, s.tokens, s.top_k, s.num_experts, 0.1, 0.05);
  check_permute(s, r, random_rows(rng, s.tokens, s.hidden));
}

TEST(Permute, EmptyExperts) {
  FP8MOE_REQUIRE_GPU();
  Rng rng(fresh_seed());
  const ref::Shape s = make_shape(200, 256, 512, 8, 2);
  Routing r;
  const int32_t used[] = {1, 5, 6};  // experts 0, 2, 3, 4, 7 get nothing
  r.ids = random_routing(rng, s.tokens, s.top_k, 3);
  for (auto& id : r.ids) id = used[id];
  check_permute(s, r, random_rows(rng, s.tokens, s.hidden));
}

TEST(Permute, AllTokensOnOneExpert) {
  FP8MOE_REQUIRE_GPU();
  Rng rng(fresh_seed());
  const ref::Shape s = make_shape(257, 300, 256, 6, 2);  // 257 rows: three tiles of expert 4
  Routing r;
  r.ids.assign(s.tokens * s.top_k, -1);
  for (int64_t t = 0; t < s.tokens; ++t) r.ids[t * 2] = 4;
  check_permute(s, r, random_rows(rng, s.tokens, s.hidden));
}

TEST(Permute, OneLiveRow) {
  FP8MOE_REQUIRE_GPU();
  Rng rng(fresh_seed());
  const ref::Shape s = make_shape(37, 64, 256, 8, 4);
  Routing r;
  r.ids.assign(s.tokens * s.top_k, -1);
  r.ids[20 * 4 + 2] = 5;
  check_permute(s, r, random_rows(rng, s.tokens, s.hidden));
}

TEST(Permute, EmptyRouting) {
  FP8MOE_REQUIRE_GPU();
  Rng rng(fresh_seed());
  const ref::Shape s = make_shape(50, 64, 256, 4, 3);
  Routing r;
  r.ids.assign(s.tokens * s.top_k, -1);
  check_permute(s, r, random_rows(rng, s.tokens, s.hidden));
}

TEST(Permute, NumTokens) {
  FP8MOE_REQUIRE_GPU();
  Rng rng(fresh_seed());
  const ref::Shape s = make_shape(300, 300, 256, 8, 3);
  Routing r;
  // Invalid ids past the live count must be neither counted nor looked at.
  r.ids = random_ids(rng, s.tokens, s.top_k, s.num_experts, 0.05, 0.05);
  r.has_num_tokens = true;
  const std::vector<uint16_t> hidden = random_rows(rng, s.tokens, s.hidden);
  for (int32_t n : {123, 0, 1, 299, 300, 1000, -5}) {
    SCOPED_TRACE("num_tokens " + std::to_string(n));
    r.num_tokens = n;
    check_permute(s, r, hidden);
  }
}

TEST(Permute, ExpertMap) {
  FP8MOE_REQUIRE_GPU();
  Rng rng(fresh_seed());
  const int num_global = 24, num_local = 6;
  const ref::Shape s = make_shape(250, 256, 384, num_local, 4);
  Routing r;
  r.expert_map.assign(num_global, -1);
  std::vector<int32_t> globals(num_global);
  std::iota(globals.begin(), globals.end(), 0);
  std::shuffle(globals.begin(), globals.end(), rng);
  for (int e = 0; e < num_local; ++e) r.expert_map[globals[e]] = e;
  r.expert_map[globals[num_local]] = 99;      // a broken map entry: invalid
  r.expert_map[globals[num_local + 1]] = -7;  // also invalid
  r.ids = random_ids(rng, s.tokens, s.top_k, num_global, 0.05, 0.05);
  check_permute(s, r, random_rows(rng, s.tokens, s.hidden));
}

TEST(Permute, MostlyInvalidIds) {
  FP8MOE_REQUIRE_GPU();
  Rng rng(fresh_seed());
  const ref::Shape s = make_shape(100, 128, 256, 5, 5);
  Routing r;
  r.ids = random_ids(rng, s.tokens, s.top_k, s.num_experts, 0.0, 0.9);
  check_permute(s, r, random_rows(rng, s.tokens, s.hidden));
}

// The counter is overwritten by every run: a run without invalid ids reads 0 after one with many.
TEST(Permute, ErrorCounterResetsEachRun) {
  FP8MOE_REQUIRE_GPU();
  Rng rng(fresh_seed());
  const ref::Shape s = make_shape(64, 64, 128, 4, 2);
  Routing bad, good;
  bad.ids = random_ids(rng, s.tokens, s.top_k, s.num_experts, 0.0, 0.5);
  good.ids = random_ids(rng, s.tokens, s.top_k, s.num_experts, 0.2, 0.0);
  const int32_t bad_count = ref::permute(s, bad.ids.data(), nullptr, nullptr, 0).invalid_ids;
  ASSERT_GT(bad_count, 0);
  Uploaded<int32_t> d_bad(bad.ids), d_good(good.ids);
  Uploaded<uint16_t> d_hidden(random_rows(rng, s.tokens, s.hidden));
  PermuteBuffers b(s, ScaleFormat::kFp32);
  b.poison(0x7F);
  DeviceBuffer<int32_t> cta_counts(3 * (s.num_experts + 1));
  for (int round = 0; round < 4; ++round) {
    SCOPED_TRACE("round " + std::to_string(round));
    const ScaleFormat f = ScaleFormat::kFp32;
    auto params = [&](const Routing& r, const int32_t* ids) {
      kernels::PermuteParams p = make_params(s, f, r, ids, nullptr, nullptr, d_hidden.ptr, b);
      p.metadata_ctas = round < 2 ? 1 : 3;  // the one-CTA kernel, then a grid of 3
      p.cta_counts = cta_counts.ptr;
      return p;
    };
    CUDA_OK(kernels::launch_permute(params(bad, d_bad.ptr), nullptr));
    CUDA_OK(cudaDeviceSynchronize());
    EXPECT_EQ(b.error.download()[0], bad_count);
    CUDA_OK(kernels::launch_permute(params(good, d_good.ptr), nullptr));
    CUDA_OK(cudaDeviceSynchronize());
    EXPECT_EQ(b.error.download()[0], 0);
  }
}

// DeepSeek-V3 experts with EP=8 at decode: E=32, H=7168, k=8, 16 tokens in a 512-token capacity.
TEST(Permute, SeedShapeDecode) {
  FP8MOE_REQUIRE_GPU();
  Rng rng(fresh_seed());
  const ref::Shape s = make_shape(16, 512, 7168, 32, 8);
  Routing r;
  r.ids = random_routing(rng, s.tokens, s.top_k, s.num_experts);
  r.has_num_tokens = true;
  r.num_tokens = 16;
  check_permute(s, r, random_rows(rng, s.tokens, s.hidden));
}

// Prefill-sized routing: 32768 and 40000 slots (several batches per warp), many experts (fewer
// warps in the metadata CTA), the largest E the metadata kernel takes.
TEST(Permute, ManySlotsAndExperts) {
  FP8MOE_REQUIRE_GPU();
  Rng rng(fresh_seed());
  struct Case {
    int64_t tokens, capacity;
    int experts, top_k;
  };
  for (const Case c : {Case{4096, 4096, 256, 8}, Case{5000, 5000, 32, 8}, Case{3000, 3100, 1000, 6},
                       Case{700, 700, 4085, 4}}) {
    SCOPED_TRACE("T " + std::to_string(c.tokens) + ", E " + std::to_string(c.experts));
    const ref::Shape s = make_shape(c.tokens, c.capacity, 128, c.experts, c.top_k);
    Routing r;
    r.ids = random_ids(rng, s.tokens, s.top_k, s.num_experts, 0.02, 0.01);
    check_permute(s, r, random_rows(rng, s.tokens, s.hidden));
  }
}

// More quantization items (live tokens x chunks of 512 columns) than the persistent grid has warps
// (5280 on an H200, 5 CTAs of 8 warps per SM), so that warps take several items each: the
// grid-stride loop past its first item, which no smaller test reaches, with partly live capacities.
TEST(Permute, MoreItemsThanWarps) {
  FP8MOE_REQUIRE_GPU();
  Rng rng(fresh_seed());
  const ref::Shape s = make_shape(3000, 3000, 4096, 64, 4);  // 8 chunks per token
  Routing r;
  r.ids = random_ids(rng, s.tokens, s.top_k, s.num_experts, 0.02, 0.01);
  r.has_num_tokens = true;
  const std::vector<uint16_t> hidden = random_rows(rng, s.tokens, s.hidden);
  for (int32_t n : {2999, 1400, 1}) {  // 23992, 11200 and 8 items
    SCOPED_TRACE("num_tokens " + std::to_string(n));
    r.num_tokens = n;
    check_permute(s, r, hidden);
  }
}

TEST(Permute, RejectsBadShapes) {
  FP8MOE_REQUIRE_GPU();
  kernels::PermuteParams p;  // null pointers, zero shapes
  EXPECT_EQ(kernels::launch_permute(p, nullptr), cudaErrorInvalidValue);
  DeviceBuffer<int32_t> buf(16);
  p.tokens = 2;
  p.capacity = 2;
  p.hidden_size = 128;
  p.num_experts = 5000;  // too many for the metadata CTA
  p.top_k = 1;
  p.topk_ids = p.counts = p.ends = p.error_count = p.row_of = buf.ptr;
  EXPECT_EQ(kernels::launch_permute_metadata(p, nullptr), cudaErrorInvalidValue);
  p.num_experts = 3065;  // too many for a CTA of the metadata grid (one CTA takes it)
  p.metadata_ctas = 2;
  p.cta_counts = buf.ptr;
  EXPECT_EQ(kernels::launch_permute_metadata(p, nullptr), cudaErrorInvalidValue);
  p.num_experts = 4;
  p.cta_counts = nullptr;  // a grid without its scratch table
  EXPECT_EQ(kernels::launch_permute_metadata(p, nullptr), cudaErrorInvalidValue);
  p.metadata_ctas = kernels::kMetadataMaxCtas + 1;
  p.cta_counts = buf.ptr;
  EXPECT_EQ(kernels::launch_permute_metadata(p, nullptr), cudaErrorInvalidValue);
  p.metadata_ctas = 0;
  EXPECT_EQ(kernels::launch_permute_metadata(p, nullptr), cudaErrorInvalidValue);
  p.metadata_ctas = 1;
  p.hidden_size = 128;
  p.hidden = buf.ptr;
  p.a1 = reinterpret_cast<uint8_t*>(buf.ptr);
  p.a1_scale = buf.ptr;
  p.w13 = reinterpret_cast<const uint8_t*>(buf.ptr);  // weights to warm, but no rows or k-blocks
  EXPECT_EQ(kernels::launch_quantize_permuted(p, nullptr), cudaErrorInvalidValue);
  p.w13_rows = 1;
  p.warm_rows = 1;  // still no k-blocks
  EXPECT_EQ(kernels::launch_quantize_permuted(p, nullptr), cudaErrorInvalidValue);
  p.w13 = nullptr;
  p.hidden_size = 100;  // not a multiple of 128
  EXPECT_EQ(kernels::launch_quantize_permuted(p, nullptr), cudaErrorInvalidValue);
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);
}

}  // namespace
