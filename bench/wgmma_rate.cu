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
// --zeros (all-zero operands).
// Reports FP8 FLOP per cycle per SM (dense peak: 8192 on H100/H200) from clock64 in each CTA.
//
//   fp8moe-wgmma-rate [--kblocks N] [--zeros] [--stagger] [--ring] [--scales]
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

// Run-time options (see main's usage).
struct Opts {
  bool zeros = false;    // all-zero operands
  bool stagger = false;  // warpgroup 1 starts one k-block late (full loops)
  bool ring = false;     // a producer warp and full/empty mbarriers per k-block, as in the GEMM
  bool scales = false;   // per k-block: two A scales from shared memory, one B scale from global
};
constexpr int kSmemBytes = 160 * 1024;  // more than half an SM's shared memory: one CTA per SM


// kZero: how a k-block's accumulators start. 0: they keep accumulating (scale-d = 1); 1: the
// first wgmma of the group overwrites them (scale-d = 0), as the block-FP8 GEMM does; 2: the
// promotion zeroes them with register moves and the wgmma accumulate.
template <int kN, int kMode, int kZero>
__global__ void __launch_bounds__(384, 1)
    wgmma_rate_kernel(int kblocks, int warpgroups, Opts o, const float* b_scales, float* sink, long long* cycles) {
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
  for (int i = threadIdx.x; i < kRingStages * 128; i += blockDim.x) a_scales[i] = 1.0f + 1e-3f * (i % 5);
  if (threadIdx.x == 0) {
    *turn = 0;
    for (int r = 0; r < kRingStages; ++r) {
      ptx::mbar_init(&full[r], 1);
      ptx::mbar_init(&empty[r], 4 * warpgroups);
    }
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
  if (threadIdx.x == 0) cycles[blockIdx.x] = stop - start;
  float s = 0.0f;
#pragma unroll
  for (int i = 0; i < kOut; ++i) s += out[i];
  if (s == 1.2345e-30f) sink[threadIdx.x] = s;  // keeps every result observable
#endif
}

template <int kN, int kMode, int kZero = 0>
void run(int warpgroups, int kblocks, const Opts& o, int sms, const float* b_scales, float* sink,
         long long* d_cycles) {
  if (o.ring && kMode == kSplit) return;  // (the ring and scales are modelled in the full loops only)
  const int threads = 384;
  auto kernel = wgmma_rate_kernel<kN, kMode, kZero>;
  BENCH_CUDA(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmemBytes));
  kernel<<<sms, threads, kSmemBytes>>>(kblocks, warpgroups, o, b_scales, sink, d_cycles);  // warm-up (clocks up)
  BENCH_CUDA(cudaGetLastError());
  cudaEvent_t e0, e1;
  BENCH_CUDA(cudaEventCreate(&e0));
  BENCH_CUDA(cudaEventCreate(&e1));
  BENCH_CUDA(cudaEventRecord(e0));
  kernel<<<sms, threads, kSmemBytes>>>(kblocks, warpgroups, o, b_scales, sink, d_cycles);
  BENCH_CUDA(cudaEventRecord(e1));
  BENCH_CUDA(cudaEventSynchronize(e1));
  float ms = 0;
  BENCH_CUDA(cudaEventElapsedTime(&ms, e0, e1));
  std::vector<long long> cycles(sms);
  BENCH_CUDA(cudaMemcpy(cycles.data(), d_cycles, sms * sizeof(long long), cudaMemcpyDeviceToHost));
  std::sort(cycles.begin(), cycles.end());
  const double flop_per_cta = 2.0 * 64 * warpgroups * kN * kBlockK * kblocks;
  const double per_clk = flop_per_cta / cycles[sms / 2];
  const double tflops = flop_per_cta * sms / (ms * 1e-3) / 1e12;
  std::printf("%-11s z%d N=%3d  WGs=%d  %7.0f FLOP/clk/SM (%5.1f%% of 8192)  %6.0f TFLOP/s  %.2f GHz\n",
              kModeNames[kMode], kZero, kN, warpgroups, per_clk, 100.0 * per_clk / 8192, tflops,
              cycles[sms / 2] / (ms * 1e-3) / 1e9);
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
    else kblocks = 0;
    if (kblocks < 1) {
      std::fprintf(stderr, "usage: fp8moe-wgmma-rate [--kblocks N] [--zeros] [--stagger] [--ring] [--scales]\n");
      return 2;
    }
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
  for (int wgs : {1, 2}) {
    run<128, kFull>(wgs, kblocks, o, sms, b_scales, sink, cycles);
    run<192, kFull>(wgs, kblocks, o, sms, b_scales, sink, cycles);
    run<256, kFull>(wgs, kblocks, o, sms, b_scales, sink, cycles);
    run<128, kFullPromote>(wgs, kblocks, o, sms, b_scales, sink, cycles);
    run<192, kFullPromote>(wgs, kblocks, o, sms, b_scales, sink, cycles);
    run<128, kFullPromote, 1>(wgs, kblocks, o, sms, b_scales, sink, cycles);
    run<192, kFullPromote, 1>(wgs, kblocks, o, sms, b_scales, sink, cycles);
    run<128, kFullPromote, 2>(wgs, kblocks, o, sms, b_scales, sink, cycles);
    run<192, kFullPromote, 2>(wgs, kblocks, o, sms, b_scales, sink, cycles);
    run<128, kSplit>(wgs, kblocks, o, sms, b_scales, sink, cycles);
    run<192, kSplit>(wgs, kblocks, o, sms, b_scales, sink, cycles);
    run<256, kSplit>(wgs, kblocks, o, sms, b_scales, sink, cycles);
  }
  BENCH_CUDA(cudaFree(sink));
  BENCH_CUDA(cudaFree(b_scales));
  BENCH_CUDA(cudaFree(cycles));
  return 0;
}
