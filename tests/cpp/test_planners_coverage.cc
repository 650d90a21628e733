// Planner invariants: every planner's plan covers each (query, KV token) pair exactly once
// (check_coverage) on every line of every embedded workload set and on random trees (deep chains,
// many roots, one-token nodes, queries on internal nodes, several queries per node) for GQA
// 32/8, 32/32, 16/1, 28/4 and 64/8; and the CPU executor matches the float64 oracle on sampled
// queries of the small workload lines and of random trees.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "test_planners_util.h"
#include "treeattn/plan/coverage.h"
#include "treeattn/plan/planner.h"
#include "treeattn/tree/levels.h"
#include "treeattn/tree/random_tree.h"
#include "treeattn/tree/workloads.h"

namespace treeattn {
namespace {

using testing_util::all_planners;
using testing_util::expect_plan_matches_reference;
using testing_util::gqa_shapes;

PlanOptions options_for(const LevelSpec& spec, const std::string& planner) {
  PlanOptions o;
  o.planner = planner;
  o.num_qo_heads = spec.shape.num_qo_heads > 0 ? spec.shape.num_qo_heads : 32;
  o.num_kv_heads = spec.shape.num_kv_heads > 0 ? spec.shape.num_kv_heads : 8;
  o.head_dim = spec.shape.head_dim > 0 ? spec.shape.head_dim : 128;
  return o;
}

TEST(PlannersCoverage, EveryWorkloadLineEveryPlanner) {
  for (const Workload& w : workload_set("all")) {
    const PrefixTree tree = build_workload(w, PageLayout::kShuffled, 7);
    for (const std::string& p : all_planners()) {
      const Plan plan = make_plan(tree, options_for(w.spec, p));
      EXPECT_NO_THROW(check_coverage(tree, plan)) << p << " on " << w.set << ": " << w.name;
    }
  }
}

TEST(PlannersCoverage, SmallWorkloadLinesMatchFloat64) {
  // Lines whose KV cache fits a quick CPU run; a few sampled queries each.
  int checked = 0;
  for (const Workload& w : workload_set("all")) {
    const PrefixTree tree = build_workload(w, PageLayout::kShuffled, 11);
    const PlanOptions base = options_for(w.spec, "auto");
    if (static_cast<int64_t>(tree.num_pages) * tree.page_size * base.num_kv_heads > 24000) continue;
    if (checked >= 6) break;
    const RandomInputs inp = random_inputs(tree, base.num_qo_heads, base.num_kv_heads,
                                           base.head_dim, false, 1234 + checked);
    for (const std::string& p : all_planners()) {
      PlanOptions o = base;
      o.planner = p;
      const Plan plan = make_plan(tree, o);
      expect_plan_matches_reference(tree, plan, inp, 3, 1234 + checked);
    }
    ++checked;
  }
  EXPECT_GE(checked, 4);
}

TEST(PlannersCoverage, RandomTreesAllShapes) {
  RandomTreeOptions ro;
  ro.max_nodes = 48;
  ro.max_queries = 48;
  ro.max_tokens_per_node = 300;
  for (uint64_t seed = 1; seed <= 40; ++seed) {
    ro.page_size = seed % 3 == 0 ? 1 : seed % 3 == 1 ? 16 : 32;
    const PrefixTree tree = random_tree(seed, ro);
    const auto& g = gqa_shapes()[seed % gqa_shapes().size()];
    for (const std::string& p : all_planners()) {
      PlanOptions o;
      o.planner = p;
      o.num_qo_heads = g.qo;
      o.num_kv_heads = g.kv;
      const Plan plan = make_plan(tree, o);
      EXPECT_NO_THROW(check_coverage(tree, plan)) << p << " on random tree " << seed;
    }
  }
}

TEST(PlannersCoverage, RandomTreesMatchFloat64) {
  RandomTreeOptions ro;
  ro.max_nodes = 24;
  ro.max_queries = 24;
  ro.max_tokens_per_node = 70;
  for (uint64_t seed = 100; seed < 115; ++seed) {
    const PrefixTree tree = random_tree(seed, ro);
    const auto& g = gqa_shapes()[seed % gqa_shapes().size()];
    const int32_t dim = seed % 4 == 0 ? 64 : seed % 4 == 1 ? 256 : 128;
    const RandomInputs inp = random_inputs(tree, g.qo, g.kv, dim, false, seed);
    for (const std::string& p : all_planners()) {
      PlanOptions o;
      o.planner = p;
      o.num_qo_heads = g.qo;
      o.num_kv_heads = g.kv;
      o.head_dim = dim;
      const Plan plan = make_plan(tree, o);
      ASSERT_NO_THROW(check_coverage(tree, plan)) << p << " on random tree " << seed;
      expect_plan_matches_reference(tree, plan, inp, 4, seed);
    }
  }
}

TEST(PlannersCoverage, SmallDevicesForceSplitsAndMasks) {
  // A tiny device makes every balancing planner split; long nodes make flatten mask.
  PlanOptions o;
  o.device = device_preset("a100");
  const PrefixTree tree =
      tree_from_levels(parse_levels("N=1,3,9 C=700,129,17 heads=32/8"), PageLayout::kShuffled, 3);
  const RandomInputs inp = random_inputs(tree, 32, 8, 128, false, 5);
  for (const int32_t sms : {1, 4, 200}) {
    o.device.num_sms = sms;
    for (const std::string& p : all_planners()) {
      o.planner = p;
      const Plan plan = make_plan(tree, o);
      ASSERT_NO_THROW(check_coverage(tree, plan)) << p << " with " << sms << " SMs";
      expect_plan_matches_reference(tree, plan, inp, 3, 5 + sms);
    }
  }
}

}  // namespace
}  // namespace treeattn
