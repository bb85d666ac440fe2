// C ABI (include/fp8moe/fp8moe.h): converts the C structs and forwards to the C++ API.
#include "fp8moe/fp8moe.h"

#include "api/internal.hpp"
#include "fp8moe/fp8moe.hpp"

namespace {

using fp8moe::Status;

static_assert(FP8MOE_SUCCESS == static_cast<int>(Status::kSuccess), "status values must match");
static_assert(FP8MOE_INVALID_SHAPE == static_cast<int>(Status::kInvalidShape), "status values must match");
static_assert(FP8MOE_INVALID_ARGUMENT == static_cast<int>(Status::kInvalidArgument), "status values must match");
static_assert(FP8MOE_NULL_POINTER == static_cast<int>(Status::kNullPointer), "status values must match");
static_assert(FP8MOE_MISALIGNED == static_cast<int>(Status::kMisaligned), "status values must match");
static_assert(FP8MOE_UNSUPPORTED == static_cast<int>(Status::kUnsupported), "status values must match");
static_assert(FP8MOE_WORKSPACE_TOO_SMALL == static_cast<int>(Status::kWorkspaceTooSmall), "status values must match");
static_assert(FP8MOE_CUDA_ERROR == static_cast<int>(Status::kCudaError), "status values must match");
static_assert(FP8MOE_ACTIVATION_SWIGLU_OAI == static_cast<int>(fp8moe::Activation::kSwigluOai), "enum values must match");
static_assert(FP8MOE_SCALE_UE8M0_PACKED == static_cast<int>(fp8moe::ScaleFormat::kUe8m0Packed), "enum values must match");
static_assert(FP8MOE_SCHEDULE_PADDED == static_cast<int>(fp8moe::Schedule::kPadded), "enum values must match");

fp8moe_status_t to_c(Status s) { return static_cast<fp8moe_status_t>(s); }

// Out-of-range enum values pass through unchanged (the enums have a fixed int underlying type) and
// are rejected by validation.
fp8moe::Config to_cpp(const fp8moe_config_t& c) {
  fp8moe::Config config;
  config.capacity = c.capacity;
  config.hidden = c.hidden;
  config.intermediate = c.intermediate;
  config.num_experts = c.num_experts;
  config.top_k = c.top_k;
  config.num_global_experts = c.num_global_experts;
  config.activation = static_cast<fp8moe::Activation>(c.activation);
  config.swiglu_alpha = c.swiglu_alpha;
  config.swiglu_beta = c.swiglu_beta;
  config.swiglu_limit = c.swiglu_limit;
  config.scale_format = static_cast<fp8moe::ScaleFormat>(c.scale_format);
  config.schedule = static_cast<fp8moe::Schedule>(c.schedule);
  return config;
}

fp8moe::Args to_cpp(const fp8moe_args_t& a) {
  fp8moe::Args args;
  args.num_rows = a.num_rows;
  args.hidden = a.hidden;
  args.topk_ids = a.topk_ids;
  args.topk_weights = a.topk_weights;
  args.num_tokens = a.num_tokens;
  args.expert_map = a.expert_map;
  args.w13 = a.w13;
  args.w13_scale = a.w13_scale;
  args.w2 = a.w2;
  args.w2_scale = a.w2_scale;
  args.out = a.out;
  args.workspace = a.workspace;
  args.workspace_bytes = a.workspace_bytes;
  return args;
}

fp8moe_status_t null_argument(const char* name) {
  return to_c(fp8moe::detail::fail(Status::kNullPointer, "fp8moe: %s is null", name));
}

}  // namespace

extern "C" {

fp8moe_status_t fp8moe_config_init(fp8moe_config_t* config) {
  if (config == nullptr) return null_argument("config");
  const fp8moe::Config d;
  config->capacity = d.capacity;
  config->hidden = d.hidden;
  config->intermediate = d.intermediate;
  config->num_experts = d.num_experts;
  config->top_k = d.top_k;
  config->num_global_experts = d.num_global_experts;
  config->activation = static_cast<int32_t>(d.activation);
  config->swiglu_alpha = d.swiglu_alpha;
  config->swiglu_beta = d.swiglu_beta;
  config->swiglu_limit = d.swiglu_limit;
  config->scale_format = static_cast<int32_t>(d.scale_format);
  config->schedule = static_cast<int32_t>(d.schedule);
  return FP8MOE_SUCCESS;
}

fp8moe_status_t fp8moe_validate(const fp8moe_config_t* config, const fp8moe_args_t* args) {
  if (config == nullptr) return null_argument("config");
  if (args == nullptr) return to_c(fp8moe::validate(to_cpp(*config)));
  return to_c(fp8moe::validate(to_cpp(*config), to_cpp(*args)));
}

fp8moe_status_t fp8moe_workspace_size(const fp8moe_config_t* config, size_t* bytes) {
  if (bytes == nullptr) return null_argument("bytes");
  *bytes = 0;
  if (config == nullptr) return null_argument("config");
  fp8moe::WorkspaceLayout layout;
  if (Status s = fp8moe::detail::plan(to_cpp(*config), &layout); s != Status::kSuccess) return to_c(s);
  *bytes = layout.total;
  return FP8MOE_SUCCESS;
}

fp8moe_status_t fp8moe_run(const fp8moe_config_t* config, const fp8moe_args_t* args, cudaStream_t stream) {
  if (config == nullptr) return null_argument("config");
  if (args == nullptr) return null_argument("args");
  return to_c(fp8moe::run(to_cpp(*config), to_cpp(*args), stream));
}

const int32_t* fp8moe_error_counter(const fp8moe_config_t* config, const void* workspace) {
  if (config == nullptr) {
    null_argument("config");
    return nullptr;
  }
  return fp8moe::error_counter(to_cpp(*config), workspace);
}

const char* fp8moe_status_string(fp8moe_status_t status) {
  return fp8moe::status_string(static_cast<Status>(status));
}

const char* fp8moe_last_error(void) { return fp8moe::last_error(); }

}  // extern "C"
