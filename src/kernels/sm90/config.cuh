// Configuration of the warp-specialized Hopper kernel for the grouped tile classes (kM64, kM128;
// head_dim 64 and 128): the tile configs (WsTile), and per (dtype, head_dim, tile) the thread
// roles, register budgets, KV tile and stage count, and the shared-memory layout, with
// static_asserts on shared memory and registers.
//
// CTA = 3 warpgroups. Warpgroups 0 and 1 are consumers (the Q copy, wgmma, softmax, epilogue);
// warpgroup 2 is the producer (cp.async gathers of the paged K/V tiles into a ring of STAGES
// stages).
//   kRows64Tok64:   a kM64 item (<= 64 packed rows). Both consumers hold the same 64 rows and take
//                   alternate 64-token KV tiles (consumer w: tiles w, w + 2, ...), each with its
//                   own online-softmax state; the epilogue merges the two states of a row.
//   kRows128Tok128: a kM128 item (<= 128 packed rows). Consumer w holds packed rows [64 w, 64 w +
//                   64) and computes every 128-token KV tile.
// Shared memory, from a 1024-byte aligned base (the dynamic base is aligned at run time):
//   [0, KV_BYTES)             STAGES x (K tile, V tile), [BN][HD] each in the column-block layout
//   [Q_OFF, + Q_BYTES)        Q [ROWS][HD], column-block layout (read by wgmma as A)
//   [MASK_OFF, + MASK_BYTES)  STAGES x BN uint64 mask words (masked items)
// The epilogue's staged states alias [0, KV_BYTES + Q_BYTES). The mbarriers are static shared
// memory (kernel.cuh, PipelineBars below).
#pragma once

#include "../kernel_common.cuh"
#include "treeattn/plan/tile_policy.h"

namespace treeattn::cuda_detail::sm90 {

/// Tile configs of the warp-specialized kernel (see the file comment).
enum class WsTile : int { kRows64Tok64 = 0, kRows128Tok128 = 1 };

/// The tile config that runs a plan tile class (1 = kM64, 2 = kM128).
constexpr WsTile ws_tile_for_class(int plan_class) {
  return plan_class == 1 ? WsTile::kRows64Tok64 : WsTile::kRows128Tok128;
}

/// Opt-in shared memory per CTA on sm_90 (227 KB).
inline constexpr int kSm90SmemBytes = 227 * 1024;
/// Registers per SM on sm_90.
inline constexpr int kSm90Registers = 64 * 1024;

template <DType kDType, int kHeadDim, WsTile kTile, KvDType kKv = KvDType::kSame>
struct WsConfig {
  static_assert(kHeadDim == 64 || kHeadDim == 128, "the warp-specialized kernel: head_dim <= 128");
  using Traits = DTypeTraits<kDType>;
  using T = typename Traits::T;
  static constexpr DType kDT = kDType;
  static constexpr KvDType kKV = kKv;
  /// fp8 KV cache: the producer loads the fp8 rows into registers and stores them converted into
  /// the 16-bit stages the consumers read (the consumers' code is the same).
  static constexpr bool KV8 = is_fp8(kKv);
  static constexpr int HD = kHeadDim;
  static constexpr int CPT = HD / 8;  ///< 16-byte chunks per row
  /// The consumers take alternate KV tiles of the same rows (kM64) instead of splitting the rows.
  static constexpr bool SPLIT_KV = kTile == WsTile::kRows64Tok64;
  static constexpr int ROWS = SPLIT_KV ? 64 : 128;  ///< packed rows of the CTA (Q tile)
  static constexpr int BN = SPLIT_KV ? 64 : 128;    ///< KV tokens per tile
  static constexpr int NT_S = BN / 8;               ///< n8 tiles of a consumer's S
  static constexpr int NT_O = HD / 8;               ///< n8 tiles of a consumer's O
  static constexpr int KS = HD / 16;                ///< k16 steps of Q K^T
  static constexpr int KV_STEPS = BN / 16;          ///< k16 steps of P V
  static_assert(BN == tile::ws_kv_tile(SPLIT_KV ? 1 : 2),
                "the cost model's ws tile (tile_policy.h)");

  // ---- threads and registers
  static constexpr int WG_THREADS = 128;
  static constexpr int CONSUMERS = 2;  ///< consumer warpgroups
  static constexpr int CONSUMER_THREADS = CONSUMERS * WG_THREADS;
  static constexpr int PRODUCER_THREADS = WG_THREADS;
  static constexpr int THREADS = CONSUMER_THREADS + PRODUCER_THREADS;
  /// Per-thread registers after setmaxnreg: the producer gives registers up, the consumers hold S,
  /// P and O of their 64 rows.
  static constexpr int PRODUCER_REGS = KV8 ? 88 : 40;  ///< fp8: a tile's K and V in registers
  static constexpr int CONSUMER_REGS = KV8 ? 208 : 232;
  /// Registers a thread starts with: the launch bound of THREADS threads, one CTA per SM
  /// (65536 / 384 = 170, rounded down to a multiple of 8 by the allocator).
  static constexpr int LAUNCH_REGS = (kSm90Registers / THREADS) / 8 * 8;
  // setmaxnreg.inc waits until the CTA's pool (what the launch allocated) has the registers: the
  // split must fit the pool, not the SM, or the consumers wait for ever
  static_assert(PRODUCER_THREADS * PRODUCER_REGS + CONSUMER_THREADS * CONSUMER_REGS <=
                    LAUNCH_REGS * THREADS,
                "register split within the CTA's allocation");
  static_assert(PRODUCER_REGS <= LAUNCH_REGS && CONSUMER_REGS >= LAUNCH_REGS, "setmaxnreg order");
  /// Warps that consume each KV tile: they arrive on its empty barriers.
  static constexpr int TILE_CONSUMER_WARPS = (SPLIT_KV ? 1 : CONSUMERS) * WG_THREADS / 32;

  // ---- producer: one lane per token row computes its page address (see producer.cuh)
  static constexpr int GCPT = KV8 ? HD / 16 : CPT;  ///< 16-byte chunks of a K/V row in memory
  static constexpr int ROWS_PER_PASS = PRODUCER_THREADS / GCPT;  ///< token rows per copy pass
  static constexpr int PASSES = BN / ROWS_PER_PASS;              ///< copy passes per K or V tile
  static constexpr int RPW = 32 / GCPT;                          ///< rows per warp per pass
  static constexpr int WROWS = PASSES * RPW;                     ///< rows per warp per tile
  static_assert(BN % ROWS_PER_PASS == 0 && ROWS % ROWS_PER_PASS == 0, "loader passes");
  static_assert(WROWS <= 32, "one lane per token row of the warp's share of a tile");
  static_assert(ROWS_PER_PASS % 8 == 0, "a thread's rows keep their swizzle phase across passes");

  // ---- shared memory (bytes)
  static constexpr int TILE_BYTES = BN * HD * 2;  ///< one K or V tile
  static constexpr int STAGE_BYTES = 2 * TILE_BYTES;
  static constexpr int Q_BYTES = ROWS * HD * 2;
  static constexpr int MASK_STAGE_BYTES = BN * 8;
  static constexpr int ALIGN_SLACK = 1024;  ///< the run-time alignment of the dynamic base
  static constexpr int MAX_STAGES = 8;
  /// mbarriers per stage: K full, V full, K empty, V empty (static shared memory)
  static constexpr int BARS_PER_STAGE = 4;
  static constexpr int stages_that_fit() {
    int s = MAX_STAGES;
    while (s > 2 &&
           ALIGN_SLACK + s * (STAGE_BYTES + MASK_STAGE_BYTES) + Q_BYTES + s * BARS_PER_STAGE * 8 >
               kSm90SmemBytes)
      --s;
    return s;
  }
  static constexpr int STAGES = stages_that_fit();
  static constexpr int KV_BYTES = STAGES * STAGE_BYTES;
  static constexpr int Q_OFF = KV_BYTES;
  static constexpr int MASK_OFF = Q_OFF + Q_BYTES;
  static constexpr int DYN_SMEM_BYTES = MASK_OFF + STAGES * MASK_STAGE_BYTES + ALIGN_SLACK;
  static constexpr int BAR_BYTES = STAGES * BARS_PER_STAGE * 8;
  static_assert(DYN_SMEM_BYTES + BAR_BYTES <= kSm90SmemBytes, "shared memory of one CTA per SM");
  static_assert(STAGES >= 2, "the pipeline needs two stages");
  static_assert(TILE_BYTES % 1024 == 0 && Q_BYTES % 1024 == 0, "tiles on 1024-byte boundaries");

  // ---- epilogue: NS states of ROWS_S rows each, staged in fp32
  static constexpr int NS = SPLIT_KV ? 2 : 1;
  static constexpr int ROWS_S = SPLIT_KV ? 64 : 128;
  static constexpr int O_PITCH = HD + 8;  ///< fp32 row pitch (conflict-free float2 stores)
  static constexpr int EPI_O_BYTES = NS * ROWS_S * O_PITCH * 4;
  static constexpr int EPI_BYTES = EPI_O_BYTES + 2 * NS * ROWS_S * 4;
  static_assert(EPI_BYTES <= KV_BYTES + Q_BYTES, "the staged states alias the stages and Q");

  // ---- named barriers (0 is __syncthreads): consumer w waits on kSchedBar + w for its turn to
  // issue wgmma; the consumers meet on kConsumersBar after copying Q and around the staging of
  // their states
  static constexpr uint32_t kSchedBar = 1;
  static constexpr uint32_t kConsumersBar = 3;
};

/// Shared addresses of the pipeline's mbarriers, STAGES of each kind: K full / V full (the
/// producer's 128 threads arrive through their cp.async copies), K empty / V empty (one arrival
/// per warp that consumed the tile).
template <int STAGES>
struct PipelineBars {
  uint32_t base;
  __device__ __forceinline__ uint32_t full_k(int s) const { return base + 8 * s; }
  __device__ __forceinline__ uint32_t full_v(int s) const { return base + 8 * (STAGES + s); }
  __device__ __forceinline__ uint32_t empty_k(int s) const { return base + 8 * (2 * STAGES + s); }
  __device__ __forceinline__ uint32_t empty_v(int s) const { return base + 8 * (3 * STAGES + s); }
};

}  // namespace treeattn::cuda_detail::sm90
