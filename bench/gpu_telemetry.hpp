// SM clock and board power while a benchmark arm runs, so that a result says whether the GPU was
// at its power limit (the H200 draws its 700 W limit on prefill GEMMs and then lowers the SM clock
// from 1980 to ~1400 MHz: docs/perf-notes.md v11). NVML is loaded at run time (libnvidia-ml.so.1,
// part of the driver); without it, or without a GPU, the sampler reports nothing and the benchmark
// runs as before.
//
//   GpuTelemetry t(cuda_device);
//   t.start();                 // a thread reads the SM clock and the power every 2 ms
//   ... enqueue and synchronise the samples of one arm ...
//   t.stop(&arm_samples);      // appends what it read
#pragma once

#include <atomic>
#include <thread>
#include <vector>

namespace fp8moe::bench {

struct NvmlFieldValue;  // nvmlFieldValue_t

struct TelemetrySamples {
  std::vector<double> sm_clock_mhz;  // instantaneous SM clock
  std::vector<double> power_w;       // board power: NVML's instantaneous reading where the driver
                                     // has one, else its ~1 s average
  double sm_clock_median() const;    // NAN without readings
  double power_median() const;
};

class GpuTelemetry {
 public:
  explicit GpuTelemetry(int cuda_device);
  ~GpuTelemetry();
  GpuTelemetry(const GpuTelemetry&) = delete;
  GpuTelemetry& operator=(const GpuTelemetry&) = delete;

  bool available() const { return device_ != nullptr; }
  void start();
  void stop(TelemetrySamples* out);

 private:
  void* lib_ = nullptr;
  void* device_ = nullptr;  // nvmlDevice_t
  int (*get_clock_)(void*, int, unsigned*) = nullptr;
  int (*get_power_)(void*, unsigned*) = nullptr;
  int (*get_fields_)(void*, int, NvmlFieldValue*) = nullptr;  // nvmlDeviceGetFieldValues
  std::atomic<bool> running_{false};
  std::thread thread_;
  TelemetrySamples current_;
};

}  // namespace fp8moe::bench
