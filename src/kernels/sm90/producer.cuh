// Producer warpgroup of the warp-specialized Hopper kernel: gathers its item's paged K/V tokens
// into shared memory with 16-byte cp.async copies, and signals each stage's K-full and V-full
// mbarriers through the copies themselves (cp.async.mbarrier.arrive.noinc: a thread's arrival
// triggers when its earlier copies land). The consumers copy Q themselves (mainloop.cuh,
// copy_q_tile), so the chain of tile 0 (item -> ranges -> page ids -> K) starts at once.
//
// Tile t goes to stage t % STAGES. Before overwriting a stage the producer waits for the
// consumers' release of its previous tile: K-empty before the K copies (and the mask words),
// V-empty before the V copies, so K of tile t + 1 loads while V of tile t is still being read. The
// page addresses of tile t + 1's token rows are computed before tile t's V-empty wait, so their
// loads overlap it and the V copies: lane i < WROWS of a warp computes the warp's i-th token row
// of the tile (range seek, page id, the mask word's index), and the row's CPT lanes take its
// address by shuffle. Rows past the
// item re-read its last token (every copy is a full 16 bytes); their mask word is zero-filled, and
// the consumers hide their scores.
#pragma once

#include "config.cuh"

namespace treeattn::cuda_detail::sm90 {

template <class C>
__device__ __forceinline__ void produce(const KernelParams& p, const DeviceItem& item, int kv_head,
                                        uint32_t s_base, PipelineBars<C::STAGES> bars, int ptid) {
  constexpr int CPT = C::CPT, BN = C::BN, RPP = C::ROWS_PER_PASS, RPW = C::RPW;
  const int warp = ptid >> 5, lane = ptid & 31;
  const int c = ptid % CPT;     // the thread's 16-byte chunk column
  const int prow = ptid / CPT;  // the thread's row within a copy pass
  const int num_tiles = (item.kv_tokens + C::BN - 1) / C::BN;
  const bool masked = item.mask_begin >= 0;
  // Byte addresses: the row's lane computes the K address of its row at this head (chunk 0); a
  // copying lane adds its chunk's bytes (K) or those plus the V - K distance (V).
  const uint64_t k_head = reinterpret_cast<uint64_t>(p.k) + 2 * kv_head * p.head_stride;
  const uint64_t k_chunk = 16 * c;
  const uint64_t v_chunk =
      k_chunk + (reinterpret_cast<uint64_t>(p.v) - reinterpret_cast<uint64_t>(p.k));
  // the token row (within a tile) whose address this lane computes
  const int lane_row = (lane / RPW) * RPP + warp * RPW + lane % RPW;
  // the thread's chunk in copy pass k is at chunk_off + k * RPP * 128 (RPP is a multiple of 8, so
  // the row's swizzle phase is the same in every pass: immediate offsets)
  const uint32_t chunk_off = block_swz<BN>(prow, c);
  const uint32_t s_mask = s_base + C::MASK_OFF + lane_row * 8;
  RangeCursor cursor;
  cursor.init(p.ranges + item.range_begin, item.num_ranges);
  // The byte address of lane_row's token in tile t (this lane's row when lane < WROWS), and the
  // index of its mask word (-1: none, or the row is past the item: the word is zero-filled).
  struct RowAddr {
    uint64_t k;
    int mask;
  };
  auto row_address = [&](int t) {
    RowAddr a{0, -1};
    if (lane < C::WROWS) {
      const int raw = t * BN + lane_row;
      const int pos = min(raw, item.kv_tokens - 1);
      cursor.seek(pos);
      a.k = k_head + 2 * cursor.slot_offset(p, pos);
      if (masked && raw < item.kv_tokens) a.mask = item.mask_begin + cursor.idx;
    }
    return a;
  };
  // Tile t + 1's addresses are computed while tile t's V stage is awaited and copied, so their
  // loads (range seek, page id) overlap that wait.
  RowAddr cur = row_address(0);
  for (int t = 0; t < num_tiles; ++t) {
    const int s = t % C::STAGES;
    const uint32_t release_parity = ((t / C::STAGES) & 1) ^ 1;  // of the stage's previous tile
    const uint32_t sK = s_base + s * C::STAGE_BYTES + chunk_off;
    const uint32_t sV = sK + C::TILE_BYTES;
    if (t >= C::STAGES) mbar_wait(bars.empty_k(s), release_parity);
    if (masked && lane < C::WROWS)
      cp_async8(s_mask + s * C::MASK_STAGE_BYTES, p.masks + max(cur.mask, 0),
                cur.mask >= 0 ? 8 : 0);
#pragma unroll
    for (int k = 0; k < C::PASSES; ++k) {
      const uint64_t row = __shfl_sync(0xffffffffu, cur.k, k * RPW + lane / CPT);
      cp_async16(sK + k * RPP * 128, reinterpret_cast<const void*>(row + k_chunk));
    }
    mbar_arrive_cp_async(bars.full_k(s));
    const RowAddr next = t + 1 < num_tiles ? row_address(t + 1) : cur;
    if (t >= C::STAGES) mbar_wait(bars.empty_v(s), release_parity);
#pragma unroll
    for (int k = 0; k < C::PASSES; ++k) {
      const uint64_t row = __shfl_sync(0xffffffffu, cur.k, k * RPW + lane / CPT);
      cp_async16(sV + k * RPP * 128, reinterpret_cast<const void*>(row + v_chunk));
    }
    mbar_arrive_cp_async(bars.full_v(s));
    cur = next;
  }
  cp_async_wait_all();  // nothing in flight when the warpgroup exits
}

}  // namespace treeattn::cuda_detail::sm90
