// fp8moe-bench: the whole-pipeline benchmark of SPEC section 7 (padded vs live schedule).
//
// Method, per case (capacity C, live tokens T):
//   - Weights are generated once per preset (random E4M3 codes without NaN, or with --weights normal
//     the codes of normal samples as block-quantised weights have; block scales sized so that every
//     stage has sane magnitudes) and uploaded; every case gets fresh BF16 hidden ~ N(0,1),
//     uniform random top-k routing (k distinct experts) and routing weights in (0, 1], all sized at
//     the capacity C, with the device scalar *num_tokens = T: the capacity-sized graph that engines
//     capture.
//   - One fp8moe::run() call per arm (padded, live) is captured in one CUDA graph. Allocation,
//     capture, instantiation and upload are outside the timing.
//   - Warm-up replays, then 4 alternating rounds (padded, live, padded, live) of samples/2 replays
//     each. Every replay is preceded by an L2 flush kernel (bench::L2Flush) on the same stream.
//   - A sample is the CUPTI kernel span of one replay: first pipeline kernel start to last pipeline
//     kernel end. Spans are attributed to replays as described in fp8moe_bench_cupti.hpp (graph
//     kernels only, so the flush never counts; exact kernel counts; replays ordered in time).
//     CUDA events around each cudaGraphLaunch are recorded as well and reported as a cross-check
//     (they include the graph launch latency); --no-cupti makes them the samples.
//   - The ceilings (HBM read with a streaming-read kernel, cuBLASLt FP8 GEMM 8192^3) are measured in
//     the same run, before CUPTI is enabled.
//   - After the last replay of each arm its output is downloaded; the arms must match bit for bit
//     on the T live rows (same inputs). --check also compares the live output with the CPU
//     reference (slow for big cases).
//
// Without an SM90 GPU this runs the CPU reference on a small case of the preset's shape and says
// so (exit code 0), so that `make bench` works on machines without a GPU.
#include <cuda_runtime.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <map>
#include <string>
#include <vector>

#include "bench/bench_common.cuh"
#include "bench/fp8moe_bench_act.hpp"
#include "bench/fp8moe_bench_cupti.hpp"
#include "bench/gpu_telemetry.hpp"
#include "api/internal.hpp"  // detail::act_params
#include "fp8moe/fp8moe.hpp"
#include "kernels/unpermute.cuh"  // FP8MOE_UNPERMUTE_TRACE builds
#include "knobs/knobs.hpp"
#include "reference/reference.hpp"
#include "tests/common/data.hpp"  // random BF16 / FP8 codes / scales / routing / routing weights

namespace {

using fp8moe::bench::json_num;
using fp8moe::bench::Stats;

// ---- presets, cases, options ---------------------------------------------------------------------

struct Preset {
  const char* name;
  int experts;
  int64_t hidden, inter;
  int top_k;
};
constexpr Preset kPresets[] = {{"deepseek-v3-ep8", 32, 7168, 2048, 8},
                               {"qwen3-30b-a3b", 128, 2048, 768, 8},
                               {"qwen3-235b-a22b", 128, 4096, 1536, 8}};

struct Case {
  int64_t capacity, tokens;
};
const std::vector<Case> kSeedSuite = {{512, 16}, {512, 512}, {4096, 4096}, {4096, 256}, {512, 1}, {512, 0}};
const std::vector<Case> kSweep = {{512, 1},     {512, 16},     {512, 64},     {512, 256},  {512, 512},
                                  {4096, 256}, {4096, 1024}, {4096, 2048}, {4096, 4096}};

constexpr int kPadded = 0, kLive = 1;  // arm indices
const char* const kArmName[2] = {"padded", "live"};
constexpr int kWarmupReplays = 5;      // per arm, before the timed rounds
constexpr int kMinSamples = 100;       // per arm (SPEC section 7), unless --quick
constexpr int kFallbackCapacity = 512, kFallbackTokens = 4;

struct Options {
  const Preset* preset = &kPresets[0];
  int64_t capacity = -1, tokens = -1;  // one case when both are given
  bool sweep = false;
  bool arm[2] = {true, true};          // --schedule
  std::string schedule = "both";
  fp8moe::ScaleFormat scale_format = fp8moe::ScaleFormat::kFp32;
  fp8moe::Activation activation = fp8moe::Activation::kSilu;
  int samples = kMinSamples;
  bool samples_given = false, quick = false, check = false, cupti = true, act_only = false, eager_first = false;
  bool normal_weights = false;  // --weights normal
  uint64_t seed = 1;
  std::string json;  // empty: no JSON
  fp8moe::bench::FlushMode flush = fp8moe::bench::FlushMode::kWrite;  // --flush
};

const char* scale_format_name(fp8moe::ScaleFormat f) {
  return f == fp8moe::ScaleFormat::kFp32 ? "fp32" : f == fp8moe::ScaleFormat::kFp32Pow2 ? "fp32_pow2" : "ue8m0_packed";
}
const char* activation_name(fp8moe::Activation a) { return a == fp8moe::Activation::kSilu ? "silu" : "swiglu_oai"; }

void usage(FILE* to) {
  std::fprintf(to,
               "usage: fp8moe-bench [options]\n"
               "\n"
               "Whole-pipeline benchmark of SPEC section 7: the padded and live schedules of fp8moe::run(), each\n"
               "captured in one CUDA graph at the capacity, *num_tokens = live tokens, cold L2, CUPTI kernel spans.\n"
               "Results table on stdout, progress on stderr. Without an SM90 GPU (H100/H200) it runs the CPU\n"
               "reference on a small case (capacity %d, %d tokens) of the preset's shape instead and says so.\n"
               "\n"
               "  --preset NAME          deepseek-v3-ep8 (default; E=32 H=7168 I=2048 k=8)\n"
               "                         qwen3-30b-a3b (E=128 H=2048 I=768 k=8)\n"
               "                         qwen3-235b-a22b (E=128 H=4096 I=1536 k=8)\n"
               "  --capacity C --tokens T  one case (both needed; 0 <= T <= C). Default: the seed suite\n"
               "                         512/16, 512/512, 4096/4096, 4096/256, 512/1, 512/0\n"
               "  --sweep                capacity 512 with 1,16,64,256,512 tokens and capacity 4096 with\n"
               "                         256,1024,2048,4096 tokens (for the plot)\n"
               "  --schedule S           live | padded | both (default both)\n"
               "  --scale-format F       fp32 (default) | fp32_pow2\n"
               "  --activation A         silu (default) | swiglu_oai\n"
               "  --samples N            samples per arm (default %d; at least %d unless --quick)\n"
               "  --quick                allow fewer samples (default 20): not a SPEC-conforming measurement\n"
               "  --check                compare the live output with the CPU reference (slow for big cases)\n"
               "  --no-cupti             time replays with CUDA events only (cross-check of the CUPTI spans)\n"
               "  --act-only             activation+quant kernel alone, live vs padded, on ten fully occupied\n"
               "                         shapes (live must not regress the dense case): alone (CUDA events)\n"
               "                         and after a kernel holding every SM, as after GEMM1 (CUPTI)\n"
               "  --seed S               seed of the random inputs (default 1)\n"
               "  --weights W            codes (default): every bit of the FP8 weight codes random; normal:\n"
               "                         the codes of normal samples with a 128x128 block's largest value near\n"
               "                         448, as block-quantised model weights (the tensor cores' power, and so\n"
               "                         the clock at the power limit, depends on the bits they multiply)\n"
               "  --flush M              write (default): the L2 flush before each sample writes a buffer, so\n"
               "                         the sample also pays for its write-back; clean: it also reads a clean\n"
               "                         buffer after, so samples start on a clean L2 (analysis; ceilings too)\n"
               "  --eager-first          run each arm once outside its graph before capturing it (for builds\n"
               "                         with -DFP8MOE_PIPELINE_ABLATE=1: the graph's GEMM2 then reads the\n"
               "                         A2 of that run, real data, instead of zeros); out is poisoned again\n"
               "  --json PATH            also write the results as JSON to PATH\n"
               "  --help                 this text\n"
               "\n"
               "JSON metadata: commit from $FP8MOE_COMMIT, else the one the binary was built from, else \"unknown\".\n",
               kFallbackCapacity, kFallbackTokens, kMinSamples, kMinSamples);
}

bool parse_int(const char* text, long long lo, long long hi, long long* out) {
  char* end = nullptr;
  errno = 0;
  const long long v = std::strtoll(text, &end, 10);
  if (end == text || *end != '\0' || errno != 0 || v < lo || v > hi) return false;
  *out = v;
  return true;
}

// Returns false (after saying why on stderr) on a bad command line.
bool parse(int argc, char** argv, Options* o, bool* help) {
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    const char* value = i + 1 < argc ? argv[i + 1] : nullptr;
    long long v = 0;
    auto bad = [&](const char* why) {
      std::fprintf(stderr, "fp8moe-bench: %s: %s\n", arg.c_str(), why);
      return false;
    };
    const bool takes_value = arg == "--preset" || arg == "--capacity" || arg == "--tokens" || arg == "--schedule" ||
                             arg == "--scale-format" || arg == "--activation" || arg == "--samples" ||
                             arg == "--seed" || arg == "--json" || arg == "--flush";
    if (takes_value && value == nullptr) return bad("missing value");
    if (arg == "--help" || arg == "-h") {
      *help = true;
    } else if (arg == "--preset") {
      o->preset = nullptr;
      for (const auto& p : kPresets)
        if (std::strcmp(value, p.name) == 0) o->preset = &p;
      if (!o->preset) return bad("unknown preset (deepseek-v3-ep8, qwen3-30b-a3b, qwen3-235b-a22b)");
      ++i;
    } else if (arg == "--capacity") {
      if (!parse_int(value, 1, int64_t(1) << 24, &v)) return bad("expected an integer in [1, 2^24]");
      o->capacity = v;
      ++i;
    } else if (arg == "--tokens") {
      if (!parse_int(value, 0, int64_t(1) << 24, &v)) return bad("expected an integer in [0, 2^24]");
      o->tokens = v;
      ++i;
    } else if (arg == "--schedule") {
      const std::string s = value;
      if (s != "live" && s != "padded" && s != "both") return bad("expected live, padded or both");
      o->schedule = s;
      o->arm[kPadded] = s != "live";
      o->arm[kLive] = s != "padded";
      ++i;
    } else if (arg == "--scale-format") {
      const std::string s = value;
      if (s == "fp32") o->scale_format = fp8moe::ScaleFormat::kFp32;
      else if (s == "fp32_pow2") o->scale_format = fp8moe::ScaleFormat::kFp32Pow2;
      else return bad("expected fp32 or fp32_pow2 (ue8m0_packed is the SM100 format)");
      ++i;
    } else if (arg == "--activation") {
      const std::string s = value;
      if (s == "silu") o->activation = fp8moe::Activation::kSilu;
      else if (s == "swiglu_oai") o->activation = fp8moe::Activation::kSwigluOai;
      else return bad("expected silu or swiglu_oai");
      ++i;
    } else if (arg == "--samples") {
      if (!parse_int(value, 2, 1000000, &v)) return bad("expected an integer in [2, 1000000]");
      o->samples = static_cast<int>(v);
      o->samples_given = true;
      ++i;
    } else if (arg == "--seed") {
      if (!parse_int(value, 0, INT64_MAX, &v)) return bad("expected a non-negative integer");
      o->seed = static_cast<uint64_t>(v);
      ++i;
    } else if (arg == "--json") {
      o->json = value;
      ++i;
    } else if (arg == "--weights") {
      const std::string s = value;
      if (s == "codes") o->normal_weights = false;
      else if (s == "normal") o->normal_weights = true;
      else return bad("expected codes or normal");
      ++i;
    } else if (arg == "--flush") {
      if (!fp8moe::bench::parse_flush_mode(value, &o->flush)) return bad("expected write or clean");
      ++i;
    } else if (arg == "--sweep") {
      o->sweep = true;
    } else if (arg == "--quick") {
      o->quick = true;
    } else if (arg == "--check") {
      o->check = true;
    } else if (arg == "--no-cupti") {
      o->cupti = false;
    } else if (arg == "--act-only") {
      o->act_only = true;
    } else if (arg == "--eager-first") {
      o->eager_first = true;
    } else {
      return bad("unknown option");
    }
  }
  if (*help) return true;
  if ((o->capacity >= 0) != (o->tokens >= 0)) {
    std::fprintf(stderr, "fp8moe-bench: --capacity and --tokens go together (one case)\n");
    return false;
  }
  if (o->capacity >= 0 && o->tokens > o->capacity) {
    std::fprintf(stderr, "fp8moe-bench: --tokens %lld exceeds --capacity %lld\n", static_cast<long long>(o->tokens),
                 static_cast<long long>(o->capacity));
    return false;
  }
  if (o->capacity >= 0 && o->sweep) {
    std::fprintf(stderr, "fp8moe-bench: --sweep and --capacity/--tokens are exclusive\n");
    return false;
  }
  if (o->quick && !o->samples_given) o->samples = 20;
  if (!o->quick && o->samples < kMinSamples) {
    std::fprintf(stderr, "fp8moe-bench: --samples %d is below the SPEC minimum of %d per arm (use --quick to allow it)\n",
                 o->samples, kMinSamples);
    return false;
  }
  return true;
}

// ---- small helpers -------------------------------------------------------------------------------

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

// JSON string body (without quotes).
std::string json_escape(const std::string& s) {
  std::string out;
  for (const char ch : s) {
    const unsigned char c = static_cast<unsigned char>(ch);
    if (c == '"' || c == '\\') {
      out += '\\';
      out += ch;
    } else if (c < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\u%04x", c);
      out += buf;
    } else {
      out += ch;
    }
  }
  return out;
}

std::string utc_now_iso() {
  const std::time_t now = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&now, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

// $FP8MOE_COMMIT, else the commit the binary was built from (bench::build_commit), else, for a
// build outside a git checkout, the short hash of the working directory's git HEAD (+ "-dirty"
// with uncommitted changes to tracked files), else "unknown".
std::string commit_id() {
  const std::string built = fp8moe::bench::build_commit();
  if (built != "unknown") return built;
  std::string hash;
  if (FILE* p = popen("git rev-parse --short HEAD 2>/dev/null", "r")) {
    char buf[128];
    while (std::fgets(buf, sizeof buf, p)) hash += buf;
    if (pclose(p) != 0) hash.clear();
  }
  while (!hash.empty() && (hash.back() == '\n' || hash.back() == '\r' || hash.back() == ' ')) hash.pop_back();
  if (hash.empty()) return "unknown";
  if (std::system("git diff-index --quiet HEAD -- >/dev/null 2>&1") != 0) hash += "-dirty";
  return hash;
}

// 0 without a usable CUDA device, else major * 10 + minor of device 0.
int gpu_arch(std::string* name) {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0) {
    cudaGetLastError();
    return 0;
  }
  cudaDeviceProp prop{};
  if (cudaGetDeviceProperties(&prop, 0) != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  *name = prop.name;
  return prop.major * 10 + prop.minor;
}

// ---- the problem ---------------------------------------------------------------------------------

// Weights of one preset, kept on the host for --check.
struct Weights {
  std::vector<uint8_t> w13, w2;
  std::vector<float> w13_scale, w2_scale;
};

// Random E4M3 codes (no NaN; --weights normal: codes of normal samples whose 128 x 128 blocks have
// their largest value near 448, test::kWeightBlockSigma) and block scales chosen so that gate/up
// outputs have a standard deviation of about 5 and down outputs about 1 (as tests/common/problem.hpp
// does).
Weights make_weights(const Preset& p, uint64_t seed, bool normal) {
  constexpr double kY1Std = 5.0;
  const int64_t E = p.experts, H = p.hidden, I = p.inter;
  fp8moe::test::Rng rng(seed);
  auto codes = [&](size_t n) {
    return normal ? fp8moe::test::random_fp8_normal_codes(rng, n, fp8moe::test::kWeightBlockSigma)
                  : fp8moe::test::random_fp8_codes(rng, n);
  };
  Weights w;
  w.w13 = codes(size_t(E) * 2 * I * H);
  const double code_rms = normal ? fp8moe::test::fp8_codes_rms(w.w13) : fp8moe::test::e4m3_code_rms();
  w.w13_scale = fp8moe::test::random_scales(rng, size_t(E) * (2 * I / 128) * (H / 128),
                                             kY1Std / (code_rms * std::sqrt(double(H))));
  w.w2 = codes(size_t(E) * H * I);
  w.w2_scale = fp8moe::test::random_scales(rng, size_t(E) * (H / 128) * (I / 128),
                                            1.0 / (kY1Std * kY1Std * code_rms * std::sqrt(double(I))));
  return w;
}

// Per-case inputs, sized at the capacity.
struct Inputs {
  std::vector<uint16_t> hidden;     // [C, H] BF16 bits ~ N(0, 1)
  std::vector<int32_t> topk_ids;    // [C, k] uniform random, k distinct experts per token
  std::vector<float> topk_weights;  // [C, k] in (0, 1]
};
Inputs make_inputs(const Preset& p, const Case& c, uint64_t seed) {
  fp8moe::test::Rng rng(seed ^ (uint64_t(c.capacity) * 0x9E3779B97F4A7C15ull) ^ (uint64_t(c.tokens + 1) * 0xC2B2AE3D27D4EB4Full));
  Inputs in;
  in.hidden = fp8moe::test::random_bf16(rng, size_t(c.capacity) * p.hidden);
  in.topk_ids = fp8moe::test::random_routing(rng, c.capacity, p.top_k, p.experts);
  in.topk_weights = fp8moe::test::random_weights(rng, size_t(c.capacity) * p.top_k);
  return in;
}

fp8moe::Config make_config(const Preset& p, const Options& o, int64_t capacity, int arm) {
  fp8moe::Config c;
  c.capacity = capacity;
  c.hidden = p.hidden;
  c.intermediate = p.inter;
  c.num_experts = p.experts;
  c.top_k = p.top_k;
  c.activation = o.activation;
  c.scale_format = o.scale_format;
  c.schedule = arm == kLive ? fp8moe::Schedule::kLive : fp8moe::Schedule::kPadded;
  return c;
}

// ---- without a GPU: the CPU reference on a small case ---------------------------------------------

int run_cpu_fallback(const Options& opt, const std::string& note) {
  const Preset& p = *opt.preset;
  std::printf("%s\n", note.c_str());
  std::printf("fp8moe-bench: CPU reference only, preset %s (E=%d H=%lld I=%lld k=%d), capacity %d, %d live tokens, "
              "seed %llu\n",
              p.name, p.experts, static_cast<long long>(p.hidden), static_cast<long long>(p.inter), p.top_k,
              kFallbackCapacity, kFallbackTokens, static_cast<unsigned long long>(opt.seed));
  const fp8moe::Config config = make_config(p, opt, kFallbackCapacity, kLive);
  const size_t workspace = fp8moe::workspace_size(config);
  std::printf("  GPU workspace for this config (fp8moe::workspace_size): %.1f MiB\n", workspace / 1048576.0);

  auto start = std::chrono::steady_clock::now();
  const Weights w = make_weights(p, opt.seed, opt.normal_weights);
  const Case c{kFallbackCapacity, kFallbackTokens};
  const Inputs in = make_inputs(p, c, opt.seed);
  std::printf("  generated inputs (%.2f GB of FP8 weights) in %.2f s\n", (w.w13.size() + w.w2.size()) / 1e9,
              seconds_since(start));

  fp8moe::ref::Shape shape;
  shape.tokens = c.capacity;
  shape.capacity = c.capacity;
  shape.hidden = p.hidden;
  shape.intermediate = p.inter;
  shape.num_experts = p.experts;
  shape.top_k = p.top_k;
  const int32_t live = static_cast<int32_t>(c.tokens);
  fp8moe::ref::Inputs ri;
  ri.hidden = in.hidden.data();
  ri.topk_ids = in.topk_ids.data();
  ri.topk_weights = in.topk_weights.data();
  ri.num_tokens = &live;
  ri.w13 = w.w13.data();
  ri.w13_scale = w.w13_scale.data();
  ri.w2 = w.w2.data();
  ri.w2_scale = w.w2_scale.data();
  std::vector<uint16_t> out(size_t(c.capacity) * p.hidden);
  start = std::chrono::steady_clock::now();
  fp8moe::ref::run_pipeline(shape, ri, fp8moe::detail::act_params(config), static_cast<fp8moe::ref::ScaleFormat>(opt.scale_format),
                            out.data());
  const double reference_s = seconds_since(start);

  // FNV-1a over the live rows' BF16 bits, and the sum of their values.
  uint64_t checksum = 0xCBF29CE484222325ull;
  double sum = 0;
  for (size_t i = 0; i < size_t(c.tokens) * p.hidden; ++i) {
    const uint16_t b = out[i];
    checksum = (checksum ^ (b & 0xFF)) * 0x100000001B3ull;
    checksum = (checksum ^ (b >> 8)) * 0x100000001B3ull;
    sum += fp8moe::num::float_from_bf16_bits(b);
  }
  std::printf("  CPU reference pipeline (%s, %s scales): %.3f s\n", activation_name(opt.activation),
              scale_format_name(opt.scale_format), reference_s);
  std::printf("  output rows [0, %lld) BF16: checksum fnv1a64=0x%016llx, sum=%.6e\n", static_cast<long long>(c.tokens),
              static_cast<unsigned long long>(checksum), sum);

  if (!opt.json.empty()) {
    FILE* f = std::fopen(opt.json.c_str(), "w");
    if (f == nullptr) {
      std::fprintf(stderr, "fp8moe-bench: cannot write %s\n", opt.json.c_str());
      return 1;
    }
    std::fprintf(f,
                 "{\n  \"mode\": \"cpu-reference\",\n  \"note\": \"%s\",\n  \"date\": \"%s\",\n  \"commit\": \"%s\",\n"
                 "  \"case\": {\"preset\": \"%s\", \"capacity\": %d, \"tokens\": %d, \"seed\": %llu},\n"
                 "  \"workspace_bytes\": %zu,\n  \"reference_seconds\": %.6f,\n"
                 "  \"checksum_fnv1a64\": \"0x%016llx\",\n  \"output_sum\": %.9e\n}\n",
                 json_escape(note).c_str(), utc_now_iso().c_str(), json_escape(commit_id()).c_str(), p.name,
                 kFallbackCapacity, kFallbackTokens, static_cast<unsigned long long>(opt.seed), workspace, reference_s,
                 static_cast<unsigned long long>(checksum), sum);
    std::fclose(f);
    std::printf("wrote %s\n", opt.json.c_str());
  }
  return 0;
}

// ---- the GPU benchmark ---------------------------------------------------------------------------

#define CUPTI_STEP(ok, error)                                                 \
  do {                                                                        \
    if (!(ok)) {                                                              \
      std::fprintf(stderr, "fp8moe-bench: CUPTI: %s\n", (error).c_str());     \
      std::exit(1);                                                           \
    }                                                                         \
  } while (0)

struct ArmResult {
  bool ran = false;
  int kernels_per_replay = 0;
  Stats span;   // the samples: CUPTI spans (or CUDA event times with --no-cupti), microseconds
  Stats event;  // CUDA events around cudaGraphLaunch, microseconds
  std::vector<std::string> roles;             // kernel roles in launch order
  std::map<std::string, double> kernel_us;    // role -> median duration
  std::map<std::string, double> kernel_start_us;  // role -> median start, from the replay's first kernel start
  double sm_clock_mhz = NAN, power_w = NAN;   // medians of NVML readings during the timed replays
};

struct CaseResult {
  Case c{};
  int64_t live_rows = 0;
  int touched_experts = 0;
  ArmResult arm[2];
  bool have_bitwise = false, bitwise_equal = false;
  double check_rel_err = NAN;  // --check only
  // derived
  double flops = 0, weight_bytes = 0, floor_us = NAN;
};

struct Device {  // everything shared by the cases
  cudaStream_t stream = nullptr;
  fp8moe::bench::L2Flush* flush = nullptr;
  uint8_t *w13 = nullptr, *w2 = nullptr;
  float *w13_scale = nullptr, *w2_scale = nullptr;
  std::vector<cudaEvent_t> events;  // 2 per replay of the largest round
  std::string cupti_warning;        // first correlation-id disagreement seen, if any
  fp8moe::bench::GpuTelemetry* telemetry = nullptr;  // SM clock and power during the rounds
};

template <typename T>
T* device_alloc(size_t count) {
  T* p = nullptr;
  BENCH_CUDA(cudaMalloc(&p, count * sizeof(T) + (count == 0 ? 16 : 0)));
  return p;
}

int count_kernel_nodes(cudaGraph_t graph) {
  size_t n = 0;
  BENCH_CUDA(cudaGraphGetNodes(graph, nullptr, &n));
  std::vector<cudaGraphNode_t> nodes(n);
  if (n) BENCH_CUDA(cudaGraphGetNodes(graph, nodes.data(), &n));
  int kernels = 0;
  for (cudaGraphNode_t node : nodes) {
    cudaGraphNodeType type;
    BENCH_CUDA(cudaGraphNodeGetType(node, &type));
    kernels += type == cudaGraphNodeTypeKernel;
  }
  return kernels;
}

CaseResult run_case(const Options& opt, const Weights& weights, Device& dev, int case_index, int num_cases,
                    const Case& c) {
  const Preset& p = *opt.preset;
  const int64_t C = c.capacity, T = c.tokens, H = p.hidden;
  const int k = p.top_k, E = p.experts;
  CaseResult res;
  res.c = c;
  auto progress = [&](const char* what) {
    std::fprintf(stderr, "[%d/%d] %lld/%lld: %s\n", case_index + 1, num_cases, static_cast<long long>(C),
                 static_cast<long long>(T), what);
  };

  progress("generating inputs");
  const Inputs in = make_inputs(p, c, opt.seed);
  std::vector<int64_t> rows_of_expert(E, 0);
  for (int64_t t = 0; t < T; ++t)
    for (int j = 0; j < k; ++j) {
      const int32_t e = in.topk_ids[t * k + j];
      if (e >= 0 && e < E) ++rows_of_expert[e];
    }
  for (int e = 0; e < E; ++e) {
    res.live_rows += rows_of_expert[e];
    res.touched_experts += rows_of_expert[e] > 0;
  }

  uint16_t* d_hidden = device_alloc<uint16_t>(in.hidden.size());
  int32_t* d_ids = device_alloc<int32_t>(in.topk_ids.size());
  float* d_weights = device_alloc<float>(in.topk_weights.size());
  int32_t* d_num_tokens = device_alloc<int32_t>(1);
  BENCH_CUDA(cudaMemcpy(d_hidden, in.hidden.data(), in.hidden.size() * 2, cudaMemcpyHostToDevice));
  BENCH_CUDA(cudaMemcpy(d_ids, in.topk_ids.data(), in.topk_ids.size() * 4, cudaMemcpyHostToDevice));
  BENCH_CUDA(cudaMemcpy(d_weights, in.topk_weights.data(), in.topk_weights.size() * 4, cudaMemcpyHostToDevice));
  const int32_t live_tokens = static_cast<int32_t>(T);
  BENCH_CUDA(cudaMemcpy(d_num_tokens, &live_tokens, 4, cudaMemcpyHostToDevice));

  // One graph per arm, each with its own workspace and output.
  progress("capturing graphs");
  fp8moe::Config cfg[2];
  uint16_t* d_out[2] = {nullptr, nullptr};
  uint8_t* d_work[2] = {nullptr, nullptr};
  cudaGraph_t graph[2] = {nullptr, nullptr};
  cudaGraphExec_t exec[2] = {nullptr, nullptr};
  for (int arm = 0; arm < 2; ++arm) {
    if (!opt.arm[arm]) continue;
    cfg[arm] = make_config(p, opt, C, arm);
    const size_t ws = fp8moe::workspace_size(cfg[arm]);
    d_out[arm] = device_alloc<uint16_t>(size_t(C) * H);
    d_work[arm] = device_alloc<uint8_t>(ws);
    // The output is poisoned (an unwritten row shows up as NaN); the workspace is zeroed rather than
    // poisoned, so that the padded arm's padding rows hold plain zeros as they would in an engine,
    // not NaN codes (the gap contract is the tests' business, not the benchmark's).
    const size_t out_bytes = size_t(C) * H * sizeof(uint16_t);
    BENCH_CUDA(cudaMemset(d_out[arm], 0xFF, out_bytes));
    BENCH_CUDA(cudaMemset(d_work[arm], 0, ws));
    fp8moe::Args a;
    a.num_rows = C;
    a.hidden = d_hidden;
    a.topk_ids = d_ids;
    a.topk_weights = d_weights;
    a.num_tokens = d_num_tokens;
    a.w13 = dev.w13;
    a.w13_scale = dev.w13_scale;
    a.w2 = dev.w2;
    a.w2_scale = dev.w2_scale;
    a.out = d_out[arm];
    a.workspace = d_work[arm];
    a.workspace_bytes = ws;
    auto exit_unless_ok = [&](fp8moe::Status st, const char* how) {
      if (st == fp8moe::Status::kSuccess) return;
      std::fprintf(stderr, "fp8moe-bench: %sfp8moe::run (%s) failed: %s: %s\n", how, kArmName[arm],
                   fp8moe::status_string(st), fp8moe::last_error());
      std::exit(1);
    };
    if (opt.eager_first) {
      BENCH_CUDA(cudaDeviceSynchronize());  // (the fills above ran on the legacy default stream)
      exit_unless_ok(fp8moe::run(cfg[arm], a, dev.stream), "eager ");
      BENCH_CUDA(cudaStreamSynchronize(dev.stream));
      BENCH_CUDA(cudaMemset(d_out[arm], 0xFF, out_bytes));  // the graph's rows must be its own
    }
    BENCH_CUDA(cudaStreamBeginCapture(dev.stream, cudaStreamCaptureModeThreadLocal));
    const fp8moe::Status st = fp8moe::run(cfg[arm], a, dev.stream);
    BENCH_CUDA(cudaStreamEndCapture(dev.stream, &graph[arm]));
    exit_unless_ok(st, "");
    BENCH_CUDA(cudaGraphInstantiate(&exec[arm], graph[arm], 0));
    BENCH_CUDA(cudaGraphUpload(exec[arm], dev.stream));
    res.arm[arm].ran = true;
    res.arm[arm].kernels_per_replay = count_kernel_nodes(graph[arm]);
  }
  // The uploads and poisoning above ran on the legacy default stream, which the non-blocking
  // bench stream does not wait for.
  BENCH_CUDA(cudaDeviceSynchronize());

  progress("warm-up");
  for (int arm = 0; arm < 2; ++arm) {
    if (!res.arm[arm].ran) continue;
    for (int w = 0; w < kWarmupReplays; ++w) {
      dev.flush->run(dev.stream);
      BENCH_CUDA(cudaGraphLaunch(exec[arm], dev.stream));
    }
  }
  BENCH_CUDA(cudaStreamSynchronize(dev.stream));
  BENCH_CUDA(cudaGetLastError());
  std::string error;
  if (opt.cupti) {
    std::vector<fp8moe::bench::cupti::KernelRecord> discard;  // warm-up and setup kernels
    CUPTI_STEP(fp8moe::bench::cupti::take(&discard, &error), error);
  }

  // Timed rounds: padded, live, padded, live; each replay after an L2 flush, one batch per round.
  std::vector<double> samples[2], event_us[2];
  std::map<std::string, std::vector<double>> kernel_us[2], kernel_start_us[2];
  fp8moe::bench::TelemetrySamples telemetry[2];
  const int order[4] = {kPadded, kLive, kPadded, kLive};
  for (int round = 0; round < 4; ++round) {
    const int arm = order[round];
    if (!res.arm[arm].ran) continue;
    const int n = round < 2 ? (opt.samples + 1) / 2 : opt.samples / 2;
    char what[96];
    std::snprintf(what, sizeof what, "round %d/4: %s, %d replays", round + 1, kArmName[arm], n);
    progress(what);
    dev.telemetry->start();
    for (int s = 0; s < n; ++s) {
      dev.flush->run(dev.stream);
      BENCH_CUDA(cudaEventRecord(dev.events[2 * s], dev.stream));
      BENCH_CUDA(cudaGraphLaunch(exec[arm], dev.stream));
      BENCH_CUDA(cudaEventRecord(dev.events[2 * s + 1], dev.stream));
    }
    BENCH_CUDA(cudaStreamSynchronize(dev.stream));
    dev.telemetry->stop(&telemetry[arm]);
    BENCH_CUDA(cudaGetLastError());
    std::vector<double> ev(n);
    for (int s = 0; s < n; ++s) {
      float ms = 0;
      BENCH_CUDA(cudaEventElapsedTime(&ms, dev.events[2 * s], dev.events[2 * s + 1]));
      ev[s] = ms * 1e3;
    }
    event_us[arm].insert(event_us[arm].end(), ev.begin(), ev.end());
    if (!opt.cupti) {
      samples[arm].insert(samples[arm].end(), ev.begin(), ev.end());
      continue;
    }
    std::vector<fp8moe::bench::cupti::KernelRecord> records;
    CUPTI_STEP(fp8moe::bench::cupti::take(&records, &error), error);
    std::vector<fp8moe::bench::cupti::Replay> replays;
    std::string warning;
    CUPTI_STEP(fp8moe::bench::cupti::split_replays(records, res.arm[arm].kernels_per_replay, n, &replays, &error,
                                                   &warning),
               error);
    if (!warning.empty() && dev.cupti_warning.empty()) {
      dev.cupti_warning = warning;
      std::fprintf(stderr, "fp8moe-bench: warning: %s\n", warning.c_str());
    }
    for (const auto& r : replays) {
      samples[arm].push_back(r.span_us);
      for (size_t i = 0; i < r.kernels.size(); ++i) {
        kernel_us[arm][r.kernels[i].first].push_back(r.kernels[i].second);
        kernel_start_us[arm][r.kernels[i].first].push_back(r.start_us[i]);
      }
      if (res.arm[arm].roles.empty())
        for (const auto& kr : r.kernels) res.arm[arm].roles.push_back(kr.first);
    }
  }
  for (int arm = 0; arm < 2; ++arm) {
    if (!res.arm[arm].ran) continue;
    res.arm[arm].span = fp8moe::bench::stats_of(samples[arm]);
    res.arm[arm].event = fp8moe::bench::stats_of(event_us[arm]);
    for (const auto& [role, v] : kernel_us[arm]) res.arm[arm].kernel_us[role] = fp8moe::bench::stats_of(v).median;
    for (const auto& [role, v] : kernel_start_us[arm])
      res.arm[arm].kernel_start_us[role] = fp8moe::bench::stats_of(v).median;
    res.arm[arm].sm_clock_mhz = telemetry[arm].sm_clock_median();
    res.arm[arm].power_w = telemetry[arm].power_median();
  }

#if FP8MOE_UNPERMUTE_TRACE
  // Investigation builds only (kernels/unpermute.cuh): the unpermutation's per-CTA timeline in a few
  // more cold-L2 replays of the live graph, appended to $FP8MOE_UNPERMUTE_TRACE_OUT as
  // "preset capacity tokens pdl replay cta sm entry waited end" (ns of %globaltimer).
  if (const char* trace_out = std::getenv("FP8MOE_UNPERMUTE_TRACE_OUT"); trace_out && res.arm[kLive].ran) {
    std::vector<uint64_t> tr(size_t(fp8moe::kernels::kUnpermuteTraceCtas) * fp8moe::kernels::kUnpermuteTraceSlots);
    for (int replay = 0; replay < 5; ++replay) {
      BENCH_CUDA(fp8moe::kernels::unpermute_trace(nullptr));
      dev.flush->run(dev.stream);
      BENCH_CUDA(cudaGraphLaunch(exec[kLive], dev.stream));
      BENCH_CUDA(cudaStreamSynchronize(dev.stream));
      BENCH_CUDA(fp8moe::kernels::unpermute_trace(tr.data()));
      if (FILE* f = std::fopen(trace_out, "a")) {
        for (int cta = 0; cta < fp8moe::kernels::kUnpermuteTraceCtas; ++cta) {
          const uint64_t* r = tr.data() + size_t(cta) * fp8moe::kernels::kUnpermuteTraceSlots;
          if (r[3] == 0) continue;
          std::fprintf(f, "%s %lld %lld %d %d %d %llu %llu %llu %llu\n", p.name, static_cast<long long>(C),
                       static_cast<long long>(T), fp8moe::knobs::pdl() ? 1 : 0, replay, cta, static_cast<unsigned long long>(r[0]),
                       static_cast<unsigned long long>(r[1]), static_cast<unsigned long long>(r[2]),
                       static_cast<unsigned long long>(r[3]));
        }
        std::fclose(f);
      }
    }
    if (opt.cupti) {  // these replays are not samples
      std::vector<fp8moe::bench::cupti::KernelRecord> discard;
      CUPTI_STEP(fp8moe::bench::cupti::take(&discard, &error), error);
    }
  }
#endif

  // Outputs of the last replay of each arm (same inputs): bitwise on the T live rows.
  std::vector<uint16_t> out[2];
  for (int arm = 0; arm < 2; ++arm) {
    if (!res.arm[arm].ran) continue;
    out[arm].resize(size_t(C) * H);
    BENCH_CUDA(cudaMemcpy(out[arm].data(), d_out[arm], out[arm].size() * 2, cudaMemcpyDeviceToHost));
  }
  if (res.arm[kPadded].ran && res.arm[kLive].ran) {
    res.have_bitwise = true;
    res.bitwise_equal = std::memcmp(out[kPadded].data(), out[kLive].data(), size_t(T) * H * 2) == 0;
  }

  if (opt.check) {
    const int arm = res.arm[kLive].ran ? kLive : kPadded;
    progress("CPU reference (--check)");
    const auto start = std::chrono::steady_clock::now();
    fp8moe::ref::Shape shape;
    shape.tokens = C;
    shape.capacity = C;
    shape.hidden = H;
    shape.intermediate = p.inter;
    shape.num_experts = E;
    shape.top_k = k;
    fp8moe::ref::Inputs ri;
    ri.hidden = in.hidden.data();
    ri.topk_ids = in.topk_ids.data();
    ri.topk_weights = in.topk_weights.data();
    ri.num_tokens = &live_tokens;
    ri.w13 = weights.w13.data();
    ri.w13_scale = weights.w13_scale.data();
    ri.w2 = weights.w2.data();
    ri.w2_scale = weights.w2_scale.data();
    std::vector<uint16_t> want(size_t(C) * H);
    fp8moe::ref::run_pipeline(shape, ri, fp8moe::detail::act_params(cfg[arm]),
                              static_cast<fp8moe::ref::ScaleFormat>(opt.scale_format), want.data());
    res.check_rel_err = fp8moe::test::bf16_rel_error(out[arm].data(), want.data(), want.size());  // all C rows (t >= T must be 0)
    char what[96];
    std::snprintf(what, sizeof what, "%s vs CPU reference: rel_err %.3g (%.1f s)", kArmName[arm], res.check_rel_err,
                  seconds_since(start));
    progress(what);
  }

  for (int arm = 0; arm < 2; ++arm) {
    if (exec[arm]) BENCH_CUDA(cudaGraphExecDestroy(exec[arm]));
    if (graph[arm]) BENCH_CUDA(cudaGraphDestroy(graph[arm]));
    if (d_out[arm]) BENCH_CUDA(cudaFree(d_out[arm]));
    if (d_work[arm]) BENCH_CUDA(cudaFree(d_work[arm]));
  }
  BENCH_CUDA(cudaFree(d_hidden));
  BENCH_CUDA(cudaFree(d_ids));
  BENCH_CUDA(cudaFree(d_weights));
  BENCH_CUDA(cudaFree(d_num_tokens));
  return res;
}

// Work and floor of a case (SPEC section 7): live FLOPs = 2 * live_rows * (2I*H + H*I); weight bytes =
// FP8 codes of w13 and w2 of the experts with at least one live row (block scales, 1/4096 of that,
// left out); floor = max(bytes / read ceiling, FLOPs / FP8 ceiling).
void derive(const Preset& p, double read_tbps, double fp8_tflops, CaseResult* r) {
  const double per_expert = double(2 * p.inter * p.hidden + p.hidden * p.inter);
  r->flops = 2.0 * double(r->live_rows) * per_expert;
  r->weight_bytes = double(r->touched_experts) * per_expert;
  const double bytes_s = r->weight_bytes / (read_tbps * 1e12);
  const double flops_s = fp8_tflops > 0 ? r->flops / (fp8_tflops * 1e12) : 0.0;
  r->floor_us = std::max(bytes_s, flops_s) * 1e6;
}

std::string fmt(const char* format, double v) {
  if (!std::isfinite(v)) return "-";
  char buf[64];
  std::snprintf(buf, sizeof buf, format, v);
  return buf;
}

std::string case_label(const CaseResult& r) {  // "capacity/tokens"
  return std::to_string(r.c.capacity) + "/" + std::to_string(r.c.tokens);
}

void print_tables(const Options& opt, const std::vector<CaseResult>& results, bool cupti) {
  std::printf("\n%-10s %6s %4s | %-26s | %-26s | %7s %8s %6s %8s %7s %s%s\n", "C/T", "rows", "exp",
              "padded us: median p10-p90", "live us: median p10-p90", "speedup", "TFLOP/s", "wTB/s", "floor_us",
              "t/floor", "bitwise", opt.check ? "  rel_err" : "");
  for (const auto& r : results) {
    const std::string label = case_label(r);
    std::string arm_text[2];
    for (int arm = 0; arm < 2; ++arm) {
      const ArmResult& a = r.arm[arm];
      char buf[64] = "-";
      if (a.ran) std::snprintf(buf, sizeof buf, "%8.1f %8.1f-%-8.1f", a.span.median, a.span.p10, a.span.p90);
      arm_text[arm] = buf;
    }
    const ArmResult& live = r.arm[kLive];
    const bool both = r.arm[kPadded].ran && live.ran;
    const double t = live.ran ? live.span.median : NAN;
    std::printf("%-10s %6lld %4d | %-26s | %-26s | %7s %8s %6s %8s %7s %s%s\n", label.c_str(),
                static_cast<long long>(r.live_rows), r.touched_experts, arm_text[kPadded].c_str(),
                arm_text[kLive].c_str(),
                both ? fmt("%.3fx", r.arm[kPadded].span.median / t).c_str() : "-",
                fmt("%.0f", r.flops / (t * 1e-6) / 1e12).c_str(), fmt("%.2f", r.weight_bytes / (t * 1e-6) / 1e12).c_str(),
                fmt("%.1f", r.floor_us).c_str(), fmt("%.3f", r.floor_us > 0 ? t / r.floor_us : NAN).c_str(),
                r.have_bitwise ? (r.bitwise_equal ? "equal" : "DIFFER") : "-",
                opt.check ? ("  " + fmt("%.3g", r.check_rel_err)).c_str() : "");
  }
  bool telemetry = false;
  for (const auto& r : results)
    for (const ArmResult& a : r.arm) telemetry |= a.ran && std::isfinite(a.sm_clock_mhz);
  if (telemetry) {
    std::printf("\nSM clock and board power during the timed replays (NVML, medians; 700 W is the H200's limit)\n");
    std::printf("%-10s %-7s %8s %8s\n", "C/T", "arm", "SM MHz", "W");
    for (const auto& r : results)
      for (int arm : {kPadded, kLive}) {
        const ArmResult& a = r.arm[arm];
        if (!a.ran) continue;
        const std::string label = case_label(r);
        std::printf("%-10s %-7s %8s %8s\n", label.c_str(), kArmName[arm], fmt("%.0f", a.sm_clock_mhz).c_str(),
                    fmt("%.0f", a.power_w).c_str());
      }
  }
  if (!cupti) return;
  std::printf("\nper-kernel medians (us, CUPTI); sum = sum of the medians, span = median replay span\n");
  std::printf("%-10s %-7s", "C/T", "arm");
  // Cases may launch different kernels (the permutation's metadata takes one or two launches): a
  // column for every role seen, in launch order.
  std::vector<std::string> all_roles;
  for (const auto& r : results)
    for (int arm = 0; arm < 2; ++arm)
      for (const auto& role : r.arm[arm].roles)
        if (std::find(all_roles.begin(), all_roles.end(), role) == all_roles.end()) all_roles.push_back(role);
  if (all_roles.empty()) return;
  auto width = [](const std::string& role) { return static_cast<int>(std::max<size_t>(9, role.size())); };
  for (const auto& role : all_roles) std::printf(" %*s", width(role), role.c_str());
  std::printf(" %9s %9s\n", "sum", "span");
  for (const auto& r : results) {
    for (int arm : {kLive, kPadded}) {
      const ArmResult& a = r.arm[arm];
      if (!a.ran) continue;
      const std::string label = case_label(r);
      std::printf("%-10s %-7s", label.c_str(), kArmName[arm]);
      double sum = 0;
      for (const auto& role : all_roles) {
        const auto it = a.kernel_us.find(role);
        if (it == a.kernel_us.end()) {
          std::printf(" %*s", width(role), "-");
        } else {
          std::printf(" %*.1f", width(role), it->second);
          sum += it->second;
        }
      }
      std::printf(" %9.1f %9.1f\n", sum, a.span.median);
    }
  }
  // Where each kernel runs inside a replay (programmatic dependents start before their
  // predecessor ends): median start and median end = start + duration, from the first kernel's start.
  std::printf("\nlive timeline (us from the replay's first kernel start; median start-end per kernel)\n");
  for (const auto& r : results) {
    const ArmResult& a = r.arm[kLive];
    if (!a.ran || a.kernel_start_us.empty()) continue;
    std::printf("%-10s", case_label(r).c_str());
    for (const auto& role : a.roles) {
      const auto st = a.kernel_start_us.find(role);
      const auto du = a.kernel_us.find(role);
      if (st == a.kernel_start_us.end() || du == a.kernel_us.end()) continue;
      std::printf("  %s %.1f-%.1f", role.c_str(), st->second, st->second + du->second);
    }
    std::printf("\n");
  }
}

std::string json_stats(const ArmResult& a) {
  if (!a.ran) return "null";
  return "{\"median_us\": " + json_num(a.span.median) + ", \"p10_us\": " + json_num(a.span.p10) +
         ", \"p90_us\": " + json_num(a.span.p90) + ", \"min_us\": " + json_num(a.span.min) +
         ", \"samples\": " + std::to_string(a.span.samples) + ", \"event_median_us\": " + json_num(a.event.median) +
         ", \"sm_clock_MHz\": " + json_num(a.sm_clock_mhz, 0) + ", \"power_W\": " + json_num(a.power_w, 0) + "}";
}
// Per-role medians (durations, or starts) as a JSON object in launch order.
std::string json_kernels(const ArmResult& a, const std::map<std::string, double>& per_role) {
  if (!a.ran || per_role.empty()) return "null";
  std::string s = "{";
  for (size_t i = 0; i < a.roles.size(); ++i) {
    const auto it = per_role.find(a.roles[i]);
    s += (i ? ", \"" : "\"") + json_escape(a.roles[i]) + "\": " + json_num(it == per_role.end() ? NAN : it->second);
  }
  return s + "}";
}

bool write_json(const Options& opt, const std::string& path, const std::string& gpu, const std::string& command,
                double read_tbps, double fp8_tflops, const std::vector<CaseResult>& results,
                const std::string& cupti_warning) {
  FILE* f = std::fopen(path.c_str(), "w");
  if (f == nullptr) {
    std::fprintf(stderr, "fp8moe-bench: cannot write %s\n", path.c_str());
    return false;
  }
  const Preset& p = *opt.preset;
  int runtime = 0, driver = 0;
  BENCH_CUDA(cudaRuntimeGetVersion(&runtime));
  BENCH_CUDA(cudaDriverGetVersion(&driver));
  std::fprintf(f, "{\n  \"gpu\": \"%s\",\n  \"commit\": \"%s\",\n  \"date\": \"%s\",\n  \"command\": \"%s\",\n",
               json_escape(gpu).c_str(), json_escape(commit_id()).c_str(), utc_now_iso().c_str(),
               json_escape(command).c_str());
  std::fprintf(f, "  \"cuda_runtime\": %d,\n  \"cuda_driver\": %d,\n", runtime, driver);
  std::fprintf(f, "  \"ceilings\": {\"read_TBps\": %s, \"fp8_TFLOPs\": %s},\n", json_num(read_tbps, 4).c_str(),
               json_num(fp8_tflops, 1).c_str());
  std::fprintf(f,
               "  \"settings\": {\"preset\": \"%s\", \"experts\": %d, \"hidden\": %lld, \"intermediate\": %lld, "
               "\"top_k\": %d, \"schedule\": \"%s\", \"scale_format\": \"%s\", \"activation\": \"%s\", "
               "\"samples_per_arm\": %d, \"quick\": %s, \"timer\": \"%s\", \"warmup_replays\": %d, \"seed\": %llu, "
               "\"l2_flush\": \"%s\", \"eager_first\": %s, \"weights\": \"%s\", \"cupti_warning\": %s},\n",
               p.name, p.experts, static_cast<long long>(p.hidden), static_cast<long long>(p.inter), p.top_k,
               opt.schedule.c_str(), scale_format_name(opt.scale_format), activation_name(opt.activation), opt.samples,
               opt.quick ? "true" : "false", opt.cupti ? "cupti-kernel-span" : "cuda-events", kWarmupReplays,
               static_cast<unsigned long long>(opt.seed), fp8moe::bench::flush_mode_name(opt.flush),
               opt.eager_first ? "true" : "false", opt.normal_weights ? "normal" : "codes", cupti_warning.empty() ? "null" : ("\"" + json_escape(cupti_warning) + "\"").c_str());
  std::fprintf(f, "  \"cases\": [");
  for (size_t i = 0; i < results.size(); ++i) {
    const CaseResult& r = results[i];
    const ArmResult& live = r.arm[kLive];
    const double t = live.ran ? live.span.median : NAN;
    const bool both = r.arm[kPadded].ran && live.ran;
    std::fprintf(f,
                 "%s\n    {\"preset\": \"%s\", \"capacity\": %lld, \"tokens\": %lld, \"live_rows\": %lld, "
                 "\"touched_experts\": %d,\n     \"padded\": %s,\n     \"live\": %s,\n"
                 "     \"speedup\": %s, \"live_TFLOPs\": %s, \"weight_TBps\": %s, \"floor_us\": %s, "
                 "\"time_over_floor\": %s, \"bitwise_equal\": %s,\n     \"kernels_us\": %s,\n"
                 "     \"kernels_us_padded\": %s,\n     \"kernels_start_us\": %s,\n     \"kernels_start_us_padded\": %s",
                 i ? "," : "", p.name, static_cast<long long>(r.c.capacity), static_cast<long long>(r.c.tokens),
                 static_cast<long long>(r.live_rows), r.touched_experts, json_stats(r.arm[kPadded]).c_str(),
                 json_stats(live).c_str(), both ? json_num(r.arm[kPadded].span.median / t, 4).c_str() : "null",
                 json_num(r.flops / (t * 1e-6) / 1e12, 1).c_str(), json_num(r.weight_bytes / (t * 1e-6) / 1e12, 4).c_str(),
                 json_num(r.floor_us).c_str(), json_num(r.floor_us > 0 ? t / r.floor_us : NAN, 4).c_str(),
                 r.have_bitwise ? (r.bitwise_equal ? "true" : "false") : "null",
                 json_kernels(live, live.kernel_us).c_str(), json_kernels(r.arm[kPadded], r.arm[kPadded].kernel_us).c_str(),
                 json_kernels(live, live.kernel_start_us).c_str(),
                 json_kernels(r.arm[kPadded], r.arm[kPadded].kernel_start_us).c_str());
    if (opt.check) std::fprintf(f, ",\n     \"check_rel_err\": %s", json_num(r.check_rel_err, 6).c_str());
    std::fprintf(f, "}");
  }
  std::fprintf(f, "\n  ]\n}\n");
  const bool ok = std::ferror(f) == 0;
  if (std::fclose(f) != 0 || !ok) {
    std::fprintf(stderr, "fp8moe-bench: error writing %s\n", path.c_str());
    return false;
  }
  return true;
}

int run_gpu(const Options& opt, const std::string& command) {
  const Preset& p = *opt.preset;
  BENCH_CUDA(cudaSetDevice(0));
  cudaDeviceProp prop{};
  BENCH_CUDA(cudaGetDeviceProperties(&prop, 0));
  const std::vector<Case> cases = opt.capacity >= 0 ? std::vector<Case>{{opt.capacity, opt.tokens}}
                                  : opt.sweep        ? kSweep
                                                     : kSeedSuite;
  // Refuse before any measurement if this build cannot run the configuration here.
  for (int arm = 0; arm < 2; ++arm) {
    if (!opt.arm[arm]) continue;
    const fp8moe::Config cfg = make_config(p, opt, cases.front().capacity, arm);
    if (fp8moe::validate(cfg) != fp8moe::Status::kSuccess) {
      std::fprintf(stderr, "fp8moe-bench: %s\n", fp8moe::last_error());
      return 1;
    }
  }

  std::fprintf(stderr, "measuring ceilings (HBM read, cuBLASLt FP8 8192^3)...\n");
  const double read_tbps = fp8moe::bench::measure_read_tbps(opt.flush);
  const double fp8_tflops = fp8moe::bench::measure_fp8_gemm_tflops();
  if (fp8_tflops <= 0)
    std::fprintf(stderr, "fp8moe-bench: warning: no FP8 ceiling; floors use the read ceiling only\n");

  std::fprintf(stderr, "generating %s weights...\n", p.name);
  auto start = std::chrono::steady_clock::now();
  Weights weights = make_weights(p, opt.seed, opt.normal_weights);
  Device dev;
  dev.w13 = device_alloc<uint8_t>(weights.w13.size());
  dev.w2 = device_alloc<uint8_t>(weights.w2.size());
  dev.w13_scale = device_alloc<float>(weights.w13_scale.size());
  dev.w2_scale = device_alloc<float>(weights.w2_scale.size());
  BENCH_CUDA(cudaMemcpy(dev.w13, weights.w13.data(), weights.w13.size(), cudaMemcpyHostToDevice));
  BENCH_CUDA(cudaMemcpy(dev.w2, weights.w2.data(), weights.w2.size(), cudaMemcpyHostToDevice));
  BENCH_CUDA(cudaMemcpy(dev.w13_scale, weights.w13_scale.data(), weights.w13_scale.size() * 4, cudaMemcpyHostToDevice));
  BENCH_CUDA(cudaMemcpy(dev.w2_scale, weights.w2_scale.data(), weights.w2_scale.size() * 4, cudaMemcpyHostToDevice));
  const double weight_gb = (weights.w13.size() + weights.w2.size()) / 1e9;
  if (!opt.check) weights = Weights{};  // the host copies only serve the CPU reference
  std::fprintf(stderr, "  %.2f GB of FP8 weights generated and uploaded in %.1f s\n", weight_gb, seconds_since(start));

  BENCH_CUDA(cudaStreamCreateWithFlags(&dev.stream, cudaStreamNonBlocking));
  fp8moe::bench::L2Flush flush(opt.flush);
  dev.flush = &flush;
  int cuda_device = 0;
  BENCH_CUDA(cudaGetDevice(&cuda_device));
  fp8moe::bench::GpuTelemetry telemetry(cuda_device);
  dev.telemetry = &telemetry;
  if (!telemetry.available())
    std::fprintf(stderr, "fp8moe-bench: NVML (libnvidia-ml.so.1) not usable: no SM clock or power in the results\n");
  dev.events.resize(2 * ((opt.samples + 1) / 2));
  for (auto& e : dev.events) BENCH_CUDA(cudaEventCreate(&e));
  std::string error;
  // After the ceilings, before any capture: the graphs' kernels are traced from instantiation on.
  if (opt.cupti) CUPTI_STEP(fp8moe::bench::cupti::start(&error), error + " (try --no-cupti under another profiler)");

  std::printf("fp8moe-bench on %s (sm_%d%d): HBM read ceiling %.2f TB/s, cuBLASLt FP8 8192^3 %.0f TFLOP/s\n", prop.name,
              prop.major, prop.minor, read_tbps, fp8_tflops);
  std::printf("preset %s (E=%d H=%lld I=%lld k=%d), %s scales, %s, %d samples per arm (%s), cold L2 (%s flush), one "
              "CUDA graph per arm\n",
              p.name, p.experts, static_cast<long long>(p.hidden), static_cast<long long>(p.inter), p.top_k,
              scale_format_name(opt.scale_format), activation_name(opt.activation), opt.samples,
              opt.cupti ? "CUPTI kernel span per replay" : "CUDA events per replay",
              fp8moe::bench::flush_mode_name(opt.flush));
  std::fflush(stdout);

  std::vector<CaseResult> results;
  for (size_t i = 0; i < cases.size(); ++i) {
    CaseResult r = run_case(opt, weights, dev, static_cast<int>(i), static_cast<int>(cases.size()), cases[i]);
    derive(p, read_tbps, fp8_tflops, &r);
    std::fprintf(stderr, "  -> padded %s us, live %s us, bitwise %s\n",
                 fmt("%.1f", r.arm[kPadded].ran ? r.arm[kPadded].span.median : NAN).c_str(),
                 fmt("%.1f", r.arm[kLive].ran ? r.arm[kLive].span.median : NAN).c_str(),
                 r.have_bitwise ? (r.bitwise_equal ? "equal" : "DIFFER") : "-");
    results.push_back(std::move(r));
  }
  if (opt.cupti) fp8moe::bench::cupti::stop();

  print_tables(opt, results, opt.cupti);
  bool all_equal = true;
  for (const auto& r : results) all_equal &= !r.have_bitwise || r.bitwise_equal;
  if (!all_equal) std::printf("\n!! the padded and live outputs differ in at least one case\n");
  if (!dev.cupti_warning.empty()) std::printf("\nCUPTI warning: %s\n", dev.cupti_warning.c_str());

  int rc = 0;
  if (!opt.json.empty()) {
    if (write_json(opt, opt.json, prop.name, command, read_tbps, fp8_tflops, results, dev.cupti_warning))
      std::printf("\nwrote %s\n", opt.json.c_str());
    else
      rc = 1;
  }
  for (auto& e : dev.events) BENCH_CUDA(cudaEventDestroy(e));
  BENCH_CUDA(cudaStreamDestroy(dev.stream));
  BENCH_CUDA(cudaFree(dev.w13));
  BENCH_CUDA(cudaFree(dev.w2));
  BENCH_CUDA(cudaFree(dev.w13_scale));
  BENCH_CUDA(cudaFree(dev.w2_scale));
  return all_equal ? rc : 1;
}

}  // namespace

int main(int argc, char** argv) {
  Options opt;
  bool help = false;
  if (!parse(argc, argv, &opt, &help)) {
    std::fprintf(stderr, "(fp8moe-bench --help lists the options)\n");
    return 2;
  }
  if (help) {
    usage(stdout);
    return 0;
  }
  std::string command;
  for (int i = 0; i < argc; ++i) command += (i ? " " : "") + std::string(argv[i]);

  std::string gpu;
  const int arch = gpu_arch(&gpu);
  if (arch == 0)
    return run_cpu_fallback(opt, "no CUDA GPU found: ran the CPU reference only (the GPU benchmark needs an H200)");
  if (arch != 90)
    return run_cpu_fallback(opt, "found " + gpu + " (sm_" + std::to_string(arch) +
                                     "), but the GPU benchmark needs an SM90 GPU (H200): ran the CPU reference only");
  if (opt.act_only) return fp8moe::bench::run_act_only(opt.samples, opt.json);
  return run_gpu(opt, command);
}
