// The paths planner: every query in exactly one item, writing its final output (no partials, no
// merge); an item's ranges are the union of its queries' root paths, each node once, seen by the
// rows whose path holds it; WorkItem::private_tokens counts exactly the item's nodes that no other
// item reads; where the cost model prefers it, groups of queries share their prefix; and a group
// size fixed by PlanOptions::paths_group is the one used, the groups cut plain or aligned to the
// subtrees. The paths-split planner: the same groups, each cut into near-equal KV pieces over the
// rows that see some of each piece, each token of a group in one piece, the rows of split queries
// merged. Both searches under auto's bound (PlannerSearch) choose as without it below the bound,
// and a search's choice, replayed, builds the plan the search builds.
#include <gtest/gtest.h>

#include <algorithm>
#include <functional>
#include <limits>
#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "plan/planners/planners.h"
#include "treeattn/plan/coverage.h"
#include "treeattn/plan/planner.h"
#include "treeattn/tree/levels.h"
#include "treeattn/tree/random_tree.h"
#include "treeattn/tree/workloads.h"

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
    EXPECT_TRUE(it.path_masks) << what << " item " << i;
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

/// The groups of a fixed k, read from the tree's parent links (not the planner's index): the
/// queries in preorder, children and queries in index order, a new group where the open one is
/// full; when `aligned`, also before a subtree of more than k queries where the open group holds
/// a query whose node is not on the subtree's root path.
std::multiset<std::set<int32_t>> reference_groups(const PrefixTree& tree, int32_t k, bool aligned) {
  const int32_t n = static_cast<int32_t>(tree.nodes.size());
  std::vector<std::vector<int32_t>> kids(n), own(n);
  std::vector<int32_t> roots;
  for (int32_t v = 0; v < n; ++v)
    (tree.nodes[v].parent == kNoParent ? roots : kids[tree.nodes[v].parent]).push_back(v);
  for (int32_t q = 0; q < tree.num_queries(); ++q) own[tree.query_node[q]].push_back(q);
  std::vector<int64_t> below(n, 0);
  std::function<int64_t(int32_t)> count = [&](int32_t v) {
    below[v] = static_cast<int64_t>(own[v].size());
    for (const int32_t c : kids[v]) below[v] += count(c);
    return below[v];
  };
  for (const int32_t r : roots) count(r);
  const auto on_path = [&](int32_t u, int32_t v) {  // u is v or an ancestor of v
    for (; v != kNoParent; v = tree.nodes[v].parent)
      if (v == u) return true;
    return false;
  };
  std::vector<std::vector<int32_t>> groups;
  std::function<void(int32_t)> place = [&](int32_t v) {
    if (below[v] == 0) return;
    if (aligned && !groups.empty() && below[v] > k &&
        std::any_of(groups.back().begin(), groups.back().end(),
                    [&](int32_t q) { return !on_path(tree.query_node[q], v); }))
      groups.emplace_back();
    for (const int32_t q : own[v]) {
      if (groups.empty() || static_cast<int32_t>(groups.back().size()) == k) groups.emplace_back();
      groups.back().push_back(q);
    }
    for (const int32_t c : kids[v]) place(c);
  };
  for (const int32_t r : roots) place(r);
  std::multiset<std::set<int32_t>> out;
  for (const auto& g : groups)
    if (!g.empty()) out.insert(std::set<int32_t>(g.begin(), g.end()));
  return out;
}

/// The plan's items as sets of queries.
std::multiset<std::set<int32_t>> plan_groups(const Plan& plan) {
  std::multiset<std::set<int32_t>> groups;
  for (const WorkItem& it : plan.items) {
    std::set<int32_t> qs;
    for (int32_t r = 0; r < it.num_rows; ++r) qs.insert(plan.rows[it.row_begin + r].query);
    groups.insert(qs);
  }
  return groups;
}

TEST(PlannersPaths, AFixedGroupSizeCutsThePreorderIntoGroupsOfIt) {
  // PlanOptions::paths_group fixes k (lowered to the head group's cap: 128 packed rows, 64 masked
  // rows): the items are one of the reference's two cuts of the preorder into groups of at most
  // k (plain: k consecutive queries; aligned: also cut before a large subtree), the plan stays a
  // valid paths plan, and auto, when it takes the paths candidate, takes it with that k.
  std::vector<PrefixTree> trees = {tree_from_levels(parse_levels("N=1,4,256 C=8,256,32")),
                                   tree_from_levels(parse_levels("N=1,3,7,50 C=9,33,17,5")),
                                   tree_from_levels(parse_levels("N=1,8,480 C=16,512,8"))};
  for (const uint64_t seed : {5, 11, 17, 23, 29}) trees.push_back(random_tree(seed, {}));
  // dead node slots: queries removed, their nodes pruned
  trees.push_back(random_tree(31, {}));
  for (int i = 0; i < 4 && trees.back().num_queries() > 2; ++i)
    trees.back().remove_query(trees.back().num_queries() / 2);
  int auto_took_paths = 0, took_aligned = 0, chosen_k_checked = 0;
  for (size_t ti = 0; ti < trees.size(); ++ti) {
    const PrefixTree& tree = trees[ti];
    for (const auto& [qo, kv] : std::vector<std::pair<int, int>>{{16, 1}, {32, 8}, {32, 32}}) {
      const int32_t cap = std::min(128 / (qo / kv), kMaxMaskedRows);
      {  // the model's k: one of the two cuts of 1, 2, 4, ... up to the cap
        const auto chosen = plan_groups(make_plan(tree, paths_options(qo, kv)));
        bool found = false;
        for (int32_t k = 1; !found; k = std::min(cap, 2 * k)) {
          found = chosen == reference_groups(tree, k, false) ||
                  chosen == reference_groups(tree, k, true);
          if (k == cap) break;
        }
        EXPECT_TRUE(found) << "tree " << ti << " " << qo << "/" << kv << " (model's k)";
        ++chosen_k_checked;
      }
      for (const int32_t g : {1, 2, 3, 5, 16, 32, 64}) {
        PlanOptions o = paths_options(qo, kv);
        o.paths_group = g;
        const std::string what = "tree " + std::to_string(ti) + " " + std::to_string(qo) + "/" +
                                 std::to_string(kv) + " group " + std::to_string(g);
        check_paths_plan(tree, o, what);
        const int32_t k = std::min(g, cap);
        const Plan plan = make_plan(tree, o);
        const auto groups = plan_groups(plan);
        const auto plain = reference_groups(tree, k, false),
                   aligned = reference_groups(tree, k, true);
        EXPECT_TRUE(groups == plain || groups == aligned) << what;
        took_aligned += groups == aligned && aligned != plain;
        EXPECT_EQ(fixed_paths_group(o), k) << what;
        o.planner = "auto";
        const Plan a = make_plan(tree, o);
        if (a.chosen_planner == "paths") {
          EXPECT_EQ(plan_groups(a), groups) << what;
          ++auto_took_paths;
        }
      }
    }
  }
  EXPECT_GT(auto_took_paths, 0);  // the auto half of the check ran
  EXPECT_GT(took_aligned, 0);     // and the aligned cut was taken somewhere
  EXPECT_EQ(chosen_k_checked, static_cast<int>(trees.size()) * 3);
}

TEST(PlannersPaths, AGroupDoesNotStraddleTwoSubtreesThatEachFillOne) {
  // 8 requests of 60 draft tokens each under one prompt: groups of 32 would take 32 consecutive
  // queries and so straddle two requests (reading both requests' nodes, each seen by part of the
  // rows); cut at the requests instead, each group reads one request's nodes.
  // The cost model sees the second request's 512 tokens the straddling group reads and takes
  // the aligned cut.
  const PrefixTree tree = tree_from_levels(parse_levels("N=1,8,480 C=16,512,8"));
  PlanOptions o = paths_options(32, 8);
  o.paths_group = 32;
  check_paths_plan(tree, o, "N=1,8,480");
  const Plan plan = make_plan(tree, o);
  ASSERT_EQ(plan.items.size(), 16u);  // 32 + 28 queries a request
  for (const WorkItem& it : plan.items) EXPECT_EQ(it.kv_tokens, 16 + 512 + 8 * it.num_rows);
  EXPECT_EQ(plan_groups(plan), reference_groups(tree, 32, true));
}

/// Checks a paths-split plan made with group size `k` against the reference groups: every item's
/// queries lie in one group (of the plain or the aligned cut, whichever the plan took); a group's
/// items hold its nodes' tokens once in all, in pieces that differ by at most one token; every row
/// sees some token of its item; private_tokens counts the item's tokens of nodes that only the
/// group's queries use; a query with one row writes its output, the others merge.
void check_split_plan(const PrefixTree& tree, const PlanOptions& o, int32_t k,
                      const std::string& what) {
  const Plan plan = make_plan(tree, o);
  ASSERT_EQ(plan.chosen_planner, "paths-split") << what;
  validate_plan(plan);
  check_coverage(tree, plan);
  std::map<int32_t, std::set<int32_t>> users;  // node -> the queries whose path holds it
  for (int32_t q = 0; q < tree.num_queries(); ++q)
    for (const int32_t v : query_path(tree, q)) users[v].insert(q);
  std::vector<int32_t> rows_of(static_cast<size_t>(tree.num_queries()), 0);
  for (const PlanRow& r : plan.rows) ++rows_of[r.query];
  bool matched = false;
  for (const bool aligned : {false, true}) {
    const auto ref = reference_groups(tree, k, aligned);
    std::vector<const std::set<int32_t>*> group_of(static_cast<size_t>(tree.num_queries()));
    for (const auto& g : ref)
      for (const int32_t q : g) group_of[q] = &g;
    // items per group, in plan order
    std::map<const std::set<int32_t>*, std::vector<const WorkItem*>> items;
    bool fits = true;
    for (const WorkItem& it : plan.items) {
      const std::set<int32_t>* g = group_of[plan.rows[it.row_begin].query];
      for (int32_t r = 0; r < it.num_rows; ++r)
        fits = fits && g->count(plan.rows[it.row_begin + r].query) > 0;
      items[g].push_back(&it);
    }
    if (!fits || items.size() != ref.size()) continue;
    matched = true;
    for (const auto& [g, its] : items) {
      int64_t union_tokens = 0, got = 0, lo = INT64_MAX, hi = 0;
      std::set<int32_t> nodes;
      for (const int32_t q : *g)
        for (const int32_t v : query_path(tree, q)) nodes.insert(v);
      for (const int32_t v : nodes) union_tokens += tree.nodes[v].tokens;
      for (const WorkItem* it : its) {
        EXPECT_TRUE(it->path_masks) << what;
        got += it->kv_tokens;
        lo = std::min<int64_t>(lo, it->kv_tokens);
        hi = std::max<int64_t>(hi, it->kv_tokens);
        uint64_t seen = 0;  // rows that see some token of the item
        int64_t priv = 0;
        for (int32_t j = 0; j < it->num_ranges; ++j) {
          const KvRange& rg = plan.ranges[it->range_begin + j];
          seen |= it->mask_begin < 0 ? ~0ull : plan.masks[it->mask_begin + j];
          bool only_group = true;
          for (const int32_t u : users[rg.node]) only_group = only_group && g->count(u) > 0;
          if (only_group) priv += rg.len;
        }
        const uint64_t all = it->num_rows == 64 ? ~0ull : (1ull << it->num_rows) - 1;
        EXPECT_EQ(seen & all, all) << what << ": a row sees none of its item";
        EXPECT_EQ(it->private_tokens, priv) << what;
      }
      EXPECT_EQ(got, union_tokens) << what;
      EXPECT_LE(hi - lo, 1) << what << ": unequal pieces";
    }
    break;
  }
  EXPECT_TRUE(matched) << what << ": items outside the reference groups";
  for (const PlanRow& r : plan.rows)
    EXPECT_EQ(r.slot == kFinalOutput, rows_of[r.query] == 1) << what << " query " << r.query;
}

TEST(PlannersPathsSplit, ThePathsGroupsCutIntoPiecesAndMerged) {
  std::vector<PrefixTree> trees = {tree_from_levels(parse_levels("N=1,4,256 C=8,256,32")),
                                   tree_from_levels(parse_levels("N=1,3,7,50 C=9,33,17,5")),
                                   tree_from_levels(parse_levels("N=1,48 C=3000,1"))};
  for (const uint64_t seed : {5, 11, 17, 23}) {
    RandomTreeOptions ro;
    ro.page_size = 1 + static_cast<int32_t>(seed % 4) * 5;
    trees.push_back(random_tree(seed, ro));
  }
  // a chain of 80 nodes with a query on each: groups of one query repeat the shared path, more
  // nodes in all than the planner keeps per cut (it collects each group again)
  trees.push_back(tree_from_levels(parse_levels("N=1,1 C=7,9")));
  {
    PrefixTree& t = trees.back();
    const int32_t base = t.num_pages;
    t.set_num_pages(base + 400);  // pages for the appends
    for (int32_t p = 0; p < 400; ++p) t.free_pages.push_back(base + p);
  }
  for (int i = 0; i < 78; ++i) {
    PrefixTree& t = trees.back();
    t.append_tokens(t.num_queries() - 1, 5 + i % 7);
    t.fork_query(t.num_queries() - 1, 2);
  }
  int split = 0, full_rows = 0;
  for (size_t ti = 0; ti < trees.size(); ++ti)
    for (const auto& [qo, kv] :
         std::vector<std::pair<int, int>>{{16, 1}, {8, 1}, {32, 8}, {2, 1}, {8, 8}})
      for (const int32_t g : {0, 1, 4, 16, 64}) {
        PlanOptions o = paths_options(qo, kv);
        o.planner = "paths-split";
        o.paths_group = g;
        const std::string what = "tree " + std::to_string(ti) + " " + std::to_string(qo) + "/" +
                                 std::to_string(kv) + " group " + std::to_string(g);
        const Plan plan = make_plan(trees[ti], o);
        split += plan.num_slots > 0;
        for (const WorkItem& it : plan.items) full_rows += it.num_rows == kMaxMaskedRows;
        if (g > 0) {
          check_split_plan(trees[ti], o, fixed_paths_group(o), what);
          continue;
        }
        // the model's group size: one of 1, 2, 4, ... up to the cap
        const int32_t cap = std::min(128 / (qo / kv), kMaxMaskedRows);
        bool found = false;
        for (int32_t k = 1; !found; k = std::min(cap, 2 * k)) {
          o.paths_group = k;
          const Plan fixed = make_plan(trees[ti], o);
          found = fixed.items.size() == plan.items.size() &&
                  fixed.rows.size() == plan.rows.size() &&
                  fixed.ranges.size() == plan.ranges.size() && fixed.masks == plan.masks;
          if (found) check_split_plan(trees[ti], o, k, what);
          if (k == cap) break;
        }
        EXPECT_TRUE(found) << what << ": not the plan of a group size the model tries";
      }
  EXPECT_GT(split, 0);      // some plans cut their groups (and merge)
  EXPECT_GT(full_rows, 0);  // and some items hold 64 rows (mask bit 63)
}

TEST(PlannersPathsSplit, ALongSharedPromptIsReadOncePerGroupAcrossTheSMs) {
  // 48 draft queries of one token each under a 3000-token prompt, 8 query heads per KV head
  // (16 queries fill a kM128 CTA): paths reads the prompt in 3 CTAs, one per group; paths-split
  // reads it once per group too, in pieces that spread it over the SMs, and every query merges
  // its pieces.
  const PrefixTree tree = tree_from_levels(parse_levels("N=1,48 C=3000,1"));
  PlanOptions o = paths_options(8, 1);
  o.planner = "paths-split";
  o.paths_group = 16;
  const Plan plan = make_plan(tree, o);
  check_split_plan(tree, o, 16, "N=1,48");
  EXPECT_GE(plan.items.size(), 60u);
  int64_t tokens = 0;
  for (const WorkItem& it : plan.items) tokens += it.kv_tokens;
  EXPECT_EQ(tokens, 3 * (3000 + 16));
  for (int32_t q = 0; q < tree.num_queries(); ++q)
    EXPECT_GT(plan.merge_indptr[q + 1] - plan.merge_indptr[q], 1) << "query " << q;
}

/// One run of a paths planner into a cost-only builder under `bound` (infinity: none): its cost and
/// the search's choice.
std::pair<double, planners::PlannerSearch> bounded_run(const planners::PlannerEntry& e,
                                                       const PrefixTree& tree,
                                                       const TreeIndex& index, const PlanOptions& o,
                                                       double bound) {
  planners::PlanBuilder b(tree, o, e.name, planners::PlanBuilder::Mode::kCostOnly);
  b.search().bound_us = bound;
  e.fn(tree, index, o, &b);
  return {b.cost_us(o.device), b.search()};
}

TEST(PlannersPaths, ABoundChangesNoChoiceBelowItAndAChoiceReplays) {
  // the irregular and DeFT lines (subtrees that do not fill the groups: aligned cuts that differ)
  // and random trees, at the model's group size and a fixed one
  std::vector<std::pair<std::string, PrefixTree>> trees;
  for (const char* set : {"irregular", "deft"})
    for (const Workload& w : workload_set(set))
      if (trees.size() < 40) trees.emplace_back(w.name, build_workload(w));
  for (const uint64_t seed : {3, 7, 13, 19, 37}) {
    RandomTreeOptions ro;
    ro.page_size = 1 + static_cast<int32_t>(seed % 3) * 7;
    trees.emplace_back("random " + std::to_string(seed), random_tree(seed, ro));
  }
  int below = 0, above = 0;
  for (const auto& [name, tree] : trees) {
    const TreeIndex index = build_index(tree);
    for (const char* planner : {"paths", "paths-split"})
      for (const int32_t g : {0, 8}) {
        PlanOptions o = paths_options(32, 8);
        o.planner = planner;
        o.paths_group = g;
        const planners::PlannerEntry& e = *planners::find_planner(planner);
        const std::string what = name + " " + planner + " group " + std::to_string(g);
        const auto [free_us, choice] =
            bounded_run(e, tree, index, o, std::numeric_limits<double>::infinity());
        ASSERT_TRUE(choice.chosen) << what;
        for (const double f : {0.3, 0.9, 0.999, 1.0, 1.001, 1.1, 3.0}) {
          const double bound = free_us * f;
          const auto [us, got] = bounded_run(e, tree, index, o, bound);
          // below the bound, the search's own choice; above it, a plan that loses too, and a
          // choice only where the search had to run without the bound to tell
          if (free_us < bound) {
            ++below;
            ASSERT_TRUE(got.chosen) << what << " x" << f;
            EXPECT_EQ(us, free_us) << what << " x" << f;
          } else {
            ++above;
            EXPECT_GE(us, bound) << what << " x" << f;
          }
          if (got.chosen) {
            EXPECT_EQ(got.group, choice.group) << what << " x" << f;
            EXPECT_EQ(got.aligned, choice.aligned) << what << " x" << f;
            EXPECT_EQ(got.piece_tokens, choice.piece_tokens) << what << " x" << f;
          }
        }
        // the choice replayed in a full build: the plan the search builds
        const Plan searched = make_plan(tree, o);
        const Plan replayed = planners::run_planner(e, tree, index, o, &choice);
        EXPECT_EQ(replayed.rows.size(), searched.rows.size()) << what;
        EXPECT_EQ(replayed.ranges.size(), searched.ranges.size()) << what;
        EXPECT_EQ(replayed.masks, searched.masks) << what;
        EXPECT_EQ(replayed.page_ids, searched.page_ids) << what;
        EXPECT_EQ(replayed.merge_slots, searched.merge_slots) << what;
        ASSERT_EQ(replayed.items.size(), searched.items.size()) << what;
        for (size_t i = 0; i < replayed.items.size(); ++i)
          EXPECT_EQ(replayed.items[i].kv_tokens, searched.items[i].kv_tokens) << what;
      }
  }
  EXPECT_GT(below, 0);
  EXPECT_GT(above, 0);
}

}  // namespace
}  // namespace treeattn
