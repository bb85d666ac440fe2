// Thin PTX wrappers for the Hopper (sm_90a) pieces fp8moe's kernels use: mbarriers with a
// watchdog, TMA (bulk tensor) loads, wgmma FP8, warpgroup register reallocation, fences.
// Each wrapper is one instruction or a fixed idiom; nothing here knows about GEMMs or MoE.
#pragma once

#include <cuda.h>  // CUtensorMap
#include <cstdint>

namespace fp8moe::ptx {

__device__ __forceinline__ uint32_t smem_addr(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}
// Bytes from `p` (dynamic shared memory) to the next 1024-byte boundary, which 128-byte-swizzled
// tiles start on. Callers add it to their `extern __shared__` array itself (`smem_raw + ...`) so
// the compiler still knows the result is a shared-memory address and emits LDS/STS.
__device__ __forceinline__ uint32_t smem_align_1024_offset(const void* p) { return (1024u - (smem_addr(p) & 1023u)) & 1023u; }

// Nanoseconds of the GPU's global timer (for timelines in investigation builds).
__device__ __forceinline__ uint64_t globaltimer() {
  uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}
// The SM this thread runs on (for timelines in investigation builds).
__device__ __forceinline__ uint32_t smid() {
  uint32_t id;
  asm volatile("mov.u32 %0, %%smid;" : "=r"(id));
  return id;
}

// ---- mbarrier ---------------------------------------------------------------------------------
__device__ __forceinline__ void mbar_init(uint64_t* bar, uint32_t count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(smem_addr(bar)), "r"(count) : "memory");
}
// Makes barrier initialisation visible to the async proxy (TMA) before first use.
__device__ __forceinline__ void fence_barrier_init() {
  asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
}
__device__ __forceinline__ void mbar_arrive(uint64_t* bar) {
  asm volatile("mbarrier.arrive.release.cta.shared::cta.b64 _, [%0];" ::"r"(smem_addr(bar)) : "memory");
}
// `count` arrivals at once (a phase that needs more than one arrival, completed without data).
__device__ __forceinline__ void mbar_arrive_n(uint64_t* bar, uint32_t count) {
  asm volatile("mbarrier.arrive.release.cta.shared::cta.b64 _, [%0], %1;" ::"r"(smem_addr(bar)), "r"(count) : "memory");
}
__device__ __forceinline__ void mbar_arrive_expect_tx(uint64_t* bar, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.release.cta.shared::cta.b64 _, [%0], %1;" ::"r"(smem_addr(bar)),
               "r"(bytes)
               : "memory");
}
__device__ __forceinline__ bool mbar_try_wait(uint64_t* bar, uint32_t parity) {
  uint32_t done;
  asm volatile(
      "{\n .reg .pred p;\n"
      " mbarrier.try_wait.parity.acquire.cta.shared::cta.b64 p, [%1], %2;\n"
      " selp.u32 %0, 1, 0, p;\n}"
      : "=r"(done)
      : "r"(smem_addr(bar)), "r"(parity)
      : "memory");
  return done != 0;
}
// Waits for the phase with the given parity to complete. A pipeline that never completes is a
// bug, not a state to wait out: after ~2^28 failed polls (each can block for up to microseconds,
// so seconds to minutes in all) the kernel traps and the host sees a launch error instead of a
// hung GPU. (No printf here: a call inside the wgmma pipeline would serialise it.)
__device__ __forceinline__ void mbar_wait(uint64_t* bar, uint32_t parity) {
  uint32_t polls = 0;
  while (!mbar_try_wait(bar, parity)) {
    if (++polls == (1u << 28)) __trap();
  }
}

// ---- clusters ---------------------------------------------------------------------------------
__device__ __forceinline__ uint32_t cluster_ctarank() {
  uint32_t r;
  asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(r));
  return r;
}
// All threads of all CTAs of the cluster; release/acquire orders shared-memory effects across it.
__device__ __forceinline__ void cluster_sync() {
  asm volatile("barrier.cluster.arrive.release.aligned;\nbarrier.cluster.wait.acquire.aligned;" ::: "memory");
}
// Arrives on the mbarrier at the same shared-memory offset in CTA `rank` of the cluster.
__device__ __forceinline__ void mbar_arrive_cluster(uint64_t* bar, uint32_t rank) {
  uint32_t remote;
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(remote) : "r"(smem_addr(bar)), "r"(rank));
  // Default (.release.cta) semantics, as for a local arrive: the arriving warp's shared-memory
  // reads (its wgmma) are complete; a cluster-scope release would also wait on its global stores.
  asm volatile("mbarrier.arrive.shared::cluster.b64 _, [%0];" ::"r"(remote) : "memory");
}

// ---- TMA (cp.async.bulk.tensor) ---------------------------------------------------------------
__device__ __forceinline__ void prefetch_tensormap(const CUtensorMap* map) {
  asm volatile("prefetch.tensormap [%0];" ::"l"(reinterpret_cast<uint64_t>(map)) : "memory");
}
// 2-D tile load global -> shared, completing `bytes` of transaction on `bar`. c0 is the inner
// (contiguous) coordinate.
__device__ __forceinline__ void tma_load_2d(void* dst, const CUtensorMap* map, uint64_t* bar, int32_t c0,
                                            int32_t c1) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%3, %4}], "
      "[%2];" ::"r"(smem_addr(dst)),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(smem_addr(bar)), "r"(c0), "r"(c1)
      : "memory");
}
// 3-D tile load (c0 innermost), as tma_load_2d.
__device__ __forceinline__ void tma_load_3d(void* dst, const CUtensorMap* map, uint64_t* bar, int32_t c0, int32_t c1,
                                            int32_t c2) {
  asm volatile(
      "cp.async.bulk.tensor.3d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%3, %4, %5}], "
      "[%2];" ::"r"(smem_addr(dst)),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(smem_addr(bar)), "r"(c0), "r"(c1), "r"(c2)
      : "memory");
}
// Same tile into the same shared-memory offset of every CTA in `cta_mask`, completing on the
// mbarrier at the same offset in each of them.
__device__ __forceinline__ void tma_load_2d_multicast(void* dst, const CUtensorMap* map, uint64_t* bar, int32_t c0,
                                                      int32_t c1, uint16_t cta_mask) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes.multicast::cluster [%0], "
      "[%1, {%3, %4}], [%2], %5;" ::"r"(smem_addr(dst)),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(smem_addr(bar)), "r"(c0), "r"(c1), "h"(cta_mask)
      : "memory");
}
// Same, with an L2 eviction-priority hint (a createpolicy value).
__device__ __forceinline__ void tma_load_2d_hint(void* dst, const CUtensorMap* map, uint64_t* bar, int32_t c0,
                                                 int32_t c1, uint64_t policy) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes.L2::cache_hint [%0], [%1, "
      "{%3, %4}], [%2], %5;" ::"r"(smem_addr(dst)),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(smem_addr(bar)), "r"(c0), "r"(c1), "l"(policy)
      : "memory");
}
// Contiguous bulk copy global -> shared of `bytes` (a multiple of 16, both addresses 16-byte
// aligned), completing `bytes` of transaction on `bar`.
__device__ __forceinline__ void bulk_load(void* dst, const void* src, uint32_t bytes, uint64_t* bar) {
  asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::"r"(
                   smem_addr(dst)),
               "l"(src), "r"(bytes), "r"(smem_addr(bar))
               : "memory");
}
// Prefetch of `bytes` (a multiple of 16, 16-byte aligned) of global memory into L2; nothing waits for it.
__device__ __forceinline__ void bulk_prefetch_l2(const void* src, uint32_t bytes) {
  asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(src), "r"(bytes) : "memory");
}
// 4-byte copy global -> shared (cp.async, cached in L1). Its completion is tracked by
// cp_async_mbar_arrive, not by a wait.
__device__ __forceinline__ void cp_async_4(void* dst, const void* src) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4;" ::"r"(smem_addr(dst)), "l"(src) : "memory");
}
// Arrives on `bar` once this thread's earlier cp.async copies have landed. The arrival is one of
// the phase's expected arrivals (.noinc): the barrier's count includes it. (The form without
// .noinc adds the arrival to the phase first; compute-sanitizer's synccheck does not follow that
// and reported a missed wait on every such barrier: perf notes v21.)
__device__ __forceinline__ void cp_async_mbar_arrive(uint64_t* bar) {
  asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];" ::"r"(smem_addr(bar)) : "memory");
}
// Stores a 2-D tile from shared memory through TMA (bulk group): the writers of that shared memory
// order their writes before it with fence_proxy_async_smem() and a barrier; the issuing thread
// commits the group and waits for its reads (bulk_wait_read) before the tile is written again.
__device__ __forceinline__ void tma_store_2d(const CUtensorMap* map, const void* src, int32_t c0, int32_t c1) {
  asm volatile("cp.async.bulk.tensor.2d.global.shared::cta.bulk_group [%0, {%2, %3}], [%1];" ::"l"(
                   reinterpret_cast<uint64_t>(map)),
               "r"(smem_addr(src)), "r"(c0), "r"(c1)
               : "memory");
}
__device__ __forceinline__ void bulk_commit() { asm volatile("cp.async.bulk.commit_group;" ::: "memory"); }
// Waits until at most N of this thread's committed bulk groups still read their shared memory.
template <int N>
__device__ __forceinline__ void bulk_wait_read() {
  asm volatile("cp.async.bulk.wait_group.read %0;" ::"n"(N) : "memory");
}
// Waits until at most N of this thread's committed bulk groups are incomplete (writes done).
template <int N>
__device__ __forceinline__ void bulk_wait() {
  asm volatile("cp.async.bulk.wait_group %0;" ::"n"(N) : "memory");
}
// Makes this thread's generic-proxy shared-memory writes visible to the async proxy (TMA).
__device__ __forceinline__ void fence_proxy_async_smem() { asm volatile("fence.proxy.async.shared::cta;" ::: "memory"); }
__device__ __forceinline__ uint64_t l2_policy_evict_last() {
  uint64_t p;
  asm volatile("createpolicy.fractional.L2::evict_last.b64 %0, 1.0;" : "=l"(p));
  return p;
}
// A 16-byte global store with an L2 cache policy (createpolicy).
__device__ __forceinline__ void st_global_hint(void* ptr, uint4 v, uint64_t policy) {
  asm volatile("st.global.L2::cache_hint.v4.b32 [%0], {%1, %2, %3, %4}, %5;" ::"l"(ptr), "r"(v.x), "r"(v.y), "r"(v.z),
               "r"(v.w), "l"(policy)
               : "memory");
}
// 16 bytes of read-only global memory that are read once: no L1 line is allocated for them, so a
// kernel with many such loads in flight does not need L1 room for them (perf notes v58).
__device__ __forceinline__ uint4 ld_global_nc_na_v4(const void* ptr) {
  uint4 v;
  asm("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];"
      : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
      : "l"(ptr));
  return v;
}
// Drops the 128-byte L2 line at `ptr` (128-byte aligned) without writing it back: its contents
// become undefined. For data no one reads again (a dead intermediate, once consumed).
__device__ __forceinline__ void discard_l2_line(const void* ptr) {
  asm volatile("discard.global.L2 [%0], 128;" ::"l"(ptr) : "memory");
}
// ---- programmatic dependent launch ------------------------------------------------------------
// Waits until the kernel this one was launched after (as a programmatic dependent) has completed
// and its memory operations are visible; returns at once for a plainly launched kernel.
__device__ __forceinline__ void griddep_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}
// Lets the next kernel in the stream (launched as a programmatic dependent) start its CTAs once
// every CTA of this one has said so or exited.
__device__ __forceinline__ void griddep_launch_dependents() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}
// ---- warpgroup --------------------------------------------------------------------------------
template <uint32_t kRegs>
__device__ __forceinline__ void setmaxnreg_inc() {
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;" ::"n"(kRegs));
}
template <uint32_t kRegs>
__device__ __forceinline__ void setmaxnreg_dec() {
  asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;" ::"n"(kRegs));
}
// Named barrier over `threads` threads (multiple of 32); id 0 is __syncthreads'.
__device__ __forceinline__ void named_barrier(uint32_t id, uint32_t threads) {
  asm volatile("bar.sync %0, %1;" ::"r"(id), "r"(threads) : "memory");
}
__device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;" ::: "memory"); }
__device__ __forceinline__ void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory"); }
template <int N>
__device__ __forceinline__ void wgmma_wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;" ::"n"(N) : "memory");
}
// Keeps the compiler from moving accumulator reads/writes across wgmma boundaries.
__device__ __forceinline__ void fence_operand(float& r) { asm volatile("" : "+f"(r)::"memory"); }

// Four 8x8 BF16 matrices from registers to shared memory; lane l gives the address of row l % 8
// of matrix l / 8, and register j of each lane holds its two elements of matrix j (row l / 4,
// columns 2 * (l % 4) + {0, 1}). kTrans: each matrix is stored transposed (those two elements land
// in column l / 4 of rows 2 * (l % 4) + {0, 1}).
template <bool kTrans = false>
__device__ __forceinline__ void stmatrix_x4(void* row_addr, uint32_t r0, uint32_t r1, uint32_t r2, uint32_t r3) {
  if constexpr (kTrans)
    asm volatile("stmatrix.sync.aligned.m8n8.x4.trans.shared.b16 [%0], {%1, %2, %3, %4};" ::"r"(smem_addr(row_addr)),
                 "r"(r0), "r"(r1), "r"(r2), "r"(r3)
                 : "memory");
  else
    asm volatile("stmatrix.sync.aligned.m8n8.x4.shared.b16 [%0], {%1, %2, %3, %4};" ::"r"(smem_addr(row_addr)), "r"(r0),
                 "r"(r1), "r"(r2), "r"(r3)
                 : "memory");
}

// Shared-memory matrix descriptor for a K-major tile stored with the 128-byte swizzle as TMA
// writes it: rows of 128 bytes, 8-row (1024-byte) swizzle atoms stacked along M/N.
__device__ __forceinline__ uint64_t smem_desc_k_major_sw128(const void* tile) {
  const uint64_t addr = smem_addr(tile);
  uint64_t desc = 0;
  desc |= (addr & 0x3FFFFull) >> 4;       // start address
  desc |= uint64_t(1) << 16;              // leading byte offset (unused with 128B swizzle)
  desc |= uint64_t(1024 >> 4) << 32;      // stride byte offset: one 8-row atom
  desc |= uint64_t(1) << 62;              // layout: 128-byte swizzle
  return desc;
}

// The descriptor with its start address advanced by `units` 16-byte units: in the low word only (the
// 14-bit address field of a shared-memory tile never carries into the LBO), so that the compiler
// adds 32 bits and keeps the constant high word instead of a 64-bit add with carry.
__device__ __forceinline__ uint64_t smem_desc_advance(uint64_t desc, uint32_t units) {
  return (desc & 0xFFFFFFFF00000000ull) | static_cast<uint32_t>(static_cast<uint32_t>(desc) + units);
}

// D[64 x N] (+)= A[64 x 32] * B[N x 32]^T, E4M3 inputs from shared memory, FP32 accumulators in
// registers (the m64nNk32 fragment: N/2 floats per thread). scale_d = 0 overwrites D.
template <int N>
struct WgmmaE4M3;

// The wgmma wrappers below differ only in N: the accumulator operands are listed with these
// macros (PTX needs every register spelled out). FP8MOE_WGMMA_Rk names %16k..%16k+15, and
// FP8MOE_WGMMA_D16(i) binds d[i..i+15] to them in order. FP8MOE_WGMMA_E4M3(N, REGS, IA, IB, IP,
// OUTS...) defines WgmmaE4M3<N>: REGS the accumulators' operand names, IA / IB / IP the numbers
// of the two descriptors' and the scale-d flag's operands (N / 2, + 1, + 2), OUTS the bindings.
#define FP8MOE_WGMMA_R0 "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15"
#define FP8MOE_WGMMA_R1 "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31"
#define FP8MOE_WGMMA_R2 "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47"
#define FP8MOE_WGMMA_R3 "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63"
#define FP8MOE_WGMMA_R4 "%64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79"
#define FP8MOE_WGMMA_R5 "%80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95"
#define FP8MOE_WGMMA_R6 "%96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111"
#define FP8MOE_WGMMA_R7 "%112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, %127"
#define FP8MOE_WGMMA_D4(i) "+f"(d[i]), "+f"(d[i + 1]), "+f"(d[i + 2]), "+f"(d[i + 3])
#define FP8MOE_WGMMA_D16(i) \
  FP8MOE_WGMMA_D4(i), FP8MOE_WGMMA_D4(i + 4), FP8MOE_WGMMA_D4(i + 8), FP8MOE_WGMMA_D4(i + 12)
#define FP8MOE_WGMMA_E4M3(N, REGS, IA, IB, IP, ...)                                                           \
  template <>                                                                                                  \
  struct WgmmaE4M3<N> {                                                                                        \
    static constexpr int kAccum = N / 2;                                                                       \
    __device__ __forceinline__ static void mma(float (&d)[N / 2], uint64_t desc_a, uint64_t desc_b,           \
                                               bool accumulate) {                                              \
      asm volatile("{\n .reg .pred p;\n setp.ne.b32 p, %" #IP ", 0;\n"                                          \
                   "wgmma.mma_async.sync.aligned.m64n" #N "k32.f32.e4m3.e4m3 {" REGS "}, %" #IA ", %" #IB      \
                   ", p, 1, 1;\n}\n"                                                                           \
                   : __VA_ARGS__                                                                               \
                   : "l"(desc_a), "l"(desc_b), "r"(static_cast<int>(accumulate)));                              \
    }                                                                                                          \
  };

// Narrow N, for swapped operands (a few rows of A as the N side): 16, 32, 48.
FP8MOE_WGMMA_E4M3(16, "%0, %1, %2, %3, %4, %5, %6, %7", 8, 9, 10, FP8MOE_WGMMA_D4(0), FP8MOE_WGMMA_D4(4))
FP8MOE_WGMMA_E4M3(32, FP8MOE_WGMMA_R0, 16, 17, 18, FP8MOE_WGMMA_D16(0))
FP8MOE_WGMMA_E4M3(48, FP8MOE_WGMMA_R0 ", %16, %17, %18, %19, %20, %21, %22, %23", 24, 25, 26, FP8MOE_WGMMA_D16(0),
                  FP8MOE_WGMMA_D4(16), FP8MOE_WGMMA_D4(20))
FP8MOE_WGMMA_E4M3(64, FP8MOE_WGMMA_R0 ", " FP8MOE_WGMMA_R1, 32, 33, 34, FP8MOE_WGMMA_D16(0), FP8MOE_WGMMA_D16(16))
FP8MOE_WGMMA_E4M3(96, FP8MOE_WGMMA_R0 ", " FP8MOE_WGMMA_R1 ", " FP8MOE_WGMMA_R2, 48, 49, 50, FP8MOE_WGMMA_D16(0),
                  FP8MOE_WGMMA_D16(16), FP8MOE_WGMMA_D16(32))
// Wider tiles, for the wgmma rate benchmark (bench/wgmma_rate.cu) and kernels that want them.
FP8MOE_WGMMA_E4M3(128, FP8MOE_WGMMA_R0 ", " FP8MOE_WGMMA_R1 ", " FP8MOE_WGMMA_R2 ", " FP8MOE_WGMMA_R3, 64, 65, 66,
                  FP8MOE_WGMMA_D16(0), FP8MOE_WGMMA_D16(16), FP8MOE_WGMMA_D16(32), FP8MOE_WGMMA_D16(48))
FP8MOE_WGMMA_E4M3(192,
                  FP8MOE_WGMMA_R0 ", " FP8MOE_WGMMA_R1 ", " FP8MOE_WGMMA_R2 ", " FP8MOE_WGMMA_R3 ", " FP8MOE_WGMMA_R4
                                  ", " FP8MOE_WGMMA_R5,
                  96, 97, 98, FP8MOE_WGMMA_D16(0), FP8MOE_WGMMA_D16(16), FP8MOE_WGMMA_D16(32), FP8MOE_WGMMA_D16(48),
                  FP8MOE_WGMMA_D16(64), FP8MOE_WGMMA_D16(80))
FP8MOE_WGMMA_E4M3(256,
                  FP8MOE_WGMMA_R0 ", " FP8MOE_WGMMA_R1 ", " FP8MOE_WGMMA_R2 ", " FP8MOE_WGMMA_R3 ", " FP8MOE_WGMMA_R4
                                  ", " FP8MOE_WGMMA_R5 ", " FP8MOE_WGMMA_R6 ", " FP8MOE_WGMMA_R7,
                  128, 129, 130, FP8MOE_WGMMA_D16(0), FP8MOE_WGMMA_D16(16), FP8MOE_WGMMA_D16(32), FP8MOE_WGMMA_D16(48),
                  FP8MOE_WGMMA_D16(64), FP8MOE_WGMMA_D16(80), FP8MOE_WGMMA_D16(96), FP8MOE_WGMMA_D16(112))

#undef FP8MOE_WGMMA_E4M3
#undef FP8MOE_WGMMA_D16
#undef FP8MOE_WGMMA_D4
#undef FP8MOE_WGMMA_R0
#undef FP8MOE_WGMMA_R1
#undef FP8MOE_WGMMA_R2
#undef FP8MOE_WGMMA_R3
#undef FP8MOE_WGMMA_R4
#undef FP8MOE_WGMMA_R5
#undef FP8MOE_WGMMA_R6
#undef FP8MOE_WGMMA_R7
}  // namespace fp8moe::ptx
