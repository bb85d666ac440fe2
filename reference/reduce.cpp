// Step 6 of SPEC section 2: the weighted sum of each token's live rows, in slot order, FP32
// accumulation (num::reduce_step), rounded to BF16 once.
#include <algorithm>
#include <vector>

#include "reference/reference.hpp"

namespace fp8moe::ref {

void unpermute_reduce(const Shape& s, const Permutation& p, const uint16_t* y2, const float* topk_weights,
                      uint16_t* out) {
  const int64_t H = s.hidden;
  const int k = s.top_k;
  std::vector<float> acc(H);
  for (int64_t t = 0; t < s.tokens; ++t) {
    // Tokens with no live slot, and tokens past *num_tokens (all their row_of are -1), end as +0.
    std::fill(acc.begin(), acc.end(), 0.0f);
    for (int j = 0; j < k; ++j) {
      const int32_t row = p.row_of[t * k + j];
      if (row < 0) continue;
      const float w = topk_weights[t * k + j];
      const uint16_t* y = y2 + static_cast<int64_t>(row) * H;
      for (int64_t h = 0; h < H; ++h) acc[h] = num::reduce_step(acc[h], w, num::float_from_bf16_bits(y[h]));
    }
    for (int64_t h = 0; h < H; ++h) out[t * H + h] = num::bf16_bits_from_float(acc[h]);
  }
}

}  // namespace fp8moe::ref
