// The cost model's mask term: the cost-only PlanBuilder sees exactly which items end up masked
// (its estimate equals estimate_plan_us of the full plan for every planner, with a mask penalty
// in force), and a masked item costs (1 + mask_penalty x the share of its pairs that test the
// mask) x the same item unmasked. Also the occupancy term: a kM128 CTA takes all of an SM's slots
// when one is resident per SM. And masked_work (which steps over a range's whole slices at once)
// against a walk of the item's tokens one by one.
#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <string>
#include <vector>

#include "plan/planners/planners.h"
#include "treeattn/plan/cost/cost_model.h"
#include "treeattn/plan/planner.h"
#include "treeattn/plan/tile_policy.h"
#include "treeattn/tree/levels.h"
#include "treeattn/tree/random_tree.h"

namespace treeattn {
namespace {

/// Cost-only estimate of planner `entry` on `tree` (what auto scores).
double cost_only_us(const planners::PlannerEntry& entry, const PrefixTree& tree,
                    const TreeIndex& index, const PlanOptions& o) {
  planners::PlanBuilder b(tree, o, entry.name, planners::PlanBuilder::Mode::kCostOnly);
  entry.fn(tree, index, o, &b);
  return b.cost_us(o.device);
}

TEST(PlannersMaskCost, CostOnlyBuilderSeesMasks) {
  std::vector<PrefixTree> trees;
  RandomTreeOptions ro;
  for (uint64_t seed = 1; seed <= 8; ++seed) trees.push_back(random_tree(seed, ro));
  // Lines where flatten's blocks straddle nodes (masked) and where they do not.
  for (const char* levels : {"N=1,8,64 C=600,90,30", "N=32 C=300", "N=1,4,32 C=8,300,17",
                             "N=1,2,4,8,16,32 C=16,16,16,16,16,16"})
    trees.push_back(tree_from_levels(parse_levels(levels), PageLayout::kShuffled, 3));
  int64_t masked_plans = 0;
  for (const PrefixTree& tree : trees) {
    const TreeIndex index = build_index(tree);
    for (const auto& [qo, kv] : std::vector<std::pair<int, int>>{{32, 8}, {32, 32}, {64, 8}}) {
      PlanOptions o;
      o.num_qo_heads = qo;
      o.num_kv_heads = kv;
      o.device = device_preset("h100");
      o.device.mask_penalty = 0.75;  // penalties in force whatever the preset's fit
      o.device.mask_penalty_m16 = 0.5;
      o.device.path_mask_penalty = 0.6;
      o.device.path_mask_penalty_m16 = 0.4;
      for (const planners::PlannerEntry& e : planners::planner_table()) {
        if (e.fn == nullptr) continue;  // auto: scored through the others' cost-only builders
        o.planner = e.name;
        const Plan plan = planners::run_planner(e, tree, index, o);
        bool masked = false;
        for (const WorkItem& it : plan.items) masked = masked || it.mask_begin >= 0;
        masked_plans += masked;
        const double full = estimate_plan_us(o.device, plan);
        EXPECT_NEAR(cost_only_us(e, tree, index, o), full, 1e-9 * full)
            << e.name << " qo/kv " << qo << "/" << kv << " masked " << masked;
        DeviceInfo d = o.device;
        d.mask_penalty = d.mask_penalty_m16 = d.path_mask_penalty = d.path_mask_penalty_m16 = 0;
        EXPECT_LE(estimate_plan_us(d, plan), full) << e.name;
        if (!masked) EXPECT_DOUBLE_EQ(estimate_plan_us(d, plan), full) << e.name;
        if (masked) {  // the penalty is charged: a masked CTA x21 outlasts the unpenalised plan
          DeviceInfo big = d;
          big.mask_penalty = big.mask_penalty_m16 = big.path_mask_penalty =
              big.path_mask_penalty_m16 = 20;
          EXPECT_GT(estimate_plan_us(big, plan), estimate_plan_us(d, plan)) << e.name;
        }
      }
    }
  }
  EXPECT_GT(masked_plans, 3);  // the masked path really ran
}

/// 32 query heads over 8 KV heads of head_dim 128.
PlanShape shape_32_8() {
  PlanShape s;
  s.num_qo_heads = 32;
  s.num_kv_heads = 8;
  s.head_dim = 128;
  return s;
}

TEST(PlannersMaskCost, MaskedItemCostsPenaltyTimesUnmasked) {
  DeviceInfo d = device_preset("h100");
  d.latency_terms = false;  // the plan's fixed terms: one launch_overhead_us
  d.kv_pairs = false;       // a lone kM16 item would run as a cluster pair: not here
  d.mask_penalty = 0.5;
  const PlanShape s = shape_32_8();
  d.path_mask_penalty = 0.2;
  ItemSummary it;
  it.rows = 8;
  it.kv_tokens = 4096;
  it.tile = TileClass::kM64;
  it.count = 1;
  // One item (its CTAs all run in parallel): the plan time is one CTA plus the launch.
  const double plain = estimate_items_us(d, s, &it, 1, {});
  it.masked = true;
  const double masked = estimate_items_us(d, s, &it, 1, {});
  EXPECT_NEAR(masked - d.launch_overhead_us, 1.5 * (plain - d.launch_overhead_us), 1e-9 * plain);
  // an item over root paths (the paths planners'): path_mask_penalty
  it.path_masks = true;
  const double path_masked = estimate_items_us(d, s, &it, 1, {});
  EXPECT_NEAR(path_masked - d.launch_overhead_us, 1.2 * (plain - d.launch_overhead_us),
              1e-9 * plain);
  // the penalty scales with the share of the pairs that test the mask (the rest run unmasked)
  it.work.tested_fraction = 0.25;
  EXPECT_NEAR(estimate_items_us(d, s, &it, 1, {}) - d.launch_overhead_us,
              1.05 * (plain - d.launch_overhead_us), 1e-9 * plain);
  it.path_masks = false;
  EXPECT_NEAR(estimate_items_us(d, s, &it, 1, {}) - d.launch_overhead_us,
              1.125 * (plain - d.launch_overhead_us), 1e-9 * plain);
  it.work.tested_fraction = 1.0;
  it.tile = TileClass::kM16;  // kM16 items: mask_penalty_m16
  d.mask_penalty_m16 = 0.25;
  const double m16 = estimate_items_us(d, s, &it, 1, {});
  it.masked = false;
  const double m16_plain = estimate_items_us(d, s, &it, 1, {});
  EXPECT_NEAR(m16 - d.launch_overhead_us, 1.25 * (m16_plain - d.launch_overhead_us), 1e-9 * m16);
  d.mask_penalty = d.mask_penalty_m16 = 0;
  it.masked = true;
  EXPECT_DOUBLE_EQ(estimate_items_us(d, s, &it, 1, {}), m16_plain);
}

TEST(PlannersMaskCost, KM16PairsHalveAnUnmaskedItemsTiles) {
  // A lone latency-bound kM16 item of 64 tiles at 8 KV heads: 8 CTAs, so the kernels pair them
  // (tile::use_pair_m16); its CTA time is then 32 tiles' plus the exchange. A masked item is not
  // split: only the exchange is added. head_dim 256 never pairs.
  DeviceInfo d = device_preset("h100");
  d.latency_terms = false;
  d.mask_penalty_m16 = 0;
  d.pair_exchange_us = 0.5;
  PlanShape s = shape_32_8();
  ItemSummary it;
  it.rows = 1;
  it.kv_tokens = 64 * 64;
  it.tile = TileClass::kM16;
  const auto cta_us = [&](const DeviceInfo& dev) {
    return estimate_items_us(dev, s, &it, 1, {}) - dev.launch_overhead_us;
  };
  DeviceInfo off = d;
  off.kv_pairs = false;
  const double one = cta_us(off) - d.item_overhead_us;
  EXPECT_NEAR(one, 64 * d.tile_latency_us, 1e-9 * one);  // latency-bound
  EXPECT_NEAR(cta_us(d), d.item_overhead_us + 32 * d.tile_latency_us + 0.5, 1e-9 * one);
  it.masked = true;
  EXPECT_NEAR(cta_us(d), cta_us(off) + 0.5, 1e-9 * one);
  it.masked = false;
  s.head_dim = 256;
  EXPECT_DOUBLE_EQ(cta_us(d), cta_us(off));
}

TEST(PlannersMaskCost, KM128CtaTakesAllOfAnSmsSlots) {
  // Latency-bound kM128 CTAs that fill every slot once with two per SM take two waves when one
  // kM128 CTA holds an SM (m128_ctas_per_sm = 1, the kernels' occupancy).
  DeviceInfo d = device_preset("h100");
  d.latency_terms = false;       // the plan's fixed terms: one launch_overhead_us, item_overhead_us
  d.tile_latency_m128_us = 5.0;  // 10 tiles: 50 us a CTA, far above its bytes and FLOPs
  // the kernels would run these on the ws kernel: without its terms, the other kernel's apply
  d.tile_latency_ws_m128_us = d.mma_efficiency_ws_m128 = 0;
  PlanShape s;
  s.num_qo_heads = 32;
  s.num_kv_heads = 8;
  s.head_dim = 128;
  ItemSummary it;
  it.rows = 32;  // 128 packed rows
  it.kv_tokens = 640;
  it.tile = TileClass::kM128;
  it.count = d.num_sms * d.ctas_per_sm / s.num_kv_heads;  // one CTA per slot
  d.m128_ctas_per_sm = 0;                                 // as many as the other classes
  const double two = estimate_items_us(d, s, &it, 1, {}) - d.launch_overhead_us;
  d.m128_ctas_per_sm = 1;
  const double one = estimate_items_us(d, s, &it, 1, {}) - d.launch_overhead_us;
  EXPECT_NEAR(one / two, 2.0, 1e-9);
  EXPECT_NEAR(two, d.item_overhead_us + 50.0, 1e-6);
  // With fewer CTAs than SMs each CTA has an SM to itself either way: same shares, same time
  // (a bandwidth-bound item: no latency floor).
  d.tile_latency_m128_us = 0;
  it.count = 1;
  it.kv_tokens = 1 << 16;
  d.m128_ctas_per_sm = 0;
  const double alone_before = estimate_items_us(d, s, &it, 1, {});
  d.m128_ctas_per_sm = 1;
  EXPECT_DOUBLE_EQ(estimate_items_us(d, s, &it, 1, {}), alone_before);
  EXPECT_EQ(device_preset("h100").m128_ctas_per_sm, 1);
  d.m128_ctas_per_sm = -1;
  EXPECT_THROW(validate_device(d), std::invalid_argument);
}

/// masked_work by walking the item's tokens one at a time (`ws`: the slices of the warp-specialized
/// kernel's tiles): token t is in slice t / slice; a slab
/// runs a slice when a mask word of its tokens has one of the slab's rows, and tests the mask
/// unless every word has all of them and the slice is whole (the item does not end inside it).
MaskedWork token_walk(TileClass tile, int group, int head_dim, int rows,
                      const std::vector<int32_t>& lens, const std::vector<uint64_t>& masks,
                      bool wgmma, bool ws) {
  const int cfg = tile == TileClass::kM16 ? tile::kConfigDeep : static_cast<int>(tile);
  // the ws kernel's tiles: 64 tokens (kM64), 128 (kM128), for its 64-row consumers
  const int64_t slice = ws && wgmma && cfg != tile::kConfigDeep && head_dim <= 128
                            ? (cfg == 2 ? 128 : 64)
                            : tile::warp_tokens(cfg, head_dim);
  const int per_slab = tile::mma_slab_rows(cfg, head_dim, wgmma);
  const int packed = rows * group;
  const int slabs = std::clamp((packed + per_slab - 1) / per_slab, 1, 128 / per_slab);
  std::vector<uint64_t> any, all;  // per slice
  int64_t t = 0;
  for (size_t j = 0; j < lens.size(); ++j)
    for (int32_t k = 0; k < lens[j]; ++k, ++t) {
      if (static_cast<size_t>(t / slice) >= any.size()) {
        any.push_back(0);
        all.push_back(~0ull);
      }
      any[t / slice] |= masks[j];
      all[t / slice] &= masks[j];
    }
  MaskedWork w;
  if (any.empty()) return w;
  if (t % slice != 0) all.back() = 0;  // tokens past the item: zero words
  int64_t active = 0, tested = 0;
  for (size_t i = 0; i < any.size(); ++i)
    for (int s = 0; s < slabs; ++s) {
      const uint64_t slab = tile::slab_row_bits(per_slab * s, per_slab, packed, group);
      if ((any[i] & slab) == 0) continue;
      ++active;
      tested += (all[i] & slab) != slab;
    }
  w.mma_fraction = static_cast<double>(active) / static_cast<double>(any.size() * slabs);
  if (active > 0) w.tested_fraction = static_cast<double>(tested) / static_cast<double>(active);
  return w;
}

TEST(PlannersMaskCost, MaskedWorkMatchesATokenWalk) {
  std::mt19937_64 rng(7);
  const TileClass tiles[] = {TileClass::kM16, TileClass::kM64, TileClass::kM128};
  int full_slices = 0;  // trials with a slice some slab runs unmasked
  for (int trial = 0; trial < 4000; ++trial) {
    const TileClass tile = tiles[rng() % 3];
    const int head_dim = 64 << (rng() % 3);
    const int group = 1 << (rng() % 5);  // 1 .. 16 packed rows a query
    const int max_rows = std::max(1, std::min(64, 128 / group));
    const int rows = 1 + static_cast<int>(rng() % max_rows);
    const bool wgmma = rng() % 2;
    std::vector<int32_t> lens(rng() % 9);
    std::vector<uint64_t> masks(lens.size());
    for (size_t j = 0; j < lens.size(); ++j) {
      // short ranges (inside a slice), ranges of whole slices, long ones; some empty
      const int kind = static_cast<int>(rng() % 4);
      lens[j] = kind == 0   ? static_cast<int32_t>(rng() % 5)
                : kind == 1 ? 16 * static_cast<int32_t>(1 + rng() % 8)
                            : static_cast<int32_t>(rng() % 700);
      const uint64_t rows_mask = rows >= 64 ? ~0ull : (1ull << rows) - 1;
      masks[j] = rng() % 5 == 0 ? rows_mask : rng() & rows_mask;
    }
    const bool ws = rng() % 2;
    const MaskedWork fast =
        masked_work(tile, group, head_dim, rows, lens.data(), masks.data(), lens.size(), wgmma, ws);
    const MaskedWork walk = token_walk(tile, group, head_dim, rows, lens, masks, wgmma, ws);
    ASSERT_EQ(fast.mma_fraction, walk.mma_fraction) << "trial " << trial;
    ASSERT_EQ(fast.tested_fraction, walk.tested_fraction) << "trial " << trial;
    full_slices += fast.tested_fraction < 1.0;
  }
  EXPECT_GT(full_slices, 400);  // the walk's second half is exercised
}

}  // namespace
}  // namespace treeattn
