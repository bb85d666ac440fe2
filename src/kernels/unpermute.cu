// Step 6 of SPEC section 2 (see unpermute.cuh).
//
// Persistent grid-stride loops over units of 8 output columns (16 bytes of out): unit u is token
// t = u / (H / 8), columns 8 * (u % (H / 8)) .. +8, so a warp covers 512 contiguous bytes of one
// output row. The zero rows of tokens t >= *num_tokens are written before the wait for GEMM2 (they
// do not depend on it), then each live unit: a thread issues the 16-byte loads of up to 8 slots'
// Y2 rows before using any of them, then accumulates the slots in order j = 0..k-1 with
// num::reduce_step, and stores once. The Y2 rows of a thread's first unit's slots (row_of) are
// loaded before the wait.
#include "kernels/unpermute.cuh"

#include "kernels/common.cuh"
#include "kernels/launch.cuh"

namespace fp8moe::kernels {
namespace {

constexpr int kThreads = 256;
constexpr int kBlocksPerSm = 3;  // 24 warps per SM: <= 80 registers
constexpr int kValues = 8;      // BF16 columns per thread (one 16-byte word)
constexpr int kSlotBatch = 8;   // slots whose loads are in flight together (and lanes per 128-byte line)

// The Y2 rows of slots j0 .. j0 + kSlotBatch - 1 of token t (-1 where not routed or past top_k).
// row_of is written by the permutation, two or more launches back, so this may run before the
// wait for GEMM2.
struct SlotRows {
  int32_t row[kSlotBatch];
};
// The Y2 row of slot j of token t (-1 where not routed or past top_k).
__device__ __forceinline__ int32_t slot_row(const UnpermuteParams& p, int64_t t, int j) {
  const int32_t row = j < p.top_k ? __ldg(p.row_of + t * p.top_k + j) : -1;
  return row >= 0 && row < p.m_cap ? row : -1;
}
__device__ __forceinline__ SlotRows load_rows(const UnpermuteParams& p, int64_t t, int j0) {
  SlotRows r;
#pragma unroll
  for (int i = 0; i < kSlotBatch; ++i) r.row[i] = slot_row(p, t, j0 + i);
  return r;
}

#if FP8MOE_UNPERMUTE_TRACE
__device__ uint64_t g_unpermute_trace[kUnpermuteTraceCtas * kUnpermuteTraceSlots];
#endif

__global__ void __launch_bounds__(kThreads, kBlocksPerSm) unpermute_kernel(const UnpermuteParams p) {
#if FP8MOE_UNPERMUTE_TRACE
  const uint64_t trace_entry = ptx::globaltimer();
#endif
  const int64_t hidden = p.hidden_size;
  const int64_t units_per_row = hidden / kValues;
  const int64_t live = detail::live_tokens(p.num_tokens, p.tokens);
  const int64_t live_units = live * units_per_row;
  const int64_t units = p.tokens * units_per_row;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  const int64_t first = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const uint16_t* __restrict__ y2 = static_cast<const uint16_t*>(p.y2);
  uint16_t* __restrict__ out = static_cast<uint16_t*>(p.out);

  // Before the wait for GEMM2 (kernels/launch.cuh; GEMM2 neither reads nor writes `out`): the
  // zero rows of tokens past *num_tokens, and the rows of this thread's first live unit's slots, so
  // that after the wait only the Y2 loads are left on the way to the first store.
  for (int64_t unit = live_units + first; unit < units; unit += stride)
    *reinterpret_cast<uint4*>(out + unit * kValues) = make_uint4(0, 0, 0, 0);  // unit * 8 = t * hidden + col
  SlotRows first_rows;
  if (first < live_units) first_rows = load_rows(p, first / units_per_row, 0);
  detail::after_previous_kernel();
#if FP8MOE_UNPERMUTE_TRACE
  const uint64_t trace_waited = ptx::globaltimer();
#endif

  // One live unit; with have_pre, `pre` holds its first slot batch's rows, already loaded.
  auto unit_out = [&](int64_t unit, const SlotRows& pre, bool have_pre) {
    const int64_t t = unit / units_per_row;
    const int64_t col = (unit % units_per_row) * kValues;
    float acc[kValues];
#pragma unroll
    for (int v = 0; v < kValues; ++v) acc[v] = 0.0f;
    for (int j0 = 0; j0 < p.top_k; j0 += kSlotBatch) {
      const SlotRows r = have_pre && j0 == 0 ? pre : load_rows(p, t, j0);
      // (discard_y2) The row of the batch's slot lane % 8, whose 128-byte line this lane's group
      // of 8 reads (unit % 8 == lane % 8 and H / 8 is a multiple of 16, so a line's 8 readers are
      // the 8 lanes of one group, live together); loaded on its own (picked from r, it put r on
      // the stack).
      const int32_t line_row = p.discard_y2 ? slot_row(p, t, j0 + static_cast<int>(threadIdx.x % kSlotBatch)) : -1;
      uint4 y[kSlotBatch];
      float w[kSlotBatch];
#pragma unroll
      for (int i = 0; i < kSlotBatch; ++i) {
        const bool used = r.row[i] >= 0;
        w[i] = used ? __ldg(p.topk_weights + t * p.top_k + j0 + i) : 0.0f;
        // (no L1 allocation: each Y2 value is read once, and with ~98 KB of loads in flight per SM
        // the L1's room for them limited the stream; perf notes v58)
        y[i] = used ? ptx::ld_global_nc_na_v4(y2 + static_cast<int64_t>(r.row[i]) * hidden + col)
                    : make_uint4(0, 0, 0, 0);
      }
#pragma unroll
      for (int i = 0; i < kSlotBatch; ++i) {
        if (r.row[i] < 0) continue;
        float x[kValues];
        detail::unpack_bf16x8(y[i], x);
#pragma unroll
        for (int v = 0; v < kValues; ++v) acc[v] = num::reduce_step(acc[v], w[i], x[v]);
      }
      if (p.discard_y2) {  // once the group's 8 lanes have their values, each drops one slot's line
        __syncwarp(0xFFu << (threadIdx.x % detail::kWarp / 8 * 8));
        if (line_row >= 0) ptx::discard_l2_line(y2 + static_cast<int64_t>(line_row) * hidden + col / 64 * 64);
      }
    }
    *reinterpret_cast<uint4*>(out + t * hidden + col) = detail::pack_bf16x8(acc);
  };
  if (first < live_units) unit_out(first, first_rows, true);
  for (int64_t unit = first + stride; unit < live_units; unit += stride) unit_out(unit, first_rows, false);
#if FP8MOE_UNPERMUTE_TRACE
  __syncthreads();
  if (threadIdx.x == 0 && blockIdx.x < kUnpermuteTraceCtas) {
    uint64_t* slot = g_unpermute_trace + blockIdx.x * kUnpermuteTraceSlots;
    slot[0] = ptx::smid();
    slot[1] = trace_entry;
    slot[2] = trace_waited;
    slot[3] = ptx::globaltimer();
  }
#endif
}

}  // namespace

#if FP8MOE_UNPERMUTE_TRACE
cudaError_t unpermute_trace(uint64_t* host) { return detail::read_or_clear_trace(g_unpermute_trace, host); }
#endif

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
