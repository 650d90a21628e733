// DeviceInfo: what the planners and the cost model know about a GPU, as plain values so that
// heuristics run and are tested on any machine. Presets for A100, H100, H200; the benchmark
// fills one from measured ceilings.
#pragma once

#include <cstdint>
#include <string>

namespace treeattn {

struct DeviceInfo {
  std::string name = "h200";
  int32_t num_sms = 132;
  int32_t smem_per_sm_bytes = 228 * 1024;
  double hbm_read_GBps = 4200.0;    ///< achievable streaming-read bandwidth
  double tc_TFLOPs = 762.0;         ///< dense fp16 tensor-core rate (cuBLAS-achievable)
  double mma_efficiency = 0.55;     ///< fraction of tc_TFLOPs our mma.sync kernel reaches
  double launch_overhead_us = 2.5;  ///< per kernel launch (back-to-back, same stream)
  double item_overhead_us = 1.0;    ///< per CTA fixed cost: prologue, Q load, epilogue
  int32_t ctas_per_sm = 2;          ///< resident CTAs of the attention kernel per SM
  // Terms of the calibrated model (docs/cost_model.md). The defaults give the uncalibrated model
  // (no latency floor, merge launch = launch_overhead_us); the presets set fitted values.
  double merge_launch_us = 2.5;       ///< the merge launch; 0 when the merge is fused
  double tile_latency_us = 0.0;       ///< least time one kM16-deep/kM64 CTA spends per 64 KV tokens
  double tile_latency_m128_us = 0.0;  ///< same for a kM128 CTA
  /// Same for a kM128 CTA of the warp-specialized kernel, which runs a plan's kM128 class where
  /// tile::ws_pays_off says so (warpgroup_mma devices, head_dim <= 128); 0: tile_latency_m128_us.
  double tile_latency_ws_m128_us = 0.0;
  /// Same for a kM64 CTA of the warp-specialized kernel, which runs a plan's kM64 class where
  /// tile::ws_pays_off says so (few kM64 CTAs: at most one per SM); 0: tile_latency_us.
  double tile_latency_ws_m64_us = 0.0;
  /// Fraction of tc_TFLOPs the warp-specialized kernel reaches on those kM128 CTAs (0:
  /// mma_efficiency), in the CTA's FLOP term and in the plan's tensor-core bound.
  double mma_efficiency_ws_m128 = 0.0;
  /// K/V bytes per us the SMs can pull out of L2 together (0: no such bound). Every CTA reads its
  /// KV through L2, re-reads included, so a plan takes at least its KV bytes read over this: the
  /// bound that many-row nodes split into small row tiles meet (each tile re-reads the node).
  double l2_read_GBps = 0.0;
  double tile_latency_wide_us = 0.0;  ///< same per 32 KV tokens for a wide kM16 CTA
  double merge_slot_us = 0.0;  ///< merge: one partial slot folded by one pass of a query's CTA
  /// Resident CTAs per SM in plans run with wide kM16 (0: ctas_per_sm).
  int32_t wide_ctas_per_sm = 0;
  int32_t wide_m16_ctas_per_sm = 3;  ///< kernel rule: wide kM16 when kM16 CTAs > this x num_sms
  /// Resident kM128 CTAs per SM (0: as many as the other classes). With fewer than an SM's
  /// slots, a kM128 CTA takes slots / m128_ctas_per_sm of them, with their bandwidth and
  /// tensor-core shares (the kM128 kernels hold one 256-thread CTA of > 128 registers per SM).
  int32_t m128_ctas_per_sm = 0;
  /// A kM64/kM128 CTA of a masked item (DeFT masks, mask_begin >= 0) takes (1 + mask_penalty x t)
  /// x the time of the same item unmasked; a kM16 CTA (1 + mask_penalty_m16 x t) x, where t is
  /// the share of its (slab, slice) pairs that test the mask (MaskedWork::tested_fraction). The
  /// defaults 0 give the uncalibrated model; the presets carry the fit (docs/cost_model.md).
  double mask_penalty = 0.0;
  double mask_penalty_m16 = 0.0;
  /// The same factors for the masked items over root paths (WorkItem::path_masks, the paths
  /// planners'): path_mask_penalty for kM64/kM128, path_mask_penalty_m16 for kM16, fitted on
  /// the paths sweep (docs/cost_model.md). Every mask penalty scales with the share of the item's
  /// (slab, slice) pairs that test the mask (MaskedWork::tested_fraction, cost_model.h).
  double path_mask_penalty = 0.0;
  double path_mask_penalty_m16 = 0.0;
  /// A CTA streams its KV at up to cta_bw_factor x its share of the HBM bandwidth (re-reads of
  /// KV another CTA also reads hit L2), while the plan as a whole stays bounded by its unique
  /// bytes over the HBM bandwidth (PlanShape::unique_kv_tokens). 1 = every byte at the HBM share.
  double cta_bw_factor = 1.0;
  /// The kernels run kM64/kM128 (head_dim <= 128) on wgmma, one MMA slab per warpgroup of 64
  /// rows (sm_90a: the h100/h200 presets), so a masked item skips KV slices per 64 rows, not 16.
  bool warpgroup_mma = false;
  /// Critical-path latency terms (docs/cost_model.md, "Latency terms"). Off, a plan pays
  /// launch_overhead_us per attention launch, merge_launch_us for the merge and item_overhead_us
  /// per CTA. On, the call pays first_launch_us for its first kernel and pdl_launch_us for each
  /// later attention kernel (launched early by PDL), a CTA pays cta_fixed_us plus its prologue's
  /// prologue_round_trips dependent global loads of round_trip_us, and the merge is a dependent
  /// phase after the attention: merge_release_us, merge_round_trips round trips, then its longest
  /// merge list. The h100/h200 presets turn it on; off gives the model before these terms.
  bool latency_terms = false;
  double first_launch_us = 0.0;  ///< the call's first kernel: launch to its first CTA running
  double pdl_launch_us = 0.0;    ///< each later attention kernel of the call
  double round_trip_us = 0.0;    ///< one dependent global load after an L2 flush
  double cta_fixed_us = 0.0;     ///< a CTA's fixed cost besides its prologue's round trips
  /// Dependent global loads before a CTA's first K/V arrive: item, then rows and ranges, then
  /// page ids, then K/V (tile::kPrologueRoundTrips).
  int32_t prologue_round_trips = 4;
  double merge_release_us = 0.0;  ///< the last attention CTA's end to the merge's release
  int32_t merge_round_trips = 4;  ///< the merge's dependent loads after its release
  /// The kernels run the kM16 class as cluster pairs where tile::use_pair_m16 says so (sm_90,
  /// set_pair_m16 on): each unmasked kM16 item then costs its first half of KV tiles plus
  /// pair_exchange_us (the second CTA's state handed over), on twice the CTAs. Off in the
  /// default (uncalibrated) model; the h100/h200 presets turn it on.
  bool kv_pairs = false;
  double pair_exchange_us = 0.0;
};

/// "a100", "h100", "h200" (case-insensitive); throws std::invalid_argument naming "device".
DeviceInfo device_preset(const std::string& name);

/// Throws std::invalid_argument naming the field ("device.num_sms", ...) unless every count is
/// >= 1 (wide_ctas_per_sm, wide_m16_ctas_per_sm >= 0), every rate finite and > 0, every
/// overhead, latency and penalty finite and >= 0. make_plan() and plan_stats() call it.
void validate_device(const DeviceInfo& d);

}  // namespace treeattn
