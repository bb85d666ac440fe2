// CUPTI kernel tracing for fp8moe-bench: see fp8moe_bench_cupti.hpp for the attribution method.
#include "bench/fp8moe_bench_cupti.hpp"

#include <cupti.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <mutex>

namespace fp8moe::bench::cupti {
namespace {

constexpr size_t kBufferBytes = size_t(8) << 20;  // one activity buffer (~30k kernel records)

// Written by CUPTI's buffer callbacks (possibly on its own thread), read by take(). Allocated once
// and never destroyed: CUPTI may still hand back a buffer from its exit handler, after static
// destructors have run.
struct Collected {
  std::mutex mutex;
  std::vector<KernelRecord> records;
  size_t dropped = 0;
  std::string callback_error;
};
Collected& collected() {
  static Collected* c = new Collected;
  return *c;
}

std::string result_text(CUptiResult r) {
  const char* s = nullptr;
  if (cuptiGetResultString(r, &s) != CUPTI_SUCCESS || s == nullptr) return "CUPTI error " + std::to_string(int(r));
  return s;
}

void CUPTIAPI buffer_requested(uint8_t** buffer, size_t* size, size_t* max_records) {
  // Records need 8-byte alignment (ACTIVITY_RECORD_ALIGNMENT); malloc gives at least 16. On
  // failure CUPTI gets no buffer and counts the records it drops, which take() reports.
  *buffer = static_cast<uint8_t*>(std::malloc(kBufferBytes));
  *size = *buffer ? kBufferBytes : 0;
  *max_records = 0;  // as many as fit
}

void CUPTIAPI buffer_completed(CUcontext context, uint32_t stream_id, uint8_t* buffer, size_t /*size*/,
                               size_t valid_size) {
  std::vector<KernelRecord> got;
  std::string error;
  CUpti_Activity* record = nullptr;
  for (;;) {
    const CUptiResult r = cuptiActivityGetNextRecord(buffer, valid_size, &record);
    if (r == CUPTI_ERROR_MAX_LIMIT_REACHED) break;  // end of the buffer
    if (r != CUPTI_SUCCESS) {
      error = "cuptiActivityGetNextRecord: " + result_text(r);
      break;
    }
    if (record->kind != CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL && record->kind != CUPTI_ACTIVITY_KIND_KERNEL) continue;
    // The kernel record of this CUPTI version; later versions only append fields.
    const auto* k = reinterpret_cast<const CUpti_ActivityKernel10*>(record);
    KernelRecord kr;
    kr.start_ns = k->start;
    kr.end_ns = k->end;
    kr.correlation_id = k->correlationId;
    kr.graph_id = k->graphId;
    kr.graph_node_id = k->graphNodeId;
    kr.name = k->name ? k->name : "";
    got.push_back(std::move(kr));
  }
  size_t dropped = 0;
  const CUptiResult r = cuptiActivityGetNumDroppedRecords(context, stream_id, &dropped);
  if (r != CUPTI_SUCCESS && error.empty()) error = "cuptiActivityGetNumDroppedRecords: " + result_text(r);
  std::free(buffer);

  Collected& c = collected();
  std::lock_guard<std::mutex> lock(c.mutex);
  c.records.insert(c.records.end(), std::make_move_iterator(got.begin()), std::make_move_iterator(got.end()));
  c.dropped += dropped;
  if (!error.empty() && c.callback_error.empty()) c.callback_error = error;
}

}  // namespace

bool start(std::string* error) {
  CUptiResult r = cuptiActivityRegisterCallbacks(buffer_requested, buffer_completed);
  if (r != CUPTI_SUCCESS) {
    *error = "cuptiActivityRegisterCallbacks: " + result_text(r);
    return false;
  }
  r = cuptiActivityEnable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL);
  if (r != CUPTI_SUCCESS) {
    *error = "cuptiActivityEnable(CONCURRENT_KERNEL): " + result_text(r);
    return false;
  }
  return true;
}

bool take(std::vector<KernelRecord>* records, std::string* error) {
  // Forced: also hand back buffers that are not full. The caller has synchronized the stream, so
  // every record is complete; split_replays still rejects a record without timestamps.
  const CUptiResult r = cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
  Collected& c = collected();
  std::lock_guard<std::mutex> lock(c.mutex);
  records->swap(c.records);
  c.records.clear();
  bool ok = true;
  if (r != CUPTI_SUCCESS) {
    *error = "cuptiActivityFlushAll: " + result_text(r);
    ok = false;
  } else if (!c.callback_error.empty()) {
    *error = c.callback_error;
    ok = false;
  } else if (c.dropped != 0) {
    *error = "CUPTI dropped " + std::to_string(c.dropped) + " activity records";
    ok = false;
  }
  c.callback_error.clear();
  c.dropped = 0;
  return ok;
}

void stop() {
  const CUptiResult r = cuptiActivityDisable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL);
  if (r != CUPTI_SUCCESS) std::fprintf(stderr, "warning: cuptiActivityDisable: %s\n", result_text(r).c_str());
  std::vector<KernelRecord> rest;
  std::string error;
  take(&rest, &error);
}

std::string kernel_role(const std::string& name, int index_in_replay, int* gemms_seen) {
  // Checked in this order: "unpermute" and "quantize_permuted" both contain "permute".
  if (name.find("permute_count") != std::string::npos) return "permute_count";  // metadata on a grid, first half
  if (name.find("permute_metadata") != std::string::npos) return "permute_metadata";
  if (name.find("quantize_permuted") != std::string::npos) return "quantize";
  if (name.find("unpermute") != std::string::npos) return "unpermute";
  if (name.find("act_quant") != std::string::npos) return "act_quant";
  if (name.find("grouped_gemm") != std::string::npos) return ++*gemms_seen == 1 ? "gemm1" : "gemm" + std::to_string(*gemms_seen);
  return "kernel" + std::to_string(index_in_replay);
}

bool split_replays(const std::vector<KernelRecord>& records, int kernels_per_replay, int replays,
                   std::vector<Replay>* out, std::string* error, std::string* warning) {
  std::vector<const KernelRecord*> graph_kernels;
  for (const auto& r : records)
    if (r.graph_id != 0 || r.graph_node_id != 0) graph_kernels.push_back(&r);
  const size_t want = size_t(kernels_per_replay) * size_t(replays);
  if (kernels_per_replay <= 0 || graph_kernels.size() != want) {
    *error = "expected " + std::to_string(replays) + " replays x " + std::to_string(kernels_per_replay) +
             " graph kernels, CUPTI delivered " + std::to_string(graph_kernels.size()) + " graph kernels (" +
             std::to_string(records.size()) + " kernels in all)";
    return false;
  }
  for (const KernelRecord* r : graph_kernels) {
    if (r->start_ns == 0 || r->end_ns < r->start_ns) {
      *error = "kernel " + r->name + " has no valid CUPTI timestamps";
      return false;
    }
  }
  std::stable_sort(graph_kernels.begin(), graph_kernels.end(),
                   [](const KernelRecord* a, const KernelRecord* b) { return a->start_ns < b->start_ns; });
  out->clear();
  uint64_t previous_end = 0;
  bool mixed_correlation = false;
  for (int rep = 0; rep < replays; ++rep) {
    const auto first = graph_kernels.begin() + size_t(rep) * kernels_per_replay;
    uint64_t begin = UINT64_MAX, end = 0;
    Replay replay;
    int gemms = 0;
    for (int i = 0; i < kernels_per_replay; ++i) {
      const KernelRecord* k = first[i];
      begin = std::min(begin, k->start_ns);
      end = std::max(end, k->end_ns);
      mixed_correlation |= k->correlation_id != first[0]->correlation_id;
      replay.kernels.emplace_back(kernel_role(k->name, i, &gemms), (k->end_ns - k->start_ns) * 1e-3);
    }
    for (int i = 0; i < kernels_per_replay; ++i) replay.start_us.push_back((first[i]->start_ns - begin) * 1e-3);
    // Replays are separated by the flush kernel on the same stream: they cannot overlap.
    if (rep > 0 && begin < previous_end) {
      *error = "graph replay " + std::to_string(rep) + " starts before the previous one ended: kernels cannot be "
               "attributed to replays by time order";
      return false;
    }
    previous_end = end;
    replay.span_us = (end - begin) * 1e-3;
    out->push_back(std::move(replay));
  }
  // All kernels of one cudaGraphLaunch should carry its correlation id. The grouping above does not
  // depend on it (exact count, no overlap), so a disagreement is reported, not fatal.
  if (mixed_correlation)
    *warning = "a group of graph kernels (one replay by time order) carries several CUPTI correlation ids";
  return true;
}

}  // namespace fp8moe::bench::cupti
