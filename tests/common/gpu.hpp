// Helpers shared by the GPU tests: skipping without a GPU, checked CUDA calls, device buffers and
// poisoning. Fresh random seeds and random inputs come from common/data.hpp (shared with the CPU tests).
#pragma once

#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "common/data.hpp"  // fresh_seed and random inputs

namespace fp8moe::test {

inline int gpu_arch() {  // 0 without a usable GPU, else major*10 + minor
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess || n == 0) {
    cudaGetLastError();
    return 0;
  }
  int dev = 0, major = 0, minor = 0;
  cudaGetDevice(&dev);
  cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev);
  cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev);
  return major * 10 + minor;
}

template <typename T>
struct DeviceBuffer {
  T* ptr = nullptr;
  size_t count = 0;
  DeviceBuffer() = default;
  explicit DeviceBuffer(size_t n) : count(n) {
    if (n && cudaMalloc(&ptr, n * sizeof(T)) != cudaSuccess) {
      ptr = nullptr;
      ADD_FAILURE() << "cudaMalloc of " << n * sizeof(T) << " bytes failed";
    }
  }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  DeviceBuffer(DeviceBuffer&& o) noexcept : ptr(o.ptr), count(o.count) { o.ptr = nullptr, o.count = 0; }
  DeviceBuffer& operator=(DeviceBuffer&& o) noexcept {
    if (this != &o) {
      if (ptr) cudaFree(ptr);
      ptr = o.ptr, count = o.count;
      o.ptr = nullptr, o.count = 0;
    }
    return *this;
  }
  ~DeviceBuffer() { if (ptr) cudaFree(ptr); }
  size_t bytes() const { return count * sizeof(T); }
  void upload(const std::vector<T>& v) { ASSERT_EQ(cudaMemcpy(ptr, v.data(), v.size() * sizeof(T), cudaMemcpyHostToDevice), cudaSuccess); }
  std::vector<T> download() const {
    std::vector<T> v(count);
    EXPECT_EQ(cudaMemcpy(v.data(), ptr, bytes(), cudaMemcpyDeviceToHost), cudaSuccess);
    return v;
  }
  void poison(uint8_t byte) { ASSERT_EQ(cudaMemset(ptr, byte, bytes()), cudaSuccess); }
};

}  // namespace fp8moe::test

#define FP8MOE_REQUIRE_GPU()                                              \
  do {                                                                    \
    if (::fp8moe::test::gpu_arch() == 0) GTEST_SKIP() << "no CUDA GPU";   \
  } while (0)
#define FP8MOE_REQUIRE_SM90()                                                       \
  do {                                                                              \
    const int arch_ = ::fp8moe::test::gpu_arch();                                   \
    if (arch_ == 0) GTEST_SKIP() << "no CUDA GPU";                                  \
    if (arch_ != 90) GTEST_SKIP() << "needs an SM90 GPU, found sm_" << arch_;       \
  } while (0)
#define CUDA_OK(expr) ASSERT_EQ((expr), cudaSuccess) << #expr << ": " << cudaGetErrorString(cudaGetLastError())
