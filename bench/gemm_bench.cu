// fp8moe-gemm-bench: the two grouped GEMMs alone, padded vs live, on the seed cases
// (issue 4's benchmark mode). Cold L2 before every sample, alternating rounds padded/live/padded/
// live, ceilings measured in the same run. Each sample is timed twice: CUDA events around the
// launch (median_us: what a caller waits, launch latency included) and the kernel's own duration
// from CUPTI activity records (kernel_us: how peers' GEMM figures are usually measured, e.g.
// DeepGEMM's profiler-based bench); the kernel times are absent if CUPTI is unavailable.
//
//   fp8moe-gemm-bench [--samples N] [--json PATH] [--preset NAME] [--case C/T]... [--gemm 1|2]
//                     [--schedule both|live|padded] [--no-ceilings] [--trace PATH] [--flush write|clean]
//                     [--data codes|normal] [--routing uniform|balanced] [--pad-rows random|zero]
// --schedule live|padded times one arm only (profiling, power sampling); the bitwise comparison
// of the arms needs both. --trace (timeline builds, -DFP8MOE_GEMM_TRACE=1..5) appends one cold-L2
// live run's per-CTA timeline to PATH as lines "case gemm cta slot ns". --flush clean: samples
// start on a clean L2 (bench_common.cuh: FlushMode; analysis, the default is the write flush).
// --data normal: A and B hold the E4M3 codes of normal samples (tests/common/data.hpp's sigmas for
// A's 128-element row groups and B's 128 x 128 blocks: each group's largest value near 448, as block
// quantisation leaves them) instead of codes with every bit but one random (the default); the
// tensor cores' power, and so the clock at the power limit, depends on the bits they multiply.
// --routing balanced: every expert gets T * k / E rows (the first T * k % E experts one more)
// instead of uniform random top-k routing's counts, so an expert ends in a partial M-tile only
// where T * k / E is not a multiple of 128 (analysis: what the random counts' last tiles cost).
// --pad-rows zero: A's rows between an expert's last row and the next expert's first (the padding
// rows a partial M-tile multiplies but never stores) hold zeros instead of random codes, as in a
// workspace no live row has used yet (analysis: what those rows' bits cost at the power limit).
#include <cuda_runtime.h>

#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "bench/bench_common.cuh"
#include "bench/fp8moe_bench_cupti.hpp"
#include "bench/gpu_telemetry.hpp"
#include "gemm/grouped_gemm.hpp"
#include "layout/layout.cuh"
#include "tests/common/data.hpp"

using namespace fp8moe;
using bench::Stats;

namespace {

struct Preset {
  const char* name;
  int experts, hidden, inter, topk;
};
constexpr Preset kPresets[] = {{"deepseek-v3-ep8", 32, 7168, 2048, 8},
                               {"qwen3-30b-a3b", 128, 2048, 768, 8},
                               {"qwen3-235b-a22b", 128, 4096, 1536, 8}};


// Rows per expert of uniform random top-k routing (k distinct experts per token), or balanced.
std::vector<int32_t> route_counts(int tokens, int experts, int topk, bool balanced, fp8moe::test::Rng& rng) {
  std::vector<int32_t> counts(experts, 0);
  if (balanced) {
    const int64_t slots = static_cast<int64_t>(tokens) * topk;
    for (int e = 0; e < experts; ++e) counts[e] = static_cast<int32_t>(slots / experts + (e < slots % experts));
    return counts;
  }
  for (int32_t e : fp8moe::test::random_routing(rng, tokens, topk, experts)) ++counts[e];
  return counts;
}

}  // namespace

int main(int argc, char** argv) {
  int samples = 50, only_gemm = 0;
  bool ceilings = true, run_arm[2] = {true, true};  // padded, live
  struct Case { int capacity, tokens; };
  std::vector<Case> cases;
  std::string json_path, trace_path, preset_name = "deepseek-v3-ep8";
  bench::FlushMode flush_mode = bench::FlushMode::kWrite;
  bool normal_data = false, balanced = false, zero_pad_rows = false;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--samples" && i + 1 < argc) samples = std::atoi(argv[++i]);
    else if (a == "--json" && i + 1 < argc) json_path = argv[++i];
    else if (a == "--preset" && i + 1 < argc) preset_name = argv[++i];
    else if (a == "--gemm" && i + 1 < argc) only_gemm = std::atoi(argv[++i]);
    else if (a == "--no-ceilings") ceilings = false;
    else if (a == "--trace" && i + 1 < argc) trace_path = argv[++i];
    else if (a == "--flush" && i + 1 < argc && bench::parse_flush_mode(argv[i + 1], &flush_mode)) ++i;
    else if (a == "--data" && i + 1 < argc && (!std::strcmp(argv[i + 1], "codes") || !std::strcmp(argv[i + 1], "normal")))
      normal_data = !std::strcmp(argv[++i], "normal");
    else if (a == "--routing" && i + 1 < argc &&
             (!std::strcmp(argv[i + 1], "uniform") || !std::strcmp(argv[i + 1], "balanced")))
      balanced = !std::strcmp(argv[++i], "balanced");
    else if (a == "--pad-rows" && i + 1 < argc && (!std::strcmp(argv[i + 1], "random") || !std::strcmp(argv[i + 1], "zero")))
      zero_pad_rows = !std::strcmp(argv[++i], "zero");
    else if (a == "--schedule" && i + 1 < argc &&
             (!std::strcmp(argv[i + 1], "both") || !std::strcmp(argv[i + 1], "live") ||
              !std::strcmp(argv[i + 1], "padded"))) {
      const std::string v = argv[++i];
      run_arm[0] = v != "live";
      run_arm[1] = v != "padded";
    }
    else if (a == "--case" && i + 1 < argc && std::strchr(argv[i + 1], '/')) {
      const char* v = argv[++i];
      cases.push_back({std::atoi(v), std::atoi(std::strchr(v, '/') + 1)});
    }
    else {
      std::printf("usage: %s [--samples N] [--json PATH] [--preset deepseek-v3-ep8|qwen3-30b-a3b|qwen3-235b-a22b]\n"
                  "          [--case CAPACITY/TOKENS]... [--gemm 1|2] [--schedule both|live|padded]\n"
                  "          [--no-ceilings] [--trace PATH] [--flush write|clean] [--data codes|normal]\n"
                  "          [--routing uniform|balanced] [--pad-rows random|zero]\n",
                  argv[0]);
      return a == "--help" ? 0 : 2;
    }
  }
  const Preset* pre = nullptr;
  for (const auto& p : kPresets)
    if (preset_name == p.name) pre = &p;
  if (!pre) {
    std::fprintf(stderr, "unknown preset %s\n", preset_name.c_str());
    return 2;
  }
  int dev = 0, major = 0;
  if (cudaGetDevice(&dev) != cudaSuccess ||
      cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev) != cudaSuccess || major != 9) {
    std::printf("fp8moe-gemm-bench needs an SM90 GPU (H100/H200); none found.\n");
    return 0;
  }
  cudaDeviceProp prop{};
  BENCH_CUDA(cudaGetDeviceProperties(&prop, dev));
#if !FP8MOE_GEMM_TRACE
  if (!trace_path.empty()) {
    std::fprintf(stderr, "--trace needs a timeline build (-DFP8MOE_GEMM_TRACE=1..5)\n");
    return 2;
  }
#endif

  std::fprintf(stderr, "measuring ceilings...\n");
  // Without measured ceilings (profiling runs) the SPEC section 8 figures stand in.
  const double read_tbps = ceilings ? bench::measure_read_tbps(flush_mode) : 4.47;
  const double fp8_tflops = ceilings ? bench::measure_fp8_gemm_tflops() : 1359;
  std::printf("GPU %s: HBM read ceiling %.2f TB/s, cuBLASLt FP8 8192^3 %.0f TFLOP/s (%s L2 flush)\n", prop.name,
              read_tbps, fp8_tflops, bench::flush_mode_name(flush_mode));

  const int E = pre->experts, H = pre->hidden, I = pre->inter, K = pre->topk;
  if (cases.empty()) cases = {{512, 16}, {512, 512}, {4096, 4096}, {4096, 256}, {512, 1}};

  // Weights are shared by all cases.
  uint8_t *w13, *w2;
  float *w13s, *w2s;
  BENCH_CUDA(cudaMalloc(&w13, size_t(E) * 2 * I * H));
  BENCH_CUDA(cudaMalloc(&w2, size_t(E) * H * I));
  BENCH_CUDA(cudaMalloc(&w13s, size_t(E) * (2 * I / 128) * (H / 128) * 4));
  BENCH_CUDA(cudaMalloc(&w2s, size_t(E) * (H / 128) * (I / 128) * 4));
  auto fill_fp8 = [&](uint8_t* p, size_t n, uint32_t seed, float sigma) {
    if (normal_data) bench::fill_normal_fp8(p, n, seed, sigma);
    else bench::fill_random_fp8(p, n, seed);
  };
  fill_fp8(w13, size_t(E) * 2 * I * H, 1, fp8moe::test::kWeightBlockSigma);
  fill_fp8(w2, size_t(E) * H * I, 2, fp8moe::test::kWeightBlockSigma);
  bench::fill_random_f32(w13s, size_t(E) * (2 * I / 128) * (H / 128), 3, 1e-3f, 1e-2f);
  bench::fill_random_f32(w2s, size_t(E) * (H / 128) * (I / 128), 4, 1e-3f, 1e-2f);

  bench::L2Flush flush(flush_mode);
  bench::GpuTelemetry telemetry(dev);
  std::string cupti_error;
  bool cupti = bench::cupti::start(&cupti_error);
  if (!cupti) std::fprintf(stderr, "CUPTI unavailable (%s): no kernel times\n", cupti_error.c_str());
  // The durations of the GEMM kernels among the activity records since the last call (the L2
  // flush and anything else are left out by name); false, with kernel times off from then on, if
  // CUPTI fails or the count is not `expected`.
  auto gemm_kernel_us = [&](size_t expected, std::vector<double>* out) {
    std::vector<bench::cupti::KernelRecord> records;
    std::vector<double> us;
    if (cupti && bench::cupti::take(&records, &cupti_error)) {
      for (const auto& r : records)
        if (r.name.find("grouped_gemm") != std::string::npos) us.push_back((r.end_ns - r.start_ns) * 1e-3);
      if (us.size() == expected) {
        out->insert(out->end(), us.begin(), us.end());
        return true;
      }
      cupti_error = std::to_string(us.size()) + " GEMM kernel records for " + std::to_string(expected) + " launches";
    }
    if (cupti) std::fprintf(stderr, "kernel times off: %s\n", cupti_error.c_str());
    cupti = false;
    return false;
  };
  auto drop_records = [&] {  // everything recorded so far (setup, other arms, timeline runs)
    std::vector<bench::cupti::KernelRecord> records;
    if (cupti && !bench::cupti::take(&records, &cupti_error)) {
      std::fprintf(stderr, "kernel times off: %s\n", cupti_error.c_str());
      cupti = false;
    }
  };
  cudaEvent_t ev0, ev1;
  BENCH_CUDA(cudaEventCreate(&ev0));
  BENCH_CUDA(cudaEventCreate(&ev1));
  std::mt19937_64 rng(std::random_device{}());
  FILE* js = json_path.empty() ? nullptr : std::fopen(json_path.c_str(), "w");
  if (js)
    std::fprintf(js,
                 "{\"gpu\": \"%s\", \"commit\": \"%s\", \"preset\": \"%s\", \"l2_flush\": \"%s\", \"data\": \"%s\", \"routing\": \"%s\", "
                 "\"ceilings\": {\"read_TBps\": %.4f, \"fp8_TFLOPs\": %.1f}, \"cases\": [",
                 prop.name, bench::build_commit(), pre->name, bench::flush_mode_name(flush_mode),
                 normal_data ? "normal" : "codes", balanced ? "balanced" : "uniform", read_tbps,
                 fp8_tflops);

  std::printf("%-10s %-5s %-7s %10s %10s %10s %8s %9s %8s %9s %7s %7s %5s %10s %8s\n", "case", "gemm", "arm",
              "median_us", "p10_us", "p90_us", "TFLOP/s", "wTB/s", "floor_us", "t/floor", "speedup", "SM_MHz", "W",
              "kernel_us", "k/floor");
  bool first_json = true;
  for (const auto& c : cases) {
    const auto counts = route_counts(c.tokens, E, K, balanced, rng);
    std::vector<int32_t> ends(E), row_expert;
    layout::ends_from_counts(counts.data(), E, ends.data());
    const int64_t m_cap = layout::m_cap(c.capacity, K, E), m_pad = layout::m_pad(m_cap);
    row_expert.resize(m_cap);
    layout::padded_row_expert(ends.data(), E, m_cap, row_expert.data());
    int64_t live_rows = 0;
    int touched = 0;
    for (int e = 0; e < E; ++e) {
      live_rows += counts[e];
      touched += counts[e] > 0;
    }
    int32_t *d_ends, *d_rows, *d_counter;  // the live GEMMs' tile counter, zeroed before every launch
    BENCH_CUDA(cudaMalloc(&d_counter, 4));
    BENCH_CUDA(cudaMalloc(&d_ends, E * 4));
    BENCH_CUDA(cudaMalloc(&d_rows, m_cap * 4));
    BENCH_CUDA(cudaMemcpy(d_ends, ends.data(), E * 4, cudaMemcpyHostToDevice));
    BENCH_CUDA(cudaMemcpy(d_rows, row_expert.data(), m_cap * 4, cudaMemcpyHostToDevice));

    for (int g = 0; g < 2; ++g) {
      if (only_gemm && only_gemm != g + 1) continue;
      const int n = g == 0 ? 2 * I : H, k = g == 0 ? H : I;
      uint8_t* a;
      float* as;
      void *d_live, *d_pad;
      BENCH_CUDA(cudaMalloc(&a, m_cap * k));
      const int64_t scale_bytes = layout::scale_buffer_bytes(layout::ScaleFormat::kFp32, m_pad, k);
      BENCH_CUDA(cudaMalloc(&as, scale_bytes));
      BENCH_CUDA(cudaMalloc(&d_live, m_cap * n * 2));
      BENCH_CUDA(cudaMalloc(&d_pad, m_cap * n * 2));
      fill_fp8(a, m_cap * k, 5 + g, fp8moe::test::kActGroupSigma);
      if (zero_pad_rows)
        for (int e = 0; e < E; ++e) {
          const int64_t next = e + 1 < E ? layout::expert_start(ends.data(), e + 1) : m_cap;
          if (next > ends[e]) BENCH_CUDA(cudaMemset(a + ends[e] * k, 0, (next - ends[e]) * k));
        }
      bench::fill_random_f32(as, scale_bytes / 4, 7 + g, 1e-3f, 1e-2f);
      gemm::GroupedGemmArgs args;
      args.a = a;
      args.a_scale = as;
      args.b = g == 0 ? w13 : w2;
      args.b_scale = g == 0 ? w13s : w2s;
      args.ends = d_ends;
      args.row_expert = d_rows;
      args.m_cap = m_cap;
      args.m_pad = m_pad;
      args.n = n;
      args.k = k;
      args.num_experts = E;
      args.tile_counter = d_counter;
      for (auto sched : {layout::Schedule::kPadded, layout::Schedule::kLive}) {
        args.schedule = sched;
        const auto info = gemm::sm90_fp8_grouped_gemm_1d2d_info(args);
        const std::string width = info.block_n ? std::to_string(info.stages) + " stages, BLOCK_N " +
                                                     std::to_string(info.block_n)
                                               : std::string("BLOCK_N 128 or 192 by the live rows (on the device)");
        std::fprintf(stderr, "gemm%d %s: %d CTAs, cluster %d%s, %s, %s tiles\n", g + 1,
                     sched == layout::Schedule::kLive ? "live" : "padded", info.ctas, info.cluster,
                     info.cluster > 1 ? (info.pair_m ? " (M-pairs)" : " (N-pairs)") : "", width.c_str(),
                     info.dynamic ? "dynamic" : "fixed-stride");
      }
      std::vector<double> us[2], kus[2];  // event times, CUPTI kernel times
      bench::TelemetrySamples tele[2];  // NVML readings while each arm's samples run
      for (int round = 0; round < 4; ++round) {
        const int arm = round % 2;  // 0 padded, 1 live
        if (!run_arm[arm]) continue;
        args.schedule = arm == 0 ? layout::Schedule::kPadded : layout::Schedule::kLive;
        args.d = arm == 0 ? d_pad : d_live;
        drop_records();
        telemetry.start();
        const int launches = samples / 2 + (round < 2 ? 1 : 0);
        for (int s = 0; s < launches; ++s) {  // first sample of the first rounds: warm-up
          flush.run(nullptr);
          BENCH_CUDA(cudaMemsetAsync(d_counter, 0, 4));
          BENCH_CUDA(cudaEventRecord(ev0));
          BENCH_CUDA(gemm::sm90_fp8_grouped_gemm_1d2d(args, nullptr));
          BENCH_CUDA(cudaEventRecord(ev1));
          BENCH_CUDA(cudaEventSynchronize(ev1));
          float ms = 0;
          BENCH_CUDA(cudaEventElapsedTime(&ms, ev0, ev1));
          if (!(round < 2 && s == 0)) us[arm].push_back(ms * 1e3);
        }
        telemetry.stop(&tele[arm]);
        std::vector<double> k;
        if (gemm_kernel_us(launches, &k)) kus[arm].insert(kus[arm].end(), k.begin() + (round < 2 ? 1 : 0), k.end());
      }
      // Bitwise check of the arms on live rows (when both ran).
      bool equal = run_arm[0] && run_arm[1];
      std::vector<uint16_t> hl, hp;
      if (equal) {
        hl.resize(m_cap * n);
        hp.resize(m_cap * n);
        BENCH_CUDA(cudaMemcpy(hl.data(), d_live, hl.size() * 2, cudaMemcpyDeviceToHost));
        BENCH_CUDA(cudaMemcpy(hp.data(), d_pad, hp.size() * 2, cudaMemcpyDeviceToHost));
      }
      for (int e = 0; e < E && equal; ++e)
        for (int64_t r = layout::expert_start(ends.data(), e); r < ends[e] && equal; ++r)
          equal = std::memcmp(&hl[r * n], &hp[r * n], size_t(n) * 2) == 0;

      const double flops = 2.0 * live_rows * n * k;
      const double wbytes = double(touched) * n * k;
      const double floor_us = std::max(wbytes / (read_tbps * 1e12), flops / (fp8_tflops * 1e12)) * 1e6;
      const Stats sp = bench::stats_of(us[0]), sl = bench::stats_of(us[1]);
      // Kernel times only if every sample of the arm has one.
      const bool have_k[2] = {cupti && kus[0].size() == us[0].size() && !us[0].empty(),
                              cupti && kus[1].size() == us[1].size() && !us[1].empty()};
      const Stats kp = have_k[0] ? bench::stats_of(kus[0]) : Stats{}, kl = have_k[1] ? bench::stats_of(kus[1]) : Stats{};
      char label[32];
      std::snprintf(label, sizeof label, "%d/%d", c.capacity, c.tokens);
      const double mhz[2] = {tele[0].sm_clock_median(), tele[1].sm_clock_median()};
      const double watts[2] = {tele[0].power_median(), tele[1].power_median()};
      for (int arm = 0; arm < 2; ++arm) {
        if (!run_arm[arm]) continue;
        const Stats& st = arm == 0 ? sp : sl;
        const Stats& kt = arm == 0 ? kp : kl;
        std::printf("%-10s %-5s %-7s %10.1f %10.1f %10.1f %8.0f %9.2f %8.1f %9.2f %7s %7.0f %5.0f %10s %8s\n", label,
                    g == 0 ? "gemm1" : "gemm2", arm == 0 ? "padded" : "live", st.median, st.p10, st.p90,
                    flops / (st.median * 1e-6) / 1e12, wbytes / (st.median * 1e-6) / 1e12, floor_us,
                    st.median / floor_us,
                    arm == 1 && run_arm[0] ? (std::to_string(sp.median / sl.median).substr(0, 5) + "x").c_str() : "",
                    mhz[arm], watts[arm], have_k[arm] ? bench::json_num(kt.median, 1).c_str() : "-",
                    have_k[arm] ? bench::json_num(kt.median / floor_us, 2).c_str() : "-");
      }
      if (!equal && run_arm[0] && run_arm[1]) std::printf("  !! live and padded differ on live rows\n");
#if FP8MOE_GEMM_TRACE
      if (!trace_path.empty()) {  // one more cold-L2 live run, with its timeline
        args.schedule = layout::Schedule::kLive;
        args.d = d_live;
        BENCH_CUDA(gemm::sm90_fp8_grouped_gemm_trace(nullptr));
        flush.run(nullptr);
        BENCH_CUDA(cudaMemsetAsync(d_counter, 0, 4));
        BENCH_CUDA(gemm::sm90_fp8_grouped_gemm_1d2d(args, nullptr));
        BENCH_CUDA(cudaDeviceSynchronize());
        std::vector<uint64_t> tr(size_t(gemm::kGemmTraceCtas) * gemm::kGemmTraceSlots);
        BENCH_CUDA(gemm::sm90_fp8_grouped_gemm_trace(tr.data()));
        if (FILE* f = std::fopen(trace_path.c_str(), "a")) {
          for (int cta = 0; cta < gemm::kGemmTraceCtas; ++cta)
            for (int slot = 0; slot < gemm::kGemmTraceSlots; ++slot)
              if (const uint64_t t = tr[size_t(cta) * gemm::kGemmTraceSlots + slot])
                std::fprintf(f, "%d/%d %d %d %d %llu\n", c.capacity, c.tokens, g + 1, cta, slot,
                             static_cast<unsigned long long>(t));
          std::fclose(f);
        }
      }
#endif
      if (js) {
        auto knum = [&](int arm, double v) { return have_k[arm] ? bench::json_num(v, 2) : std::string("null"); };
        std::fprintf(js,
                     "%s{\"capacity\": %d, \"tokens\": %d, \"gemm\": %d, \"n\": %d, \"k\": %d, \"live_rows\": %lld, "
                     "\"touched_experts\": %d, \"padded\": {\"median_us\": %.2f, \"p10_us\": %.2f, \"p90_us\": %.2f, "
                     "\"sm_clock_MHz\": %s, \"power_W\": %s, \"kernel_median_us\": %s, \"kernel_p10_us\": %s, "
                     "\"kernel_p90_us\": %s}, "
                     "\"live\": {\"median_us\": %.2f, \"p10_us\": %.2f, \"p90_us\": %.2f, \"sm_clock_MHz\": %s, "
                     "\"power_W\": %s, \"kernel_median_us\": %s, \"kernel_p10_us\": %s, \"kernel_p90_us\": %s}, "
                     "\"floor_us\": %.2f, "
                     "\"bitwise_equal\": %s}",
                     first_json ? "" : ", ", c.capacity, c.tokens, g + 1, n, k, static_cast<long long>(live_rows),
                     touched, sp.median, sp.p10, sp.p90, bench::json_num(mhz[0], 0).c_str(),
                     bench::json_num(watts[0], 0).c_str(), knum(0, kp.median).c_str(), knum(0, kp.p10).c_str(),
                     knum(0, kp.p90).c_str(), sl.median, sl.p10, sl.p90, bench::json_num(mhz[1], 0).c_str(),
                     bench::json_num(watts[1], 0).c_str(), knum(1, kl.median).c_str(), knum(1, kl.p10).c_str(),
                     knum(1, kl.p90).c_str(), floor_us,
                     !(run_arm[0] && run_arm[1]) ? "null" : equal ? "true" : "false");
        first_json = false;
      }
      cudaFree(a);
      cudaFree(as);
      cudaFree(d_live);
      cudaFree(d_pad);
    }
    cudaFree(d_ends);
    cudaFree(d_rows);
    cudaFree(d_counter);
  }
  if (js) {
    std::fprintf(js, "]}\n");
    std::fclose(js);
  }
  bench::cupti::stop();
  return 0;
}
