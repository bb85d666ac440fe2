// A random MoE problem (inputs of the whole pipeline, SPEC section 1) for the CPU and GPU tests.
#pragma once

#include <cmath>
#include <cstdint>
#include <vector>

#include "common/data.hpp"
#include "reference/reference.hpp"

namespace fp8moe::test {

struct MoeProblem {
  ref::Shape shape;
  std::vector<uint16_t> hidden;     // [T, H] BF16 bits, normal(0, 1)
  std::vector<int32_t> topk_ids;    // [T, k] uniform random, k distinct experts per token
  std::vector<float> topk_weights;  // [T, k] in (0, 1]
  std::vector<uint8_t> w13, w2;     // random E4M3 codes without NaN
  std::vector<float> w13_scale, w2_scale;

  // Pointers into this problem (num_tokens and expert_map left out).
  ref::Inputs inputs() const {
    ref::Inputs in;
    in.hidden = hidden.data();
    in.topk_ids = topk_ids.data();
    in.topk_weights = topk_weights.data();
    in.w13 = w13.data();
    in.w13_scale = w13_scale.data();
    in.w2 = w2.data();
    in.w2_scale = w2_scale.data();
    return in;
  }
};

// Weight scales are chosen so that the gate/up outputs have a standard deviation of about y1_std
// (so that swiglu_oai's limit of 7 clips a good share of them) and the down outputs about 1.
inline MoeProblem make_problem(Rng& rng, const ref::Shape& s, double y1_std = 5.0) {
  const int64_t E = s.num_experts, H = s.hidden, I = s.intermediate;
  const double code_rms = e4m3_code_rms();
  MoeProblem p;
  p.shape = s;
  p.hidden = random_bf16(rng, s.tokens * H);
  p.topk_ids = random_routing(rng, s.tokens, s.top_k, s.num_experts);
  p.topk_weights = random_weights(rng, s.tokens * s.top_k);
  p.w13 = random_fp8_codes(rng, E * 2 * I * H);
  p.w13_scale = random_scales(rng, E * (2 * I / 128) * (H / 128), y1_std / (code_rms * std::sqrt(double(H))));
  p.w2 = random_fp8_codes(rng, E * H * I);
  p.w2_scale = random_scales(rng, E * (H / 128) * (I / 128), 1.0 / (y1_std * y1_std * code_rms * std::sqrt(double(I))));
  return p;
}

}  // namespace fp8moe::test
