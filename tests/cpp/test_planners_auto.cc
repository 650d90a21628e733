// auto's guarantee and the cost-model helpers the planners use: auto's estimated makespan is at
// most the best other planner's on every embedded workload line (H200 and H100 presets), each
// scored with its auto margin (paths-split's estimate over 0.95, as auto scores it); its
// candidates are every other planner of the table; the paper planners keep their defining structure
// (flatten's equal blocks and masks, fasttree's tile phases, PAT's packing rule, forge's profile
// table).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <string>
#include <vector>

#include "plan/cost/forge_profile.h"
#include "plan/planners/planner_util.h"
#include "plan/planners/planners.h"
#include "treeattn/plan/cost/cost_model.h"
#include "treeattn/plan/planner.h"
#include "treeattn/tree/levels.h"
#include "treeattn/tree/random_tree.h"
#include "treeattn/tree/workloads.h"

namespace treeattn {
namespace {

PlanOptions options_for(const LevelSpec& spec, const std::string& planner, const char* dev) {
  PlanOptions o;
  o.planner = planner;
  o.num_qo_heads = spec.shape.num_qo_heads > 0 ? spec.shape.num_qo_heads : 32;
  o.num_kv_heads = spec.shape.num_kv_heads > 0 ? spec.shape.num_kv_heads : 8;
  o.head_dim = spec.shape.head_dim > 0 ? spec.shape.head_dim : 128;
  o.device = device_preset(dev);
  return o;
}

// Also Plan::chosen_planner: the planner asked for, or for auto the candidate whose plan it
// returned (that planner's plan item for item) or "auto" for its own grouping.
TEST(PlannersAuto, NeverWorseThanTheBestOtherPlanner) {
  int32_t chose_own = 0, chose_other = 0;
  for (const char* dev : {"h200", "h100"}) {
    for (const Workload& w : workload_set("all")) {
      const PrefixTree tree = build_workload(w);
      double best_other = 1e300;
      std::string best_name;
      std::map<std::string, Plan> others;
      for (const std::string& p : planner_names()) {
        if (p == "auto") continue;
        PlanOptions o = options_for(w.spec, p, dev);
        Plan plan = make_plan(tree, o);
        EXPECT_EQ(plan.chosen_planner, p);
        // as auto scores it: above its estimate by the candidate's margin (paths-split's 5%)
        const double us =
            estimate_plan_us(o.device, plan) / (1.0 - planners::find_planner(p)->auto_margin);
        if (us < best_other) {
          best_other = us;
          best_name = p;
        }
        others.emplace(p, std::move(plan));
      }
      const PlanOptions o = options_for(w.spec, "auto", dev);
      const Plan plan = make_plan(tree, o);
      EXPECT_EQ(plan.planner, "auto");
      const double us = estimate_plan_us(o.device, plan);
      const double margin = plan.chosen_planner == "auto"
                                ? 0.0
                                : planners::find_planner(plan.chosen_planner)->auto_margin;
      EXPECT_LE(us / (1.0 - margin), best_other * (1 + 1e-12))
          << dev << " " << w.set << ": " << w.name << " auto " << us << " us vs " << best_name
          << " " << best_other << " us";
      if (plan.chosen_planner == "auto") {
        ++chose_own;
        continue;
      }
      ++chose_other;
      const auto it = others.find(plan.chosen_planner);
      ASSERT_NE(it, others.end()) << "chosen_planner '" << plan.chosen_planner << "'";
      const Plan& same = it->second;
      EXPECT_EQ(estimate_plan_us(o.device, same), us) << w.name;
      ASSERT_EQ(same.items.size(), plan.items.size()) << w.name;
      for (size_t i = 0; i < plan.items.size(); ++i)
        EXPECT_EQ(same.items[i].kv_tokens, plan.items[i].kv_tokens) << w.name << " item " << i;
      EXPECT_EQ(same.page_ids, plan.page_ids) << w.name;
      EXPECT_EQ(same.merge_slots, plan.merge_slots) << w.name;
    }
  }
  // The workload set exercises both outcomes.
  EXPECT_GT(chose_own, 0);
  EXPECT_GT(chose_other, 0);
}

TEST(PlannersAuto, CandidatesAreEveryOtherPlanner) {
  // auto's candidate list and planner_names() come from the one planner table.
  std::vector<std::string> names;
  for (const planners::PlannerEntry* e : planners::auto_candidates()) names.push_back(e->name);
  EXPECT_EQ(names, (std::vector<std::string>{"pat", "fasttree", "node", "forge", "query",
                                             "node-chunk", "flatten", "paths", "paths-split"}));
  std::vector<std::string> all = planner_names();
  EXPECT_EQ(all.back(), "auto");
  all.pop_back();
  std::sort(all.begin(), all.end());
  std::sort(names.begin(), names.end());
  EXPECT_EQ(names, all);
  PlanOptions o;
  o.planner = "nope";
  try {
    make_plan(random_tree(1, RandomTreeOptions{}), o);
    ADD_FAILURE() << "unknown planner accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("query, node, node-chunk, flatten, fasttree, pat, forge, "
                                         "paths, paths-split or auto"),
              std::string::npos)
        << e.what();
  }
}

TEST(PlannersStructure, FlattenBlocksAreEqualAndMasked) {
  const PrefixTree tree =
      tree_from_levels(parse_levels("N=1,8,64 C=600,90,30 heads=32/8"), PageLayout::kShuffled, 1);
  PlanOptions o;
  o.planner = "flatten";
  const Plan plan = make_plan(tree, o);
  // Every item reads at most one block (items with masks may skip slices none of their rows see).
  const int32_t block = planners::even_block_tokens(unique_tokens(tree), o);
  bool masked = false;
  int32_t full_blocks = 0;
  for (const WorkItem& it : plan.items) {
    EXPECT_LE(it.kv_tokens, block);
    full_blocks += it.kv_tokens == block;
    if (it.mask_begin >= 0) {
      masked = true;
      EXPECT_LE(it.num_rows, kMaxMaskedRows);
    }
  }
  EXPECT_TRUE(masked);
  EXPECT_GT(full_blocks, 0);
  EXPECT_GE(plan.items.size(), static_cast<size_t>(unique_tokens(tree) / block));
}

TEST(PlannersStructure, FastTreeUsesTwoTilePhases) {
  const PrefixTree tree = tree_from_levels(parse_levels("N=1,256 C=256,32 heads=32/8"));
  PlanOptions o;
  o.planner = "fasttree";
  const Plan plan = make_plan(tree, o);
  for (const WorkItem& it : plan.items) {
    EXPECT_NE(it.tile, TileClass::kM128);
    EXPECT_LE(it.num_rows * 4, tile_rows(it.tile));
  }
  EXPECT_GT(plan.class_begin[1], 0);                    // kM16 phase (leaves)
  EXPECT_GT(plan.class_begin[2], plan.class_begin[1]);  // kM64 phase (the shared root)
}

TEST(PlannersStructure, PatMergesShortParentsAndSplitsLongOnes) {
  PlanOptions o;
  o.planner = "pat";
  // Root of 8 tokens with 4 one-query children: 4 * 1 < 8 keeps them apart (5 CTAs, mean KV
  // 33.6, so each 40-token child is split in two by the long-KV split).
  {
    const PrefixTree tree = tree_from_levels(parse_levels("N=1,4 C=8,40 heads=32/8"));
    const Plan plan = make_plan(tree, o);
    for (const WorkItem& it : plan.items) EXPECT_EQ(it.num_ranges, 1);
    EXPECT_EQ(plan.items.size(), 9u);
  }
  // A chain: the child holds all of the root's queries, so folding costs no extra read (extra =
  // 0) and the whole path is one CTA.
  {
    const PrefixTree tree = tree_from_levels(parse_levels("N=1,1 C=4000,40 heads=32/8"));
    const Plan plan = make_plan(tree, o);
    EXPECT_EQ(plan.items.size(), 1u);
    EXPECT_EQ(plan.items[0].num_ranges, 2);
  }
  // Root of 2 tokens: 4 * 1 > 2 merges every child: one CTA per query, no partials.
  {
    const PrefixTree tree = tree_from_levels(parse_levels("N=1,4 C=2,40 heads=32/8"));
    const Plan plan = make_plan(tree, o);
    EXPECT_EQ(plan.items.size(), 4u);
    EXPECT_EQ(plan.num_slots, 0);
  }
}

TEST(PlannersStructure, ForgeProfileParsesAndInterpolates) {
  const std::string csv =
      "# test\nhead_dim,packed_rows,kv_tokens,us\n"
      "128,16,512,2\n128,16,1024,4\n128,64,512,3\n128,64,1024,7\n64,16,512,100\n";
  const planners::ForgeProfile p = planners::parse_forge_profile(csv, 128);
  ASSERT_FALSE(p.empty());
  EXPECT_DOUBLE_EQ(p.lookup(16, 512), 2.0);
  EXPECT_DOUBLE_EQ(p.lookup(64, 1024), 7.0);
  EXPECT_DOUBLE_EQ(p.lookup(40, 768), 4.0);   // bilinear centre of (2, 4, 3, 7)
  EXPECT_DOUBLE_EQ(p.lookup(16, 2048), 8.0);  // linear extrapolation along the KV
  EXPECT_DOUBLE_EQ(p.lookup(1, 512), 2.0);    // rows clamped
  EXPECT_TRUE(planners::parse_forge_profile(csv, 256).empty());
  EXPECT_TRUE(planners::parse_forge_profile("head_dim,packed_rows,kv_tokens,us\n"
                                            "128,16,512,2\n128,64,1024,7\n",
                                            128)
                  .empty());  // incomplete grid
  EXPECT_THROW(planners::parse_forge_profile("head_dim,packed_rows,kv_tokens,us\n1,2\n", 128),
               std::invalid_argument);
}

}  // namespace
}  // namespace treeattn
