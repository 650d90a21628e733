// IncrementalPlanner: after random sequences of decode steps, requests joining, leaving and
// forking, the incrementally updated plan covers the updated tree exactly once and computes the
// same outputs (float64 oracle, CPU executor) as a plan rebuilt from scratch by the same planner.
#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

#include "test_planners_util.h"
#include "treeattn/plan/coverage.h"
#include "treeattn/plan/incremental.h"
#include "treeattn/plan/planner.h"
#include "treeattn/tree/levels.h"
#include "treeattn/tree/random_tree.h"

namespace treeattn {
namespace {

using testing_util::expect_plan_matches_reference;

/// Adds `extra` free pages to the tree's pool.
void add_free_pages(PrefixTree* t, int32_t extra) {
  for (int32_t i = 0; i < extra; ++i) t->free_pages.push_back(t->num_pages + i);
  t->num_pages += extra;
}

TEST(PlannersIncremental, DecodeStepsStayIncrementalAndExact) {
  for (const std::string& p : planner_names()) {
    PrefixTree tree =
        tree_from_levels(parse_levels("N=1,4,12 C=45,17,5 heads=32/8"), PageLayout::kShuffled, 2);
    add_free_pages(&tree, 60);
    PlanOptions o;
    o.planner = p;
    IncrementalPlanner inc(tree, o);
    for (int s = 0; s < 40; ++s) ASSERT_TRUE(inc.step()) << p << " step " << s;
    EXPECT_EQ(inc.full_replans(), 1);
    ASSERT_NO_THROW(check_coverage(inc.tree(), inc.plan())) << p;
    for (int32_t q = 0; q < inc.tree().num_queries(); ++q)
      EXPECT_EQ(query_context(inc.tree(), q), 45 + 17 + 5 + 40);
    const Plan fresh = make_plan(inc.tree(), o);
    const RandomInputs inp = random_inputs(inc.tree(), 32, 8, 128, false, 9);
    expect_plan_matches_reference(inc.tree(), inc.plan(), inp, 4, 9);
    expect_plan_matches_reference(inc.tree(), fresh, inp, 4, 9);
  }
}

TEST(PlannersIncremental, RandomUpdateSequencesMatchRebuild) {
  RandomTreeOptions ro;
  ro.max_nodes = 20;
  ro.max_queries = 16;
  ro.max_tokens_per_node = 40;
  int64_t fast_steps = 0;
  for (uint64_t seed = 1; seed <= 12; ++seed) {
    PrefixTree tree = random_tree(seed, ro);
    add_free_pages(&tree, 200);
    PlanOptions o;
    o.planner = planner_names()[seed % planner_names().size()];
    o.num_qo_heads = seed % 2 ? 32 : 28;
    o.num_kv_heads = seed % 2 ? 8 : 4;
    IncrementalPlanner inc(tree, o, seed % 3 == 0 ? 5 : 0);
    std::mt19937_64 rng(seed);
    for (int op = 0; op < 30; ++op) {
      const int kind = static_cast<int>(rng() % 10);
      const int32_t nq = inc.tree().num_queries();
      if (kind < 6) {
        fast_steps += inc.step();
      } else if (kind == 6) {
        const int32_t q = static_cast<int32_t>(rng() % nq);
        inc.add_request(inc.tree().query_node[q]);
      } else if (kind == 7 && nq > 1) {
        inc.remove_request(static_cast<int32_t>(rng() % nq));
      } else if (kind == 8 && nq < 40) {
        inc.fork_request(static_cast<int32_t>(rng() % nq), 2);
      } else {
        fast_steps += inc.step();
      }
      ASSERT_NO_THROW(check_coverage(inc.tree(), inc.plan())) << o.planner << " seed " << seed;
    }
    const Plan fresh = make_plan(inc.tree(), o);
    ASSERT_NO_THROW(check_coverage(inc.tree(), fresh));
    const RandomInputs inp =
        random_inputs(inc.tree(), o.num_qo_heads, o.num_kv_heads, o.head_dim, false, seed);
    expect_plan_matches_reference(inc.tree(), inc.plan(), inp, 5, seed);
    expect_plan_matches_reference(inc.tree(), fresh, inp, 5, seed);
  }
  EXPECT_GT(fast_steps, 20);  // the fast path really ran
}

TEST(PlannersIncremental, OutOfPagesLeavesStateUnchanged) {
  PrefixTree tree = tree_from_levels(parse_levels("N=1,2 C=16,16 heads=32/8"));
  PlanOptions o;
  o.planner = "pat";
  IncrementalPlanner inc(tree, o);  // every leaf ends on a page boundary, the pool is empty
  const Plan before = inc.plan();
  EXPECT_THROW(inc.step(), std::invalid_argument);
  EXPECT_EQ(inc.tree().nodes[1].tokens, 16);
  EXPECT_EQ(inc.plan().ranges.size(), before.ranges.size());
  for (size_t r = 0; r < before.ranges.size(); ++r)
    EXPECT_EQ(inc.plan().ranges[r].len, before.ranges[r].len);
}

}  // namespace
}  // namespace treeattn
