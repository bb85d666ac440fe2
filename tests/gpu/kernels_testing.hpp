// Helpers of the GPU tests of the kernels around the GEMMs (test_permute.cu, test_act_quant.cu,
// test_unpermute.cu, test_kernels_graph.cu): routing and activation data with the awkward cases
// (zero groups, tiny groups, outliers, -1 slots, invalid ids), poisoned expectations, and
// bit-exact buffer comparisons that name the first differing elements.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "common/data.hpp"
#include "common/gpu.hpp"
#include "layout/layout.cuh"
#include "numerics/numerics.cuh"
#include "reference/reference.hpp"

namespace fp8moe::test {

using layout::ScaleFormat;

inline const char* format_name(ScaleFormat f) {
  switch (f) {
    case ScaleFormat::kFp32: return "fp32";
    case ScaleFormat::kFp32Pow2: return "fp32_pow2";
    case ScaleFormat::kUe8m0Packed: return "ue8m0_packed";
  }
  return "?";
}
constexpr ScaleFormat kAllFormats[] = {ScaleFormat::kFp32, ScaleFormat::kFp32Pow2, ScaleFormat::kUe8m0Packed};
// Poison bytes: 0xFF is a NaN in BF16, FP8 and FP32 and -1 as int32; 0x7F is a NaN in FP8 and a
// large positive value elsewhere.
constexpr uint8_t kPoisons[] = {0xFF, 0x7F};

// Shape of a permutation / unpermute test (the intermediate size does not matter there).
inline ref::Shape make_shape(int64_t tokens, int64_t capacity, int64_t hidden, int num_experts, int top_k) {
  ref::Shape s;
  s.tokens = tokens;
  s.capacity = capacity;
  s.hidden = hidden;
  s.intermediate = 128;
  s.num_experts = num_experts;
  s.top_k = top_k;
  return s;
}

inline int32_t poison_word(uint8_t byte) { return static_cast<int32_t>(0x01010101u * byte); }
inline uint16_t poison_half(uint8_t byte) { return static_cast<uint16_t>(0x0101u * byte); }

// ---- routing ------------------------------------------------------------------------------------
struct Routing {
  std::vector<int32_t> ids;         // [T, k]
  bool has_num_tokens = false;
  int32_t num_tokens = 0;
  std::vector<int32_t> expert_map;  // empty: no map
  const int32_t* num_tokens_ptr() const { return has_num_tokens ? &num_tokens : nullptr; }
  const int32_t* map_ptr() const { return expert_map.empty() ? nullptr : expert_map.data(); }
  int num_global() const { return static_cast<int>(expert_map.size()); }
};

// Random top-k ids over [0, id_range) (distinct per token when possible), then each slot turned
// into -1 with probability p_unrouted and into an invalid id with probability p_invalid (values
// just outside the range, far outside it, and negative ones other than -1).
inline std::vector<int32_t> random_ids(Rng& rng, int64_t tokens, int top_k, int id_range, double p_unrouted,
                                       double p_invalid) {
  std::vector<int32_t> ids = random_routing(rng, tokens, top_k, id_range);
  std::uniform_real_distribution<double> u(0.0, 1.0);
  const int32_t bad[] = {id_range, id_range + 1, -2, -1000, 1 << 30, INT32_MIN, INT32_MAX};
  std::uniform_int_distribution<int> pick_bad(0, static_cast<int>(sizeof(bad) / sizeof(bad[0])) - 1);
  for (auto& id : ids) {
    const double x = u(rng);
    if (x < p_unrouted) id = -1;
    else if (x < p_unrouted + p_invalid) id = bad[pick_bad(rng)];
  }
  return ids;
}

// ---- activation-like data -----------------------------------------------------------------------
// BF16 rows of `cols` values, one of several shapes per 128-group: normal with a random magnitude
// (1e-3 .. 1e3), all zeros (the 1e-10 scale floor), tiny (below the floor: codes are subnormal or
// zero), or a single outlier among small values (most codes subnormal). Never NaN or infinite.
inline std::vector<uint16_t> random_rows(Rng& rng, int64_t rows, int64_t cols) {
  std::vector<uint16_t> v(rows * cols);
  std::uniform_int_distribution<int> kind(0, 9);
  std::uniform_real_distribution<double> log_mag(-3.0, 3.0);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_int_distribution<int> pos(0, layout::kGroup - 1);
  for (int64_t g0 = 0; g0 < rows * cols; g0 += layout::kGroup) {
    uint16_t* g = v.data() + g0;
    const int k = kind(rng);
    float mag = static_cast<float>(std::pow(10.0, log_mag(rng)));
    if (k == 0) mag = 0.0f;
    if (k == 1) mag = 1e-12f;
    for (int i = 0; i < layout::kGroup; ++i) g[i] = num::bf16_bits_from_float(mag * normal(rng));
    if (k == 2) {
      for (int i = 0; i < layout::kGroup; ++i) g[i] = num::bf16_bits_from_float(1e-3f * normal(rng));
      g[pos(rng)] = num::bf16_bits_from_float(300.0f);
    }
  }
  return v;
}

// ---- rows of a permutation ----------------------------------------------------------------------
inline std::vector<bool> live_row_mask(const ref::Permutation& p) {
  std::vector<bool> live(p.m_cap, false);
  for (size_t e = 0; e < p.ends.size(); ++e)
    for (int64_t r = layout::expert_start(p.ends.data(), static_cast<int>(e)); r < p.ends[e]; ++r) live[r] = true;
  return live;
}

// A permutation with given rows per expert (what act_quant needs: ends and m_cap), for capacity
// C and top-k; counts must sum to at most C * k.
inline ref::Permutation permutation_from_counts(const std::vector<int32_t>& counts, int64_t capacity, int top_k) {
  ref::Permutation p;
  const int E = static_cast<int>(counts.size());
  p.counts = counts;
  p.ends.resize(E);
  layout::ends_from_counts(counts.data(), E, p.ends.data());
  p.m_cap = layout::m_cap(capacity, top_k, E);
  p.m_pad = layout::m_pad(p.m_cap);
  p.row_expert.resize(p.m_cap);
  layout::padded_row_expert(p.ends.data(), E, p.m_cap, p.row_expert.data());
  return p;
}

// SPEC section 3: bytes of missing groups (past K/128) in a row's last ue8m0 word are 0. The
// reference's store_scale only replaces the bytes of groups it stores, so an expectation built on
// a poisoned buffer gets those bytes cleared here, on the rows the reference wrote.
inline void clear_missing_ue8m0_bytes(ScaleFormat f, std::vector<int32_t>& scales, int64_t m_pad, int64_t k,
                                      const std::vector<bool>& written_rows) {
  const int64_t groups = layout::groups_of(k);
  if (f != ScaleFormat::kUe8m0Packed || groups % 4 == 0) return;
  const int64_t last = groups - 1;
  uint32_t keep = 0;
  for (int64_t g = last - last % 4; g <= last; ++g) keep |= 0xFFu << (8 * layout::ue8m0_byte_of(g));
  for (int64_t r = 0; r < static_cast<int64_t>(written_rows.size()); ++r) {
    if (!written_rows[r]) continue;
    auto& w = scales[layout::ue8m0_word_index(r, last, m_pad)];
    w = static_cast<int32_t>(static_cast<uint32_t>(w) & keep);
  }
}

// ---- comparisons --------------------------------------------------------------------------------
// The bits of a value, in hex (floats, codes and indices alike).
template <typename T>
std::string hex_bits(const T& x) {
  uint64_t b = 0;
  std::memcpy(&b, &x, sizeof(T));
  char buf[24];
  std::snprintf(buf, sizeof(buf), "0x%llx", static_cast<unsigned long long>(b));
  return buf;
}

// Bit-exact comparison of two arrays; on mismatch, a failure naming the count and the first few.
template <typename T>
::testing::AssertionResult same_bits(const std::vector<T>& got, const std::vector<T>& want, size_t n,
                                     const std::string& what) {
  if (got.size() < n || want.size() < n) return ::testing::AssertionFailure() << what << ": short buffer";
  size_t bad = 0;
  std::string first;
  for (size_t i = 0; i < n; ++i) {
    if (std::memcmp(&got[i], &want[i], sizeof(T)) == 0) continue;
    if (bad < 5)
      first += " [" + std::to_string(i) + "] got " + hex_bits(got[i]) + " want " + hex_bits(want[i]) + ";";
    ++bad;
  }
  if (bad == 0) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << what << ": " << bad << " of " << n << " elements differ:" << first;
}
template <typename T>
::testing::AssertionResult same_bits(const std::vector<T>& got, const std::vector<T>& want, const std::string& what) {
  if (got.size() != want.size())
    return ::testing::AssertionFailure() << what << ": sizes " << got.size() << " vs " << want.size();
  return same_bits(got, want, got.size(), what);
}

// Every element of v[begin, end) equals `value`.
template <typename T>
::testing::AssertionResult all_equal(const std::vector<T>& v, size_t begin, size_t end, T value,
                                     const std::string& what) {
  for (size_t i = begin; i < end; ++i)
    if (std::memcmp(&v[i], &value, sizeof(T)) != 0)
      return ::testing::AssertionFailure() << what << ": element " << i << " is " << hex_bits(v[i])
                                           << ", expected the poison " << hex_bits(value);
  return ::testing::AssertionSuccess();
}

// A device copy of a host vector; at least one element so that the pointer is never null.
template <typename T>
struct Uploaded : DeviceBuffer<T> {
  explicit Uploaded(const std::vector<T>& v) : DeviceBuffer<T>(v.empty() ? 1 : v.size()) {
    if (!v.empty()) this->upload(v);
  }
};

// dst[i] = src[i] for 16-byte words, written by the SMs (so the lines stay dirty in L2).
static __global__ void copy_words_kernel(const uint4* src, uint4* dst, size_t words) {
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < words;
       i += static_cast<size_t>(gridDim.x) * blockDim.x)
    dst[i] = src[i];
}

// For kernels that drop from L2 the lines they have read (discard.global.L2): leaves 0xFF bytes
// (BF16 NaN) in HBM under `buf` and v's values in L2 only, as far as they fit. buf is filled with
// 0xFF, which a write of twice the L2's size pushes out to HBM; then the SMs copy v in, so its
// lines are dirty in L2. A line the kernel drops before all its readers have it then reads back
// as NaN, where a plain upload would leave the same values in HBM and hide the early drop.
template <typename T>
void upload_over_decoy(DeviceBuffer<T>& buf, const std::vector<T>& v) {
  ASSERT_EQ(v.size() * sizeof(T) % sizeof(uint4), 0u);
  ASSERT_LE(v.size(), buf.count);
  buf.poison(0xFF);
  int dev = 0, l2 = 0;
  CUDA_OK(cudaGetDevice(&dev));
  CUDA_OK(cudaDeviceGetAttribute(&l2, cudaDevAttrL2CacheSize, dev));
  DeviceBuffer<uint8_t> evict(2 * static_cast<size_t>(l2));
  evict.poison(0x5A);
  Uploaded<T> staged(v);
  copy_words_kernel<<<264, 256>>>(reinterpret_cast<const uint4*>(staged.ptr), reinterpret_cast<uint4*>(buf.ptr),
                                  v.size() * sizeof(T) / sizeof(uint4));
  CUDA_OK(cudaGetLastError());
  CUDA_OK(cudaDeviceSynchronize());
}

}  // namespace fp8moe::test
