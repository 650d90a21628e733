// The paths planner: every query in exactly one item, writing its final output (no partials, no
// merge); an item's ranges are the union of its queries' root paths, each node once, seen by the
// rows whose path holds it; WorkItem::private_tokens counts exactly the item's nodes that no other
// item reads; where the cost model prefers it, groups of queries share their prefix; and a group
// size fixed by PlanOptions::paths_group is the one used.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "plan/planners/planners.h"
#include "treeattn/plan/planner.h"
#include "treeattn/tree/levels.h"
#include "treeattn/tree/random_tree.h"

namespace treeattn {
namespace {

PlanOptions paths_options(int qo, int kv) {
  PlanOptions o;
  o.planner = "paths";
  o.num_qo_heads = qo;
  o.num_kv_heads = kv;
  o.head_dim = 128;
  o.device = device_preset("h100");
  return o;
}

/// Checks the paths plan of `tree` against an independent reading of the tree: per item, its
/// queries' root paths, the nodes on them and which of those no query outside the item uses.
void check_paths_plan(const PrefixTree& tree, const PlanOptions& o, const std::string& what) {
  const Plan plan = make_plan(tree, o);
  ASSERT_EQ(plan.chosen_planner, "paths") << what;
  std::vector<int32_t> seen(static_cast<size_t>(tree.num_queries()), 0);
  // queries using each node (from query_path, not the planner's index)
  std::map<int32_t, std::set<int32_t>> users;
  for (int32_t q = 0; q < tree.num_queries(); ++q)
    for (const int32_t v : query_path(tree, q)) users[v].insert(q);
  for (size_t i = 0; i < plan.items.size(); ++i) {
    const WorkItem& it = plan.items[i];
    std::set<int32_t> qs;
    for (int32_t r = 0; r < it.num_rows; ++r) {
      const PlanRow& row = plan.rows[it.row_begin + r];
      EXPECT_EQ(row.slot, kFinalOutput) << what << " item " << i;
      ++seen[row.query];
      qs.insert(row.query);
    }
    // the union of the rows' paths, each node once, and the tokens only this item reads
    std::set<int32_t> nodes;
    for (const int32_t q : qs)
      for (const int32_t v : query_path(tree, q)) nodes.insert(v);
    int64_t union_tokens = 0, private_tokens = 0;
    for (const int32_t v : nodes) {
      union_tokens += tree.nodes[v].tokens;
      bool only_here = true;
      for (const int32_t u : users[v]) only_here = only_here && qs.count(u) > 0;
      if (only_here) private_tokens += tree.nodes[v].tokens;
    }
    EXPECT_EQ(it.kv_tokens, union_tokens) << what << " item " << i;
    EXPECT_EQ(it.private_tokens, private_tokens) << what << " item " << i;
    EXPECT_TRUE(it.whole_paths) << what << " item " << i;
    std::set<int32_t> range_nodes;
    for (int32_t j = 0; j < it.num_ranges; ++j) {
      const int32_t v = plan.ranges[it.range_begin + j].node;
      if (range_nodes.insert(v).second) continue;
      // a node cut across pages is several ranges; they must follow one another
      EXPECT_EQ(plan.ranges[it.range_begin + j - 1].node, v) << what << " item " << i;
    }
    EXPECT_EQ(range_nodes, nodes) << what << " item " << i;
  }
  for (int32_t q = 0; q < tree.num_queries(); ++q) EXPECT_EQ(seen[q], 1) << what << " query " << q;
  EXPECT_EQ(plan.num_slots, 0) << what;
}

TEST(PlannersPaths, EveryQueryOnceWithItsWholePathAndItsPrivateNodes) {
  for (uint64_t seed = 1; seed <= 12; ++seed) {
    RandomTreeOptions ro;
    ro.page_size = 1 + static_cast<int32_t>(seed % 5) * 7;
    const PrefixTree tree = random_tree(seed, ro);
    for (const auto& [qo, kv] : std::vector<std::pair<int, int>>{{16, 1}, {32, 8}, {32, 32}})
      check_paths_plan(
          tree, paths_options(qo, kv),
          "seed " + std::to_string(seed) + " " + std::to_string(qo) + "/" + std::to_string(kv));
  }
}

TEST(PlannersPaths, SiblingLeavesShareTheirPrefixInOneItem) {
  // 64 short leaves under two 256-token nodes at 4 query heads per KV head: the model groups
  // queries (stop 40 measured 20.9 -> 18.0 us on the H100), so there are fewer items than
  // queries, and each item reads its shared 264 tokens once.
  const PrefixTree tree = tree_from_levels(parse_levels("N=1,2,64 C=8,256,32"));
  const PlanOptions o = paths_options(32, 8);
  check_paths_plan(tree, o, "N=1,2,64");
  const Plan plan = make_plan(tree, o);
  EXPECT_LT(plan.items.size(), static_cast<size_t>(tree.num_queries()));
  for (const WorkItem& it : plan.items) {
    EXPECT_GT(it.num_rows, 1);
    EXPECT_GE(it.mask_begin, 0);  // the leaves are seen by one row each
    EXPECT_EQ(it.kv_tokens, 8 + 256 + 32 * it.num_rows);
  }
}

TEST(PlannersPaths, OneQueryPerItemIsTheQueryPlanWithoutSplits) {
  // One query's heads already fill a kM16 CTA (16/1) on a tree whose leaves are long: the model
  // keeps one query per item, no masks, and the item is the query's whole path.
  const PrefixTree tree = tree_from_levels(parse_levels("N=1,10 C=4000,400"));
  const Plan plan = make_plan(tree, paths_options(16, 1));
  ASSERT_EQ(plan.items.size(), 10u);
  for (const WorkItem& it : plan.items) {
    EXPECT_EQ(it.num_rows, 1);
    EXPECT_EQ(it.mask_begin, -1);
    EXPECT_EQ(it.kv_tokens, 4400);
    EXPECT_EQ(it.private_tokens, 400);
  }
}

TEST(PlannersPaths, AFixedGroupSizeCutsThePreorderIntoGroupsOfIt) {
  // PlanOptions::paths_group fixes k (lowered to the head group's cap: 128 packed rows, 64 masked
  // rows): every item but one holds exactly k queries, the other the rest, the plan stays a valid
  // paths plan, and auto, when it takes the paths candidate, takes it with that k.
  const std::vector<PrefixTree> trees = {tree_from_levels(parse_levels("N=1,4,256 C=8,256,32")),
                                         tree_from_levels(parse_levels("N=1,3,7,50 C=9,33,17,5")),
                                         random_tree(5, RandomTreeOptions())};
  int auto_took_paths = 0;
  for (size_t ti = 0; ti < trees.size(); ++ti) {
    const PrefixTree& tree = trees[ti];
    const int32_t nq = tree.num_queries();
    for (const auto& [qo, kv] : std::vector<std::pair<int, int>>{{16, 1}, {32, 8}, {32, 32}}) {
      const int32_t cap = std::min(128 / (qo / kv), kMaxMaskedRows);
      for (const int32_t g : {1, 2, 3, 5, 16, 64}) {
        PlanOptions o = paths_options(qo, kv);
        o.paths_group = g;
        const std::string what = "tree " + std::to_string(ti) + " " + std::to_string(qo) + "/" +
                                 std::to_string(kv) + " group " + std::to_string(g);
        check_paths_plan(tree, o, what);
        const int32_t k = std::min(g, cap);
        const Plan plan = make_plan(tree, o);
        ASSERT_EQ(plan.items.size(), static_cast<size_t>((nq + k - 1) / k)) << what;
        // (finish() orders the items by class and length: the short group may be anywhere)
        int32_t full = 0, rest = 0;
        for (const WorkItem& it : plan.items) (it.num_rows == k ? full : rest) += it.num_rows;
        EXPECT_EQ(full, nq / k * k) << what;
        EXPECT_EQ(rest, nq % k) << what;
        EXPECT_EQ(fixed_paths_group(o), k) << what;
        o.planner = "auto";
        const Plan a = make_plan(tree, o);
        if (a.chosen_planner == "paths") {
          EXPECT_EQ(a.items.size(), plan.items.size()) << what;
          ++auto_took_paths;
        }
      }
    }
  }
  EXPECT_GT(auto_took_paths, 0);  // the auto half of the check ran
}

}  // namespace
}  // namespace treeattn
