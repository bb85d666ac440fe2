// CUDA-graph replay of the kernels around the GEMMs: permutation (metadata + quantize), live
// activation+quant and unpermute+reduce are captured once, then replayed with new routing, new
// weights and new *num_tokens written in place (random routing, fewer live tokens with invalid ids,
// empty routing, one live row, no live token). Every replay is checked bit for bit against the
// reference, with all outputs poisoned before it. Y1 and Y2 (the GEMM outputs) are fixed random
// data here: the GEMMs are tested elsewhere.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "kernels/act_quant.cuh"
#include "kernels/permute.cuh"
#include "kernels/unpermute.cuh"
#include "kernels_testing.hpp"

namespace {

using namespace fp8moe::test;
using fp8moe::layout::ScaleFormat;
namespace ref = fp8moe::ref;
namespace num = fp8moe::num;
namespace layout = fp8moe::layout;
namespace kernels = fp8moe::kernels;

struct Replay {
  std::string name;
  std::vector<int32_t> ids;
  int32_t num_tokens;
};

void check_graph_replays(ScaleFormat f, uint64_t seed) {
  SCOPED_TRACE(std::string("format ") + format_name(f));
  Rng rng(seed);
  ref::Shape s;
  s.tokens = 200;
  s.capacity = 256;
  s.hidden = 384;
  s.intermediate = 256;
  s.num_experts = 8;
  s.top_k = 4;
  const int64_t T = s.tokens, C = s.capacity, H = s.hidden, I = s.intermediate;
  const int E = s.num_experts, k = s.top_k;
  const int64_t m_cap = layout::m_cap(C, k, E), m_pad = layout::m_pad(m_cap);
  num::ActParams act;
  act.kind = num::ActKind::kSwigluOai;
  act.alpha = 1.702f;
  act.beta = 1.0f;
  act.limit = 2.0f;

  // Fixed inputs and the GEMM outputs standing in for GEMM1 / GEMM2.
  const std::vector<uint16_t> hidden = random_rows(rng, T, H);
  const std::vector<uint16_t> y1 = random_rows(rng, m_cap, 2 * I);
  const std::vector<uint16_t> y2 = random_rows(rng, m_cap, H);
  Uploaded<uint16_t> d_hidden(hidden), d_y1(y1), d_y2(y2);

  // Buffers written in place between replays.
  DeviceBuffer<int32_t> d_ids(T * k), d_num_tokens(1);
  DeviceBuffer<float> d_weights(T * k);
  // Outputs.
  DeviceBuffer<int32_t> d_counts(E), d_ends(E), d_error(1), d_row_of(C * k), d_row_expert(m_cap);
  DeviceBuffer<uint8_t> d_a1(m_cap * H), d_a2(m_cap * I);
  DeviceBuffer<int32_t> d_a1_scale(ref::scale_elems(f, m_pad, H)), d_a2_scale(ref::scale_elems(f, m_pad, I));
  DeviceBuffer<uint16_t> d_out(C * H);

  kernels::PermuteParams pp;
  pp.tokens = T;
  pp.capacity = C;
  pp.hidden_size = H;
  pp.num_experts = E;
  pp.top_k = k;
  pp.topk_ids = d_ids.ptr;
  pp.num_tokens = d_num_tokens.ptr;
  pp.counts = d_counts.ptr;
  pp.ends = d_ends.ptr;
  pp.error_count = d_error.ptr;
  pp.row_of = d_row_of.ptr;
  pp.row_expert = d_row_expert.ptr;
  pp.hidden = d_hidden.ptr;
  pp.scale_format = f;
  pp.a1 = d_a1.ptr;
  pp.a1_scale = d_a1_scale.ptr;

  kernels::ActQuantParams ap;
  ap.m_cap = m_cap;
  ap.max_live_rows = C * k;
  ap.intermediate = I;
  ap.num_experts = E;
  ap.ends = d_ends.ptr;
  ap.schedule = fp8moe::layout::Schedule::kLive;
  ap.act = act;
  ap.scale_format = f;
  ap.y1 = d_y1.ptr;
  ap.a2 = d_a2.ptr;
  ap.a2_scale = d_a2_scale.ptr;

  kernels::UnpermuteParams up;
  up.tokens = T;
  up.hidden_size = H;
  up.top_k = k;
  up.m_cap = m_cap;
  up.y2 = d_y2.ptr;
  up.topk_weights = d_weights.ptr;
  up.row_of = d_row_of.ptr;
  up.num_tokens = d_num_tokens.ptr;
  up.out = d_out.ptr;

  cudaStream_t stream = nullptr;
  CUDA_OK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  cudaGraph_t graph = nullptr;
  cudaGraphExec_t exec = nullptr;
  CUDA_OK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
  const cudaError_t e1 = kernels::launch_permute(pp, stream);
  const cudaError_t e2 = kernels::launch_act_quant(ap, stream);
  const cudaError_t e3 = kernels::launch_unpermute(up, stream);
  CUDA_OK(cudaStreamEndCapture(stream, &graph));
  CUDA_OK(e1);
  CUDA_OK(e2);
  CUDA_OK(e3);
  CUDA_OK(cudaGraphInstantiate(&exec, graph, 0));

  std::vector<Replay> replays;
  replays.push_back({"random routing", random_ids(rng, T, k, E, 0.0, 0.0), static_cast<int32_t>(T)});
  replays.push_back({"fewer tokens, invalid ids", random_ids(rng, T, k, E, 0.1, 0.1), 71});
  replays.push_back({"empty routing", std::vector<int32_t>(T * k, -1), static_cast<int32_t>(T)});
  std::vector<int32_t> one(T * k, -1);
  one[123 * k + 1] = 6;
  replays.push_back({"one live row", one, static_cast<int32_t>(T)});
  replays.push_back({"no live token", random_ids(rng, T, k, E, 0.0, 0.0), 0});
  replays.push_back({"random routing again", random_ids(rng, T, k, E, 0.2, 0.02), static_cast<int32_t>(T - 1)});

  for (size_t i = 0; i < replays.size(); ++i) {
    const Replay& rp = replays[i];
    const uint8_t poison = kPoisons[i % 2];
    SCOPED_TRACE("replay " + std::to_string(i) + ": " + rp.name);
    const std::vector<float> weights = random_weights(rng, T * k);
    d_ids.upload(rp.ids);
    d_weights.upload(weights);
    d_num_tokens.upload(std::vector<int32_t>{rp.num_tokens});
    for (auto* b : {&d_counts, &d_ends, &d_error, &d_row_of, &d_row_expert, &d_a1_scale, &d_a2_scale})
      b->poison(poison);
    d_a1.poison(poison);
    d_a2.poison(poison);
    d_out.poison(poison);
    CUDA_OK(cudaDeviceSynchronize());  // uploads and memsets ran on the legacy stream; `stream` does not wait for it
    CUDA_OK(cudaGraphLaunch(exec, stream));
    CUDA_OK(cudaStreamSynchronize(stream));

    const ref::Permutation perm = ref::permute(s, rp.ids.data(), &rp.num_tokens, nullptr, 0);
    const std::vector<bool> live = live_row_mask(perm);
    std::vector<uint8_t> want_a1(d_a1.count, poison), want_a2(d_a2.count, poison);
    std::vector<int32_t> want_a1_scale(d_a1_scale.count, poison_word(poison));
    std::vector<int32_t> want_a2_scale(d_a2_scale.count, poison_word(poison));
    std::vector<uint16_t> want_out(T * H);
    ref::quantize_permuted(s, perm, hidden.data(), f, want_a1.data(), want_a1_scale.data());
    ref::act_quant(perm, E, y1.data(), I, act, f, want_a2.data(), want_a2_scale.data());
    ref::unpermute_reduce(s, perm, y2.data(), weights.data(), want_out.data());
    clear_missing_ue8m0_bytes(f, want_a1_scale, m_pad, H, live);
    clear_missing_ue8m0_bytes(f, want_a2_scale, m_pad, I, live);

    EXPECT_TRUE(same_bits(d_counts.download(), perm.counts, "counts"));
    EXPECT_TRUE(same_bits(d_ends.download(), perm.ends, "ends"));
    EXPECT_EQ(d_error.download()[0], perm.invalid_ids) << "invalid-id count";
    const std::vector<int32_t> row_of = d_row_of.download();
    EXPECT_TRUE(same_bits(row_of, perm.row_of, T * k, "row_of"));
    EXPECT_TRUE(all_equal(row_of, T * k, C * k, poison_word(poison), "row_of past T"));
    EXPECT_TRUE(same_bits(d_row_expert.download(), perm.row_expert, "row_expert"));
    EXPECT_TRUE(same_bits(d_a1.download(), want_a1, "a1"));
    EXPECT_TRUE(same_bits(d_a1_scale.download(), want_a1_scale, "a1_scale"));
    EXPECT_TRUE(same_bits(d_a2.download(), want_a2, "a2"));
    EXPECT_TRUE(same_bits(d_a2_scale.download(), want_a2_scale, "a2_scale"));
    const std::vector<uint16_t> out = d_out.download();
    EXPECT_TRUE(same_bits(out, want_out, T * H, "out"));
    EXPECT_TRUE(all_equal(out, T * H, C * H, poison_half(poison), "out past T"));
  }

  CUDA_OK(cudaGraphExecDestroy(exec));
  CUDA_OK(cudaGraphDestroy(graph));
  CUDA_OK(cudaStreamDestroy(stream));
}

TEST(KernelsGraph, ReplayWithChangingRoutingAndNumTokens) {
  FP8MOE_REQUIRE_GPU();
  const uint64_t seed = fresh_seed();
  for (ScaleFormat f : kAllFormats) check_graph_replays(f, seed);
}

}  // namespace
