// The cost model's critical-path latency terms (DeviceInfo::latency_terms): off, the latency
// fields change nothing; on, the first launch is paid once and each further attention kernel
// pdl_launch_us, a CTA pays its prologue's round trips, and the merge is a dependent phase set by
// its longest merge list. The presets carry the terms, and bad values are refused by name.
#include <gtest/gtest.h>

#include <limits>
#include <stdexcept>
#include <string>

#include "test_planners_util.h"
#include "treeattn/plan/cost/cost_model.h"
#include "treeattn/plan/planner.h"
#include "treeattn/tree/levels.h"

namespace treeattn {
namespace {

/// One short kM16 item (one CTA): its time is its overhead plus a little streaming.
ItemSummary one_item(TileClass tile = TileClass::kM16) {
  ItemSummary it;
  it.rows = 1;
  it.kv_tokens = 300;
  it.tile = tile;
  return it;
}

double est(const DeviceInfo& d, const ItemSummary* items, size_t n, const MergeSummary& m = {}) {
  return estimate_items_us(d, testing_util::plan_shape(16, 1, 128), items, n, m);
}

TEST(CostLatency, OffIgnoresTheLatencyFields) {
  DeviceInfo d = device_preset("h100");
  d.latency_terms = false;
  const PrefixTree tree = tree_from_levels(parse_levels("N=1,4,16 C=300,70,17 heads=16/1"));
  PlanOptions o;
  o.planner = "fasttree";
  o.num_qo_heads = 16;
  o.num_kv_heads = 1;
  o.device = d;
  const Plan plan = make_plan(tree, o);
  ASSERT_GT(plan.num_slots, 0);
  const double base = estimate_plan_us(d, plan);
  DeviceInfo e = d;
  e.first_launch_us += 7;
  e.pdl_launch_us += 7;
  e.round_trip_us += 7;
  e.cta_fixed_us += 7;
  e.merge_release_us += 7;
  e.prologue_round_trips += 3;
  e.merge_round_trips += 3;
  EXPECT_DOUBLE_EQ(estimate_plan_us(e, plan), base);
  // and on, every one of them moves the estimate
  e.latency_terms = d.latency_terms = true;
  EXPECT_GT(estimate_plan_us(e, plan), estimate_plan_us(d, plan) + 7);
}

TEST(CostLatency, LaunchesAndPrologueRoundTrips) {
  DeviceInfo d = device_preset("h100");
  ASSERT_TRUE(d.latency_terms);
  const ItemSummary it = one_item();
  const double base = est(d, &it, 1);
  DeviceInfo e = d;
  e.round_trip_us += 0.5;  // a lone CTA: its chain is the critical path
  EXPECT_NEAR(est(e, &it, 1) - base, d.prologue_round_trips * 0.5, 1e-9);
  e = d;
  e.prologue_round_trips = 2;  // e.g. a CTA record fetched in one load
  EXPECT_NEAR(base - est(e, &it, 1), 2 * d.round_trip_us, 1e-9);
  e = d;
  e.first_launch_us += 1.5;
  EXPECT_NEAR(est(e, &it, 1) - base, 1.5, 1e-9);
  e = d;
  e.pdl_launch_us += 1.5;  // one attention kernel: no PDL launch
  EXPECT_DOUBLE_EQ(est(e, &it, 1), base);
  const ItemSummary two[] = {one_item(TileClass::kM16), one_item(TileClass::kM64)};
  EXPECT_NEAR(est(e, two, 2) - est(d, two, 2), 1.5, 1e-9);  // the second kernel's
}

TEST(CostLatency, MergeIsADependentPhaseOfItsLongestList) {
  DeviceInfo d = device_preset("h100");
  d.merge_slot_us = 5;  // the list's chain, not the partials' bytes, sets the merge
  const ItemSummary it = one_item();
  MergeSummary shortest, longest;
  for (int64_t len : {3, 3, 3, 3}) shortest.add_list(len);
  for (int64_t len : {2, 2, 2, 6}) longest.add_list(len);
  ASSERT_EQ(shortest.slots, longest.slots);
  ASSERT_EQ(shortest.queries, longest.queries);
  EXPECT_EQ(longest.longest, 6);
  // 16 qo heads x 128 / 8 = 256 (head, chunk) pairs: two passes of 128 threads
  EXPECT_NEAR(est(d, &it, 1, longest) - est(d, &it, 1, shortest), (6 - 3) * 2 * 5.0, 1e-9);
  DeviceInfo e = d;
  e.merge_release_us += 2;
  EXPECT_NEAR(est(e, &it, 1, longest) - est(d, &it, 1, longest), 2, 1e-9);
  e = d;
  e.merge_round_trips += 1;
  EXPECT_NEAR(est(e, &it, 1, longest) - est(d, &it, 1, longest), d.round_trip_us, 1e-9);
  // off, the mean list sets the chain: the two merges cost the same
  d.latency_terms = false;
  EXPECT_DOUBLE_EQ(est(d, &it, 1, longest), est(d, &it, 1, shortest));
}

TEST(CostLatency, PresetsAndValidation) {
  for (const char* name : {"h100", "h200", "a100"}) {
    const DeviceInfo d = device_preset(name);
    EXPECT_TRUE(d.latency_terms) << name;
    EXPECT_GT(d.first_launch_us, 0) << name;
    EXPECT_GT(d.round_trip_us, 0) << name;
    EXPECT_EQ(d.prologue_round_trips, 4) << name;
    EXPECT_NO_THROW(validate_device(d));
  }
  // no PDL on the A100: every kernel is a full launch
  EXPECT_EQ(device_preset("a100").pdl_launch_us, device_preset("a100").first_launch_us);
  const auto refused = [](DeviceInfo d, const std::string& field) {
    try {
      validate_device(d);
      ADD_FAILURE() << field << " accepted";
    } catch (const std::invalid_argument& e) {
      EXPECT_NE(std::string(e.what()).find("device." + field), std::string::npos) << e.what();
    }
  };
  DeviceInfo d = device_preset("h100");
  d.round_trip_us = -1;
  refused(d, "round_trip_us");
  d = device_preset("h100");
  d.first_launch_us = std::numeric_limits<double>::infinity();
  refused(d, "first_launch_us");
  d = device_preset("h100");
  d.prologue_round_trips = -1;
  refused(d, "prologue_round_trips");
  d = device_preset("h100");
  d.merge_round_trips = -2;
  refused(d, "merge_round_trips");
}

}  // namespace
}  // namespace treeattn
