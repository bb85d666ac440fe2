// The C ABI (fp8moe.h) forwards faithfully to the C++ API: defaults, sizes, statuses, messages.
// tests/cpu/c_abi_smoke.c checks that the header compiles as C.
#include <gtest/gtest.h>

#include <cstring>
#include <string>

#include "common/gpu.hpp"
#include "fp8moe/fp8moe.h"
#include "fp8moe/fp8moe.hpp"

namespace {

fp8moe_config_t seed_config() {
  fp8moe_config_t c;
  fp8moe_config_init(&c);
  c.capacity = 512;
  c.hidden = 7168;
  c.intermediate = 2048;
  c.num_experts = 32;
  c.top_k = 8;
  return c;
}

fp8moe::Config same_in_cpp() {
  fp8moe::Config c;
  c.capacity = 512;
  c.hidden = 7168;
  c.intermediate = 2048;
  c.num_experts = 32;
  c.top_k = 8;
  return c;
}

bool last_error_mentions(const char* needle) { return std::string(fp8moe_last_error()).find(needle) != std::string::npos; }

TEST(CApi, ConfigInitSetsTheCppDefaults) {
  fp8moe_config_t c;
  std::memset(&c, 0x5A, sizeof(c));
  ASSERT_EQ(fp8moe_config_init(&c), FP8MOE_SUCCESS);
  const fp8moe::Config d;
  EXPECT_EQ(c.capacity, d.capacity);
  EXPECT_EQ(c.hidden, d.hidden);
  EXPECT_EQ(c.intermediate, d.intermediate);
  EXPECT_EQ(c.num_experts, d.num_experts);
  EXPECT_EQ(c.top_k, d.top_k);
  EXPECT_EQ(c.num_global_experts, d.num_global_experts);
  EXPECT_EQ(c.activation, FP8MOE_ACTIVATION_SILU);
  EXPECT_EQ(c.swiglu_alpha, d.swiglu_alpha);
  EXPECT_EQ(c.swiglu_beta, d.swiglu_beta);
  EXPECT_EQ(c.swiglu_limit, d.swiglu_limit);
  EXPECT_EQ(c.scale_format, FP8MOE_SCALE_FP32);
  EXPECT_EQ(c.schedule, FP8MOE_SCHEDULE_LIVE);
  EXPECT_EQ(fp8moe_config_init(nullptr), FP8MOE_NULL_POINTER);
}

TEST(CApi, WorkspaceSizeMatchesCpp) {
  fp8moe_config_t c = seed_config();
  size_t bytes = 0;
  ASSERT_EQ(fp8moe_workspace_size(&c, &bytes), FP8MOE_SUCCESS) << fp8moe_last_error();
  EXPECT_EQ(bytes, fp8moe::workspace_size(same_in_cpp()));

  c.scale_format = FP8MOE_SCALE_UE8M0_PACKED;  // has a layout even though no GEMM reads it yet
  fp8moe::Config cpp = same_in_cpp();
  cpp.scale_format = fp8moe::ScaleFormat::kUe8m0Packed;
  ASSERT_EQ(fp8moe_workspace_size(&c, &bytes), FP8MOE_SUCCESS) << fp8moe_last_error();
  EXPECT_EQ(bytes, fp8moe::workspace_size(cpp));
}

TEST(CApi, WorkspaceSizeOfBadConfigIsZeroWithTheStatus) {
  fp8moe_config_t c = seed_config();
  c.hidden = 300;
  size_t bytes = 123;
  EXPECT_EQ(fp8moe_workspace_size(&c, &bytes), FP8MOE_INVALID_SHAPE);
  EXPECT_EQ(bytes, 0u);
  EXPECT_TRUE(last_error_mentions("hidden=300")) << fp8moe_last_error();

  c = seed_config();
  c.schedule = 9;
  EXPECT_EQ(fp8moe_workspace_size(&c, &bytes), FP8MOE_INVALID_ARGUMENT);
  EXPECT_TRUE(last_error_mentions("schedule=9")) << fp8moe_last_error();

  EXPECT_EQ(fp8moe_workspace_size(nullptr, &bytes), FP8MOE_NULL_POINTER);
  EXPECT_TRUE(last_error_mentions("config")) << fp8moe_last_error();
  EXPECT_EQ(fp8moe_workspace_size(&c, nullptr), FP8MOE_NULL_POINTER);
}

TEST(CApi, ValidateAndRunReportArgumentErrors) {
  const fp8moe_config_t c = seed_config();
  size_t bytes = 0;
  ASSERT_EQ(fp8moe_workspace_size(&c, &bytes), FP8MOE_SUCCESS);
  fp8moe_args_t a = {};
  a.num_rows = 16;
  a.hidden = reinterpret_cast<const void*>(0x10000);
  a.topk_ids = reinterpret_cast<const int32_t*>(0x20000);
  a.topk_weights = reinterpret_cast<const float*>(0x30008);  // misaligned
  a.w13 = reinterpret_cast<const void*>(0x40000);
  a.w13_scale = reinterpret_cast<const float*>(0x50000);
  a.w2 = reinterpret_cast<const void*>(0x60000);
  a.w2_scale = reinterpret_cast<const float*>(0x70000);
  a.out = reinterpret_cast<void*>(0x80000);
  a.workspace = reinterpret_cast<void*>(0x100000);
  a.workspace_bytes = bytes;
  EXPECT_EQ(fp8moe_validate(&c, &a), FP8MOE_MISALIGNED);
  EXPECT_TRUE(last_error_mentions("args.topk_weights")) << fp8moe_last_error();
  EXPECT_EQ(fp8moe_run(&c, &a, nullptr), FP8MOE_MISALIGNED);

  a.topk_weights = reinterpret_cast<const float*>(0x30000);
  a.workspace_bytes = bytes - 256;
  EXPECT_EQ(fp8moe_validate(&c, &a), FP8MOE_WORKSPACE_TOO_SMALL);
  a.workspace_bytes = bytes;
  a.w2 = nullptr;
  EXPECT_EQ(fp8moe_run(&c, &a, nullptr), FP8MOE_NULL_POINTER);
  EXPECT_TRUE(last_error_mentions("args.w2")) << fp8moe_last_error();

  EXPECT_EQ(fp8moe_run(&c, nullptr, nullptr), FP8MOE_NULL_POINTER);
  EXPECT_EQ(fp8moe_run(nullptr, &a, nullptr), FP8MOE_NULL_POINTER);
  EXPECT_EQ(fp8moe_validate(nullptr, nullptr), FP8MOE_NULL_POINTER);
}

TEST(CApi, ValidateWithoutArgsChecksTheConfigAndTheDevice) {
  fp8moe_config_t c = seed_config();
  const fp8moe_status_t expected = static_cast<fp8moe_status_t>(fp8moe::validate(same_in_cpp()));
  EXPECT_EQ(fp8moe_validate(&c, nullptr), expected);
  c.activation = 5;
  EXPECT_EQ(fp8moe_validate(&c, nullptr), FP8MOE_INVALID_ARGUMENT);
  EXPECT_TRUE(last_error_mentions("activation=5")) << fp8moe_last_error();
}

TEST(CApi, ErrorCounterAndStatusStrings) {
  const fp8moe_config_t c = seed_config();
  const char* base = reinterpret_cast<const char*>(0x100000);
  EXPECT_EQ(reinterpret_cast<const char*>(fp8moe_error_counter(&c, base)),
            base + fp8moe::workspace_layout(same_in_cpp()).error_count);
  EXPECT_EQ(fp8moe_error_counter(nullptr, base), nullptr);
  for (int s = FP8MOE_SUCCESS; s <= FP8MOE_CUDA_ERROR; ++s)
    EXPECT_STREQ(fp8moe_status_string(static_cast<fp8moe_status_t>(s)),
                 fp8moe::status_string(static_cast<fp8moe::Status>(s)));
}

}  // namespace
