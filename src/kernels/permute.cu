// Steps 1-2 of SPEC section 2 (see permute.cuh).
//
// permute_metadata (one CTA of W warps, W <= 32 chosen so that the tables fit 48 KB):
//   The walked slots s = t * k + j are cut into W contiguous ranges, one per warp. Walked: the live
//   slots (t < live tokens), or, when T * k is small enough that every warp's share is one batch of
//   4 x 32 slots, all T * k slots (kWalkAll; slots of tokens past the live count are then not
//   routed), so that the id loads do not wait for *num_tokens.
//   Pass 1: each warp walks its range 32 slots at a time; lanes holding the same expert find each
//     other with __match_any_sync and the lowest of them adds the group size to the warp's private
//     count table[warp][e] (no two lanes touch one entry in a step, no two warps share a row).
//   Column pass: n_e = sum over warps, and table[w][e] becomes sum_{w' < w} count[w'][e].
//   Scan: warp 0 scans round_up(n_e, 128) into start_e and writes counts[], ends[].
//   Pass 2: the same walk (a warp with one batch reuses the experts of pass 1, kept in registers);
//     a slot's row is start_e + table[warp][e] + (lanes below it with the same expert), then the
//     group's leader advances table[warp][e]. Rows are therefore in ascending (token, slot) order
//     inside every expert, fixed by the data alone.
//   Finally row_of = -1 for the slots past the walked ones, row_expert (optional) by a binary search
//   over start[], and the error counter is overwritten with this run's count.
//
// quantize_permuted (persistent grid, 8 warps per CTA): a warp item is (live token t, chunk of 4
//   groups); the warp loads the chunk once (two 16-byte loads per lane), quantizes it and stores the
//   16-byte code slices and the scales into every row row_of[t, j] >= 0. Warps take contiguous,
//   balanced item ranges and load item n + 1 while storing item n (see quantize_permuted_kernel).
#include "kernels/permute.cuh"

#include "kernels/common.cuh"

namespace fp8moe::kernels {
namespace {

using detail::kFullMask;
using detail::kWarp;

constexpr int kMetadataMaxWarps = 32;
constexpr int kMetadataSmemInts = 48 * 1024 / 4;
constexpr int kMetadataBatch = 4;  // slot loads in flight per lane
constexpr int kQuantizeThreads = 256;
// 32 warps per SM: <= 64 registers (the next item's values and rows need more than the 48 that
// 40 warps would leave).
constexpr int kQuantizeBlocksPerSm = 4;

// Local expert of a routing id: >= 0, or -1 if the slot is not routed here (-1, or mapped to -1),
// or -1 with `invalid` set for an id (or map entry) out of range. Never indexes with a bad id.
__device__ __forceinline__ int local_expert(int32_t id, const int32_t* __restrict__ expert_map,
                                            int num_global_experts, int num_experts, bool& invalid) {
  invalid = false;
  if (id == -1) return -1;
  if (expert_map != nullptr) {
    if (id < 0 || id >= num_global_experts) {
      invalid = true;
      return -1;
    }
    id = __ldg(expert_map + id);
    if (id == -1) return -1;
  }
  if (id < 0 || id >= num_experts) {
    invalid = true;
    return -1;
  }
  return id;
}

// Issues the loads of the lane's ids of slots base + 32 * u + lane (u < kMetadataBatch), -1 at or
// past `end`, all before any is used.
__device__ __forceinline__ void load_ids(const PermuteParams& p, int base, int end, int lane,
                                         int32_t (&id)[kMetadataBatch]) {
#pragma unroll
  for (int u = 0; u < kMetadataBatch; ++u) {
    const int s = base + u * kWarp + lane;
    id[u] = s < end ? __ldg(p.topk_ids + s) : -1;
  }
}

// Local experts of those slots; slots at or past `live_end` (tokens past the live count) are not
// routed (-1, and not invalid). Returns the number of invalid ids in the batch over the whole warp
// (the same value in every lane).
__device__ __forceinline__ int experts_of(const PermuteParams& p, int base, int live_end, int lane,
                                          const int32_t (&id)[kMetadataBatch], int (&expert)[kMetadataBatch]) {
  int invalid_count = 0;
#pragma unroll
  for (int u = 0; u < kMetadataBatch; ++u) {
    const int s = base + u * kWarp + lane;
    bool invalid = false;
    expert[u] = s < live_end ? local_expert(id[u], p.expert_map, p.num_global_experts, p.num_experts, invalid) : -1;
    invalid_count += __popc(__ballot_sync(kFullMask, invalid));
  }
  return invalid_count;
}

// Live slots: live tokens * k.
__device__ __forceinline__ int live_slot_count(const PermuteParams& p) {
  return static_cast<int>(detail::live_tokens(p.num_tokens, p.tokens) * p.top_k);
}

// kWalkAll (chosen by the launcher from shapes: T * k <= W * kMetadataBatch * 32, i.e. every warp's
// share of all T * k slots is one batch): the warps walk all slots, so that the id loads need not
// wait for *num_tokens (two dependent HBM round trips become one); slots of tokens past the live
// count then count as not routed. Otherwise only the live slots are walked (decode with a large
// capacity stays cheap).
// (Launch bounds: one CTA per SM; without the 1, ptxas aims at 32 registers and spills.)
template <bool kWalkAll>
__global__ void __launch_bounds__(kMetadataMaxWarps * kWarp, 1) permute_metadata_kernel(const PermuteParams p) {
  extern __shared__ int32_t smem[];
  const int num_experts = p.num_experts;
  const int num_warps = blockDim.x / kWarp;
  const int warp = threadIdx.x / kWarp;
  const int lane = threadIdx.x % kWarp;
  int32_t* table = smem;                                // [num_warps][E]: counts, then first rows
  int32_t* start = table + num_warps * num_experts;      // [E]
  int32_t* end = start + num_experts;                    // [E]
  int32_t* warp_errors = end + num_experts;              // [32]

  const int top_k = p.top_k;
  const int all_slots = static_cast<int>(p.tokens * top_k);
  // The warps walk slots [0, walked). kWalkAll reads *num_tokens only after issuing the id loads.
  const int live_slots_early = kWalkAll ? 0 : live_slot_count(p);
  const int walked = kWalkAll ? all_slots : live_slots_early;

  // This warp's slots [lo, hi).
  const int per_warp = (walked + num_warps - 1) / num_warps;
  const int lo = min(warp * per_warp, walked);
  const int hi = min(lo + per_warp, walked);
  int32_t* my_table = table + warp * num_experts;
  const unsigned lanes_below = (1u << lane) - 1u;
  for (int e = lane; e < num_experts; e += kWarp) my_table[e] = 0;  // a private row: no block barrier
  __syncwarp();

  // ---- pass 1: per-warp counts. A warp with a single batch (always, with kWalkAll) keeps its
  //      experts in registers for pass 2.
  int errors = 0;
  int expert[kMetadataBatch];
  for (int base = lo; base < hi; base += kMetadataBatch * kWarp) {
    int32_t id[kMetadataBatch];
    load_ids(p, base, hi, lane, id);
    const int live_slots = kWalkAll ? live_slot_count(p) : live_slots_early;  // kWalkAll: overlaps the ids
    errors += experts_of(p, base, live_slots, lane, id, expert);
#pragma unroll
    for (int u = 0; u < kMetadataBatch; ++u) {
      const unsigned peers = __match_any_sync(kFullMask, expert[u]);
      if (expert[u] >= 0 && (peers & lanes_below) == 0) my_table[expert[u]] += __popc(peers);
      __syncwarp();
    }
  }
  const bool one_batch = kWalkAll || hi - lo <= kMetadataBatch * kWarp;
  if (lane == 0) warp_errors[warp] = errors;
  __syncthreads();

  // ---- rows per expert (into end[] for now), and each warp's share's first row relative to start_e:
  //      table[w][e] = sum_{w' < w} count[w'][e].
  for (int e = threadIdx.x; e < num_experts; e += blockDim.x) {
    int n = 0;
    for (int w = 0; w < num_warps; ++w) {
      const int c = table[w * num_experts + e];
      table[w * num_experts + e] = n;
      n += c;
    }
    end[e] = n;
  }
  __syncthreads();

  // ---- the prefix-sum layout
  if (warp == 0) {
    int carry = 0;  // start of the next chunk of experts
    for (int e0 = 0; e0 < num_experts; e0 += kWarp) {
      const int e = e0 + lane;
      const int n = e < num_experts ? end[e] : 0;
      const int padded = static_cast<int>(layout::round_up(n, layout::kTileM));
      int inclusive = padded;
#pragma unroll
      for (int offset = 1; offset < kWarp; offset *= 2) {
        const int v = __shfl_up_sync(kFullMask, inclusive, offset);
        if (lane >= offset) inclusive += v;
      }
      if (e < num_experts) {
        const int first = carry + inclusive - padded;
        start[e] = first;
        end[e] = first + n;
        p.counts[e] = n;
        p.ends[e] = first + n;
      }
      carry += __shfl_sync(kFullMask, inclusive, kWarp - 1);
    }
    if (lane == 0) {
      int total = 0;
      for (int w = 0; w < num_warps; ++w) total += warp_errors[w];
      *p.error_count = total;  // overwrites the previous run's count
    }
  }
  __syncthreads();

  // ---- pass 2: rows. Slot s of expert e goes to start_e + (rows of e in earlier warps and earlier
  //      steps of this warp) + (lanes below it with the same expert in this step).
  for (int base = lo; base < hi; base += kMetadataBatch * kWarp) {
    if (!one_batch) {
      int32_t id[kMetadataBatch];
      load_ids(p, base, hi, lane, id);
      experts_of(p, base, live_slots_early, lane, id, expert);
    }
#pragma unroll
    for (int u = 0; u < kMetadataBatch; ++u) {
      const int e = expert[u];
      const unsigned peers = __match_any_sync(kFullMask, e);
      const int s = base + u * kWarp + lane;
      if (s < hi) p.row_of[s] = e >= 0 ? start[e] + my_table[e] + __popc(peers & lanes_below) : -1;
      __syncwarp();  // every lane has read my_table[e] before the leader moves it
      if (e >= 0 && (peers & lanes_below) == 0) my_table[e] += __popc(peers);
      __syncwarp();
    }
  }
  for (int s = walked + threadIdx.x; s < all_slots; s += blockDim.x) p.row_of[s] = -1;

  // ---- the padded schedule's per-row expert: the last expert starting at or before r owns r
  //      if r is below its end (earlier experts end before that start).
  if (p.row_expert != nullptr) {
    const int64_t m_cap = layout::m_cap(p.capacity, p.top_k, p.num_experts);
    for (int64_t r = threadIdx.x; r < m_cap; r += blockDim.x) {
      int first_after = 1, last = num_experts;  // first e with start[e] > r lies in [1, E]
      while (first_after < last) {
        const int mid = (first_after + last) / 2;
        if (start[mid] > r) last = mid;
        else first_after = mid + 1;
      }
      const int e = first_after - 1;
      p.row_expert[r] = r < end[e] ? e : -1;
    }
  }
}

// A warp's position in its quantize_permuted item range: chunk `chunk` of live token t.
struct TokenCursor {
  int64_t t;
  int chunk;
};

// What a warp loads for one item before quantizing it: the lane's 16 BF16 values (zeros past the
// row's end) and, in lane j < min(k, 32), the row of slot j of the item's token.
struct TokenInput {
  uint4 x0, x1;
  int32_t lane_row;
};

// The lane's two 16-byte loads of chunk `chunk` of token t (none for an inactive lane).
__device__ __forceinline__ void load_values(const uint16_t* in, int64_t hidden, const TokenCursor& c, int groups,
                                            int lane, TokenInput& x) {
  const detail::LaneSlice slice = detail::lane_slice(c.chunk, groups, lane);
  x.x0 = x.x1 = make_uint4(0, 0, 0, 0);
  if (slice.active) {
    const uint16_t* src = in + c.t * hidden + slice.col;
    x.x0 = detail::load_once_16(src);
    x.x1 = detail::load_once_16(src + 8);
  }
}

// Lane j < min(k, 32): row_of[t, j] (-1 in the other lanes).
__device__ __forceinline__ int32_t load_slot_rows(const int32_t* row_of, int64_t t, int top_k, int lane) {
  return lane < min(top_k, kWarp) ? __ldg(row_of + t * top_k + lane) : -1;
}

// Stores a quantized chunk into the rows of slots [j0, j0 + n) of its token; lane j holds the row of
// slot j0 + j (n <= 32). Rows outside [0, m_cap) (only with a corrupted row_of) are skipped.
template <layout::ScaleFormat kFmt>
__device__ __forceinline__ void store_to_slots(const PermuteParams& p, int32_t lane_row, int n, int64_t m_cap,
                                               int64_t m_pad, int64_t chunk, const detail::LaneSlice& slice,
                                               int lane, const uint4& codes, float scale, uint32_t word) {
  for (int j = 0; j < n; ++j) {
    const int64_t row = __shfl_sync(kFullMask, lane_row, j);
    if (row < 0 || row >= m_cap) continue;
    detail::store_chunk(p.a1 + row * p.hidden_size, p.a1_scale, kFmt, m_pad, row, chunk, slice, lane, codes, scale,
                        word);
  }
}

// Each warp takes a contiguous, balanced range of items (token-major), so it reads a token's
// row_of[] once for all the chunks of that token it handles, and needs no division per item.
// Software pipeline: the hidden loads (and, at a token change, the row_of load) of item n + 1 are
// issued before item n is quantized and stored, so the warp's next 1 KB is in flight while its 8
// x 512 B of stores go out (32 warps: ~36 KB per SM in flight, reads being 1/5 of the traffic).
template <layout::ScaleFormat kFmt>
__global__ void __launch_bounds__(kQuantizeThreads, kQuantizeBlocksPerSm)
    quantize_permuted_kernel(const PermuteParams p) {
  const int lane = threadIdx.x % kWarp;
  const int warps_per_block = blockDim.x / kWarp;
  const int64_t hidden = p.hidden_size;
  const int groups = static_cast<int>(layout::groups_of(hidden));
  const int chunks = static_cast<int>(layout::ceil_div(groups, detail::kGroupsPerChunk));
  const int64_t m_cap = layout::m_cap(p.capacity, p.top_k, p.num_experts);
  const int64_t m_pad = layout::m_pad(m_cap);
  constexpr bool kPow2 = kFmt != layout::ScaleFormat::kFp32;
  constexpr bool kPacked = kFmt == layout::ScaleFormat::kUe8m0Packed;
  const int top_k = p.top_k;
  const uint16_t* __restrict__ in = static_cast<const uint16_t*>(p.hidden);

  int64_t first = 0, count = 0;
  detail::balanced_range(detail::live_tokens(p.num_tokens, p.tokens) * chunks,
                         static_cast<int64_t>(gridDim.x) * warps_per_block,
                         static_cast<int64_t>(blockIdx.x) * warps_per_block + threadIdx.x / kWarp, &first, &count);
  if (count <= 0) return;
  TokenCursor cur;
  cur.t = first / chunks;
  cur.chunk = static_cast<int>(first - cur.t * chunks);

  TokenInput next;
  load_values(in, hidden, cur, groups, lane, next);
  next.lane_row = load_slot_rows(p.row_of, cur.t, top_k, lane);
  for (; count > 0; --count) {
    const TokenCursor item = cur;
    const TokenInput x = next;
    if (count > 1) {
      if (++cur.chunk == chunks) {  // next token: its rows too (warp-uniform)
        cur.chunk = 0;
        ++cur.t;
        next.lane_row = load_slot_rows(p.row_of, cur.t, top_k, lane);
      }
      load_values(in, hidden, cur, groups, lane, next);
    }

    const detail::LaneSlice slice = detail::lane_slice(item.chunk, groups, lane);
    const uint32_t w[8] = {x.x0.x, x.x0.y, x.x0.z, x.x0.w, x.x1.x, x.x1.y, x.x1.z, x.x1.w};  // 16 BF16 values
    uint4 codes;
    const float scale = detail::quantize_lane<kPow2>(w, codes);
    const uint32_t word = kPacked ? detail::ue8m0_chunk_word(scale, slice.active) : 0u;
    store_to_slots<kFmt>(p, x.lane_row, min(top_k, kWarp), m_cap, m_pad, item.chunk, slice, lane, codes, scale, word);
    for (int j0 = kWarp; j0 < top_k; j0 += kWarp) {  // k > 32 only: those rows are loaded here
      const int n = min(kWarp, top_k - j0);
      const int32_t lane_row = lane < n ? __ldg(p.row_of + item.t * top_k + j0 + lane) : -1;
      store_to_slots<kFmt>(p, lane_row, n, m_cap, m_pad, item.chunk, slice, lane, codes, scale, word);
    }
  }
}

bool valid_shapes(const PermuteParams& p) {
  if (p.tokens < 0 || p.capacity < p.tokens || p.top_k < 1 || p.num_experts < 1) return false;
  if (p.num_global_experts < 0 || (p.num_global_experts > 0) != (p.expert_map != nullptr)) return false;
  // Slot and row indices are int32 inside the kernels, with room for a warp's overshoot.
  if (p.capacity * p.top_k >= (int64_t{1} << 30)) return false;
  return layout::m_cap(p.capacity, p.top_k, p.num_experts) < (int64_t{1} << 31);
}

// Warps of the metadata CTA: as many as fit (table [W][E] + start, end [E] + 32) in 48 KB, <= 32.
int metadata_warps(int num_experts) {
  const int w = (kMetadataSmemInts - kWarp) / num_experts - 2;
  return w < kMetadataMaxWarps ? w : kMetadataMaxWarps;
}

}  // namespace

cudaError_t launch_permute_metadata(const PermuteParams& p, cudaStream_t stream) {
  if (!valid_shapes(p)) return cudaErrorInvalidValue;
  if (p.counts == nullptr || p.ends == nullptr || p.error_count == nullptr) return cudaErrorInvalidValue;
  if (p.tokens > 0 && (p.topk_ids == nullptr || p.row_of == nullptr)) return cudaErrorInvalidValue;
  const int warps = metadata_warps(p.num_experts);
  if (warps < 1) return cudaErrorInvalidValue;
  const size_t smem = (static_cast<size_t>(warps + 2) * p.num_experts + kWarp) * sizeof(int32_t);
  if (p.tokens * p.top_k <= static_cast<int64_t>(warps) * kMetadataBatch * kWarp)
    permute_metadata_kernel<true><<<1, warps * kWarp, smem, stream>>>(p);
  else
    permute_metadata_kernel<false><<<1, warps * kWarp, smem, stream>>>(p);
  return cudaGetLastError();
}

cudaError_t launch_quantize_permuted(const PermuteParams& p, cudaStream_t stream) {
  if (!valid_shapes(p)) return cudaErrorInvalidValue;
  if (p.hidden_size <= 0 || p.hidden_size % layout::kGroup != 0) return cudaErrorInvalidValue;
  if (p.hidden_size >= (int64_t{1} << 30)) return cudaErrorInvalidValue;  // column offsets are int32 in the kernel
  if (p.tokens == 0) return cudaSuccess;  // nothing to read or write
  if (p.hidden == nullptr || p.row_of == nullptr || p.a1 == nullptr || p.a1_scale == nullptr)
    return cudaErrorInvalidValue;
  const int64_t chunks = layout::ceil_div(layout::groups_of(p.hidden_size), detail::kGroupsPerChunk);
  const int warps_per_block = kQuantizeThreads / kWarp;
  int blocks = 0;
  FP8MOE_KERNEL_TRY(
      detail::persistent_blocks(kQuantizeBlocksPerSm, layout::ceil_div(p.tokens * chunks, warps_per_block), &blocks));
  switch (p.scale_format) {
    case layout::ScaleFormat::kFp32:
      quantize_permuted_kernel<layout::ScaleFormat::kFp32><<<blocks, kQuantizeThreads, 0, stream>>>(p);
      break;
    case layout::ScaleFormat::kFp32Pow2:
      quantize_permuted_kernel<layout::ScaleFormat::kFp32Pow2><<<blocks, kQuantizeThreads, 0, stream>>>(p);
      break;
    case layout::ScaleFormat::kUe8m0Packed:
      quantize_permuted_kernel<layout::ScaleFormat::kUe8m0Packed><<<blocks, kQuantizeThreads, 0, stream>>>(p);
      break;
    default:
      return cudaErrorInvalidValue;
  }
  return cudaGetLastError();
}

cudaError_t launch_permute(const PermuteParams& p, cudaStream_t stream) {
  FP8MOE_KERNEL_TRY(launch_permute_metadata(p, stream));
  return launch_quantize_permuted(p, stream);
}

}  // namespace fp8moe::kernels
