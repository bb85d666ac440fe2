// Step 6 of SPEC section 2 (see unpermute.cuh).
//
// Persistent grid-stride loop over units of 8 output columns (16 bytes of out): unit u is token
// t = u / (H / 8), columns 8 * (u % (H / 8)) .. +8, so a warp covers 512 contiguous bytes of one
// output row. A thread issues the 16-byte loads of up to 8 slots' Y2 rows before using any of
// them, then accumulates the slots in order j = 0..k-1 with num::reduce_step, and stores once.
#include "kernels/unpermute.cuh"

#include "kernels/common.cuh"
#include "kernels/launch.cuh"

namespace fp8moe::kernels {
namespace {

constexpr int kThreads = 256;
constexpr int kBlocksPerSm = 3;  // 24 warps per SM: <= 80 registers
constexpr int kValues = 8;      // BF16 columns per thread (one 16-byte word)
constexpr int kSlotBatch = 8;   // slots whose loads are in flight together

__global__ void __launch_bounds__(kThreads, kBlocksPerSm) unpermute_kernel(const UnpermuteParams p) {
  detail::after_previous_kernel();  // kernels/launch.cuh
  const int64_t hidden = p.hidden_size;
  const int64_t units_per_row = hidden / kValues;
  const int64_t units = p.tokens * units_per_row;
  const int64_t live = detail::live_tokens(p.num_tokens, p.tokens);
  const int top_k = p.top_k;
  const uint16_t* __restrict__ y2 = static_cast<const uint16_t*>(p.y2);
  uint16_t* __restrict__ out = static_cast<uint16_t*>(p.out);

  for (int64_t unit = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; unit < units;
       unit += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t t = unit / units_per_row;
    const int64_t col = (unit % units_per_row) * kValues;
    float acc[kValues];
#pragma unroll
    for (int v = 0; v < kValues; ++v) acc[v] = 0.0f;
    if (t < live) {
      for (int j0 = 0; j0 < top_k; j0 += kSlotBatch) {
        uint4 y[kSlotBatch];
        float w[kSlotBatch];
        bool used[kSlotBatch];
#pragma unroll
        for (int b = 0; b < kSlotBatch; ++b) {
          const int j = j0 + b;
          const int64_t row = j < top_k ? __ldg(p.row_of + t * top_k + j) : -1;
          used[b] = row >= 0 && row < p.m_cap;
          w[b] = used[b] ? __ldg(p.topk_weights + t * top_k + j) : 0.0f;
          y[b] = used[b] ? __ldg(reinterpret_cast<const uint4*>(y2 + row * hidden + col)) : make_uint4(0, 0, 0, 0);
        }
#pragma unroll
        for (int b = 0; b < kSlotBatch; ++b) {
          if (!used[b]) continue;
          float x[kValues];
          detail::unpack_bf16x8(y[b], x);
#pragma unroll
          for (int v = 0; v < kValues; ++v) acc[v] = num::reduce_step(acc[v], w[b], x[v]);
        }
      }
    }
    *reinterpret_cast<uint4*>(out + t * hidden + col) = detail::pack_bf16x8(acc);
  }
}

}  // namespace

cudaError_t launch_unpermute(const UnpermuteParams& p, cudaStream_t stream) {
  if (p.tokens < 0 || p.top_k < 1 || p.m_cap < 0 || p.hidden_size <= 0 || p.hidden_size % layout::kGroup != 0)
    return cudaErrorInvalidValue;
  if (p.tokens == 0) return cudaSuccess;  // no output rows
  if (p.y2 == nullptr || p.topk_weights == nullptr || p.row_of == nullptr || p.out == nullptr)
    return cudaErrorInvalidValue;
  int blocks = 0;
  const int64_t needed = layout::ceil_div(p.tokens * (p.hidden_size / kValues), kThreads);
  FP8MOE_KERNEL_TRY(detail::persistent_blocks(kBlocksPerSm, needed, &blocks));
  return launch_dependent(unpermute_kernel, blocks, kThreads, 0, stream, p);
}

}  // namespace fp8moe::kernels
