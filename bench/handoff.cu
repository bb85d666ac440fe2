// fp8moe-handoff: what one kernel of the pipeline costs the next at the hand-over, alone (an
// investigation tool, docs/perf-notes.md v28). Leaving act_quant out of the decode pipeline saves
// ~5 us where its own work is ~1 us, so most of a stage's cost at decode is the hand-over itself.
//
// Kernel A (the primary: `ctas` CTAs, each spinning for --work-us, then exiting) and kernel B (its
// programmatic dependent, launched as the pipeline's kernels are: it may start once every CTA of A
// has triggered). B waits for A in one of two ways:
//   pdl:  griddepcontrol.wait (what fp8moe's kernels do: A has completed and its writes are visible);
//   flag: thread 0 of every A CTA adds 1 to a counter after __threadfence() as its last act, and
//         thread 0 of every B CTA polls the counter (an acquire load at device scope) until all of A has added.
// Reported per mode and shared-memory footprint (A and B each either small or holding a whole SM,
// as the GEMMs do, so that B's CTA can only start on an SM once A's has left it), medians over the
// repetitions of:
//   last A end -> first B release, last A end -> last B release (all of B may go on), and
//   last A end -> first B start.
//
//   fp8moe-handoff [--reps N] [--work-us U] [--ctas C]
#include <cuda/atomic>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "bench/bench_common.cuh"
#include "kernels/launch.cuh"
#include "ptx/ptx.cuh"

namespace {

constexpr int kMaxCtas = 1024;
constexpr int kThreads = 128;
constexpr int kBigSmem = 200 * 1024;  // one CTA per SM, as a GEMM CTA

struct Stamps {
  unsigned long long a_end[kMaxCtas], b_start[kMaxCtas], b_release[kMaxCtas];
};

struct Params {
  Stamps* stamps;
  unsigned int* counter;
  unsigned int expected;  // A's CTAs
  unsigned long long work_ns;
  int flag;
};

// (The dynamic shared memory is only reserved, to keep one CTA per SM.)
__global__ void __launch_bounds__(kThreads) kernel_a(Params p) {
  fp8moe::ptx::griddep_launch_dependents();
  const unsigned long long t0 = fp8moe::ptx::globaltimer();
  while (fp8moe::ptx::globaltimer() - t0 < p.work_ns) {
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    if (p.flag) {
      __threadfence();
      atomicAdd(p.counter, 1u);
    }
    p.stamps->a_end[blockIdx.x] = fp8moe::ptx::globaltimer();
  }
}

__global__ void __launch_bounds__(kThreads) kernel_b(Params p) {
  if (threadIdx.x == 0) p.stamps->b_start[blockIdx.x] = fp8moe::ptx::globaltimer();
  if (p.flag) {
    if (threadIdx.x == 0) {
      cuda::atomic_ref<unsigned int, cuda::thread_scope_device> counter(*p.counter);
      while (counter.load(cuda::memory_order_acquire) < p.expected) {
      }
    }
    __syncthreads();
  } else {
    fp8moe::ptx::griddep_wait();
  }
  if (threadIdx.x == 0) p.stamps->b_release[blockIdx.x] = fp8moe::ptx::globaltimer();
}

}  // namespace

int main(int argc, char** argv) {
  int reps = 50, ctas = 0;
  double work_us = 20.0;
  for (int i = 1; i < argc; ++i) {
    const bool has = i + 1 < argc;
    if (!std::strcmp(argv[i], "--reps") && has) reps = std::atoi(argv[++i]);
    else if (!std::strcmp(argv[i], "--work-us") && has) work_us = std::atof(argv[++i]);
    else if (!std::strcmp(argv[i], "--ctas") && has) ctas = std::atoi(argv[++i]);
    else {
      std::fprintf(stderr, "usage: fp8moe-handoff [--reps N] [--work-us U] [--ctas C]\n");
      return 2;
    }
  }
  const int sms = fp8moe::bench::device_sms_or_none("fp8moe-handoff");
  if (sms == 0) return 0;
  if (ctas <= 0) ctas = sms;
  if (reps < 1 || ctas > kMaxCtas || work_us < 0) {
    std::fprintf(stderr, "fp8moe-handoff: bad arguments\n");
    return 2;
  }
  BENCH_CUDA(cudaFuncSetAttribute(kernel_a, cudaFuncAttributeMaxDynamicSharedMemorySize, kBigSmem));
  BENCH_CUDA(cudaFuncSetAttribute(kernel_b, cudaFuncAttributeMaxDynamicSharedMemorySize, kBigSmem));
  Stamps* stamps = nullptr;
  unsigned int* counter = nullptr;
  BENCH_CUDA(cudaMalloc(&stamps, sizeof(Stamps)));
  BENCH_CUDA(cudaMalloc(&counter, sizeof(unsigned int)));
  cudaStream_t stream;
  BENCH_CUDA(cudaStreamCreate(&stream));
  std::vector<Stamps> host(1);

  std::printf("fp8moe-handoff: %d CTAs x %d threads each, A spins %.1f us, %d reps; medians in us after A's last CTA ends\n",
              ctas, kThreads, work_us, reps);
  std::printf("%-5s %-9s %-9s %14s %14s %14s\n", "mode", "A smem", "B smem", "first B start", "first B go",
              "last B go");
  for (int flag = 0; flag < 2; ++flag) {
    for (int a_big = 0; a_big < 2; ++a_big) {
      for (int b_big = 0; b_big < 2; ++b_big) {
        std::vector<double> first_start, first_go, last_go;
        for (int r = 0; r < reps + 3; ++r) {
          BENCH_CUDA(cudaMemsetAsync(counter, 0, sizeof(unsigned int), stream));
          BENCH_CUDA(cudaMemsetAsync(stamps, 0, sizeof(Stamps), stream));
          Params p{stamps, counter, static_cast<unsigned int>(ctas),
                   static_cast<unsigned long long>(work_us * 1000.0), flag};
          cudaLaunchConfig_t c{};
          c.gridDim = dim3(ctas);
          c.blockDim = dim3(kThreads);
          c.stream = stream;
          c.dynamicSmemBytes = a_big ? kBigSmem : 0;
          BENCH_CUDA(cudaLaunchKernelEx(&c, kernel_a, p));
          cudaLaunchAttribute attr[2];  // as the pipeline launches (launch_dependent)
          c.attrs = attr;
          c.numAttrs = fp8moe::kernels::dependent_launch_attributes(attr, true);
          c.dynamicSmemBytes = b_big ? kBigSmem : 0;
          BENCH_CUDA(cudaLaunchKernelEx(&c, kernel_b, p));
          BENCH_CUDA(cudaMemcpyAsync(host.data(), stamps, sizeof(Stamps), cudaMemcpyDeviceToHost, stream));
          BENCH_CUDA(cudaStreamSynchronize(stream));
          if (r < 3) continue;  // warm-up
          const Stamps& s = host[0];
          const unsigned long long a_last = *std::max_element(s.a_end, s.a_end + ctas);
          const unsigned long long b_first_start = *std::min_element(s.b_start, s.b_start + ctas);
          const unsigned long long b_first = *std::min_element(s.b_release, s.b_release + ctas);
          const unsigned long long b_last = *std::max_element(s.b_release, s.b_release + ctas);
          auto us = [&](unsigned long long t) { return (static_cast<double>(t) - static_cast<double>(a_last)) * 1e-3; };
          first_start.push_back(us(b_first_start));
          first_go.push_back(us(b_first));
          last_go.push_back(us(b_last));
        }
        std::printf("%-5s %-9s %-9s %14.2f %14.2f %14.2f\n", flag ? "flag" : "pdl", a_big ? "200 KB" : "0",
                    b_big ? "200 KB" : "0", fp8moe::bench::stats_of(first_start).median, fp8moe::bench::stats_of(first_go).median,
                    fp8moe::bench::stats_of(last_go).median);
      }
    }
  }
  BENCH_CUDA(cudaFree(stamps));
  BENCH_CUDA(cudaFree(counter));
  return 0;
}
