// fp8moe C++ API: the expert half of a block-FP8 Mixture-of-Experts layer (SPEC.md sections 1-5).
//
//   fp8moe::Config cfg;  ... shapes, activation, scale format, schedule ...
//   size_t bytes = fp8moe::workspace_size(cfg);            // caller allocates once
//   fp8moe::Status st = fp8moe::run(cfg, args, stream);    // graph-capturable, no host sync
//   if (st != fp8moe::Status::kSuccess) puts(fp8moe::last_error());
//
// The caller owns all memory. run() validates everything first; on any error it returns without
// touching the GPU and last_error() says what was wrong.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

namespace fp8moe {

enum class Status : int {
  kSuccess = 0,
  kInvalidShape = 1,        // H, I not multiples of 128, k > E, non-positive sizes, T > capacity
  kInvalidArgument = 2,     // out-of-range enum or parameter
  kNullPointer = 3,         // a required pointer is null
  kMisaligned = 4,          // a pointer is not 16-byte aligned
  kUnsupported = 5,         // arch / activation / scale format combination not implemented
  kWorkspaceTooSmall = 6,   // workspace_bytes < workspace_size(config)
  kCudaError = 7,           // a CUDA call failed (message carries cudaGetErrorString)
};

enum class Activation : int { kSilu = 0, kSwigluOai = 1 };
// Activation-scale layouts of SPEC section 3. kFp32/kFp32Pow2 feed the SM90 GEMM, kUe8m0Packed SM100.
enum class ScaleFormat : int { kFp32 = 0, kFp32Pow2 = 1, kUe8m0Packed = 2 };
// kPadded sweeps the whole capacity (today's engines); kLive visits only live tiles and rows.
enum class Schedule : int { kLive = 0, kPadded = 1 };

// Most local experts one call supports: the grouped GEMMs keep per-expert tables in shared memory.
constexpr int kMaxExperts = 512;

struct Config {
  int64_t capacity = 0;        // C: the most tokens one call may carry (buffers are sized for it)
  int64_t hidden = 0;          // H, multiple of 128
  int64_t intermediate = 0;    // I, multiple of 128
  int num_experts = 0;         // E: local experts, 1..kMaxExperts
  int top_k = 0;               // k, 1 <= k <= E (k <= num_global_experts with an expert map)
  int num_global_experts = 0;  // length of expert_map; 0 = no map, topk ids are local ids
  Activation activation = Activation::kSilu;
  float swiglu_alpha = 1.702f;  // swiglu_oai only
  float swiglu_beta = 1.0f;
  float swiglu_limit = 7.0f;
  ScaleFormat scale_format = ScaleFormat::kFp32;
  Schedule schedule = Schedule::kLive;
};

// Device pointers, row-major, 16-byte aligned. T = num_rows.
struct Args {
  int64_t num_rows = 0;                    // T <= capacity: rows of hidden / topk / out
  const void* hidden = nullptr;            // BF16 [T, H]
  const int32_t* topk_ids = nullptr;       // int32 [T, k]; -1 = not routed here
  const float* topk_weights = nullptr;     // FP32 [T, k]
  const int32_t* num_tokens = nullptr;     // optional device scalar: rows >= *num_tokens are not routed
  const int32_t* expert_map = nullptr;     // int32 [num_global_experts] -> local id or -1 (required iff
                                           // num_global_experts > 0)
  const void* w13 = nullptr;               // FP8 E4M3 [E, 2I, H]: gate rows [0, I), up rows [I, 2I)
  const float* w13_scale = nullptr;        // FP32 [E, 2I/128, H/128]
  const void* w2 = nullptr;                // FP8 E4M3 [E, H, I]
  const float* w2_scale = nullptr;         // FP32 [E, H/128, I/128]
  void* out = nullptr;                     // BF16 [T, H]
  void* workspace = nullptr;               // workspace_size(config) bytes
  size_t workspace_bytes = 0;
};

// Byte offsets of every buffer inside the workspace (all 256-byte aligned). Exposed so that tools
// and tests can inspect intermediate stages; the contents are not an API.
struct WorkspaceLayout {
  int64_t m_cap = 0;        // permuted rows (SPEC section 2)
  int64_t m_pad = 0;        // row stride of the scale layouts
  size_t counts = 0;        // int32 [E]     rows per local expert
  size_t ends = 0;          // int32 [E]     prefix-sum layout: end row of each expert
  size_t error_count = 0;   // int32 [1]     invalid expert ids seen by the last run
  size_t tile_counters = 0; // int32 [2]     GEMM1's and GEMM2's tile claims (zeroed by every run)
  size_t row_of = 0;        // int32 [C, k]  permuted row of (t, j), -1 if not routed
  size_t row_expert = 0;    // int32 [M_cap] padded schedule: expert of each row, -1 in padding
  size_t a1 = 0;            // FP8 [M_cap, H]
  size_t a1_scale = 0;      // scales of a1 in config.scale_format
  size_t y1 = 0;            // BF16 [M_cap, 2I]
  size_t a2 = 0;            // FP8 [M_cap, I]
  size_t a2_scale = 0;      // scales of a2
  size_t y2 = 0;            // BF16 [M_cap, H]
  size_t cta_counts = 0;    // int32 [B, E+1] per-CTA expert counts of the permutation when it runs
                            //   on B > 1 CTAs (capacity * top_k > 4096); 0 bytes otherwise
  size_t total = 0;         // = workspace_size(config)
};

// Checks the configuration (no pointers), then whether this build supports it on the current
// device (an attribute query: no allocation, no launch). kSuccess or an error with last_error() set.
Status validate(const Config& config);
// Checks configuration and arguments, as run() does before launching anything. Pointers are
// compared, never dereferenced; per-row pointers (hidden, topk_ids, topk_weights, out) may be null
// only when num_rows == 0.
Status validate(const Config& config, const Args& args);

// Pure functions of the configuration (no device needed): usable on a machine without a GPU.
WorkspaceLayout workspace_layout(const Config& config);  // zeros if the config is invalid
size_t workspace_size(const Config& config);             // 0 if the config is invalid

// Runs the whole pipeline on `stream`. Fixed launch sequence, no allocation, no host sync:
// capturable in a CUDA graph, replayable with new routing and *num_tokens.
Status run(const Config& config, const Args& args, cudaStream_t stream);

// Device address of the int32 invalid-expert-id counter of the last run in this workspace
// (nullptr if the config is invalid or workspace is null).
const int32_t* error_counter(const Config& config, const void* workspace);

const char* status_string(Status status);
// Message of the last failed call on this thread ("" if none).
const char* last_error();

}  // namespace fp8moe
