// How fp8moe's kernels follow one another in a stream: programmatic dependent launch (PDL).
//
// A kernel launched with launch_dependent() may start its CTAs while the kernel before it is still
// finishing, on the SMs that kernel has left. The contract every fp8moe kernel keeps:
//   - it calls after_previous_kernel() (griddepcontrol.wait, then .launch_dependents) before it
//     reads anything the previous kernel wrote, writes anything that kernel reads or writes, or
//     exits; so a kernel completes only after its predecessor has, and the next kernel starts only
//     once this one has passed its wait;
//   - hence the part of a kernel before that call runs beside its predecessor only (every kernel
//     before that one has completed): it may read what kernels two or more launches back wrote (or
//     plain inputs), and write only what its predecessor neither reads nor writes. The GEMMs use it
//     to stage ends[] and to request their first weight tiles (GroupedGemmArgs::dependent_launch);
//     the input quantization to prefetch GEMM1's first weights into L2 while the metadata kernel
//     runs (kernels/permute.cu); act_quant to build its tables from ends[]; unpermute to write the
//     zero rows of tokens past *num_tokens. Work before the wait also delays this kernel's trigger
//     of the next one when its CTAs start late: measured, quantizing the first tokens there made
//     the input quantization end ~0.8 us sooner but GEMM1 ~0.7 us later (perf notes v18).
//   - one exception: act_quant triggers GEMM2 before its own wait, and its CTAs without items exit
//     without waiting (CTA 0 always waits, so act_quant still completes only after GEMM1). GEMM2's
//     part before its wait may therefore run beside GEMM1 as well; it reads only the metadata
//     kernel's ends[] or row_expert (four launches back) and the weights. At decode GEMM2's CTAs
//     then take the SMs GEMM1 leaves while act_quant's few working CTAs run (Qwen3-30B 512/16
//     -0.4..-1.0 us, 512/1 -2.1..-2.6; perf notes v29).
// In a CUDA graph the launches become programmatic edges. FP8MOE_PDL=0 turns it off (plain
// launches; for A/B measurements; knobs/knobs.hpp).
#pragma once

#include <cuda_runtime.h>

#include "knobs/knobs.hpp"
#include "ptx/ptx.cuh"

namespace fp8moe::kernels {

// The launch attribute that makes a kernel a programmatic dependent of the previous one.
inline cudaLaunchAttribute pdl_attribute() {
  cudaLaunchAttribute a{};
  a.id = cudaLaunchAttributeProgrammaticStreamSerialization;
  a.val.programmaticStreamSerializationAllowed = 1;
  return a;
}

// The attributes of a launch_dependent launch; returns how many. Every launch prefers the largest
// L1 its shared memory leaves (carveout 0): without a preference, a kernel's CTAs placed as a
// programmatic dependent on the SMs a GEMM leaves keep the GEMM's split (~28 KB of L1 beside
// ~228 KB of shared memory), and a streaming kernel's loads in flight then lack L1 room (the
// unpermutation ran ~10% slower at prefill than launched plainly; perf notes v58). With `pdl`,
// also the programmatic dependency on the previous kernel.
inline int dependent_launch_attributes(cudaLaunchAttribute (&attr)[2], bool pdl) {
  attr[0] = cudaLaunchAttribute{};
  attr[0].id = cudaLaunchAttributePreferredSharedMemoryCarveout;
  attr[0].val.sharedMemCarveout = 0;
  if (pdl) attr[1] = pdl_attribute();
  return pdl ? 2 : 1;
}

template <typename... Params, typename... Args>
cudaError_t launch_dependent(void (*kernel)(Params...), dim3 grid, dim3 block, size_t smem, cudaStream_t stream,
                             Args... args) {
  cudaLaunchAttribute attr[2];
  cudaLaunchConfig_t c{};
  c.gridDim = grid;
  c.blockDim = block;
  c.dynamicSmemBytes = smem;
  c.stream = stream;
  c.attrs = attr;
  c.numAttrs = dependent_launch_attributes(attr, knobs::pdl());
  return cudaLaunchKernelEx(&c, kernel, args...);
}

namespace detail {
// See the contract above: every kernel calls this on every path before it touches its
// predecessor's outputs, writes, or exits.
__device__ __forceinline__ void after_previous_kernel() {
  ptx::griddep_wait();
  ptx::griddep_launch_dependents();
}
}  // namespace detail

}  // namespace fp8moe::kernels
