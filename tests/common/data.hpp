// Test data shared by the CPU and GPU tests: fresh random seeds and random inputs in the formats of
// the pipeline (BF16 activations, FP8 E4M3 weight codes, FP32 block scales, top-k routing).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <numeric>
#include <random>
#include <vector>

#include "numerics/numerics.cuh"

namespace fp8moe::test {

using Rng = std::mt19937_64;

// Fresh seed every run; printed so that a failure can be replayed (FP8MOE_SEED=... overrides).
inline uint64_t fresh_seed() {
  if (const char* s = std::getenv("FP8MOE_SEED")) return std::strtoull(s, nullptr, 10);
  std::random_device rd;
  const uint64_t seed = (static_cast<uint64_t>(rd()) << 32) ^ rd();
  std::printf("[ seed     ] FP8MOE_SEED=%llu\n", static_cast<unsigned long long>(seed));
  return seed;
}

// BF16 bit patterns of normal(0, stddev) samples.
inline std::vector<uint16_t> random_bf16(Rng& rng, size_t n, float stddev = 1.0f) {
  std::normal_distribution<float> dist(0.0f, stddev);
  std::vector<uint16_t> v(n);
  for (auto& x : v) x = num::bf16_bits_from_float(dist(rng));
  return v;
}

// The next word of a SplitMix64 stream (the bulk generators below: fast enough for GBs of weights).
inline uint64_t splitmix64(uint64_t& state) {
  uint64_t w = (state += 0x9E3779B97F4A7C15ull);
  w = (w ^ (w >> 30)) * 0xBF58476D1CE4E5B9ull;
  w = (w ^ (w >> 27)) * 0x94D049BB133111EBull;
  return w ^ (w >> 31);
}

// Uniformly random E4M3 codes, never a NaN code (0x7F / 0xFF become 0x7E / 0xFE: +-448).
// Bulk generator: a SplitMix64 stream seeded from rng, eight codes per draw, NaN codes fixed
// branch-free, so that the 1.4 GB of the seed shape's weights take about a second.
inline std::vector<uint8_t> random_fp8_codes(Rng& rng, size_t n) {
  constexpr uint64_t kLow7 = 0x7F7F7F7F7F7F7F7Full, kOnes = 0x0101010101010101ull;
  uint64_t state = rng();
  std::vector<uint8_t> v(n);
  for (size_t i = 0; i < n; i += 8) {
    uint64_t w = splitmix64(state);
    // A byte whose low 7 bits are all ones carries into its bit 7 when 1 is added to them; those
    // bytes (and only those) get 1 subtracted, which never borrows from a neighbour.
    const uint64_t nan_bytes = (((w & kLow7) + kOnes) & ~kLow7) >> 7;
    w -= nan_bytes;
    std::memcpy(v.data() + i, &w, std::min<size_t>(8, n - i));
  }
  return v;
}

// The sigma at which normal samples rounded to E4M3 look block-quantised: a group's largest value
// lands near 448 (E4M3's largest), about 4.2 sigma for a 128 x 128 weight block's 16384 values and
// 2.7 sigma for an activation row's 128-value group.
constexpr float kWeightBlockSigma = 448.0f / 4.2f;
constexpr float kActGroupSigma = 448.0f / 2.7f;

// E4M3 codes of normal(0, sigma) samples (round to nearest even, saturating at +-448): the shape of
// block-quantised model weights (sigma = kWeightBlockSigma), where random_fp8_codes draws every bit
// at random. Bulk generator: a table of 65536 such codes, indexed by 16-bit pieces of a SplitMix64
// stream.
inline std::vector<uint8_t> random_fp8_normal_codes(Rng& rng, size_t n, float sigma) {
  std::normal_distribution<float> dist(0.0f, sigma);
  std::vector<uint8_t> table(65536);
  for (auto& c : table) c = num::e4m3_from_float_soft(dist(rng));
  uint64_t state = rng();
  std::vector<uint8_t> v(n);
  for (size_t i = 0; i < n; i += 4) {
    const uint64_t w = splitmix64(state);
    for (size_t j = 0; j < 4 && i + j < n; ++j) v[i + j] = table[(w >> (16 * j)) & 0xFFFF];
  }
  return v;
}

// Root mean square of the values of the first (at most 2^22) codes of v.
inline double fp8_codes_rms(const std::vector<uint8_t>& v) {
  double sq[256], sum = 0;
  for (int c = 0; c < 256; ++c) {
    const double x = (c & 0x7F) == 0x7F ? 0.0 : num::float_from_e4m3(static_cast<uint8_t>(c));
    sq[c] = x * x;
  }
  const size_t n = std::min<size_t>(v.size(), size_t(1) << 22);
  for (size_t i = 0; i < n; ++i) sum += sq[v[i]];
  return n ? std::sqrt(sum / n) : 0.0;
}

// Root mean square of the values of all non-NaN E4M3 codes, each counted once: the scale sizing
// of the tests and fp8moe-bench. random_fp8_codes' draws are a little larger in RMS (its NaN draws
// become +-448, so 448 has twice every other code's share: fp8_codes_rms of them is the exact
// figure); kept as it is, since every recorded benchmark's data was sized with it.
inline double e4m3_code_rms() {
  double sum = 0;
  int n = 0;
  for (int c = 0; c < 256; ++c) {
    if ((c & 0x7F) == 0x7F) continue;
    const double x = num::float_from_e4m3(static_cast<uint8_t>(c));
    sum += x * x;
    ++n;
  }
  return std::sqrt(sum / n);
}

// FP32 scales drawn log-uniformly from [base / spread, base * spread].
inline std::vector<float> random_scales(Rng& rng, size_t n, double base, double spread = 2.0) {
  std::uniform_real_distribution<double> dist(-std::log(spread), std::log(spread));
  std::vector<float> v(n);
  for (auto& s : v) s = static_cast<float>(base * std::exp(dist(rng)));
  return v;
}

// Uniform random top-k routing: k distinct experts out of [0, num_experts) per token.
inline std::vector<int32_t> random_routing(Rng& rng, int64_t tokens, int top_k, int num_experts) {
  std::vector<int32_t> ids(tokens * top_k), experts(num_experts);
  for (int64_t t = 0; t < tokens; ++t) {
    std::iota(experts.begin(), experts.end(), 0);
    for (int j = 0; j < top_k; ++j) {  // partial Fisher-Yates shuffle
      std::uniform_int_distribution<int> pick(j, num_experts - 1);
      std::swap(experts[j], experts[pick(rng)]);
      ids[t * top_k + j] = experts[j];
    }
  }
  return ids;
}

// sqrt(sum (got - want)^2 / sum want^2) over BF16 bit patterns (absolute when want is all zeros);
// infinite if got holds a NaN (an unwritten, poisoned element).
inline double bf16_rel_error(const uint16_t* got, const uint16_t* want, size_t n) {
  double e2 = 0, r2 = 0;
  for (size_t i = 0; i < n; ++i) {
    const double g = num::float_from_bf16_bits(got[i]), w = num::float_from_bf16_bits(want[i]);
    if (std::isnan(g)) return INFINITY;
    e2 += (g - w) * (g - w);
    r2 += w * w;
  }
  return r2 == 0 ? std::sqrt(e2) : std::sqrt(e2 / r2);
}

// Routing weights in (0, 1].
inline std::vector<float> random_weights(Rng& rng, size_t n) {
  std::uniform_real_distribution<float> dist(0.0f, 1.0f);
  std::vector<float> v(n);
  for (auto& w : v) w = 1.0f - dist(rng);
  return v;
}

}  // namespace fp8moe::test
