// Producer warpgroup of the warp-specialized Hopper kernel: gathers its item's paged K/V tokens
// into shared memory with 16-byte cp.async copies, and signals each stage's K-full and V-full
// mbarriers through the copies themselves (cp.async.mbarrier.arrive.noinc: a thread's arrival
// triggers when its earlier copies land). An fp8 cache's rows go through registers instead: 16
// elements a load, stored as two converted 16-bit chunks, then a proxy fence and an arrival. The
// consumers copy Q themselves (mainloop.cuh, copy_q_tile), so the chain of tile 0 (item -> ranges
// -> page ids -> K) starts at once.
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
  constexpr int GCPT = C::GCPT, BN = C::BN, RPP = C::ROWS_PER_PASS, RPW = C::RPW;
  constexpr int ELEM = C::KV8 ? 1 : 2;  // bytes of a K/V element in memory
  const int warp = ptid >> 5, lane = ptid & 31;
  const int c = ptid % GCPT;     // the thread's 16-byte chunk column (in memory)
  const int prow = ptid / GCPT;  // the thread's row within a copy pass
  const int num_tiles = (item.kv_tokens + C::BN - 1) / C::BN;
  const bool masked = item.mask_begin >= 0;
  // Byte addresses: the row's lane computes the K address of its row at this head (chunk 0); a
  // copying lane adds its chunk's bytes (K) or those plus the V - K distance (V).
  const uint64_t k_head = reinterpret_cast<uint64_t>(p.k) + ELEM * kv_head * p.head_stride;
  const uint64_t k_chunk = 16 * c;
  const uint64_t v_chunk =
      k_chunk + (reinterpret_cast<uint64_t>(p.v) - reinterpret_cast<uint64_t>(p.k));
  // the token row (within a tile) whose address this lane computes
  const int lane_row = (lane / RPW) * RPP + warp * RPW + lane % RPW;
  // the thread's chunk in copy pass k is at chunk_off + k * RPP * 128 (RPP is a multiple of 8, so
  // the row's swizzle phase is the same in every pass: immediate offsets); an fp8 chunk of 16
  // elements becomes the 16-bit chunks 2c and 2c + 1. At head_dim 128 the lanes of the second
  // column block (c >= 4) store their odd chunk first: the 8 lanes of a 16-byte store phase then
  // cover the 8 bank groups (otherwise two lanes share each, a 2-way conflict on every store)
  const int hi_first = C::KV8 && C::HD == 128 ? (c >> 2) & 1 : 0;
  const uint32_t chunk_off = block_swz<BN>(prow, C::KV8 ? 2 * c + hi_first : c);
  const uint32_t chunk_off2 = C::KV8 ? block_swz<BN>(prow, 2 * c + 1 - hi_first) : 0;
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
      a.k = k_head + ELEM * cursor.slot_offset(p, pos);
      if (masked && raw < item.kv_tokens) a.mask = item.mask_begin + cursor.idx;
    }
    return a;
  };
  RowAddr cur = row_address(0);
  if constexpr (C::KV8) {
    // fp8: tile t's K rows come into registers (their loads overlap the K-empty wait), are stored
    // converted into the stage, made visible to wgmma (proxy fence) and signalled with a plain
    // arrival; then V the same way, its loads overlapping tile t + 1's address chain.
    using Traits = typename C::Traits;
    for (int t = 0; t < num_tiles; ++t) {
      const int s = t % C::STAGES;
      const uint32_t release_parity = ((t / C::STAGES) & 1) ^ 1;
      uint4 x[C::PASSES];
      auto load = [&](uint64_t chunk) {
#pragma unroll
        for (int k = 0; k < C::PASSES; ++k) {
          const uint64_t row = __shfl_sync(0xffffffffu, cur.k, k * RPW + lane / GCPT);
          x[k] = ld_global_nc_u4(reinterpret_cast<const void*>(row + chunk));
        }
      };
      auto store = [&](uint32_t tile) {
#pragma unroll
        for (int k = 0; k < C::PASSES; ++k) {
          const uint2 lo = make_uint2(x[k].x, x[k].y), hi = make_uint2(x[k].z, x[k].w);
          st_shared_u4(tile + chunk_off + k * RPP * 128,
                       fp8x8_to_dtype<Traits, C::kKV>(hi_first ? hi : lo));
          st_shared_u4(tile + chunk_off2 + k * RPP * 128,
                       fp8x8_to_dtype<Traits, C::kKV>(hi_first ? lo : hi));
        }
        fence_proxy_async();  // the stores are read by wgmma (async proxy)
      };
      const uint32_t sK = s_base + s * C::STAGE_BYTES;
      const uint32_t sV = sK + C::TILE_BYTES;
      load(k_chunk);
      const uint64_t mask_word =
          masked && lane < C::WROWS && cur.mask >= 0 ? p.masks[cur.mask] : 0ull;
      if (t >= C::STAGES) mbar_wait(bars.empty_k(s), release_parity);
      if (masked && lane < C::WROWS) st_shared_u64(s_mask + s * C::MASK_STAGE_BYTES, mask_word);
      store(sK);
      mbar_arrive(bars.full_k(s));
      load(v_chunk);
      const RowAddr next = t + 1 < num_tiles ? row_address(t + 1) : cur;
      if (t >= C::STAGES) mbar_wait(bars.empty_v(s), release_parity);
      store(sV);
      mbar_arrive(bars.full_v(s));
      cur = next;
    }
  } else {
    // Tile t + 1's addresses are computed while tile t's V stage is awaited and copied, so their
    // loads (range seek, page id) overlap that wait.
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
        const uint64_t row = __shfl_sync(0xffffffffu, cur.k, k * RPW + lane / GCPT);
        cp_async16(sK + k * RPP * 128, reinterpret_cast<const void*>(row + k_chunk));
      }
      mbar_arrive_cp_async(bars.full_k(s));
      const RowAddr next = t + 1 < num_tiles ? row_address(t + 1) : cur;
      if (t >= C::STAGES) mbar_wait(bars.empty_v(s), release_parity);
#pragma unroll
      for (int k = 0; k < C::PASSES; ++k) {
        const uint64_t row = __shfl_sync(0xffffffffu, cur.k, k * RPW + lane / GCPT);
        cp_async16(sV + k * RPP * 128, reinterpret_cast<const void*>(row + v_chunk));
      }
      mbar_arrive_cp_async(bars.full_v(s));
      cur = next;
    }
    cp_async_wait_all();  // nothing in flight when the warpgroup exits
  }
}

}  // namespace treeattn::cuda_detail::sm90
