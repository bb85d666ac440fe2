// See gpu_telemetry.hpp. The NVML entry points are declared here (the toolkit on the dev machine
// ships no nvml.h): they are the stable C API of libnvidia-ml.so.1, returning 0 (NVML_SUCCESS).
#include "bench/gpu_telemetry.hpp"

#include <cuda_runtime.h>
#include <cmath>
#include <dlfcn.h>

#include <chrono>

#include "bench/bench_common.cuh"  // stats_of

namespace fp8moe::bench {

// nvmlFieldValue_t (nvml.h): the value is a union of 8 bytes, tagged by valueType.
struct NvmlFieldValue {
  unsigned field_id;
  unsigned scope_id;
  long long timestamp;
  long long latency_us;
  int value_type;  // 0 double, 1 uint, 2 ulong, 3 ulonglong, 4 slonglong, 5 sint, 6 ushort
  int nvml_return;
  union {
    double d;
    unsigned ui;
    unsigned long ul;
    unsigned long long ull;
    long long sll;
    int si;
    unsigned short us;
  } value;
};
static_assert(sizeof(NvmlFieldValue) == 40, "nvmlFieldValue_t's layout");

namespace {

constexpr int kNvmlSuccess = 0;
constexpr int kNvmlClockSm = 1;  // NVML_CLOCK_SM
constexpr unsigned kNvmlFieldPowerInstant = 186;  // NVML_FI_DEV_POWER_INSTANT (milliwatts)
constexpr auto kPeriod = std::chrono::milliseconds(2);

// The instantaneous board power in milliwatts, or -1.
double instant_power_mw(int (*get_fields)(void*, int, NvmlFieldValue*), void* device) {
  NvmlFieldValue v{};
  v.field_id = kNvmlFieldPowerInstant;
  if (get_fields == nullptr || get_fields(device, 1, &v) != kNvmlSuccess || v.nvml_return != kNvmlSuccess) return -1;
  switch (v.value_type) {
    case 0: return v.value.d;
    case 1: return v.value.ui;
    case 2: return static_cast<double>(v.value.ul);
    case 3: return static_cast<double>(v.value.ull);
    case 4: return static_cast<double>(v.value.sll);
    case 5: return v.value.si;
    case 6: return v.value.us;
    default: return -1;
  }
}

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
  get_fields_ = symbol<int (*)(void*, int, NvmlFieldValue*)>(lib_, "nvmlDeviceGetFieldValues");
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
  // Instantaneous power where the driver has it; nvmlDeviceGetPowerUsage is a ~1 s average on
  // recent GPUs, which smears an arm's replays with the gaps and the other arm around them.
  if (device_ != nullptr && instant_power_mw(get_fields_, device_) < 0) get_fields_ = nullptr;
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
      const double instant = get_fields_ ? instant_power_mw(get_fields_, device_) : -1;
      if (instant >= 0) current_.power_w.push_back(instant * 1e-3);
      else if (get_power_(device_, &mw) == kNvmlSuccess) current_.power_w.push_back(mw * 1e-3);
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
