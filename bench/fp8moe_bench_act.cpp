// fp8moe-bench --act-only: the activation + quantization kernel alone on fully occupied shapes
// (every expert's rows a multiple of 128, so no gap rows exist): the live schedule does exactly
// the padded schedule's work plus reading ends[], and must not be slower (issue 5). Cold L2 before
// every sample, CUDA events around each launch, alternating rounds padded/live/padded/live.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "bench/bench_common.cuh"
#include "bench/fp8moe_bench_act.hpp"
#include "kernels/act_quant.cuh"
#include "layout/layout.cuh"

namespace fp8moe::bench {
namespace {

struct ActShape {
  const char* what;
  int experts;
  int rows_per_expert;  // multiple of 128: fully occupied
  int intermediate;
};

// Expert counts and intermediate sizes of the presets (and a few more), at prefill-sized loads.
constexpr ActShape kShapes[] = {
    {"qwen3-30b 128 rows/expert", 128, 128, 768},  {"qwen3-30b 256 rows/expert", 128, 256, 768},
    {"qwen3-235b 128 rows/expert", 128, 128, 1536}, {"qwen3-235b 256 rows/expert", 128, 256, 1536},
    {"deepseek-ep8 128 rows/expert", 32, 128, 2048}, {"deepseek-ep8 512 rows/expert", 32, 512, 2048},
    {"deepseek-ep8 1024 rows/expert", 32, 1024, 2048}, {"E=64 I=1024", 64, 256, 1024},
    {"E=8 I=4096", 8, 1024, 4096},                   {"E=16 I=512", 16, 2048, 512}};

}  // namespace

int run_act_only(int samples_per_arm, const std::string& json_path) {
  L2Flush flush;
  cudaEvent_t ev0, ev1;
  BENCH_CUDA(cudaEventCreate(&ev0));
  BENCH_CUDA(cudaEventCreate(&ev1));
  std::string json = "{\"mode\": \"act-only\", \"shapes\": [";
  std::printf("%-32s %7s %6s | %10s %10s | %7s %8s %s\n", "shape (fully occupied)", "rows", "I", "padded_us",
              "live_us", "live/pad", "live TB/s", "bitwise");
  bool all_equal = true;
  for (size_t si = 0; si < sizeof(kShapes) / sizeof(kShapes[0]); ++si) {
    const ActShape& s = kShapes[si];
    const int64_t rows = static_cast<int64_t>(s.experts) * s.rows_per_expert;
    std::vector<int32_t> counts(s.experts, s.rows_per_expert), ends(s.experts);
    layout::ends_from_counts(counts.data(), s.experts, ends.data());
    const int64_t m_cap = rows, m_pad = layout::m_pad(m_cap), I = s.intermediate;
    const size_t y1_elems = static_cast<size_t>(m_cap) * 2 * I;
    uint16_t* y1;
    int32_t* d_ends;
    uint8_t* a2[2];
    float* sc[2];
    const size_t scale_elems = layout::scale_buffer_bytes(layout::ScaleFormat::kFp32, m_pad, I) / 4;
    BENCH_CUDA(cudaMalloc(&y1, y1_elems * 2));
    BENCH_CUDA(cudaMalloc(&d_ends, s.experts * 4));
    BENCH_CUDA(cudaMemcpy(d_ends, ends.data(), s.experts * 4, cudaMemcpyHostToDevice));
    for (int arm = 0; arm < 2; ++arm) {
      BENCH_CUDA(cudaMalloc(&a2[arm], static_cast<size_t>(m_cap) * I));
      BENCH_CUDA(cudaMalloc(&sc[arm], scale_elems * 4));
      BENCH_CUDA(cudaMemset(a2[arm], 0xFF, static_cast<size_t>(m_cap) * I));
      BENCH_CUDA(cudaMemset(sc[arm], 0xFF, scale_elems * 4));
    }
    fill_random_bf16(y1, y1_elems, 17 + static_cast<uint32_t>(si), -6.0f, 6.0f);

    kernels::ActQuantParams p;
    p.m_cap = m_cap;
    p.max_live_rows = rows;
    p.intermediate = I;
    p.num_experts = s.experts;
    p.ends = d_ends;
    p.y1 = y1;
    std::vector<double> us[2];
    for (int round = 0; round < 4; ++round) {
      const int arm = round % 2;  // 0 padded, 1 live
      p.schedule = arm ? fp8moe::layout::Schedule::kLive : fp8moe::layout::Schedule::kPadded;
      p.a2 = a2[arm];
      p.a2_scale = sc[arm];
      for (int i = 0; i < samples_per_arm / 2 + (round < 2 ? 2 : 0); ++i) {  // two warm-ups per arm
        flush.run(nullptr);
        BENCH_CUDA(cudaEventRecord(ev0));
        BENCH_CUDA(kernels::launch_act_quant(p, nullptr));
        BENCH_CUDA(cudaEventRecord(ev1));
        BENCH_CUDA(cudaEventSynchronize(ev1));
        float ms = 0;
        BENCH_CUDA(cudaEventElapsedTime(&ms, ev0, ev1));
        if (!(round < 2 && i < 2)) us[arm].push_back(ms * 1e3);
      }
    }
    // Bitwise comparison of the two arms' A2 and scales (every row is live here).
    std::vector<uint8_t> h[2];
    std::vector<float> hs[2];
    for (int arm = 0; arm < 2; ++arm) {
      h[arm].resize(static_cast<size_t>(m_cap) * I);
      hs[arm].resize(scale_elems);
      BENCH_CUDA(cudaMemcpy(h[arm].data(), a2[arm], h[arm].size(), cudaMemcpyDeviceToHost));
      BENCH_CUDA(cudaMemcpy(hs[arm].data(), sc[arm], scale_elems * 4, cudaMemcpyDeviceToHost));
    }
    const bool equal = h[0] == h[1] && std::memcmp(hs[0].data(), hs[1].data(), scale_elems * 4) == 0;
    all_equal = all_equal && equal;
    const Stats pad = stats_of(us[0]), live = stats_of(us[1]);
    const double bytes = static_cast<double>(rows) * (4 * I + I) + scale_elems * 4.0;
    std::printf("%-32s %7lld %6lld | %10.1f %10.1f | %7.3f %8.2f %s\n", s.what, static_cast<long long>(rows),
                static_cast<long long>(I), pad.median, live.median, live.median / pad.median,
                bytes / (live.median * 1e-6) / 1e12, equal ? "equal" : "DIFFER");
    char buf[512];
    std::snprintf(buf, sizeof buf,
                  "%s{\"shape\": \"%s\", \"rows\": %lld, \"intermediate\": %lld, \"experts\": %d, "
                  "\"padded\": {\"median_us\": %.2f, \"p10_us\": %.2f, \"p90_us\": %.2f}, "
                  "\"live\": {\"median_us\": %.2f, \"p10_us\": %.2f, \"p90_us\": %.2f}, \"bitwise_equal\": %s}",
                  si ? ", " : "", s.what, static_cast<long long>(rows), static_cast<long long>(I), s.experts,
                  pad.median, pad.p10, pad.p90, live.median, live.p10, live.p90, equal ? "true" : "false");
    json += buf;
    cudaFree(y1);
    cudaFree(d_ends);
    for (int arm = 0; arm < 2; ++arm) {
      cudaFree(a2[arm]);
      cudaFree(sc[arm]);
    }
  }
  json += "]}\n";
  if (!json_path.empty()) {
    FILE* f = std::fopen(json_path.c_str(), "w");
    if (!f) {
      std::fprintf(stderr, "fp8moe-bench: cannot write %s\n", json_path.c_str());
      return 1;
    }
    std::fputs(json.c_str(), f);
    std::fclose(f);
  }
  cudaEventDestroy(ev0);
  cudaEventDestroy(ev1);
  return all_equal ? 0 : 1;
}

}  // namespace fp8moe::bench
