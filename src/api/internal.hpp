// Pieces of the host API shared by api.cpp, pipeline.cpp and c_api.cpp. Not installed.
#pragma once

#include "fp8moe/fp8moe.hpp"
#include "numerics/numerics.cuh"

namespace fp8moe::detail {

// Records a formatted message for last_error() on this thread and returns `status`.
// Never allocates and never throws (the message is cut at 511 characters).
Status fail(Status status, const char* format, ...) __attribute__((format(printf, 2, 3)));

// Checks the configuration alone (shapes, enums, parameters: pure arithmetic, no device query)
// and, on success, fills `layout`. This is all that workspace_layout() / workspace_size() need.
Status plan(const Config& config, WorkspaceLayout* layout);

// Launches the whole pipeline. Called by run() only after validate(config, args) succeeded, with
// the layout of `config`: everything it receives is known to be well formed.
Status launch_pipeline(const Config& config, const Args& args, const WorkspaceLayout& layout,
                       cudaStream_t stream);

// The activation of `config` in the form the kernels and the CPU reference take.
inline num::ActParams act_params(const Config& config) {
  num::ActParams a;
  a.kind = config.activation == Activation::kSilu ? num::ActKind::kSilu : num::ActKind::kSwigluOai;
  a.alpha = config.swiglu_alpha;
  a.beta = config.swiglu_beta;
  a.limit = config.swiglu_limit;
  return a;
}

}  // namespace fp8moe::detail
