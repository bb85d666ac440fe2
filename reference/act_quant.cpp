// Step 4 of SPEC section 2: activation of (gate, up) halves of Y1, rounded to BF16, then quantized
// per 128-group exactly like the input (step 1). Only live rows are read and written.
#include <vector>

#include "reference/checks.hpp"
#include "reference/parallel.hpp"
#include "reference/reference.hpp"

namespace fp8moe::ref {

void act_quant(const Permutation& p, int num_experts, const uint16_t* y1, int64_t intermediate,
               const num::ActParams& act, ScaleFormat f, uint8_t* a2, void* a2_scale) {
  const int64_t I = intermediate, groups = layout::groups_of(I);
  detail::require_groups(I, "ref::act_quant", "I");
  detail::require_format(f, "ref::act_quant");
  const auto chunks = detail::live_row_chunks(p.ends.data(), num_experts, 64);
  detail::parallel_for(static_cast<int64_t>(chunks.size()), [&](int64_t c) {
    std::vector<float> a(I), scales(groups);
    for (int64_t r = chunks[c].row0; r < chunks[c].row0 + chunks[c].rows; ++r) {
      const uint16_t* gate = y1 + r * 2 * I;
      const uint16_t* up = gate + I;
      for (int64_t i = 0; i < I; ++i) {
        const float g = num::float_from_bf16_bits(gate[i]);
        const float u = num::float_from_bf16_bits(up[i]);
        a[i] = num::round_to_bf16(num::activation(g, u, act));
      }
      quantize_row(a.data(), I, layout::is_pow2_format(f), a2 + r * I, scales.data());
      // Rows of different chunks never share a scale word (words are per row), so this is race-free.
      for (int64_t g = 0; g < groups; ++g) store_scale(f, a2_scale, p.m_pad, r, g, scales[g]);
    }
  });
}

}  // namespace fp8moe::ref
