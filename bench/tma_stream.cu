// fp8moe-tma-stream: how fast TMA streams a grouped GEMM's weights (B: FP8 [E * N, K], K-major)
// into shared memory in the order the decode GEMM reads them, with nothing else in the way: no
// math, and a consumer that releases each ring stage as soon as it lands. An investigation tool
// for the weight-streaming (decode) GEMMs (docs/perf-notes.md v15): which box shape, ring depth
// and L2 promotion reach the HBM read ceiling measured in the same run.
//
// One CTA per SM walks tiles t = blockIdx.x, + gridDim.x, ... as the GEMM does (tile t: expert
// t / (N / BN), BN rows of it). A tile is K / 128 k-blocks, loaded `depth` k-blocks per TMA box: a
// 3-D view [K / 128][rows][128 bytes] whose box lands as `depth` consecutive 128-byte-swizzled
// k-blocks, the layout the GEMM's wgmma reads. `--a` adds the GEMM's A box per k-block (16 rows
// of a small L2-resident matrix, as a decode tile with <= 16 live rows loads).
//
//   fp8moe-tma-stream [--shape seed1|seed2|qwen1|qwen2|all] [--reps N] [--flush write|clean]
//                     [--pitch-pad BYTES] [--rotate 0|1|2] [--gemm-only]
//   fp8moe-tma-stream --l2 [--ctas C] [--passes N] [--reps N]
//
// --l2 asks a different question: how fast TMA feeds the SMs from L2 when the GEMM's prefill-shaped
// stages (a BN x 128 B box and a 128 x 128 A box per k-block, 128-byte swizzle, as the 256-wide
// body loads them) come from matrices that stay in L2 (a warm-up launch, no flush; --passes walks
// per launch), on --ctas CTAs (default: all, half, a quarter, 16 and 1). Two layouts: `shared`
// (every CTA walks the same 16 B tiles and A blocks, so several CTAs request the same lines at
// once) and `private` (each CTA its own rows). It prints GB/s per CTA beside the total. On the
// H200 (perf notes v40) both layouts give ~8.5-8.9 TB/s at 132 CTAs, while the GEMM's own
// supply-alone build (FP8MOE_GEMM_ABLATE=2) moves 10-15 TB/s on the larger shapes: this measures
// its access pattern, not a ceiling of the GEMM.
//
// --pitch-pad stores each weight row K + BYTES apart (K alone in the tensor map): whether a row
// pitch of a power of two (GEMM2's K = 2048) streams worse than another; --rotate starts each
// tile's k-blocks at a different one (1: by tile, 2: by expert), so that the CTAs in flight do not
// all read the same 128-byte column of their rows at once; --gemm-only runs just the GEMM's
// variant (128 rows, one k-block per box, 6 stages, 128-byte promotion).
//
// Times are CUDA events around one launch (the first line gives what they add to an empty kernel
// of the same grid); every run follows an L2 flush (--flush: bench_common.cuh's FlushMode).
#include <cuda.h>
#include <cuda_runtime.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "bench/bench_common.cuh"
#include "gemm/tensor_map.hpp"
#include "ptx/ptx.cuh"

namespace {

constexpr int kMaxStages = 32;
constexpr int kARows = 16;

struct StreamParams {
  int num_tiles, tiles_per_expert, n, bn, kb, depth, stages;
  int rotate;  // 0: k-blocks in order; 1: tile t starts at box t % boxes; 2: at box expert % boxes
  uint32_t stage_bytes, b_bytes;  // a stage: B box (+ A box with --a)
  bool with_a;
  int a_rows = kARows;  // rows of A per box (--l2: 128, the prefill tile's)
  int a_tiles = 0;      // --l2: A's rows / a_rows (tile t loads A block t % a_tiles); 0: A block = expert
  int passes = 1;       // --l2: walks over the tiles per launch
  int priv_rows = 0;    // --l2 private: CTA c always loads B rows [c * priv_rows, + bn) and A block c
};

__global__ void __launch_bounds__(64, 1) tma_stream_kernel(const __grid_constant__ CUtensorMap map_b,
                                                           const __grid_constant__ CUtensorMap map_a, StreamParams p,
                                                           int* sink) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  using namespace fp8moe;
  extern __shared__ uint8_t smem_raw[];
  uint8_t* smem = smem_raw + ptx::smem_align_1024_offset(smem_raw);
  uint64_t* full = reinterpret_cast<uint64_t*>(smem + p.stages * p.stage_bytes);
  uint64_t* empty = full + kMaxStages;
  if (threadIdx.x == 0) {
    ptx::prefetch_tensormap(&map_b);
    for (int s = 0; s < p.stages; ++s) {
      ptx::mbar_init(&full[s], 1);
      ptx::mbar_init(&empty[s], 1);
    }
    ptx::fence_barrier_init();
  }
  __syncthreads();
  const int boxes = p.kb / p.depth;
  int stage = 0;
  uint32_t phase = 0;
  auto advance = [&] {
    if (++stage == p.stages) {
      stage = 0;
      phase ^= 1u;
    }
  };
  if (threadIdx.x == 0) {  // producer
    for (int pass = 0; pass < p.passes; ++pass)
    for (int t = blockIdx.x; t < p.num_tiles; t += gridDim.x) {
      const int expert = t / p.tiles_per_expert;
      const int row = p.priv_rows ? static_cast<int>(blockIdx.x) * p.priv_rows
                                  : expert * p.n + (t % p.tiles_per_expert) * p.bn;
      const int first = p.rotate == 0 ? 0 : (p.rotate == 1 ? t : expert) % boxes;
      for (int i = 0; i < boxes; ++i) {
        const int b = first + i < boxes ? first + i : first + i - boxes;
        ptx::mbar_wait(&empty[stage], phase ^ 1u);
        ptx::mbar_arrive_expect_tx(&full[stage], p.stage_bytes);
        uint8_t* dst = smem + stage * p.stage_bytes;
        ptx::tma_load_3d(dst, &map_b, &full[stage], 0, row, b * p.depth);
        if (p.with_a) {
          const int a_block = p.priv_rows ? static_cast<int>(blockIdx.x) : p.a_tiles > 0 ? t % p.a_tiles : expert;
          for (int d = 0; d < p.depth; ++d)
            ptx::tma_load_2d(dst + p.b_bytes + d * p.a_rows * 128, &map_a, &full[stage], (b * p.depth + d) * 128,
                             a_block * p.a_rows);
        }
        advance();
      }
    }
  } else if (threadIdx.x == 32) {  // consumer: touch one byte of each stage and release it
    int sum = 0;
    for (int pass = 0; pass < p.passes; ++pass)
    for (int t = blockIdx.x; t < p.num_tiles; t += gridDim.x) {
      for (int b = 0; b < boxes; ++b) {
        ptx::mbar_wait(&full[stage], phase);
        sum += smem[stage * p.stage_bytes + (b & 127)];
        ptx::mbar_arrive(&empty[stage]);
        advance();
      }
    }
    sink[blockIdx.x] = sum;
  }
#endif
}

__global__ void empty_kernel() {}

struct Shape {
  const char* name;
  int experts, n, k;
};
// The decode cases' touched experts (512/16: 31 of 32 for the seed, ~81 of 128 for Qwen3-30B).
const Shape kShapes[] = {{"seed1", 31, 4096, 7168}, {"seed2", 31, 7168, 2048}, {"qwen1", 81, 1536, 2048},
                         {"qwen2", 81, 2048, 768}};

struct Variant {
  int bn, depth, stages;
  CUtensorMapL2promotion promo;
  bool with_a;
};
const char* promo_name(CUtensorMapL2promotion p) {
  return p == CU_TENSOR_MAP_L2_PROMOTION_NONE ? "none" : p == CU_TENSOR_MAP_L2_PROMOTION_L2_64B ? "64B"
                                                   : p == CU_TENSOR_MAP_L2_PROMOTION_L2_128B ? "128B"
                                                                                              : "256B";
}

// Median microseconds of `reps` launches after two warm-up ones, CUDA events around each; `before`
// runs ahead of each launch, outside the events (the L2 flush of a cold launch, or nothing).
template <typename Before, typename Launch>
fp8moe::bench::Stats time_launches(int reps, Before before, Launch launch) {
  cudaEvent_t t0, t1;
  BENCH_CUDA(cudaEventCreate(&t0));
  BENCH_CUDA(cudaEventCreate(&t1));
  std::vector<double> us;
  for (int r = -2; r < reps; ++r) {
    before();
    BENCH_CUDA(cudaEventRecord(t0));
    launch();
    BENCH_CUDA(cudaEventRecord(t1));
    BENCH_CUDA(cudaEventSynchronize(t1));
    float ms = 0;
    BENCH_CUDA(cudaEventElapsedTime(&ms, t0, t1));
    if (r >= 0) us.push_back(ms * 1e3);
  }
  BENCH_CUDA(cudaEventDestroy(t0));
  BENCH_CUDA(cudaEventDestroy(t1));
  return fp8moe::bench::stats_of(us);
}

// --l2: the prefill GEMM's stages from L2-resident matrices (see the top of the file).
int run_l2(int sms, int ctas_arg, int passes, int reps) {
  using namespace fp8moe;
  int* sink = nullptr;
  BENCH_CUDA(cudaMalloc(&sink, sizeof(int) * sms));
  BENCH_CUDA(cudaFuncSetAttribute(tma_stream_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, 227 * 1024));
  std::printf("commit %s, %d SMs, %d pass(es) per launch\n", bench::build_commit(), sms, passes);
  struct L2Variant {
    int bn, stages, a_rows;
  };
  const L2Variant variants[] = {{256, 3, 128}, {256, 4, 128}, {192, 4, 128}, {128, 6, 128}, {256, 4, 0}, {128, 8, 0}};
  std::vector<int> cta_counts;
  if (ctas_arg > 0) cta_counts = {ctas_arg};
  else cta_counts = {sms, sms / 2, sms / 4, 16, 1};
  // Two layouts: shared (16 B tiles of 256 rows and 16 A blocks, K = 2048, walked by every CTA, so
  // ~8 CTAs read the same lines at once, as CTAs sharing an expert's weights do) and private (CTA c
  // streams its own 256 B rows and 128 A rows, K = 512: no line requested by two CTAs).
  for (const bool priv : {false, true}) {
    const int k = priv ? 512 : 2048, kb = k / 128;
    const int b_rows = priv ? sms * 256 : 4096, a_rows_total = priv ? sms * 128 : 2048;
    const int tiles_per_cta = priv ? 64 : 16;
    uint8_t *a = nullptr, *b = nullptr;
    BENCH_CUDA(cudaMalloc(&a, static_cast<size_t>(a_rows_total) * k));
    BENCH_CUDA(cudaMalloc(&b, static_cast<size_t>(b_rows) * k));
    bench::fill_random_fp8(a, static_cast<size_t>(a_rows_total) * k, 7);
    bench::fill_random_fp8(b, static_cast<size_t>(b_rows) * k, 11);
    std::printf("\n%s: B %d x %d, A %d x %d (%.1f MB in L2), %d tiles of %d k-blocks per CTA\n",
                priv ? "private" : "shared", b_rows, k, a_rows_total, k, (b_rows + a_rows_total) * double(k) / 1e6,
                tiles_per_cta, kb);
    std::printf("%5s %5s %6s %5s %8s %8s %10s\n", "ctas", "BN", "stages", "A", "us", "TB/s", "GB/s/CTA");
    for (const int ctas : cta_counts) {
      for (const L2Variant& v : variants) {
        const uint32_t b_bytes = v.bn * 128;
        const uint32_t stage_bytes = (b_bytes + v.a_rows * 128 + 1023) / 1024 * 1024;
        const size_t smem = static_cast<size_t>(v.stages) * stage_bytes + 2 * kMaxStages * 8 + 1024;
        if (smem > 227 * 1024) continue;
        CUtensorMap map_b, map_a;
        const uint64_t dims[3] = {128, static_cast<uint64_t>(b_rows), static_cast<uint64_t>(kb)};
        const uint64_t strides[2] = {static_cast<uint64_t>(k), 128};
        const uint32_t box[3] = {128, static_cast<uint32_t>(v.bn), 1};
        if (!gemm::encode_tiled(&map_b, CU_TENSOR_MAP_DATA_TYPE_UINT8, 3, b, dims, strides, box,
                                CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_128B) ||
            !gemm::encode_2d(&map_a, CU_TENSOR_MAP_DATA_TYPE_UINT8, 1, a, a_rows_total, k, v.a_rows ? v.a_rows : 128,
                             128, CU_TENSOR_MAP_SWIZZLE_128B)) {
          std::fprintf(stderr, "tensor map encoding failed\n");
          return 1;
        }
        StreamParams p{};
        p.n = 0;  // (shared) tile t: B rows (t % tiles_per_expert) * bn
        p.tiles_per_expert = b_rows / v.bn;
        p.num_tiles = ctas * tiles_per_cta;
        p.bn = v.bn;
        p.kb = kb;
        p.depth = 1;
        p.stages = v.stages;
        p.stage_bytes = stage_bytes;
        p.b_bytes = b_bytes;
        p.with_a = v.a_rows > 0;
        p.a_rows = v.a_rows;
        p.a_tiles = v.a_rows > 0 ? a_rows_total / v.a_rows : 0;
        p.passes = passes;
        p.priv_rows = priv ? 256 : 0;
        // Warm launches: the matrices stay in L2 between them.
        const double t =
            time_launches(reps, [] {}, [&] { tma_stream_kernel<<<ctas, 64, smem>>>(map_b, map_a, p, sink); }).median;
        const double bytes = double(p.num_tiles) * passes * kb * (b_bytes + v.a_rows * 128);
        std::printf("%5d %5d %6d %5d %8.1f %8.3f %10.1f\n", ctas, v.bn, v.stages, v.a_rows, t,
                    bytes / (t * 1e-6) / 1e12, bytes / ctas / (t * 1e-6) / 1e9);
      }
    }
    BENCH_CUDA(cudaFree(a));
    BENCH_CUDA(cudaFree(b));
  }
  BENCH_CUDA(cudaFree(sink));
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  using namespace fp8moe;
  std::string which = "all";
  int reps = 20;
  bench::FlushMode flush_mode = bench::FlushMode::kWrite;
  int pitch_pad = 0, rotate = 0, ctas_arg = 0, passes = 1;
  bool gemm_only = false, l2 = false;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--shape") && i + 1 < argc) which = argv[++i];
    else if (!std::strcmp(argv[i], "--pitch-pad") && i + 1 < argc) pitch_pad = std::atoi(argv[++i]);
    else if (!std::strcmp(argv[i], "--rotate") && i + 1 < argc) rotate = std::atoi(argv[++i]);
    else if (!std::strcmp(argv[i], "--gemm-only")) gemm_only = true;
    else if (!std::strcmp(argv[i], "--l2")) l2 = true;
    else if (!std::strcmp(argv[i], "--ctas") && i + 1 < argc) ctas_arg = std::atoi(argv[++i]);
    else if (!std::strcmp(argv[i], "--passes") && i + 1 < argc) passes = std::atoi(argv[++i]);
    else if (!std::strcmp(argv[i], "--reps") && i + 1 < argc) reps = std::atoi(argv[++i]);
    else if (!std::strcmp(argv[i], "--flush") && i + 1 < argc && bench::parse_flush_mode(argv[i + 1], &flush_mode)) ++i;
    else {
      std::fprintf(stderr,
                   "usage: fp8moe-tma-stream [--shape seed1|seed2|qwen1|qwen2|all] [--reps N] [--flush write|clean]\n"
                   "                         [--pitch-pad BYTES] [--rotate 0|1|2] [--gemm-only]\n"
                   "       fp8moe-tma-stream --l2 [--ctas C] [--passes N] [--reps N]\n");
      return 2;
    }
  }
  if (pitch_pad < 0 || pitch_pad % 16 || rotate < 0 || rotate > 2 || ctas_arg < 0 || passes < 1) {
    std::fprintf(stderr,
                 "fp8moe-tma-stream: --pitch-pad takes a multiple of 16 bytes, --rotate 0, 1 or 2, --ctas a count "
                 ">= 0 (0: the default list), --passes a count >= 1\n");
    return 2;
  }
  const int sms = bench::device_sms_or_none("fp8moe-tma-stream");
  if (sms == 0) return 0;
  if (l2) return run_l2(sms, ctas_arg, passes, reps);
  const double ceiling = bench::measure_read_tbps(flush_mode);
  std::printf("commit %s, %d SMs, HBM read ceiling %.3f TB/s, %s L2 flush\n", bench::build_commit(), sms, ceiling,
              bench::flush_mode_name(flush_mode));

  const CUtensorMapL2promotion p256 = CU_TENSOR_MAP_L2_PROMOTION_L2_256B;
  const std::vector<Variant> variants = {
      {128, 1, 4, p256, false},  {128, 1, 6, p256, false},  {128, 1, 8, p256, false},
      {128, 1, 12, p256, false}, {128, 2, 3, p256, false},  {128, 2, 6, p256, false},
      {128, 4, 3, p256, false},  {128, 1, 6, CU_TENSOR_MAP_L2_PROMOTION_NONE, false},
      {128, 1, 6, CU_TENSOR_MAP_L2_PROMOTION_L2_128B, false}, {128, 1, 6, p256, true},
      {128, 1, 10, p256, true},  {128, 2, 5, p256, true},   {64, 1, 12, p256, false},
      {256, 1, 6, p256, false}};
  BENCH_CUDA(cudaFuncSetAttribute(tma_stream_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, 227 * 1024));
  bench::L2Flush flush(flush_mode);
  int* sink = nullptr;
  BENCH_CUDA(cudaMalloc(&sink, sizeof(int) * sms));
  uint8_t* a = nullptr;
  const size_t a_rows = 128 * kARows, a_cols = 7168;
  BENCH_CUDA(cudaMalloc(&a, a_rows * a_cols));
  bench::fill_random_fp8(a, a_rows * a_cols, 7);

  // Cold launches: the L2 flush before each.
  auto time_cold = [&](auto launch) { return time_launches(reps, [&] { flush.run(nullptr); }, launch); };
  // What the event timing adds to any kernel (launch and drain), for reading the short shapes.
  std::printf("events around an empty kernel of the same grid: %.1f us\n",
              time_cold([&] { empty_kernel<<<sms, 64>>>(); }).median);
  for (const Shape& s : kShapes) {
    if (which != "all" && which != s.name) continue;
    const size_t bytes = static_cast<size_t>(s.experts) * s.n * s.k;  // streamed (the pitch padding is not read)
    const size_t pitch = static_cast<size_t>(s.k) + pitch_pad;
    uint8_t* b = nullptr;
    BENCH_CUDA(cudaMalloc(&b, static_cast<size_t>(s.experts) * s.n * pitch));
    bench::fill_random_fp8(b, static_cast<size_t>(s.experts) * s.n * pitch, 11);
    std::printf("\n%s: %d experts, N %d, K %d (row pitch %zu bytes, k-block rotation %d), %.1f MB of weights\n",
                s.name, s.experts, s.n, s.k, pitch, rotate, bytes / 1e6);
    std::printf("%5s %5s %6s %5s %3s %8s %8s %8s\n", "BN", "depth", "stages", "promo", "A", "us", "TB/s", "ceiling");
    for (const Variant& v : variants) {
      if (gemm_only && !(v.bn == 128 && v.depth == 1 && v.stages == 6 && !v.with_a &&
                         v.promo == CU_TENSOR_MAP_L2_PROMOTION_L2_128B))
        continue;
      const int kb = s.k / 128;
      if (kb % v.depth) continue;
      const uint32_t b_bytes = v.bn * 128 * v.depth;
      const uint32_t stage_bytes = b_bytes + (v.with_a ? v.depth * kARows * 128 : 0);
      const uint32_t stage_bytes_aligned = (stage_bytes + 1023) / 1024 * 1024;
      const size_t smem = static_cast<size_t>(v.stages) * stage_bytes_aligned + 2 * kMaxStages * 8 + 1024;
      if (smem > 227 * 1024) continue;
      CUtensorMap map_b, map_a;
      const uint64_t dims[3] = {128, static_cast<uint64_t>(s.experts) * s.n, static_cast<uint64_t>(kb)};
      const uint64_t strides[2] = {static_cast<uint64_t>(pitch), 128};
      const uint32_t box[3] = {128, static_cast<uint32_t>(v.bn), static_cast<uint32_t>(v.depth)};
      if (!gemm::encode_tiled(&map_b, CU_TENSOR_MAP_DATA_TYPE_UINT8, 3, b, dims, strides, box,
                              CU_TENSOR_MAP_SWIZZLE_128B, v.promo) ||
          !gemm::encode_2d(&map_a, CU_TENSOR_MAP_DATA_TYPE_UINT8, 1, a, a_rows, s.k, kARows, 128,
                           CU_TENSOR_MAP_SWIZZLE_128B)) {
        std::fprintf(stderr, "tensor map encoding failed\n");
        return 1;
      }
      StreamParams p{};
      p.tiles_per_expert = s.n / v.bn;
      p.num_tiles = s.experts * p.tiles_per_expert;
      p.n = s.n;
      p.bn = v.bn;
      p.kb = kb;
      p.depth = v.depth;
      p.stages = v.stages;
      p.stage_bytes = stage_bytes_aligned;
      p.b_bytes = b_bytes;
      p.with_a = v.with_a;
      p.rotate = rotate;
      const bench::Stats st = time_cold([&] { tma_stream_kernel<<<sms, 64, smem>>>(map_b, map_a, p, sink); });
      const double tbps = bytes / (st.median * 1e-6) / 1e12;
      std::printf("%5d %5d %6d %5s %3s %8.1f %8.3f %7.1f%%\n", v.bn, v.depth, v.stages, promo_name(v.promo),
                  v.with_a ? "yes" : "no", st.median, tbps, 100.0 * tbps / ceiling);
    }
    BENCH_CUDA(cudaFree(b));
  }
  return 0;
}
