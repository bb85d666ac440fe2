// The whole reference pipeline (SPEC section 2): every stage in order, intermediates zero-filled.
#include <utility>

#include "reference/reference.hpp"

namespace fp8moe::ref {

void run_pipeline(const Shape& s, const Inputs& in, const num::ActParams& act, ScaleFormat f,
                  uint16_t* out, Intermediates* stages) {
  const int64_t H = s.hidden, I = s.intermediate;
  const int E = s.num_experts;
  Intermediates st;
  st.perm = permute(s, in.topk_ids, in.num_tokens, in.expert_map, in.num_global_experts);
  const int64_t m_cap = st.perm.m_cap, m_pad = st.perm.m_pad;
  st.a1.assign(m_cap * H, 0);
  st.a1_scale.assign(scale_elems(f, m_pad, H), 0);
  st.y1.assign(m_cap * 2 * I, 0);
  st.a2.assign(m_cap * I, 0);
  st.a2_scale.assign(scale_elems(f, m_pad, I), 0);
  st.y2.assign(m_cap * H, 0);

  quantize_permuted(s, st.perm, in.hidden, f, st.a1.data(), st.a1_scale.data());
  grouped_gemm(st.perm, E, st.a1.data(), st.a1_scale.data(), f, in.w13, in.w13_scale, 2 * I, H, st.y1.data());
  act_quant(st.perm, E, st.y1.data(), I, act, f, st.a2.data(), st.a2_scale.data());
  grouped_gemm(st.perm, E, st.a2.data(), st.a2_scale.data(), f, in.w2, in.w2_scale, H, I, st.y2.data());
  unpermute_reduce(s, st.perm, st.y2.data(), in.topk_weights, out);

  if (stages) *stages = std::move(st);
}

}  // namespace fp8moe::ref
