// The cost model's warp-specialized terms and its L2 bound: tile_latency_ws_m128_us and
// mma_efficiency_ws_m128 apply exactly where the kernels run the kM128 class on the
// warp-specialized kernel (tile::ws_pays_off on a warpgroup_mma device, head_dim <= 128) and
// nowhere else, tile_latency_ws_m64_us likewise for the kM64 class; l2_read_GBps bounds a plan by
// every KV byte its CTAs read, re-reads included; zeros give the model without them, and bad
// values are refused by name; kv_read_floor_us (that bound plus one launch) stays below every
// plan's estimate.
#include <gtest/gtest.h>

#include <array>
#include <stdexcept>
#include <string>
#include <vector>

#include "test_planners_util.h"
#include "treeattn/plan/cost/cost_model.h"
#include "treeattn/plan/planner.h"
#include "treeattn/plan/tile_policy.h"
#include "treeattn/tree/random_tree.h"

namespace treeattn {
namespace {

PlanShape shape(int head_dim = 128) { return testing_util::plan_shape(32, 8, head_dim); }

/// `count` kM128 items of 128 packed rows (32 queries x 4 heads) over `kv` tokens.
ItemSummary m128_items(int64_t count, int32_t kv) {
  return testing_util::item_summary(TileClass::kM128, 32, kv, count);
}

/// The h100 preset with the new terms off, so each test turns on the one it checks.
DeviceInfo base_device() {
  DeviceInfo d = device_preset("h100");
  d.tile_latency_ws_m128_us = 0;
  d.tile_latency_ws_m64_us = 0;
  d.mma_efficiency_ws_m128 = 0;
  d.l2_read_GBps = 0;
  return d;
}

/// No wgmma kernels (an A100-like device) or head_dim 256: the other kernel runs `it`, so a ws
/// term set in `d` and not in `off` changes nothing.
void expect_other_kernel(const DeviceInfo& d, const DeviceInfo& off, const PlanShape& s,
                         const ItemSummary& it) {
  DeviceInfo no_wgmma = d, no_wgmma_off = off;
  no_wgmma.warpgroup_mma = no_wgmma_off.warpgroup_mma = false;
  EXPECT_DOUBLE_EQ(estimate_items_us(no_wgmma, s, &it, 1, {}),
                   estimate_items_us(no_wgmma_off, s, &it, 1, {}));
  EXPECT_DOUBLE_EQ(estimate_items_us(d, shape(256), &it, 1, {}),
                   estimate_items_us(off, shape(256), &it, 1, {}));
}

TEST(CostWsL2, WsTileLatencyOnlyWhereTheKernelsRunWs) {
  DeviceInfo d = base_device();
  d.tile_latency_m128_us = 20.0;  // latency-bound CTAs: far above their bytes and FLOPs
  const PlanShape s = shape();
  const ItemSummary ws = m128_items(16, 1024);  // 1024 tokens an item: ws pays off
  ASSERT_TRUE(
      tile::ws_pays_off(2, ws.count, ws.count * ws.kv_tokens, 0, s.num_kv_heads, d.num_sms));
  const double legacy_us = estimate_items_us(d, s, &ws, 1, {});
  d.tile_latency_ws_m128_us = 2.0;
  const double ws_us = estimate_items_us(d, s, &ws, 1, {});
  // 16 tiles of 64 tokens at 2 us instead of 20 us: 288 us less a CTA, and one wave of CTAs
  EXPECT_NEAR(legacy_us - ws_us, 16 * 18.0, 1e-6 * legacy_us);

  // Items below the kernels' 256 tokens an item keep the other kernel's latency.
  const ItemSummary short_items = m128_items(16, 192);
  ASSERT_FALSE(tile::ws_pays_off(2, short_items.count, short_items.count * 192, 0, s.num_kv_heads,
                                 d.num_sms));
  DeviceInfo off = d;
  off.tile_latency_ws_m128_us = 0;
  EXPECT_DOUBLE_EQ(estimate_items_us(d, s, &short_items, 1, {}),
                   estimate_items_us(off, s, &short_items, 1, {}));
  expect_other_kernel(d, off, s, ws);
  // A kM64 item is never a ws kM128 CTA.
  ItemSummary m64 = ws;
  m64.rows = 16;
  m64.tile = TileClass::kM64;
  EXPECT_DOUBLE_EQ(estimate_items_us(d, s, &m64, 1, {}), estimate_items_us(off, s, &m64, 1, {}));
}

TEST(CostWsL2, WsM64TileLatencyOnlyWhereTheKernelsRunWs) {
  DeviceInfo d = base_device();
  d.tile_latency_us = 20.0;  // latency-bound CTAs: far above their bytes and FLOPs
  const PlanShape s = shape();
  // 16 kM64 items of 16 queries (64 packed rows) x 8 KV heads = 128 CTAs, at most one per SM, no
  // kM16 class: the kernels run them on the ws kernel
  const ItemSummary ws = testing_util::item_summary(TileClass::kM64, 16, 1024, 16);
  ASSERT_TRUE(
      tile::ws_pays_off(1, ws.count, ws.count * ws.kv_tokens, 0, s.num_kv_heads, d.num_sms));
  DeviceInfo off = d;
  const double legacy_us = estimate_items_us(d, s, &ws, 1, {});
  d.tile_latency_ws_m64_us = 2.0;
  // 16 tiles of 64 tokens at 2 us instead of 20 us
  EXPECT_NEAR(legacy_us - estimate_items_us(d, s, &ws, 1, {}), 16 * 18.0, 1e-6 * legacy_us);
  // More CTAs than SMs, a deep kM16 class beside them, no wgmma, or head_dim 256: the other
  // kernel, the other floor
  const ItemSummary many = testing_util::item_summary(TileClass::kM64, 16, 1024, 17);
  ASSERT_FALSE(tile::ws_pays_off(1, many.count, many.count * 1024, 0, s.num_kv_heads, d.num_sms));
  EXPECT_DOUBLE_EQ(estimate_items_us(d, s, &many, 1, {}), estimate_items_us(off, s, &many, 1, {}));
  const ItemSummary with_m16[2] = {ws, testing_util::item_summary(TileClass::kM16, 1, 64, 4)};
  ASSERT_FALSE(tile::ws_pays_off(1, ws.count, ws.count * 1024, 4, s.num_kv_heads, d.num_sms));
  EXPECT_DOUBLE_EQ(estimate_items_us(d, s, with_m16, 2, {}),
                   estimate_items_us(off, s, with_m16, 2, {}));
  expect_other_kernel(d, off, s, ws);
}

TEST(CostWsL2, WsKM128TilesGiveAMaskedItemsFractions) {
  // A masked kM128 item's fractions on the ws kernel's 128-token tiles (ws_work) apply exactly
  // where the plan's kM128 class runs there; elsewhere the other kernel's 64-token slices.
  DeviceInfo d = base_device();
  d.mask_penalty = 1.0;
  const PlanShape s = shape();
  const auto masked = [](int32_t kv, double tested, double ws_tested) {
    ItemSummary it = m128_items(16, kv);
    it.masked = true;
    it.work.tested_fraction = tested;
    it.ws_work.tested_fraction = ws_tested;
    return it;
  };
  ASSERT_TRUE(tile::ws_pays_off(2, 16, 16 * 1024, 0, s.num_kv_heads, d.num_sms));
  const ItemSummary on_ws = masked(1024, 1.0, 0.5), same = masked(1024, 0.5, 0.5);
  EXPECT_DOUBLE_EQ(estimate_items_us(d, s, &on_ws, 1, {}), estimate_items_us(d, s, &same, 1, {}));
  EXPECT_LT(estimate_items_us(d, s, &on_ws, 1, {}),
            estimate_items_us(d, s, std::array{masked(1024, 1.0, 1.0)}.data(), 1, {}));
  ASSERT_FALSE(tile::ws_pays_off(2, 16, 16 * 192, 0, s.num_kv_heads, d.num_sms));
  const ItemSummary off_ws = masked(192, 1.0, 0.5), other = masked(192, 1.0, 1.0);
  EXPECT_DOUBLE_EQ(estimate_items_us(d, s, &off_ws, 1, {}), estimate_items_us(d, s, &other, 1, {}));
}

TEST(CostWsL2, WsEfficiencySetsTheFlopTermAndTheTensorBound) {
  DeviceInfo d = base_device();
  d.tile_latency_m128_us = 0;
  d.mma_efficiency = 0.25;
  const PlanShape s = shape();
  // Many long compute-heavy CTAs: the estimate is the tensor-core term (CTAs and plan bound).
  const ItemSummary ws = m128_items(64 * 132, 4096);
  const double at_quarter = estimate_items_us(d, s, &ws, 1, {});
  d.mma_efficiency_ws_m128 = 0.5;
  const double at_half = estimate_items_us(d, s, &ws, 1, {});
  // twice the rate, about half the time (the fixed terms stay)
  EXPECT_LT(at_half, 0.55 * at_quarter);
  EXPECT_GT(at_half, 0.45 * at_quarter);
  // The plan bound sums the classes' tensor time: ws kM128 FLOPs at their rate, the rest at
  // mma_efficiency. A kM64 item beside them costs the same as without the ws term.
  ItemSummary mixed[2] = {ws, m128_items(1, 4096)};
  mixed[1].tile = TileClass::kM64;
  mixed[1].rows = 16;
  const double with_m64 = estimate_items_us(d, s, mixed, 2, {});
  EXPECT_GT(with_m64, at_half);
}

TEST(CostWsL2, L2BoundCountsEveryKvByteRead) {
  DeviceInfo d = base_device();
  const PlanShape s = [] {
    PlanShape p = shape();
    p.unique_kv_tokens = 4096;  // every item reads the same 4096 tokens: HBM sees them once
    return p;
  }();
  ItemSummary it;
  it.rows = 16;  // 64 packed rows
  it.kv_tokens = 4096;
  it.tile = TileClass::kM64;
  it.count = 2048;
  const double no_l2 = estimate_items_us(d, s, &it, 1, {});
  const double kv_bytes = 2048.0 * s.num_kv_heads * 4096 * s.head_dim * 2 * 2;
  d.l2_read_GBps = 1000.0;  // a low L2 rate so the bound dominates
  const double l2 = estimate_items_us(d, s, &it, 1, {});
  EXPECT_GE(l2, kv_bytes / 1e6);  // bytes over 1000 GB/s = bytes / 1e6 us
  EXPECT_GT(l2, no_l2);
  d.l2_read_GBps = 1e9;  // far above anything: no effect
  EXPECT_DOUBLE_EQ(estimate_items_us(d, s, &it, 1, {}), no_l2);
}

TEST(CostWsL2, KvReadFloorIsBelowEveryPlansEstimate) {
  // kv_read_floor_us (the L2 term of a plan's KV tokens plus one launch) never exceeds the
  // estimate of a plan reading those tokens: every planner on random trees, the three presets
  // (latency terms on, h200's rates, a100's no-L2 model) and the model without latency terms, and
  // it is reached where the L2 term dominates.
  std::vector<DeviceInfo> devs = {device_preset("h100"), device_preset("h200"),
                                  device_preset("a100"), base_device()};
  devs.back().l2_read_GBps = 500.0;  // no latency terms, a low L2 rate
  int64_t checked = 0;
  for (uint64_t seed = 1; seed <= 6; ++seed) {
    const PrefixTree tree = random_tree(seed, RandomTreeOptions{});
    for (const DeviceInfo& d : devs)
      for (const std::string& p : planner_names()) {
        const Plan plan = make_plan(tree, make_plan_options(p, 32, 8, 128, d));
        int64_t tokens = 0;
        for (const WorkItem& it : plan.items) tokens += it.kv_tokens;
        const double floor = kv_read_floor_us(d, plan.shape, tokens);
        EXPECT_LE(floor, estimate_plan_us(d, plan)) << p << " seed " << seed;
        EXPECT_GT(floor, 0.0);
        ++checked;
      }
  }
  EXPECT_EQ(checked, 6 * 4 * static_cast<int64_t>(planner_names().size()));
  // one item read 2048 times at a low L2 rate: the estimate is the floor's L2 term and launch
  DeviceInfo d = base_device();
  d.l2_read_GBps = 1.0;
  const ItemSummary it = testing_util::item_summary(TileClass::kM64, 16, 4096, 2048);
  EXPECT_DOUBLE_EQ(kv_read_floor_us(d, shape(), 2048 * 4096),
                   estimate_items_us(d, shape(), &it, 1, {}));
}

TEST(CostWsL2, PresetsAndValidation) {
  const DeviceInfo h100 = device_preset("h100");
  EXPECT_GT(h100.tile_latency_ws_m128_us, 0);
  EXPECT_GT(h100.mma_efficiency_ws_m128, 0);
  EXPECT_GT(h100.l2_read_GBps, h100.hbm_read_GBps);
  const DeviceInfo a100 = device_preset("a100");
  EXPECT_FALSE(a100.warpgroup_mma);  // no ws kernel there: the ws terms never apply
  EXPECT_GT(h100.tile_latency_ws_m64_us, 0);
  for (const char* field : {"tile_latency_ws_m128_us", "tile_latency_ws_m64_us",
                            "mma_efficiency_ws_m128", "l2_read_GBps"}) {
    DeviceInfo d = h100;
    const std::string f = field;
    (f == "tile_latency_ws_m128_us"  ? d.tile_latency_ws_m128_us
     : f == "tile_latency_ws_m64_us" ? d.tile_latency_ws_m64_us
     : f == "mma_efficiency_ws_m128" ? d.mma_efficiency_ws_m128
                                     : d.l2_read_GBps) = -1.0;
    try {
      validate_device(d);
      ADD_FAILURE() << field << ": a negative value was accepted";
    } catch (const std::invalid_argument& e) {
      EXPECT_NE(std::string(e.what()).find(std::string("device.") + field), std::string::npos)
          << e.what();
    }
  }
}

}  // namespace
}  // namespace treeattn
