// Paged tree-attention kernel (one CTA per (work item, group of KV heads)), as a template over
// (dtype, head_dim, kernel config, KV type); instantiated by src/kernels/inst_*.cu. Its pieces:
// the configuration and shared-memory layout (decode_config.cuh), the two MMA paths (mma.sync per
// warp, wgmma per warpgroup: mainloop_mma.cuh), the online softmax (softmax.cuh), the Q copy,
// range cursor and epilogue writes (kernel_common.cuh), the phase stamps (timeline.cuh); this
// file holds the kernel: the paged K/V loader, the tile loop and the epilogue's staging. The merge
// of the partial outputs is in merge.cuh.
//
// Attention kernel, per CTA and KV head (the kM16 configs walk heads_per_cta heads one after the
// other, so the item's metadata chain is paid once per CTA, not per head):
//   packed rows  pr = r * group + h  <->  item row r (query rows[row_begin + r].query),
//                                        qo head kv_head * group + h
//   sQ  [ROWS][HD]           dtype, 16-byte chunks XOR-swizzled by (row & 7)
//   sK, sV [STAGES][BN][HD]  dtype, same swizzle; filled by cp.async (rows past the item repeat
//                            its last token, hidden by the tail test or a zero mask word),
//                            each token row's page address computed by one lane of its warp
//                            (kM64/kM128 up to HD 128: HD / 64 column blocks, AttnConfig::swz)
//   sMask [STAGES][BN]       uint64 mask word of each token's range (masked items only)
// An fp8 KV cache (kKv e4m3 / e5m2) lands by cp.async in one-byte stages s8K, s8V [STAGES][BN][HD]
// (16-byte copies); at each tile the stage is converted into a single dtype tile sK, sV in the
// layout above (exact: kernel_common.cuh), by each warp for its own token slice in the kM16
// configs, else by the CTA, and the MMAs read that. Under AttnConfig::KREG (the kM16 configs with
// Q in registers) K skips that tile: Q K^T takes its B fragments from the fp8 stage itself
// (ldmatrix of byte pairs; the stage's K rows swizzled per 16-byte chunk, k8_swz) and converts
// them before each mma, with Q's fragments loaded in the matching k order; only V is converted.
// The K scale is folded into the logit scale, the V scale into the epilogue's normalization.
// Warp (wm, wn) owns packed rows [16 wm, 16 wm + 16) and tokens [wn BN/WN, (wn+1) BN/WN) of each
// KV tile; S = Q K^T and O += P V run on mma.sync m16n8k16 (fp32 accumulate), or per warpgroup
// of 64 rows on wgmma (sm_90a, kM64/kM128 up to HD 128, sm90/wgmma.cuh), online softmax in the exp2
// domain; in a masked item a warp (warpgroup) skips the tiles none of its rows sees. The
// epilogue stages every warp's (O, m, l) in shared memory (aliasing the stages), merges the WN
// column warps, and writes the final output (dtype, + natural-log LSE) or the partial slot (fp32
// or the dtype) of each row.
#pragma once

#include <cstdint>
#include <type_traits>

#include "decode_config.cuh"
#include "decode_params.h"
#include "kernel_common.cuh"
#include "mainloop_mma.cuh"
#include "ptx.cuh"
#include "softmax.cuh"
#include "timeline.cuh"

namespace treeattn::cuda_detail {

template <DType kDType, int kHeadDim, int kClass, KvDType kKv>
__global__ void __launch_bounds__(AttnConfig<kDType, kHeadDim, kClass, kKv>::THREADS)
    decode_attention_kernel(const KernelParams p, const int heads_per_cta) {
  using C = AttnConfig<kDType, kHeadDim, kClass, kKv>;
  using KvT = std::conditional_t<C::KV8, uint8_t, typename C::T>;  // K/V element in memory
  using T = typename C::T;
  using Traits = typename C::Traits;
  constexpr int HD = C::HD, BN = C::BN, CPT = C::CPT, BNW = C::BNW, WN = C::WN;
  // the MMA path (mainloop_mma.cuh): wgmma per warpgroup where the config has it, else mma.sync
  using Mma = std::conditional_t<C::USE_WGMMA, WgmmaPath<kDType, C>, MmaSyncPath<kDType, C, kKv>>;

  constexpr int kPlanClass = plan_class(kClass);
  const auto tl_rec = [&p] {
    return (static_cast<int64_t>(p.class_item_off[kPlanClass]) + blockIdx.x) *
               (p.num_qo_heads / p.group) +
           blockIdx.y;
  };
  timeline_begin(p, tl_rec, kClass);
  pdl_launch_dependents();
  const DeviceItem item = p.items[p.class_item_off[kPlanClass] + static_cast<int>(blockIdx.x)];
  if (item.num_rows == 0) return;  // capacity launched, the plan's items of the class ended
  timeline_stamp(p, tl_rec, kTlClockItem);
  const int group = p.group;
  // KV heads of this CTA: [kv_head0, kv_head_end), one after the other (the head loop)
  const int hpc = tile::head_loop(kClass) ? heads_per_cta : 1;
  const int kv_head0 = static_cast<int>(blockIdx.y) * hpc;
  const int kv_head_end = min(kv_head0 + hpc, p.num_qo_heads / group);
  const int packed_rows = item.num_rows * group;
  const bool masked = item.mask_begin >= 0;

  extern __shared__ __align__(128) unsigned char smem_raw[];
  unsigned char* smem = smem_raw;
  if constexpr (C::BLOCK_LAYOUT)
    smem += (1024 - (smem_u32(smem_raw) & 1023)) & 1023;  // tiles on 1024-byte boundaries
  const uint32_t s_base = smem_u32(smem);
  const uint32_t sQ = s_base + C::Q_OFF;
  uint64_t* sMask = reinterpret_cast<uint64_t*>(smem + C::MASK_OFF);

  const int tid = threadIdx.x;
  const int warp = tid >> 5, lane = tid & 31;
  const int wm = warp / WN, wn = warp % WN;
  const int g = lane >> 2, t4 = lane & 3;

  for (int kv_head = kv_head0; kv_head < kv_head_end; ++kv_head) {
    // The previous head's epilogue read the shared memory this head's loads overwrite.
    if (kv_head > kv_head0) __syncthreads();
    // ---- Q: gQ[query, kv_head*group + h, :] -> sQ[pr][:] (zero rows past the item)
    copy_q_rows<T, C::ROWS, C::ROWS_PER_PASS>(
        p, item, kv_head, sQ, tid % CPT, tid / CPT,
        [](int r, int c) { return C::template swz<C::ROWS>(r, c); });

    // ---- KV loader. Per pass of a tile, each warp copies 32 / LCPT token rows (lane / LCPT picks
    // the row, lane % LCPT its 16-byte column: 8 dtype or 16 fp8 elements). A row's address chain
    // (range seek, page id, mask word) runs once, in one lane of the warp, and reaches the row's
    // other lanes by a shuffle: lane i < WROWS computes the warp's i-th row of the tile. Offsets
    // are in elements from pointers at this thread's head and 16-byte column.
    constexpr int LCPT = C::KV8 ? HD / 16 : CPT;  // 16-byte columns of a K/V row
    constexpr int LRPP = C::THREADS / LCPT;       // rows one loader pass covers
    static_assert(C::THREADS % LCPT == 0 && BN % LRPP == 0, "loader passes");
    const int lc = tid % LCPT;
    const int64_t head_off = kv_head * p.head_stride + lc * (16 / sizeof(KvT));
    const KvT* gk = static_cast<const KvT*>(p.k) + head_off;
    const KvT* gv = static_cast<const KvT*>(p.v) + head_off;
    constexpr int RPW = 32 / LCPT;       // rows per warp per pass
    constexpr int PASSES = BN / LRPP;    // passes per tile
    constexpr int WROWS = PASSES * RPW;  // rows per warp per tile
    static_assert(32 % LCPT == 0 && WROWS <= 32, "one lane per row of the warp's tile share");
    const int lane_row = (lane / RPW) * LRPP + warp * RPW + lane % RPW;
    RangeCursor cursor;
    cursor.init(p.ranges + item.range_begin, item.num_ranges);
    const int num_tiles = (item.kv_tokens + BN - 1) / BN;

    auto load_tile = [&](int tile, int stage) {
      const uint32_t sK =
          s_base + (C::KV8 ? C::KV8_OFF + stage * C::STAGE8_BYTES : stage * C::STAGE_BYTES);
      const uint32_t sV = sK + (C::KV8 ? C::TILE8_BYTES : C::TILE_BYTES);
      // element offset of row lane_row's page slot (without the head and chunk). A row past the
      // item re-reads the item's last token: its scores are hidden (the tail test, or a zero mask
      // word), so its P is 0, and every copy is a full 16 bytes with no per-row predicate.
      long long row_off = 0;
      if (lane < WROWS) {
        const int raw = tile * BN + lane_row;
        const int pos = min(raw, item.kv_tokens - 1);
        cursor.seek(pos);
        row_off = cursor.slot_offset(p, pos);
        if (masked)
          sMask[stage * BN + lane_row] =
              raw < item.kv_tokens ? p.masks[item.mask_begin + cursor.idx] : 0ull;
      }
#pragma unroll
      for (int k = 0; k < PASSES; ++k) {
        const long long off = __shfl_sync(0xffffffffu, row_off, k * RPW + lane / LCPT);
        const int j = k * LRPP + tid / LCPT;
        if constexpr (C::KV8) {  // rows of HD bytes (K swizzled under KREG)
          cp_async16(sK + (C::KREG ? C::k8_swz(j, lc) : j * HD + 16 * lc), gk + off);
          cp_async16(sV + j * HD + 16 * lc, gv + off);
        } else {
          cp_async16(sK + C::template swz<BN>(j, lc), gk + off);
          cp_async16(sV + C::template swz<BN>(j, lc), gv + off);
        }
      }
    };

    // prologue: Q with tile 0 in group 0, then tiles 1..STAGES-2
#pragma unroll
    for (int s = 0; s < C::STAGES - 1; ++s) {
      if (s < num_tiles) load_tile(s, s);
      cp_async_commit();
    }

    // ---- per-warp state
    const bool warp_active = 16 * wm < packed_rows;
    // The warp's MMA slab (its warpgroup's 64 rows under wgmma, whose warps compute together,
    // rows past the item too; else its own 16): the slab computes while it has a row of the item.
    constexpr int kMmaRows = tile::mma_slab_rows(kClass, HD, C::USE_WGMMA);
    const int slab_first = kMmaRows * (16 * wm / kMmaRows);
    const bool mma_active = slab_first < packed_rows;
    constexpr int NT_S = BNW / 8;  // n8 tiles of S per warp
    constexpr int NT_O = HD / 8;   // n8 tiles of O
    constexpr int KS = HD / 16;    // k16 steps of Q K^T
    float o_acc[NT_O][4];
#pragma unroll
    for (int n = 0; n < NT_O; ++n)
#pragma unroll
      for (int e = 0; e < 4; ++e) o_acc[n][e] = 0.f;
    float m_run[2] = {-INFINITY, -INFINITY}, l_run[2] = {0.f, 0.f};
    uint32_t q_frag[C::Q_IN_REGS ? KS : 1][4];
    // item row of this thread's two packed rows (mask bit), clamped for padding rows
    const int prow0 = 16 * wm + g;
    const int mrow0 = min(prow0 / group, kMaxMaskedRows - 1);
    const int mrow1 = min((prow0 + 8) / group, kMaxMaskedRows - 1);
    // mask bits of the item rows of the warp's MMA slab (masked items only)
    const uint64_t warp_rows =
        masked && mma_active ? slab_row_bits(slab_first, kMmaRows, packed_rows, group) : 0;
    const float scale_log2 = logit_scale_log2<C::KV8>(p);

    for (int tile = 0; tile < num_tiles; ++tile) {
      const int stage = tile % C::STAGES;
      cp_async_wait<C::STAGES - 2>();
      Mma::tile_ready();  // the tile may be read by wgmma
      __syncthreads();
      if (tile == 0 && kv_head == kv_head0) timeline_stamp(p, tl_rec, kTlClockKv);
      if constexpr (C::Q_IN_REGS) {
        if (tile == 0) {
          if (mma_active) {
#pragma unroll
            for (int ks = 0; ks < KS; ++ks) {
              if constexpr (C::KREG) {
                // the k order of the fp8 K fragments (KREG): a thread's logical k pairs
                // (2 t4, 2 t4 + 1) and (2 t4 + 8, 2 t4 + 9) of step ks are the head dims
                // 16 ks + 4 t4 + {0, 1} and + {2, 3}: one 8-byte load per row
                const uint32_t off = 8 * (t4 & 1);
                const uint2 r0 = ld_shared_u2(
                    sQ + C::template swz<C::ROWS>(16 * wm + g, 2 * ks + (t4 >> 1)) + off);
                const uint2 r1 = ld_shared_u2(
                    sQ + C::template swz<C::ROWS>(16 * wm + g + 8, 2 * ks + (t4 >> 1)) + off);
                q_frag[ks][0] = r0.x;
                q_frag[ks][1] = r1.x;
                q_frag[ks][2] = r0.y;
                q_frag[ks][3] = r1.y;
              } else {
                const int mi = lane >> 3;
                ldmatrix_x4(q_frag[ks],
                            sQ + C::template swz<C::ROWS>(16 * wm + (lane & 7) + (mi & 1) * 8,
                                                          2 * ks + (mi >> 1)));
              }
            }
          }
          __syncthreads();  // sQ aliases the stage the next prefetch overwrites
        }
      }
      {
        // the stage this overwrites was converted (fp8; under KREG its K read by the MMAs) or read
        // (dtype) before the barrier above
        const int next = tile + C::STAGES - 1;
        if (next < num_tiles) load_tile(next, next % C::STAGES);
        cp_async_commit();
      }
      if constexpr (C::KV8) {
        // The tile's fp8 stage -> the dtype tile, in 16-byte units (16 fp8 elements -> two dtype
        // chunks). With one warp along the rows (kM16) each warp converts the token slice only it
        // reads, and a warp barrier orders that; otherwise the CTA converts the whole tile and
        // waits at a CTA barrier. Either way the previous tile's MMAs on the dtype tile are done:
        // the barrier at the top of the loop, or the warp's own program order.
        constexpr bool kWarpLocal = C::WM == 1;
        constexpr int U = HD / 16;  // units of a K/V row
        constexpr int UNITS = (kWarpLocal ? BNW : BN) * U;
        const int first_row = kWarpLocal ? wn * BNW : 0;
        const int t0 = kWarpLocal ? lane : tid;
        constexpr int STEP = kWarpLocal ? 32 : C::THREADS;
        static_assert(UNITS % STEP == 0, "whole conversion passes");
        const uint32_t s8 = s_base + C::KV8_OFF + stage * C::STAGE8_BYTES;
#pragma unroll
        for (int kv = C::KREG ? 1 : 0; kv < 2; ++kv) {
#pragma unroll
          for (int u = t0; u < UNITS; u += STEP) {
            const int j = first_row + u / U, c8 = u % U;
            const uint4 x = ld_shared_u4(s8 + kv * C::TILE8_BYTES + j * HD + 16 * c8);
            const uint32_t dst = s_base + (C::KREG ? 0 : kv * C::TILE_BYTES);
            st_shared_u4(dst + C::template swz<BN>(j, 2 * c8),
                         fp8x8_to_dtype<Traits, kKv>(make_uint2(x.x, x.y)));
            st_shared_u4(dst + C::template swz<BN>(j, 2 * c8 + 1),
                         fp8x8_to_dtype<Traits, kKv>(make_uint2(x.z, x.w)));
          }
        }
        Mma::tile_ready();  // the tile may be read by wgmma
        if constexpr (kWarpLocal)
          __syncwarp();
        else
          __syncthreads();
      }
      if (!mma_active) continue;

      const uint32_t sK = s_base + (C::KV8 ? 0 : stage * C::STAGE_BYTES);
      const uint32_t sV = C::KREG ? s_base : sK + C::TILE_BYTES;
      const int wtok = wn * BNW;  // warp's first token within the tile
      if (masked) {
        // No row of this warp sees a token of its slice: every score would be -inf and change
        // neither m, l nor O, so the warp skips both MMAs (flattened leaves: most warps, most
        // tiles).
        bool any = false;
#pragma unroll
        for (int j = lane; j < BNW; j += 32) any |= (sMask[stage * BN + wtok + j] & warp_rows) != 0;
        if (!__any_sync(0xffffffffu, any)) continue;
      }

      // S = Q K^T  [16 x BNW]
      float s_acc[NT_S][4];
#pragma unroll
      for (int n = 0; n < NT_S; ++n)
#pragma unroll
        for (int e = 0; e < 4; ++e) s_acc[n][e] = 0.f;
      // a zero the compiler cannot see through (kv_tokens >= 0), for WgmmaPath's copy of Q
      const uint32_t q_zero = static_cast<uint32_t>(item.kv_tokens) >> 31;
      Mma::qk(s_acc, q_frag, q_zero, sQ, sK, s_base + C::KV8_OFF + stage * C::STAGE8_BYTES, wm,
              wtok, lane);

      // hide tokens outside the row's mask or past the item (raw scores: -inf); only masked items
      // and the item's last tile test, each in its own loop
      const int tile_tok = tile * BN;
      if (masked)
        mask_scores<NT_S>(s_acc, sMask + stage * BN + wtok, mrow0, mrow1, t4);
      else if (tile_tok + BN > item.kv_tokens)
        tail_scores<NT_S>(s_acc, tile_tok + wtok, item.kv_tokens, t4);

      // online softmax (rows g and g+8 of the warp) in the exp2 domain (softmax.cuh)
      float m_use[2], alpha[2], row_sum[2];
      const bool rescale = online_max<NT_S, false>(s_acc, m_run, scale_log2, m_use, alpha);
      exp_scores<NT_S>(s_acc, m_use, scale_log2, row_sum);
      uint32_t p_frag[NT_S][2];  // P rounded to dtype, pairs of columns
      pack_p<Traits, NT_S>(s_acc, p_frag);
      rescale_state<NT_O>(o_acc, l_run, alpha, row_sum, rescale);

      // O += P V   [16 x HD], k = the warp's BNW tokens
      Mma::pv(o_acc, p_frag, sV, wtok, lane);
    }

    // ---- epilogue: stage (O, m, l) of every warp in shared memory (aliases the stages)
    timeline_stamp(p, tl_rec, kTlClockLoop);  // the last head's stamp stays
    cp_async_wait<0>();
    pdl_wait();  // the previous kernel (e.g. the last call's merge) may still read our outputs
    __syncthreads();
    float* sO = reinterpret_cast<float*>(smem);                   // [WN][ROWS][O_PITCH]
    float* sM = reinterpret_cast<float*>(smem + C::EPI_O_BYTES);  // [WN][ROWS]
    float* sL = sM + WN * C::ROWS;                                // [WN][ROWS]
    if (warp_active)
      stage_warp_state<NT_O>(sO + (wn * C::ROWS + 16 * wm) * C::O_PITCH,
                             sM + wn * C::ROWS + 16 * wm, sL + wn * C::ROWS + 16 * wm, C::O_PITCH,
                             o_acc, m_run, l_run, g, t4);
    __syncthreads();
    write_staged_rows<Traits, HD, WN, C::ROWS, C::O_PITCH>(p, item, kv_head, sO, sM, sL, tid,
                                                           C::THREADS, output_v_scale<C::KV8>(p));
  }
  timeline_end(p, tl_rec);
}

}  // namespace treeattn::cuda_detail
