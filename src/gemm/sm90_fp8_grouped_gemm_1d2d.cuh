// SM90 block-FP8 grouped GEMM, "1d2d" scaling (A: one FP32 scale per row per 128 K; B: one per
// 128x128 block), BF16 out. Persistent and warp-specialised:
//
//   warpgroup 2 (producer, 40 registers): one thread walks the tile schedule and, for every 128-K
//     block, waits for a free ring stage and issues three TMA loads into it (A 128x128 with an L2
//     evict-last hint, B BNx128, A's 128 scales; 128 wide, also the block's B scale, copied with
//     cp.async), completing on the stage's `full` mbarrier. Live single CTAs claim each tile after
//     their first from a global counter (dynamic tiles) and pass it, resolved, to the math
//     warpgroups in shared memory with the tile's first k-block; there (but with the activation
//     epilogue) a scheduler warp claims and resolves the next tile while the producer streams;
//   warpgroups 0 and 1 (math, 232 registers): rows [0, 64) and [64, 128) of the tile. The tile's
//     columns are two halves, each a group of four wgmma m64n(BN/2)k32 into its own FP32
//     accumulator, software-pipelined so that one half runs on the tensor cores while the other
//     is promoted on the CUDA cores (out += (scale_a[row] * scale_b) * acc, every 128 K); a stage
//     is released (`empty`) as soon as both halves have read it. 256-wide tiles run four
//     64-column quarters instead, two in flight (the same registers). A 64-row half with no live
//     row skips its math; in the live 256-wide kernels, a half with 1..48 live rows swaps the
//     operands (the weights as wgmma's M side, its rows rounded up to 16 as N), computes and
//     stores itself at the epilogue with its own registers, bit-identical to the 64-row form.
//   Epilogue, per math warpgroup: BF16 fragments -> stmatrix into a shared staging tile (128-byte
//     swizzle) -> global memory. The 192- and 256-wide kernels stage a warpgroup's whole tile and
//     hands it to TMA stores when all 64 rows are live, then goes straight on to the next tile;
//     otherwise each 64-column half is copied out with coalesced 16-byte stores by the warpgroup's
//     threads. A warpgroup with no live row stores nothing, and live tiles store only their live
//     rows (padded tiles store all 128).
//   GEMM1's activation epilogue (kFusedAct, the 256-wide live kernel at prefill capacities): the
//     tile's 256 columns are 128 gate and the matching 128 up columns; the math warpgroups stage
//     their BF16 values and the producer warpgroup's three idle warps turn them into A2 rows and
//     scales (act_quant's bits) while the math goes on to the next tile; no D is written.
//   Tall tiles (the auto-width kernel's 192-wide body, sched::tall_expert): all rows of an expert
//   with 129..192 x 128 columns in one tile, so that the few rows past 128 do not stream the
//   expert's weights a second time. Warpgroup w computes its 64 rows x 128 columns and rows
//   128.. x columns [64w, 64w + 64) (with at most 32 such rows: swapped operands, 16 or 32 rows
//   computed instead of 64); the stage holds A's rows 128.. where a 128 x 192 tile's last 64 B
//   rows go.
//
// Launches: every variant is sm90_gemm_body<...> (below); the fixed-width kernels run one, the
// auto-width kernel picks the 128- or 192-wide body from the live rows on the device (its 192-wide
// body with tall tiles). Launched as a programmatic dependent (GroupedGemmArgs::dependent_launch),
// the producer requests the first tile's weights before griddepcontrol.wait.
//
// With kCluster = 2 the grid runs in 2-CTA clusters that take N-neighbour tiles (same expert, same
// rows): each CTA multicasts one 64-row half of the shared A block into both CTAs, so each CTA
// pulls 8 KB less per k-block. Every consumer warp then releases a stage in both CTAs (either CTA
// may overwrite the peer's A), and the CTAs meet at a cluster barrier before exiting.
// kPairM (live only) pairs M-neighbours instead: the two CTAs take the two 128-row halves of a
// 256-row block of one expert and share B, each multicasting one BN/2-row half of it (12 KB less
// per CTA and k-block at BN = 192, against 8 KB for sharing A). A CTA whose half has no live row
// (an expert's odd last 128 rows) loads no A, does no math and stores nothing, but still sends its
// half of B and releases every stage.
//
// The tile schedule (live or padded) is a template parameter; both share this mainloop, so live
// rows come out bit-identical between the two (whatever the width: see the .cu).
#pragma once

#include <cuda.h>
#include <cuda_bf16.h>

#include <cstdint>
#include <type_traits>

#include "gemm/grouped_gemm.hpp"
#include "kernels/common.cuh"
#include "layout/layout.cuh"
#include "numerics/numerics.cuh"
#include "ptx/ptx.cuh"
#include "schedulers/grouped_tiles.cuh"

// Ablation builds for performance investigation only (never the default): -DFP8MOE_GEMM_ABLATE=
//   2 no math (and so no stores), 3 no TMA loads (math on stale shared memory), 4 no global stores
//   (the epilogue still stages its tile in shared memory), 8 supply and math decoupled: a thread of
//   the producer warpgroup consumes the ring (waits for each stage, releases it at once) while the
//   math warpgroups compute a static share of the tiles on whatever the ring holds, their waits
//   for data going to a barrier that never changes phase, releasing no stage (are the two slower
//   together than alone?), 9 a tall tile's rows past 128 cost no tensor work (their wgmma group is
//   left empty: the most that computing fewer padded rows there could save), 10 a 64-row half
//   with fewer than 64 live rows gets no math (wrong results: the most that computing no padded
//   row of a partial half could save, e.g. with swapped operands). The math-bearing
//   builds (3, 4, 8, 9) must keep the wgmma pipelined: the codegen check fails on ptxas' C75xx
//   notes for them too.
#ifndef FP8MOE_GEMM_ABLATE
#define FP8MOE_GEMM_ABLATE 0
#endif
// Timeline builds, also for investigation only: -DFP8MOE_GEMM_TRACE=1 makes thread 0 of every CTA
// (math warpgroup 0; -DFP8MOE_GEMM_TRACE_THREAD=128: warpgroup 1) write %globaltimer when it
// starts each tile and when it leaves the tile loop, into g_sm90_gemm_trace[cta][slot] (slot 0 =
// kernel entry; read back by the GEMM bench). -DFP8MOE_GEMM_TRACE=2 records six times per tile
// instead of one (on the two-half and the 256-wide four-quarter paths): its start, the first
// k-block's data in shared memory, the first promotion done, the last k-block released, the last
// promotion done, the epilogue's end. =3 adds, from the producer thread, the time it requested
// each tile's first k-block (slots kTraceProducerSlot0 + tile index; the math thread's slots stop
// below them). =4 records per k-block instead, for the first k-blocks of each CTA: the math thread
// when each stage's data is there (slots 0..79; the two-half path), the producer when it has
// requested each stage (slots 80..127). =5 is =3 with four producer stamps per tile instead of one
// (slots 80 + 4 * tile + i): i = 0 the tile known (the scheduler's get() returned), 1 the stage for
// its first k-block free, 2 that k-block requested, 3 its last k-block requested. =6 is =2 with
// four more stamps per tile in the bulk-store epilogue (192 and 256 wide, not kFusedAct), after
// the last promotion: the staging tile free (bulk_wait_read), the first barrier, the tile staged,
// the second barrier; the TMA stores' issue ends at the epilogue's end stamp (tiles that copy out
// write 1 in those four slots instead).
#ifndef FP8MOE_GEMM_TRACE
#define FP8MOE_GEMM_TRACE 0
#endif
// A live 256-wide tile's partial 64-row half (1..48 live rows) is computed with swapped operands:
// 16, 32 or 48 rows instead of 64 (perf notes v44). -DFP8MOE_GEMM_SWAP_TAIL=0 computes all 64, as
// before (investigation: the same kernels without the swapped path, instruction for instruction).
#ifndef FP8MOE_GEMM_SWAP_TAIL
#define FP8MOE_GEMM_SWAP_TAIL 1
#endif
// A tall tile's rows past 128 (1..32 of them) computed with swapped operands too: 16 or 32 rows
// instead of 64 (the auto kernel's 192-wide body; perf notes v45). -DFP8MOE_GEMM_SWAP_TALL=0
// computes all 64, as before.
#ifndef FP8MOE_GEMM_SWAP_TALL
#define FP8MOE_GEMM_SWAP_TALL 1
#endif
#ifndef FP8MOE_GEMM_TRACE_THREAD
#define FP8MOE_GEMM_TRACE_THREAD 0
#endif

namespace fp8moe::gemm {

// A is loaded with the smallest box that covers the tile's live rows (live schedule only): a decode
// tile with 4 live rows moves 2 KB of A per stage instead of 16 KB. The rows of shared memory the
// box does not cover hold stale bytes; they feed only output rows that are never stored.
__host__ __device__ constexpr int a_box_rows(int box) { return box == 0 ? 128 : box == 1 ? 64 : 16; }
// The box a tile with `live_rows` rows from its first row loads (the full one for the padded schedule).
template <bool kLive>
__host__ __device__ constexpr int a_box_for(int live_rows) {
  return !kLive || live_rows > a_box_rows(1) ? 0 : live_rows > a_box_rows(2) ? 1 : 2;
}

// Byte offset of 16-byte chunk c (0..7) of row r in a shared tile of 128-byte rows stored with the
// 128-byte swizzle (TMA's layout, and the staging tiles' of the epilogue): chunk c of row r sits
// at chunk c ^ (r % 8).
__host__ __device__ constexpr int sw128_offset(int r, int c) { return r * 128 + ((c ^ (r % 8)) << 4); }

// Threads of every variant: 2 math warpgroups + 1 producer warpgroup.
constexpr int kSm90GemmThreads = 384;

struct Sm90GemmParams {
  CUtensorMap map_a[3];  // FP8 [m_cap, k], boxes a_box_rows(i) x 128, 128-byte swizzle
  CUtensorMap map_b[3];  // FP8 [E * n, k], box BN x 128 (BN = 128, 192, 256: b_map_index), 128-byte swizzle
  CUtensorMap map_sfa;  // FP32 [k/128, m_pad], box 1 x 128
  __nv_bfloat16* d;     // BF16 [m_cap, n] (map_d below: the same for TMA stores)
  const float* b_scale;
  const int32_t* ends;
  const int32_t* row_expert;
  int32_t* tile_counter;  // live single CTAs: tiles after each CTA's first are claimed here (null: fixed stride)
  int64_t m_cap;
  int n, k, num_experts;
  CUtensorMap map_b_half;  // as map_b with box BN/2 x 128 (kPairM clusters)
  CUtensorMap map_d;       // d, box 64 x 64 (128 bytes), 128-byte swizzle: the 192-wide epilogue's stores
  // The activation + quantization epilogue (kFusedAct kernels, GEMM1 only; see sm90_gemm_body):
  // A2 FP8 [m_cap, n / 2] and its FP32 scales at g * m_pad + r (fp32 or, a2_pow2, fp32_pow2).
  uint8_t* a2;
  float* a2_scale;
  int64_t m_pad;
  num::ActParams act;
  int a2_pow2;
  int d_evict_last;  // GroupedGemmArgs::d_evict_last
};

#if FP8MOE_GEMM_TRACE
__device__ uint64_t g_sm90_gemm_trace[kGemmTraceCtas * kGemmTraceSlots];
constexpr int kTraceProducerSlot0 = FP8MOE_GEMM_TRACE >= 3 ? 80 : kGemmTraceSlots;
// The stamping math thread: `value` (by default %globaltimer) into its slot `slot`.
__device__ __forceinline__ void trace_time(int slot, uint64_t value = 0) {
  if (FP8MOE_GEMM_TRACE != 4 && threadIdx.x == FP8MOE_GEMM_TRACE_THREAD && blockIdx.x < kGemmTraceCtas &&
      slot < kTraceProducerSlot0)
    g_sm90_gemm_trace[blockIdx.x * kGemmTraceSlots + slot] = value ? value : ptx::globaltimer();
}
// TRACE>=3, the producer: its n-th request of a stage (=4), or of a tile's first k-block (=3).
__device__ __forceinline__ void trace_request(int& n, bool tile_start) {
  if (FP8MOE_GEMM_TRACE < 3 || FP8MOE_GEMM_TRACE >= 5 || (FP8MOE_GEMM_TRACE == 3 && !tile_start)) return;
  const int slot = kTraceProducerSlot0 + n++;
  if (blockIdx.x < kGemmTraceCtas && slot < kGemmTraceSlots)
    g_sm90_gemm_trace[blockIdx.x * kGemmTraceSlots + slot] = ptx::globaltimer();
}
// TRACE=5, the producer: stamp `what` of its tile-th tile.
__device__ __forceinline__ void trace_producer(int tile, int what) {
  if (FP8MOE_GEMM_TRACE != 5) return;
  const int slot = kTraceProducerSlot0 + 4 * tile + what;
  if (blockIdx.x < kGemmTraceCtas && slot < kGemmTraceSlots)
    g_sm90_gemm_trace[blockIdx.x * kGemmTraceSlots + slot] = ptx::globaltimer();
}
// TRACE=4, the stamping math thread: its n-th stamp (before and after each wait for a stage's data).
__device__ __forceinline__ void trace_data(int& n) {
  if (FP8MOE_GEMM_TRACE != 4) return;
  const int slot = n++;
  if (threadIdx.x == FP8MOE_GEMM_TRACE_THREAD && blockIdx.x < kGemmTraceCtas && slot < kTraceProducerSlot0)
    g_sm90_gemm_trace[blockIdx.x * kGemmTraceSlots + slot] = ptx::globaltimer();
}
#endif

// Ring stages per tile width: 6 at 128 columns; 4 at 192, where the fifth stage's room holds each
// math warpgroup's whole output tile for the TMA-store epilogue (perf notes v18); 3 at 256 (48 KB
// stages beside a 64 KB staging tile). Every launch of a body takes its stage count from here (the
// host's dispatch, the auto-width kernel).
__host__ __device__ constexpr int sm90_stages_for(int block_n) { return block_n == 128 ? 6 : block_n == 192 ? 4 : 3; }
// The index of the B tensor map (Sm90GemmParams::map_b) whose box is block_n rows.
__host__ __device__ constexpr int b_map_index(int block_n) { return block_n == 128 ? 0 : block_n == 192 ? 1 : 2; }

// kTall: the layout with room for tall tiles (the auto-width kernel's 192-wide body); kFused: with
// the hand-over of the activation epilogue (kFusedAct).
template <int kBlockN, int kStages, bool kTall = false, bool kFused = false>
struct Sm90GemmConfig {
  static constexpr int kBlockM = 128;
  static constexpr int kBlockK = 128;
  static constexpr int kABytes = kBlockM * kBlockK;
  static constexpr int kBBytes = kBlockN * kBlockK;
  // Tall tiles (kTall; sched::tall_expert): 129..192 rows x 128 columns. Their stage holds A's
  // first 128 rows where a 128 x 192 tile's A goes, the 128 x 128 B block in the first 16 KB of
  // the B stage and A's rows 128..191 in the B stage's last 8 KB (kTallA3Offset), and 256 A
  // scales (two boxes of 128) instead of 128.
  static constexpr int kTallA3Offset = 128 * kBlockK;
  static constexpr int kSfaRows = kTall ? 256 : kBlockM;
  static constexpr int kSfaBytes = kSfaRows * 4;
  static constexpr int kSfaBoxBytes = kBlockM * 4;  // one TMA box of A scales (128 rows)
  // The 128-wide (decode, mid-size) body gets each k-block's B scale with the stage: the producer
  // copies it in, so the math reads it from shared memory. That took the global load off each
  // tile's first promotion (decode tiles' first k-block 0.6 -> 0.3 us) and made Qwen3-30B 512/512
  // 2.6% faster; in the 192-wide (prefill) body the same copy measured 2-4% slower (its producer
  // requested each tile's first k-block ~0.5 us later), so that body loads its two B scales from
  // global memory one k-block ahead (perf notes v19).
  static constexpr bool kScalesInRing = kBlockN == 128;
  static constexpr int kSfbBytes = kScalesInRing ? 4 : 0;
  // Arrivals that complete a stage's `full` phase: the producer's (with the expected bytes) and,
  // kScalesInRing, the B scale's cp.async.
  static constexpr int kFullArrivals = kScalesInRing ? 2 : 1;
  // The epilogue's staging tile per math warpgroup: 64 rows x 64 BF16 columns, reused for each
  // 64-column half; the 192- and 256-wide (prefill) kernels stage all their columns for their TMA
  // stores.
  static constexpr bool kBulkStore = kBlockN >= 192;
  static constexpr int kDBytes = 64 * (kBulkStore ? kBlockN : 64) * 2;
  // The live scheduler's tables: ends[] and the tile prefix, kMaxExperts entries each, and (192
  // and 256 wide: prefill-sized GEMMs) the tile lookup table.
  static constexpr int kMaxExperts = sched::kMaxLiveExperts;
  static constexpr bool kTileLut = kBlockN >= 192;
  // Dynamic tiles: per stage, the tile whose first k-block it holds, resolved (expert, or -1 past
  // the last tile; first row, first column, row end, tall: kStages x kTileInfoInts ints), so that
  // the math warpgroups do not run the scheduler's get() at each tile change.
  static constexpr int kTileInfoInts = kTall ? 5 : 4;
  // The shared-memory layout, in bytes from the 1024-aligned base (sm90_gemm_body's pointers; the
  // auto-width kernel stores ends[] at kEndsOffset): the A and B rings, both warpgroups' staging
  // tiles, every stage's A scales (and kScalesInRing its B scale), the full and empty barriers,
  // the live scheduler's ends[] and tile_end[] (and lookup table), the resolved tiles published
  // with their first k-blocks, and the hand-over of the activation epilogue (kFused) or the
  // scheduler warp's.
  static constexpr int kBOffset = kStages * kABytes;
  static constexpr int kDOffset = kBOffset + kStages * kBBytes;
  static constexpr int kSfaOffset = kDOffset + 2 * kDBytes;
  static constexpr int kSfbOffset = kSfaOffset + kStages * kSfaBytes;
  static constexpr int kFullOffset = kSfbOffset + kStages * kSfbBytes;
  static constexpr int kEmptyOffset = kFullOffset + kStages * 8;
  static constexpr int kEndsOffset = kEmptyOffset + kStages * 8;
  static constexpr int kTileEndOffset = kEndsOffset + kMaxExperts * 4;
  static constexpr int kTileInfoOffset = kTileEndOffset + (kMaxExperts + (kTileLut ? sched::kTileLutInts : 0)) * 4;
  // kFused: the `staged` and `freed` barriers of the activation epilogue's hand-over, the tile it
  // is handed (first row, live rows, A2 group) and, at the end, the number of tiles handed over.
  static constexpr int kFusedOffset = (kTileInfoOffset + kStages * kTileInfoInts * 4 + 7) / 8 * 8;
  static constexpr int kFusedInfoInts = 4;
  // Not kFused, in the same place: the scheduler warp's `claim` and `ready` barriers and the tile it
  // resolved (TileInfo::publish: kTileInfoInts ints).
  static constexpr int kSchedOffset = kFusedOffset;
  static constexpr int kSchedInfoInts = kTileInfoInts;
  static constexpr int kLayoutBytes =
      kFused ? kFusedOffset + 2 * 8 + kFusedInfoInts * 4 : kSchedOffset + 2 * 8 + kSchedInfoInts * 4;
  // +1024: the dynamic shared window is aligned up to the 1024 bytes the 128-byte swizzle needs.
  static constexpr int kSmemBytes = kLayoutBytes + 1024;
  static_assert(kBlockN == 128 || kBlockN == 192 || kBlockN == 256, "tile widths with at most two B-scale blocks");
  static_assert(kSmemBytes <= 232448, "the H200's shared memory per CTA");
  static_assert(kBOffset % 1024 == 0 && kDOffset % 1024 == 0, "swizzled tiles start on 1024 bytes");
  static_assert(!kTall || (kBlockN == 192 && kTallA3Offset + 64 * kBlockK <= kBBytes),
                "tall tiles: the 192-wide ring, whose B stage holds a tall tile's rows 128..191");
  static_assert(!kFused || (kBlockN == 256 && !kTall), "the activation epilogue: 128 gate + 128 up columns");
};

#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
// 128-K blocks per tile (K is a positive multiple of 128), derived from the parameter where used so
// that no register carries it into both roles (held in one, it was the 40-register producer's
// spill victim, reloaded inside the math loop too).
__device__ __forceinline__ int kblocks(const Sm90GemmParams& p) { return static_cast<int>(static_cast<unsigned>(p.k) / 128); }
// A persistent CTA (cluster) takes tile ids first, first + step, ... (read where used rather than
// kept in a register across the kernel: the auto-width kernel spilled it).
template <int kCluster>
__device__ __forceinline__ int first_tile_id() { return static_cast<int>(blockIdx.x) / kCluster; }
template <int kCluster>
__device__ __forceinline__ int tile_id_step() { return static_cast<int>(gridDim.x) / kCluster; }

// The activation + quantization epilogue of a kFusedAct kernel's idle producer warps (warps 9-11):
// for each tile the math warpgroups hand over (Sm90GemmConfig::kFusedOffset), the rows [0, rows)
// of the tile's gate (staged columns 0..127) and up (128..255) BF16 values become A2 row m_row + r,
// group `group`, and its scale: act_quant's steps (kernels/common.cuh: activate_quantize_lane),
// one 128-value group per 8 lanes, so the codes and scales are act_quant's bits. Rows past `rows`
// (an expert's gap) are never written.
template <num::ActKind kKind, bool kPow2, int kDBytes>
__device__ __forceinline__ void sm90_act_quant_rows(const Sm90GemmParams& p, const uint8_t* staged, int m_row, int rows,
                                                    int group, int warp, int lane) {
  namespace kd = kernels::detail;
  const int inter = p.n / 2;
  for (int r0 = 4 * warp; r0 < rows; r0 += 12) {  // 3 warps x 4 rows (warp-uniform: quantize_lane shuffles)
    const int r = r0 + lane / 8;
    const bool active = r < rows;
    // The lane's 16 values are 16-byte chunks c, c + 1 of the row's 128 gate (or up) columns: 64-column
    // block c / 8 of the warpgroup's staging tile (128-byte rows, 128-byte swizzle).
    const int rr = r % 64, c = 2 * (lane % 8);
    const uint8_t* block = staged + (r / 64 % 2) * kDBytes + (c / 8) * 8192;
    const uint8_t* g0 = block + sw128_offset(rr, c % 8);
    const uint8_t* g1 = block + sw128_offset(rr, c % 8 + 1);
    auto load = [&](uint32_t(&gw)[8], uint32_t(&uw)[8]) {
      const uint4 z = make_uint4(0, 0, 0, 0);
      const uint4 a = active ? *reinterpret_cast<const uint4*>(g0) : z;
      const uint4 b = active ? *reinterpret_cast<const uint4*>(g1) : z;
      const uint4 ua = active ? *reinterpret_cast<const uint4*>(g0 + 2 * 8192) : z;
      const uint4 ub = active ? *reinterpret_cast<const uint4*>(g1 + 2 * 8192) : z;
      gw[0] = a.x, gw[1] = a.y, gw[2] = a.z, gw[3] = a.w, gw[4] = b.x, gw[5] = b.y, gw[6] = b.z, gw[7] = b.w;
      uw[0] = ua.x, uw[1] = ua.y, uw[2] = ua.z, uw[3] = ua.w, uw[4] = ub.x, uw[5] = ub.y, uw[6] = ub.z, uw[7] = ub.w;
    };
    uint32_t gw[8], uw[8];
    load(gw, uw);
    uint4 codes;
    const float scale = kd::activate_quantize_lane<kKind, kPow2>(gw, uw, p.act, load, codes);
    if (active) {
      const int64_t row = static_cast<int64_t>(m_row) + r;
      *reinterpret_cast<uint4*>(p.a2 + row * inter + group * 128 + 16 * (lane % 8)) = codes;
      if (lane % 8 == 0) p.a2_scale[layout::fp32_scale_index(row, group, p.m_pad)] = scale;
    }
  }
}

// The whole kernel for one tile width and kind of CTA group; the kernels below choose it.
// ends_staged: the caller's warp 0 has already stored ends[] at Cfg::kEndsOffset (the auto-width
// kernel), so the live scheduler's tables are built from there without loading it again.
// kFusedAct (GEMM1, 256 wide, live single CTAs): SPEC section 2's step 4 in the epilogue. Tile
// column block c holds gate columns [128c, 128c + 128) and up columns [I + 128c, +128) (two 128-row
// B boxes, their two B-scale blocks); the math warpgroups stage the tile's BF16 values (Y1's bits)
// in their staging tiles and hand them to the producer warpgroup's three idle warps
// (sm90_act_quant_rows), which write A2 and its scales while the math goes on to the next tile.
// No Y1 is written.
template <int kBlockN, int kStages, int kCluster, bool kLive, bool kPairM, bool kTallTiles = false,
          bool kFusedAct = false>
__device__ __forceinline__ void sm90_gemm_body(const Sm90GemmParams& p, bool ends_staged = false) {
  // Tall tiles (sched::tall_expert): the 192-wide live body with single CTAs, as the auto-width
  // kernel runs it (kTallTiles; see there).
  constexpr bool kTall = kTallTiles && kBlockN == 192 && kLive && kCluster == 1 && !kPairM;
  static_assert(!kFusedAct || (kBlockN == 256 && kLive && kCluster == 1), "the activation epilogue: 256-wide live tiles");
  using Cfg = Sm90GemmConfig<kBlockN, kStages, kTall, kFusedAct>;
  // (kFusedAct: the gate and up blocks, 128 rows each)
  const CUtensorMap* map_b = &p.map_b[b_map_index(kFusedAct ? 128 : kBlockN)];
  using Half = ptx::WgmmaE4M3<kBlockN / 2>;  // one of the tile's two column halves
  static_assert(kCluster == 1 || kCluster == 2, "clusters of 1 or 2 CTAs");
  static_assert(!kPairM || (kCluster == 2 && kLive), "M-pairs: 2-CTA clusters, live schedule");
  // The scheduler hands out cluster tiles, kCluster * kBlockN wide (N-pairs) or kCluster * 128 rows
  // high (M-pairs); CTA `rank` takes its slice.
  constexpr int kClusterM = kPairM ? kCluster : 1, kClusterN = kPairM ? 1 : kCluster;
  using Scheduler = typename std::conditional<
      kLive, sched::LiveTileScheduler<Cfg::kBlockM * kClusterM, kBlockN * kClusterN, Cfg::kTileLut, kTall>,
      sched::PaddedTileScheduler<Cfg::kBlockM, kBlockN * kCluster>>::type;

  extern __shared__ uint8_t smem_raw[];
  // Align through an offset from smem_raw (not an integer round trip) so the compiler still knows
  // these are shared-memory addresses and emits LDS, not generic loads.
  uint8_t* smem = smem_raw + ptx::smem_align_1024_offset(smem_raw);
  uint8_t* smem_a = smem;  // (Cfg: the layout)
  uint8_t* smem_b = smem + Cfg::kBOffset;
  uint8_t* smem_d = smem + Cfg::kDOffset;  // 2 x kDBytes
  float* smem_sfa = reinterpret_cast<float*>(smem + Cfg::kSfaOffset);
  float* smem_sfb = reinterpret_cast<float*>(smem + Cfg::kSfbOffset);  // kScalesInRing: one per stage
#if FP8MOE_GEMM_ABLATE == 8
  __shared__ uint64_t ablate8_idle_bar;
#endif
  uint64_t* full = reinterpret_cast<uint64_t*>(smem + Cfg::kFullOffset);
  uint64_t* empty = reinterpret_cast<uint64_t*>(smem + Cfg::kEmptyOffset);
  int32_t* smem_ends = reinterpret_cast<int32_t*>(smem + Cfg::kEndsOffset);
  int32_t* smem_tile_end = reinterpret_cast<int32_t*>(smem + Cfg::kTileEndOffset);
  int32_t* smem_tile_info = reinterpret_cast<int32_t*>(smem + Cfg::kTileInfoOffset);  // [kStages][kTileInfoInts]
  // kFusedAct's hand-over (computed where used: kept in registers, they cost the math warpgroups
  // spills): staged (8 math warps arrive), freed (3 epilogue warps), the tile's info.
  auto fused_staged = [&] { return reinterpret_cast<uint64_t*>(smem + Cfg::kFusedOffset); };
  auto fused_freed = [&] { return reinterpret_cast<uint64_t*>(smem + Cfg::kFusedOffset + 8); };
  auto fused_info = [&] { return reinterpret_cast<int32_t*>(smem + Cfg::kFusedOffset + 16); };
  // The scheduler warp (kSchedWarp; it works with dynamic tiles): where the producer would claim
  // the next tile it arrives on `claim` instead; lane 0 of warp 10 claims that tile, resolves it
  // (the scheduler's get(), ~1 us under load) and publishes it, arriving on `ready`, so the
  // producer finds the next tile resolved at its tile change (Qwen3-30B's decode GEMMs alone
  // -6..-8%, perf notes v41). Not with kFusedAct, whose warps 9-11 run the activation epilogue.
  constexpr bool kSchedWarp = kLive && kCluster == 1 && !kFusedAct;
  auto sched_claim = [&] { return reinterpret_cast<uint64_t*>(smem + Cfg::kSchedOffset); };
  auto sched_ready = [&] { return reinterpret_cast<uint64_t*>(smem + Cfg::kSchedOffset + 8); };
  auto sched_info = [&] { return reinterpret_cast<int32_t*>(smem + Cfg::kSchedOffset + 16); };

  // Broadcast from lane 0 so that the compiler knows it is warp-uniform: the math warpgroups'
  // shared-memory descriptors, stage addresses and barrier addresses then live in uniform registers
  // and are computed on the uniform datapath (the 192-wide k-loop: 253 -> 217 instructions per
  // k-block, no R2UR before each wgmma; prefill GEMMs 3-8% faster, perf notes v20).
  const int warpgroup = __shfl_sync(0xFFFFFFFFu, static_cast<int>(threadIdx.x) / 128, 0);
  // Dynamic tiles (live single CTAs with a counter): a CTA's first tile is its block index, every
  // later one is claimed from the counter by the producer a ring (kStages k-blocks) before the
  // current tile's end, so tiles start in id order whatever each tile and SM takes (no drift
  // between CTAs that share an expert's weights through L2, no ragged end from a fixed share), and
  // it is published to the math warpgroups in shared memory with that tile's first k-block.
  const bool dynamic = kLive && kCluster == 1 && p.tile_counter != nullptr;
  auto claim = [&] { return static_cast<int>(gridDim.x) + atomicAdd(p.tile_counter, 1); };
  const uint32_t rank = kCluster == 1 ? 0 : ptx::cluster_ctarank();

  if (threadIdx.x == 256) {
    for (int i = 0; i < 3; ++i) ptx::prefetch_tensormap(&p.map_a[i]);
    ptx::prefetch_tensormap(kPairM ? &p.map_b_half : map_b);
    ptx::prefetch_tensormap(&p.map_sfa);
    if (Cfg::kBulkStore && !kFusedAct) ptx::prefetch_tensormap(&p.map_d);  // (kFusedAct: no D)
    for (int s = 0; s < kStages; ++s) {
      ptx::mbar_init(&full[s], Cfg::kFullArrivals);
      ptx::mbar_init(&empty[s], 8 * kCluster);  // each math warp of each CTA of the cluster
    }
    if constexpr (kSchedWarp) {
      ptx::mbar_init(sched_claim(), 1);
      ptx::mbar_init(sched_ready(), 1);
    }
    if constexpr (kFusedAct) {
      ptx::mbar_init(fused_staged(), 8);
      ptx::mbar_init(fused_freed(), 3);
      fused_info()[3] = -1;  // the number of tiles handed over, once the math has no tile left
    }
#if FP8MOE_GEMM_ABLATE == 8
    ptx::mbar_init(&ablate8_idle_bar, 1);
#endif
    ptx::fence_barrier_init();
  }
  if constexpr (kLive) {
    if (!ends_staged) Scheduler::stage(p.ends, p.num_experts, p.n, smem_ends, smem_tile_end);
    else if (threadIdx.x < 32) Scheduler::build(p.num_experts, p.n, smem_ends, smem_tile_end);  // (auto kernel)
  }
  if constexpr (kCluster > 1) ptx::cluster_sync();  // the peer's barriers exist before anyone uses them
  else __syncthreads();

  Scheduler scheduler = [&] {
    if constexpr (kLive) return Scheduler(smem_ends, smem_tile_end, p.num_experts, p.n);
    else return Scheduler(p.row_expert, p.m_cap, p.n);
  }();

  if (warpgroup == 2) {
    // ---------------- producer ----------------
    // (kFusedAct: 72 for the activation epilogue's warps, whose 16 values per lane then keep more
    // chains in flight: Qwen3-30B 4096/4096 -3% against 56; the math gets 216. perf notes v38)
    ptx::setmaxnreg_dec<kFusedAct ? 72 : 40>();
    if (threadIdx.x == 256) {
      int stage = 0;
      uint32_t phase = 0;
      // A (activations) is re-read by every N-tile of its rows while the weights stream past it:
      // keep it in L2 ahead of them (ncu, GEMM1 4096/4096: DRAM reads 2.19 -> 1.56 GB).
      const uint64_t pol_a = ptx::l2_policy_evict_last();
      // kScalesInRing: the element offset of the tile's B-scale row, and the copy of k-block kb's
      // scale into stage s (one of the stage's Cfg::kFullArrivals: cp_async_mbar_arrive).
      auto sb_row = [&](const sched::TileInfo& tile) {
        const int n128 = (tile.n_col + (kPairM ? 0 : static_cast<int>(rank) * kBlockN)) / 128;
        return (tile.expert * (p.n / 128) + n128) * kblocks(p);
      };
      auto load_sb = [&](int s, int row, int kb) {
        if constexpr (Cfg::kScalesInRing) {
          ptx::cp_async_4(smem_sfb + s, p.b_scale + row + kb);
          ptx::cp_async_mbar_arrive(&full[s]);
        }
      };
      // The bytes a stage of a 128 x BN tile receives: A's box of `box` rows and its scales (none
      // for an M-pair CTA without live rows) and the B tile.
      auto stage_bytes_for = [&](int box, bool a_loaded) -> uint32_t {
        return (a_loaded ? a_box_rows(box) * Cfg::kBlockK + Cfg::kSfaBoxBytes : 0) + Cfg::kBBytes;
      };
      // Tall tiles: a stage's bytes (A's first 128 rows, its rows 128.. in a box of box3, both rows'
      // scales, the 128 x 128 B block), and the loads of those rows and scales into stage s.
      auto tall_stage_bytes = [&](int box3) -> uint32_t {
        return (Cfg::kBlockM + a_box_rows(box3)) * Cfg::kBlockK + 2 * Cfg::kSfaBoxBytes +
               sched::kTallBlockN * Cfg::kBlockK;
      };
      // kFusedAct: B's gate block (rows n_col / 2.. of the expert's N) and its up block (n / 2 further)
      // into the stage's two 128-row halves.
      auto load_b_fused = [&](int s, int kb, int expert, int n_col) {
        const int32_t row = expert * p.n + n_col / 2;
        ptx::tma_load_2d(smem_b + s * Cfg::kBBytes, map_b, &full[s], kb * Cfg::kBlockK, row);
        ptx::tma_load_2d(smem_b + s * Cfg::kBBytes + 128 * Cfg::kBlockK, map_b, &full[s], kb * Cfg::kBlockK, row + p.n / 2);
      };
      auto load_tall_rows = [&](int s, int kb, int m_row, int box3) {
        ptx::tma_load_2d_hint(smem_b + s * Cfg::kBBytes + Cfg::kTallA3Offset, &p.map_a[box3], &full[s],
                              kb * Cfg::kBlockK, m_row + Cfg::kBlockM, pol_a);
        ptx::tma_load_2d(smem_sfa + s * Cfg::kSfaRows + Cfg::kBlockM, &p.map_sfa, &full[s], m_row + Cfg::kBlockM, kb);
      };
      // Programmatic dependent launch (kernels/launch.cuh): before waiting for the previous kernel,
      // request the first tile's weights for the whole ring (they do not depend on it), on an SM
      // that kernel has already left; A and its scales follow after the wait. Single CTAs only.
      int kb_first = 0;  // the first tile's k-blocks already requested
#if FP8MOE_GEMM_TRACE
      int requests = 0, tiles = 0;
#endif
      if constexpr (kCluster == 1 && FP8MOE_GEMM_ABLATE != 3) {
        sched::TileInfo t0;
        Scheduler first = scheduler;
        if (first.get(first_tile_id<kCluster>(), t0)) {
          kb_first = kblocks(p) < kStages ? kblocks(p) : kStages;
          const int box = a_box_for<kLive>(t0.row_end - t0.m_row);
          const bool tall = kTall && t0.tall;
          const int box3 = a_box_for<kLive>(t0.tall_rows());  // (tall: its rows 128..191)
          const int sb_first = sb_row(t0);
          for (int s = 0; s < kb_first; ++s) {
            load_sb(s, sb_first, s);
            ptx::mbar_arrive_expect_tx(&full[s], tall ? tall_stage_bytes(box3) : stage_bytes_for(box, true));
            if constexpr (kFusedAct)
              load_b_fused(s, s, t0.expert, t0.n_col);
            else
              ptx::tma_load_2d(smem_b + s * Cfg::kBBytes, tall ? &p.map_b[0] : map_b, &full[s], s * Cfg::kBlockK,
                               t0.expert * p.n + t0.n_col);
#if FP8MOE_GEMM_TRACE
            trace_request(requests, s == 0);
#endif
          }
          ptx::griddep_wait();
          for (int s = 0; s < kb_first; ++s) {
            ptx::tma_load_2d_hint(smem_a + s * Cfg::kABytes, &p.map_a[box], &full[s], s * Cfg::kBlockK, t0.m_row,
                                  pol_a);
            ptx::tma_load_2d(smem_sfa + s * Cfg::kSfaRows, &p.map_sfa, &full[s], t0.m_row, s);
            if (tall) load_tall_rows(s, s, t0.m_row, box3);
          }
          stage = kb_first % kStages;
          phase = kb_first == kStages ? 1u : 0u;
        }
      }
      ptx::griddep_wait();  // (returns at once when it already waited above)
      ptx::griddep_launch_dependents();
      sched::TileInfo t;
      int id = first_tile_id<kCluster>();
      [[maybe_unused]] uint32_t ready_phase = 0;
      // The next tile's claim: the atomic here, or (kSchedWarp) the scheduler warp's, signalled.
      auto claim_next = [&](int& next) {
        if constexpr (kSchedWarp) ptx::mbar_arrive(sched_claim());
        else next = claim();
      };
      // The tile of `id`: the scheduler's; after the first (kSchedWarp, dynamic), the tile the
      // scheduler warp claimed and resolved meanwhile (`id` and `next` then go unused).
      [[maybe_unused]] bool first = true;
      auto next_tile = [&]() -> bool {
        if constexpr (kSchedWarp) {
          if (!first && dynamic) {
            ptx::mbar_wait(sched_ready(), ready_phase);
            ready_phase ^= 1u;
            return t.read_published<kTall>(sched_info());
          }
          first = false;
        }
        return scheduler.get(id, t);
      };
      while (next_tile()) {
#if FP8MOE_GEMM_TRACE
        trace_producer(tiles, 0);
#endif
        int next = id + tile_id_step<kCluster>();
        if constexpr (kPairM) t.m_row += rank * Cfg::kBlockM;
        // N-pairs: this CTA's B tile; M-pairs: the half of the shared B tile this CTA multicasts.
        const int32_t b_row = t.expert * p.n + t.n_col + rank * (kPairM ? kBlockN / 2 : kBlockN);
        const int live_rows = t.row_end - t.m_row;
        const bool cta_live = !kPairM || live_rows > 0;  // M-pairs: this CTA's 128 rows hold live rows
        const int box = a_box_for<kLive>(live_rows);
        const CUtensorMap* map_a = &p.map_a[box];
        const int sb_tile = sb_row(t);
        // The tile's k-blocks, instantiated per tile shape so that the 128 x BN tiles' requests
        // stay as lean as without tall tiles (one loop for both shapes: +33% instructions per
        // stage, and the 192-wide GEMMs 14% slower at prefill; perf notes v22).
        auto request_tile = [&](auto tall_tile) {
          constexpr bool kTallTile = decltype(tall_tile)::value;
          const int box3 = a_box_for<kLive>(live_rows - Cfg::kBlockM);  // (tall: its rows 128..191)
          [[maybe_unused]] const CUtensorMap* map_b_tile = kTallTile ? &p.map_b[0] : map_b;
          const uint32_t stage_bytes = kTallTile ? tall_stage_bytes(box3) : stage_bytes_for(box, cta_live);
          for (int kb = kb_first; kb < kblocks(p); ++kb) {
            // Claimed one ring ahead of the tile's end, so that its latency hides behind the ring.
            const int claim_kb = kblocks(p) - kStages > kb_first ? kblocks(p) - kStages : kb_first;
            if (dynamic && kb == claim_kb) claim_next(next);
            ptx::mbar_wait(&empty[stage], phase ^ 1u);
#if FP8MOE_GEMM_TRACE
            if (kb == 0) trace_producer(tiles, 1);
#endif
            if (dynamic && kb == 0) {  // published by the arrive below
              t.publish<kTall>(smem_tile_info + Cfg::kTileInfoInts * stage, kTallTile);
            }
            if (FP8MOE_GEMM_ABLATE == 3) {
              ptx::mbar_arrive_n(&full[stage], Cfg::kFullArrivals);
              if (++stage == kStages) {
                stage = 0;
                phase ^= 1u;
              }
              continue;
            }
            load_sb(stage, sb_tile, kb);
            ptx::mbar_arrive_expect_tx(&full[stage], stage_bytes);
            if constexpr (kPairM) {
              if (cta_live) {
                ptx::tma_load_2d_hint(smem_a + stage * Cfg::kABytes, map_a, &full[stage], kb * Cfg::kBlockK, t.m_row,
                                      pol_a);
                ptx::tma_load_2d(smem_sfa + stage * Cfg::kSfaRows, &p.map_sfa, &full[stage], t.m_row, kb);
              }
              ptx::tma_load_2d_multicast(smem_b + stage * Cfg::kBBytes + rank * (kBlockN / 2) * Cfg::kBlockK,
                                         &p.map_b_half, &full[stage], kb * Cfg::kBlockK, b_row, (1u << kCluster) - 1);
            } else {
              if constexpr (kCluster == 1)
                ptx::tma_load_2d_hint(smem_a + stage * Cfg::kABytes, map_a, &full[stage], kb * Cfg::kBlockK, t.m_row,
                                      pol_a);
              else if (box == 0)  // each CTA multicasts its 64-row half of A into both CTAs
                ptx::tma_load_2d_multicast(smem_a + stage * Cfg::kABytes + rank * 64 * Cfg::kBlockK, &p.map_a[1],
                                           &full[stage], kb * Cfg::kBlockK, t.m_row + 64 * rank, (1u << kCluster) - 1);
              else if (rank == 0)  // a small (decode) box: CTA 0 multicasts all of it
                ptx::tma_load_2d_multicast(smem_a + stage * Cfg::kABytes, map_a, &full[stage], kb * Cfg::kBlockK,
                                           t.m_row, (1u << kCluster) - 1);
              if constexpr (kFusedAct)
                load_b_fused(stage, kb, t.expert, t.n_col);
              else
                ptx::tma_load_2d(smem_b + stage * Cfg::kBBytes, map_b_tile, &full[stage], kb * Cfg::kBlockK, b_row);
              ptx::tma_load_2d(smem_sfa + stage * Cfg::kSfaRows, &p.map_sfa, &full[stage], t.m_row, kb);
              if constexpr (kTallTile) load_tall_rows(stage, kb, t.m_row, box3);
            }
#if FP8MOE_GEMM_TRACE
            trace_request(requests, kb == 0);
            if (kb == 0) trace_producer(tiles, 2);
            if (kb + 1 == kblocks(p)) trace_producer(tiles, 3);
#endif
            if (++stage == kStages) {
              stage = 0;
              phase ^= 1u;
            }
          }
        };
        if constexpr (kTall) {
          if (t.tall) request_tile(std::true_type{});
          else request_tile(std::false_type{});
        } else {
          request_tile(std::false_type{});
        }
        if (dynamic && kb_first >= kblocks(p)) claim_next(next);  // the whole tile was requested before the wait
        kb_first = 0;
        id = next;
#if FP8MOE_GEMM_TRACE
        ++tiles;
#endif
      }
      if (dynamic) {  // no tile left: the math warpgroups find expert -1 with the next stage
        ptx::mbar_wait(&empty[stage], phase ^ 1u);
        smem_tile_info[Cfg::kTileInfoInts * stage] = -1;  // no expert: the end
        ptx::mbar_arrive_n(&full[stage], Cfg::kFullArrivals);
      }
    } else if (kFusedAct && threadIdx.x >= 288) {  // the activation epilogue's three warps
      if constexpr (kFusedAct) {
        const int warp = (threadIdx.x - 288) / 32, lane = threadIdx.x % 32;
        const bool silu = p.act.kind == num::ActKind::kSilu;
        // Tile `tile` is there once `staged` completes its phase; there is none once the math has
        // published the number of tiles it handed over and that number is `tile`.
        auto wait_tile = [&](int tile) {
          const volatile int32_t* handed = fused_info() + 3;
          for (uint32_t polls = 0; !ptx::mbar_try_wait(fused_staged(), static_cast<uint32_t>(tile) & 1u);) {
            if (*handed == tile) return false;
            if (++polls == (1u << 28)) __trap();  // (as ptx::mbar_wait)
          }
          return true;
        };
        for (int tile = 0; wait_tile(tile); ++tile) {
          const int m_row = fused_info()[0], live_rows = fused_info()[1], group = fused_info()[2];
          const int rows = live_rows < Cfg::kBlockM ? live_rows : Cfg::kBlockM;
          if (silu && !p.a2_pow2)
            sm90_act_quant_rows<num::ActKind::kSilu, false, Cfg::kDBytes>(p, smem_d, m_row, rows, group, warp, lane);
          else if (silu)
            sm90_act_quant_rows<num::ActKind::kSilu, true, Cfg::kDBytes>(p, smem_d, m_row, rows, group, warp, lane);
          else if (!p.a2_pow2)
            sm90_act_quant_rows<num::ActKind::kSwigluOai, false, Cfg::kDBytes>(p, smem_d, m_row, rows, group, warp, lane);
          else
            sm90_act_quant_rows<num::ActKind::kSwigluOai, true, Cfg::kDBytes>(p, smem_d, m_row, rows, group, warp, lane);
          __syncwarp();
          if (lane == 0) ptx::mbar_arrive(fused_freed());
        }
      }
    } else if (kSchedWarp && threadIdx.x == 320) {  // the scheduler warp (lane 0 of warp 10)
      if (dynamic) {
        Scheduler own = scheduler;
        sched::TileInfo t;
        // One claim per tile the producer requests, from its first tile on (none: no tile at all).
        if (own.get(first_tile_id<kCluster>(), t)) {
          for (uint32_t ph = 0;; ph ^= 1u) {
            ptx::mbar_wait(sched_claim(), ph);
            const bool ok = own.get(claim(), t);
            if (!ok) t.expert = -1;
            t.publish<kTall>(sched_info(), t.tall);
            ptx::mbar_arrive(sched_ready());
            if (!ok) break;
          }
        }
      }
    } else if (FP8MOE_GEMM_ABLATE == 8 && threadIdx.x == 288) {  // the ring's stand-in consumer
      int stage = 0;
      uint32_t phase = 0;
      sched::TileInfo t;
      int id = first_tile_id<kCluster>();
      for (bool first = true;; first = false) {
        if (dynamic && !first) {  // published with the tile's first k-block (or the end: expert -1)
          ptx::mbar_wait(&full[stage], phase);
          if (smem_tile_info[Cfg::kTileInfoInts * stage] < 0) break;
        } else if (!scheduler.get(id, t)) {
          break;
        }
        for (int kb = 0; kb < kblocks(p); ++kb) {
          ptx::mbar_wait(&full[stage], phase);
          ptx::mbar_arrive_n(&empty[stage], 8 * kCluster);  // (clusters: this CTA's count only)
          if (++stage == kStages) {
            stage = 0;
            phase ^= 1u;
          }
        }
        if (!dynamic) id += tile_id_step<kCluster>();
      }
    }
  } else {
    // ---------------- math ----------------
    ptx::setmaxnreg_inc<kFusedAct ? 216 : 232>();
    const int warp = (threadIdx.x % 128) / 32;
    const int lane = threadIdx.x % 32;
    const int row_in_tile = warpgroup * 64 + warp * 16 + lane / 4;  // and row_in_tile + 8
    // The math's wait for stage s's data. ABLATE=8 waits instead on a barrier that never changes
    // phase (parity 1 of a fresh barrier counts as completed): the same instructions without the
    // wait. (Leaving the waits out altogether let ptxas serialise the wgmma, C7514, and made that
    // build measure a slower math loop: perf notes v25.)
    auto wait_full = [&](int s, uint32_t ph) {
#if FP8MOE_GEMM_ABLATE == 8
      (void)s, (void)ph;
      ptx::mbar_wait(&ablate8_idle_bar, 1u);
#else
      ptx::mbar_wait(&full[s], ph);
#endif
    };
    const int num_n128 = p.n / 128;
    int stage = 0;
    uint32_t phase = 0;
    auto advance = [&] {
      if (++stage == kStages) {
        stage = 0;
        phase ^= 1u;
      }
    };
    // Releases stage s to the producer (every math warp of every CTA of the cluster arrives).
    auto release = [&](int s) {
      if (FP8MOE_GEMM_ABLATE == 8) return;
      __syncwarp();
      if constexpr (kCluster == 1) {
        if (lane == 0) ptx::mbar_arrive(&empty[s]);
      } else if (lane < kCluster) {
        ptx::mbar_arrive_cluster(&empty[s], lane);  // lane r releases the stage in CTA r
      }
    };
    const uint32_t a_desc_offset = warpgroup * 64 * 128;
    // Partial 64-row halves with swapped operands (FP8MOE_GEMM_SWAP_TAIL): the live 256-wide kernels.
    constexpr bool kSwapTail = FP8MOE_GEMM_SWAP_TAIL != 0 && kLive && kBlockN == 256 && !kPairM;
    constexpr bool kSwapTall = FP8MOE_GEMM_SWAP_TALL != 0 && kTall;  // (the same for a tall tile's rows past 128)
    // The A scales of a D^T fragment's rows (swapped operands: rows row0 + 8c + 2 (lane % 4) + j of
    // the current stage into sa[2c + j]).
    auto load_row_scales = [&](auto& sa, int row0) {
      constexpr int kN = sizeof(sa) / sizeof(float);
#pragma unroll
      for (int c = 0; c < kN / 2; ++c)
#pragma unroll
        for (int j = 0; j < 2; ++j) sa[2 * c + j] = smem_sfa[stage * Cfg::kSfaRows + row0 + 8 * c + 2 * (lane % 4) + j];
    };
    sched::TileInfo t;
#if FP8MOE_GEMM_TRACE
    int traced = 0, data_stamps = 0;
    trace_time(traced++);
#endif
    // The next tile's id: the fixed stride's; or (dynamic) none, the producer publishes the tile
    // itself with its first k-block: wait for that (the wait the k-loop would do first; a second
    // wait on a completed phase returns at once).
    auto next_id = [&](int id) {
      if (!dynamic || FP8MOE_GEMM_ABLATE == 8) return id + tile_id_step<kCluster>();
      wait_full(stage, phase);
      return id;
    };
    // The tile of an id: the scheduler's, except (dynamic) after the first tile, where the
    // producer has published it resolved (expert -1: no tile left).
    bool published = false;
    auto get_tile = [&](int id) {
      if (published) {
        return t.read_published<kTall>(smem_tile_info + Cfg::kTileInfoInts * stage);
      }
      published = dynamic && FP8MOE_GEMM_ABLATE != 8;
      return scheduler.get(id, t);
    };
    [[maybe_unused]] uint32_t fused_tiles = 0;  // tiles handed to the activation epilogue
    for (int id = first_tile_id<kCluster>(); get_tile(id); id = next_id(id)) {
#if FP8MOE_GEMM_TRACE
      trace_time(traced++);
#endif
      if constexpr (kPairM) {  // this CTA's 128 rows of the 256-row block
        t.m_row += rank * Cfg::kBlockM;
        t.set_live_halves();
      } else {
        t.n_col += rank * kBlockN;
      }
      // A live tile with 17..64 live rows gives both warpgroups work: each takes one 64-column
      // half of rows [0, 64) instead of warpgroup 1 idling (128-wide live kernel; the padded
      // baseline keeps the DeepGEMM layout). Measured on the H200: 512/512 GEMMs -5..-10%; with
      // at most 16 live rows (the 16-row A box, decode) it was 1% slower, so those keep one warpgroup.
      const bool col_split = kLive && kBlockN == 128 && FP8MOE_GEMM_ABLATE != 2 && !t.live_half[1] &&
                             t.row_end - t.m_row > a_box_rows(2);
      const bool live =
          col_split || (FP8MOE_GEMM_ABLATE != 2 && (warpgroup == 0 ? t.live_half[0] : t.live_half[1]) &&
                        (FP8MOE_GEMM_ABLATE != 10 || t.m_row + 64 * (warpgroup + 1) <= t.row_end));
      // kSwapTail: this warpgroup's half, with 1..48 live rows, is computed with swapped operands
      // (below, at the epilogue): its rows rounded up to 16 (else 0).
      const int half_rows = t.row_end - t.m_row - 64 * warpgroup;
      const int swapped_rows = kSwapTail && live && half_rows < 49 ? (half_rows + 15) / 16 * 16 : 0;
      // kSwapTall: a tall tile's rows past 128, at most 32 of them, rounded up to 16 (else 0).
      const int tall_swapped_rows = kSwapTall && t.tall && t.tall_rows() <= 32 ? (t.tall_rows() + 15) / 16 * 16 : 0;
      float out[2 * Half::kAccum];
#pragma unroll
      for (int i = 0; i < 2 * Half::kAccum; ++i) out[i] = 0.0f;

      if (!live) {  // keep the ring in step: wait for every stage and release it
        for (int kb = 0; kb < kblocks(p); ++kb) {
          wait_full(stage, phase);
          release(stage);
          advance();
        }
      } else {
        // B scales: the stage's copy (kScalesInRing), else from global memory. A 192-wide tile
        // straddles two 128-wide B-scale blocks: columns [0, split) use the first, the rest the
        // second (clamped: past N they feed only columns that are never stored).
        // (kFusedAct: the gate block's scales, and the up block's I / 128 blocks further.)
        const int n128 = kFusedAct ? t.n_col / 256 : t.n_col / 128;
        const int split = 128 - t.n_col % 128;  // 128 or 64
        const int64_t expert_scales = static_cast<int64_t>(t.expert) * num_n128;
        const int n128_hi = kFusedAct ? n128 + num_n128 / 2 : n128 + 1 < num_n128 ? n128 + 1 : n128;
        const float* sb_lo = p.b_scale + (expert_scales + n128) * kblocks(p);
        const float* sb_hi = p.b_scale + (expert_scales + n128_hi) * kblocks(p);
        // The tile's columns are computed as two halves with their own accumulators, A = columns
        // [0, BN/2) and B = [BN/2, BN), each a separate wgmma group over the 128-K block, pipelined
        // so that one half runs on the tensor cores while the other is promoted:
        //   wait A(kb) -> promote A(kb) [B(kb) runs] -> wait full kb+1 -> issue A(kb+1)
        //   -> wait B(kb) -> release stage kb -> promote B(kb) [A(kb+1) runs] -> issue B(kb+1)
        // One accumulator set per half costs the registers of one full-width set. The 128-wide
        // kernel (decode-sized and padded tiles: weight streaming) instead releases stage kb before
        // waiting for kb+1 (wait B(kb) right after promoting A), so it never holds two stages of
        // the ring; the 192-wide (prefill) kernel keeps A(kb+1) queued behind B(kb) instead.
        constexpr bool kReleaseFirst = kBlockN == 128;
        // One wgmma group over the stage's 128-K block: acc (64 x N, N = 2 x its size) (+)= the
        // 64 A rows at descriptor desc_a x the N B rows at desc_b (issue_group: at tile pointers).
        auto issue_group_desc = [&](auto& acc, uint64_t desc_a, uint64_t desc_b) {
          constexpr int kAcc = sizeof(acc) / sizeof(float);
          using Mma = ptx::WgmmaE4M3<2 * kAcc>;
#pragma unroll
          for (int i = 0; i < kAcc; ++i) ptx::fence_operand(acc[i]);
          ptx::wgmma_fence();
#pragma unroll
          for (int k = 0; k < Cfg::kBlockK / 32; ++k) {
            // +32 bytes along K inside the 128-byte swizzle atom = +2 in the descriptor's address field
            Mma::mma(acc, ptx::smem_desc_advance(desc_a, 2 * k), ptx::smem_desc_advance(desc_b, 2 * k), k > 0);
          }
          ptx::wgmma_commit();
#pragma unroll
          for (int i = 0; i < kAcc; ++i) ptx::fence_operand(acc[i]);
        };
        auto issue_group = [&](auto& acc, const uint8_t* a_tile, const uint8_t* b_tile) {
          issue_group_desc(acc, ptx::smem_desc_k_major_sw128(a_tile), ptx::smem_desc_k_major_sw128(b_tile));
        };
        // Column half `half` of this warpgroup's rows (A at a_offset in the stage).
        auto issue = [&](float(&acc)[Half::kAccum], int half, uint32_t a_offset) {
          issue_group(acc, smem_a + stage * Cfg::kABytes + a_offset,
                      smem_b + stage * Cfg::kBBytes + half * (kBlockN / 2) * Cfg::kBlockK);
        };
        // out[out0 + i] += scale(chunk) * acc[i]; fragment chunk c = 8 columns at 8c (out[4c..4c+3]).
        // Chunks 0..7 take sa * sb, 8..15 sa * sb or (a 192-wide tile straddling two B-scale
        // blocks at 64) sa * sb2, 16..23 sh * sb2: sh = sa, except in a tall tile, whose chunks
        // 16..23 are rows 128..191 (sh their A scales, sb2 = sb).
        auto promote = [&](const auto& acc, int out0, float sa0, float sa1, float sb, float sb2, float sh0, float sh1) {
          constexpr int kAcc = sizeof(acc) / sizeof(float);
          const float lo0 = __fmul_rn(sa0, sb), lo1 = __fmul_rn(sa1, sb);
          const float hi0 = __fmul_rn(sh0, sb2), hi1 = __fmul_rn(sh1, sb2);
          const float mid0 = split == 128 ? lo0 : hi0, mid1 = split == 128 ? lo1 : hi1;  // (tall: split is 128)
#pragma unroll
          for (int i = 0; i < kAcc; i += 4) {
            const int chunk = (out0 + i) / 4;
            const float s0 = chunk < 8 ? lo0 : chunk < 16 ? mid0 : hi0;
            const float s1 = chunk < 8 ? lo1 : chunk < 16 ? mid1 : hi1;
            float* o = out + out0 + i;
            o[0] = __fmaf_rn(s0, acc[i + 0], o[0]);
            o[1] = __fmaf_rn(s0, acc[i + 1], o[1]);
            o[2] = __fmaf_rn(s1, acc[i + 2], o[2]);
            o[3] = __fmaf_rn(s1, acc[i + 3], o[3]);
          }
        };

        if (kSwapTail && swapped_rows > 0) {
          // computed and stored at the epilogue (its own registers: beside the quarter loop's
          // accumulators, ptxas spilled both loops)
        } else if (col_split) {  // this warpgroup: rows [0, 64), columns [64 * warpgroup, +64)
          const int row = row_in_tile - 64 * warpgroup;
          float acc[Half::kAccum];
          for (int kb = 0; kb < kblocks(p); ++kb) {
            wait_full(stage, phase);
            const float sb = smem_sfb[stage];  // (128 wide: kScalesInRing)
            const float sa0 = smem_sfa[stage * Cfg::kSfaRows + row];
            const float sa1 = smem_sfa[stage * Cfg::kSfaRows + row + 8];
            issue(acc, warpgroup, 0);
            ptx::wgmma_wait<0>();
#pragma unroll
            for (int i = 0; i < Half::kAccum; ++i) ptx::fence_operand(acc[i]);
            release(stage);
            if (warpgroup == 0)  // (a compile-time half: `out` must stay in registers)
              promote(acc, 0, sa0, sa1, sb, sb, sa0, sa1);
            else
              promote(acc, Half::kAccum, sa0, sa1, sb, sb, sa0, sa1);
            advance();
          }
        } else if (kTall && t.tall) {
          // A tall tile: its "halves" are this warpgroup's 64 rows x all 128 columns (A: out[0, 64),
          // fragment chunks 0..15) and its rows 128.. x its 64 columns [64 * warpgroup, +64) (B:
          // out[64, 96), chunks 16..23; A in the B stage's last 8 KB; promoted with those rows'
          // scales sh, rows row_tall of the stage's 256): 96 accumulators as in the 128 x 192
          // tile, each half one wgmma group (one half over two groups of different N serialised
          // the wgmma pipeline in ptxas). The same pipeline as the two-half loop below (kept apart
          // from it: wrapped in one generic loop for both shapes, the 128 x 192 k-loop compiled
          // differently and measured 2-3% slower).
          // kSwapTall: with at most 32 rows past 128, B is computed with swapped operands as the
          // partial halves of the 256-wide kernels are (B^T = the warpgroup's 64 weight rows x
          // the tall rows rounded up to R = 16 or 32: m64nRk32), into out[64, 64 + R / 2) as D^T
          // fragments (element i = 4c + 2h + j: column 16 warp + lane / 4 + 8h, row 8c +
          // 2 (lane % 4) + j), promoted with the same products; the epilogue stages it transposed.
          if constexpr (kTall) {
            auto tall_loop = [&](auto r_tag) {
              constexpr int R = decltype(r_tag)::value;  // 64: not swapped
              constexpr bool kSwapped = R < 64;
              constexpr int kAccB = kSwapped ? R / 2 : 32;
              constexpr int kSh = kSwapped ? R / 4 : 2;  // the B half's A scales per thread
              float acc_a[64], acc_b[kAccB];
              const int row_tall = Cfg::kBlockM + row_in_tile - 64 * warpgroup;
              auto issue_a = [&] {
                issue_group(acc_a, smem_a + stage * Cfg::kABytes + a_desc_offset, smem_b + stage * Cfg::kBBytes);
              };
              auto issue_b = [&] {
#if FP8MOE_GEMM_ABLATE == 9  // the rows past 128 cost no tensor work (an empty group keeps the waits' count)
                ptx::wgmma_fence();
                ptx::wgmma_commit();
#else
                if constexpr (kSwapped)
                  issue_group(acc_b, smem_b + stage * Cfg::kBBytes + warpgroup * 64 * Cfg::kBlockK,
                              smem_b + stage * Cfg::kBBytes + Cfg::kTallA3Offset);
                else
                  issue_group(acc_b, smem_b + stage * Cfg::kBBytes + Cfg::kTallA3Offset,
                              smem_b + stage * Cfg::kBBytes + warpgroup * 64 * Cfg::kBlockK);
#endif
              };
              auto load_sh = [&](float(&sh)[kSh]) {
                if constexpr (kSwapped) {
                  load_row_scales(sh, Cfg::kBlockM);
                } else {
                  sh[0] = smem_sfa[stage * Cfg::kSfaRows + row_tall];
                  sh[1] = smem_sfa[stage * Cfg::kSfaRows + row_tall + 8];
                }
              };
              auto promote_a = [&](float sa0, float sa1, float sb, const float(&sh)[kSh]) {
                if constexpr (kSwapped) promote(acc_a, 0, sa0, sa1, sb, sb, sa0, sa1);
                else promote(acc_a, 0, sa0, sa1, sb, sb, sh[0], sh[1]);  // (sh unused: split is 128)
              };
              auto promote_b = [&](float sa0, float sa1, float sb, const float(&sh)[kSh]) {
                if constexpr (kSwapped) {
#pragma unroll
                  for (int i = 0; i < kAccB; ++i)
                    out[64 + i] = __fmaf_rn(__fmul_rn(sh[2 * (i / 4) + i % 2], sb), acc_b[i], out[64 + i]);
                } else {
                  promote(acc_b, 64, sa0, sa1, sb, sb, sh[0], sh[1]);
                }
              };
              wait_full(stage, phase);
              float sa0 = smem_sfa[stage * Cfg::kSfaRows + row_in_tile];
              float sa1 = smem_sfa[stage * Cfg::kSfaRows + row_in_tile + 8];
              float sh[kSh];
              load_sh(sh);
              float sb = __ldg(sb_lo);  // (a tall tile's 128 columns: one B-scale block)
              issue_a();
              issue_b();
              for (int kb = 0; kb + 1 < kblocks(p); ++kb) {
                const float sb_next = __ldg(sb_lo + kb + 1);
                ptx::wgmma_wait<1>();  // A(kb) done; B(kb) may still run
#pragma unroll
                for (int i = 0; i < 64; ++i) ptx::fence_operand(acc_a[i]);
                promote_a(sa0, sa1, sb, sh);
                const int cur = stage;
                advance();
                wait_full(stage, phase);
                const float sa0_next = smem_sfa[stage * Cfg::kSfaRows + row_in_tile];
                const float sa1_next = smem_sfa[stage * Cfg::kSfaRows + row_in_tile + 8];
                float sh_next[kSh];
                load_sh(sh_next);
                issue_a();  // A(kb+1)
                ptx::wgmma_wait<1>();  // B(kb) done; A(kb+1) may still run
                release(cur);          // both halves have read stage kb
#pragma unroll
                for (int i = 0; i < kAccB; ++i) ptx::fence_operand(acc_b[i]);
                promote_b(sa0, sa1, sb, sh);
                issue_b();  // B(kb+1)
                sa0 = sa0_next, sa1 = sa1_next, sb = sb_next;
#pragma unroll
                for (int i = 0; i < kSh; ++i) sh[i] = sh_next[i];
              }
              ptx::wgmma_wait<1>();
#pragma unroll
              for (int i = 0; i < 64; ++i) ptx::fence_operand(acc_a[i]);
              promote_a(sa0, sa1, sb, sh);
              ptx::wgmma_wait<0>();
#pragma unroll
              for (int i = 0; i < kAccB; ++i) ptx::fence_operand(acc_b[i]);
              release(stage);
              promote_b(sa0, sa1, sb, sh);
              advance();
            };
            if (tall_swapped_rows == 16) tall_loop(std::integral_constant<int, 16>{});
            else if (tall_swapped_rows == 32) tall_loop(std::integral_constant<int, 32>{});
            else tall_loop(std::integral_constant<int, 64>{});
          }
        } else if constexpr (kBlockN == 256) {
          // The four-quarter loop of a 128 x 256 tile: each warpgroup's 64 x 256 outputs are four
          // 64-column quarters, each a wgmma group (m64n64) over the 128-K block, two in flight:
          // quarter q + 2 goes into the accumulator quarter q was just promoted from, so the
          // registers are the two-half loop's (128 outputs + 2 x 32). Quarters 0-1 take the first
          // B-scale block, 2-3 the second (a 256-wide tile starts on a 256-column boundary).
          using Quarter = ptx::WgmmaE4M3<64>;
          float acc_x[Quarter::kAccum], acc_y[Quarter::kAccum];
          // The stage's two descriptors, built once per k-block (stage_descs, after its wait); a
          // quarter's B rows start 8 KB (512 16-byte units) apart. (Built per group from the stage's
          // pointers, as issue_group does, the loop took 316 instead of 290 instructions per k-block
          // and seed GEMM1 4096/4096 was 3% slower: perf notes v37.)
          uint64_t desc_a = 0, desc_b = 0;
          auto stage_descs = [&] {
            desc_a = ptx::smem_desc_k_major_sw128(smem_a + stage * Cfg::kABytes + a_desc_offset);
            desc_b = ptx::smem_desc_k_major_sw128(smem_b + stage * Cfg::kBBytes);
          };
          auto issue_q = [&](float(&acc)[Quarter::kAccum], int q) {
            issue_group_desc(acc, desc_a, ptx::smem_desc_advance(desc_b, 512 * q));
          };
          auto done = [&](float(&acc)[Quarter::kAccum]) {
#pragma unroll
            for (int i = 0; i < Quarter::kAccum; ++i) ptx::fence_operand(acc[i]);
          };
          wait_full(stage, phase);
#if FP8MOE_GEMM_TRACE >= 2
          trace_time(traced++);
#endif
          stage_descs();
          float sa0 = smem_sfa[stage * Cfg::kSfaRows + row_in_tile];
          float sa1 = smem_sfa[stage * Cfg::kSfaRows + row_in_tile + 8];
          float sb = __ldg(sb_lo), sb2 = __ldg(sb_hi);
          issue_q(acc_x, 0);
          issue_q(acc_y, 1);
          for (int kb = 0; kb + 1 < kblocks(p); ++kb) {
            const float sb_next = __ldg(sb_lo + kb + 1), sb2_next = __ldg(sb_hi + kb + 1);
            ptx::wgmma_wait<1>();  // quarter 0 done
            done(acc_x);
            promote(acc_x, 0, sa0, sa1, sb, sb, sa0, sa1);
#if FP8MOE_GEMM_TRACE >= 2
            if (kb == 0) trace_time(traced++);
#endif
            issue_q(acc_x, 2);
            ptx::wgmma_wait<1>();  // quarter 1 done
            done(acc_y);
            promote(acc_y, 32, sa0, sa1, sb, sb, sa0, sa1);
            issue_q(acc_y, 3);
            ptx::wgmma_wait<1>();  // quarter 2 done
            done(acc_x);
            promote(acc_x, 64, sa0, sa1, sb2, sb2, sa0, sa1);
            const int cur = stage;
            advance();
            wait_full(stage, phase);
            const float sa0_next = smem_sfa[stage * Cfg::kSfaRows + row_in_tile];
            const float sa1_next = smem_sfa[stage * Cfg::kSfaRows + row_in_tile + 8];
            stage_descs();
            issue_q(acc_x, 0);     // quarter 0 of kb + 1
            ptx::wgmma_wait<1>();  // quarter 3 done
            release(cur);          // every quarter has read stage kb
            done(acc_y);
            promote(acc_y, 96, sa0, sa1, sb2, sb2, sa0, sa1);
            issue_q(acc_y, 1);  // quarter 1 of kb + 1
            sa0 = sa0_next, sa1 = sa1_next, sb = sb_next, sb2 = sb2_next;
          }
          ptx::wgmma_wait<1>();
          done(acc_x);
          promote(acc_x, 0, sa0, sa1, sb, sb, sa0, sa1);
#if FP8MOE_GEMM_TRACE >= 2
          if (kblocks(p) == 1) trace_time(traced++);
#endif
          issue_q(acc_x, 2);
          ptx::wgmma_wait<1>();
          done(acc_y);
          promote(acc_y, 32, sa0, sa1, sb, sb, sa0, sa1);
          issue_q(acc_y, 3);
          ptx::wgmma_wait<1>();
          done(acc_x);
          promote(acc_x, 64, sa0, sa1, sb2, sb2, sa0, sa1);
          ptx::wgmma_wait<0>();
          release(stage);
#if FP8MOE_GEMM_TRACE >= 2
          trace_time(traced++);
#endif
          done(acc_y);
          promote(acc_y, 96, sa0, sa1, sb2, sb2, sa0, sa1);
#if FP8MOE_GEMM_TRACE >= 2
          trace_time(traced++);
#endif
          advance();
        } else {  // the two-half loop of a 128 x BN tile
        float acc_a[Half::kAccum], acc_b[Half::kAccum];
#if FP8MOE_GEMM_TRACE
        trace_data(data_stamps);
#endif
        wait_full(stage, phase);
#if FP8MOE_GEMM_TRACE
        trace_data(data_stamps);
#endif
#if FP8MOE_GEMM_TRACE >= 2
        trace_time(traced++);
#endif
        float sa0 = smem_sfa[stage * Cfg::kSfaRows + row_in_tile];
        float sa1 = smem_sfa[stage * Cfg::kSfaRows + row_in_tile + 8];
        float sb = Cfg::kScalesInRing ? smem_sfb[stage] : __ldg(sb_lo), sb2 = kBlockN > 128 ? __ldg(sb_hi) : sb;
        issue(acc_a, 0, a_desc_offset);
        issue(acc_b, 1, a_desc_offset);
        for (int kb = 0; kb + 1 < kblocks(p); ++kb) {
          // From global memory one k-block ahead, before the stage's wait (not kScalesInRing).
          float sb_next = Cfg::kScalesInRing ? 0.0f : __ldg(sb_lo + kb + 1),
                sb2_next = kBlockN > 128 ? __ldg(sb_hi + kb + 1) : sb_next;
          ptx::wgmma_wait<1>();  // A(kb) done; B(kb) may still run
#pragma unroll
          for (int i = 0; i < Half::kAccum; ++i) ptx::fence_operand(acc_a[i]);
          promote(acc_a, 0, sa0, sa1, sb, sb2, sa0, sa1);
#if FP8MOE_GEMM_TRACE >= 2
          if (kb == 0) trace_time(traced++);
#endif
          const int cur = stage;
          if constexpr (kReleaseFirst) {
            ptx::wgmma_wait<0>();  // B(kb) done
            release(cur);
          }
          advance();
#if FP8MOE_GEMM_TRACE
          trace_data(data_stamps);
#endif
          wait_full(stage, phase);
#if FP8MOE_GEMM_TRACE
          trace_data(data_stamps);
#endif
          const float sa0_next = smem_sfa[stage * Cfg::kSfaRows + row_in_tile];
          const float sa1_next = smem_sfa[stage * Cfg::kSfaRows + row_in_tile + 8];
          if constexpr (Cfg::kScalesInRing) sb_next = sb2_next = smem_sfb[stage];
          issue(acc_a, 0, a_desc_offset);  // A(kb+1)
          if constexpr (!kReleaseFirst) {
            ptx::wgmma_wait<1>();  // B(kb) done; A(kb+1) may still run
            release(cur);          // both halves have read stage kb
          }
#pragma unroll
          for (int i = 0; i < Half::kAccum; ++i) ptx::fence_operand(acc_b[i]);
          promote(acc_b, Half::kAccum, sa0, sa1, sb, sb2, sa0, sa1);
          issue(acc_b, 1, a_desc_offset);  // B(kb+1)
          sa0 = sa0_next, sa1 = sa1_next, sb = sb_next, sb2 = sb2_next;
        }
        ptx::wgmma_wait<1>();
#pragma unroll
        for (int i = 0; i < Half::kAccum; ++i) ptx::fence_operand(acc_a[i]);
        promote(acc_a, 0, sa0, sa1, sb, sb2, sa0, sa1);
#if FP8MOE_GEMM_TRACE >= 2
        if (kblocks(p) == 1) trace_time(traced++);
#endif
        ptx::wgmma_wait<0>();
#pragma unroll
        for (int i = 0; i < Half::kAccum; ++i) ptx::fence_operand(acc_b[i]);
        release(stage);
#if FP8MOE_GEMM_TRACE >= 2
        trace_time(traced++);
#endif
        promote(acc_b, Half::kAccum, sa0, sa1, sb, sb2, sa0, sa1);
#if FP8MOE_GEMM_TRACE >= 2
        trace_time(traced++);
#endif
        advance();
        }
      }

      // Epilogue. Live tiles store their live rows only (a decode tile's 64-row half holds a few:
      // its dead rows were up to 16% of GEMM2's traffic); padded tiles store every row of every
      // half (zeros where dead), as the padded baseline does. The BF16 fragments go through
      // stmatrix into the warpgroup's staging tile (128-byte swizzle, 64 columns per 8 KB), then
      //   - in the 192-wide kernel, a warpgroup with all 64 rows live stages all its columns and
      //     hands them to TMA (bulk stores issued by its first thread) and goes on to the next
      //     tile: the global writes overlap its k-loop (an epilogue that waited for its own stores
      //     took ~1 us of every prefill tile; the staging tile costs the 192-wide ring its fifth
      //     stage; perf notes v17-v18);
      //   - otherwise, per 64-column half, the 128 threads copy the staged rows out with 16-byte
      //     stores (8 threads per 128-byte row segment), so no row past an expert's end is written.
      // kFusedAct: the hand-over of a tile to the activation epilogue's warps, once they have read
      // the last one (a warp arrives on `staged` after staging its own 16 rows; warp 0 of
      // warpgroup 0 also publishes the tile).
      auto fused_hand_over = [&](auto stage_rows) {
        ptx::mbar_wait(fused_freed(), (fused_tiles & 1u) ^ 1u);
        stage_rows();
        __syncwarp();
        if (lane == 0) {
          if (threadIdx.x == 0) {
            fused_info()[0] = t.m_row;
            fused_info()[1] = t.row_end - t.m_row;
            fused_info()[2] = t.n_col / 256;
          }
          ptx::mbar_arrive(fused_staged());
        }
        ++fused_tiles;
      };
      if (kLive && !live) {  // (kFusedAct: rows past the tile's live rows; the warps never read them)
        if constexpr (kFusedAct) fused_hand_over([] {});
        continue;
      }
      uint8_t* tile_d = smem_d + warpgroup * Cfg::kDBytes;
      const int row_base = col_split ? 0 : 64 * warpgroup;
      const int rows_to_store = t.row_end - t.m_row - row_base;  // >= 64 for every padded tile
      const bool store_leader = threadIdx.x % 128 == 0;
      auto stage_half = [&](int h, uint8_t* dst) {  // stmatrix of 64-column half h into dst
#pragma unroll
        for (int i = 8 * h; i < 8 * h + 8; i += 2) {  // fragment chunks i, i+1 = 16 columns
          const int j = lane / 8;                      // the matrix this lane addresses
          const int r = warp * 16 + (j % 2) * 8 + lane % 8;
          const int c = i + j / 2 - 8 * h;             // 16-byte chunk within the 128-byte row
          auto pack = [&](int q) {
            const __nv_bfloat162 v = __floats2bfloat162_rn(out[q], out[q + 1]);
            return *reinterpret_cast<const uint32_t*>(&v);
          };
          ptx::stmatrix_x4(dst + sw128_offset(r, c), pack(4 * i), pack(4 * i + 2), pack(4 * i + 4),
                           pack(4 * i + 6));
        }
      };
      // Copies `rows` staged rows (64 columns, 128-byte swizzle) out to dst with the warpgroup's
      // 128 threads, 16-byte stores, 8 threads per 128-byte row segment (the 128-wide body with
      // p.d_evict_last: with an L2 evict_last policy).
      auto copy_out = [&](const uint8_t* src, __nv_bfloat16* dst, int rows) {
#pragma unroll
        for (int q = threadIdx.x % 128; q < 64 * 8; q += 128) {  // 64 rows x 8 chunks of 16 bytes
          const int r = q / 8, c = q % 8;
          if (r >= rows || FP8MOE_GEMM_ABLATE == 4) break;  // rows ascend with q
          const uint4 v = *reinterpret_cast<const uint4*>(src + sw128_offset(r, c));
          __nv_bfloat16* to = dst + static_cast<int64_t>(r) * p.n + 8 * c;
          if (kBlockN == 128 && p.d_evict_last) ptx::st_global_hint(to, v, ptx::l2_policy_evict_last());
          else *reinterpret_cast<uint4*>(to) = v;
        }
      };
      // Stages R rows x 64 columns held as D^T fragments (wgmma m64nR with the weights as M:
      // element i = 4c + 2h + j, value(i), is column 16 warp + lane / 4 + 8h and row 8c +
      // 2 (lane % 4) + j) into a 64-column staging block in D's layout: stmatrix .trans turns
      // each 8 x 8 block over. Row blocks c (lanes 0-15) and c2 = c + 1 (lanes 16-31); R / 8 is
      // even, so c2 is never clamped (written with the constant c + 1, the same stores moved
      // ptxas' schedule of the 256-wide quarter k-loop, 487 -> 478 instructions, so this form stays).
      auto stage_transposed = [&](auto r_tag, auto value, uint8_t* dst) {
        constexpr int R = decltype(r_tag)::value;
        auto pack = [&](int q) {
          const __nv_bfloat162 v = __floats2bfloat162_rn(value(q), value(q + 1));
          return *reinterpret_cast<const uint32_t*>(&v);
        };
#pragma unroll
        for (int c = 0; c < R / 8; c += 2) {
          const int c2 = c + 1 < R / 8 ? c + 1 : c;
          const int r = 8 * (lane / 16 ? c2 : c) + lane % 8;
          ptx::stmatrix_x4<true>(dst + sw128_offset(r, 2 * warp + (lane / 8) % 2), pack(4 * c), pack(4 * c + 2),
                                 pack(4 * c2), pack(4 * c2 + 2));
        }
      };
      if (kSwapTail && swapped_rows > 0) {
        // A partial 64-row half with swapped operands: the tensor cores compute R = swapped_rows
        // (16, 32 or 48) rows instead of 64. Each 64-column quarter q is D^T[64 columns, R rows] =
        // B[64 q.., K] x A[R rows, K]^T (m64nRk32, the weights as the M side), two quarters (one
        // B-scale block) per k-block step, promoted with the products the quarter loop uses (the
        // row's A scale x the quarter's B scale), so the rows come out bit-identical. Fragment
        // element i = 4c + 2h + j of quarter q (o[q * R / 2 + i]) is column 16 warp + lane / 4 + 8h
        // of the quarter and row 8c + 2 (lane % 4) + j; stmatrix .trans stages it as D's layout.
        auto swapped = [&](auto r_tag) {
          constexpr int R = decltype(r_tag)::value;
          using Mma = ptx::WgmmaE4M3<R>;
          constexpr int kAcc = Mma::kAccum;
          float o[4 * kAcc], acc0[kAcc], acc1[kAcc];
          // The tile's two B-scale blocks, as the k-loops' sb_lo / sb_hi (256 wide: never clamped).
          const int n128 = kFusedAct ? t.n_col / 256 : t.n_col / 128;
          const int64_t expert_scales = static_cast<int64_t>(t.expert) * num_n128;
          const float* sb_lo = p.b_scale + (expert_scales + n128) * kblocks(p);
          const float* sb_hi = p.b_scale + (expert_scales + n128 + (kFusedAct ? num_n128 / 2 : 1)) * kblocks(p);
#pragma unroll
          for (int i = 0; i < 4 * kAcc; ++i) o[i] = 0.0f;
          auto fence_acc = [&] {
#pragma unroll
            for (int i = 0; i < kAcc; ++i) ptx::fence_operand(acc0[i]), ptx::fence_operand(acc1[i]);
          };
          for (int kb = 0; kb < kblocks(p); ++kb) {
            const float sb = __ldg(sb_lo + kb), sb2 = __ldg(sb_hi + kb);
            wait_full(stage, phase);
            float sa[R / 4];  // the A scales of rows 8c + 2 (lane % 4) + j
            load_row_scales(sa, 64 * warpgroup);
            const uint64_t desc_w = ptx::smem_desc_k_major_sw128(smem_b + stage * Cfg::kBBytes);
            const uint64_t desc_r = ptx::smem_desc_k_major_sw128(smem_a + stage * Cfg::kABytes + a_desc_offset);
#pragma unroll
            for (int g = 0; g < 2; ++g) {  // quarters 2g, 2g + 1
              fence_acc();
              ptx::wgmma_fence();
#pragma unroll
              for (int k = 0; k < Cfg::kBlockK / 32; ++k)
                Mma::mma(acc0, ptx::smem_desc_advance(desc_w, 512 * (2 * g) + 2 * k), ptx::smem_desc_advance(desc_r, 2 * k),
                         k > 0);
#pragma unroll
              for (int k = 0; k < Cfg::kBlockK / 32; ++k)
                Mma::mma(acc1, ptx::smem_desc_advance(desc_w, 512 * (2 * g + 1) + 2 * k),
                         ptx::smem_desc_advance(desc_r, 2 * k), k > 0);
              ptx::wgmma_commit();
              ptx::wgmma_wait<0>();
              fence_acc();
              if (g == 1) release(stage);
#pragma unroll
              for (int i = 0; i < kAcc; ++i) {
                const float s = __fmul_rn(sa[2 * (i / 4) + i % 2], g == 0 ? sb : sb2);
                o[2 * g * kAcc + i] = __fmaf_rn(s, acc0[i], o[2 * g * kAcc + i]);
                o[(2 * g + 1) * kAcc + i] = __fmaf_rn(s, acc1[i], o[(2 * g + 1) * kAcc + i]);
              }
            }
            advance();
          }
          // Quarter h into a staging tile (64 rows x 64 columns): 8 x 8 blocks transposed.
          auto stage_quarter = [&](int h, uint8_t* dst) {
            stage_transposed(r_tag, [&](int q) { return o[h * kAcc + q]; }, dst);
          };
          if constexpr (kFusedAct) {
            fused_hand_over([&] {
#pragma unroll
              for (int h = 0; h < 4; ++h) stage_quarter(h, tile_d + h * 8192);
            });
          } else {
            if (Cfg::kBulkStore && store_leader) ptx::bulk_wait_read<0>();  // the staging tile is free
            __nv_bfloat16* d_rows = p.d + static_cast<int64_t>(t.m_row + row_base) * p.n + t.n_col;
#pragma unroll
            for (int h = 0; h < 4; ++h) {
              ptx::named_barrier(1 + warpgroup, 128);  // everyone has copied the previous quarter out
              stage_quarter(h, tile_d);
              ptx::named_barrier(1 + warpgroup, 128);
              copy_out(tile_d, d_rows + 64 * h, rows_to_store);
            }
          }
        };
        if (swapped_rows == 16) swapped(std::integral_constant<int, 16>{});
        else if (swapped_rows == 32) swapped(std::integral_constant<int, 32>{});
        else swapped(std::integral_constant<int, 48>{});
#if FP8MOE_GEMM_TRACE >= 2  // a tile's stamps as the quarter loop leaves them, all at its end (1: no bulk store)
        for (int i = 0; i < 4; ++i) trace_time(traced++);
        if (FP8MOE_GEMM_TRACE == 6 && !kFusedAct)
          for (int i = 0; i < 4; ++i) trace_time(traced++, 1);
        trace_time(traced++);
#endif
        continue;
      }
      if constexpr (kFusedAct) {  // the tile's BF16 values (Y1's bits) to the activation epilogue
        fused_hand_over([&] {
#pragma unroll
          for (int h = 0; h < 4; ++h) stage_half(h, tile_d + h * 8192);
        });
#if FP8MOE_GEMM_TRACE >= 2
        trace_time(traced++);
#endif
        continue;
      }
      // The staging tile is free once TMA has read what it was last handed (a tile ago).
      if (Cfg::kBulkStore && store_leader) ptx::bulk_wait_read<0>();
      if (Cfg::kBulkStore && rows_to_store >= 64 && FP8MOE_GEMM_ABLATE != 4) {
        // A tall tile's third 64-column block is its rows 128.. x columns [64 * warpgroup, +64):
        // stored by TMA when all 64 rows are live, else its live rows copied out (never a row
        // past the expert's end).
        const bool tall = kTall && t.tall;
        const int tall_rows = t.tall_rows();
        auto block_col = [&](int h) { return tall && h == 2 ? t.n_col + 64 * warpgroup : t.n_col + 64 * h; };
        auto block_row = [&](int h) { return tall && h == 2 ? t.m_row + 128 : t.m_row + row_base; };
#if FP8MOE_GEMM_TRACE == 6
        trace_time(traced++);
#endif
        ptx::named_barrier(1 + warpgroup, 128);
#if FP8MOE_GEMM_TRACE == 6
        trace_time(traced++);
#endif
        // (kSwapTall: a tall tile's rows past 128 as D^T fragments)
        auto stage_tall_swapped = [&](auto r_tag) {
          stage_transposed(r_tag, [&](int q) { return out[64 + q]; }, tile_d + 2 * 8192);
        };
#pragma unroll
        for (int h = 0; h < kBlockN / 64; ++h) {
          if (h == 2 && tall_swapped_rows > 0) {
            if (tall_swapped_rows == 16) stage_tall_swapped(std::integral_constant<int, 16>{});
            else stage_tall_swapped(std::integral_constant<int, 32>{});
          } else if (block_col(h) < p.n) {
            stage_half(h, tile_d + h * 8192);  // (a partial last tile)
          }
        }
#if FP8MOE_GEMM_TRACE == 6
        trace_time(traced++);
#endif
        ptx::fence_proxy_async_smem();  // the stmatrix writes, for TMA
        ptx::named_barrier(1 + warpgroup, 128);
#if FP8MOE_GEMM_TRACE == 6
        trace_time(traced++);
#endif
        if (store_leader) {
#pragma unroll
          for (int h = 0; h < kBlockN / 64; ++h)
            if (block_col(h) < p.n && !(tall && h == 2 && tall_rows < 64))
              ptx::tma_store_2d(&p.map_d, tile_d + h * 8192, block_col(h), block_row(h));
          ptx::bulk_commit();
        }
        if (tall && tall_rows < 64)
          copy_out(tile_d + 2 * 8192, p.d + static_cast<int64_t>(block_row(2)) * p.n + block_col(2), tall_rows);
      } else {
#if FP8MOE_GEMM_TRACE == 6
        for (int i = 0; i < 4; ++i) trace_time(traced++, 1);  // (marks: not the bulk-store path)
#endif
        __nv_bfloat16* d_rows = p.d + static_cast<int64_t>(t.m_row + row_base) * p.n + t.n_col;
#pragma unroll
        for (int h = 0; h < kBlockN / 64; ++h) {
          if (t.n_col + 64 * h >= p.n) break;  // a partial last tile (BLOCK_N = 192)
          if (col_split && h != warpgroup) continue;
          ptx::named_barrier(1 + warpgroup, 128);  // everyone has copied the previous half out
          stage_half(h, tile_d);
          ptx::named_barrier(1 + warpgroup, 128);
          copy_out(tile_d, d_rows + 64 * h, rows_to_store);
        }
      }
#if FP8MOE_GEMM_TRACE >= 2
      trace_time(traced++);
#endif
    }
#if FP8MOE_GEMM_TRACE
    trace_time(traced);
#endif
    // No tile left: the number of tiles handed over, for the epilogue's warps (wait_tile). Not as
    // one more phase of `staged`: without a wait for `freed` first, one warpgroup's arrivals could
    // complete a phase alone, and that wait after the loop cost the math warpgroups their register
    // budget (ptxas then allocated the whole kernel at 168 registers and spilled the accumulators).
    if (kFusedAct && threadIdx.x == 0) *reinterpret_cast<volatile int32_t*>(fused_info() + 3) = static_cast<int32_t>(fused_tiles);
  }
  // The epilogue's last TMA stores are done before the CTA exits.
  if (Cfg::kBulkStore && threadIdx.x < 256 && threadIdx.x % 128 == 0) ptx::bulk_wait<0>();
  // Neither CTA of a cluster may exit while its peer can still arrive on its barriers.
  if constexpr (kCluster > 1) ptx::cluster_sync();
}
#endif

template <int kBlockN, int kStages, int kCluster, bool kLive, bool kPairM = false, bool kFusedAct = false>
__global__ void __launch_bounds__(kSm90GemmThreads, 1) sm90_fp8_grouped_gemm_1d2d_kernel(const __grid_constant__ Sm90GemmParams p) {
#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
  sm90_gemm_body<kBlockN, kStages, kCluster, kLive, kPairM, false, kFusedAct>(p);
#elif defined(__CUDA_ARCH__)
  __trap();  // built for another architecture: the host never launches this there
#endif
}

// The live schedule's default kernel below capacities that fix the width (host side): single CTAs
// whose tile width follows the live rows, which only the device knows (a captured graph replays
// the same launch with new routing). Every thread reaches the same choice from ends[]
// (sched::wide_tiles): 192 columns when the touched experts average more than one 128-row M-tile
// (mid-size batches), 128 at decode sizes. Shared memory is sized for the larger of the two.
__global__ void __launch_bounds__(kSm90GemmThreads, 1) sm90_fp8_grouped_gemm_1d2d_auto_kernel(const __grid_constant__ Sm90GemmParams p) {
#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
  // Every warp loads ends[] (one round trip) and reaches the same choice itself, with no shared
  // flag and CTA barrier before the body; warp 0 stores ends[] where the chosen body's scheduler
  // keeps it, so the body does not load it again. At decode this start is on the pipeline's
  // critical path (the auto kernel cost ~1.5 us per GEMM over a fixed-width one, perf notes v20).
  const sched::EndsInWarp ends = sched::load_ends_warp(p.ends, p.num_experts);
  const int wide_lane = sched::wide_tiles_warp(ends, p.num_experts);
  const bool wide = __shfl_sync(0xFFFFFFFFu, wide_lane, 0) != 0;  // (warp-uniform for the compiler)
  if (threadIdx.x < 32) {
    extern __shared__ uint8_t smem_raw[];
    uint8_t* smem = smem_raw + ptx::smem_align_1024_offset(smem_raw);
    int32_t* ends_smem = reinterpret_cast<int32_t*>(
        smem + (wide ? Sm90GemmConfig<192, sm90_stages_for(192), true>::kEndsOffset
                     : Sm90GemmConfig<128, sm90_stages_for(128)>::kEndsOffset));
#pragma unroll
    for (int i = 0; i < sched::EndsInWarp::kPerLane; ++i) {
      const int e = static_cast<int>(threadIdx.x) + 32 * i;
      if (e < p.num_experts) ends_smem[e] = ends.end[i];
    }
    __syncwarp();
  }
  if (wide) sm90_gemm_body<192, sm90_stages_for(192), 1, true, false, true>(p, true);
  else sm90_gemm_body<128, sm90_stages_for(128), 1, true, false>(p, true);
#elif defined(__CUDA_ARCH__)
  __trap();
#endif
}

}  // namespace fp8moe::gemm
