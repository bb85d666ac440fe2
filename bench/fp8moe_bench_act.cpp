// fp8moe-bench --act-only: the activation + quantization kernel alone on fully occupied shapes
// (every expert's rows a multiple of 128, so no gap rows exist): the live schedule does exactly
// the padded schedule's work plus reading ends[], and must not be slower (issue 5). Cold L2 before
// every sample, alternating rounds padded/live/padded/live, each shape timed two ways:
//   - alone: CUDA events around each launch. The live kernel's start (ends[] staged and turned
//     into tables before its first row) is all exposed here.
//   - after a predecessor, as in the pipeline: a CUDA graph of a kernel that holds every SM for
//     kHogUs (launch_sm_hog, standing in for GEMM1) and act_quant as its programmatic dependent;
//     the sample is act_quant's end minus the predecessor's end (CUPTI kernel timestamps), the
//     kernel's increment on the pipeline's critical path. Skipped if CUPTI is not usable.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "bench/bench_common.cuh"
#include "bench/fp8moe_bench_act.hpp"
#include "bench/fp8moe_bench_cupti.hpp"
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

constexpr double kHogUs = 20;  // the predecessor's time on every SM

// act_quant's increment after the predecessor (us), `n` graph replays of `exec`, each after an L2
// flush, from the CUPTI records of the batch.
void time_after_predecessor(cudaGraphExec_t exec, int n, L2Flush& flush, cudaStream_t stream,
                            std::vector<double>* us) {
  for (int i = 0; i < n; ++i) {
    flush.run(stream);
    BENCH_CUDA(cudaGraphLaunch(exec, stream));
  }
  BENCH_CUDA(cudaStreamSynchronize(stream));
  std::vector<cupti::KernelRecord> records;
  std::vector<cupti::Replay> replays;
  std::string error, warning;
  if (!cupti::take(&records, &error) || !cupti::split_replays(records, 2, n, &replays, &error, &warning)) {
    std::fprintf(stderr, "fp8moe-bench: CUPTI: %s\n", error.c_str());
    std::exit(1);
  }
  for (const cupti::Replay& r : replays)
    us->push_back(r.start_us[1] + r.kernels[1].second - (r.start_us[0] + r.kernels[0].second));
}

}  // namespace

int run_act_only(int samples_per_arm, const std::string& json_path) {
  L2Flush flush;
  cudaEvent_t ev0, ev1;
  BENCH_CUDA(cudaEventCreate(&ev0));
  BENCH_CUDA(cudaEventCreate(&ev1));
  cudaStream_t stream;
  BENCH_CUDA(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  launch_sm_hog(1, stream);  // (its one-time setup, outside any capture)
  BENCH_CUDA(cudaStreamSynchronize(stream));
  std::string cupti_error;
  const bool traced = cupti::start(&cupti_error);
  if (!traced)
    std::fprintf(stderr, "fp8moe-bench: CUPTI not usable (%s): no timing after a predecessor\n", cupti_error.c_str());
  std::string json = "{\"mode\": \"act-only\", \"predecessor_us\": " + json_num(kHogUs, 1) + ", \"shapes\": [";
  std::printf("%-32s %7s %6s | alone: %9s %9s %8s | after a predecessor: %9s %9s %8s | %8s %s\n",
              "shape (fully occupied)", "rows", "I", "padded_us", "live_us", "live/pad", "padded_us", "live_us",
              "live/pad", "live TB/s", "bitwise");
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
    // The same launches after the predecessor, one graph per arm (the pipeline's position).
    std::vector<double> after[2];
    if (traced) {
      cudaGraphExec_t exec[2];
      for (int arm = 0; arm < 2; ++arm) {
        p.schedule = arm ? fp8moe::layout::Schedule::kLive : fp8moe::layout::Schedule::kPadded;
        p.a2 = a2[arm];
        p.a2_scale = sc[arm];
        cudaGraph_t graph;
        BENCH_CUDA(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
        launch_sm_hog(kHogUs, stream);
        BENCH_CUDA(kernels::launch_act_quant(p, stream));
        BENCH_CUDA(cudaStreamEndCapture(stream, &graph));
        BENCH_CUDA(cudaGraphInstantiate(&exec[arm], graph, 0));
        BENCH_CUDA(cudaGraphDestroy(graph));
        std::vector<double> warmup;
        time_after_predecessor(exec[arm], 2, flush, stream, &warmup);
      }
      for (int round = 0; round < 4; ++round) {
        const int arm = round % 2;
        time_after_predecessor(exec[arm], round < 2 ? (samples_per_arm + 1) / 2 : samples_per_arm / 2, flush, stream,
                               &after[arm]);
      }
      for (int arm = 0; arm < 2; ++arm) BENCH_CUDA(cudaGraphExecDestroy(exec[arm]));
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
    const Stats pad_after = traced ? stats_of(after[0]) : Stats{NAN, NAN, NAN},
                live_after = traced ? stats_of(after[1]) : Stats{NAN, NAN, NAN};
    const double bytes = static_cast<double>(rows) * (4 * I + I) + scale_elems * 4.0;
    std::printf("%-32s %7lld %6lld | alone: %9.1f %9.1f %8.3f | after a predecessor: %9.1f %9.1f %8.3f | %8.2f %s\n",
                s.what, static_cast<long long>(rows), static_cast<long long>(I), pad.median, live.median,
                live.median / pad.median, pad_after.median, live_after.median, live_after.median / pad_after.median,
                bytes / (live.median * 1e-6) / 1e12, equal ? "equal" : "DIFFER");
    auto arm_json = [](const Stats& st) {
      return "{\"median_us\": " + json_num(st.median, 2) + ", \"p10_us\": " + json_num(st.p10, 2) +
             ", \"p90_us\": " + json_num(st.p90, 2) + "}";
    };
    char head[256];
    std::snprintf(head, sizeof head, "%s{\"shape\": \"%s\", \"rows\": %lld, \"intermediate\": %lld, \"experts\": %d, ",
                  si ? ", " : "", s.what, static_cast<long long>(rows), static_cast<long long>(I), s.experts);
    json += head + std::string("\"padded\": ") + arm_json(pad) + ", \"live\": " + arm_json(live) +
            ", \"after_predecessor\": {\"padded\": " + arm_json(pad_after) + ", \"live\": " + arm_json(live_after) +
            "}, \"bitwise_equal\": " + (equal ? "true" : "false") + "}";
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
  if (traced) cupti::stop();
  cudaEventDestroy(ev0);
  cudaEventDestroy(ev1);
  BENCH_CUDA(cudaStreamDestroy(stream));
  return all_equal ? 0 : 1;
}

}  // namespace fp8moe::bench
