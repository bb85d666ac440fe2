// See gpu_telemetry.hpp. The NVML entry points are declared here (the toolkit on the dev machine
// ships no nvml.h): they are the stable C API of libnvidia-ml.so.1, returning 0 (NVML_SUCCESS).
#include "bench/gpu_telemetry.hpp"

#include <cuda_runtime.h>
#include <cmath>
#include <dlfcn.h>

#include <chrono>

#include "bench/bench_common.cuh"  // stats_of

namespace fp8moe::bench {
namespace {

constexpr int kNvmlSuccess = 0;
constexpr int kNvmlClockSm = 1;  // NVML_CLOCK_SM
constexpr auto kPeriod = std::chrono::milliseconds(2);

template <typename F>
F symbol(void* lib, const char* name) {
  return reinterpret_cast<F>(dlsym(lib, name));
}

double median_or_nan(const std::vector<double>& v) { return v.empty() ? NAN : stats_of(v).median; }

}  // namespace

double TelemetrySamples::sm_clock_median() const { return median_or_nan(sm_clock_mhz); }
double TelemetrySamples::power_median() const { return median_or_nan(power_w); }

GpuTelemetry::GpuTelemetry(int cuda_device) {
  lib_ = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
  if (lib_ == nullptr) return;
  auto init = symbol<int (*)()>(lib_, "nvmlInit_v2");
  auto by_bus = symbol<int (*)(const char*, void**)>(lib_, "nvmlDeviceGetHandleByPciBusId_v2");
  auto by_index = symbol<int (*)(unsigned, void**)>(lib_, "nvmlDeviceGetHandleByIndex_v2");
  get_clock_ = symbol<int (*)(void*, int, unsigned*)>(lib_, "nvmlDeviceGetClockInfo");
  get_power_ = symbol<int (*)(void*, unsigned*)>(lib_, "nvmlDeviceGetPowerUsage");
  if (!init || !by_bus || !by_index || !get_clock_ || !get_power_ || init() != kNvmlSuccess) {
    dlclose(lib_);
    lib_ = nullptr;
    return;
  }
  // The CUDA device by its PCI address (NVML's order can differ from CUDA's), else index 0.
  char bus[64] = {};
  void* device = nullptr;
  if (cudaDeviceGetPCIBusId(bus, sizeof bus, cuda_device) != cudaSuccess || by_bus(bus, &device) != kNvmlSuccess) {
    cudaGetLastError();
    device = nullptr;
    if (by_index(0, &device) != kNvmlSuccess) device = nullptr;
  }
  unsigned probe = 0;
  if (device != nullptr && get_clock_(device, kNvmlClockSm, &probe) == kNvmlSuccess) device_ = device;
}

GpuTelemetry::~GpuTelemetry() {
  if (thread_.joinable()) {
    running_ = false;
    thread_.join();
  }
  if (lib_ != nullptr) {
    if (auto shutdown = symbol<int (*)()>(lib_, "nvmlShutdown")) shutdown();
    dlclose(lib_);
  }
}

void GpuTelemetry::start() {
  if (!available() || thread_.joinable()) return;
  current_ = TelemetrySamples{};
  running_ = true;
  thread_ = std::thread([this] {
    while (running_) {
      unsigned mhz = 0, mw = 0;
      if (get_clock_(device_, kNvmlClockSm, &mhz) == kNvmlSuccess) current_.sm_clock_mhz.push_back(mhz);
      if (get_power_(device_, &mw) == kNvmlSuccess) current_.power_w.push_back(mw * 1e-3);
      std::this_thread::sleep_for(kPeriod);
    }
  });
}

void GpuTelemetry::stop(TelemetrySamples* out) {
  if (!thread_.joinable()) return;
  running_ = false;
  thread_.join();
  out->sm_clock_mhz.insert(out->sm_clock_mhz.end(), current_.sm_clock_mhz.begin(), current_.sm_clock_mhz.end());
  out->power_w.insert(out->power_w.end(), current_.power_w.begin(), current_.power_w.end());
}

}  // namespace fp8moe::bench
