// GPU: src/numerics/numerics.cuh compiled as device code gives the same bits as on the host, and
// the software E4M3 / BF16 encoders agree with the hardware conversions of <cuda_fp8.h> and
// <cuda_bf16.h>. This is what lets the kernels match the CPU reference bit for bit.
// Inputs: every code or BF16 pattern where the space is small, every rounding tie between adjacent
// E4M3 values with its two float neighbours, and fresh random floats on every run.
// Exhaustive sweeps (all 2^32 floats, or every (amax, x) pair the quantizer can see) hold the
// device's fast paths to the software definitions: the hardware E4M3 encoder (num::e4m3_from_float
// on the device) and its packed form, the hardware BF16 rounding of act_quant, and the kernels'
// exact shortcuts in src/kernels/common.cuh (sigmoid_fast, rcp_rn_fast, group_scale_bf16,
// GroupDivider).
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <functional>
#include <iterator>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "common/gpu.hpp"
#include "kernels/common.cuh"
#include "numerics/numerics.cuh"

namespace {

namespace num = fp8moe::num;
namespace kd = fp8moe::kernels::detail;
using fp8moe::test::DeviceBuffer;

constexpr int kBlocks = 1024;
constexpr int kThreads = 256;

// ---- device side: each kernel applies the shared functions (and the hardware ones) elementwise ----

__global__ void decode_kernel(uint32_t* e4m3_ours, uint32_t* e4m3_hw, uint32_t* ue8m0, uint32_t* ue8m0_round_trip) {
  const int c = threadIdx.x;  // one thread per code, 256 threads
  e4m3_ours[c] = num::bits_of(num::float_from_e4m3(static_cast<uint8_t>(c)));
  const __half h(__nv_cvt_fp8_to_halfraw(static_cast<__nv_fp8_storage_t>(c), __NV_E4M3));
  e4m3_hw[c] = num::bits_of(__half2float(h));
  const float v = num::float_from_ue8m0(static_cast<uint8_t>(c));
  ue8m0[c] = num::bits_of(v);
  ue8m0_round_trip[c] = num::ue8m0_ceil_from_float(v);
}

__global__ void encode_kernel(const float* x, size_t n, uint8_t* e4m3_ours, uint8_t* e4m3_hw, uint16_t* bf16_ours,
                              uint16_t* bf16_hw, uint8_t* ue8m0, uint32_t* scale, uint32_t* scale_pow2) {
  for (size_t i = blockIdx.x * size_t{blockDim.x} + threadIdx.x; i < n; i += size_t{gridDim.x} * blockDim.x) {
    const float v = x[i];
    e4m3_ours[i] = num::e4m3_from_float(v);
    e4m3_hw[i] = __nv_cvt_float_to_fp8(v, __NV_SATFINITE, __NV_E4M3);
    bf16_ours[i] = num::bf16_bits_from_float(v);
    bf16_hw[i] = __bfloat16_as_ushort(__float2bfloat16_rn(v));
    const float a = num::abs_f(v);
    ue8m0[i] = num::ue8m0_ceil_from_float(a);
    scale[i] = num::bits_of(num::group_scale(a, false));
    scale_pow2[i] = num::bits_of(num::group_scale(a, true));
  }
}

__global__ void math_kernel(const float* x, const float* g, const float* u, size_t n, num::ActParams swiglu,
                            uint32_t* exp_out, uint32_t* silu_out, uint32_t* swiglu_out) {
  num::ActParams silu;
  silu.kind = num::ActKind::kSilu;
  for (size_t i = blockIdx.x * size_t{blockDim.x} + threadIdx.x; i < n; i += size_t{gridDim.x} * blockDim.x) {
    exp_out[i] = num::bits_of(num::exp_f(x[i]));
    silu_out[i] = num::bits_of(num::activation(g[i], u[i], silu));
    swiglu_out[i] = num::bits_of(num::activation(g[i], u[i], swiglu));
  }
}

// ---- exhaustive sweeps: a mismatch counter and the first few offending inputs ----------------------

struct Misses {
  unsigned long long count;
  unsigned long long checked;
  uint32_t input[8];   // first mismatching inputs (bit patterns; meaning depends on the sweep)
  uint32_t got[8], want[8];
};
__device__ void record_miss(Misses* m, uint32_t input, uint32_t got, uint32_t want) {
  const unsigned long long k = atomicAdd(&m->count, 1ull);
  if (k < 8) {
    m->input[k] = input;
    m->got[k] = got;
    m->want[k] = want;
  }
}
constexpr int kSweepBlocks = 4096;
constexpr int kSweepThreads = 256;

// Every float bit pattern: the device encoder (hardware) against the software definition, scalar
// and packed (four different inputs per word, so that a NaN fix-up can't leak into a neighbour).
__global__ void e4m3_sweep_kernel(Misses* scalar, Misses* packed) {
  unsigned long long checked = 0;
  for (uint64_t i = blockIdx.x * uint64_t{blockDim.x} + threadIdx.x; i < (uint64_t{1} << 32);
       i += uint64_t{gridDim.x} * blockDim.x) {
    const uint32_t u = static_cast<uint32_t>(i);
    const float x = num::float_of(u);
    const uint32_t want = num::e4m3_from_float_soft(x);
    const uint32_t got = num::e4m3_from_float(x);
    if (got != want) record_miss(scalar, u, got, want);
    const float x1 = num::float_of(u ^ 0x80000000u), x2 = num::float_of(u * 0x9E3779B9u), x3 = num::float_of(~u);
    const uint32_t want4 = want | (uint32_t{num::e4m3_from_float_soft(x1)} << 8) |
                           (uint32_t{num::e4m3_from_float_soft(x2)} << 16) |
                           (uint32_t{num::e4m3_from_float_soft(x3)} << 24);
    const uint32_t got4 = num::e4m3x4_from_float(x, x1, x2, x3);
    if (got4 != want4) record_miss(packed, u, got4, want4);
    ++checked;
  }
  atomicAdd(&scalar->checked, checked);
  atomicAdd(&packed->checked, checked);
}

// Every float bit pattern: act_quant's hardware BF16 rounding (two values per instruction) against
// num::bf16_bits_from_float; a NaN must give a NaN (its bits are never observed there).
__global__ void bf16_sweep_kernel(Misses* m) {
  unsigned long long checked = 0;
  for (uint64_t i = blockIdx.x * uint64_t{blockDim.x} + threadIdx.x; i < (uint64_t{1} << 32);
       i += uint64_t{gridDim.x} * blockDim.x) {
    const uint32_t u = static_cast<uint32_t>(i);
    const float lo = num::float_of(u), hi = num::float_of(u * 0x9E3779B9u);
    const uint32_t got = kd::bf16x2_rn_any_nan(lo, hi);
    uint32_t want = num::bf16_bits_from_float(lo) | (uint32_t{num::bf16_bits_from_float(hi)} << 16);
    uint32_t got_cmp = got;
    // NaN inputs: any NaN will do; compare "is a NaN" instead of the bits
    if (num::is_nan(lo)) {
      got_cmp = (got_cmp & 0xFFFF0000u) | ((got & 0x7FFFu) > 0x7F80u ? 1u : 0u);
      want = (want & 0xFFFF0000u) | 1u;
    }
    if (num::is_nan(hi)) {
      got_cmp = (got_cmp & 0xFFFFu) | ((((got >> 16) & 0x7FFFu) > 0x7F80u ? 1u : 0u) << 16);
      want = (want & 0xFFFFu) | (1u << 16);
    }
    if (got_cmp != want) record_miss(m, u, got, want);
    ++checked;
  }
  atomicAdd(&m->checked, checked);
}

// Every float x: sigmoid_fast(x) against num::sigmoid_f(x) wherever the kernel takes the fast path
// (|n| <= 125), and a NaN for a NaN x; silu's |g| <= 86 test implies |n| <= 125; rcp_rn_fast(d)
// against __frcp_rn(d) for every d with exponent field 1..252.
__global__ void sigmoid_sweep_kernel(Misses* sig, Misses* range, Misses* rcp, unsigned long long* fast_count) {
  unsigned long long checked = 0, fast = 0, rcps = 0;
  for (uint64_t i = blockIdx.x * uint64_t{blockDim.x} + threadIdx.x; i < (uint64_t{1} << 32);
       i += uint64_t{gridDim.x} * blockDim.x) {
    const uint32_t u = static_cast<uint32_t>(i);
    const float x = num::float_of(u);
    float n;
    const float s = kd::sigmoid_fast(x, n);
    if (num::is_nan(x)) {
      if (!num::is_nan(s)) record_miss(sig, u, num::bits_of(s), 0x7FC00000u);
    } else if (num::abs_f(n) <= kd::kSigmoidFastMaxN) {
      ++fast;
      const float want = num::sigmoid_f(x);
      if (num::bits_of(s) != num::bits_of(want)) record_miss(sig, u, num::bits_of(s), num::bits_of(want));
    } else if (num::abs_f(x) <= kd::kSiluFastMaxAbsGate) {
      record_miss(range, u, num::bits_of(n), 0u);
    }
    const uint32_t exp_field = (u >> 23) & 0xFFu;
    if (exp_field >= 1u && exp_field <= 252u) {
      ++rcps;
      const float got = kd::rcp_rn_fast(x), want = __frcp_rn(x);
      if (num::bits_of(got) != num::bits_of(want)) record_miss(rcp, u, num::bits_of(got), num::bits_of(want));
    }
    ++checked;
  }
  atomicAdd(&sig->checked, checked);
  atomicAdd(&range->checked, checked);
  atomicAdd(&rcp->checked, rcps);
  atomicAdd(fast_count, fast);
}

// Every (amax, x) the quantizer sees: amax any BF16 value >= 0 (finite or +inf; block b handles
// amax bits b), x any BF16 value with |x| <= amax, both signs, and NaNs; both scale formats. The
// E4M3 code through group_scale_bf16 + GroupDivider + the hardware encoder against the definition,
// num::e4m3_from_float_soft(num::div_rn(x, num::group_scale(amax, pow2))); and the scale itself.
__global__ void quantizer_sweep_kernel(Misses* codes, Misses* scales) {
  const uint32_t amax_bits = blockIdx.x;  // 0 .. 0x7F80
  const float amax = num::float_from_bf16_bits(static_cast<uint16_t>(amax_bits));
  unsigned long long checked = 0;
#pragma unroll 1
  for (int pow2 = 0; pow2 < 2; ++pow2) {
    const float s = num::group_scale(amax, pow2 != 0);
    if (threadIdx.x == 0) {
      const float got = kd::group_scale_bf16(amax, pow2 != 0);
      if (num::bits_of(got) != num::bits_of(s)) record_miss(scales, amax_bits | (pow2 << 16), num::bits_of(got), num::bits_of(s));
      atomicAdd(&scales->checked, 1ull);
    }
    const kd::GroupDivider<true> div_pow2(s);
    const kd::GroupDivider<false> div_fp32(s);
    // x: magnitudes 0..amax_bits, both signs; then two NaNs
    for (uint32_t k = threadIdx.x; k < 2 * (amax_bits + 1) + 2; k += blockDim.x) {
      uint32_t xb;
      if (k < 2 * (amax_bits + 1)) xb = (k >> 1) | ((k & 1u) << 15);
      else xb = k == 2 * (amax_bits + 1) ? 0x7FC1u : 0xFF81u;
      const float x = num::float_from_bf16_bits(static_cast<uint16_t>(xb));
      const uint32_t want = num::e4m3_from_float_soft(num::div_rn(x, s));
      const float q = pow2 ? div_pow2(x) : div_fp32(x);
      const uint32_t got = num::e4m3_from_float(q);
      if (got != want) record_miss(codes, xb | (amax_bits << 16), got | (pow2 << 8), want);
      ++checked;
    }
  }
  atomicAdd(&codes->checked, checked);
}

// ---- host side --------------------------------------------------------------------------------------

std::string describe_float(float x) {
  std::ostringstream s;
  s << std::hexfloat << x << " (0x" << std::hex << num::bits_of(x) << ")";
  return s.str();
}

// Expects device[i] == host[i] for every i where `compare(i)` holds; reports the first few misses.
template <typename T>
void expect_bits_equal(const char* what, const std::vector<T>& device, const std::vector<T>& host,
                       const std::function<std::string(size_t)>& input,
                       const std::function<bool(size_t)>& compare = [](size_t) { return true; }) {
  ASSERT_EQ(device.size(), host.size());
  size_t checked = 0, bad = 0;
  for (size_t i = 0; i < host.size(); ++i) {
    if (!compare(i)) continue;
    ++checked;
    if (device[i] == host[i]) continue;
    if (++bad <= 5)
      ADD_FAILURE() << what << ": input " << input(i) << ": got 0x" << std::hex << uint64_t{device[i]} << ", want 0x"
                    << uint64_t{host[i]};
  }
  EXPECT_EQ(bad, 0u) << what << ": " << bad << " of " << checked << " differ";
  std::printf("[ compared ] %-44s %zu values, %zu differ\n", what, checked, bad);
}

float from_bits(uint32_t u) { return num::float_of(u); }
float next_up(float x) { return std::nextafter(x, INFINITY); }
float next_down(float x) { return std::nextafter(x, -INFINITY); }

// All 65536 BF16 patterns, every tie between adjacent E4M3 values (and past 448) with its float
// neighbours, special values, then `random_count` random floats: a quarter any bit pattern (NaN
// and infinities included), the rest with magnitudes in [2^-12, 2^11), around the E4M3 range.
std::vector<float> conversion_inputs(size_t random_count, uint64_t seed) {
  std::vector<float> x;
  for (uint32_t b = 0; b < 65536; ++b) x.push_back(num::float_from_bf16_bits(static_cast<uint16_t>(b)));
  for (int c = 0; c < 0x7E; ++c) {  // positive finite codes 0..0x7E
    const float mid = (num::float_from_e4m3(c) + num::float_from_e4m3(c + 1)) / 2;  // exact
    for (float v : {mid, next_up(mid), next_down(mid)}) {
      x.push_back(v);
      x.push_back(-v);
    }
  }
  for (float v : {464.0f, next_up(464.0f), next_down(464.0f), 448.0f, 480.0f, 0.0f, 1e-10f, 0x1p-10f,
                  0x1p-126f, 0x1p-149f, 3.4028235e38f, INFINITY, NAN}) {
    x.push_back(v);
    x.push_back(-v);
  }
  std::mt19937_64 rng(seed);
  for (size_t i = 0; i < random_count; ++i) {
    uint32_t bits = static_cast<uint32_t>(rng());
    if (rng() % 4 != 0) bits = (bits & 0x807FFFFFu) | ((127u - 12u + static_cast<uint32_t>(rng() % 23)) << 23);
    x.push_back(from_bits(bits));
  }
  return x;
}

TEST(Conversions, DecodeAllCodes) {
  FP8MOE_REQUIRE_GPU();
  DeviceBuffer<uint32_t> e4m3_ours(256), e4m3_hw(256), ue8m0(256), round_trip(256);
  decode_kernel<<<1, 256>>>(e4m3_ours.ptr, e4m3_hw.ptr, ue8m0.ptr, round_trip.ptr);
  CUDA_OK(cudaGetLastError());
  CUDA_OK(cudaDeviceSynchronize());

  std::vector<uint32_t> host_e4m3(256), host_ue8m0(256), host_round_trip(256), codes(256);
  for (int c = 0; c < 256; ++c) {
    host_e4m3[c] = num::bits_of(num::float_from_e4m3(static_cast<uint8_t>(c)));
    host_ue8m0[c] = num::bits_of(num::float_from_ue8m0(static_cast<uint8_t>(c)));
    host_round_trip[c] = num::ue8m0_ceil_from_float(num::float_from_ue8m0(static_cast<uint8_t>(c)));
    codes[c] = static_cast<uint32_t>(c);
  }
  auto code = [](size_t i) { return "code " + std::to_string(i); };
  const std::vector<uint32_t> device_e4m3 = e4m3_ours.download(), hw = e4m3_hw.download();
  expect_bits_equal("e4m3 decode, device vs host", device_e4m3, host_e4m3, code);
  // The hardware decodes to FP16, which holds every E4M3 value exactly; NaN payloads differ.
  auto not_nan = [](size_t c) { return (c & 0x7F) != 0x7F; };
  expect_bits_equal("e4m3 decode, hardware vs ours (non-NaN)", hw, host_e4m3, code, not_nan);
  for (int c : {0x7F, 0xFF}) {
    EXPECT_TRUE(num::is_nan(from_bits(hw[c]))) << "hardware decode of " << c;
    EXPECT_TRUE(num::is_nan(from_bits(device_e4m3[c]))) << "our decode of " << c;
  }
  expect_bits_equal("ue8m0 decode, device vs host", ue8m0.download(), host_ue8m0, code);
  const std::vector<uint32_t> device_round_trip = round_trip.download();
  expect_bits_equal("ue8m0 encode(decode), device vs host", device_round_trip, host_round_trip, code);
  expect_bits_equal("ue8m0 encode(decode) is the code", device_round_trip, codes, code);
}

TEST(Conversions, EncodeMatchesHostAndHardware) {
  FP8MOE_REQUIRE_GPU();
  const std::vector<float> x = conversion_inputs(size_t{1} << 24, fp8moe::test::fresh_seed());
  const size_t n = x.size();
  DeviceBuffer<float> input(n);
  DeviceBuffer<uint8_t> e4m3_ours(n), e4m3_hw(n), ue8m0(n);
  DeviceBuffer<uint16_t> bf16_ours(n), bf16_hw(n);
  DeviceBuffer<uint32_t> scale(n), scale_pow2(n);
  input.upload(x);
  ASSERT_FALSE(HasFatalFailure());
  encode_kernel<<<kBlocks, kThreads>>>(input.ptr, n, e4m3_ours.ptr, e4m3_hw.ptr, bf16_ours.ptr, bf16_hw.ptr,
                                       ue8m0.ptr, scale.ptr, scale_pow2.ptr);
  CUDA_OK(cudaGetLastError());
  CUDA_OK(cudaDeviceSynchronize());

  std::vector<uint8_t> host_e4m3(n), host_ue8m0(n);
  std::vector<uint16_t> host_bf16(n);
  std::vector<uint32_t> host_scale(n), host_scale_pow2(n);
  for (size_t i = 0; i < n; ++i) {
    host_e4m3[i] = num::e4m3_from_float(x[i]);
    host_bf16[i] = num::bf16_bits_from_float(x[i]);
    const float a = num::abs_f(x[i]);
    host_ue8m0[i] = num::ue8m0_ceil_from_float(a);
    host_scale[i] = num::bits_of(num::group_scale(a, false));
    host_scale_pow2[i] = num::bits_of(num::group_scale(a, true));
  }
  auto input_of = [&](size_t i) { return describe_float(x[i]); };
  auto not_nan = [&](size_t i) { return !num::is_nan(x[i]); };

  const std::vector<uint8_t> hw_e4m3 = e4m3_hw.download();
  expect_bits_equal("e4m3 encode, device vs host", e4m3_ours.download(), host_e4m3, input_of);
  expect_bits_equal("e4m3 encode, hardware satfinite vs ours", hw_e4m3, host_e4m3, input_of, not_nan);

  const std::vector<uint16_t> hw_bf16 = bf16_hw.download();
  expect_bits_equal("bf16 round, device vs host", bf16_ours.download(), host_bf16, input_of);
  expect_bits_equal("bf16 round, __float2bfloat16_rn vs ours", hw_bf16, host_bf16, input_of, not_nan);

  // NaN: our encoders give a NaN (E4M3 0x7F, BF16 quiet NaN with the sign); the hardware gives a
  // NaN too, possibly another one.
  size_t nans = 0;
  for (size_t i = 0; i < n; ++i) {
    if (!num::is_nan(x[i])) continue;
    ++nans;
    EXPECT_EQ(host_e4m3[i], 0x7F) << input_of(i);
    EXPECT_EQ(hw_e4m3[i] & 0x7F, 0x7F) << "hardware e4m3 of " << input_of(i);
    EXPECT_GT(host_bf16[i] & 0x7FFF, 0x7F80) << input_of(i);
    EXPECT_GT(hw_bf16[i] & 0x7FFF, 0x7F80) << "hardware bf16 of " << input_of(i);
  }
  EXPECT_GT(nans, 0u);
  std::printf("[ compared ] %-44s %zu values\n", "NaN inputs: NaN out, ours and hardware", nans);

  expect_bits_equal("ue8m0 ceil encode, device vs host", ue8m0.download(), host_ue8m0, input_of);
  expect_bits_equal("group scale, device vs host", scale.download(), host_scale, input_of);
  expect_bits_equal("group scale pow2, device vs host", scale_pow2.download(), host_scale_pow2, input_of);
}

TEST(Conversions, ExpAndActivationsMatchHost) {
  FP8MOE_REQUIRE_GPU();
  const size_t n = size_t{1} << 20;
  std::mt19937_64 rng(fp8moe::test::fresh_seed());
  std::uniform_real_distribution<float> wide(-110.0f, 95.0f), narrow(-12.0f, 12.0f), large(-300.0f, 300.0f);
  std::vector<float> x(n), g(n), u(n);
  const float specials[] = {0.0f, -0.0f, 88.7f, next_up(88.7f), -103.5f, next_down(-103.5f), INFINITY, -INFINITY,
                            NAN, 7.0f, -7.0f, 1e-30f};
  for (size_t i = 0; i < n; ++i) {
    x[i] = i < std::size(specials) ? specials[i] : (i % 2 ? wide(rng) : narrow(rng));
    // activation inputs are BF16 values (GEMM1 writes BF16)
    g[i] = num::round_to_bf16(i % 8 == 0 ? large(rng) : narrow(rng));
    u[i] = num::round_to_bf16(i % 8 == 1 ? large(rng) : narrow(rng));
  }
  num::ActParams swiglu;
  swiglu.kind = num::ActKind::kSwigluOai;
  swiglu.alpha = 1.702f;
  swiglu.beta = 1.0f;
  swiglu.limit = 7.0f;

  DeviceBuffer<float> dx(n), dg(n), du(n);
  DeviceBuffer<uint32_t> exp_out(n), silu_out(n), swiglu_out(n);
  dx.upload(x);
  dg.upload(g);
  du.upload(u);
  ASSERT_FALSE(HasFatalFailure());
  math_kernel<<<kBlocks, kThreads>>>(dx.ptr, dg.ptr, du.ptr, n, swiglu, exp_out.ptr, silu_out.ptr, swiglu_out.ptr);
  CUDA_OK(cudaGetLastError());
  CUDA_OK(cudaDeviceSynchronize());

  num::ActParams silu;
  silu.kind = num::ActKind::kSilu;
  std::vector<uint32_t> host_exp(n), host_silu(n), host_swiglu(n);
  for (size_t i = 0; i < n; ++i) {
    host_exp[i] = num::bits_of(num::exp_f(x[i]));
    host_silu[i] = num::bits_of(num::activation(g[i], u[i], silu));
    host_swiglu[i] = num::bits_of(num::activation(g[i], u[i], swiglu));
  }
  auto x_of = [&](size_t i) { return describe_float(x[i]); };
  auto gu_of = [&](size_t i) { return "g=" + describe_float(g[i]) + " u=" + describe_float(u[i]); };
  expect_bits_equal("exp_f, device vs host", exp_out.download(), host_exp, x_of);
  expect_bits_equal("silu(g) * u, device vs host", silu_out.download(), host_silu, gu_of);
  expect_bits_equal("swiglu_oai, device vs host", swiglu_out.download(), host_swiglu, gu_of);
}

// ---- exhaustive sweeps ---------------------------------------------------------------------------

struct SweepResult {
  Misses m;
  void print(const char* what) const {
    std::printf("[ swept    ] %-52s %llu checked, %llu differ\n", what, m.checked, m.count);
    for (unsigned long long k = 0; k < m.count && k < 8; ++k)
      ADD_FAILURE() << what << ": input 0x" << std::hex << m.input[k] << ": got 0x" << m.got[k] << ", want 0x"
                    << m.want[k];
  }
};
std::vector<SweepResult> download_misses(const DeviceBuffer<Misses>& d) {
  std::vector<Misses> v = d.download();
  std::vector<SweepResult> r(v.size());
  for (size_t i = 0; i < v.size(); ++i) r[i].m = v[i];
  return r;
}

TEST(Conversions, E4m3HardwareMatchesSoftwareOnEveryFloat) {
  FP8MOE_REQUIRE_GPU();
  DeviceBuffer<Misses> misses(2);
  CUDA_OK(cudaMemset(misses.ptr, 0, misses.bytes()));
  e4m3_sweep_kernel<<<kSweepBlocks, kSweepThreads>>>(misses.ptr, misses.ptr + 1);
  CUDA_OK(cudaGetLastError());
  CUDA_OK(cudaDeviceSynchronize());
  const auto r = download_misses(misses);
  r[0].print("e4m3_from_float (device) vs _soft, all 2^32");
  r[1].print("e4m3x4_from_float (device) vs _soft, all 2^32");
  EXPECT_EQ(r[0].m.checked, uint64_t{1} << 32);
  EXPECT_EQ(r[0].m.count, 0u);
  EXPECT_EQ(r[1].m.count, 0u);
}

TEST(Conversions, Bf16x2HardwareMatchesSoftwareOnEveryFloat) {
  FP8MOE_REQUIRE_GPU();
  DeviceBuffer<Misses> misses(1);
  CUDA_OK(cudaMemset(misses.ptr, 0, misses.bytes()));
  bf16_sweep_kernel<<<kSweepBlocks, kSweepThreads>>>(misses.ptr);
  CUDA_OK(cudaGetLastError());
  CUDA_OK(cudaDeviceSynchronize());
  const auto r = download_misses(misses);
  r[0].print("bf16x2_rn_any_nan vs bf16_bits_from_float, all 2^32");
  EXPECT_EQ(r[0].m.checked, uint64_t{1} << 32);
  EXPECT_EQ(r[0].m.count, 0u);
}

TEST(Conversions, SigmoidFastPathMatchesOnEveryFloat) {
  FP8MOE_REQUIRE_GPU();
  DeviceBuffer<Misses> misses(3);
  DeviceBuffer<unsigned long long> fast(1);
  CUDA_OK(cudaMemset(misses.ptr, 0, misses.bytes()));
  CUDA_OK(cudaMemset(fast.ptr, 0, fast.bytes()));
  sigmoid_sweep_kernel<<<kSweepBlocks, kSweepThreads>>>(misses.ptr, misses.ptr + 1, misses.ptr + 2, fast.ptr);
  CUDA_OK(cudaGetLastError());
  CUDA_OK(cudaDeviceSynchronize());
  const auto r = download_misses(misses);
  const unsigned long long fast_inputs = fast.download()[0];
  r[0].print("sigmoid_fast vs num::sigmoid_f, all 2^32");
  r[1].print("|x| <= 86 implies |n| <= 125, all 2^32");
  r[2].print("rcp_rn_fast vs __frcp_rn, exponent field 1..252");
  std::printf("[ swept    ] %llu inputs on the fast path\n", fast_inputs);
  EXPECT_EQ(r[0].m.count, 0u);
  EXPECT_EQ(r[1].m.count, 0u);
  EXPECT_EQ(r[2].m.count, 0u);
  EXPECT_GT(fast_inputs, uint64_t{1} << 31);  // every |x| < 87 or so: more than half the floats
}

TEST(Conversions, GroupQuantizerMatchesDivisionOnEveryBf16Pair) {
  FP8MOE_REQUIRE_GPU();
  DeviceBuffer<Misses> misses(2);
  CUDA_OK(cudaMemset(misses.ptr, 0, misses.bytes()));
  quantizer_sweep_kernel<<<0x7F81, kSweepThreads>>>(misses.ptr, misses.ptr + 1);
  CUDA_OK(cudaGetLastError());
  CUDA_OK(cudaDeviceSynchronize());
  const auto r = download_misses(misses);
  r[0].print("E4M3 codes of x / group_scale(amax), all BF16 pairs");
  r[1].print("group_scale_bf16 vs num::group_scale, all BF16 amax");
  EXPECT_EQ(r[0].m.checked, 2 * (uint64_t{0x7F81} * 0x7F82 + 2 * uint64_t{0x7F81}));
  EXPECT_EQ(r[1].m.checked, 2 * uint64_t{0x7F81});
  EXPECT_EQ(r[0].m.count, 0u);
  EXPECT_EQ(r[1].m.count, 0u);
}

}  // namespace
