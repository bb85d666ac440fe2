// Steps 1-2 of SPEC section 2 (see permute.cuh).
//
// permute_metadata (one CTA of W warps, W <= 32 chosen so that the tables fit 48 KB):
//   The live slots s = t * k + j (t < live tokens) are cut into W contiguous ranges, one per warp,
//     each at least one batch of 128 slots (so at decode one warp takes them all and the sums
//     below run over the busy warps only).
//   Pass 1: each warp walks its range 32 slots at a time; lanes holding the same expert find each
//     other (same_expert_lanes: MATCH.ANY, or one ballot per bit of the expert) and the lowest of
//     them adds the group size to the warp's private count table[warp][e] (no two lanes touch one
//     entry in a step, no two warps share a row).
//   Scan: n_e = sum over warps; warp 0 scans round_up(n_e, 128) into start_e and writes counts[],
//     ends[]; then each expert's column of the table becomes the first row of each warp's share:
//     table[w][e] = start_e + sum_{w' < w} count[w'][e].
//   Pass 2: the same walk; a slot's row is table[warp][e] + (lanes below it with the same expert),
//     then the group's leader advances table[warp][e]. Rows are therefore in ascending (token, slot)
//     order inside every expert, fixed by the data alone.
//   Finally row_of = -1 for the slots of tokens past the live count, row_expert (optional) by a
//   binary search over start[], and the error counter is overwritten with this run's count.
// With more than kMetadataOneCtaSlots slots of capacity one CTA is slow (a single SM's loads and
// stores, ~70 us at 32768 slots), so a grid of B CTAs takes contiguous ranges of the slots
// (metadata_slot_range) in two launches:
//   permute_count: each CTA runs pass 1 over its range and writes its per-expert counts (and its
//     invalid ids in column E) to cta_counts[b][.];
//   permute_metadata<grid>: each CTA runs pass 1 again for its warps' shares, reads every CTA's
//     counts: n_e = sum_b, and its own base inside each expert, sum_{b' < b} cta_counts[b'][e];
//     then table[w][e] = start_e + base_e + sum_{w' < w} count[w'][e] and pass 2 as above. CTA 0
//     writes counts[], ends[] and the error counter; the tail of row_of and row_expert are shared
//     out over the grid. The rows come out exactly as with one CTA.
//
// quantize_permuted (persistent grid, 8 warps per CTA): a warp item is (live token t, chunk of 4
//   groups); the warp loads the chunk once (two 16-byte loads per lane), quantizes it and stores the
//   16-byte code slices and the scales into every row row_of[t, j] >= 0. Before its wait for the
//   metadata kernel (kernels/launch.cuh) it can warm L2 with GEMM1's first weights
//   (warm_first_weights).
#include "kernels/permute.cuh"

#include "kernels/common.cuh"
#include "kernels/launch.cuh"

namespace fp8moe::kernels {
namespace {

using detail::kFullMask;
using detail::kWarp;

constexpr int kMetadataBatch = kMetadataBatchSlots / kWarp;  // slot loads in flight per lane (4)
constexpr int kMetadataGridWarps = kMetadataGridSlotsPerCta / kMetadataBatchSlots;  // one batch each
constexpr int kMetadataSmemInts = 48 * 1024 / 4;
constexpr int kQuantizeThreads = 256;
constexpr int kQuantizeBlocksPerSm = 5;  // 40 warps per SM: <= 48 registers

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

// Local experts of the lane's slots base + 32 * u + lane (u < kMetadataBatch), -1 past `end`.
// The loads of the batch are issued before any is used. Returns the number of invalid ids in the
// batch over the whole warp (the same value in every lane).
__device__ __forceinline__ int load_batch(const PermuteParams& p, int base, int end, int lane,
                                          int (&expert)[kMetadataBatch]) {
  int32_t id[kMetadataBatch];
#pragma unroll
  for (int u = 0; u < kMetadataBatch; ++u) {
    const int s = base + u * kWarp + lane;
    id[u] = s < end ? __ldg(p.topk_ids + s) : -1;
  }
  int invalid_count = 0;
#pragma unroll
  for (int u = 0; u < kMetadataBatch; ++u) {
    bool invalid = false;
    expert[u] = local_expert(id[u], p.expert_map, p.num_global_experts, p.num_experts, invalid);
    invalid_count += __popc(__ballot_sync(kFullMask, invalid));
  }
  return invalid_count;
}

// Bits of the key expert + 1 (in [0, E]) that same_expert_lanes compares: the bit width of E.
__device__ __forceinline__ int expert_key_bits(int num_experts) { return 32 - __clz(num_experts); }

// A batch with at most this many routed lanes in its first row takes MATCH.ANY (see below).
constexpr int kMatchMaxLanes = 8;

// same_expert_lanes for a full batch: one ballot per bit of the key expert + 1, the batch's rows
// interleaved. Not inlined, so that the MATCH.ANY path stays short and contiguous: inline, this
// code sat between the batch load and MATCH.ANY in both passes and cost the batches that take
// MATCH.ANY ~0.3 us of metadata (measured at 512/16 while its warps still had 4 slots each).
__device__ __noinline__ uint4 ballot_peers(int e0, int e1, int e2, int e3, int key_bits) {
  const unsigned key[kMetadataBatch] = {static_cast<unsigned>(e0 + 1), static_cast<unsigned>(e1 + 1),
                                        static_cast<unsigned>(e2 + 1), static_cast<unsigned>(e3 + 1)};
  unsigned peers[kMetadataBatch] = {kFullMask, kFullMask, kFullMask, kFullMask};
  for (int b = 0; b < key_bits; ++b) {
#pragma unroll
    for (int u = 0; u < kMetadataBatch; ++u) {
      const bool bit = (key[u] >> b) & 1u;
      const unsigned set = __ballot_sync(kFullMask, bit);
      peers[u] &= bit ? set : ~set;
    }
  }
  return make_uint4(peers[0], peers[1], peers[2], peers[3]);
}

// peers[u]: the lanes of the warp whose expert[u] (-1 or a local expert) equals this lane's, as
// __match_any_sync(kFullMask, expert[u]) returns it. MATCH.ANY takes longer the more distinct
// values a warp holds, on the MIO unit that all warps of the CTA share (ncu, seed 512/512: 32
// warps x 8 matches of ~20 distinct experts each made short-scoreboard stalls 25 of every 42 cycles
// of the one-CTA metadata kernel, ~10 us). So a full batch finds its peers with ballots instead
// (ballot_peers), on each warp's own scheduler; a batch with few routed lanes (one token's slots,
// routing where most ids belong to other ranks, a grid CTA's small shares) keeps MATCH.ANY, which
// is then cheaper. The batch's first row holds the most slots, so its routed lanes decide for the
// batch (a heuristic: either path gives the same masks). All 32 lanes must call it.
__device__ __forceinline__ void same_expert_lanes(const int (&expert)[kMetadataBatch], int key_bits,
                                                  unsigned (&peers)[kMetadataBatch]) {
  static_assert(kMetadataBatch == 4, "ballot_peers takes four rows");
  if (__popc(__ballot_sync(kFullMask, expert[0] >= 0)) <= kMatchMaxLanes) {
#pragma unroll
    for (int u = 0; u < kMetadataBatch; ++u) peers[u] = __match_any_sync(kFullMask, expert[u]);
  } else {
    const uint4 q = ballot_peers(expert[0], expert[1], expert[2], expert[3], key_bits);
    peers[0] = q.x, peers[1] = q.y, peers[2] = q.z, peers[3] = q.w;
  }
}

// Pass 1 over the slots [lo, hi): this warp's count of each expert, added into my_table (zeroed
// by the caller). Returns the number of invalid ids in the range (the same value in every lane).
// `expert` and `peers` keep the last batch's experts and peer masks (all of them when the range is
// one batch).
__device__ __forceinline__ int count_slots(const PermuteParams& p, int lo, int hi, int lane, int32_t* my_table,
                                           int (&expert)[kMetadataBatch], unsigned (&peers)[kMetadataBatch]) {
  const unsigned lanes_below = (1u << lane) - 1u;
  const int key_bits = expert_key_bits(p.num_experts);
  int errors = 0;
  for (int base = lo; base < hi; base += kMetadataBatchSlots) {
    errors += load_batch(p, base, hi, lane, expert);
    same_expert_lanes(expert, key_bits, peers);
#pragma unroll
    for (int u = 0; u < kMetadataBatch; ++u) {
      if (expert[u] >= 0 && (peers[u] & lanes_below) == 0) my_table[expert[u]] += __popc(peers[u]);
      __syncwarp();
    }
  }
  return errors;
}

// permute_count (grid path, first launch): pass 1 over this CTA's share of the slots; its counts
// per expert, and its invalid ids, to cta_counts[blockIdx.x][0..E].
__global__ void __launch_bounds__(kMetadataGridWarps * kWarp) permute_count_kernel(const PermuteParams p) {
  detail::after_previous_kernel();  // kernels/launch.cuh
  extern __shared__ int32_t smem[];
  const int num_experts = p.num_experts;
  const int num_warps = blockDim.x / kWarp;
  const int warp = threadIdx.x / kWarp;
  const int lane = threadIdx.x % kWarp;
  int32_t* table = smem;                                // [num_warps][E]
  int32_t* warp_errors = table + num_warps * num_experts;  // [32]
  for (int i = threadIdx.x; i < num_warps * num_experts; i += blockDim.x) table[i] = 0;
  __syncthreads();
  const int live_slots = static_cast<int>(detail::live_tokens(p.num_tokens, p.tokens) * p.top_k);
  const SlotRange r = metadata_slot_range(live_slots, blockIdx.x, gridDim.x, warp, num_warps);
  int expert[kMetadataBatch];
  unsigned peers[kMetadataBatch];
  const int errors = count_slots(p, r.lo, r.hi, lane, table + warp * num_experts, expert, peers);
  if (lane == 0) warp_errors[warp] = errors;
  __syncthreads();
  int32_t* mine = p.cta_counts + static_cast<int64_t>(blockIdx.x) * (num_experts + 1);
  for (int e = threadIdx.x; e < num_experts; e += blockDim.x) {
    int n = 0;
    for (int w = 0; w < num_warps; ++w) n += table[w * num_experts + e];
    mine[e] = n;
  }
  if (threadIdx.x == 0) {
    int total = 0;
    for (int w = 0; w < num_warps; ++w) total += warp_errors[w];
    mine[num_experts] = total;
  }
}

// kGrid = false: the one-CTA kernel. kGrid = true: one CTA of the grid, after permute_count.
template <bool kGrid>
__global__ void __launch_bounds__(kMetadataMaxWarps * kWarp, 1) permute_metadata_kernel(const PermuteParams p) {
  detail::after_previous_kernel();  // kernels/launch.cuh
  extern __shared__ int32_t smem[];
  const int num_experts = p.num_experts;
  const int num_warps = blockDim.x / kWarp;
  const int warp = threadIdx.x / kWarp;
  const int lane = threadIdx.x % kWarp;
  int32_t* table = smem;                                // [num_warps][E]: counts, then first rows
  int32_t* start = table + num_warps * num_experts;      // [E]
  int32_t* end = start + num_experts;                    // [E]
  int32_t* warp_errors = end + num_experts;              // [32]
  int32_t* cta_base = warp_errors + kWarp;               // [E], grid only: rows of CTAs before this one
  const int cta = kGrid ? static_cast<int>(blockIdx.x) : 0, ctas = kGrid ? static_cast<int>(gridDim.x) : 1;
  const bool leader_cta = cta == 0;                      // writes counts, ends and the error counter

  const int top_k = p.top_k;
  const int live_slots = static_cast<int>(detail::live_tokens(p.num_tokens, p.tokens) * top_k);
  const int all_slots = static_cast<int>(p.tokens * top_k);

  for (int i = threadIdx.x; i < num_warps * num_experts; i += blockDim.x) table[i] = 0;
  __syncthreads();

  // This warp's slots [lo, hi): with one CTA at least a batch per warp, so only the first
  // busy_warps warps have slots (all of them at 32 x 128 slots; one at decode).
  const SlotRange range = metadata_slot_range(live_slots, cta, ctas, warp, num_warps, kGrid ? 1 : kMetadataBatchSlots);
  int32_t* my_table = table + warp * num_experts;
  const unsigned lanes_below = (1u << lane) - 1u;

  // ---- pass 1: per-warp counts
  // A one-batch range (every decode case) keeps its experts and their peer masks for pass 2.
  int batch_experts[kMetadataBatch];
  unsigned batch_peers[kMetadataBatch] = {};
  const int errors = count_slots(p, range.lo, range.hi, lane, my_table, batch_experts, batch_peers);
  const bool one_batch = range.hi - range.lo <= kMetadataBatchSlots;
  if (lane == 0) warp_errors[warp] = errors;
  // Busy warps are the first ones (the ranges are consecutive); the others' tables stay zero.
  const int busy_warps = __syncthreads_count(range.hi > range.lo) / kWarp;

  // ---- rows per expert (and, in a grid, this CTA's base inside each expert), then the layout
  for (int e = threadIdx.x; e < num_experts; e += blockDim.x) {
    int n = 0;
    if constexpr (kGrid) {
      int before = 0;
      for (int b = 0; b < ctas; ++b) {
        const int c = __ldg(p.cta_counts + static_cast<int64_t>(b) * (num_experts + 1) + e);
        n += c;
        before += b < cta ? c : 0;
      }
      cta_base[e] = before;
    } else {
      for (int w = 0; w < busy_warps; ++w) n += table[w * num_experts + e];
    }
    end[e] = n;  // the count for now
  }
  __syncthreads();
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
        if (leader_cta) {
          p.counts[e] = n;
          p.ends[e] = first + n;
        }
      }
      carry += __shfl_sync(kFullMask, inclusive, kWarp - 1);
    }
    if (lane == 0 && leader_cta) {
      int total = 0;
      if constexpr (kGrid) {
        for (int b = 0; b < ctas; ++b) total += __ldg(p.cta_counts + static_cast<int64_t>(b) * (num_experts + 1) + num_experts);
      } else {
        for (int w = 0; w < num_warps; ++w) total += warp_errors[w];
      }
      *p.error_count = total;  // overwrites the previous run's count
      if (p.gemm_tile_counters != nullptr) p.gemm_tile_counters[0] = p.gemm_tile_counters[1] = 0;
    }
  }
  __syncthreads();
  for (int e = threadIdx.x; e < num_experts; e += blockDim.x) {
    int row = start[e] + (kGrid ? cta_base[e] : 0);
    for (int w = 0; w < busy_warps; ++w) {
      const int c = table[w * num_experts + e];
      table[w * num_experts + e] = row;
      row += c;
    }
  }
  __syncthreads();

  // ---- pass 2: rows
  const int key_bits = expert_key_bits(num_experts);
  for (int base = range.lo; base < range.hi; base += kMetadataBatchSlots) {
    int expert[kMetadataBatch];
    unsigned peers[kMetadataBatch];
    if (one_batch) {  // the same slots as pass 1: no second round of loads or peer matching
#pragma unroll
      for (int u = 0; u < kMetadataBatch; ++u) expert[u] = batch_experts[u], peers[u] = batch_peers[u];
    } else {
      load_batch(p, base, range.hi, lane, expert);
      same_expert_lanes(expert, key_bits, peers);
    }
#pragma unroll
    for (int u = 0; u < kMetadataBatch; ++u) {
      const int e = expert[u];
      const int s = base + u * kWarp + lane;
      if (s < range.hi) p.row_of[s] = e >= 0 ? my_table[e] + __popc(peers[u] & lanes_below) : -1;
      __syncwarp();  // every lane has read my_table[e] before the leader moves it
      if (e >= 0 && (peers[u] & lanes_below) == 0) my_table[e] += __popc(peers[u]);
      __syncwarp();
    }
  }
  // The tails are shared out over every thread of the grid (of the CTA, with one CTA).
  const int thread = cta * blockDim.x + threadIdx.x, threads = ctas * blockDim.x;
  for (int64_t s = live_slots + thread; s < all_slots; s += threads) p.row_of[s] = -1;

  // ---- the padded schedule's per-row expert: the last expert starting at or before r owns r
  //      if r is below its end (earlier experts end before that start).
  if (p.row_expert != nullptr) {
    const int64_t m_cap = layout::m_cap(p.capacity, p.top_k, p.num_experts);
    for (int64_t r = thread; r < m_cap; r += threads) {
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

// GEMM1's first weights into L2, from quantize_permuted's first CTAs (one row per thread) before
// their wait: they run beside the metadata kernel, while HBM is otherwise idle at decode (~4-6 us).
// Decode-sized routing only (at most kWarmMaxSlots live slots), where every touched expert has at
// most 128 live rows, so GEMM1's first wave streams the first p.warm_rows weight rows of the
// touched experts taken in order (gemm::sm90_fp8_grouped_gemm_1d2d_first_wave_rows). The CTA finds
// the touched experts from topk_ids (plain inputs, as the weights are) and prefetches the first
// p.warm_kblocks k-blocks of its rows. It is a guess (another tile order only makes some of the
// bytes early or useless), so nothing waits for it.
constexpr int kWarmMaxSlots = 1024;
constexpr int kWarmMaxExperts = 512;

__device__ void warm_first_weights(const PermuteParams& p) {
  __shared__ uint32_t touched[kWarmMaxExperts / kWarp];
  const int64_t slots = detail::live_tokens(p.num_tokens, p.tokens) * p.top_k;
  if (slots > kWarmMaxSlots || p.num_experts > kWarmMaxExperts) return;  // (the same in every thread)
  const int words = (p.num_experts + kWarp - 1) / kWarp;
  if (threadIdx.x < words) touched[threadIdx.x] = 0;
  __syncthreads();
  for (int s = threadIdx.x; s < slots; s += blockDim.x) {
    bool invalid;  // (counted by the metadata kernel)
    const int e = local_expert(__ldg(p.topk_ids + s), p.expert_map, p.num_global_experts, p.num_experts, invalid);
    if (e >= 0) atomicOr(&touched[e / kWarp], 1u << (e % kWarp));
  }
  __syncthreads();
  const int64_t want = static_cast<int64_t>(p.warm_kblocks) * layout::kGroup;  // bytes of a row
  const uint32_t bytes = static_cast<uint32_t>(want < p.hidden_size ? want : p.hidden_size);
  for (int r = blockIdx.x * blockDim.x + threadIdx.x; r < p.warm_rows; r += gridDim.x * blockDim.x) {
    int j = r / p.w13_rows;  // the j-th touched expert, its row r - j * w13_rows
    const int row = r - j * p.w13_rows;
    int e = -1;
    for (int w = 0; w < words && e < 0; ++w) {
      uint32_t bits = touched[w];
      const int n = __popc(bits);
      if (j < n) {
        for (; j > 0; --j) bits &= bits - 1;
        e = w * kWarp + __ffs(bits) - 1;
      }
      j -= n;
    }
    if (e < 0) break;  // fewer touched experts than the first wave has rows (r only grows)
    ptx::bulk_prefetch_l2(p.w13 + (static_cast<int64_t>(e) * p.w13_rows + row) * p.hidden_size, bytes);
  }
}

template <layout::ScaleFormat kFmt>
__global__ void __launch_bounds__(kQuantizeThreads, kQuantizeBlocksPerSm)
    quantize_permuted_kernel(const PermuteParams p) {
  if (p.w13 != nullptr && static_cast<int>(blockIdx.x * blockDim.x) < p.warm_rows) warm_first_weights(p);
  detail::after_previous_kernel();  // kernels/launch.cuh
  const int lane = threadIdx.x % kWarp;
  const int warps_per_block = blockDim.x / kWarp;
  const int64_t hidden = p.hidden_size;
  const int64_t groups = layout::groups_of(hidden);
  const int64_t chunks = layout::ceil_div(groups, detail::kGroupsPerChunk);
  const int64_t m_cap = layout::m_cap(p.capacity, p.top_k, p.num_experts);
  const int64_t m_pad = layout::m_pad(m_cap);
  constexpr bool kPow2 = kFmt != layout::ScaleFormat::kFp32;
  constexpr bool kPacked = kFmt == layout::ScaleFormat::kUe8m0Packed;
  const int top_k = p.top_k;
  const uint16_t* __restrict__ in = static_cast<const uint16_t*>(p.hidden);
  const int64_t items = detail::live_tokens(p.num_tokens, p.tokens) * chunks;

  for (int64_t item = static_cast<int64_t>(blockIdx.x) * warps_per_block + threadIdx.x / kWarp; item < items;
       item += static_cast<int64_t>(gridDim.x) * warps_per_block) {
    const int64_t t = item / chunks;
    const int64_t chunk = item % chunks;
    const detail::LaneSlice slice = detail::lane_slice(static_cast<int>(chunk), static_cast<int>(groups), lane);
    // Lane j holds row_of[t, j0 + j] (one coalesced load); the warp walks the slots in turn. The
    // first 32 slots' rows are loaded beside the values, so the item waits for one round trip.
    const int32_t* rows_of_t = p.row_of + t * top_k;
    int32_t lane_row = lane < top_k ? __ldg(rows_of_t + lane) : -1;
    uint32_t x[8] = {};  // 16 BF16 values, two per word
    if (slice.active) {
      const uint4* src = reinterpret_cast<const uint4*>(in + t * hidden + slice.col);
      const uint4 v0 = __ldg(src), v1 = __ldg(src + 1);
      x[0] = v0.x, x[1] = v0.y, x[2] = v0.z, x[3] = v0.w, x[4] = v1.x, x[5] = v1.y, x[6] = v1.z, x[7] = v1.w;
    }
    uint4 codes;
    const float scale = detail::quantize_lane<kPow2>(x, codes);
    const uint32_t word = kPacked ? detail::ue8m0_chunk_word(scale, slice.active) : 0u;
    for (int j0 = 0; j0 < top_k; j0 += kWarp) {
      const int slots = min(kWarp, top_k - j0);
      if (j0 > 0) lane_row = lane < slots ? __ldg(rows_of_t + j0 + lane) : -1;
      for (int j = 0; j < slots; ++j) {
        const int64_t row = __shfl_sync(kFullMask, lane_row, j);
        if (row < 0 || row >= m_cap) continue;
        detail::store_chunk(p.a1 + row * hidden, p.a1_scale, kFmt, m_pad, row, chunk, slice, lane, codes, scale,
                            word);
      }
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

// Warps of a metadata CTA: as many as fit its shared tables in 48 KB (table [W][E], then `rows`
// more rows of E and 32 words), at most `max_warps`.
int metadata_warps(int num_experts, int rows, int max_warps) {
  const int w = (kMetadataSmemInts - kWarp) / num_experts - rows;
  return w < max_warps ? w : max_warps;
}
size_t metadata_smem(int warps, int rows, int num_experts) {
  return (static_cast<size_t>(warps + rows) * num_experts + kWarp) * sizeof(int32_t);
}

}  // namespace

cudaError_t launch_permute_metadata(const PermuteParams& p, cudaStream_t stream) {
  if (!valid_shapes(p)) return cudaErrorInvalidValue;
  if (p.counts == nullptr || p.ends == nullptr || p.error_count == nullptr) return cudaErrorInvalidValue;
  if (p.tokens > 0 && (p.topk_ids == nullptr || p.row_of == nullptr)) return cudaErrorInvalidValue;
  if (p.metadata_ctas < 1 || p.metadata_ctas > kMetadataMaxCtas) return cudaErrorInvalidValue;
  if (p.metadata_ctas == 1) {
    const int warps = metadata_warps(p.num_experts, 2, kMetadataMaxWarps);  // + start, end
    if (warps < 1) return cudaErrorInvalidValue;
    permute_metadata_kernel<false><<<1, warps * kWarp, metadata_smem(warps, 2, p.num_experts), stream>>>(p);
    return cudaGetLastError();
  }
  if (p.cta_counts == nullptr) return cudaErrorInvalidValue;
  const int warps = metadata_warps(p.num_experts, 3, kMetadataGridWarps);  // + start, end, cta_base
  if (warps < 1) return cudaErrorInvalidValue;
  permute_count_kernel<<<p.metadata_ctas, warps * kWarp, metadata_smem(warps, 0, p.num_experts), stream>>>(p);
  FP8MOE_KERNEL_TRY(cudaGetLastError());
  return launch_dependent(permute_metadata_kernel<true>, p.metadata_ctas, warps * kWarp,
                          metadata_smem(warps, 3, p.num_experts), stream, p);
}

cudaError_t launch_quantize_permuted(const PermuteParams& p, cudaStream_t stream) {
  if (!valid_shapes(p)) return cudaErrorInvalidValue;
  if (p.hidden_size <= 0 || p.hidden_size % layout::kGroup != 0) return cudaErrorInvalidValue;
  if (p.hidden_size >= (int64_t{1} << 30)) return cudaErrorInvalidValue;  // column offsets are int32 in the kernel
  if (p.tokens == 0) return cudaSuccess;  // nothing to read or write
  if (p.hidden == nullptr || p.row_of == nullptr || p.a1 == nullptr || p.a1_scale == nullptr)
    return cudaErrorInvalidValue;
  if (p.w13 != nullptr && (p.w13_rows < 1 || p.warm_rows < 1 || p.warm_kblocks < 1 || p.topk_ids == nullptr))
    return cudaErrorInvalidValue;
  const int64_t chunks = layout::ceil_div(layout::groups_of(p.hidden_size), detail::kGroupsPerChunk);
  const int warps_per_block = kQuantizeThreads / kWarp;
  int blocks = 0;
  FP8MOE_KERNEL_TRY(
      detail::persistent_blocks(kQuantizeBlocksPerSm, layout::ceil_div(p.tokens * chunks, warps_per_block), &blocks));
  switch (p.scale_format) {
    case layout::ScaleFormat::kFp32:
      return launch_dependent(quantize_permuted_kernel<layout::ScaleFormat::kFp32>, blocks, kQuantizeThreads, 0, stream, p);
    case layout::ScaleFormat::kFp32Pow2:
      return launch_dependent(quantize_permuted_kernel<layout::ScaleFormat::kFp32Pow2>, blocks, kQuantizeThreads, 0, stream, p);
    case layout::ScaleFormat::kUe8m0Packed:
      return launch_dependent(quantize_permuted_kernel<layout::ScaleFormat::kUe8m0Packed>, blocks, kQuantizeThreads, 0, stream, p);
    default:
      return cudaErrorInvalidValue;
  }
}

cudaError_t launch_permute(const PermuteParams& p, cudaStream_t stream) {
  FP8MOE_KERNEL_TRY(launch_permute_metadata(p, stream));
  return launch_quantize_permuted(p, stream);
}

}  // namespace fp8moe::kernels
