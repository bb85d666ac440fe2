// GPU: src/numerics/numerics.cuh compiled as device code gives the same bits as on the host, and
// the software E4M3 / BF16 encoders agree with the hardware conversions of <cuda_fp8.h> and
// <cuda_bf16.h>. This is what lets the kernels match the CPU reference bit for bit.
// Inputs: every code or BF16 pattern where the space is small, every rounding tie between adjacent
// E4M3 values with its two float neighbours, and fresh random floats on every run.
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
#include "numerics/numerics.cuh"

namespace {

namespace num = fp8moe::num;
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

}  // namespace
