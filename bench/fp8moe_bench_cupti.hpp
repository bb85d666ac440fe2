// Kernel timestamps for fp8moe-bench through the CUPTI Activity API (SPEC section 7: each sample is
// the CUPTI kernel span of one graph replay, first kernel start to last kernel end).
//
// How spans are attributed to samples (see split_replays):
//   - Only kernels launched from a CUDA graph count (CUPTI's graphId / graphNodeId are nonzero only
//     for graph launches). The bench launches its L2 flush as a plain kernel between replays and
//     captures nothing but fp8moe::run() into its graphs, so the flush (and any other plain launch)
//     is excluded by construction, without relying on kernel names.
//   - A batch launches `replays` replays of one graph on one stream, each preceded by the flush, so
//     the replays execute one after another: sorted by start time, the graph kernels of the batch
//     fall into consecutive groups of `kernels_per_replay` (the number of kernel nodes of the
//     graph). The batch must contain exactly replays * kernels_per_replay graph kernels, and each
//     group must end before the next one starts; anything else is an error, never a guess. As a
//     cross-check, the kernels of one group should share the correlation id of their cudaGraphLaunch.
//   - Kernel names only label the per-kernel breakdown (permute_metadata, quantize, gemm1,
//     act_quant, gemm2, unpermute).
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace fp8moe::bench::cupti {

struct KernelRecord {
  uint64_t start_ns = 0, end_ns = 0;  // CUPTI timestamps
  uint32_t correlation_id = 0;        // of the API call that launched it (cudaGraphLaunch for graphs)
  uint32_t graph_id = 0;              // 0 unless launched from a graph
  uint64_t graph_node_id = 0;         // 0 unless launched from a graph
  std::string name;                   // mangled kernel name
};

// Registers the buffer callbacks and enables CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL. Call before
// capturing/instantiating the graphs to be timed. False (with *error) if CUPTI refuses, e.g.
// because another tool (nsys, ncu) already owns it.
bool start(std::string* error);
// Flushes CUPTI's buffers (forced) and returns every kernel record delivered since the last call.
// The caller synchronizes the device work first. False (with *error) if CUPTI reported dropped
// records or a failure inside its callbacks.
bool take(std::vector<KernelRecord>* records, std::string* error);
// Disables kernel tracing and flushes what is left (records are discarded).
void stop();

// One graph replay: its span and its kernels (role, duration) in start order, with each kernel's
// start relative to the replay's first kernel start (start_us[i] for kernels[i]).
struct Replay {
  double span_us = 0;
  std::vector<std::pair<std::string, double>> kernels;
  std::vector<double> start_us;
};
// Splits the records of one batch into its replays as described at the top of this file. False
// (with *error) if they cannot be attributed; *warning is set if the correlation ids of a replay
// disagree with the time-order grouping (all kernels of one cudaGraphLaunch should share one).
bool split_replays(const std::vector<KernelRecord>& records, int kernels_per_replay, int replays,
                   std::vector<Replay>* out, std::string* error, std::string* warning);

// Role of a pipeline kernel from its (mangled) name: "permute_metadata", "quantize", "gemm1" /
// "gemm2" (first / second grouped GEMM of the replay, counted in *gemms_seen), "act_quant",
// "unpermute"; "kernel<index>" for anything else.
std::string kernel_role(const std::string& name, int index_in_replay, int* gemms_seen);

}  // namespace fp8moe::bench::cupti
