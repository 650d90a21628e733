// DeviceInfo presets. H100 and H200 carry the kernel terms fitted to H100 measurements (see
// set_h100_fit); H200 then takes its own CTA stream factor (set_h200_fit). Bandwidth and
// tensor-core figures are achievable (measured) ceilings, not datasheet peaks;
// docs/cost_model.md says where each value comes from.
#include "treeattn/plan/cost/device_info.h"

#include <algorithm>
#include <cctype>
#include <cmath>

#include "treeattn/common/error.h"

namespace treeattn {
namespace {

/// The critical-path latency terms (DeviceInfo::latency_terms, docs/cost_model.md), fitted by
/// tools/calibrate_cost_model.py --free first_launch_us,pdl_launch_us,round_trip_us,cta_fixed_us,
/// merge_release_us to bench/results/h100-2026-11-23-allplanners-s4.json (983 results of the
/// current kernels, the other terms as in set_h100_fit): |log(estimate / measured)| median 0.127,
/// p90 0.31, rms 0.208 (off: 0.152, 0.37, 0.242).
void set_h100_latency(DeviceInfo* d) {
  d->latency_terms = true;
  d->first_launch_us = 2.571;   // first kernel's launch to its first CTA
  d->pdl_launch_us = 4.605;     // each further attention kernel: completions are ordered
  d->round_trip_us = 0.5694;    // one dependent global load after the L2 flush
  d->cta_fixed_us = 0.8158;     // Q, epilogue and the rest of a CTA's fixed cost
  d->prologue_round_trips = 4;  // item -> rows, ranges -> page ids -> K/V
  // Refitted alone (--free merge_slot_us,merge_release_us, merge_round_trips set) to the
  // 2026-11-26 stop-34 all-planner runs of the merge that reads its list before the wait
  // (bench/results/h100-2026-11-26-s34-allplanners-*.json, 1235 results): rms log 0.212 -> 0.165.
  d->merge_release_us = 2.268;  // the last attention CTA's end to the merge's release
  d->merge_round_trips = 2;     // the LSEs and partials of a batch, then the output
  // kM16 cluster pairs (sm_90): the exchange fitted (least squares in log space) to the three
  // lines that pair in bench/results/h100-2026-11-26-s37-pairs-onoff-summary.txt (rms log error
  // 0.065); the timeline's epilogue grew by 0.1 us on the smallest line.
  d->kv_pairs = true;
  d->pair_exchange_us = 0.15;
}

/// The kernel-dependent terms fitted by tools/calibrate_cost_model.py to an all-planner H100 run
/// (bench/results/h100-2026-11-23-allplanners.json; docs/cost_model.md has the fit and its error).
/// Bandwidth and tensor-core rate stay the measured ceilings. Re-fit after kernel changes.
void set_h100_fit(DeviceInfo* d) {
  d->launch_overhead_us = 5.045;  // per attention launch (with PDL: mostly the first CTA's chain)
  d->merge_launch_us = 9.032;     // the merge launch and its first CTAs' chain
  d->item_overhead_us = 4.394;    // per CTA: header -> item -> range -> page id chain, epilogue
  d->mma_efficiency = 0.4147;
  d->tile_latency_us = 1.434;        // per 64 KV tokens, kM16 deep / kM64 CTA
  d->tile_latency_m128_us = 3.069;   // per 64 KV tokens, kM128 CTA
  d->tile_latency_wide_us = 0.1065;  // per 32 KV tokens, wide kM16 CTA
  d->merge_slot_us = 0.03839;        // merge: per partial slot per 128-thread pass (refit: above)
  d->mask_penalty = 1.289;           // masked kM64/kM128 CTA: up to x2.29 (every pair tested)
  d->mask_penalty_m16 = 0.2094;      // masked kM16 CTA: up to x1.21 (not refitted since scaled)
  d->path_mask_penalty = 0.056;      // whole-paths kM64/kM128 CTA (paths; refit: below)
  d->path_mask_penalty_m16 = 0.0;    // whole-paths kM16 CTA
  d->cta_bw_factor = 1.992;          // a CTA's KV stream: ~2x its HBM share (L2 re-reads)
  d->ctas_per_sm = 2;                // kernel occupancy (src/kernels/decode_params.h)
  d->wide_ctas_per_sm = 4;
  d->wide_m16_ctas_per_sm = 3;
  d->m128_ctas_per_sm = 1;  // cudaOccupancyMaxActiveBlocksPerMultiprocessor, every head_dim
  // Fitted alone, the terms above fixed (tools/calibrate_cost_model.py --free
  // tile_latency_ws_m128_us,mma_efficiency_ws_m128,l2_read_GBps) to the 2026-11-26 all-planner
  // runs plus the named lines' planner sweep on both kernels (docs/cost_model.md).
  d->tile_latency_ws_m128_us = 0.7764;  // per 64 KV tokens, kM128 CTA of the ws kernel
  d->mma_efficiency_ws_m128 = 0.7696;
  d->l2_read_GBps = 7335.0;  // every KV byte the CTAs read, re-reads included
  // The ws kernel's kM64 CTAs (few kM64 CTAs: tile::ws_pays_off) and the paths penalties, the
  // mask penalties scaled by the share of (slab, slice) pairs that test the mask: fitted together
  // (--free tile_latency_ws_m64_us,path_mask_penalty,path_mask_penalty_m16,mask_penalty,
  // mask_penalty_m16,tile_latency_ws_m128_us) to the stop-42 sweep of every planner and paths
  // group on the FastTree, PAT and irregular sets (bench/results/h100-2026-11-27-s42-sweep-*,
  // 3079 plans; rms log 0.228 -> 0.180); kept the ws kM64 floor and the paths penalties, which
  // the replay of auto's choice over the measured plans favours (docs/cost_model.md). The H200
  // sweep (h200-2026-11-27-s42-sweep-*) ranks no other penalty better on that GPU.
  d->tile_latency_ws_m64_us = 0.8967;  // per 64 KV tokens, kM64 CTA of the ws kernel
  set_h100_latency(d);
}

/// What an H200 changes in the H100 fit: the per-CTA KV stream factor, fitted alone
/// (tools/calibrate_cost_model.py --free cta_bw_factor) to an all-planner H200 run
/// (bench/results/h200-2026-11-26-s33-allplanners.json, 1278 plans): a CTA's KV stream grows less
/// than the HBM bandwidth does, so its factor over the larger HBM share is smaller.
void set_h200_fit(DeviceInfo* d) { d->cta_bw_factor = 1.65; }

/// The hardware figures of each preset (achievable ceilings, see the file comment).
struct Hardware {
  const char* name;
  int32_t num_sms;
  int32_t smem_per_sm_kib;
  double hbm_read_GBps;
  double tc_TFLOPs;
};
constexpr Hardware kPresets[] = {{"a100", 108, 164, 1600.0, 290.0},
                                 {"h100", 132, 228, 3040.0, 757.0},
                                 {"h200", 132, 228, 4500.0, 762.0}};

void check_count(int64_t v, int64_t lo, const char* field) {
  TA_CHECK_ARG(v >= lo && v <= (int64_t{1} << 30), detail::concat("device.", field),
               "must lie in [", lo, ", 2^30], got ", v);
}
void check_real(double v, bool positive, const char* field) {
  TA_CHECK_ARG(std::isfinite(v) && (positive ? v > 0 : v >= 0), detail::concat("device.", field),
               positive ? "must be finite and > 0, got " : "must be finite and >= 0, got ", v);
}

}  // namespace

void validate_device(const DeviceInfo& d) {
  check_count(d.num_sms, 1, "num_sms");
  check_count(d.smem_per_sm_bytes, 1, "smem_per_sm_bytes");
  check_count(d.ctas_per_sm, 1, "ctas_per_sm");
  check_count(d.wide_ctas_per_sm, 0, "wide_ctas_per_sm");
  check_count(d.wide_m16_ctas_per_sm, 0, "wide_m16_ctas_per_sm");
  check_count(d.m128_ctas_per_sm, 0, "m128_ctas_per_sm");
  check_real(d.hbm_read_GBps, true, "hbm_read_GBps");
  check_real(d.tc_TFLOPs, true, "tc_TFLOPs");
  check_real(d.mma_efficiency, true, "mma_efficiency");
  check_real(d.launch_overhead_us, false, "launch_overhead_us");
  check_real(d.item_overhead_us, false, "item_overhead_us");
  check_real(d.merge_launch_us, false, "merge_launch_us");
  check_real(d.tile_latency_us, false, "tile_latency_us");
  check_real(d.tile_latency_m128_us, false, "tile_latency_m128_us");
  check_real(d.tile_latency_ws_m128_us, false, "tile_latency_ws_m128_us");
  check_real(d.tile_latency_ws_m64_us, false, "tile_latency_ws_m64_us");
  check_real(d.mma_efficiency_ws_m128, false, "mma_efficiency_ws_m128");
  check_real(d.l2_read_GBps, false, "l2_read_GBps");
  check_real(d.tile_latency_wide_us, false, "tile_latency_wide_us");
  check_real(d.merge_slot_us, false, "merge_slot_us");
  check_real(d.mask_penalty, false, "mask_penalty");
  check_real(d.mask_penalty_m16, false, "mask_penalty_m16");
  check_real(d.path_mask_penalty, false, "path_mask_penalty");
  check_real(d.path_mask_penalty_m16, false, "path_mask_penalty_m16");
  check_real(d.first_launch_us, false, "first_launch_us");
  check_real(d.pdl_launch_us, false, "pdl_launch_us");
  check_real(d.round_trip_us, false, "round_trip_us");
  check_real(d.cta_fixed_us, false, "cta_fixed_us");
  check_real(d.merge_release_us, false, "merge_release_us");
  check_real(d.pair_exchange_us, false, "pair_exchange_us");
  check_count(d.prologue_round_trips, 0, "prologue_round_trips");
  check_count(d.merge_round_trips, 0, "merge_round_trips");
  TA_CHECK_ARG(std::isfinite(d.cta_bw_factor) && d.cta_bw_factor >= 1.0, "device.cta_bw_factor",
               "must be finite and >= 1, got ", d.cta_bw_factor);
}

DeviceInfo device_preset(const std::string& name) {
  std::string n = name;
  std::transform(n.begin(), n.end(), n.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  for (const Hardware& h : kPresets) {
    if (n != h.name) continue;
    DeviceInfo d;
    d.name = h.name;
    d.num_sms = h.num_sms;
    d.smem_per_sm_bytes = h.smem_per_sm_kib * 1024;
    d.hbm_read_GBps = h.hbm_read_GBps;
    d.tc_TFLOPs = h.tc_TFLOPs;
    // H200: the H100 latencies; bytes terms scale with the bandwidth (4.50 / 3.04).
    set_h100_fit(&d);
    if (n == "h200") set_h200_fit(&d);
    d.warpgroup_mma = n != "a100";  // sm_90a kernels
    if (n == "a100") {
      // Not measured: the H100 kernel terms with latencies scaled by the SM clock ratio
      // (1.98 / 1.41 GHz), no PDL (the merge launch costs a full launch).
      constexpr double kClock = 1.98 / 1.41;
      d.launch_overhead_us *= kClock;
      d.merge_launch_us = d.launch_overhead_us;
      d.item_overhead_us *= kClock;
      d.tile_latency_us *= kClock;
      d.tile_latency_m128_us *= kClock;
      d.l2_read_GBps = 0;  // not measured there (the ws terms never apply: no wgmma kernels)
      d.tile_latency_wide_us *= kClock;
      d.merge_slot_us *= kClock;
      d.first_launch_us *= kClock;
      d.pdl_launch_us = d.first_launch_us;  // each kernel launched in full
      d.round_trip_us *= kClock;
      d.cta_fixed_us *= kClock;
      d.merge_release_us = d.first_launch_us;
      d.kv_pairs = false;  // no clusters before sm_90
    }
    return d;
  }
  TA_CHECK_ARG(false, "device", "unknown device '", name, "' (expected a100, h100 or h200)");
  return DeviceInfo{};
}

}  // namespace treeattn
