// Step 1 of SPEC section 2 (group quantization), the activation-scale layouts of SPEC section 3,
// and the quantize-and-scatter of hidden rows into the permuted A1.
#include <cstring>
#include <stdexcept>
#include <vector>

#include "reference/checks.hpp"
#include "reference/reference.hpp"

namespace fp8moe::ref {

void quantize_row(const float* x, int64_t k, bool pow2, uint8_t* q, float* scales) {
  detail::require_groups(k, "ref::quantize_row");
  for (int64_t g = 0; g < layout::groups_of(k); ++g) {
    const float* xg = x + g * layout::kGroup;
    float amax = 0.0f;
    for (int i = 0; i < layout::kGroup; ++i) amax = num::max_f(amax, num::abs_f(xg[i]));
    const float scale = num::group_scale(amax, pow2);
    scales[g] = scale;
    for (int i = 0; i < layout::kGroup; ++i) q[g * layout::kGroup + i] = num::quantize_e4m3(xg[i], scale);
  }
}

void store_scale(ScaleFormat f, void* buf, int64_t m_pad, int64_t row, int64_t group, float scale) {
  switch (f) {
    case ScaleFormat::kFp32:
    case ScaleFormat::kFp32Pow2:
      static_cast<float*>(buf)[layout::fp32_scale_index(row, group, m_pad)] = scale;
      return;
    case ScaleFormat::kUe8m0Packed: {
      uint32_t& word = static_cast<uint32_t*>(buf)[layout::ue8m0_word_index(row, group, m_pad)];
      const int shift = 8 * layout::ue8m0_byte_of(group);
      const uint32_t byte = num::ue8m0_ceil_from_float(scale);
      word = (word & ~(0xFFu << shift)) | (byte << shift);
      return;
    }
  }
  throw std::invalid_argument("ref::store_scale: unknown scale format");
}

float load_scale(ScaleFormat f, const void* buf, int64_t m_pad, int64_t row, int64_t group) {
  switch (f) {
    case ScaleFormat::kFp32:
    case ScaleFormat::kFp32Pow2:
      return static_cast<const float*>(buf)[layout::fp32_scale_index(row, group, m_pad)];
    case ScaleFormat::kUe8m0Packed: {
      const uint32_t word = static_cast<const uint32_t*>(buf)[layout::ue8m0_word_index(row, group, m_pad)];
      return num::float_from_ue8m0(static_cast<uint8_t>(word >> (8 * layout::ue8m0_byte_of(group))));
    }
  }
  throw std::invalid_argument("ref::load_scale: unknown scale format");
}

int64_t scale_elems(ScaleFormat f, int64_t m_pad, int64_t k) {
  return layout::scale_buffer_bytes(f, m_pad, k) / 4;
}

void quantize_permuted(const Shape& s, const Permutation& p, const uint16_t* hidden, ScaleFormat f,
                       uint8_t* a1, void* a1_scale) {
  const int64_t H = s.hidden, groups = layout::groups_of(H);
  detail::require_groups(H, "ref::quantize_permuted", "H");
  detail::require_format(f, "ref::quantize_permuted");
  std::vector<float> x(H), scales(groups);
  std::vector<uint8_t> q(H);
  for (int64_t t = 0; t < s.tokens; ++t) {
    bool quantized = false;  // each token is quantized once, then copied to each of its rows
    for (int j = 0; j < s.top_k; ++j) {
      const int32_t row = p.row_of[t * s.top_k + j];
      if (row < 0) continue;
      if (!quantized) {
        for (int64_t h = 0; h < H; ++h) x[h] = num::float_from_bf16_bits(hidden[t * H + h]);
        quantize_row(x.data(), H, layout::is_pow2_format(f), q.data(), scales.data());
        quantized = true;
      }
      std::memcpy(a1 + row * H, q.data(), H);
      for (int64_t g = 0; g < groups; ++g) store_scale(f, a1_scale, p.m_pad, row, g, scales[g]);
    }
  }
}

}  // namespace fp8moe::ref
