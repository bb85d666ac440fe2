// The one place where run() turns into kernel launches (SPEC section 2, in order):
//   input quantization + permutation (src/kernels), GEMM1 (src/gemm), activation + quantization
//   (src/kernels), GEMM2 (src/gemm), unpermute + reduce (src/kernels). At prefill capacities the
//   live schedule's GEMM1 does the activation + quantization in its epilogue instead (the same A2
//   bits, no Y1 written: gemm::GroupedGemmArgs::fused_act), and act_quant is not launched.
// A fixed sequence of launches whose grids depend only on the configuration: no host sync, no
// allocation, so the whole call can be captured in a CUDA graph and replayed with new routing.
#include <cuda_runtime.h>

#include "api/internal.hpp"
#include "gemm/grouped_gemm.hpp"
#include "kernels/act_quant.cuh"
#include "kernels/permute.cuh"
#include "kernels/unpermute.cuh"
#include "knobs/knobs.hpp"

// Investigation builds only, never the default: -DFP8MOE_PIPELINE_ABLATE=N leaves stages out of the
// launch sequence to bound what fusing them into their neighbours could save (bit 1: act_quant in
// captured graphs, so GEMM2 reads the A2 that the last call outside a graph left in the workspace:
// run `fp8moe-bench --eager-first`, or it reads zeros, which draw less power and made the saving
// at prefill look twice its size (perf notes v32); bit 2: unpermute, `out` keeps its contents; bit
// 4, in kernels/act_quant.cu: act_quant is launched but returns after its wait, the cost of a
// launch kept only for the cases a fused GEMM1 could not cover). Results are wrong in these builds;
// only fp8moe-bench's timings mean anything (perf notes v28, v32).
#ifndef FP8MOE_PIPELINE_ABLATE
#define FP8MOE_PIPELINE_ABLATE 0
#endif

namespace fp8moe::detail {
namespace {

template <typename T>
T* at(const Args& args, size_t offset) {
  return reinterpret_cast<T*>(static_cast<char*>(args.workspace) + offset);
}

Status check(cudaError_t e, const char* stage) {
  if (e == cudaSuccess) return Status::kSuccess;
  return fail(Status::kCudaError, "fp8moe::run: %s failed: %s", stage, cudaGetErrorString(e));
}

}  // namespace

Status launch_pipeline(const Config& config, const Args& args, const WorkspaceLayout& layout,
                       cudaStream_t stream) {
  const bool live = config.schedule == Schedule::kLive;
  const auto format = static_cast<fp8moe::layout::ScaleFormat>(config.scale_format);
  int32_t* ends = at<int32_t>(args, layout.ends);
  int32_t* row_expert = at<int32_t>(args, layout.row_expert);
  int32_t* row_of = at<int32_t>(args, layout.row_of);

  // No rows at all: nothing to route or write, but the error counter still speaks for this run.
  if (args.num_rows == 0)
    return check(cudaMemsetAsync(at<int32_t>(args, layout.error_count), 0, sizeof(int32_t), stream), "reset");

  kernels::PermuteParams perm;
  perm.tokens = args.num_rows;
  perm.capacity = config.capacity;
  perm.hidden_size = config.hidden;
  perm.num_experts = config.num_experts;
  perm.top_k = config.top_k;
  perm.num_global_experts = config.num_global_experts;
  perm.topk_ids = args.topk_ids;
  perm.num_tokens = args.num_tokens;
  perm.expert_map = args.expert_map;
  perm.counts = at<int32_t>(args, layout.counts);
  perm.ends = ends;
  perm.error_count = at<int32_t>(args, layout.error_count);
  perm.row_of = row_of;
  perm.row_expert = live ? nullptr : row_expert;  // only the padded GEMMs read it
  int32_t* tile_counters = at<int32_t>(args, layout.tile_counters);
  perm.gemm_tile_counters = tile_counters;
  perm.metadata_ctas = kernels::metadata_ctas(config.capacity, config.top_k);
  perm.cta_counts = at<int32_t>(args, layout.cta_counts);
  perm.hidden = args.hidden;
  perm.scale_format = format;
  perm.a1 = at<uint8_t>(args, layout.a1);
  perm.a1_scale = at<void>(args, layout.a1_scale);

  gemm::GroupedGemmArgs g;
  g.ends = ends;
  g.row_expert = row_expert;
  g.m_cap = layout.m_cap;
  g.m_pad = layout.m_pad;
  g.num_experts = config.num_experts;
  g.schedule = static_cast<fp8moe::layout::Schedule>(config.schedule);
  g.dependent_launch = true;  // ends[] and row_expert come from the metadata kernel, two or more launches back

  g.tile_counter = tile_counters;  // (zeroed by the metadata kernel, two or more launches back)
  g.a = perm.a1;
  g.a_scale = static_cast<const float*>(perm.a1_scale);
  g.b = static_cast<const uint8_t*>(args.w13);
  g.b_scale = args.w13_scale;
  g.d = at<void>(args, layout.y1);
  g.n = static_cast<int>(2 * config.intermediate);
  g.k = static_cast<int>(config.hidden);
  if (live && knobs::warm_kblocks() > 0) {  // GEMM1's first weights into L2 beside the metadata kernel
    perm.warm_rows = gemm::sm90_fp8_grouped_gemm_1d2d_first_wave_rows(g);
    perm.warm_kblocks = knobs::warm_kblocks();
    perm.w13_rows = g.n;
    perm.w13 = perm.warm_rows > 0 ? g.b : nullptr;
  }
  // GEMM1's activation epilogue (where the GEMM takes it): SM90's scale formats only (the GEMM's
  // A-scale layouts).
  uint8_t* a2 = at<uint8_t>(args, layout.a2);
  void* a2_scale = at<void>(args, layout.a2_scale);
  gemm::FusedActQuant fused;
  fused.a2 = a2;
  fused.a2_scale = static_cast<float*>(a2_scale);
  fused.act = act_params(config);
  fused.pow2 = format == fp8moe::layout::ScaleFormat::kFp32Pow2;
  if (format != fp8moe::layout::ScaleFormat::kUe8m0Packed) g.fused_act = &fused;
  // Y1 is read once, by act_quant: kept in L2 and dropped once read, as Y2 below (not where GEMM1
  // runs the activation itself and never writes Y1).
  g.d_evict_last = live && !knobs::y1_in_l2_off();
  const gemm::GemmLaunchInfo gemm1 = gemm::sm90_fp8_grouped_gemm_1d2d_info(g);
  const bool fused_act = gemm1.fused_act;
  if (Status s = check(kernels::launch_permute(perm, stream), "permutation"); s != Status::kSuccess) return s;
  if (Status s = check(gemm::sm90_fp8_grouped_gemm_1d2d(g, stream), "GEMM1"); s != Status::kSuccess) return s;
  g.fused_act = nullptr;

  kernels::ActQuantParams act;
  act.m_cap = layout.m_cap;
  act.max_live_rows = config.capacity * config.top_k;
  act.intermediate = config.intermediate;
  act.num_experts = config.num_experts;
  act.ends = ends;
  act.schedule = g.schedule;
  act.act = act_params(config);
  act.scale_format = format;
  act.y1 = g.d;
  act.a2 = a2;
  act.a2_scale = a2_scale;
  act.discard_y1 = gemm1.d_in_l2;
  bool leave_out_act = fused_act;
  if (FP8MOE_PIPELINE_ABLATE & 1) {
    cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
    leave_out_act = leave_out_act || cudaStreamIsCapturing(stream, &capture) != cudaSuccess ||
                    capture != cudaStreamCaptureStatusNone;
  }
  if (!leave_out_act)
    if (Status s = check(kernels::launch_act_quant(act, stream), "activation+quantization"); s != Status::kSuccess)
      return s;

  g.tile_counter = tile_counters + 1;
  g.a = act.a2;
  g.a_scale = static_cast<const float*>(act.a2_scale);
  g.b = static_cast<const uint8_t*>(args.w2);
  g.b_scale = args.w2_scale;
  g.d = at<void>(args, layout.y2);
  g.n = static_cast<int>(config.hidden);
  g.k = static_cast<int>(config.intermediate);
  // Y2 is read once, by the unpermutation: at decode GEMM2 writes its rows with an L2 evict_last
  // policy, so that the weights streaming past do not push them out to HBM while GEMM2 streams,
  // and the unpermutation drops each line once read, so they never reach HBM (kept in L2 without
  // the drop, the next call's GEMM1 paid for their write-back: perf notes v47). The drop follows
  // where the GEMM applies the policy (GemmLaunchInfo::d_in_l2: 128-wide tiles, so decode and
  // mid sizes, not prefill capacities); not the padded baseline, which runs as engines do.
  g.d_evict_last = live && !knobs::y2_in_l2_off();
  const bool y2_in_l2 = gemm::sm90_fp8_grouped_gemm_1d2d_info(g).d_in_l2;
  if (Status s = check(gemm::sm90_fp8_grouped_gemm_1d2d(g, stream), "GEMM2"); s != Status::kSuccess) return s;

  kernels::UnpermuteParams un;
  un.tokens = args.num_rows;
  un.hidden_size = config.hidden;
  un.top_k = config.top_k;
  un.m_cap = layout.m_cap;
  un.y2 = g.d;
  un.topk_weights = args.topk_weights;
  un.row_of = row_of;
  un.num_tokens = args.num_tokens;
  un.out = args.out;
  un.discard_y2 = y2_in_l2;
  if (FP8MOE_PIPELINE_ABLATE & 2) return Status::kSuccess;
  return check(kernels::launch_unpermute(un, stream), "unpermute+reduce");
}

}  // namespace fp8moe::detail
