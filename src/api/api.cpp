// Host API: validation, the workspace layout, error reporting, run().
//
// Validation happens in three stages, in this order, and stops at the first error:
//   1. the configuration alone (pure arithmetic),
//   2. the arguments: row count, null and misaligned pointers, workspace size (pure: pointers are
//      compared, never dereferenced),
//   3. support: the scale format and the current device's compute capability (two attribute
//      queries; no allocation, no launch, no copy).
// So a bad input is reported without anything on the GPU being touched.
#include <cmath>
#include <cstdarg>
#include <cstdint>
#include <cstdio>

#include "api/internal.hpp"
#include "kernels/permute.cuh"
#include "layout/layout.cuh"

namespace fp8moe {
namespace detail {

namespace {
thread_local char t_last_error[512] = "";
}  // namespace

Status fail(Status status, const char* format, ...) {
  va_list args;
  va_start(args, format);
  std::vsnprintf(t_last_error, sizeof(t_last_error), format, args);
  va_end(args);
  return status;
}

}  // namespace detail

namespace {

using detail::fail;
using detail::plan;

constexpr size_t kBufferAlign = 256;       // every workspace buffer starts at a multiple of this
constexpr uintptr_t kPointerAlign = 16;    // SPEC section 1: all device pointers
constexpr int64_t kMaxIndex = INT32_MAX;   // ends[], row_of[] and token counts are int32

static_assert(static_cast<int>(ScaleFormat::kFp32) == static_cast<int>(layout::ScaleFormat::kFp32) &&
                  static_cast<int>(ScaleFormat::kFp32Pow2) == static_cast<int>(layout::ScaleFormat::kFp32Pow2) &&
                  static_cast<int>(ScaleFormat::kUe8m0Packed) ==
                      static_cast<int>(layout::ScaleFormat::kUe8m0Packed),
              "fp8moe::ScaleFormat and layout::ScaleFormat must agree");
static_assert(static_cast<int>(Schedule::kLive) == static_cast<int>(layout::Schedule::kLive) &&
                  static_cast<int>(Schedule::kPadded) == static_cast<int>(layout::Schedule::kPadded),
              "fp8moe::Schedule and layout::Schedule must agree");

long long ll(int64_t v) { return static_cast<long long>(v); }

// Places buffers one after another, each at the next 256-byte boundary, detecting size_t overflow.
struct Packer {
  size_t end = 0;
  bool overflow = false;

  size_t place(uint64_t count, uint64_t element_bytes) {
    const size_t at = end;
    uint64_t bytes = 0;
    size_t stop = 0;
    if (__builtin_mul_overflow(count, element_bytes, &bytes) || __builtin_add_overflow(at, bytes, &stop) ||
        stop > SIZE_MAX - kBufferAlign) {
      overflow = true;
      return 0;
    }
    end = (stop + kBufferAlign - 1) / kBufferAlign * kBufferAlign;
    return at;
  }
};

Status check_dim(const char* name, int64_t value) {
  if (value < layout::kGroup || value % layout::kGroup != 0)
    return fail(Status::kInvalidShape, "fp8moe: %s=%lld is not a positive multiple of 128", name, ll(value));
  if (value > kMaxIndex)
    return fail(Status::kInvalidShape, "fp8moe: %s=%lld exceeds %lld", name, ll(value), ll(kMaxIndex));
  return Status::kSuccess;
}

}  // namespace

// Stage 1: the configuration alone. On success fills `out` with the workspace layout.
Status detail::plan(const Config& c, WorkspaceLayout* out) {
  if (c.capacity < 1 || c.capacity > kMaxIndex)
    return fail(Status::kInvalidShape, "fp8moe: capacity=%lld must be in [1, %lld]", ll(c.capacity), ll(kMaxIndex));
  if (Status s = check_dim("hidden", c.hidden); s != Status::kSuccess) return s;
  if (Status s = check_dim("intermediate", c.intermediate); s != Status::kSuccess) return s;
  if (c.num_experts < 1 || c.num_experts > kMaxExperts)
    return fail(Status::kInvalidShape, "fp8moe: num_experts=%d must be in [1, %d]", c.num_experts, kMaxExperts);
  if (c.top_k < 1 || c.top_k > c.num_experts)
    return fail(Status::kInvalidShape, "fp8moe: top_k=%d must be in [1, num_experts=%d]", c.top_k, c.num_experts);
  if (c.num_global_experts < 0)
    return fail(Status::kInvalidShape, "fp8moe: num_global_experts=%d must be >= 0 (0 = no expert map)",
                c.num_global_experts);
  if (c.num_global_experts > 0 && c.top_k > c.num_global_experts)
    return fail(Status::kInvalidShape, "fp8moe: top_k=%d exceeds num_global_experts=%d", c.top_k,
                c.num_global_experts);

  if (c.activation != Activation::kSilu && c.activation != Activation::kSwigluOai)
    return fail(Status::kInvalidArgument, "fp8moe: activation=%d is not an Activation (0 = silu, 1 = swiglu_oai)",
                static_cast<int>(c.activation));
  if (c.activation == Activation::kSwigluOai) {
    if (std::isnan(c.swiglu_limit) || c.swiglu_limit < 0.0f)
      return fail(Status::kInvalidArgument, "fp8moe: swiglu_limit=%g must be >= 0 for swiglu_oai",
                  static_cast<double>(c.swiglu_limit));
    if (!std::isfinite(c.swiglu_alpha))
      return fail(Status::kInvalidArgument, "fp8moe: swiglu_alpha=%g must be finite",
                  static_cast<double>(c.swiglu_alpha));
    if (!std::isfinite(c.swiglu_beta))
      return fail(Status::kInvalidArgument, "fp8moe: swiglu_beta=%g must be finite",
                  static_cast<double>(c.swiglu_beta));
  }
  if (c.scale_format != ScaleFormat::kFp32 && c.scale_format != ScaleFormat::kFp32Pow2 &&
      c.scale_format != ScaleFormat::kUe8m0Packed)
    return fail(Status::kInvalidArgument,
                "fp8moe: scale_format=%d is not a ScaleFormat (0 = fp32, 1 = fp32_pow2, 2 = ue8m0_packed)",
                static_cast<int>(c.scale_format));
  if (c.schedule != Schedule::kLive && c.schedule != Schedule::kPadded)
    return fail(Status::kInvalidArgument, "fp8moe: schedule=%d is not a Schedule (0 = live, 1 = padded)",
                static_cast<int>(c.schedule));

  // capacity, top_k and num_experts are at most 2^31 here, so m_cap cannot overflow int64.
  const int64_t mcap = layout::m_cap(c.capacity, c.top_k, c.num_experts);
  if (mcap > kMaxIndex)
    return fail(Status::kInvalidShape,
                "fp8moe: capacity=%lld with top_k=%d needs m_cap=%lld permuted rows; row indices are int32 "
                "(at most %lld)",
                ll(c.capacity), c.top_k, ll(mcap), ll(kMaxIndex));

  const int64_t mpad = layout::m_pad(mcap);
  const auto format = static_cast<layout::ScaleFormat>(c.scale_format);
  WorkspaceLayout w;
  w.m_cap = mcap;
  w.m_pad = mpad;
  Packer p;
  w.counts = p.place(c.num_experts, sizeof(int32_t));
  w.ends = p.place(c.num_experts, sizeof(int32_t));
  w.error_count = p.place(1, sizeof(int32_t));
  w.tile_counters = p.place(2, sizeof(int32_t));
  w.row_of = p.place(c.capacity * c.top_k, sizeof(int32_t));
  w.row_expert = p.place(mcap, sizeof(int32_t));
  w.a1 = p.place(mcap, c.hidden);                                                    // FP8
  w.a1_scale = p.place(layout::scale_buffer_bytes(format, mpad, c.hidden), 1);
  w.y1 = p.place(mcap, 2 * c.intermediate * 2);                                      // BF16
  w.a2 = p.place(mcap, c.intermediate);                                              // FP8
  w.a2_scale = p.place(layout::scale_buffer_bytes(format, mpad, c.intermediate), 1);
  w.y2 = p.place(mcap, c.hidden * 2);                                                // BF16
  const int metadata_ctas = kernels::metadata_ctas(c.capacity, c.top_k);
  w.cta_counts = p.place(metadata_ctas > 1 ? metadata_ctas * (c.num_experts + 1) : 0, sizeof(int32_t));
  w.total = p.end;
  if (p.overflow)
    return fail(Status::kInvalidShape,
                "fp8moe: capacity=%lld, hidden=%lld, intermediate=%lld need a workspace larger than size_t holds",
                ll(c.capacity), ll(c.hidden), ll(c.intermediate));
  *out = w;
  return Status::kSuccess;
}

namespace {

// Stage 2: the arguments, against a configuration that passed stage 1.
Status check_args(const Config& c, const Args& a, const WorkspaceLayout& w) {
  if (a.num_rows < 0 || a.num_rows > c.capacity)
    return fail(Status::kInvalidShape, "fp8moe: args.num_rows=%lld must be in [0, capacity=%lld]", ll(a.num_rows),
                ll(c.capacity));
  if (c.num_global_experts == 0 && a.expert_map != nullptr)
    return fail(Status::kInvalidArgument,
                "fp8moe: args.expert_map is set but num_global_experts=0; set num_global_experts to the map's length");

  // Per-row arrays may be null only when there are no rows.
  const bool rows = a.num_rows > 0;
  struct Pointer {
    const char* name;
    const void* ptr;
    bool required;
  };
  const Pointer pointers[] = {
      {"args.hidden", a.hidden, rows},
      {"args.topk_ids", a.topk_ids, rows},
      {"args.topk_weights", a.topk_weights, rows},
      {"args.num_tokens", a.num_tokens, false},
      {"args.expert_map", a.expert_map, c.num_global_experts > 0},
      {"args.w13", a.w13, true},
      {"args.w13_scale", a.w13_scale, true},
      {"args.w2", a.w2, true},
      {"args.w2_scale", a.w2_scale, true},
      {"args.out", a.out, rows},
      {"args.workspace", a.workspace, true},
  };
  for (const Pointer& p : pointers)
    if (p.required && p.ptr == nullptr) return fail(Status::kNullPointer, "fp8moe: %s is null", p.name);
  for (const Pointer& p : pointers)
    if (reinterpret_cast<uintptr_t>(p.ptr) % kPointerAlign != 0)
      return fail(Status::kMisaligned, "fp8moe: %s=%p is not 16-byte aligned", p.name, p.ptr);

  if (a.workspace_bytes < w.total)
    return fail(Status::kWorkspaceTooSmall, "fp8moe: args.workspace_bytes=%zu is smaller than workspace_size()=%zu",
                a.workspace_bytes, w.total);
  return Status::kSuccess;
}

// Stage 3: can this build run the configuration on the current device?
Status check_support(const Config& c) {
  if (c.scale_format == ScaleFormat::kUe8m0Packed)
    return fail(Status::kUnsupported,
                "fp8moe: scale_format=ue8m0_packed (2) is for the SM100 GEMM, which is not written yet; "
                "use fp32 or fp32_pow2 on SM90");
  int device = 0, major = 0, minor = 0;
  const char* call = "cudaGetDevice";
  cudaError_t err = cudaGetDevice(&device);
  if (err == cudaSuccess) {
    call = "cudaDeviceGetAttribute";
    err = cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device);
  }
  if (err == cudaSuccess) err = cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device);
  if (err != cudaSuccess) {
    cudaGetLastError();  // our failed query is reported here, not left for the caller's next check
    return fail(Status::kCudaError, "fp8moe: no usable CUDA device: %s failed with %s (%s)", call,
                cudaGetErrorName(err), cudaGetErrorString(err));
  }
  if (major != 9 || minor != 0)
    return fail(Status::kUnsupported,
                "fp8moe: device %d has compute capability %d.%d; the GEMMs exist only for SM90 (9.0) so far", device,
                major, minor);
  return Status::kSuccess;
}

Status validate_all(const Config& config, const Args& args, WorkspaceLayout* layout) {
  if (Status s = plan(config, layout); s != Status::kSuccess) return s;
  if (Status s = check_args(config, args, *layout); s != Status::kSuccess) return s;
  return check_support(config);
}

}  // namespace

Status validate(const Config& config) {
  WorkspaceLayout layout;
  if (Status s = plan(config, &layout); s != Status::kSuccess) return s;
  return check_support(config);
}

Status validate(const Config& config, const Args& args) {
  WorkspaceLayout layout;
  return validate_all(config, args, &layout);
}

WorkspaceLayout workspace_layout(const Config& config) {
  WorkspaceLayout layout;
  if (plan(config, &layout) != Status::kSuccess) return WorkspaceLayout{};
  return layout;
}

size_t workspace_size(const Config& config) { return workspace_layout(config).total; }

Status run(const Config& config, const Args& args, cudaStream_t stream) {
  WorkspaceLayout layout;
  if (Status s = validate_all(config, args, &layout); s != Status::kSuccess) return s;
  return detail::launch_pipeline(config, args, layout, stream);
}

const int32_t* error_counter(const Config& config, const void* workspace) {
  WorkspaceLayout layout;
  if (plan(config, &layout) != Status::kSuccess) return nullptr;
  if (workspace == nullptr) {
    fail(Status::kNullPointer, "fp8moe: workspace is null");
    return nullptr;
  }
  return reinterpret_cast<const int32_t*>(static_cast<const char*>(workspace) + layout.error_count);
}

const char* status_string(Status status) {
  switch (status) {
    case Status::kSuccess: return "success";
    case Status::kInvalidShape: return "invalid shape";
    case Status::kInvalidArgument: return "invalid argument";
    case Status::kNullPointer: return "null pointer";
    case Status::kMisaligned: return "misaligned pointer";
    case Status::kUnsupported: return "unsupported";
    case Status::kWorkspaceTooSmall: return "workspace too small";
    case Status::kCudaError: return "CUDA error";
  }
  return "unknown status";
}

const char* last_error() { return detail::t_last_error; }

}  // namespace fp8moe
