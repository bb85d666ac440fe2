// Host interface of the block-FP8 grouped GEMM (SPEC sections 2-4):
//   D[r] = dequant(A[r]) . dequant(B[e])^T  for every live row r of expert e,
// A FP8 [M_cap, K] with FP32 1x128 scales in the MN-major layout (index g * M_pad + r),
// B FP8 [E, N, K] with FP32 128x128 block scales [E, N/128, K/128], D BF16 [M_cap, N].
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "layout/layout.cuh"
#include "numerics/numerics.cuh"

namespace fp8moe::gemm {

// 2-CTA cluster variants of the SM90 kernel (for tests and experiments; run() leaves kAuto, which
// means single CTAs unless FP8MOE_GEMM_CLUSTER=2 (pairs along N, sharing A) or =2m (pairs along M,
// sharing B; live schedule only) is set).
enum class GemmCluster : int { kAuto = 0, kSingle = 1, kPairN = 2, kPairM = 3 };

// GEMM1's activation + quantization (SPEC section 2, step 4) done in its epilogue: A2 and its
// scales instead of D, the same bits as kernels::launch_act_quant writes from D (live rows only).
struct FusedActQuant {
  uint8_t* a2 = nullptr;      // FP8 E4M3 [m_cap, n / 2]
  float* a2_scale = nullptr;  // FP32 [n / 256, m_pad] (MN-major)
  num::ActParams act;
  bool pow2 = false;          // scales rounded up to powers of two (fp32_pow2)
};

struct GroupedGemmArgs {
  const uint8_t* a = nullptr;     // FP8 E4M3 [m_cap, k]
  const float* a_scale = nullptr; // FP32 [k/128, m_pad]
  const uint8_t* b = nullptr;     // FP8 E4M3 [num_experts, n, k]
  const float* b_scale = nullptr; // FP32 [num_experts, n/128, k/128]
  void* d = nullptr;              // BF16 [m_cap, n]
  const int32_t* ends = nullptr;        // kLive: int32 [num_experts]
  const int32_t* row_expert = nullptr;  // kPadded: int32 [m_cap]
  int64_t m_cap = 0;              // multiple of 128
  int64_t m_pad = 0;              // multiple of 4, >= m_cap
  int n = 0;                      // multiple of 128
  int k = 0;                      // multiple of 128
  int num_experts = 0;
  layout::Schedule schedule = layout::Schedule::kLive;
  GemmCluster cluster = GemmCluster::kAuto;
  // Launch as a programmatic dependent of the previous kernel in the stream (src/kernels/launch.cuh):
  // the prologue and the first tile's weight loads overlap that kernel's end. Only when ends[] /
  // row_expert were written at least two kernel launches earlier (the pipeline: by the metadata
  // kernel), because they are read before the wait.
  bool dependent_launch = false;
  // Optional int32 that is zero at launch (the pipeline: zeroed by the metadata kernel). With it the
  // live single-CTA kernels hand out every tile after each CTA's first from this counter in claim
  // order (dynamic tiles) instead of a fixed stride of gridDim; after the launch it holds the
  // number of tiles. FP8MOE_GEMM_DYNAMIC=0 ignores it (for A/B runs).
  int32_t* tile_counter = nullptr;
  // The live schedule's tile width: 0 the rule (or FP8MOE_GEMM_BLOCK_N); 128, 192 or 256 (single
  // CTAs, N a multiple of 256; otherwise the rule) force it.
  int block_n = 0;
  // GEMM1 (n = 2I: gate rows, then up rows) may take the activation into its epilogue: where
  // sm90_fp8_grouped_gemm_1d2d_info().fused_act says so, the kernel writes fused_act's A2 and scales
  // and no D. Only the live schedule with single CTAs at 256 columns (128 gate + 128 up) fuses:
  // prefill capacities, or block_n = 256 forced; FP8MOE_FUSED_ACT=0 turns it off.
  const FusedActQuant* fused_act = nullptr;
  // The rows of D the 128-wide tiles copy out (decode sizes: the auto kernel's 128-wide body, or
  // the fixed 128-wide kernels) are written with an L2 evict_last policy, so that the weights
  // streaming past do not evict them, and write them back to HBM, before the next kernel reads
  // them (GemmLaunchInfo::d_in_l2 says whether it applies): the pipeline's live GEMMs, whose D
  // only the next kernel reads, and then drops (ActQuantParams::discard_y1,
  // UnpermuteParams::discard_y2).
  bool d_evict_last = false;
};

// SM90 (sm_90a) persistent warp-specialised kernel: TMA producer warpgroup, two wgmma math
// warpgroups, 128x128, 128x192 or 128x256 tiles, FP32 promotion every 128 K. Graph-capturable: the grid is
// the SM count; the tile count is read on the device. Returns the launch error, if any.
cudaError_t sm90_fp8_grouped_gemm_1d2d(const GroupedGemmArgs& args, cudaStream_t stream);

// The launch shape sm90_fp8_grouped_gemm_1d2d uses for `args` (for benchmarks and notes).
struct GemmLaunchInfo {
  int ctas = 0;
  int cluster = 0;  // CTAs per cluster
  int stages = 0;
  int block_n = 0;  // 0: 128 or 192, chosen on the device from the live rows (stages likewise)
  bool pair_m = false;  // a cluster's CTAs are M-neighbours sharing B (else N-neighbours sharing A)
  bool dynamic = false;  // tiles claimed from GroupedGemmArgs::tile_counter
  bool fused_act = false;  // writes A2 (GroupedGemmArgs::fused_act) instead of D
  // GroupedGemmArgs::d_evict_last takes effect: D is written and the kernel can run 128-wide
  // tiles (block_n 128, or chosen on the device; the 192/256-wide tiles store without the policy).
  bool d_in_l2 = false;
};
GemmLaunchInfo sm90_fp8_grouped_gemm_1d2d_info(const GroupedGemmArgs& args);
// The weight rows the live kernel's first wave of tiles streams when no touched expert has more
// than 128 live rows (decode): every CTA starts on one 128-wide tile, tile ids run expert by
// expert and column block by column block, so these are the first rows of the touched experts'
// weights taken in order. For prefetching them early (the pipeline's L2 warm-up); 0 without a GPU.
int sm90_fp8_grouped_gemm_1d2d_first_wave_rows(const GroupedGemmArgs& args);

#if FP8MOE_GEMM_TRACE
// Timeline builds only (-DFP8MOE_GEMM_TRACE=1, see the kernel): [kGemmTraceCtas][kGemmTraceSlots]
// %globaltimer values per CTA: kernel entry, the start of each tile, the exit of the tile loop;
// zero where unused. A null `host` clears the buffer, otherwise it is copied there.
constexpr int kGemmTraceCtas = 160, kGemmTraceSlots = 128;
cudaError_t sm90_fp8_grouped_gemm_trace(uint64_t* host);
#endif

}  // namespace fp8moe::gemm
