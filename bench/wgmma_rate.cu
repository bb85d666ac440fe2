// fp8moe-wgmma-rate: how fast FP8 wgmma (both operands in shared memory) runs on this GPU for the
// loop shapes a block-FP8 GEMM can use, with nothing else in the way (no TMA, no barriers, no
// global memory). An investigation tool for the SM90 grouped GEMM (docs/perf-notes.md v14): it
// separates what the tensor cores can do from what the GEMM's pipeline lets them do.
//
// One CTA per SM, 1 or 2 math warpgroups, each running `kblocks` 128-K blocks of a 64 x N tile on
// shared memory that never changes (two stages, alternated, so descriptors move as in the GEMM).
// Loops (per warpgroup and k-block):
//   full        one group of 4 wgmma m64nNk32, wait for it (wait_group 0)
//   full+prom   the same, then promote: out += scale * acc (N/2 FMAs per thread), as DeepGEMM does
//   split       the GEMM's loop without its promotion FMAs: two column halves with their own
//               accumulators, each group waited for while the other runs (wait_group 1)
// (With promotion FMAs in the split loop, or in a loop over two full-width accumulator sets, ptxas
// serialises the wgmma here (C7514), though not in the GEMM; that case is left to the GEMM's
// no-loads build, FP8MOE_GEMM_ABLATE=3.)
// Each also with the three ways a k-block's accumulators can start (kZero, at the kernel).
// Options add what the GEMM does around the loop, to see what each costs: --ring (a producer warp
// and full/empty mbarriers per k-block, no data moved), --scales (two A scales from shared memory
// and a B scale from global memory, one k-block ahead, folded into the promotion), --stagger,
// --zeros (all-zero operands), and --copy l2|hbm: while the math runs, lane 0 of warp 9 (with
// --copy-threads T: of warps 9..8+T; with --copy-lanes: lanes 0..T-1 of warp 9) streams bulk copies
// (cp.async.bulk, --copy-bytes each, default 8 KB; --copy-stages in flight, default 12, shared
// among the threads) from an L2-resident buffer or from HBM into shared memory the math never
// reads, as TMA fills the GEMM's ring. Does the tensor pipe slow down while shared memory takes
// those writes, and does the copy slow down while the tensor pipe runs? A `copy alone` line gives
// the copy's rate with no math, and every line the first copying thread's clocks per copy in its
// wait for the stage, its arrive.expect_tx and its copy's issue (clock64 around each, so the loop
// is a little slower than without them).
// Reports FP8 FLOP per cycle per SM (dense peak: 8192 on H100/H200) from clock64 in each CTA.
//
//   fp8moe-wgmma-rate [--kblocks N] [--zeros] [--stagger] [--ring] [--scales] [--copy l2|hbm]
//                     [--copy-stages N] [--copy-threads T] [--copy-lanes] [--copy-bytes B]
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "bench/bench_common.cuh"  // BENCH_CUDA
#include "ptx/ptx.cuh"

namespace {

enum Mode { kFull = 0, kFullPromote = 1, kSplit = 2 };
const char* const kModeNames[] = {"full", "full+prom", "split"};

constexpr int kBlockK = 128;
[[maybe_unused]] constexpr int kRingStages = 4;  // (used in device code only)
// --copy: a ring of up to kCopyMaxStages copies, kCopyMaxBytes in all, at kCopyOffset of the
// (aligned) shared memory, past the largest operand tiles (2 x (16 + 32) KB) and the barriers.
constexpr int kCopyMaxStages = 15;
constexpr int kCopyMaxBytes = 120 * 1024;  // the ring's size
constexpr int kCopyOffset = 100 * 1024;

// Run-time options (see main's usage).
struct Opts {
  bool zeros = false;    // all-zero operands
  bool stagger = false;  // warpgroup 1 starts one k-block late (full loops)
  bool ring = false;     // a producer warp and full/empty mbarriers per k-block, as in the GEMM
  bool scales = false;   // per k-block: two A scales from shared memory, one B scale from global
  int copy = 0;          // bulk copies into unread shared memory: 0 none, 1 from L2, 2 from HBM
  const uint8_t* copy_src = nullptr;
  size_t copy_window = 0;  // bytes each CTA cycles through, from window blockIdx.x % copy_windows
  int copy_windows = 1;
  int copy_stages = 12;         // copies in flight, shared by
  int copy_threads = 1;         // the threads that issue them (1..3)
  bool copy_lanes = false;      // those threads are lanes of one warp instead of lane 0 of each warp
  int copy_bytes = 8192;        // bytes per copy
};
// More than half an SM's shared memory: one CTA per SM (the operands, the copy ring, alignment).
constexpr int kSmemBytes = kCopyOffset + kCopyMaxBytes + 1024;


// kZero: how a k-block's accumulators start. 0: they keep accumulating (scale-d = 1); 1: the
// first wgmma of the group overwrites them (scale-d = 0), as the block-FP8 GEMM does; 2: the
// promotion zeroes them with register moves and the wgmma accumulate.
template <int kN, int kMode, int kZero>
__global__ void __launch_bounds__(384, 1)
    wgmma_rate_kernel(int kblocks, int warpgroups, Opts o, const float* b_scales, float* sink, long long* cycles,
                      unsigned long long* copied, long long* copy_spent) {
#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
  using namespace fp8moe;
  constexpr bool kSplitLoop = kMode == kSplit;
  using Mma = ptx::WgmmaE4M3<kSplitLoop ? kN / 2 : kN>;
  constexpr int kA = 128 * kBlockK, kB = kN * kBlockK;
  extern __shared__ uint8_t smem_raw[];
  uint8_t* smem = smem_raw + ptx::smem_align_1024_offset(smem_raw);
  // Small random-looking E4M3 codes (no NaN: 0x7F/0xFF never appear), identical in every run;
  // or all zeros (--zeros: the same instructions on data that toggles nothing).
  for (int i = threadIdx.x; i < 2 * (kA + kB); i += blockDim.x) {
    const uint32_t h = (i * 2654435761u) >> 24;
    smem[i] = o.zeros ? 0 : static_cast<uint8_t>((h & 0x3F) | (h & 0x80));
  }
  volatile int* turn = reinterpret_cast<volatile int*>(smem + 2 * (kA + kB));
  uint64_t* full = reinterpret_cast<uint64_t*>(smem + 2 * (kA + kB) + 16);
  uint64_t* empty = full + kRingStages;
  float* a_scales = reinterpret_cast<float*>(empty + kRingStages);  // [kRingStages][128]
  uint64_t* copy_full = reinterpret_cast<uint64_t*>(a_scales + kRingStages * 128);
  volatile int* math_done = turn + 1;
  static_assert(2 * (128 + 256) * kBlockK + 16 + 8 * 2 * kRingStages + 4 * 128 * kRingStages + 8 * kCopyMaxStages <=
                kCopyOffset);
  for (int i = threadIdx.x; i < kRingStages * 128; i += blockDim.x) a_scales[i] = 1.0f + 1e-3f * (i % 5);
  if (threadIdx.x == 0) {
    *turn = 0;
    for (int r = 0; r < kRingStages; ++r) {
      ptx::mbar_init(&full[r], 1);
      ptx::mbar_init(&empty[r], 4 * warpgroups);
    }
    *math_done = 0;
    for (int r = 0; r < kCopyMaxStages; ++r) ptx::mbar_init(&copy_full[r], 1);
    ptx::fence_barrier_init();
  }
  __syncthreads();
  // 384 threads as in the GEMM: warpgroups 0 and 1 do the math (232 registers), warpgroup 2 is
  // the producer (40 registers), of which one thread runs the ring with --ring.
  if (threadIdx.x >= 256) {
    ptx::setmaxnreg_dec<40>();
    if (o.ring && threadIdx.x == 256) {
      int r = 0;
      uint32_t ph = 0;
      for (int kb = 0; kb < kblocks; ++kb) {
        ptx::mbar_wait(&empty[r], ph ^ 1u);
        ptx::mbar_arrive(&full[r]);
        if (++r == kRingStages) r = 0, ph ^= 1u;
      }
    }
    // The copying threads: lane 0 of warps 9, 10, 11 or (--copy-lanes) lanes 0, 1, 2 of warp 9.
    const int copier =
        o.copy_lanes ? static_cast<int>(threadIdx.x) - 288 : (static_cast<int>(threadIdx.x) - 288) / 32;
    if (o.copy && (o.copy_lanes || threadIdx.x % 32 == 0) && copier >= 0 && copier < o.copy_threads) {
      // Streams until the math is done (or, with no math warpgroups, for 2 x kblocks copies in all
      // and times itself); every copy in flight is waited for before the CTA exits. Each copying
      // thread has its own share of the stages and of the window.
      const int stages = o.copy_stages / o.copy_threads;
      uint64_t* copy_full_own = copy_full + copier * stages;
      uint8_t* ring = smem + kCopyOffset + copier * stages * o.copy_bytes;
      const uint8_t* src = o.copy_src + (blockIdx.x % o.copy_windows) * o.copy_window;
      size_t offset = copier * o.copy_bytes;
      const unsigned long long copies_alone = 2ull * kblocks / o.copy_threads;  // (no math warpgroups)
      unsigned long long n = 0;
      int r = 0;           // the stage copy n goes to
      uint32_t phase = 0;  // the parity of that stage's previous copy, once every stage has one
      const long long start = clock64();
      long long spent[3] = {0, 0, 0};  // clocks in the wait, the arrive and the copy's issue
      for (;; ++n) {
        const long long t0 = clock64();
        if (n >= static_cast<unsigned long long>(stages)) ptx::mbar_wait(&copy_full_own[r], phase);
        if (warpgroups > 0 ? *math_done != 0 : n == copies_alone) break;
        const long long t1 = clock64();
        ptx::mbar_arrive_expect_tx(&copy_full_own[r], o.copy_bytes);
        const long long t2 = clock64();
        ptx::bulk_load(ring + r * o.copy_bytes, src + offset, o.copy_bytes, &copy_full_own[r]);
        const long long t3 = clock64();
        spent[0] += t1 - t0, spent[1] += t2 - t1, spent[2] += t3 - t2;
        offset += o.copy_threads * o.copy_bytes;
        if (offset >= o.copy_window) offset -= o.copy_window;
        if (++r == stages) r = 0, phase ^= n >= static_cast<unsigned long long>(stages) ? 1u : 0u;
      }
      // The copies still in flight: the stages after r (in ring order), up to n of them.
      for (int i = 1; i < stages && static_cast<unsigned long long>(i) <= n; ++i)  // copy n - i
        ptx::mbar_wait(&copy_full_own[(r + stages - i) % stages], static_cast<uint32_t>((n - i) / stages) & 1u);
      if (warpgroups == 0 && copier == 0) cycles[blockIdx.x] = clock64() - start;
      if (copier == 0 && n > 0)
        for (int i = 0; i < 3; ++i) copy_spent[blockIdx.x * 3 + i] = spent[i] / static_cast<long long>(n);
      atomicAdd(&copied[blockIdx.x], n * o.copy_bytes);
    }
    return;
  }
  ptx::setmaxnreg_inc<232>();
  if (threadIdx.x >= 128 * warpgroups) return;
  const int warpgroup = threadIdx.x / 128;
  uint8_t* a0 = smem + warpgroup * 64 * kBlockK;  // this warpgroup's 64 rows of A
  uint8_t* b0 = smem + 2 * kA;
  float scale = 1.0f + 1e-3f * (threadIdx.x % 7);
  constexpr bool kPromote = kMode == kFullPromote;
  constexpr int kOut = kPromote ? kN / 2 : 1;
  float out[kOut];
#pragma unroll
  for (int i = 0; i < kOut; ++i) out[i] = 0.0f;

  // Every wgmma accumulates (scale-d = 1 after the very first), so every result stays observable
  // and ptxas cannot drop any (it removes wgmma whose accumulators are overwritten unread).
  auto issue = [&](float(&acc)[Mma::kAccum], int stage, int half, bool first) {
#pragma unroll
    for (int i = 0; i < Mma::kAccum; ++i) ptx::fence_operand(acc[i]);
    ptx::wgmma_fence();
    const uint64_t da = ptx::smem_desc_k_major_sw128(a0 + stage * kA);
    const uint64_t db = ptx::smem_desc_k_major_sw128(b0 + stage * kB + half * (kN / 2) * kBlockK);
#pragma unroll
    for (int k = 0; k < kBlockK / 32; ++k) Mma::mma(acc, da + 2 * k, db + 2 * k, (kZero != 1 && !first) || k > 0);
    ptx::wgmma_commit();
#pragma unroll
    for (int i = 0; i < Mma::kAccum; ++i) ptx::fence_operand(acc[i]);
  };
  auto promote = [&](float(&acc)[Mma::kAccum], int offset) {
    if constexpr (kPromote) {
#pragma unroll
      for (int i = 0; i < Mma::kAccum; ++i) {
        out[offset + i] = __fmaf_rn(scale, acc[i], out[offset + i]);
        if (kZero == 2) acc[i] = 0.0f;
      }
    } else {  // no promotion in the loop: fold the last k-block into one value
#pragma unroll
      for (int i = 0; i < Mma::kAccum; ++i) out[0] += acc[i];
    }
  };

  ptx::named_barrier(1, 128 * warpgroups);
  const long long start = clock64();
  // --stagger (full loops): warpgroup 1 starts once warpgroup 0's first k-block is done, so the two
  // begin in opposite phases (one promotes while the other's wgmma run) instead of in step.
  if (o.stagger && warpgroup == 1 && !kSplitLoop)
    for (long long spins = 0; *turn == 0 && spins < (1ll << 24); ++spins) {
    }
  if constexpr (!kSplitLoop) {
    float acc[Mma::kAccum];
    int r = 0;
    uint32_t ph = 0;
    const int row = warpgroup * 64 + (threadIdx.x % 128) / 4;
    float sb = o.scales ? __ldg(b_scales) : 1.0f;
    for (int kb = 0; kb < kblocks; ++kb) {
      float sb_next = 1.0f, sa = 1.0f;
      if (o.scales) sb_next = __ldg(b_scales + (kb + 1) % 4096);
      if (o.ring) ptx::mbar_wait(&full[r], ph);
      if (o.scales) sa = a_scales[r * 128 + row] * a_scales[r * 128 + row + 8];
      issue(acc, kb & 1, 0, kb == 0);
      ptx::wgmma_wait<0>();
      if (kb == 0 && warpgroup == 0 && threadIdx.x == 0) *turn = 1;
#pragma unroll
      for (int i = 0; i < Mma::kAccum; ++i) ptx::fence_operand(acc[i]);
      if (o.ring) {
        __syncwarp();
        if (threadIdx.x % 32 == 0) ptx::mbar_arrive(&empty[r]);
        if (++r == kRingStages) r = 0, ph ^= 1u;
      }
      scale = sa * sb;
      sb = sb_next;
      if (kPromote || kb + 1 == kblocks) promote(acc, 0);
    }
  } else {
    float acc_a[Mma::kAccum], acc_b[Mma::kAccum];
    issue(acc_a, 0, 0, true);
    issue(acc_b, 0, 1, true);
    for (int kb = 0; kb + 1 < kblocks; ++kb) {
      ptx::wgmma_wait<1>();
#pragma unroll
      for (int i = 0; i < Mma::kAccum; ++i) ptx::fence_operand(acc_a[i]);
      if (kPromote) promote(acc_a, 0);
      issue(acc_a, (kb + 1) & 1, 0, false);
      ptx::wgmma_wait<1>();
#pragma unroll
      for (int i = 0; i < Mma::kAccum; ++i) ptx::fence_operand(acc_b[i]);
      if (kPromote) promote(acc_b, Mma::kAccum);
      issue(acc_b, (kb + 1) & 1, 1, false);
    }
    ptx::wgmma_wait<1>();
#pragma unroll
    for (int i = 0; i < Mma::kAccum; ++i) ptx::fence_operand(acc_a[i]);
    promote(acc_a, 0);
    ptx::wgmma_wait<0>();
#pragma unroll
    for (int i = 0; i < Mma::kAccum; ++i) ptx::fence_operand(acc_b[i]);
    promote(acc_b, Mma::kAccum);
  }
  ptx::named_barrier(1, 128 * warpgroups);
  const long long stop = clock64();
  if (threadIdx.x == 0) {
    cycles[blockIdx.x] = stop - start;
    *math_done = 1;
  }
  float s = 0.0f;
#pragma unroll
  for (int i = 0; i < kOut; ++i) s += out[i];
  if (s == 1.2345e-30f) sink[threadIdx.x] = s;  // keeps every result observable
#endif
}

template <int kN, int kMode, int kZero = 0>
void run(int warpgroups, int kblocks, const Opts& o, int sms, const float* b_scales, float* sink,
         long long* d_cycles, unsigned long long* d_copied, long long* d_spent) {
  if (o.ring && kMode == kSplit) return;  // (the ring and scales are modelled in the full loops only)
  const int threads = 384;
  auto kernel = wgmma_rate_kernel<kN, kMode, kZero>;
  BENCH_CUDA(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmemBytes));
  kernel<<<sms, threads, kSmemBytes>>>(kblocks, warpgroups, o, b_scales, sink, d_cycles, d_copied, d_spent);  // warm-up (clocks up)
  BENCH_CUDA(cudaGetLastError());
  cudaEvent_t e0, e1;
  BENCH_CUDA(cudaEventCreate(&e0));
  BENCH_CUDA(cudaEventCreate(&e1));
  BENCH_CUDA(cudaMemset(d_copied, 0, sms * sizeof(unsigned long long)));
  BENCH_CUDA(cudaEventRecord(e0));
  kernel<<<sms, threads, kSmemBytes>>>(kblocks, warpgroups, o, b_scales, sink, d_cycles, d_copied, d_spent);
  BENCH_CUDA(cudaEventRecord(e1));
  BENCH_CUDA(cudaEventSynchronize(e1));
  float ms = 0;
  BENCH_CUDA(cudaEventElapsedTime(&ms, e0, e1));
  std::vector<long long> cycles(sms);
  BENCH_CUDA(cudaMemcpy(cycles.data(), d_cycles, sms * sizeof(long long), cudaMemcpyDeviceToHost));
  std::vector<unsigned long long> copied(sms);
  BENCH_CUDA(cudaMemcpy(copied.data(), d_copied, sms * sizeof(unsigned long long), cudaMemcpyDeviceToHost));
  double copy_per_clk = 0;  // bytes per SM clock, summed over CTAs / summed cycles
  for (int i = 0; i < sms; ++i) copy_per_clk += static_cast<double>(copied[i]) / cycles[i] / sms;
  std::sort(cycles.begin(), cycles.end());
  const double ghz = cycles[sms / 2] / (ms * 1e-3) / 1e9;
  std::vector<long long> spent(3 * sms);  // CTA 0's first copying thread: clocks per copy in each step
  BENCH_CUDA(cudaMemcpy(spent.data(), d_spent, spent.size() * sizeof(long long), cudaMemcpyDeviceToHost));
  if (warpgroups == 0) {
    std::printf("copy alone  %s  %5.1f B/clk/SM  %6.1f GB/s per SM  %.2f GHz  per copy: wait %lld arrive %lld issue %lld clk\n",
                o.copy == 1 ? "L2 " : "HBM", copy_per_clk, copy_per_clk * ghz, ghz, spent[0], spent[1], spent[2]);
    BENCH_CUDA(cudaEventDestroy(e0));
    BENCH_CUDA(cudaEventDestroy(e1));
    return;
  }
  const double flop_per_cta = 2.0 * 64 * warpgroups * kN * kBlockK * kblocks;
  const double per_clk = flop_per_cta / cycles[sms / 2];
  const double tflops = flop_per_cta * sms / (ms * 1e-3) / 1e12;
  std::printf("%-11s z%d N=%3d  WGs=%d  %7.0f FLOP/clk/SM (%5.1f%% of 8192)  %6.0f TFLOP/s  %.2f GHz", kModeNames[kMode],
              kZero, kN, warpgroups, per_clk, 100.0 * per_clk / 8192, tflops, ghz);
  if (o.copy)
    std::printf("  copy %s %5.1f B/clk/SM (wait %lld arrive %lld issue %lld)", o.copy == 1 ? "L2 " : "HBM", copy_per_clk,
                spent[0], spent[1], spent[2]);
  std::printf("\n");
  BENCH_CUDA(cudaEventDestroy(e0));
  BENCH_CUDA(cudaEventDestroy(e1));
}

}  // namespace

int main(int argc, char** argv) {
  int kblocks = 4000;
  Opts o;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--kblocks") && i + 1 < argc) kblocks = std::atoi(argv[++i]);
    else if (!std::strcmp(argv[i], "--zeros")) o.zeros = true;
    else if (!std::strcmp(argv[i], "--stagger")) o.stagger = true;
    else if (!std::strcmp(argv[i], "--ring")) o.ring = true;
    else if (!std::strcmp(argv[i], "--scales")) o.scales = true;
    else if (!std::strcmp(argv[i], "--copy") && i + 1 < argc && !std::strcmp(argv[i + 1], "l2")) o.copy = 1, ++i;
    else if (!std::strcmp(argv[i], "--copy") && i + 1 < argc && !std::strcmp(argv[i + 1], "hbm")) o.copy = 2, ++i;
    else if (!std::strcmp(argv[i], "--copy-stages") && i + 1 < argc) {
      o.copy_stages = std::atoi(argv[++i]);
      if (o.copy_stages < 1 || o.copy_stages > kCopyMaxStages) kblocks = 0;
    } else if (!std::strcmp(argv[i], "--copy-threads") && i + 1 < argc) {
      o.copy_threads = std::atoi(argv[++i]);
      if (o.copy_threads < 1 || o.copy_threads > 3) kblocks = 0;
    } else if (!std::strcmp(argv[i], "--copy-lanes")) {
      o.copy_lanes = true;
    } else if (!std::strcmp(argv[i], "--copy-bytes") && i + 1 < argc) {
      o.copy_bytes = std::atoi(argv[++i]);
      if (o.copy_bytes < 1024 || o.copy_bytes % 1024) kblocks = 0;
    } else kblocks = 0;
    if (kblocks < 1) {
      std::fprintf(stderr,
                   "usage: fp8moe-wgmma-rate [--kblocks N] [--zeros] [--stagger] [--ring] [--scales] [--copy l2|hbm]\n"
                   "                         [--copy-stages N] [--copy-threads T] [--copy-lanes] [--copy-bytes B]\n");
      return 2;
    }
  }
  if (o.copy_stages * o.copy_bytes > kCopyMaxBytes || o.copy_stages < o.copy_threads) {
    std::fprintf(stderr, "fp8moe-wgmma-rate: --copy-stages x --copy-bytes must fit %d bytes, with a stage per copying thread\n",
                 kCopyMaxBytes);
    return 2;
  }
  int dev = 0, major = 0, sms = 0;
  if (cudaGetDevice(&dev) != cudaSuccess || cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev) ||
      major != 9) {
    std::fprintf(stderr, "fp8moe-wgmma-rate needs an SM90 GPU (H100/H200); none found.\n");
    return 0;
  }
  BENCH_CUDA(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
  float* sink = nullptr;
  long long* cycles = nullptr;
  BENCH_CUDA(cudaMalloc(&sink, 288 * sizeof(float)));
  // B scales for --scales: 4096 values near 1 (read one per k-block, wrapping).
  float* b_scales = nullptr;
  {
    std::vector<float> host(4096);
    for (int i = 0; i < 4096; ++i) host[i] = 1.0f + 1e-4f * (i % 13);
    BENCH_CUDA(cudaMalloc(&b_scales, host.size() * sizeof(float)));
    BENCH_CUDA(cudaMemcpy(b_scales, host.data(), host.size() * sizeof(float), cudaMemcpyHostToDevice));
  }
  BENCH_CUDA(cudaMalloc(&cycles, sms * sizeof(long long)));
  long long* spent = nullptr;
  BENCH_CUDA(cudaMalloc(&spent, 3 * sms * sizeof(long long)));
  BENCH_CUDA(cudaMemset(spent, 0, 3 * sms * sizeof(long long)));
  unsigned long long* copied = nullptr;
  BENCH_CUDA(cudaMalloc(&copied, sms * sizeof(unsigned long long)));
  BENCH_CUDA(cudaMemset(copied, 0, sms * sizeof(unsigned long long)));
  // --copy: 16 windows of 1 MB (L2-resident, shared by the CTAs) or one window of ~4 GB / sms per
  // CTA (every copy from HBM).
  uint8_t* copy_buf = nullptr;
  if (o.copy) {
    o.copy_windows = o.copy == 1 ? 16 : sms;
    const size_t unit = static_cast<size_t>(o.copy_threads) * o.copy_bytes;  // each thread's copies interleave
    o.copy_window = (o.copy == 1 ? (size_t{1} << 20) : (size_t{4} << 30) / sms) / unit * unit;
    BENCH_CUDA(cudaMalloc(&copy_buf, o.copy_windows * o.copy_window));
    BENCH_CUDA(cudaMemset(copy_buf, 0x3C, o.copy_windows * o.copy_window));
    o.copy_src = copy_buf;
    Opts alone = o;  // the copy alone (no ring: its barriers expect math warps)
    alone.ring = false;
    run<128, kFull>(0, kblocks, alone, sms, b_scales, sink, cycles, copied, spent);
  }
  for (int wgs : {1, 2}) {
    run<128, kFull>(wgs, kblocks, o, sms, b_scales, sink, cycles, copied, spent);
    run<192, kFull>(wgs, kblocks, o, sms, b_scales, sink, cycles, copied, spent);
    run<256, kFull>(wgs, kblocks, o, sms, b_scales, sink, cycles, copied, spent);
    run<128, kFullPromote>(wgs, kblocks, o, sms, b_scales, sink, cycles, copied, spent);
    run<192, kFullPromote>(wgs, kblocks, o, sms, b_scales, sink, cycles, copied, spent);
    run<128, kFullPromote, 1>(wgs, kblocks, o, sms, b_scales, sink, cycles, copied, spent);
    run<192, kFullPromote, 1>(wgs, kblocks, o, sms, b_scales, sink, cycles, copied, spent);
    run<128, kFullPromote, 2>(wgs, kblocks, o, sms, b_scales, sink, cycles, copied, spent);
    run<192, kFullPromote, 2>(wgs, kblocks, o, sms, b_scales, sink, cycles, copied, spent);
    run<128, kSplit>(wgs, kblocks, o, sms, b_scales, sink, cycles, copied, spent);
    run<192, kSplit>(wgs, kblocks, o, sms, b_scales, sink, cycles, copied, spent);
    run<256, kSplit>(wgs, kblocks, o, sms, b_scales, sink, cycles, copied, spent);
  }
  BENCH_CUDA(cudaFree(sink));
  BENCH_CUDA(cudaFree(b_scales));
  BENCH_CUDA(cudaFree(cycles));
  BENCH_CUDA(cudaFree(copied));
  BENCH_CUDA(cudaFree(spent));
  if (copy_buf) BENCH_CUDA(cudaFree(copy_buf));
  return 0;
}
