// What the benchmarks share: the ceilings measured in the same run (SPEC section 7: HBM read
// bandwidth with a streaming-read kernel, the dense FP8 GEMM rate through cuBLASLt), the L2 flush,
// sample statistics and random device data.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

namespace fp8moe::bench {

#define BENCH_CUDA(expr)                                                                          \
  do {                                                                                            \
    cudaError_t e_ = (expr);                                                                      \
    if (e_ != cudaSuccess) {                                                                      \
      std::fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #expr, cudaGetErrorString(e_)); \
      std::exit(1);                                                                               \
    }                                                                                             \
  } while (0)

// A JSON number with `decimals` decimals, or null when not finite (not measured, or e.g. time/floor
// with an empty floor).
inline std::string json_num(double v, int decimals = 3) {
  if (!std::isfinite(v)) return "null";
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", decimals, v);
  return buf;
}

struct Stats {
  double median = 0, p10 = 0, p90 = 0, min = 0;
  size_t samples = 0;
};
inline Stats stats_of(std::vector<double> v) {
  Stats s;
  if (v.empty()) return s;
  std::sort(v.begin(), v.end());
  auto at = [&](double q) { return v[static_cast<size_t>(q * (v.size() - 1) + 0.5)]; };
  s.median = at(0.5);
  s.p10 = at(0.1);
  s.p90 = at(0.9);
  s.min = v.front();
  s.samples = v.size();
  return s;
}

// How an L2 flush leaves the cache.
//   kWrite (the default, SPEC section 7 as measured so far): L2 ends full of the flush buffer's
//     dirty lines, so the first ~50 MB the measured kernels move also pay for their write-back
//     (~8.5 us of HBM time on the H200: perf notes v21).
//   kClean: the same write, then a read of a clean buffer of the same size, so the write-back
//     happens inside the flush and the measured kernels start on a clean L2 holding nothing of
//     theirs. An analysis mode, reported beside the default, not instead of it.
enum class FlushMode { kWrite, kClean };
const char* flush_mode_name(FlushMode mode);
// "write" / "clean" -> mode; false for anything else.
bool parse_flush_mode(const char* name, FlushMode* mode);

// Evicts the L2 (60 MB on H200) by writing a buffer several times its size (kClean: and reading
// another as large).
class L2Flush {
 public:
  explicit L2Flush(FlushMode mode = FlushMode::kWrite);
  ~L2Flush();
  void run(cudaStream_t stream);
  FlushMode mode() const { return mode_; }

 private:
  FlushMode mode_;
  void* buf_ = nullptr;
  void* clean_ = nullptr;  // kClean: written once here, only read after
  size_t bytes_ = 0;
};

// A stand-in for the kernel before another in the pipeline (GEMM1 before act_quant): one CTA on
// every SM, each holding all the shared memory a CTA may have (so no other kernel's CTA fits
// beside it), for `us` microseconds. It triggers its programmatic dependents at its start, so a
// kernel launched after it with launch_dependent() starts its CTAs as these exit and runs its
// part before griddepcontrol.wait on them, as in the pipeline.
void launch_sm_hog(double us, cudaStream_t stream);

// The SM count of device 0, or 0 after printing "<tool>: no CUDA device here; nothing to measure."
// (the investigation tools then exit successfully, so they run anywhere).
int device_sms_or_none(const char* tool);

// The commit these binaries were built from ($FP8MOE_COMMIT overrides it): the short git hash at
// build time, "-dirty" if tracked files had uncommitted changes, or "unknown".
const char* build_commit();

// HBM read ceiling: TB/s of a streaming read of `bytes` (median of `reps` runs, each after an L2
// flush of the given mode).
double measure_read_tbps(FlushMode flush = FlushMode::kWrite, size_t bytes = size_t(2) << 30, int reps = 20);
// Dense FP8 E4M3 GEMM rate (TFLOP/s) of cuBLASLt at m = n = k = `size`, BF16 out, random data.
// Returns 0 (and says why on stderr) if cuBLASLt has no FP8 algorithm here.
double measure_fp8_gemm_tflops(int size = 8192, int reps = 20);

// Random device data (never zeros): FP8 E4M3 codes without NaN, FP32 values in [lo, hi).
void fill_random_fp8(uint8_t* p, size_t n, uint32_t seed, cudaStream_t stream = nullptr);
void fill_random_f32(float* p, size_t n, uint32_t seed, float lo, float hi, cudaStream_t stream = nullptr);
// FP8 E4M3 codes of normal(0, sigma) samples (saturating at +-448): block-quantised data's shape.
void fill_normal_fp8(uint8_t* p, size_t n, uint32_t seed, float sigma, cudaStream_t stream = nullptr);
// BF16 bit patterns of values uniform in [lo, hi).
void fill_random_bf16(uint16_t* p, size_t n, uint32_t seed, float lo, float hi, cudaStream_t stream = nullptr);

}  // namespace fp8moe::bench
