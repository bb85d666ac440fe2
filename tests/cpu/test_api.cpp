// Host API: every validation error of SPEC section 5, the workspace layout, error reporting.
// Runs without a GPU. Pointers handed to validation are fake addresses that are never valid
// memory: if validation dereferenced one, the test would crash.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <string>
#include <thread>
#include <vector>

#include "common/gpu.hpp"
#include "fp8moe/fp8moe.hpp"

namespace {

using fp8moe::Activation;
using fp8moe::Args;
using fp8moe::Config;
using fp8moe::ScaleFormat;
using fp8moe::Schedule;
using fp8moe::Status;
using fp8moe::WorkspaceLayout;

// The seed case of SPEC section 7.
Config seed_config() {
  Config c;
  c.capacity = 512;
  c.hidden = 7168;
  c.intermediate = 2048;
  c.num_experts = 32;
  c.top_k = 8;
  return c;
}

template <typename T = void>
T* fake(uintptr_t address) {
  return reinterpret_cast<T*>(address);
}

// Distinct 256-aligned fake device addresses for every pointer, and a workspace of the right size.
Args valid_args(const Config& c) {
  Args a;
  a.num_rows = c.capacity;
  a.hidden = fake(0x10000);
  a.topk_ids = fake<const int32_t>(0x20000);
  a.topk_weights = fake<const float>(0x30000);
  a.num_tokens = fake<const int32_t>(0x40000);
  a.expert_map = c.num_global_experts > 0 ? fake<const int32_t>(0x50000) : nullptr;
  a.w13 = fake(0x60000);
  a.w13_scale = fake<const float>(0x70000);
  a.w2 = fake(0x80000);
  a.w2_scale = fake<const float>(0x90000);
  a.out = fake(0xA0000);
  a.workspace = fake(0x100000);
  a.workspace_bytes = fp8moe::workspace_size(c);
  return a;
}

// What stage 3 (support) says for a valid SM90 configuration on this machine.
Status device_status() {
  const int arch = fp8moe::test::gpu_arch();
  if (arch == 0) return Status::kCudaError;
  return arch == 90 ? Status::kSuccess : Status::kUnsupported;
}

void expect_error(Status got, Status want, const std::string& needle) {
  EXPECT_EQ(got, want) << "got " << fp8moe::status_string(got) << ": " << fp8moe::last_error();
  const std::string message = fp8moe::last_error();
  EXPECT_NE(message.find(needle), std::string::npos) << "message \"" << message << "\" should mention " << needle;
  EXPECT_EQ(message.rfind("fp8moe", 0), 0u) << message;
}

size_t round256(size_t x) { return (x + 255) / 256 * 256; }

// ---- stage 1: the configuration -------------------------------------------------------------------

struct ConfigCase {
  const char* name;
  std::function<void(Config&)> mutate;
  Status status;
  const char* needle;  // must appear in last_error()
};

const std::vector<ConfigCase>& bad_configs() {
  static const std::vector<ConfigCase> cases = {
      {"hidden_not_multiple", [](Config& c) { c.hidden = 300; }, Status::kInvalidShape, "hidden=300"},
      {"hidden_zero", [](Config& c) { c.hidden = 0; }, Status::kInvalidShape, "hidden=0"},
      {"hidden_negative", [](Config& c) { c.hidden = -128; }, Status::kInvalidShape, "hidden=-128"},
      {"hidden_huge", [](Config& c) { c.hidden = int64_t{1} << 40; }, Status::kInvalidShape, "hidden=1099511627776"},
      {"intermediate_not_multiple", [](Config& c) { c.intermediate = 2000; }, Status::kInvalidShape,
       "intermediate=2000"},
      {"intermediate_zero", [](Config& c) { c.intermediate = 0; }, Status::kInvalidShape, "intermediate=0"},
      {"capacity_zero", [](Config& c) { c.capacity = 0; }, Status::kInvalidShape, "capacity=0"},
      {"capacity_negative", [](Config& c) { c.capacity = -4; }, Status::kInvalidShape, "capacity=-4"},
      {"capacity_beyond_int32", [](Config& c) { c.capacity = int64_t{1} << 32; }, Status::kInvalidShape,
       "capacity=4294967296"},
      {"m_cap_beyond_int32", [](Config& c) { c.capacity = int64_t{1} << 29; }, Status::kInvalidShape, "m_cap="},
      {"workspace_beyond_size_t",
       [](Config& c) {
         c.capacity = int64_t{1} << 30;
         c.num_experts = 1;
         c.top_k = 1;
         c.hidden = c.intermediate = 2147483520;  // 2^31 - 128
       },
       Status::kInvalidShape, "size_t"},
      {"num_experts_zero", [](Config& c) { c.num_experts = 0; }, Status::kInvalidShape, "num_experts=0"},
      {"num_experts_negative", [](Config& c) { c.num_experts = -1; }, Status::kInvalidShape, "num_experts=-1"},
      {"num_experts_above_max", [](Config& c) { c.num_experts = fp8moe::kMaxExperts + 1; }, Status::kInvalidShape,
       "num_experts=513"},
      {"top_k_zero", [](Config& c) { c.top_k = 0; }, Status::kInvalidShape, "top_k=0"},
      {"top_k_above_experts", [](Config& c) { c.top_k = 33; }, Status::kInvalidShape, "top_k=33"},
      {"num_global_experts_negative", [](Config& c) { c.num_global_experts = -1; }, Status::kInvalidShape,
       "num_global_experts=-1"},
      {"top_k_above_global_experts", [](Config& c) { c.num_global_experts = 4; }, Status::kInvalidShape,
       "num_global_experts=4"},
      {"activation_out_of_range", [](Config& c) { c.activation = static_cast<Activation>(7); },
       Status::kInvalidArgument, "activation=7"},
      {"activation_negative", [](Config& c) { c.activation = static_cast<Activation>(-1); },
       Status::kInvalidArgument, "activation=-1"},
      {"swiglu_limit_nan",
       [](Config& c) {
         c.activation = Activation::kSwigluOai;
         c.swiglu_limit = std::numeric_limits<float>::quiet_NaN();
       },
       Status::kInvalidArgument, "swiglu_limit=nan"},
      {"swiglu_limit_negative",
       [](Config& c) {
         c.activation = Activation::kSwigluOai;
         c.swiglu_limit = -1.0f;
       },
       Status::kInvalidArgument, "swiglu_limit=-1"},
      {"swiglu_alpha_infinite",
       [](Config& c) {
         c.activation = Activation::kSwigluOai;
         c.swiglu_alpha = std::numeric_limits<float>::infinity();
       },
       Status::kInvalidArgument, "swiglu_alpha=inf"},
      {"swiglu_beta_nan",
       [](Config& c) {
         c.activation = Activation::kSwigluOai;
         c.swiglu_beta = std::numeric_limits<float>::quiet_NaN();
       },
       Status::kInvalidArgument, "swiglu_beta=nan"},
      {"scale_format_out_of_range", [](Config& c) { c.scale_format = static_cast<ScaleFormat>(3); },
       Status::kInvalidArgument, "scale_format=3"},
      {"schedule_out_of_range", [](Config& c) { c.schedule = static_cast<Schedule>(2); }, Status::kInvalidArgument,
       "schedule=2"},
  };
  return cases;
}

class BadConfig : public ::testing::TestWithParam<ConfigCase> {};

TEST_P(BadConfig, RejectedEverywhereWithMessageNamingTheField) {
  const ConfigCase& tc = GetParam();
  Config c = seed_config();
  tc.mutate(c);

  expect_error(fp8moe::validate(c), tc.status, tc.needle);
  expect_error(fp8moe::validate(c, valid_args(seed_config())), tc.status, tc.needle);
  expect_error(fp8moe::run(c, valid_args(seed_config()), nullptr), tc.status, tc.needle);

  EXPECT_EQ(fp8moe::workspace_size(c), 0u);
  const WorkspaceLayout w = fp8moe::workspace_layout(c);
  EXPECT_EQ(w.total, 0u);
  EXPECT_EQ(w.m_cap, 0);
  EXPECT_EQ(w.y2, 0u);
  EXPECT_EQ(fp8moe::error_counter(c, fake(0x100000)), nullptr);
}

// Printing the case as its name makes ctest list "Api/BadConfig.<test>/<case name>".
void PrintTo(const ConfigCase& c, std::ostream* os) { *os << c.name; }

INSTANTIATE_TEST_SUITE_P(Api, BadConfig, ::testing::ValuesIn(bad_configs()));

TEST(Api, SwigluParametersAreIgnoredForSilu) {
  Config c = seed_config();
  c.swiglu_limit = std::numeric_limits<float>::quiet_NaN();
  c.swiglu_alpha = std::numeric_limits<float>::infinity();
  EXPECT_GT(fp8moe::workspace_size(c), 0u) << fp8moe::last_error();
}

TEST(Api, SwigluLimitZeroAndInfinityAreValid) {
  for (float limit : {0.0f, 7.0f, std::numeric_limits<float>::infinity()}) {
    Config c = seed_config();
    c.activation = Activation::kSwigluOai;
    c.swiglu_limit = limit;
    EXPECT_GT(fp8moe::workspace_size(c), 0u) << "limit " << limit << ": " << fp8moe::last_error();
  }
}

TEST(Api, TopKEqualToExpertsIsValid) {
  Config c = seed_config();
  c.num_experts = 8;
  c.top_k = 8;
  EXPECT_GT(fp8moe::workspace_size(c), 0u) << fp8moe::last_error();
  c.num_global_experts = 8;  // a map of exactly k experts
  EXPECT_GT(fp8moe::workspace_size(c), 0u) << fp8moe::last_error();
}

// ---- stage 2: the arguments -------------------------------------------------------------------------

TEST(Api, NumRowsOutOfRange) {
  const Config c = seed_config();
  Args a = valid_args(c);
  a.num_rows = -1;
  expect_error(fp8moe::validate(c, a), Status::kInvalidShape, "args.num_rows=-1");
  a.num_rows = c.capacity + 1;
  expect_error(fp8moe::validate(c, a), Status::kInvalidShape, "args.num_rows=513");
  expect_error(fp8moe::run(c, a, nullptr), Status::kInvalidShape, "args.num_rows=513");
}

struct PointerField {
  const char* name;
  std::function<void(Args&, uintptr_t)> set;  // set the field to an address (0 = null)
  bool required_with_rows;                    // required when num_rows > 0
  bool required_without_rows;                 // required when num_rows == 0
};

const std::vector<PointerField>& pointer_fields() {
  static const std::vector<PointerField> fields = {
      {"args.hidden", [](Args& a, uintptr_t p) { a.hidden = fake(p); }, true, false},
      {"args.topk_ids", [](Args& a, uintptr_t p) { a.topk_ids = fake<const int32_t>(p); }, true, false},
      {"args.topk_weights", [](Args& a, uintptr_t p) { a.topk_weights = fake<const float>(p); }, true, false},
      {"args.num_tokens", [](Args& a, uintptr_t p) { a.num_tokens = fake<const int32_t>(p); }, false, false},
      {"args.w13", [](Args& a, uintptr_t p) { a.w13 = fake(p); }, true, true},
      {"args.w13_scale", [](Args& a, uintptr_t p) { a.w13_scale = fake<const float>(p); }, true, true},
      {"args.w2", [](Args& a, uintptr_t p) { a.w2 = fake(p); }, true, true},
      {"args.w2_scale", [](Args& a, uintptr_t p) { a.w2_scale = fake<const float>(p); }, true, true},
      {"args.out", [](Args& a, uintptr_t p) { a.out = fake(p); }, true, false},
      {"args.workspace", [](Args& a, uintptr_t p) { a.workspace = fake(p); }, true, true},
  };
  return fields;
}

TEST(Api, NullRequiredPointersAreNamed) {
  const Config c = seed_config();
  for (const PointerField& f : pointer_fields()) {
    SCOPED_TRACE(f.name);
    Args a = valid_args(c);
    f.set(a, 0);
    if (f.required_with_rows) {
      expect_error(fp8moe::validate(c, a), Status::kNullPointer, f.name);
      expect_error(fp8moe::run(c, a, nullptr), Status::kNullPointer, f.name);
    } else {
      EXPECT_EQ(fp8moe::validate(c, a), device_status()) << fp8moe::last_error();
    }
  }
}

TEST(Api, PerRowPointersMayBeNullWithoutRows) {
  const Config c = seed_config();
  for (const PointerField& f : pointer_fields()) {
    SCOPED_TRACE(f.name);
    Args a = valid_args(c);
    a.num_rows = 0;
    f.set(a, 0);
    if (f.required_without_rows)
      expect_error(fp8moe::validate(c, a), Status::kNullPointer, f.name);
    else
      EXPECT_EQ(fp8moe::validate(c, a), device_status()) << fp8moe::last_error();
  }
}

TEST(Api, ExpertMapRequiredExactlyWithGlobalExperts) {
  Config c = seed_config();
  c.num_global_experts = 256;
  Args a = valid_args(c);
  ASSERT_NE(a.expert_map, nullptr);
  EXPECT_EQ(fp8moe::validate(c, a), device_status()) << fp8moe::last_error();
  a.expert_map = nullptr;
  expect_error(fp8moe::validate(c, a), Status::kNullPointer, "args.expert_map");

  Config no_map = seed_config();
  Args b = valid_args(no_map);
  b.expert_map = fake<const int32_t>(0x50000);
  expect_error(fp8moe::validate(no_map, b), Status::kInvalidArgument, "args.expert_map");
}

TEST(Api, MisalignedPointersAreNamed) {
  Config c = seed_config();
  c.num_global_experts = 256;
  std::vector<PointerField> fields = pointer_fields();
  fields.push_back({"args.expert_map", [](Args& a, uintptr_t p) { a.expert_map = fake<const int32_t>(p); }, true, true});
  for (const PointerField& f : fields) {
    for (uintptr_t offset : {1, 4, 8, 12}) {
      SCOPED_TRACE(std::string(f.name) + " + " + std::to_string(offset));
      Args a = valid_args(c);
      f.set(a, 0x200000 + offset);
      expect_error(fp8moe::validate(c, a), Status::kMisaligned, f.name);
      expect_error(fp8moe::run(c, a, nullptr), Status::kMisaligned, f.name);
    }
    Args a = valid_args(c);
    f.set(a, 0x200000 + 16);  // 16-byte aligned is enough
    EXPECT_EQ(fp8moe::validate(c, a), device_status()) << f.name << ": " << fp8moe::last_error();
  }
}

TEST(Api, WorkspaceTooSmall) {
  const Config c = seed_config();
  Args a = valid_args(c);
  a.workspace_bytes = fp8moe::workspace_size(c) - 1;
  expect_error(fp8moe::validate(c, a), Status::kWorkspaceTooSmall, "workspace_bytes=" + std::to_string(a.workspace_bytes));
  expect_error(fp8moe::run(c, a, nullptr), Status::kWorkspaceTooSmall, "workspace_bytes");
  a.workspace_bytes = 0;
  expect_error(fp8moe::validate(c, a), Status::kWorkspaceTooSmall, "workspace_bytes=0");
  a.workspace_bytes = fp8moe::workspace_size(c) + 1000;  // larger is fine
  EXPECT_EQ(fp8moe::validate(c, a), device_status()) << fp8moe::last_error();
}

TEST(Api, ConfigurationErrorsAreReportedBeforeArgumentErrors) {
  Config c = seed_config();
  c.hidden = 100;
  Args a;  // everything null
  expect_error(fp8moe::validate(c, a), Status::kInvalidShape, "hidden=100");
}

// ---- stage 3: support -----------------------------------------------------------------------------

TEST(Api, Ue8m0ScalesHaveALayoutButNoGemmYet) {
  Config c = seed_config();
  c.scale_format = ScaleFormat::kUe8m0Packed;
  EXPECT_GT(fp8moe::workspace_size(c), 0u);
  expect_error(fp8moe::validate(c), Status::kUnsupported, "ue8m0");
  expect_error(fp8moe::validate(c, valid_args(c)), Status::kUnsupported, "SM100");
}

TEST(Api, ValidConfigurationDependsOnlyOnTheDevice) {
  for (ScaleFormat f : {ScaleFormat::kFp32, ScaleFormat::kFp32Pow2}) {
    for (Schedule s : {Schedule::kLive, Schedule::kPadded}) {
      for (Activation act : {Activation::kSilu, Activation::kSwigluOai}) {
        Config c = seed_config();
        c.scale_format = f;
        c.schedule = s;
        c.activation = act;
        EXPECT_EQ(fp8moe::validate(c), device_status()) << fp8moe::last_error();
        EXPECT_EQ(fp8moe::validate(c, valid_args(c)), device_status()) << fp8moe::last_error();
      }
    }
  }
}

TEST(Api, WithoutAGpuValidInputIsACudaErrorThatSaysSo) {
  if (fp8moe::test::gpu_arch() != 0) GTEST_SKIP() << "this machine has a GPU";
  const Config c = seed_config();
  expect_error(fp8moe::validate(c), Status::kCudaError, "no usable CUDA device");
  // run() with fake pointers is only safe here, where it must stop at validation.
  expect_error(fp8moe::run(c, valid_args(c), nullptr), Status::kCudaError, "no usable CUDA device");
}

// ---- the workspace layout ---------------------------------------------------------------------------

// Every buffer of WorkspaceLayout in order, with the size the layout must give it.
struct Buffer {
  const char* name;
  size_t offset;
  size_t bytes;
};

std::vector<Buffer> expected_buffers(const Config& c, const WorkspaceLayout& w) {
  const size_t E = c.num_experts, C = c.capacity, k = c.top_k, H = c.hidden, I = c.intermediate;
  const size_t mcap = w.m_cap, mpad = w.m_pad;
  auto scale_bytes = [&](size_t K) {
    const size_t groups = K / 128;
    const size_t cols = c.scale_format == ScaleFormat::kUe8m0Packed ? (groups + 3) / 4 : groups;
    return cols * mpad * 4;
  };
  return {
      {"counts", w.counts, 4 * E},
      {"ends", w.ends, 4 * E},
      {"error_count", w.error_count, 4},
      {"tile_counters", w.tile_counters, 8},
      {"row_of", w.row_of, 4 * C * k},
      {"row_expert", w.row_expert, 4 * mcap},
      {"a1", w.a1, mcap * H},
      {"a1_scale", w.a1_scale, scale_bytes(H)},
      {"y1", w.y1, mcap * 2 * I * 2},
      {"a2", w.a2, mcap * I},
      {"a2_scale", w.a2_scale, scale_bytes(I)},
      {"y2", w.y2, mcap * H * 2},
      {"cta_counts", w.cta_counts, C * k > 4096 ? 4 * std::min<size_t>(128, (C * k + 1023) / 1024) * (E + 1) : 0},
  };
}

Config make_config(int64_t capacity, int64_t hidden, int64_t intermediate, int experts, int top_k,
                   ScaleFormat format = ScaleFormat::kFp32) {
  Config c;
  c.capacity = capacity;
  c.hidden = hidden;
  c.intermediate = intermediate;
  c.num_experts = experts;
  c.top_k = top_k;
  c.scale_format = format;
  return c;
}

TEST(Api, LayoutIsTheSumOfAlignedBuffersInOrder) {
  const std::vector<Config> configs = {
      seed_config(),
      make_config(4096, 7168, 2048, 32, 8),
      make_config(1, 128, 128, 1, 1),
      make_config(3, 384, 256, 5, 2, ScaleFormat::kUe8m0Packed),  // 3 groups -> 1 packed word
      make_config(512, 2048, 768, 128, 8, ScaleFormat::kFp32Pow2),  // Qwen3-30B-A3B
      make_config(512, 4096, 1536, 128, 8, ScaleFormat::kUe8m0Packed),  // Qwen3-235B-A22B
  };
  for (const Config& c : configs) {
    SCOPED_TRACE("C=" + std::to_string(c.capacity) + " H=" + std::to_string(c.hidden) +
                 " I=" + std::to_string(c.intermediate) + " E=" + std::to_string(c.num_experts));
    const WorkspaceLayout w = fp8moe::workspace_layout(c);
    ASSERT_GT(w.total, 0u) << fp8moe::last_error();
    const int64_t rows = c.capacity * c.top_k;
    const int64_t m_cap = (rows + std::min<int64_t>(rows, c.num_experts) * 127 + 127) / 128 * 128;  // SPEC section 2
    EXPECT_EQ(w.m_cap, m_cap);
    EXPECT_EQ(w.m_pad, (w.m_cap + 3) / 4 * 4);
    size_t expected_offset = 0;
    for (const Buffer& b : expected_buffers(c, w)) {
      SCOPED_TRACE(b.name);
      EXPECT_EQ(b.offset % 256, 0u);
      EXPECT_EQ(b.offset, expected_offset);
      expected_offset += round256(b.bytes);
    }
    EXPECT_EQ(w.total, expected_offset);
    EXPECT_EQ(fp8moe::workspace_size(c), w.total);
  }
}

TEST(Api, SeedCaseNumbers) {
  const WorkspaceLayout w = fp8moe::workspace_layout(seed_config());
  EXPECT_EQ(w.m_cap, 8192);  // round_up(512*8 + 32*127, 128)
  EXPECT_EQ(w.m_pad, 8192);
  EXPECT_EQ(w.counts, 0u);
  EXPECT_EQ(w.ends, 256u);
  EXPECT_EQ(w.error_count, 512u);
  EXPECT_EQ(w.tile_counters, 768u);
  EXPECT_EQ(w.row_of, 1024u);
  EXPECT_EQ(w.row_expert, 1024u + 16384u);
}

TEST(Api, WorkspaceGrowsWithCapacity) {
  size_t previous = 0;
  for (int64_t capacity = 1; capacity <= 8192; capacity *= 2) {
    Config c = seed_config();
    c.capacity = capacity;
    const size_t bytes = fp8moe::workspace_size(c);
    EXPECT_GT(bytes, previous) << "capacity " << capacity;
    previous = bytes;
  }
  for (int64_t capacity = 1; capacity <= 300; ++capacity) {  // never shrinks, step by step
    Config small = seed_config(), large = seed_config();
    small.capacity = capacity;
    large.capacity = capacity + 1;
    EXPECT_LE(fp8moe::workspace_size(small), fp8moe::workspace_size(large)) << "capacity " << capacity;
  }
}

TEST(Api, ErrorCounterPointsIntoTheWorkspace) {
  const Config c = seed_config();
  const WorkspaceLayout w = fp8moe::workspace_layout(c);
  const char* base = reinterpret_cast<const char*>(0x100000);
  EXPECT_EQ(reinterpret_cast<const char*>(fp8moe::error_counter(c, base)), base + w.error_count);
  EXPECT_EQ(fp8moe::error_counter(c, nullptr), nullptr);
  EXPECT_NE(std::string(fp8moe::last_error()).find("workspace is null"), std::string::npos);
}

// ---- error reporting ---------------------------------------------------------------------------------

TEST(Api, StatusStringsAreDistinct) {
  std::vector<std::string> seen;
  for (int s = 0; s <= static_cast<int>(Status::kCudaError); ++s) {
    const std::string text = fp8moe::status_string(static_cast<Status>(s));
    EXPECT_FALSE(text.empty());
    EXPECT_EQ(std::find(seen.begin(), seen.end(), text), seen.end()) << text;
    seen.push_back(text);
  }
  EXPECT_EQ(std::string(fp8moe::status_string(static_cast<Status>(42))), "unknown status");
}

TEST(Api, LastErrorIsPerThread) {
  Config c = seed_config();
  c.hidden = 300;
  ASSERT_EQ(fp8moe::validate(c), Status::kInvalidShape);
  std::string other;
  std::thread([&] {
    other = fp8moe::last_error();  // nothing failed on this thread yet
    Config d = seed_config();
    d.top_k = 99;
    fp8moe::validate(d);
    other += "|" + std::string(fp8moe::last_error());
  }).join();
  EXPECT_EQ(other.substr(0, 1), "|");
  EXPECT_NE(other.find("top_k=99"), std::string::npos) << other;
  EXPECT_NE(std::string(fp8moe::last_error()).find("hidden=300"), std::string::npos) << fp8moe::last_error();
}

}  // namespace
