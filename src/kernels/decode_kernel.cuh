// Paged tree-attention kernel (one CTA per (work item, group of KV heads)), as a template over
// (dtype, head_dim, kernel config, KV type); instantiated by src/kernels/inst_*.cu. Its pieces:
// the configuration and shared-memory layout (decode_config.cuh), the two MMA paths (mma.sync per
// warp, wgmma per warpgroup: mainloop_mma.cuh), the online softmax (softmax.cuh), the Q copy and
// range cursor (kernel_common.cuh), the staging, merge and writes of the rows' states
// (epilogue.cuh), the paged K/V loader and the fp8 stage conversion (loader.cuh), the phase
// stamps (timeline.cuh); this file holds the kernel: the pipeline, the tile loop and the order of
// its epilogue. The merge of the partial outputs is in merge.cuh.
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
//   sRows [ROWS]             int2 (query, slot) of each item row, read at the start for Q and
//                            the epilogue's writes (past every aliased region); in the kM16
//                            configs part of the item's record sRec [kRecordMaxBytes]
//                            (DeviceRecordHead, layout.h: the item, its rows, its first ranges
//                            and their page ids), which the CTA copies in one round at its start:
//                            Q and the first K/V tiles then wait on no chain of dependent loads
//   sPeer [ROWS][O_PITCH], m [ROWS], l [ROWS]
//                            fp32: a cluster pair's second CTA's merged state (the deep kM16
//                            config up to head_dim 128; past sRows, aliasing nothing)
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
// domain; in a masked item a warp (warpgroup) skips the tiles none of its rows sees, and the
// per-score mask test on a slice every row of its slab sees. The
// epilogue stages every warp's (O, m, l) in shared memory (aliasing the stages), merges the WN
// column warps, and writes the final output (dtype, + natural-log LSE) or the partial slot (fp32
// or the dtype) of each row.
// Cluster pairs (deep kM16 launches with SMs to spare, tile::use_pair_m16; `pair` = 1): CTAs 2i
// and 2i + 1 form a cluster and take the first and second half of item i's KV tiles (a masked
// item all in the first); the second merges its warps' states into one per row and stores it
// into the first's sPeer (st.shared::cluster), which merges it after its own WN and writes. The
// cluster barrier orders it: an arrive at the start (a peer's shared memory may be written only
// once the peer runs), then per KV head A (the state landed) and B (it was read).
#pragma once

#include <cstdint>
#include <type_traits>

#include "decode_config.cuh"
#include "decode_params.h"
#include "epilogue.cuh"
#include "kernel_common.cuh"
#include "loader.cuh"
#include "mainloop_mma.cuh"
#include "ptx.cuh"
#include "softmax.cuh"
#include "timeline.cuh"

namespace treeattn::cuda_detail {

template <DType kDType, int kHeadDim, int kClass, KvDType kKv>
__global__ void __launch_bounds__(AttnConfig<kDType, kHeadDim, kClass, kKv>::THREADS)
    decode_attention_kernel(const KernelParams p, const int heads_per_cta, const int pair) {
  using C = AttnConfig<kDType, kHeadDim, kClass, kKv>;
  using KvT = std::conditional_t<C::KV8, uint8_t, typename C::T>;  // K/V element in memory
  using T = typename C::T;
  using Traits = typename C::Traits;
  constexpr int HD = C::HD, BN = C::BN, CPT = C::CPT, BNW = C::BNW, WN = C::WN;
  // the MMA path (mainloop_mma.cuh): wgmma per warpgroup where the config has it, else mma.sync
  using Mma = std::conditional_t<C::USE_WGMMA, WgmmaPath<kDType, C>, MmaSyncPath<kDType, C, kKv>>;

  constexpr int kPlanClass = plan_class(kClass);
  // the deep kM16 config's cluster pairs (AttnConfig::PAIR): CTAs 2i and 2i + 1 split item i's KV
  // tiles in two halves; the second hands its merged state to the first, which writes (the
  // epilogue below)
  const bool paired = C::PAIR && pair != 0;
  const int rank = paired ? static_cast<int>(blockIdx.x & 1) : 0;
  const int item_idx = paired ? static_cast<int>(blockIdx.x >> 1) : static_cast<int>(blockIdx.x);
  const bool stamps = rank == 0;  // a pair's record is its first CTA's
  const auto tl_rec = [&p, item_idx] {
    return (static_cast<int64_t>(p.class_item_off[kPlanClass]) + item_idx) *
               (p.num_qo_heads / p.group) +
           blockIdx.y;
  };
  if (stamps) timeline_begin(p, tl_rec, kClass);
  pdl_launch_dependents();

  extern __shared__ __align__(128) unsigned char smem_raw[];
  unsigned char* smem = smem_raw;
  if constexpr (C::BLOCK_LAYOUT)
    smem += (1024 - (smem_u32(smem_raw) & 1023)) & 1023;  // tiles on 1024-byte boundaries
  const int tid = threadIdx.x;
  // the item's rows (query, slot) for Q and the epilogue's writes: past every aliased region; in
  // the kM16 configs inside the item's record there
  int2* sRows = reinterpret_cast<int2*>(smem + C::ROWINFO_OFF + (C::RECORD ? kRecordRowsOff : 0));
  const auto* sRec = reinterpret_cast<const DeviceRecordHead*>(smem + C::ROWINFO_OFF);
  DeviceItem item;
  if constexpr (C::RECORD) {
    // the kM16 item's record in one round: the item, its rows, its first ranges and page ids
    // (layout.h), so that neither Q nor the first K/V tiles wait on a chain of dependent loads
    const int4* src = p.records + static_cast<int64_t>(item_idx) * p.record_int4;
    for (int i = tid; i < p.record_int4; i += C::THREADS)
      reinterpret_cast<int4*>(smem + C::ROWINFO_OFF)[i] = src[i];
    __syncthreads();
    item = sRec->item;
  } else {
    item = p.items[p.class_item_off[kPlanClass] + item_idx];
  }
  // capacity launched, the plan's items of the class ended: wait like every CTA, so that this
  // grid's end still means its predecessor's end (the merge and the next call rely on the chain)
  if (item.num_rows == 0) {
    pdl_wait();
    return;
  }
  if (stamps) timeline_stamp(p, tl_rec, kTlClockItem);
  // a pair's first arrive: a CTA may store into its peer's shared memory only once the peer has
  // started; the first epilogue's wait below completes this phase
  if constexpr (C::PAIR)
    if (paired) cluster_arrive_relaxed();
  const int group = p.group;
  // KV heads of this CTA: [kv_head0, kv_head_end), one after the other (the head loop)
  const int hpc = tile::head_loop(kClass) ? heads_per_cta : 1;
  const int kv_head0 = static_cast<int>(blockIdx.y) * hpc;
  const int kv_head_end = min(kv_head0 + hpc, p.num_qo_heads / group);
  const int packed_rows = item.num_rows * group;
  const bool masked = item.mask_begin >= 0;

  const uint32_t s_base = smem_u32(smem);
  const uint32_t sQ = s_base + C::Q_OFF;
  uint64_t* sMask = reinterpret_cast<uint64_t*>(smem + C::MASK_OFF);

  const int warp = tid >> 5, lane = tid & 31;
  const int wm = warp / WN, wn = warp % WN;
  const int g = lane >> 2, t4 = lane & 3;
  if constexpr (!C::RECORD) stage_item_rows(p, item, sRows, tid);
  const int32_t* item_rows =
      C::RECORD ? reinterpret_cast<const int32_t*>(sRows) : p.rows + 2 * item.row_begin;

  // this CTA's KV tiles [first_tile, first_tile + num_tiles) of every head: all of the item's,
  // or a pair's half (the first CTA the first ceil(n / 2)); the tile loop counts them from 0 (the
  // stage index). A masked item is not split: the first CTA takes every tile, the second none.
  const int item_tiles = (item.kv_tokens + BN - 1) / BN;
  const int half = paired && !masked ? (item_tiles + 1) / 2 : item_tiles;
  const int first_tile = rank == 0 ? 0 : half;
  const int num_tiles = rank == 0 ? half : item_tiles - half;

  for (int kv_head = kv_head0; kv_head < kv_head_end; ++kv_head) {
    // The previous head's epilogue read the shared memory this head's loads overwrite.
    if (kv_head > kv_head0) __syncthreads();
    // ---- Q: gQ[query, kv_head*group + h, :] -> sQ[pr][:] (zero rows past the item)
    copy_q_rows<T, C::ROWS, C::ROWS_PER_PASS>(
        p, item, item_rows, kv_head, sQ, tid % CPT, tid / CPT,
        [](int r, int c) { return C::template swz<C::ROWS>(r, c); });

    // ---- the paged K/V loader (loader.cuh)
    PagedKvLoader<C, KvT> loader(p, item, kv_head, s_base, sMask, masked, tid, lane, warp);

    // prologue: Q with the first tile in group 0, then the next STAGES-2 tiles
#pragma unroll
    for (int s = 0; s < C::STAGES - 1; ++s) {
      if (s < num_tiles) loader.template load<true>(first_tile + s, s);
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
      if (stamps && tile == 0 && kv_head == kv_head0) timeline_stamp(p, tl_rec, kTlClockKv);
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
        if (next < num_tiles) loader.template load<false>(first_tile + next, next % C::STAGES);
        cp_async_commit();
      }
      if constexpr (C::KV8) {
        // the tile's fp8 stage -> the dtype tile; the previous tile's MMAs on it are done (the
        // barrier at the top of the loop, or under a warp-local conversion the warp's own order)
        convert_fp8_stage<C, Traits, kKv>(s_base, stage, wn, lane, tid);
        Mma::tile_ready();  // the tile may be read by wgmma
        if constexpr (C::FP8_WARP_LOCAL)
          __syncwarp();
        else
          __syncthreads();
      }
      if (!mma_active) continue;

      const uint32_t sK = s_base + (C::KV8 ? 0 : stage * C::STAGE_BYTES);
      const uint32_t sV = C::KREG ? s_base : sK + C::TILE_BYTES;
      const int wtok = wn * BNW;  // warp's first token within the tile
      // in a masked item: whether every row of the warp's slab sees every token of its slice
      bool slice_full = false;
      if (masked) {
        // No row of this warp sees a token of its slice: every score would be -inf and change
        // neither m, l nor O, so the warp skips both MMAs (flattened leaves: most warps, most
        // tiles).
        const SliceSeen seen = slice_seen<BNW>(sMask + stage * BN + wtok, warp_rows, lane);
        if (!seen.any()) continue;
        slice_full = seen.full();
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
      // and the item's last tile test, each in its own loop. A slice every row of the slab sees
      // (a shared node of a paths item) needs no test: a token past the item has a zero mask word.
      const int tile_tok = (first_tile + tile) * BN;
      if (masked && !slice_full)
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
    if (stamps) timeline_stamp(p, tl_rec, kTlClockLoop);  // the last head's stamp stays
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
    if (!paired) {
      __syncthreads();
      write_staged_rows<Traits, HD, WN, C::ROWS, C::O_PITCH, C::THREADS>(
          p, item, kv_head, sO, sM, sL, tid, [] { __syncthreads(); }, output_v_scale<C::KV8>(p),
          sRows);
    } else if constexpr (C::PAIR) {
      // The pair's exchange, per KV head, on the cluster barrier's phases: A (the second CTA's
      // merged state is in the first's peer region) and B (the first has read it). Each thread
      // alternates arrive and wait; B's wait comes late (before the next head's push, or at the
      // end), so neither CTA waits for it on its critical path.
      float* pO = reinterpret_cast<float*>(smem + C::PEER_OFF);  // [ROWS][O_PITCH]
      float* pM = pO + C::ROWS * C::O_PITCH;                     // [ROWS]
      float* pL = pM + C::ROWS;                                  // [ROWS]
      __syncthreads();  // this CTA's warp states are staged
      cluster_wait();   // the peer started (the first head), or B of the previous head
      if (rank == 1) {
        push_merged_state<HD, WN, C::ROWS, C::O_PITCH>(
            sO, sM, sL, cluster_map_shared(smem_u32(pO), 0), cluster_map_shared(smem_u32(pM), 0),
            cluster_map_shared(smem_u32(pL), 0), packed_rows, tid, C::THREADS);
        cluster_arrive_release();  // A
        cluster_wait();
        cluster_arrive_relaxed();  // B
      } else {
        cluster_arrive_relaxed();  // A
        cluster_wait();            // acquire: the peer's state landed
        write_staged_rows<Traits, HD, WN, C::ROWS, C::O_PITCH, C::THREADS, true>(
            p, item, kv_head, sO, sM, sL, tid, [] { __syncthreads(); }, output_v_scale<C::KV8>(p),
            sRows, pO, pM, pL);
        // B: the peer region was read (every value fed a store already issued); relaxed, so
        // the arrive does not wait for those stores
        cluster_arrive_relaxed();
      }
    }
  }
  if constexpr (C::PAIR)
    if (paired) cluster_wait();  // B of the last head
  if (stamps) timeline_end(p, tl_rec);
}

}  // namespace treeattn::cuda_detail
