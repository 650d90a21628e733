// Tile policy of the decode kernels in one place, as plain C++17 constexpr functions: the CUDA
// launch code (src/kernels), the cost model and the plan statistics all read it, so the kernel that
// runs and the kernel that is modelled cannot drift apart. The SM count and the resident CTAs per
// SM are arguments (the launch code asks the CUDA occupancy API; the cost model uses DeviceInfo).
//
// Kernel configs: 0 = kM16 "wide", 1 = kM64, 2 = kM128, 3 = kM16 "deep", 4 = kM16 "short";
// configs 0, 3 and 4 run plan tile class kM16 (plan_class()).
//  * kM16 items are decode-shaped (one query's heads, or a few queries). Two variants, chosen per
//    launch on the host from the plan's kM16 items x kv heads (PlanLayout::m16_items_planned;
//    graph-safe, no device reads):
//    - wide (config 0): 32-token KV tiles split over 2 warps (each its own online softmax over
//      16 tokens, merged in shared memory). For plans with thousands of short items.
//    - deep (config 3): 64-token tiles split over 4 warps: 2 x 32 KB in flight per CTA.
//      For plans with few, long items, where the bytes in flight per CTA set the speed.
//    - short (config 4): the wide config on 2 stages instead of 3, where the wide one would run
//      and the kM16 items hold at most kShortM16Tokens KV tokens on average (leaves of one or two
//      tiles, which never fill a third stage): a third less shared memory a CTA, so more CTAs
//      and more bytes in flight per SM (use_short_m16(), set_short_m16()).
//    - deep launches of few CTAs run each item on a cluster pair (use_pair_m16()).
//    Both walk several KV heads of one item per CTA (the head loop, heads_per_cta()), one after
//    the other: the item's metadata chain (item -> rows -> ranges) is paid once per CTA
//    and the page ids are cached; each head runs its own pipeline and epilogue.
//  * kM64 = 4 warps x 16 rows, kM128 = 8 warps x 16 rows: 64-token tiles (32 for head_dim 256),
//    3 stages, one KV head per CTA. On sm_90a with head_dim <= 128 each warpgroup (64 rows) runs
//    its S = Q K^T and O += P V as wgmma (src/kernels/sm90/wgmma.cuh); elsewhere mma.sync per warp.
//    set_grouped_kernel(kWarpSpecialized) runs them on the warp-specialized sm_90a kernel instead
//    (src/kernels/sm90/config.cuh: 1 CTA per SM, kM64 with 64-token tiles split over two consumer
//    warpgroups, kM128 with 128-token tiles), kAuto per class where ws_pays_off() says so; the
//    cost model describes the kernel above.
//  * The merge (src/kernels/merge.cuh) combines each query's partials in one of two variants,
//    chosen per launch from the plan's merge counts (PlanLayout, graph-safe like the kM16 one):
//    wide (one thread per (head, 8-element chunk) pair walks all of the query's slots; a CTA
//    covers 256 pairs) and deep (kMergeSplitDeep threads share a pair's slots; 64 pairs a CTA,
//    so 4x the CTAs and a quarter of the slots per thread) for few queries or long merge lists.
//  * Masked items: a warp (a warpgroup under wgmma) skips the KV tiles none of its rows sees;
//    the cost model counts only the MMAs that run (masked_work in cost_model.h).
#pragma once

#include <cstdint>

#include "treeattn/common/int_math.h"

namespace treeattn::tile {

inline constexpr int kNumKernelConfigs = 5;
inline constexpr int kConfigWide = 0;
inline constexpr int kConfigDeep = 3;
inline constexpr int kConfigShort = 4;

/// Plan tile class (0 kM16, 1 kM64, 2 kM128) a kernel config runs.
constexpr int plan_class(int cfg) { return cfg == kConfigDeep || cfg == kConfigShort ? 0 : cfg; }
/// The configs with the wide config's tiles and warps (wide, and short with fewer stages).
constexpr bool wide_tiles(int cfg) { return cfg == kConfigWide || cfg == kConfigShort; }
/// KV tokens per pipeline stage.
constexpr int kv_tile(int cfg, int head_dim) {
  return wide_tiles(cfg) || head_dim == 256 ? 32 : 64;
}
/// Warps along the packed rows (16 rows each) and along the tokens of a tile.
constexpr int warps_m(int cfg) { return cfg == 1 ? 4 : cfg == 2 ? 8 : 1; }
constexpr int warps_n(int cfg, int head_dim) {
  return wide_tiles(cfg)      ? 2
         : cfg == kConfigDeep ? (kv_tile(cfg, head_dim) / 16 >= 4 ? 4 : kv_tile(cfg, head_dim) / 16)
                              : 1;
}
/// KV tokens one warp takes of each tile (its slice of the tile).
constexpr int warp_tokens(int cfg, int head_dim) {
  return kv_tile(cfg, head_dim) / warps_n(cfg, head_dim);
}
/// Pipeline stages (a 16-bit KV cache; an fp8 one: the kernel's own count, 2 for short).
constexpr int num_stages(int cfg) { return cfg == kConfigShort ? 2 : 3; }

/// kM64/kM128 up to head_dim 128 keep K, V and Q in wgmma's column-block layout, and run wgmma
/// where the target has it (sm_90a).
constexpr bool block_layout(int cfg, int head_dim) {
  return (cfg == 1 || cfg == 2) && head_dim <= 128;
}
/// KV tokens per tile of the warp-specialized kernel's kM64 (1) and kM128 (2) CTAs (src/kernels/
/// sm90/config.cuh, WsConfig::BN): a masked item's slice there, per 64-row consumer.
constexpr int ws_kv_tile(int cls) { return cls == 2 ? 128 : 64; }
/// Rows one MMA slab covers: a warpgroup's 64 where the kernel runs wgmma (`wgmma`: sm_90a, the
/// block-layout configs), else a warp's 16. In a masked item the kernel skips a KV slice per slab,
/// and the cost model counts the same.
constexpr int mma_slab_rows(int cfg, int head_dim, bool wgmma) {
  return wgmma && block_layout(cfg, head_dim) ? 64 : 16;
}

/// Item-row bits (bit r = item row r; a mask word has 64) of the packed rows
/// [first, first + n) of an item of `packed_rows` packed rows, `group` per item row: the rows one
/// MMA slab (a warp's 16, a warpgroup's 64) covers. In a masked item the kernel skips a slab's KV
/// slice when no mask word of the slice has one of these bits, and the cost model counts the same.
constexpr uint64_t slab_row_bits(int first, int n, int packed_rows, int group) {
  const int last = (first + n < packed_rows ? first + n : packed_rows) - 1;
  const int lo = first / group < 63 ? first / group : 63;
  const int hi = last / group < 63 ? last / group : 63;
  return (~0ull >> (63 - hi)) & (~0ull << lo);
}
/// True for the configs that walk several KV heads per CTA (the kM16 ones).
constexpr bool head_loop(int cfg) { return plan_class(cfg) == 0; }

/// Wide kM16 when the kM16 launch has more than `threshold` CTAs (one per item and KV head) per
/// SM: the deep variant holds 2 CTAs per SM, and few long items want its bytes in flight.
inline constexpr int kWideM16CtasPerSm = 3;
inline bool use_wide_m16(int64_t m16_ctas, int num_sms, int threshold = kWideM16CtasPerSm) {
  return m16_ctas > static_cast<int64_t>(threshold) * num_sms;
}

/// The short kM16 config (2 stages) instead of the wide one when the kM16 items hold at most this
/// many KV tokens on average (two wide tiles).
inline constexpr int64_t kShortM16Tokens = 64;
/// Short kM16 where the wide config would run: from the plan's kM16 items and their KV tokens
/// (PlanLayout::class_items_planned[0], class_kv_tokens_planned[0]; graph-safe).
inline bool use_short_m16(int64_t m16_items, int64_t m16_kv_tokens) {
  return m16_items > 0 && m16_kv_tokens <= kShortM16Tokens * m16_items;
}

/// The kernel configs that can run cluster pairs: the deep kM16 one up to head_dim 128 (at 256
/// the peer's state would cost the config its second CTA per SM).
constexpr bool pair_config(int cfg, int head_dim) { return cfg == kConfigDeep && head_dim <= 128; }

/// Deep kM16 items run as cluster pairs (set_pair_m16; decode_kernel.cuh: the two CTAs of a
/// cluster each stream half of the item's KV tiles; the second merges its warps' states into one
/// per row and stores it into the first's shared memory, which merges it with its own and writes)
/// where the config can (pair_config), when the launch's CTAs (items x KV-head CTAs), doubled,
/// still fit one per SM and the items hold at least two 64-token tiles on average: a launch with
/// SMs to spare halves each CTA's serial tile chain. From the plan's counts
/// (PlanLayout::m16_items_planned, class_kv_tokens_planned[0]; graph-safe).
inline bool use_pair_m16(int64_t m16_ctas, int64_t m16_items, int64_t m16_kv_tokens, int num_sms,
                         int head_dim) {
  return pair_config(kConfigDeep, head_dim) && m16_ctas > 0 && 2 * m16_ctas <= num_sms &&
         m16_kv_tokens >= 128 * m16_items;
}

/// Waves of resident CTAs the head loop keeps: fewer, longer CTAs amortize the metadata chain,
/// but the last wave's imbalance grows with CTA length.
inline constexpr int kHeadLoopWaves = 8;
/// KV heads one kM16 CTA walks: the most that still leaves kHeadLoopWaves waves of
/// `ctas_per_sm` x `num_sms` resident CTAs, balanced so every CTA of an item gets the same count
/// (the last may get fewer). 1 when the launch is not larger than that.
/// `waves` <= 0 turns the head loop off.
inline int heads_per_cta(int64_t m16_items, int kv_heads, int num_sms, int ctas_per_sm,
                         int waves = kHeadLoopWaves) {
  if (kv_heads <= 1 || m16_items <= 0 || waves <= 0) return 1;
  const int64_t slots = static_cast<int64_t>(num_sms) * (ctas_per_sm < 1 ? 1 : ctas_per_sm);
  int64_t hpc = m16_items * kv_heads / (waves * slots);
  if (hpc <= 1) return 1;
  if (hpc > kv_heads) hpc = kv_heads;
  return static_cast<int>(ceil_div(kv_heads, ceil_div(kv_heads, hpc)));
}

/// GroupedKernel::kAuto: grouped class `cls` (1 kM64, 2 kM128) runs on the warp-specialized
/// kernel only where it beat the other kernel on an H100 (bench/NOTES.md, "Generation 3a: first
/// device run"). Its CTA holds a whole SM (384 threads, 227 KB of shared memory), so it pays off
/// only where the items are long enough to amortize the CTA's fixed latency (setup, pipeline fill,
/// epilogue: about 3 us) and nothing else wants the SM:
///  * every class: at least kWsMinTokensPerItem KV tokens per item on average (one 128-token tile
///    of kM128 and items of fewer than four 64-token tiles of kM64 lost);
///  * kM64 (the other kernel fits 2 CTAs per SM and overlaps one's fixed latency with the
///    other's work): at most one CTA per SM (items x kv_heads <= num_sms; each extra wave cost
///    about 3 us), and a kM16 launch that is empty or wide (many short CTAs that drain fast; the
///    deep config's few long CTAs hold SMs that a whole-SM CTA waits for).
/// `items` and `kv_tokens` are the plan's (PlanLayout::class_items_planned,
/// class_kv_tokens_planned), `m16_items` its kM16 items.
inline constexpr int64_t kWsMinTokensPerItem = 256;
inline bool ws_pays_off(int cls, int64_t items, int64_t kv_tokens, int64_t m16_items, int kv_heads,
                        int num_sms) {
  if (cls != 1 && cls != 2) return false;
  if (items <= 0 || kv_tokens < kWsMinTokensPerItem * items) return false;
  if (cls == 2) return true;
  const bool m16_clear = m16_items <= 0 || use_wide_m16(m16_items * kv_heads, num_sms);
  return items * kv_heads <= num_sms && m16_clear;
}

/// Threads of a merge CTA; threads per (head, 8-element chunk) pair of the two merge variants.
inline constexpr int kMergeThreads = 256;
inline constexpr int kMergeSplitWide = 1;
inline constexpr int kMergeSplitDeep = 4;
/// qo heads one merge CTA covers: kMergeThreads / split pairs of head_dim / 8 chunks each.
constexpr int merge_heads_per_cta(int head_dim, int split) {
  return (kMergeThreads / split) / (head_dim / 8) > 0 ? (kMergeThreads / split) / (head_dim / 8)
                                                      : 1;
}
/// Mean merge slots per merged query from which the deep merge is used whatever the CTA count.
inline constexpr int kDeepMergeSlots = 16;
/// Deep merge when the wide one would give fewer CTAs than SMs or the merge lists are long.
/// merged_queries: queries with at least one merge slot; merge_slots: their slots in all.
inline bool use_deep_merge(int64_t merged_queries, int64_t merge_slots, int num_qo_heads,
                           int head_dim, int num_sms) {
  if (merged_queries <= 0) return false;
  const int64_t per = merge_heads_per_cta(head_dim, kMergeSplitWide);
  const int64_t wide_ctas = merged_queries * ((num_qo_heads + per - 1) / per);
  return wide_ctas < num_sms || merge_slots >= kDeepMergeSlots * merged_queries;
}

}  // namespace treeattn::tile
