// Step 4 of SPEC section 2: activation + quantization of GEMM1's output.
//   a = BF16(act(g, u)) with g = Y1[r, :I], u = Y1[r, I:], then per-128-group FP8 quantization into
//   A2 [m_cap, I] and its scales (any of the three layouts of SPEC section 3).
// Schedules (SPEC section 4):
//   kLive    reads ends[] on the device and touches only live rows [start_e, end_e): no gap row and
//            no row past the live tiles is read or written.
//   kPadded  processes every one of the m_cap rows (the baseline engines run today).
// The grid depends only on shapes (persistent, grid-stride over a device-computed row count), so
// the launch is graph-capturable and correct on replay with new routing.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "layout/layout.cuh"
#include "numerics/numerics.cuh"

namespace fp8moe::kernels {

struct ActQuantParams {
  int64_t m_cap = 0;          // rows of Y1 / A2 (multiple of 128); scales use m_pad = round_up(m_cap, 4)
  int64_t max_live_rows = 0;  // C * k: the most live rows there can be (sizes the kLive grid); 0 = m_cap
  int64_t intermediate = 0;   // I, multiple of 128
  int num_experts = 0;        // E (kLive)
  const int32_t* ends = nullptr;  // int32 [E] prefix-sum layout (kLive)
  layout::Schedule schedule = layout::Schedule::kLive;
  num::ActParams act;
  layout::ScaleFormat scale_format = layout::ScaleFormat::kFp32;
  const void* y1 = nullptr;   // BF16 [m_cap, 2I]
  uint8_t* a2 = nullptr;      // FP8 [m_cap, I]
  void* a2_scale = nullptr;   // scales of a2 in scale_format
  // Y1 is dead once read: each 128-byte line of it this kernel reads is then dropped from L2
  // without a write-back (as UnpermuteParams::discard_y2 for Y2).
  bool discard_y1 = false;
};

// cudaErrorInvalidValue on bad shapes or missing pointers (E <= 6000 for kLive).
cudaError_t launch_act_quant(const ActQuantParams& p, cudaStream_t stream);

}  // namespace fp8moe::kernels
