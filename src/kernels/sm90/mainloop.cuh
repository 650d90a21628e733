// Consumer side of the warp-specialized Hopper kernel: the copy of the CTA's Q tile (both consumer
// warpgroups, before the mainloop), and the mainloop: one consumer warpgroup's pass over its KV
// tiles (all tiles, or every other one under SPLIT_KV) for its 64 packed rows, with
// S = Q K^T as SS wgmma (Q and K from shared memory) and O += P V as RS wgmma (P from registers).
//
// The loop runs in rounds. Round i issues S(t_i) of the consumer's i-th tile and O += P V of its
// tile t_{i-1}, then runs the softmax of S(t_i) while that P V runs (intra-warpgroup overlap);
// a last round issues only the last P V. The two consumers issue their wgmmas in turns
// (ping-pong): consumer w waits on named barrier kSchedBar + w before issuing and signals
// kSchedBar + 1 - w after, so one consumer's softmax runs while the tensor cores do the other's
// MMAs. Both run the same number of rounds (idle rounds only take their turn), consumer 1 gives
// consumer 0 the first turn, and consumer 1 does not signal after its last round, so no arrival
// is left on a named barrier. Per stage: K-full is waited before S, K-empty arrived once S is done
// and the mask words are read; V-full is waited before P V, V-empty arrived once P V is done
// (one arrival per warp, after __syncwarp). A tile none of the consumer's rows sees (a masked item,
// or rows past the item) is skipped: no MMA and no softmax, but the same waits and arrivals; one
// every row of the consumer sees runs without the per-score mask test.
// The protocol (rounds, turns, phases) was checked for deadlock and phase aliasing by exhaustive
// interleaving of a model for STAGES 2..6, both tile configs and skip patterns.
#pragma once

#include "../softmax.cuh"
#include "config.cuh"
#include "wgmma.cuh"

namespace treeattn::cuda_detail::sm90 {

/// One consumer thread's online-softmax state of its two rows (g and g + 8 of its warp).
template <class C>
struct ConsumerState {
  float o[C::NT_O][4];
  float m[2];  ///< running max, exp2 domain
  float l[2];  ///< the thread's partial row sums (reduced over the quad in the epilogue)
};

/// Both consumer warpgroups (ctid in [0, 256)) copy the CTA's Q rows into the Q tile with cp.async
/// (rows past the item zero-filled), wait for their own copies and meet on kConsumersBar, then
/// order what they saw before their wgmma reads (fence_proxy_async). Q's chain (the rows' query
/// ids, then Q) runs beside the producer's chain of tile 0 (ranges, page ids, then K) instead of
/// before it. Only for an item with tokens (the mainloop then has rounds).
template <class C>
__device__ __forceinline__ void copy_q_tile(const KernelParams& p, const DeviceItem& item,
                                            int kv_head, uint32_t s_base, int ctid) {
  constexpr int RPP = C::CONSUMER_THREADS / C::CPT;  // rows per copy pass
  static_assert(C::ROWS % RPP == 0, "Q copy passes");
  copy_q_rows<typename C::T, C::ROWS, RPP>(p, item, p.rows + 2 * item.row_begin, kv_head,
                                           s_base + C::Q_OFF, ctid % C::CPT, ctid / C::CPT,
                                           [](int r, int cc) { return block_swz<C::ROWS>(r, cc); });
  cp_async_wait_all();
  named_bar_sync(C::kConsumersBar, C::CONSUMER_THREADS);
  fence_proxy_async();
}

template <class C>
__device__ __forceinline__ void consume(const KernelParams& p, const DeviceItem& item,
                                        uint32_t s_base, const uint64_t* s_mask,
                                        PipelineBars<C::STAGES> bars, int cw, int ctid,
                                        ConsumerState<C>& st) {
  using Traits = typename C::Traits;
  constexpr int BN = C::BN, S = C::STAGES, NT_S = C::NT_S, NT_O = C::NT_O;
  const int wq = (ctid >> 5) & 3, lane = ctid & 31;
  const int g = lane >> 2, t4 = lane & 3;
  const int group = p.group;
  const int packed_rows = item.num_rows * group;
  const bool masked = item.mask_begin >= 0;
  const int row_base = C::SPLIT_KV ? 0 : 64 * cw;  // the consumer's first packed row
  const bool has_rows = row_base < packed_rows;
  // item rows of the thread's two packed rows (mask bits), clamped for rows past the item
  const int prow0 = row_base + 16 * wq + g;
  const int mrow0 = min(prow0 / group, kMaxMaskedRows - 1);
  const int mrow1 = min((prow0 + 8) / group, kMaxMaskedRows - 1);
  const uint64_t wg_rows =
      masked && has_rows ? tile::slab_row_bits(row_base, 64, packed_rows, group) : 0;
  const float scale_log2 = logit_scale_log2<C::KV8>(p);
#pragma unroll
  for (int n = 0; n < NT_O; ++n)
#pragma unroll
    for (int e = 0; e < 4; ++e) st.o[n][e] = 0.f;
  st.m[0] = st.m[1] = -INFINITY;
  st.l[0] = st.l[1] = 0.f;

  const int num_tiles = (item.kv_tokens + BN - 1) / BN;
  const int tile_step = C::SPLIT_KV ? 2 : 1;
  const int my_tiles = C::SPLIT_KV ? (num_tiles - cw + 1) / 2 : num_tiles;
  const int rounds = num_tiles == 0 ? 0 : (C::SPLIT_KV ? (num_tiles + 1) / 2 : num_tiles) + 1;
  // A of S = Q K^T: the consumer's 64 rows of the Q tile
  const WgmmaDesc dq = wgmma_desc(s_base + C::Q_OFF + row_base * 128, 16, 1024);
  const uint32_t sched_mine = C::kSchedBar + cw, sched_other = C::kSchedBar + 1 - cw;
  constexpr uint32_t kTurnThreads = C::CONSUMER_THREADS;

  float s_acc[NT_S][4];      // S of the round's tile, then its P in fp32
  uint32_t p_frag[NT_S][2];  // P of the previous round's tile, the A of its P V
#pragma unroll
  for (int n = 0; n < NT_S; ++n) {
    s_acc[n][0] = s_acc[n][1] = s_acc[n][2] = s_acc[n][3] = 0.f;
    p_frag[n][0] = p_frag[n][1] = 0u;
  }
  bool v_pending = false;   // the previous round's tile still has its V to wait for and release
  bool pv_pending = false;  // ... and its P V to issue (it was not skipped)
  int t_prev = 0;
  if (cw == 1 && rounds > 0) named_bar_arrive(C::kSchedBar, kTurnThreads);  // consumer 0 first
  for (int i = 0; i < rounds; ++i) {
    const bool has_tile = i < my_tiles;
    const int t = (C::SPLIT_KV ? cw : 0) + i * tile_step;
    const int s = t % S;
    bool active = false;
    bool tile_full = false;  // a masked item's tile that every row of the consumer sees
    if (has_tile) {
      mbar_wait(bars.full_k(s), (t / S) & 1);
      active = has_rows;
      if (masked && active) {
        // no row of the consumer sees a token of the tile: every score would be -inf; every row
        // sees every token (a shared node of a paths item): no score needs the mask test
        const SliceSeen seen = slice_seen<BN>(s_mask + s * BN, wg_rows, lane);
        active = seen.any();
        tile_full = seen.full();
      }
      if (!active) {
        __syncwarp();
        if (lane == 0) mbar_arrive(bars.empty_k(s));
      }
    }
    const int sp = t_prev % S;
    if (v_pending) mbar_wait(bars.full_v(sp), (t_prev / S) & 1);
    if (active || pv_pending) fence_proxy_async();  // the waited copies are read by wgmma

    // The round's steps, by their wgmma: each path issues and waits for its own MMAs, so the
    // compiler sees no path on which an accumulator is used while its wgmma may be in flight.
    const WgmmaDesc dk = wgmma_desc(s_base + s * C::STAGE_BYTES, 16, 1024);
    const WgmmaDesc dv = wgmma_desc(s_base + sp * C::STAGE_BYTES + C::TILE_BYTES, BN * 128, 1024);
    auto issue_s = [&] {
      wgmma_ss<C::kDT, BN, 0>(s_acc, dq.at(0), dk.at(0));
#pragma unroll
      for (int ks = 1; ks < C::KS; ++ks)
        wgmma_ss<C::kDT, BN, 1>(s_acc, dq.at((ks >> 2) * (C::ROWS * 128) + (ks & 3) * 32),
                                dk.at((ks >> 2) * (BN * 128) + (ks & 3) * 32));
      wgmma_commit();
    };
    auto issue_pv = [&] {
#pragma unroll
      for (int kk = 0; kk < C::KV_STEPS; ++kk) {
        const uint32_t a[4] = {p_frag[2 * kk][0], p_frag[2 * kk][1], p_frag[2 * kk + 1][0],
                               p_frag[2 * kk + 1][1]};
        wgmma_rs<C::kDT, C::HD, 1>(st.o, a, dv.at(kk * 2048));
      }
      wgmma_commit();
    };
    // this consumer's turn on the tensor cores: wait for it, issue, hand it over
    auto take_turn = [&] {
      __syncwarp();  // converged after the waits: bar.sync and wgmma are .aligned
      named_bar_sync(sched_mine, kTurnThreads);
      wgmma_fence_regs(s_acc);
      wgmma_fence_regs(p_frag);
      wgmma_fence_regs(st.o);
      wgmma_fence();
    };
    auto end_turn = [&] {
      if (cw == 0 || i + 1 < rounds) named_bar_arrive(sched_other, kTurnThreads);
    };
    // S(t) is complete: hide scores, release K and the mask words, new max, p = 2^(...) in place
    float m_use[2], alpha[2], row_sum[2];
    bool rescale = false;
    auto softmax_front = [&] {
      wgmma_fence_regs(s_acc);
      const int tile_tok = t * BN;
      if (masked && !tile_full)  // a token past the item has a zero mask word: never full
        mask_scores<NT_S>(s_acc, s_mask + s * BN, mrow0, mrow1, t4);
      else if (tile_tok + BN > item.kv_tokens)
        tail_scores<NT_S>(s_acc, tile_tok, item.kv_tokens, t4);
      __syncwarp();
      if (lane == 0) mbar_arrive(bars.empty_k(s));
      rescale = online_max<NT_S, true>(s_acc, st.m, scale_log2, m_use, alpha);
      exp_scores<NT_S>(s_acc, m_use, scale_log2, row_sum);
    };
    auto pv_done = [&] {
      wgmma_fence_regs(st.o);
      wgmma_fence_regs(p_frag);
    };
    auto release_v = [&] {
      if (v_pending) {
        __syncwarp();
        if (lane == 0) mbar_arrive(bars.empty_v(sp));
      }
    };

    if (active) {
      take_turn();
      issue_s();
      if (pv_pending) {
        issue_pv();
        end_turn();
        wgmma_wait<1>();  // S(t) done; P V of the previous tile runs during the softmax
        softmax_front();
        wgmma_wait<0>();
        pv_done();
      } else {
        end_turn();
        wgmma_wait<0>();
        softmax_front();
      }
      release_v();
      rescale_state<NT_O>(st.o, st.l, alpha, row_sum, rescale);
      pack_p<Traits, NT_S>(s_acc, p_frag);
    } else if (pv_pending) {
      take_turn();
      issue_pv();
      end_turn();
      wgmma_wait<0>();
      pv_done();
      release_v();
    } else {
      __syncwarp();
      named_bar_sync(sched_mine, kTurnThreads);
      end_turn();
      release_v();
    }
    v_pending = has_tile;
    pv_pending = active;
    t_prev = t;
  }
}

}  // namespace treeattn::cuda_detail::sm90
