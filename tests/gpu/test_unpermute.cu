// Step 6 on the GPU (kernels/unpermute.cu) against the CPU reference, bit for bit. Y2 rows that are
// not live hold NaN, so reading one would show in the output; out rows past T must keep their poison.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "kernels/unpermute.cuh"
#include "kernels_testing.hpp"

namespace {

using namespace fp8moe::test;
namespace ref = fp8moe::ref;
namespace kernels = fp8moe::kernels;

// stale_dead_slots: row_of of tokens past *num_tokens points at live rows (as a stale table
// would); the kernel must still write zeros there because it reads *num_tokens itself.
// discard_y2: the kernel drops each Y2 line it has read from L2 (UnpermuteParams::discard_y2), so
// Y2 is uploaded afresh before each run, over a NaN decoy in HBM (upload_over_decoy): a line
// dropped before all its readers had it would give them NaN.
void check_unpermute(const ref::Shape& s, const Routing& r, Rng& rng, bool stale_dead_slots = false,
                     bool discard_y2 = false) {
  const int64_t T = s.tokens, C = s.capacity, H = s.hidden;
  const int k = s.top_k;
  const ref::Permutation perm = ref::permute(s, r.ids.data(), r.num_tokens_ptr(), r.map_ptr(), r.num_global());
  const std::vector<bool> live = live_row_mask(perm);
  std::vector<uint16_t> y2 = random_rows(rng, perm.m_cap, H);
  for (int64_t row = 0; row < perm.m_cap; ++row)
    if (!live[row]) std::fill(y2.begin() + row * H, y2.begin() + (row + 1) * H, uint16_t{0xFFFF});
  const std::vector<float> weights = random_weights(rng, T * k);
  std::vector<uint16_t> want(T * H);
  ref::unpermute_reduce(s, perm, y2.data(), weights.data(), want.data());

  std::vector<int32_t> row_of = perm.row_of;
  if (stale_dead_slots) {
    int32_t some_live_row = 0;
    while (some_live_row < perm.m_cap && !live[some_live_row]) ++some_live_row;
    const int64_t first_dead = r.has_num_tokens ? std::max<int64_t>(0, std::min<int64_t>(r.num_tokens, T)) : T;
    if (some_live_row < perm.m_cap)
      for (int64_t i = first_dead * k; i < T * k; ++i) row_of[i] = some_live_row;
  }
  Uploaded<uint16_t> d_y2(y2);
  Uploaded<float> d_weights(weights);
  Uploaded<int32_t> d_row_of(row_of), d_num_tokens(std::vector<int32_t>{r.num_tokens});
  DeviceBuffer<uint16_t> d_out(C * H);

  kernels::UnpermuteParams p;
  p.tokens = T;
  p.hidden_size = H;
  p.top_k = k;
  p.m_cap = perm.m_cap;
  p.y2 = d_y2.ptr;
  p.topk_weights = d_weights.ptr;
  p.row_of = d_row_of.ptr;
  p.num_tokens = r.has_num_tokens ? d_num_tokens.ptr : nullptr;
  p.out = d_out.ptr;
  p.discard_y2 = discard_y2;
  for (uint8_t poison : kPoisons) {
    SCOPED_TRACE("poison " + hex_bits(poison));
    d_out.poison(poison);
    if (discard_y2) upload_over_decoy(d_y2, y2);
    CUDA_OK(kernels::launch_unpermute(p, nullptr));
    CUDA_OK(cudaDeviceSynchronize());
    const std::vector<uint16_t> got = d_out.download();
    EXPECT_TRUE(same_bits(got, want, T * H, "out"));
    EXPECT_TRUE(all_equal(got, T * H, C * H, poison_half(poison), "out past T"));
  }
}

TEST(Unpermute, RandomRoutingWithUnroutedAndInvalidSlots) {
  FP8MOE_REQUIRE_GPU();
  Rng rng(fresh_seed());
  const ref::Shape s = make_shape(300, 320, 384, 8, 4);
  Routing r;
  r.ids = random_ids(rng, s.tokens, s.top_k, s.num_experts, 0.15, 0.05);
  check_unpermute(s, r, rng);
}

TEST(Unpermute, DiscardingY2KeepsTheOutput) {  // (the pipeline's live schedule)
  FP8MOE_REQUIRE_GPU();
  Rng rng(fresh_seed());
  const ref::Shape s = make_shape(300, 320, 384, 8, 4);
  Routing r;
  r.ids = random_ids(rng, s.tokens, s.top_k, s.num_experts, 0.15, 0.05);
  check_unpermute(s, r, rng, false, true);
  const ref::Shape seed = make_shape(16, 512, 7168, 32, 8);  // the seed's hidden size, decode
  Routing r2;
  r2.ids = random_ids(rng, seed.tokens, seed.top_k, seed.num_experts, 0.0, 0.0);
  check_unpermute(seed, r2, rng, false, true);
}

TEST(Unpermute, NumTokensWithStaleRowTable) {
  FP8MOE_REQUIRE_GPU();
  Rng rng(fresh_seed());
  const ref::Shape s = make_shape(200, 256, 256, 6, 3);
  Routing r;
  r.ids = random_ids(rng, s.tokens, s.top_k, s.num_experts, 0.1, 0.0);
  r.has_num_tokens = true;
  for (int32_t n : {77, 0, 1, 200}) {
    SCOPED_TRACE("num_tokens " + std::to_string(n));
    r.num_tokens = n;
    check_unpermute(s, r, rng, /*stale_dead_slots=*/true);
  }
}

TEST(Unpermute, EmptyRoutingAndOneLiveRow) {
  FP8MOE_REQUIRE_GPU();
  Rng rng(fresh_seed());
  const ref::Shape s = make_shape(40, 64, 256, 4, 2);
  Routing r;
  r.ids.assign(s.tokens * s.top_k, -1);
  check_unpermute(s, r, rng);
  r.ids[17 * 2 + 1] = 3;
  check_unpermute(s, r, rng);
}

TEST(Unpermute, TopKOneAndAboveTheLoadBatch) {
  FP8MOE_REQUIRE_GPU();
  Rng rng(fresh_seed());
  for (int k : {1, 8, 9, 12}) {
    SCOPED_TRACE("k " + std::to_string(k));
    const ref::Shape s = make_shape(150, 160, 512, 16, k);
    Routing r;
    r.ids = random_ids(rng, s.tokens, s.top_k, s.num_experts, 0.1, 0.0);
    check_unpermute(s, r, rng);
  }
}

TEST(Unpermute, SeedShapeDecode) {
  FP8MOE_REQUIRE_GPU();
  Rng rng(fresh_seed());
  const ref::Shape s = make_shape(16, 512, 7168, 32, 8);
  Routing r;
  r.ids = random_routing(rng, s.tokens, s.top_k, s.num_experts);
  r.has_num_tokens = true;
  r.num_tokens = 16;
  check_unpermute(s, r, rng);
}

TEST(Unpermute, RejectsBadShapes) {
  FP8MOE_REQUIRE_GPU();
  kernels::UnpermuteParams p;
  p.tokens = 4;
  p.hidden_size = 128;
  p.top_k = 0;
  EXPECT_EQ(kernels::launch_unpermute(p, nullptr), cudaErrorInvalidValue);
  p.top_k = 2;  // missing pointers
  EXPECT_EQ(kernels::launch_unpermute(p, nullptr), cudaErrorInvalidValue);
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);
}

}  // namespace
