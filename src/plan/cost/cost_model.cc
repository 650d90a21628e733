// Analytic cost model shared by the planners and the statistics (docs/cost_model.md).
//
// One CTA = one (work item, KV head). Its time is
//   item_overhead_us + max(bytes / slot_bandwidth, flops / slot_flop_rate, tiles x tile_latency)
// where a CTA slot is one of the resident CTAs of an SM (ctas_per_sm; wide_ctas_per_sm when the
// plan's kM16 launch runs the wide variant; fewer when the plan has fewer CTAs than slots: CTAs
// are spread over the SMs first) and gets its share of the HBM bandwidth and of the tensor-core
// rate (tc_TFLOPs x mma_efficiency). Bytes: K and V of its tokens, Q of its packed
// rows, and either the fp16/bf16 output or the fp32 partial (output + LSE) of each packed row.
// FLOPs: QK^T and PV, 2 x 2 x rows x tokens x head_dim, with the rows the MMA really issues (kM16
// always issues 16 rows; kM64/kM128 issue ceil(rows / 16) x 16 because warps without rows skip)
// and tokens rounded up to 64. The latency floor: one CTA cannot stream its KV faster than one
// kernel tile per tile_latency (per 64 tokens for kM16-deep and kM64, tile_latency_m128_us for
// kM128, per 32 tokens for wide kM16: the chain of cp.async waits, MMAs and softmax of a tile,
// which does not shrink however few CTAs share an SM; docs/cost_model.md has the fitted values).
// A masked item has its CTA time scaled by 1 + mask_penalty x t (kM64/kM128) or
// 1 + mask_penalty_m16 x t (kM16), fitted on flatten's DeFT blocks, where t is the share of its
// (slab, slice) pairs that test the mask (MaskedWork::tested_fraction: a slice that every row of a
// slab sees runs unmasked); an item over root paths (the paths planners',
// WorkItem::path_masks) takes path_mask_penalty(_m16) instead.
// KV tokens an item alone reads (WorkItem::private_tokens) stream at the slot's HBM share; the
// others at up to cta_bw_factor x it (L2 re-reads).
// Tile sizes and which kM16 variant runs come from the kernels' tile policy
// (treeattn/plan/tile_policy.h): wide when the plan has more than wide_m16_ctas_per_sm x num_sms
// kM16 CTAs.
//
// Where the plan's kM128 class runs on the warp-specialized kernel (tile::ws_pays_off, as the
// kernels decide), its CTAs take tile_latency_ws_m128_us and mma_efficiency_ws_m128 instead; where
// its kM64 class does, those CTAs take tile_latency_ws_m64_us.
//
// A plan's time: LPT (longest CTA first onto the least-loaded slot) over num_sms x slots-per-SM
// slots gives the makespan, except for kM128 CTAs that fill an SM (m128_ctas_per_sm): their class
// launches last and PDL starts it once every earlier CTA has been dispatched, and a CTA that needs
// the SM's whole register file starts only when one SM has drained; so they are scheduled after
// all the others, each onto the SM that drains first. (kM16 and kM64 CTAs share an SM, so their
// launch order matters less: ordering them class by class too measured worse, bench/NOTES.md.)
// That makespan is then raised to the
// global bound max(unique bytes / HBM bandwidth, the FLOPs of each class at its tensor-core rate,
// summed, KV bytes read / L2 bandwidth); then launch_overhead_us per attention launch (one per
// non-empty tile class) and, when there are partial slots, merge_launch_us plus the merge pass: the
// larger of its bytes (partials read, merged outputs written) at full HBM bandwidth and the serial
// chain of one merge CTA (the mean merge-list length x passes x merge_slot_us). The DeviceInfo
// defaults (no latency floor, merge launch = launch overhead) give the original uncalibrated model.
// Deterministic, O(C log C + C log S + S) in CTAs C and slots S.
//
// With DeviceInfo::kv_pairs the kM16 class runs as cluster pairs where the kernels' rule
// (tile::use_pair_m16) says so: an unmasked kM16 item's CTA then streams the first half of its
// tiles (their bytes and FLOPs) and pays pair_exchange_us, on twice the CTAs (a masked item's
// first CTA takes every tile, and pays the exchange too).
//
// With DeviceInfo::latency_terms the plan's fixed terms follow the call's critical path instead:
// first_launch_us, then pdl_launch_us for each further attention kernel (PDL starts it while the
// previous one runs), a CTA's overhead is cta_fixed_us + prologue_round_trips x round_trip_us, and
// the merge is a phase that starts when the attention ends: merge_release_us +
// merge_round_trips x round_trip_us + max(bytes, the longest merge list's chain).
#include "treeattn/plan/cost/cost_model.h"

#include <algorithm>
#include <functional>
#include <iterator>
#include <utility>
#include <vector>

#include "treeattn/common/error.h"
#include "treeattn/plan/tile_policy.h"

namespace treeattn {
namespace {

void check_device(const DeviceInfo& dev) {
  TA_CHECK_ARG(dev.num_sms >= 1 && dev.ctas_per_sm >= 1 && dev.hbm_read_GBps > 0 &&
                   dev.tc_TFLOPs > 0 && dev.mma_efficiency > 0 && dev.wide_ctas_per_sm >= 0,
               "device", "non-positive SM count, CTAs per SM, bandwidth or tensor-core rate");
}

int64_t slots_per_sm(const DeviceInfo& dev, bool wide) {
  return wide && dev.wide_ctas_per_sm > 0 ? dev.wide_ctas_per_sm : dev.ctas_per_sm;
}

/// Per-CTA constants of one (device, shape, kM16 variant).
struct CtaModel {
  /// `ctas`: CTAs of the whole plan; fewer than the slots share each SM among fewer CTAs.
  /// `ws_m128` / `ws_m64`: the plan's kM128 / kM64 class runs on the warp-specialized kernel;
  /// `pairs`: its kM16 class runs as cluster pairs.
  CtaModel(const DeviceInfo& dev, const PlanShape& s, bool wide_m16, int64_t ctas,
           bool ws_m128 = false, bool pairs = false, bool ws_m64 = false)
      : D(s.head_dim),
        dt(s.dtype_bytes),
        kv_dt(s.kv_dtype_bytes),
        wide(wide_m16),
        pair(pairs),
        pair_us(dev.pair_exchange_us) {
    const int64_t per_sm = std::max<int64_t>(
        1, std::min<int64_t>(slots_per_sm(dev, wide_m16), (ctas + dev.num_sms - 1) / dev.num_sms));
    const double slots = static_cast<double>(dev.num_sms) * static_cast<double>(per_sm);
    // a kM128 CTA with fewer resident per SM than the plan's CTAs per SM takes several slots
    // (their shares below); with one CTA per SM or fewer it has the SM's share alone
    if (dev.m128_ctas_per_sm > 0 && dev.m128_ctas_per_sm < per_sm)
      weight[2] = per_sm / dev.m128_ctas_per_sm;
    slot_bw = dev.hbm_read_GBps * 1e3 / slots;  // bytes per us
    kv_bw = slot_bw * dev.cta_bw_factor;  // KV may come from L2 (the plan bound: unique bytes)
    // FLOPs per us, per class: the ws kernel's kM128 CTAs at their own efficiency
    for (double& r : flop_rate) r = dev.tc_TFLOPs * 1e6 * dev.mma_efficiency;
    if (ws_m128 && dev.mma_efficiency_ws_m128 > 0)
      flop_rate[2] = dev.tc_TFLOPs * 1e6 * dev.mma_efficiency_ws_m128;
    for (int k = 0; k < kNumTileClasses; ++k) slot_flops[k] = flop_rate[k] / slots;
    overhead = dev.latency_terms ? dev.cta_fixed_us + dev.prologue_round_trips * dev.round_trip_us
                                 : dev.item_overhead_us;
    mask_extra[0] = dev.mask_penalty_m16;
    mask_extra[1] = mask_extra[2] = dev.mask_penalty;
    path_mask_extra[0] = dev.path_mask_penalty_m16;
    path_mask_extra[1] = path_mask_extra[2] = dev.path_mask_penalty;
    // Kernel KV tile (tokens) per class and its latency floor: 64-token tiles (32 for head_dim
    // 256, the floor scaled by the tile's size), wide kM16 32-token tiles.
    const int64_t big = tile::kv_tile(tile::kConfigDeep, s.head_dim);
    const double scale = static_cast<double>(big) / 64.0;
    tile_tokens[0] = wide ? tile::kv_tile(tile::kConfigWide, s.head_dim) : big;
    tile_lat[0] = wide ? dev.tile_latency_wide_us : dev.tile_latency_us * scale;
    tile_tokens[1] = big;
    tile_lat[1] = (ws_m64 && dev.tile_latency_ws_m64_us > 0 ? dev.tile_latency_ws_m64_us
                                                            : dev.tile_latency_us) *
                  scale;
    tile_tokens[2] = big;
    tile_lat[2] = (ws_m128 && dev.tile_latency_ws_m128_us > 0 ? dev.tile_latency_ws_m128_us
                                                              : dev.tile_latency_m128_us) *
                  scale;
  }
  ItemCost operator()(TileClass tile, int64_t packed, int64_t partial, int64_t kv,
                      bool masked = false, const MaskedWork& work = {}, int64_t priv = 0,
                      bool path_masks = false) const {
    ItemCost c;
    const double tok_bytes = D * 2.0 * kv_dt;  // K and V of one token
    c.kv_bytes = static_cast<double>(kv) * tok_bytes;
    // KV time of the item's tokens [lo, hi): the private ones (the last `priv`: the paths
    // planner's private nodes end each root path) from HBM at the slot's share, the rest at up
    // to cta_bw_factor x it (L2 re-reads)
    const int64_t first_priv = kv - std::min(priv, kv);
    const auto kv_us = [&](int64_t lo, int64_t hi) {
      const int64_t pv = std::max<int64_t>(0, hi - std::max(lo, first_priv));
      return (static_cast<double>(hi - lo - pv) / kv_bw + static_cast<double>(pv) / slot_bw) *
             tok_bytes;
    };
    c.bytes =
        c.kv_bytes + packed * D * dt + partial * (D * 4.0 + 4.0) + (packed - partial) * D * dt;
    c.flops = 4.0 * static_cast<double>(issued_mma_rows(tile, packed)) *
              static_cast<double>((kv + 63) / 64 * 64) * D * work.mma_fraction;
    const int k = static_cast<int>(tile);
    int64_t tiles = (kv + tile_tokens[k] - 1) / tile_tokens[k];
    // a cluster pair's first CTA: the first half of the tiles (a masked item all of them), the
    // share of bytes and FLOPs of its tokens, then the exchange
    const bool paired = pair && tile == TileClass::kM16;
    double part = 1.0;
    double kv_io = kv_us(0, kv);
    if (paired && !masked && tiles > 1) {
      const int64_t first = (tiles + 1) / 2;
      const int64_t first_tokens = std::min<int64_t>(kv, first * tile_tokens[k]);
      part = static_cast<double>(first_tokens) / static_cast<double>(kv);
      tiles = first;
      // the slower half's KV: the second holds the private tail
      kv_io = std::max(kv_us(0, first_tokens), kv_us(first_tokens, kv));
    }
    const double lat = static_cast<double>(tiles) * tile_lat[k];
    const double w = static_cast<double>(weight[k]);  // slots the CTA takes
    const double io_us = (kv_io + (c.bytes - c.kv_bytes) / slot_bw) / w;
    c.us = overhead + std::max({io_us, c.flops * part / (slot_flops[k] * w), lat});
    if (masked)
      c.us *= 1.0 + (path_masks ? path_mask_extra[k] : mask_extra[k]) * work.tested_fraction;
    if (paired) c.us += pair_us;
    return c;
  }
  double D, dt, kv_dt;  // head_dim, Q/O and K/V element bytes
  bool wide;
  bool pair;       ///< the kM16 class runs as cluster pairs
  double pair_us;  ///< a pair's exchange
  double slot_bw = 0, kv_bw = 0, overhead = 0;
  double flop_rate[kNumTileClasses] = {0, 0, 0};   ///< the whole GPU's, per class
  double slot_flops[kNumTileClasses] = {0, 0, 0};  ///< a slot's share of it
  /// A masked item's CTA time grows by this share of it for the pairs that test the mask
  double mask_extra[kNumTileClasses] = {0, 0, 0};
  double path_mask_extra[kNumTileClasses] = {0, 0, 0};  ///< the same, items over root paths
  int64_t tile_tokens[kNumTileClasses] = {64, 64, 64};
  int64_t weight[kNumTileClasses] = {1, 1, 1};  ///< slots one CTA of the class takes
  double tile_lat[kNumTileClasses] = {0, 0, 0};
};

/// CTAs of one (class, time).
struct CtaRun {
  int cls;    ///< tile class: the launch order
  double us;  ///< one CTA's time
  int64_t n;  ///< CTAs
};

/// Makespan of `runs` over `sms` x `spm` slots, longest CTA first onto the least-loaded slot
/// (LPT); slot s is on SM s % sms, so ties fill the SMs breadth first, as the block scheduler
/// does. With chunk > 1 a kM128 CTA fills `chunk` slots of one SM (at most `per_sm` of them on an
/// SM at once): those CTAs come after all the others (their class launches last, once every
/// earlier CTA has been dispatched) and each starts when the `chunk` slots of one SM are all free.
double dispatch_makespan(std::vector<CtaRun>* runs, int64_t sms, int64_t spm, int64_t chunk,
                         int64_t per_sm = 1) {
  std::sort(runs->begin(), runs->end(), [chunk](const CtaRun& a, const CtaRun& b) {
    const bool wa = chunk > 1 && a.cls == 2, wb = chunk > 1 && b.cls == 2;
    return wa != wb ? wb : a.us > b.us;
  });
  using Slot = std::pair<double, int64_t>;  // (busy until, slot)
  const auto later = std::greater<Slot>();
  thread_local std::vector<Slot> heap;
  heap.clear();
  for (int64_t i = 0; i < sms * spm; ++i) heap.push_back({0.0, i});  // sorted: a min-heap
  double makespan = 0;
  // Each CTA goes to the least-loaded slot: every step takes the minimum of (busy until, slot),
  // a total order (slots are unique), so any structure that yields the minima in order gives
  // the same assignment. A few CTAs: the heap's root takes the CTA's time and sinks. A run of
  // identical CTAs of at least a quarter of the slots: the slots sorted, the slots that took a CTA
  // queue up in the order they took it, which is their order too (each took the same time), so
  // every step takes the smaller head of the two; they merge back into a sorted array, a valid
  // heap (O(n + S) for the run instead of O(n log S)).
  thread_local std::vector<Slot> taken, merged;
  bool sorted = true;  // the heap array is sorted (the start, and after a run of many)
  auto place = [&](const CtaRun& run) {
    const size_t size = heap.size();
    if (run.n < static_cast<int64_t>(size / 4)) {
      sorted = false;
      for (int64_t k = 0; k < run.n; ++k) {
        heap[0].first += run.us;
        makespan = std::max(makespan, heap[0].first);
        const Slot x = heap[0];
        size_t i = 0;
        for (;;) {
          size_t c = 2 * i + 1;
          if (c >= size) break;
          if (c + 1 < size && later(heap[c], heap[c + 1])) ++c;  // the smaller child
          if (!later(x, heap[c])) break;
          heap[i] = heap[c];
          i = c;
        }
        heap[i] = x;
      }
      return;
    }
    if (!sorted) std::sort(heap.begin(), heap.end());
    sorted = true;
    taken.clear();
    size_t a = 0, b = 0;
    for (int64_t k = 0; k < run.n; ++k) {
      Slot x = b < taken.size() && (a == size || taken[b] < heap[a]) ? taken[b++] : heap[a++];
      x.first += run.us;
      makespan = std::max(makespan, x.first);
      taken.push_back(x);
      // (two loads an ulp apart may round to one: the slot ids then order them)
      for (size_t i = taken.size() - 1; i > b && taken[i] < taken[i - 1]; --i)
        std::swap(taken[i], taken[i - 1]);
    }
    merged.clear();
    std::merge(heap.begin() + static_cast<std::ptrdiff_t>(a), heap.end(),
               taken.begin() + static_cast<std::ptrdiff_t>(b), taken.end(),
               std::back_inserter(merged));
    heap.swap(merged);
  };
  size_t r = 0;
  for (; r < runs->size() && !(chunk > 1 && (*runs)[r].cls == 2); ++r) place((*runs)[r]);
  if (r == runs->size()) return makespan;
  // the SM-filling CTAs: one slot per chunk of `chunk` slots of an SM, free when all of them are
  thread_local std::vector<double> busy;
  busy.assign(static_cast<size_t>(sms * spm), 0.0);
  for (const Slot& sl : heap) busy[static_cast<size_t>(sl.second)] = sl.first;
  heap.clear();
  per_sm = std::max<int64_t>(1, std::min(per_sm, spm / chunk));
  for (int64_t c = 0; c < per_sm; ++c)
    for (int64_t sm = 0; sm < sms; ++sm) {
      double t = 0;
      for (int64_t j = c * chunk; j < (c + 1) * chunk; ++j)
        t = std::max(t, busy[static_cast<size_t>(j * sms + sm)]);
      heap.push_back({t, c * sms + sm});
    }
  std::make_heap(heap.begin(), heap.end(), later);
  sorted = false;
  for (; r < runs->size(); ++r) place((*runs)[r]);
  return makespan;
}

}  // namespace

MaskedWork masked_work(TileClass tile, int group, int head_dim, int rows, const int32_t* lens,
                       const uint64_t* masks, size_t n, bool wgmma, bool ws) {
  // kernel config: kM64 / kM128 run as their plan class; both kM16 variants take 16-token slices
  const int cfg = tile == TileClass::kM16 ? tile::kConfigDeep : static_cast<int>(tile);
  const int64_t slice = ws && wgmma && tile::block_layout(cfg, head_dim)
                            ? tile::ws_kv_tile(cfg)
                            : tile::warp_tokens(cfg, head_dim);
  const int packed = rows * group;
  const int rows_per_slab = tile::mma_slab_rows(cfg, head_dim, wgmma);
  const int slabs =  // <= 128 rows
      std::clamp(static_cast<int>(ceil_div(packed, rows_per_slab)), 1, 128 / rows_per_slab);
  uint64_t slab_rows[8] = {};
  for (int s = 0; s < slabs; ++s)
    slab_rows[s] = tile::slab_row_bits(rows_per_slab * s, rows_per_slab, packed, group);
  int64_t active = 0, tested = 0, slices = 0;
  // one slice of `count` alike: `any` the OR of its tokens' masks, `all` their AND (0 when the
  // item's end cuts it short: the kernel reads zero words past the item)
  const auto add = [&](uint64_t any, uint64_t all, int64_t count) {
    for (int s = 0; s < slabs; ++s) {
      if ((any & slab_rows[s]) == 0) continue;
      active += count;
      if ((all & slab_rows[s]) != slab_rows[s]) tested += count;
    }
    slices += count;
  };
  int64_t in = 0;                // tokens of the open slice so far (0: no slice open)
  uint64_t seen = 0, every = 0;  // OR and AND of the masks of the open slice
  for (size_t j = 0; j < n; ++j) {
    int64_t left = lens[j];
    if (left <= 0) continue;
    if (in > 0) {  // the range first completes the open slice
      const int64_t take = std::min(left, slice - in);
      seen |= masks[j];
      every &= masks[j];
      in += take;
      left -= take;
      if (in < slice) continue;
      add(seen, every, 1);
      in = 0;
    }
    // whole slices of this range alone, in one step (an item's shared nodes: many slices)
    const int64_t whole = left / slice;
    if (whole > 0) {
      add(masks[j], masks[j], whole);
      left -= whole * slice;
    }
    if (left > 0) {  // its last tokens open the next slice
      seen = every = masks[j];
      in = left;
    }
  }
  if (in > 0) add(seen, 0, 1);
  MaskedWork w;
  if (slices > 0)
    w.mma_fraction = static_cast<double>(active) / static_cast<double>(slices * slabs);
  if (active > 0) w.tested_fraction = static_cast<double>(tested) / static_cast<double>(active);
  return w;
}

void set_masked_work(ItemSummary* it, int group, int head_dim, const int32_t* lens,
                     const uint64_t* masks, size_t n, bool wgmma) {
  it->work = it->ws_work = masked_work(it->tile, group, head_dim, it->rows, lens, masks, n, wgmma);
  if (it->tile == TileClass::kM128 && wgmma && tile::block_layout(2, head_dim))
    it->ws_work = masked_work(it->tile, group, head_dim, it->rows, lens, masks, n, wgmma, true);
}

bool model_uses_wide_m16(const DeviceInfo& dev, int64_t m16_ctas) {
  return tile::use_wide_m16(m16_ctas, dev.num_sms, dev.wide_m16_ctas_per_sm);
}

ItemCost estimate_cta(const DeviceInfo& dev, const PlanShape& shape, TileClass tile, bool wide,
                      int64_t packed_rows, int64_t partial_packed_rows, int64_t kv_tokens) {
  check_device(dev);
  const int64_t full = static_cast<int64_t>(dev.num_sms) * slots_per_sm(dev, wide);
  return CtaModel(dev, shape, wide, full)(tile, packed_rows, partial_packed_rows, kv_tokens);
}

ItemCost estimate_item(const DeviceInfo& dev, const PlanShape& shape, TileClass tile,
                       int32_t packed_rows, int64_t kv_tokens, bool writes_partial) {
  // A lone item: the kM16 variant for few CTAs (deep).
  return estimate_cta(dev, shape, tile, false, packed_rows, writes_partial ? packed_rows : 0,
                      kv_tokens);
}

double estimate_items_us(const DeviceInfo& dev, const PlanShape& s, const ItemSummary* items,
                         size_t num_items, const MergeSummary& merge, double prune_above) {
  const int64_t num_slots = merge.slots, merged_queries = merge.queries;
  check_device(dev);
  const int64_t kv_heads = s.num_kv_heads;
  const int64_t group = s.group();
  int64_t class_items[kNumTileClasses] = {0, 0, 0}, class_tokens[kNumTileClasses] = {0, 0, 0};
  for (size_t i = 0; i < num_items; ++i) {
    if (items[i].count <= 0) continue;
    class_items[static_cast<int>(items[i].tile)] += items[i].count;
    class_tokens[static_cast<int>(items[i].tile)] += items[i].count * items[i].kv_tokens;
  }
  const int64_t m16_items = class_items[0], m16_tokens = class_tokens[0];
  const bool wide = model_uses_wide_m16(dev, m16_items * kv_heads);
  // the kernels' own choice for the kM128 class (GroupedKernel::kAuto, decode.cu)
  bool ws[kNumTileClasses] = {false, false, false};
  for (int k = 1; k < kNumTileClasses; ++k)
    ws[k] = dev.warpgroup_mma && tile::block_layout(k, s.head_dim) &&
            tile::ws_pays_off(k, class_items[k], class_tokens[k], m16_items,
                              static_cast<int>(kv_heads), dev.num_sms);
  int64_t all_items = 0;
  for (size_t i = 0; i < num_items; ++i) all_items += std::max<int64_t>(0, items[i].count);
  // the kernels' cluster pairs (decode_launch.cuh; one KV head per CTA: the head loop keeps one
  // head for launches this small)
  const bool pairs =
      dev.kv_pairs && !wide &&
      tile::use_pair_m16(m16_items * kv_heads, m16_items, m16_tokens, dev.num_sms, s.head_dim);
  const CtaModel model(dev, s, wide, all_items * kv_heads, ws[2], pairs, ws[1]);
  const int64_t nslots = std::max<int64_t>(1, dev.num_sms * slots_per_sm(dev, wide));

  thread_local std::vector<CtaRun> runs;  // (class, CTA us, items)
  runs.clear();
  // Totals of integer-valued doubles (exact below 2^53), so they do not depend on item order.
  double total_bytes = 0, total_kv_bytes = 0, sum_us = 0, max_us = 0;
  double class_flops[kNumTileClasses] = {0, 0, 0};
  bool used_class[kNumTileClasses] = {false, false, false};
  const ItemSummary* prev = nullptr;
  ItemCost c;
  for (size_t i = 0; i < num_items; ++i) {
    const ItemSummary& it = items[i];
    if (it.count <= 0) continue;
    if (prev == nullptr || it.rows != prev->rows || it.partial_rows != prev->partial_rows ||
        it.kv_tokens != prev->kv_tokens || it.tile != prev->tile || it.masked != prev->masked ||
        it.work != prev->work || it.ws_work != prev->ws_work ||
        it.private_tokens != prev->private_tokens || it.path_masks != prev->path_masks) {
      const bool on_ws = ws[2] && it.tile == TileClass::kM128;  // the ws kernel's 128-token tiles
      c = model(it.tile, it.rows * group, it.partial_rows * group, it.kv_tokens, it.masked,
                on_ws ? it.ws_work : it.work, it.private_tokens, it.path_masks);
      runs.push_back({static_cast<int>(it.tile), c.us, 0});
      used_class[static_cast<int>(it.tile)] = true;
      max_us = std::max(max_us, c.us);
      prev = &it;
    }
    // slots a CTA takes: a pair's second CTA runs beside the first (none has a masked item's)
    const int64_t per_item = pairs && it.tile == TileClass::kM16 && !it.masked ? 2 : 1;
    const int64_t w = model.weight[static_cast<int>(it.tile)] * per_item;
    runs.back().n += it.count * per_item;
    sum_us += c.us * static_cast<double>(it.count * w);
    total_bytes += c.bytes * static_cast<double>(kv_heads * it.count);
    total_kv_bytes += c.kv_bytes * static_cast<double>(kv_heads * it.count);
    class_flops[static_cast<int>(it.tile)] += c.flops * static_cast<double>(kv_heads * it.count);
  }
  const double bw = dev.hbm_read_GBps * 1e3;  // bytes per us
  // the classes share the tensor cores: the time of each class's FLOPs at its rate, summed
  double tc_us = 0;
  for (int k = 0; k < kNumTileClasses; ++k) tc_us += class_flops[k] / model.flop_rate[k];
  int launches = 0;
  for (bool u : used_class) launches += u;
  double fixed = dev.latency_terms
                     ? (launches > 0 ? dev.first_launch_us + (launches - 1) * dev.pdl_launch_us : 0)
                     : launches * dev.launch_overhead_us;
  if (num_slots > 0) {
    const double bytes =
        static_cast<double>(num_slots) * s.num_qo_heads * (s.head_dim * 4.0 + 4.0) +
        static_cast<double>(merged_queries) * s.num_qo_heads * s.head_dim * s.dtype_bytes;
    // One merge CTA per query folds its slots a batch at a time (src/kernels/merge.cuh), a cost
    // per slot in ceil(qo_heads x head_dim / 8 / 128) passes: the average merge list (the
    // longest, as the critical path, with the latency terms) sets the chain when the slot
    // latency outweighs the bytes.
    const int64_t passes = (static_cast<int64_t>(s.num_qo_heads) * s.head_dim / 8 + 127) / 128;
    const double list = dev.latency_terms ? static_cast<double>(merge.longest)
                        : merged_queries > 0
                            ? static_cast<double>(num_slots) / static_cast<double>(merged_queries)
                            : 0.0;
    const double chain = list * static_cast<double>(passes) * dev.merge_slot_us;
    fixed += (dev.latency_terms ? dev.merge_release_us + dev.merge_round_trips * dev.round_trip_us
                                : dev.merge_launch_us) +
             std::max(bytes / bw, chain);
  }
  // The makespan >= max(longest CTA, total CTA time / slots): skip the scheduling when even that
  // bound cannot beat prune_above.
  // HBM bytes: every CTA's, with its KV counted once per unique token when the shape knows them
  const double unique_kv =
      static_cast<double>(s.unique_kv_tokens) * kv_heads * s.head_dim * 2.0 * s.kv_dtype_bytes;
  const double hbm_bytes = s.unique_kv_tokens > 0
                               ? total_bytes - total_kv_bytes + std::min(total_kv_bytes, unique_kv)
                               : total_bytes;
  const double l2_us = dev.l2_read_GBps > 0 ? total_kv_bytes / (dev.l2_read_GBps * 1e3) : 0.0;
  const double global = std::max({hbm_bytes / bw, tc_us, l2_us});
  const double bound =
      std::max({max_us, sum_us * static_cast<double>(kv_heads) / nslots, global}) + fixed;
  if (bound > prune_above * (1 + 1e-9)) return bound;
  // kM128 CTAs that fill an SM (weight > 1) wait for one whole SM: every CTA scheduled over the
  // SMs' slots (kv_heads times the heap operations of the grouped path; planning time measured
  // the same). Otherwise, with kv_heads dividing the slots, the kv_heads copies of every item land
  // on identical slot groups: scheduling over slots / kv_heads groups, one copy each, is exact.
  const int64_t chunk = used_class[2] ? model.weight[2] : 1;
  const bool grouped = chunk == 1 && nslots % kv_heads == 0;
  if (!grouped)
    for (auto& run : runs) run.n *= kv_heads;
  const double makespan =
      grouped ? dispatch_makespan(&runs, nslots / kv_heads, 1, 1)
              : dispatch_makespan(&runs, dev.num_sms, slots_per_sm(dev, wide), chunk,
                                  std::max<int64_t>(1, dev.m128_ctas_per_sm));
  return std::max(makespan, global) + fixed;
}

double kv_read_floor_us(const DeviceInfo& dev, const PlanShape& s, int64_t kv_tokens) {
  // the same (exact, integer-valued) bytes and division as estimate_items_us's L2 term, which its
  // result never falls below, plus its fixed terms' least: one launch
  const double kv_bytes = static_cast<double>(kv_tokens) * (s.head_dim * 2.0 * s.kv_dtype_bytes) *
                          static_cast<double>(s.num_kv_heads);
  const double l2_us = dev.l2_read_GBps > 0 ? kv_bytes / (dev.l2_read_GBps * 1e3) : 0.0;
  return l2_us + (dev.latency_terms ? dev.first_launch_us : dev.launch_overhead_us);
}

double estimate_plan_us(const DeviceInfo& dev, const Plan& plan) {
  check_device(dev);
  std::vector<ItemSummary> items(plan.items.size());
  std::vector<int32_t> lens;
  for (size_t i = 0; i < items.size(); ++i) {
    const WorkItem& it = plan.items[i];
    items[i].rows = it.num_rows;
    items[i].kv_tokens = it.kv_tokens;
    items[i].private_tokens = it.private_tokens;
    items[i].path_masks = it.path_masks;
    items[i].tile = it.tile;
    items[i].masked = it.mask_begin >= 0;
    if (items[i].masked) {
      lens.resize(it.num_ranges);
      for (int32_t j = 0; j < it.num_ranges; ++j) lens[j] = plan.ranges[it.range_begin + j].len;
      set_masked_work(&items[i], plan.shape.group(), plan.shape.head_dim, lens.data(),
                      plan.masks.data() + it.mask_begin, lens.size(), dev.warpgroup_mma);
    }
    for (int32_t r = 0; r < it.num_rows; ++r)
      items[i].partial_rows += plan.rows[it.row_begin + r].slot != kFinalOutput;
  }
  MergeSummary merge;
  for (size_t q = 0; q + 1 < plan.merge_indptr.size(); ++q)
    merge.add_list(plan.merge_indptr[q + 1] - plan.merge_indptr[q]);
  merge.slots = plan.num_slots;
  return estimate_items_us(dev, plan.shape, items.data(), items.size(), merge);
}

}  // namespace treeattn
