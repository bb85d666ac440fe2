#include <cublasLt.h>
#include <cuda_bf16.h>

#include "bench/bench_common.cuh"

#include <cstdlib>
#include <cstring>

#include "fp8moe_build_info.hpp"  // generated: FP8MOE_BUILD_COMMIT
#include "numerics/numerics.cuh"
#include "ptx/ptx.cuh"

namespace fp8moe::bench {

const char* build_commit() {
  const char* env = std::getenv("FP8MOE_COMMIT");
  return env != nullptr && *env != '\0' ? env : FP8MOE_BUILD_COMMIT;
}

int device_sms_or_none(const char* tool) {
  int count = 0, sms = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0) {
    cudaGetLastError();
    std::printf("%s: no CUDA device here; nothing to measure.\n", tool);
    return 0;
  }
  BENCH_CUDA(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  return sms;
}

namespace {

// Streaming read: 16-byte non-allocating loads, 8 independent loads in flight per thread,
// grid-stride over the buffer. The XOR keeps the loads alive; the store happens only for an
// impossible value.
__global__ void __launch_bounds__(512) read_kernel(const uint4* __restrict__ src, size_t n, uint4* sink) {
  constexpr int kUnroll = 8;
  uint32_t x = 0;
  const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
  size_t i = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  for (; i + (kUnroll - 1) * stride < n; i += kUnroll * stride) {
    uint4 v[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const uint4* p = src + i + u * stride;
      asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0,%1,%2,%3}, [%4];"
                   : "=r"(v[u].x), "=r"(v[u].y), "=r"(v[u].z), "=r"(v[u].w)
                   : "l"(p));
    }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) x ^= v[u].x ^ v[u].y ^ v[u].z ^ v[u].w;
  }
  for (; i < n; i += stride) {
    const uint4 v = src[i];
    x ^= v.x ^ v.y ^ v.z ^ v.w;
  }
  if (x == 0x9E3779B9u) sink[0] = make_uint4(x, x, x, x);
}

// Streaming read through the copy engine: one thread per CTA keeps kSlots bulk copies of kChunk
// bytes in flight into shared memory (chunks interleaved across CTAs, so the whole GPU walks
// the buffer front to back), waiting on one mbarrier per slot before reusing it.
constexpr int kBulkSlots = 12;
constexpr int kBulkChunk = 16384;

__global__ void __launch_bounds__(32) bulk_read_kernel(const uint8_t* __restrict__ src, size_t chunks, int slots,
                                                       uint32_t* sink) {
  extern __shared__ __align__(128) uint8_t buf[];
  __shared__ uint64_t bars[kBulkSlots];
  if (threadIdx.x != 0) return;
  for (int i = 0; i < kBulkSlots; ++i) ptx::mbar_init(&bars[i], 1);
  ptx::fence_barrier_init();
  uint32_t phase_bits = 0;
  size_t issued = 0;
  auto wait = [&](int slot) {
    ptx::mbar_wait(&bars[slot], (phase_bits >> slot) & 1u);
    phase_bits ^= 1u << slot;
  };
  for (size_t c = blockIdx.x; c < chunks; c += gridDim.x, ++issued) {
    const int slot = static_cast<int>(issued % slots);
    if (issued >= static_cast<size_t>(slots)) wait(slot);
    ptx::mbar_arrive_expect_tx(&bars[slot], kBulkChunk);
    ptx::bulk_load(buf + slot * kBulkChunk, src + c * kBulkChunk, kBulkChunk, &bars[slot]);
  }
  for (size_t i = issued > static_cast<size_t>(slots) ? issued - slots : 0; i < issued; ++i)
    wait(static_cast<int>(i % slots));
  if (buf[0] == 0x5A && buf[1] == 0xA5 && buf[2] == 0x3C) sink[0] = 1;
}

__device__ uint32_t hash32(uint64_t i, uint32_t seed) {
  uint32_t h = static_cast<uint32_t>(i) * 0x9E3779B1u ^ static_cast<uint32_t>(i >> 32) * 0x85EBCA77u ^ seed;
  h ^= h >> 15;
  h *= 0x2C1B3C6Du;
  h ^= h >> 12;
  h *= 0x297A2D39u;
  h ^= h >> 15;
  return h;
}

__global__ void fill_random_fp8_kernel(uint8_t* p, size_t n, uint32_t seed) {
  for (size_t i = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<size_t>(gridDim.x) * blockDim.x) {
    uint8_t c = static_cast<uint8_t>(hash32(i, seed)) & 0xBF;  // exponent < 8: moderate magnitudes
    if ((c & 0x7F) == 0x7F) c ^= 0x01;                          // no NaN codes
    p[i] = c;
  }
}

// Box-Muller on two hashes of the index; the conversion rounds to nearest even and
// saturates at +-448 (never a NaN code).
__global__ void fill_normal_fp8_kernel(uint8_t* p, size_t n, uint32_t seed, float sigma) {
  for (size_t i = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<size_t>(gridDim.x) * blockDim.x) {
    const float u1 = (static_cast<float>(hash32(i, seed) >> 8) + 0.5f) * (1.0f / 16777216.0f);
    const float u2 = static_cast<float>(hash32(i, seed ^ 0x5BD1E995u) >> 8) * (1.0f / 16777216.0f);
    const float x = sigma * sqrtf(-2.0f * logf(u1)) * cospif(2.0f * u2);
    p[i] = num::e4m3_from_float(x);
  }
}

__global__ void fill_random_f32_kernel(float* p, size_t n, uint32_t seed, float lo, float hi) {
  for (size_t i = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<size_t>(gridDim.x) * blockDim.x)
    p[i] = lo + (hi - lo) * (hash32(i, seed) >> 8) * (1.0f / 16777216.0f);
}

__global__ void fill_random_bf16_kernel(uint16_t* p, size_t n, uint32_t seed, float lo, float hi) {
  for (size_t i = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<size_t>(gridDim.x) * blockDim.x)
    p[i] = __bfloat16_as_ushort(__float2bfloat16_rn(lo + (hi - lo) * (hash32(i, seed) >> 8) * (1.0f / 16777216.0f)));
}

// The clean flush's read: plain L2-allocating loads (ld.global.cg), which displace the write
// flush's dirty lines; read_kernel's non-coherent no-allocate loads left most of them in L2.
__global__ void __launch_bounds__(512) clean_read_kernel(const uint4* __restrict__ src, size_t n, uint4* sink) {
  uint32_t x = 0;
  for (size_t i = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<size_t>(gridDim.x) * blockDim.x) {
    const uint4 v = __ldcg(src + i);
    x ^= v.x ^ v.y ^ v.z ^ v.w;
  }
  if (x == 0x9E3779B9u) sink[0] = make_uint4(x, x, x, x);
}

__global__ void fill_bytes(uint8_t* p, size_t n, uint8_t v) {
  for (size_t i = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<size_t>(gridDim.x) * blockDim.x)
    p[i] = v;
}

int sm_count() {
  int dev = 0, n = 0;
  BENCH_CUDA(cudaGetDevice(&dev));
  BENCH_CUDA(cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, dev));
  return n;
}

// launch_sm_hog's kernel: lets its programmatic dependent launch at once (as the GEMMs do after
// their prologue), then holds its SM for `ns`.
__global__ void sm_hog_kernel(uint64_t ns) {
  ptx::griddep_launch_dependents();
  const uint64_t t0 = ptx::globaltimer();
  while (ptx::globaltimer() - t0 < ns) {
  }
}

}  // namespace

void launch_sm_hog(double us, cudaStream_t stream) {
  static const int smem = [] {  // (the first call must not be inside a stream capture)
    int dev = 0, bytes = 0;
    BENCH_CUDA(cudaGetDevice(&dev));
    BENCH_CUDA(cudaDeviceGetAttribute(&bytes, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev));
    BENCH_CUDA(cudaFuncSetAttribute(sm_hog_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes));
    return bytes;
  }();
  static const int ctas = sm_count();
  sm_hog_kernel<<<ctas, 32, smem, stream>>>(static_cast<uint64_t>(us * 1e3));
  BENCH_CUDA(cudaGetLastError());
}

void fill_random_fp8(uint8_t* p, size_t n, uint32_t seed, cudaStream_t stream) {
  fill_random_fp8_kernel<<<sm_count() * 4, 512, 0, stream>>>(p, n, seed);
  BENCH_CUDA(cudaGetLastError());
}
void fill_normal_fp8(uint8_t* p, size_t n, uint32_t seed, float sigma, cudaStream_t stream) {
  fill_normal_fp8_kernel<<<sm_count() * 4, 512, 0, stream>>>(p, n, seed, sigma);
  BENCH_CUDA(cudaGetLastError());
}
void fill_random_f32(float* p, size_t n, uint32_t seed, float lo, float hi, cudaStream_t stream) {
  fill_random_f32_kernel<<<sm_count() * 4, 512, 0, stream>>>(p, n, seed, lo, hi);
  BENCH_CUDA(cudaGetLastError());
}

void fill_random_bf16(uint16_t* p, size_t n, uint32_t seed, float lo, float hi, cudaStream_t stream) {
  fill_random_bf16_kernel<<<sm_count() * 4, 512, 0, stream>>>(p, n, seed, lo, hi);
  BENCH_CUDA(cudaGetLastError());
}

const char* flush_mode_name(FlushMode mode) { return mode == FlushMode::kClean ? "clean" : "write"; }
bool parse_flush_mode(const char* name, FlushMode* mode) {
  if (!std::strcmp(name, "write")) *mode = FlushMode::kWrite;
  else if (!std::strcmp(name, "clean")) *mode = FlushMode::kClean;
  else return false;
  return true;
}

L2Flush::L2Flush(FlushMode mode) : mode_(mode) {
  int dev = 0, l2 = 0;
  BENCH_CUDA(cudaGetDevice(&dev));
  BENCH_CUDA(cudaDeviceGetAttribute(&l2, cudaDevAttrL2CacheSize, dev));
  bytes_ = std::max<size_t>(size_t(4) * l2, size_t(256) << 20);
  BENCH_CUDA(cudaMalloc(&buf_, bytes_));
  if (mode_ == FlushMode::kClean) {
    BENCH_CUDA(cudaMalloc(&clean_, bytes_));
    fill_random_fp8(static_cast<uint8_t*>(clean_), bytes_, 99u);
  }
}
L2Flush::~L2Flush() {
  cudaFree(buf_);
  if (clean_) cudaFree(clean_);
}
void L2Flush::run(cudaStream_t stream) {
  static uint8_t v = 0;
  fill_bytes<<<sm_count() * 4, 512, 0, stream>>>(static_cast<uint8_t*>(buf_), bytes_, ++v);
  BENCH_CUDA(cudaGetLastError());
  if (mode_ == FlushMode::kClean) {
    // (the sink store never happens: it writes only for an impossible value)
    clean_read_kernel<<<sm_count() * 4, 512, 0, stream>>>(static_cast<const uint4*>(clean_), bytes_ / sizeof(uint4),
                                                          static_cast<uint4*>(buf_));
    BENCH_CUDA(cudaGetLastError());
  }
}

double measure_read_tbps(FlushMode flush_mode, size_t bytes, int reps) {
  uint4* buf = nullptr;
  uint4* sink = nullptr;
  BENCH_CUDA(cudaMalloc(&buf, bytes));
  BENCH_CUDA(cudaMalloc(&sink, sizeof(uint4)));
  fill_random_fp8(reinterpret_cast<uint8_t*>(buf), bytes, 1234u);
  L2Flush flush(flush_mode);
  cudaEvent_t start, stop;
  BENCH_CUDA(cudaEventCreate(&start));
  BENCH_CUDA(cudaEventCreate(&stop));
  const size_t n = bytes / sizeof(uint4);
  const int bulk_smem = kBulkSlots * kBulkChunk;
  BENCH_CUDA(cudaFuncSetAttribute(bulk_read_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bulk_smem));
  double best = 0;
  // Two kernels (16-byte loads at two occupancies; bulk copies into shared memory, one CTA per
  // SM, 12 x 16 KB in flight); the ceiling is the best median: what a good streaming kernel
  // reaches here. A fourth variant with 6 x 16 KB in flight (what the GEMM's ring holds of
  // weights) is printed with FP8MOE_BENCH_VERBOSE=1 but does not count.
  for (int variant = 0; variant < 4; ++variant) {
    std::vector<double> us;
    for (int r = 0; r < reps + 2; ++r) {
      flush.run(nullptr);
      BENCH_CUDA(cudaEventRecord(start));
      if (variant < 2)
        read_kernel<<<sm_count() * (variant == 0 ? 2 : 4), 512>>>(buf, n, sink);
      else
        bulk_read_kernel<<<sm_count(), 32, bulk_smem>>>(reinterpret_cast<const uint8_t*>(buf), bytes / kBulkChunk,
                                                        variant == 2 ? kBulkSlots : 6,
                                                        reinterpret_cast<uint32_t*>(sink));
      BENCH_CUDA(cudaGetLastError());
      BENCH_CUDA(cudaEventRecord(stop));
      BENCH_CUDA(cudaEventSynchronize(stop));
      float ms = 0;
      BENCH_CUDA(cudaEventElapsedTime(&ms, start, stop));
      if (r >= 2) us.push_back(ms * 1e3);
    }
    const double tbps = bytes / (stats_of(us).median * 1e-6) / 1e12;
    if (std::getenv("FP8MOE_BENCH_VERBOSE")) std::fprintf(stderr, "read ceiling variant %d: %.3f TB/s\n", variant, tbps);
    if (variant < 3) best = std::max(best, tbps);
  }
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  cudaFree(buf);
  cudaFree(sink);
  return best;
}

double measure_fp8_gemm_tflops(int size, int reps) {
#define LT_OK(expr)                                                                     \
  do {                                                                                  \
    cublasStatus_t s_ = (expr);                                                         \
    if (s_ != CUBLAS_STATUS_SUCCESS) {                                                  \
      std::fprintf(stderr, "cuBLASLt FP8 ceiling: %s failed (%d)\n", #expr, int(s_));   \
      return 0.0;                                                                       \
    }                                                                                   \
  } while (0)
  const size_t m = size, n = size, k = size;
  uint8_t *a = nullptr, *b = nullptr;
  void* d = nullptr;
  void* work = nullptr;
  const size_t work_bytes = size_t(64) << 20;
  BENCH_CUDA(cudaMalloc(&a, m * k));
  BENCH_CUDA(cudaMalloc(&b, n * k));
  BENCH_CUDA(cudaMalloc(&d, m * n * 2));
  BENCH_CUDA(cudaMalloc(&work, work_bytes));
  fill_random_fp8(a, m * k, 11u);
  fill_random_fp8(b, n * k, 22u);

  cublasLtHandle_t lt;
  LT_OK(cublasLtCreate(&lt));
  cublasLtMatmulDesc_t desc;
  LT_OK(cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  const cublasOperation_t op_t = CUBLAS_OP_T, op_n = CUBLAS_OP_N;
  LT_OK(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSA, &op_t, sizeof(op_t)));
  LT_OK(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSB, &op_n, sizeof(op_n)));
  cublasLtMatrixLayout_t la, lb, ld;
  LT_OK(cublasLtMatrixLayoutCreate(&la, CUDA_R_8F_E4M3, k, m, k));
  LT_OK(cublasLtMatrixLayoutCreate(&lb, CUDA_R_8F_E4M3, k, n, k));
  LT_OK(cublasLtMatrixLayoutCreate(&ld, CUDA_R_16BF, m, n, m));
  cublasLtMatmulPreference_t pref;
  LT_OK(cublasLtMatmulPreferenceCreate(&pref));
  LT_OK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &work_bytes,
                                             sizeof(work_bytes)));
  cublasLtMatmulHeuristicResult_t heur[8];
  int found = 0;
  LT_OK(cublasLtMatmulAlgoGetHeuristic(lt, desc, la, lb, ld, ld, pref, 8, heur, &found));
  if (found == 0) {
    std::fprintf(stderr, "cuBLASLt FP8 ceiling: no algorithm\n");
    return 0.0;
  }
  const float alpha = 1.0f, beta = 0.0f;
  cudaEvent_t start, stop;
  BENCH_CUDA(cudaEventCreate(&start));
  BENCH_CUDA(cudaEventCreate(&stop));
  double best = 0;
  for (int h = 0; h < found && h < 3; ++h) {  // best of the top heuristics
    std::vector<double> us;
    for (int r = 0; r < reps + 3; ++r) {
      BENCH_CUDA(cudaEventRecord(start));
      LT_OK(cublasLtMatmul(lt, desc, &alpha, a, la, b, lb, &beta, d, ld, d, ld, &heur[h].algo, work, work_bytes,
                           nullptr));
      BENCH_CUDA(cudaEventRecord(stop));
      BENCH_CUDA(cudaEventSynchronize(stop));
      float ms = 0;
      BENCH_CUDA(cudaEventElapsedTime(&ms, start, stop));
      if (r >= 3) us.push_back(ms * 1e3);
    }
    best = std::max(best, 2.0 * m * n * k / (stats_of(us).median * 1e-6) / 1e12);
  }
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  cublasLtMatmulPreferenceDestroy(pref);
  cublasLtMatrixLayoutDestroy(la);
  cublasLtMatrixLayoutDestroy(lb);
  cublasLtMatrixLayoutDestroy(ld);
  cublasLtMatmulDescDestroy(desc);
  cublasLtDestroy(lt);
  cudaFree(a);
  cudaFree(b);
  cudaFree(d);
  cudaFree(work);
  return best;
#undef LT_OK
}

}  // namespace fp8moe::bench
