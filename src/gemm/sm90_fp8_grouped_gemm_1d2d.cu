// Host side of the SM90 grouped GEMM: TMA descriptors, launch configuration, dispatch on the
// schedule. Tensor maps are encoded per call (host-only, microseconds) and passed by value, so a
// captured CUDA graph carries them.
#include <cuda.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <type_traits>

#include "fp8moe/fp8moe.hpp"
#include "gemm/grouped_gemm.hpp"
#include "gemm/sm90_fp8_grouped_gemm_1d2d.cuh"
#include "gemm/tensor_map.hpp"
#include "kernels/launch.cuh"
#include "knobs/knobs.hpp"

namespace fp8moe::gemm {
static_assert(fp8moe::kMaxExperts == sched::kMaxLiveExperts, "the API's expert limit is the scheduler's");
namespace {

int sm_count() {
  int dev = 0, n = 0;
  cudaGetDevice(&dev);
  cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, dev);
  return n;
}

// Launches `kKernel` with `kSmemBytes` of dynamic shared memory; kBlockN = 0: the auto-width kernel.
template <auto kKernel, int kSmemBytes, int kBlockN, int kStages, int kCluster, bool kPairM>
struct KernelLauncher {
  static constexpr auto kernel = kKernel;

  // attrs[0]: the cluster shape; attrs[1]: programmatic dependent launch, if `dependent`.
  static cudaLaunchConfig_t config(cudaLaunchAttribute (&attrs)[2], cudaStream_t stream, bool dependent) {
    cudaLaunchConfig_t c{};
    attrs[0].id = cudaLaunchAttributeClusterDimension;
    attrs[0].val.clusterDim.x = kCluster;
    attrs[0].val.clusterDim.y = 1;
    attrs[0].val.clusterDim.z = 1;
    attrs[1] = kernels::pdl_attribute();
    c.blockDim = dim3(kSm90GemmThreads);
    c.dynamicSmemBytes = kSmemBytes;
    c.stream = stream;
    c.attrs = attrs;
    c.numAttrs = dependent && knobs::pdl() ? 2 : 1;
    return c;
  }
  // Persistent grid: one CTA per SM, or as many whole clusters as can be resident at once.
  static int grid() {
    static const int ctas = [] {
      if (cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmemBytes) != cudaSuccess) {
        cudaGetLastError();  // (no usable GPU: launch() reports it; info() callers get 0 CTAs)
        return 0;
      }
      const int sms = sm_count();
      if (kCluster == 1) return sms;
      cudaLaunchAttribute attrs[2];
      cudaLaunchConfig_t c = config(attrs, nullptr, false);
      c.gridDim = dim3(sms / kCluster * kCluster);
      int clusters = 0;
      if (cudaOccupancyMaxActiveClusters(&clusters, kernel, &c) != cudaSuccess || clusters < 1) {
        cudaGetLastError();
        return sms / kCluster * kCluster;
      }
      return clusters * kCluster;
    }();
    return ctas;
  }
  static cudaError_t launch(const Sm90GemmParams& params, cudaStream_t stream, bool dependent) {
    const int ctas = grid();
    if (ctas == 0) return cudaErrorInvalidConfiguration;
    cudaLaunchAttribute attrs[2];
    cudaLaunchConfig_t c = config(attrs, stream, dependent);
    c.gridDim = dim3(ctas);
    return cudaLaunchKernelEx(&c, kernel, params);
  }
  static GemmLaunchInfo info() { return {grid(), kCluster, kStages, kBlockN, kPairM}; }
};

template <int kBlockN, int kStages, int kCluster, bool kLive, bool kPairM = false, bool kFusedAct = false>
using Launcher = KernelLauncher<sm90_fp8_grouped_gemm_1d2d_kernel<kBlockN, kStages, kCluster, kLive, kPairM, kFusedAct>,
                                Sm90GemmConfig<kBlockN, kStages, false, kFusedAct>::kSmemBytes, kBlockN, kStages,
                                kCluster, kPairM>;

constexpr int kAutoSmemBytes =
    std::max(Sm90GemmConfig<128, sm90_stages_for(128)>::kSmemBytes,
             Sm90GemmConfig<192, sm90_stages_for(192), true>::kSmemBytes);  // (its 192-wide body: tall tiles)
using AutoLauncher = KernelLauncher<sm90_fp8_grouped_gemm_1d2d_auto_kernel, kAutoSmemBytes, 0, 0, 1, false>;

// Tile widths: 128, 192 (1.5x the FLOPs per pipeline stage for 1.23x the bytes; +16-23% on
// prefill-sized GEMMs on the H200, docs/perf-notes.md) or 256, with sm90_stages_for() stages (the
// 192-wide ring's 4: pipeline 4096/4096 and 512/512 -2..-3%, 4096/256 +1%: perf notes v18; the
// 256-wide ring's 3). The live schedule:
//   - from the host when a full capacity gives an expert more than 1.5 M-tiles on average (more
//     than 192 rows: prefill capacities, compute tiles): 256 where N is a multiple of 256 but not
//     of 192, so that 192 would compute a partial last tile (seed GEMM1 4096 = 21.3 x 192, GEMM2
//     7168, Qwen3 GEMM2 2048 and 4096: pipeline seed 4096/4096 -2.5..-3.8%, GEMM2s -3%), else 192
//     (Qwen3 GEMM1 1536 and 3072: 256 measured 0..+3% there; perf notes v37); GEMM1 with its
//     activation epilogue (fuse_act) always 256;
//   - below that the live rows decide, on the device (sm90_fp8_grouped_gemm_1d2d_auto_kernel,
//     sched::wide_tiles; block_n_for() returns 0): 192 when the touched experts average more than
//     one M-tile (512/512: -5% end to end), 128 at decode sizes (weight streaming, where 192's
//     partial last N tile and coarser waves cost 3-4%; perf notes v14-v15). 2-CTA clusters take
//     128 there. Its 192-wide body computes experts of 129..192 rows in tall tiles (all their
//     rows x 128 columns: 512/512 GEMMs -8..9%); the fixed 192-wide kernel has none (with them,
//     prefill GEMMs measured 4-14% slower, perf notes v22).
// The padded baseline stays at 128 (today's engines' tile). Both widths compute every output
// element with the same operations in the same order (same k32 wgmma chain per 128-K block, same
// scale products), so the two schedules stay bit-identical; the GEMM tests check it with mixed
// widths. FP8MOE_GEMM_BLOCK_N=128|192 overrides the live schedule's choice.

// 2-CTA clusters are opt-in (FP8MOE_GEMM_CLUSTER, or GroupedGemmArgs::cluster): sharing A between
// N-neighbours measured +3-5% at 4096/4096 but mixed elsewhere, and sharing B between M-neighbours
// -5% on GEMM1 4096/4096 under sustained load but slower everywhere else (docs/perf-notes.md v10,
// v13), so single CTAs are the default. N-pairs need an even
// number of N-blocks per expert (a pair never straddles two experts); M-pairs work for any N and
// the live schedule only (the padded baseline then runs N-pairs or single CTAs).
GemmCluster cluster_for(const GroupedGemmArgs& a) {
  const char env = knobs::gemm_cluster();
  const GemmCluster from_env = env == 'n' ? GemmCluster::kPairN : env == 'm' ? GemmCluster::kPairM : GemmCluster::kSingle;
  const GemmCluster c = a.cluster == GemmCluster::kAuto ? from_env : a.cluster;
  return c == GemmCluster::kPairM && a.schedule != layout::Schedule::kLive ? GemmCluster::kSingle : c;
}

// Prefill capacities: a full capacity gives an expert more than 192 rows on average (M_cap holds
// the capacity's C*k rows plus up to 127 rows of alignment per expert, SPEC section 2).
bool prefill_capacity(const GroupedGemmArgs& a) { return (a.m_cap - 127LL * a.num_experts) / a.num_experts > 192; }
// The width asked for (GroupedGemmArgs::block_n, else FP8MOE_GEMM_BLOCK_N; 0: none).
int forced_block_n(const GroupedGemmArgs& a) { return a.block_n ? a.block_n : knobs::gemm_block_n(); }
// 256-wide tiles run as single CTAs on N a multiple of 256 (no partial tile, no straddled B-scale
// block).
bool can_256(const GroupedGemmArgs& a) { return a.n % 256 == 0 && cluster_for(a) == GemmCluster::kSingle; }

// GEMM1's activation epilogue (GroupedGemmArgs::fused_act): at prefill capacities (where the host
// fixes the width; 256 columns then, also where N is a multiple of 192), or where 256 is forced,
// for the live schedule with single CTAs. What it saves is Y1's write and read and act_quant's
// launch; the activation's instructions stay, beside the math (pipeline at 4096/4096 against
// act_quant: seed -1.5%, Qwen3-235B ~-7%, Qwen3-30B ~-3.5%; perf notes v38).
bool fuse_act(const GroupedGemmArgs& a) {
  if (a.fused_act == nullptr || knobs::fused_act_off() || a.schedule != layout::Schedule::kLive || !can_256(a))
    return false;
  const int forced = forced_block_n(a);
  return forced == 256 || (forced == 0 && prefill_capacity(a));
}

int block_n_for(const GroupedGemmArgs& a) {
  if (a.schedule == layout::Schedule::kPadded) return 128;
  if (fuse_act(a)) return 256;
  const int forced = forced_block_n(a);
  if (forced == 256 && can_256(a)) return 256;
  if (forced == 128 || forced == 192) return forced;
  // 256 where it computes fewer columns than 192 (no partial last tile where 192 has one), else 192.
  if (prefill_capacity(a)) return can_256(a) && a.n % 192 != 0 ? 256 : 192;
  return cluster_for(a) == GemmCluster::kSingle ? 0 : 128;
}

// Dynamic tiles (the kernel's `dynamic`): live single CTAs given a counter, unless
// FP8MOE_GEMM_DYNAMIC=0. The padded baseline keeps the fixed stride engines use.
int32_t* tile_counter_for(const GroupedGemmArgs& a) {
  if (knobs::gemm_dynamic_off() || a.schedule != layout::Schedule::kLive || cluster_for(a) != GemmCluster::kSingle)
    return nullptr;
  return a.tile_counter;
}

template <typename F>
auto dispatch(const GroupedGemmArgs& a, F&& f) {
  const GemmCluster cluster = cluster_for(a);
  const bool live = a.schedule == layout::Schedule::kLive;
  const int block_n = block_n_for(a);
  if (block_n == 0) return f(AutoLauncher{});  // live, single CTAs
  if (block_n == 256) {  // live, single CTAs
    constexpr int kS = sm90_stages_for(256);
    return fuse_act(a) ? f(Launcher<256, kS, 1, true, false, true>{}) : f(Launcher<256, kS, 1, true>{});
  }
  if (block_n == 192) {  // live only
    constexpr int kN = 192, kS = sm90_stages_for(192);
    if (cluster == GemmCluster::kPairM) return f(Launcher<kN, kS, 2, true, true>{});
    const bool pair = cluster == GemmCluster::kPairN && (a.n + kN - 1) / kN % 2 == 0;
    return pair ? f(Launcher<kN, kS, 2, true>{}) : f(Launcher<kN, kS, 1, true>{});
  }
  constexpr int kN = 128, kS = sm90_stages_for(128);
  if (cluster == GemmCluster::kPairM) return f(Launcher<kN, kS, 2, true, true>{});
  const bool pair = cluster == GemmCluster::kPairN && a.n % (2 * kN) == 0;
  if (live) return pair ? f(Launcher<kN, kS, 2, true>{}) : f(Launcher<kN, kS, 1, true>{});
  return pair ? f(Launcher<kN, kS, 2, false>{}) : f(Launcher<kN, kS, 1, false>{});
}

}  // namespace

GemmLaunchInfo sm90_fp8_grouped_gemm_1d2d_info(const GroupedGemmArgs& a) {
  GemmLaunchInfo info = dispatch(a, [](auto launcher) { return decltype(launcher)::info(); });
  info.dynamic = tile_counter_for(a) != nullptr;
  info.fused_act = fuse_act(a);
  info.d_in_l2 = a.d_evict_last && !info.fused_act && info.block_n <= 128;
  return info;
}

int sm90_fp8_grouped_gemm_1d2d_first_wave_rows(const GroupedGemmArgs& a) {
  return sm90_fp8_grouped_gemm_1d2d_info(a).ctas * 128;  // the decode body's width (block_n_for)
}

cudaError_t sm90_fp8_grouped_gemm_1d2d(const GroupedGemmArgs& a, cudaStream_t stream) {
  if (a.n % 128 || a.k % 128 || a.m_cap % 128 || a.m_pad % 4 || a.m_pad < a.m_cap || a.num_experts < 1 ||
      a.num_experts > sched::kMaxLiveExperts)
    return cudaErrorInvalidValue;
  const bool fused = fuse_act(a);
  if (fused && (a.fused_act->a2 == nullptr || a.fused_act->a2_scale == nullptr)) return cudaErrorInvalidValue;
  Sm90GemmParams p{};
  bool ok = true;
  for (int i = 0; i < 3; ++i)
    ok = ok && encode_2d(&p.map_a[i], CU_TENSOR_MAP_DATA_TYPE_UINT8, 1, a.a, a.m_cap, a.k, a_box_rows(i), 128,
                         CU_TENSOR_MAP_SWIZZLE_128B);
  // The weights are fetched into L2 in 128-byte pieces, not promoted to 256: streaming them with
  // the GEMM's boxes (BN rows x 128 bytes, rows K bytes apart) then reaches 95% of the HBM read
  // ceiling instead of 89% (fp8moe-tma-stream on the H200, docs/perf-notes.md v15).
  constexpr auto kPromoteB = CU_TENSOR_MAP_L2_PROMOTION_L2_128B;
  for (const int box : {128, 192, 256}) {  // (256: only where that width can run)
    if (box == 256 && (block_n_for(a) != 256 || fused)) continue;  // (fused: two 128-row boxes)
    ok = ok && encode_2d(&p.map_b[b_map_index(box)], CU_TENSOR_MAP_DATA_TYPE_UINT8, 1, a.b,
                         static_cast<uint64_t>(a.num_experts) * a.n, a.k, box, 128, CU_TENSOR_MAP_SWIZZLE_128B,
                         kPromoteB);
  }
  ok = ok &&
      (cluster_for(a) != GemmCluster::kPairM ||  // the half-height B box only M-pairs load
       encode_2d(&p.map_b_half, CU_TENSOR_MAP_DATA_TYPE_UINT8, 1, a.b, static_cast<uint64_t>(a.num_experts) * a.n,
                 a.k, block_n_for(a) / 2, 128, CU_TENSOR_MAP_SWIZZLE_128B, kPromoteB)) &&
      encode_2d(&p.map_sfa, CU_TENSOR_MAP_DATA_TYPE_FLOAT32, 4, a.a_scale, a.k / 128, a.m_pad, 1, 128,
                CU_TENSOR_MAP_SWIZZLE_NONE);
  // D as the 192-wide epilogue's TMA stores see it: 64 x 64 BF16 boxes (128-byte rows), 128-byte swizzle.
  ok = ok && (fused ||  // (no D then)
               encode_2d(&p.map_d, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 2, a.d, a.m_cap, a.n, 64, 64,
                         CU_TENSOR_MAP_SWIZZLE_128B));
  if (!ok) return cudaErrorInvalidValue;
  p.d = static_cast<__nv_bfloat16*>(a.d);
  p.b_scale = a.b_scale;
  p.ends = a.ends;
  p.row_expert = a.row_expert;
  p.tile_counter = tile_counter_for(a);
  p.m_cap = a.m_cap;
  p.n = a.n;
  p.k = a.k;
  p.num_experts = a.num_experts;
  p.d_evict_last = a.d_evict_last ? 1 : 0;
  if (fused) {
    p.a2 = a.fused_act->a2;
    p.a2_scale = a.fused_act->a2_scale;
    p.m_pad = a.m_pad;
    p.act = a.fused_act->act;
    p.a2_pow2 = a.fused_act->pow2 ? 1 : 0;
  }
  return dispatch(a, [&](auto launcher) { return decltype(launcher)::launch(p, stream, a.dependent_launch); });
}

#if FP8MOE_GEMM_TRACE
cudaError_t sm90_fp8_grouped_gemm_trace(uint64_t* host) {
  return kernels::detail::read_or_clear_trace(g_sm90_gemm_trace, host);
}
#endif

}  // namespace fp8moe::gemm
