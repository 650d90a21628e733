// Configuration of the paged attention kernel (decode_kernel.cuh) per (dtype, head_dim, kernel
// config, KV type): its tiles, warps and stages from the tile policy (treeattn/plan/tile_policy.h),
// whether Q stays in registers, the fp8 pipeline (one-byte stages, K converted in registers under
// KREG), the shared-memory layout and its swizzles, with static_asserts on shared memory. The
// layout itself is described in decode_kernel.cuh's header comment.
#pragma once

#include <cstdint>

#include "decode_params.h"
#include "kernel_common.cuh"
#include "sm90/ptx_sm90.cuh"

namespace treeattn::cuda_detail {

/// Stages of the fp8 KV pipeline (a stage holds half the bytes of a dtype stage).
#ifndef TREEATTN_FP8_STAGES
#define TREEATTN_FP8_STAGES 4
#endif
constexpr int kFp8Stages = TREEATTN_FP8_STAGES;
/// fp8 kM16: K converted in registers (1) or through the dtype tile like V (0), for the A/B.
#ifndef TREEATTN_FP8_KREG
#define TREEATTN_FP8_KREG 1
#endif

template <DType kDType, int kHeadDim, int kClass, KvDType kKv = KvDType::kSame>
struct AttnConfig {
  static_assert(kHeadDim == 64 || kHeadDim == 128 || kHeadDim == 256, "head_dim");
  static_assert(kClass >= 0 && kClass < kNumKernelConfigs, "kernel config");
  using Traits = DTypeTraits<kDType>;
  using T = typename Traits::T;
  static constexpr int HD = kHeadDim;
  static constexpr int CPT = HD / 8;  ///< 16-byte chunks per row
  static constexpr int BN = kv_tile(kClass, HD);
  static constexpr int WM = warps_m(kClass);
  static constexpr int WN = warps_n(kClass, HD);
  static constexpr int ROWS = 16 * WM;
  static constexpr int BNW = warp_tokens(kClass, HD);  ///< tokens per warp per tile
  static constexpr int THREADS = 32 * WM * WN;
  static constexpr bool KV8 = is_fp8(kKv);  ///< fp8 cache: one-byte stages + one dtype tile
  // fp8 (but the short config) at kFp8Stages, at head_dim 256 at most 4 (its Q tile stays in
  // shared memory)
  static constexpr int STAGES = !KV8 || kClass == tile::kConfigShort ? num_stages(kClass)
                                : HD <= 128 || kFp8Stages < 4        ? kFp8Stages
                                                                     : 4;
  static_assert(STAGES >= 2, "pipeline");
  static constexpr bool Q_IN_REGS = HD <= 128;  ///< hd256 re-reads Q from shared memory
  /// fp8, one warp along the rows, Q in registers, 16 tokens a warp: Q K^T reads K from the fp8
  /// stage and converts it in registers (see the file comment); only V has a dtype tile.
  static constexpr bool KREG = TREEATTN_FP8_KREG && KV8 && WM == 1 && Q_IN_REGS && BNW == 16;
  /// fp8: each warp converts the token slice only it reads (one warp along the rows), else the
  /// CTA converts the whole tile (loader.cuh, convert_fp8_stage)
  static constexpr bool FP8_WARP_LOCAL = WM == 1;
  static_assert(BNW % 16 == 0, "each warp needs whole k16 steps of P V");
  static_assert(THREADS % CPT == 0, "loader rows");
  static constexpr int ROWS_PER_PASS = THREADS / CPT;  ///< rows one loader pass covers
  static_assert(BN % ROWS_PER_PASS == 0 && ROWS % ROWS_PER_PASS == 0, "loader passes");
  // shared memory (bytes)
  static constexpr int TILE_BYTES = BN * HD * 2;  ///< one of K or V, one stage (dtype)
  static constexpr int STAGE_BYTES = 2 * TILE_BYTES;
  static constexpr int TILE8_BYTES = BN * HD;  ///< one of K or V, one fp8 stage
  static constexpr int STAGE8_BYTES = 2 * TILE8_BYTES;
  /// dtype stages (fp8: the converted tile(s) at offset 0: V only under KREG, else K and V), then
  /// the fp8 stages at KV8_OFF
  static constexpr int KV8_OFF = !KV8 ? 0 : KREG ? TILE_BYTES : STAGE_BYTES;
  static constexpr int KV_BYTES = KV8 ? KV8_OFF + STAGES * STAGE8_BYTES : STAGES * STAGE_BYTES;
  static constexpr int Q_BYTES = ROWS * HD * 2;
  // Q in registers: sQ aliases the last stage (first overwritten after Q reached registers), or
  // for fp8 the converted tile (under KREG the V tile; first written after Q reached registers).
  static_assert(!Q_IN_REGS || Q_BYTES <= (KREG ? TILE_BYTES : STAGE_BYTES), "sQ alias");
  static constexpr int Q_OFF = !Q_IN_REGS ? KV_BYTES : KV8 ? 0 : (STAGES - 1) * STAGE_BYTES;
  static constexpr int MASK_OFF = Q_IN_REGS ? KV_BYTES : KV_BYTES + Q_BYTES;
  static constexpr int MAIN_BYTES = MASK_OFF + STAGES * BN * 8;
  static constexpr int O_PITCH = HD + 8;  ///< fp32 row pitch of the epilogue tile
  static constexpr int EPI_O_BYTES = WN * ROWS * O_PITCH * 4;
  static constexpr int EPI_BYTES = EPI_O_BYTES + 2 * WN * ROWS * 4;
  /// kM64 / kM128 up to head_dim 128 keep K, V and Q in wgmma's 128-byte-swizzled column-block
  /// layout (wgmma.cuh) on every target, and run wgmma on sm_90a; the tiles then start at a
  /// 1024-byte boundary (the base is aligned at run time: 1 KB of slack).
  static constexpr bool BLOCK_LAYOUT = tile::block_layout(kClass, HD);
  static constexpr bool USE_WGMMA = BLOCK_LAYOUT && TREEATTN_WGMMA;
  static constexpr int ALIGN_SLACK = BLOCK_LAYOUT ? 1024 : 0;
  /// the item rows' (query, slot) pairs, kept from the kernel's start for the epilogue's writes;
  /// in the kM16 configs the item's whole record (DeviceRecordHead: the item, its rows at
  /// kRecordRowsOff, its first ranges and page ids), fetched at the start in one round
  static constexpr bool RECORD = tile::plan_class(kClass) == 0;
  static constexpr int ROWINFO_OFF = MAIN_BYTES > EPI_BYTES ? MAIN_BYTES : EPI_BYTES;
  static constexpr int ROWINFO_BYTES = RECORD ? kRecordMaxBytes : ROWS * 8;
  static_assert(ROWINFO_OFF % 16 == 0 && ROWS <= THREADS, "int2 pairs, one per staging thread");
  static_assert(!RECORD || ROWS <= kRecordRows, "a record holds a kM16 item's rows");
  /// A config that runs cluster pairs (tile::pair_config, tile::use_pair_m16): the first CTA of a
  /// pair receives the second's merged state of each row here (fp32 O [ROWS][O_PITCH], then m and
  /// l [ROWS] each), written by the second CTA while the first still computes, so it aliases
  /// nothing.
  static constexpr bool PAIR = tile::pair_config(kClass, HD);
  static constexpr int PEER_OFF = ROWINFO_OFF + ROWINFO_BYTES;
  static constexpr int PEER_BYTES = PAIR ? ROWS * O_PITCH * 4 + 2 * ROWS * 4 : 0;
  static_assert(PEER_OFF % 16 == 0, "16-byte chunks of the peer's O");
  static constexpr int SMEM_BYTES = PEER_OFF + PEER_BYTES + ALIGN_SLACK;
  static_assert(!BLOCK_LAYOUT || (STAGE_BYTES % 1024 == 0 && TILE_BYTES % 1024 == 0), "align");
  /// Byte offset of 16-byte chunk `c` of row `r` in a swizzled [NR][HD] dtype tile: rows of HD
  /// elements with the chunk index XORed by (r & 7), or (BLOCK_LAYOUT) HD / 64 column blocks of
  /// [NR][64].
  template <int NR>
  static __device__ __forceinline__ uint32_t swz(int r, int c) {
    if constexpr (BLOCK_LAYOUT)
      return block_swz<NR>(r, c);
    else
      return static_cast<uint32_t>(r * HD * 2 + ((c ^ (r & 7)) << 4));
  }
  static_assert(SMEM_BYTES <= 163 * 1024, "must fit an A100 (164 KB per SM)");
  /// Byte offset of 16-byte chunk `c` (16 fp8 elements) of row `r` in a KREG fp8 K stage: rows of
  /// HD bytes, the chunk XORed so that ldmatrix's 8 rows at one chunk hit 8 different bank
  /// groups (HD 128: 8 chunks a row, by r & 7; HD 64: two rows a 128-byte line, by (r >> 1) & 3).
  static __device__ __forceinline__ uint32_t k8_swz(int r, int c) {
    static_assert(!KREG || HD == 64 || HD == 128, "k8_swz: head_dim");
    const int x = HD == 128 ? (r & 7) : ((r >> 1) & 3);
    return static_cast<uint32_t>(r * HD + ((c ^ x) << 4));
  }
};

}  // namespace treeattn::cuda_detail
