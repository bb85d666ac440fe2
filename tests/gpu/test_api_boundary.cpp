// GPU: bad input is rejected at the API boundary without touching the GPU (SPEC section 5): no
// kernel is launched (a stream capture around the call records no node), no byte of the output or
// workspace changes, and no CUDA error is left behind.
#include <gtest/gtest.h>

#include <functional>
#include <string>
#include <vector>

#include "common/gpu.hpp"
#include "fp8moe/fp8moe.hpp"

namespace {

using fp8moe::Args;
using fp8moe::Config;
using fp8moe::Status;
using fp8moe::test::DeviceBuffer;

constexpr uint8_t kPoison = 0xA5;

Config small_config() {
  Config c;
  c.capacity = 8;
  c.hidden = 256;
  c.intermediate = 128;
  c.num_experts = 4;
  c.top_k = 2;
  return c;
}

// Real device buffers for small_config(), all of the right size.
struct Buffers {
  const Config c = small_config();
  const size_t H = c.hidden, I = c.intermediate, E = c.num_experts, T = c.capacity, k = c.top_k;
  DeviceBuffer<uint16_t> hidden{T * H}, out{T * H};
  DeviceBuffer<int32_t> topk_ids{T * k};
  DeviceBuffer<float> topk_weights{T * k};
  DeviceBuffer<uint8_t> w13{E * 2 * I * H}, w2{E * H * I};
  DeviceBuffer<float> w13_scale{E * (2 * I / 128) * (H / 128)}, w2_scale{E * (H / 128) * (I / 128)};
  DeviceBuffer<uint8_t> workspace{fp8moe::workspace_size(c)};

  Args args() const {
    Args a;
    a.num_rows = c.capacity;
    a.hidden = hidden.ptr;
    a.topk_ids = topk_ids.ptr;
    a.topk_weights = topk_weights.ptr;
    a.w13 = w13.ptr;
    a.w13_scale = w13_scale.ptr;
    a.w2 = w2.ptr;
    a.w2_scale = w2_scale.ptr;
    a.out = out.ptr;
    a.workspace = workspace.ptr;
    a.workspace_bytes = workspace.bytes();
    return a;
  }
};

template <typename T>
size_t bytes_not_poisoned(const DeviceBuffer<T>& buffer) {
  std::vector<uint8_t> bytes(buffer.bytes());
  EXPECT_EQ(cudaMemcpy(bytes.data(), buffer.ptr, bytes.size(), cudaMemcpyDeviceToHost), cudaSuccess);
  size_t changed = 0;
  for (uint8_t b : bytes) changed += b != kPoison;
  return changed;
}

TEST(ApiBoundary, BadInputTouchesNothing) {
  FP8MOE_REQUIRE_GPU();
  Buffers buf;
  ASSERT_FALSE(HasFailure());
  buf.out.poison(kPoison);
  buf.workspace.poison(kPoison);
  CUDA_OK(cudaDeviceSynchronize());

  struct Case {
    const char* name;
    Status status;
    std::function<void(Config&, Args&)> mutate;
  };
  const std::vector<Case> cases = {
      {"hidden=300", Status::kInvalidShape, [](Config& c, Args&) { c.hidden = 300; }},
      {"top_k=5", Status::kInvalidShape, [](Config& c, Args&) { c.top_k = 5; }},
      {"num_rows=9", Status::kInvalidShape, [](Config&, Args& a) { a.num_rows = 9; }},
      {"ue8m0", Status::kUnsupported,
       [](Config& c, Args&) { c.scale_format = fp8moe::ScaleFormat::kUe8m0Packed; }},
      {"w2 null", Status::kNullPointer, [](Config&, Args& a) { a.w2 = nullptr; }},
      {"out + 8", Status::kMisaligned, [](Config&, Args& a) { a.out = static_cast<char*>(a.out) + 8; }},
      {"workspace + 8", Status::kMisaligned,
       [](Config&, Args& a) { a.workspace = static_cast<char*>(a.workspace) + 8; }},
      {"workspace too small", Status::kWorkspaceTooSmall, [](Config&, Args& a) { a.workspace_bytes -= 1; }},
  };

  cudaStream_t stream = nullptr;
  CUDA_OK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  for (const Case& tc : cases) {
    SCOPED_TRACE(tc.name);
    Config c = small_config();
    Args a = buf.args();
    tc.mutate(c, a);

    CUDA_OK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal));
    const Status captured = fp8moe::run(c, a, stream);
    cudaGraph_t graph = nullptr;
    CUDA_OK(cudaStreamEndCapture(stream, &graph));
    size_t nodes = 0;
    CUDA_OK(cudaGraphGetNodes(graph, nullptr, &nodes));
    CUDA_OK(cudaGraphDestroy(graph));
    EXPECT_EQ(captured, tc.status) << fp8moe::last_error();
    EXPECT_EQ(nodes, 0u) << "run() recorded work into the stream";

    EXPECT_EQ(fp8moe::run(c, a, stream), tc.status) << fp8moe::last_error();
  }
  CUDA_OK(cudaStreamSynchronize(stream));
  CUDA_OK(cudaStreamDestroy(stream));
  CUDA_OK(cudaGetLastError());
  EXPECT_EQ(bytes_not_poisoned(buf.out), 0u) << "bytes of out changed";
  EXPECT_EQ(bytes_not_poisoned(buf.workspace), 0u) << "bytes of the workspace changed";
}

TEST(ApiBoundary, ValidInputPassesValidationOnSm90) {
  FP8MOE_REQUIRE_SM90();
  Buffers buf;
  ASSERT_FALSE(HasFailure());
  EXPECT_EQ(fp8moe::validate(buf.c), Status::kSuccess) << fp8moe::last_error();
  EXPECT_EQ(fp8moe::validate(buf.c, buf.args()), Status::kSuccess) << fp8moe::last_error();
}

}  // namespace
