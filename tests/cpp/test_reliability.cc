// Issue 11 reproductions at the C++ level: page ownership and free_pages in validate(), the
// documented limits (kMaxPageSize at every entry point), tree versions stamped into plans,
// headroom overflow, DeviceInfo checks and flatten's bounded ranges (auto leaves flatten out when
// it would exceed them).
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "test_tree_util.h"
#include "treeattn/cpu/random_inputs.h"
#include "treeattn/plan/layout.h"
#include "treeattn/plan/planner.h"
#include "treeattn/plan/stats.h"
#include "treeattn/tree/block_tables.h"
#include "treeattn/tree/json.h"
#include "treeattn/tree/levels.h"
#include "treeattn/tree/random_tree.h"

namespace treeattn {
namespace {

using testing_util::expect_invalid;

PrefixTree two_node_tree() {  // root page 0 (16 tokens), child pages [1] (4 tokens)
  return tree_from_json(
      R"({"page_size": 16, "num_pages": 8, "nodes": [{"id": 0, "parent": null, "tokens": 16},
          {"id": 1, "parent": 0, "tokens": 4}], "queries": [{"node": 1}]})");
}

TEST(Reliability, PageOwnership) {
  PrefixTree t = two_node_tree();
  validate(t);
  PrefixTree reuse = t;  // the child reuses its parent's page at the same slots
  reuse.nodes[1].pages = {0};
  expect_invalid([&] { validate(reuse); }, {"nodes[1].pages[0]", "page 0 slot 0", "nodes[0]"});
  PrefixTree later = t;  // the parent's page at later slots is fine (new positions)
  later.nodes[0].tokens = 10;
  later.nodes[1].page_offset = 10;
  later.nodes[1].pages = {0};
  validate(later);
  for (const auto& [free, what] :
       std::vector<std::pair<std::vector<int32_t>, std::string>>{{{3, 3}, "listed twice"},
                                                                 {{1}, "in use"},
                                                                 {{8}, "out of range"},
                                                                 {{-1}, "out of range"}}) {
    PrefixTree f = t;
    f.free_pages = free;
    expect_invalid([&] { validate(f); }, {"free_pages[", what});
  }
  expect_invalid([&] { t.append_tokens(0, 13, {1, 5}); }, {"new_pages[0]", "in use"});
  expect_invalid([] { tree_from_block_tables({{0, 0, 0}}, {40}, 16); }, {"pages[1]", "page 0"});
}

TEST(Reliability, LimitsAndVersions) {
  PrefixTree t = tree_from_levels(parse_levels("N=1,2 C=4,4"));
  const uint64_t v0 = t.version;
  expect_invalid([&] { t.fork_query(0, std::numeric_limits<int32_t>::max() - 2); },
                 {"n", "kMaxTreeQueries"});
  EXPECT_EQ(t.version, v0);
  t.fork_query(0, 3);
  t.append_tokens(1, 1, {t.num_pages - 1});
  EXPECT_EQ(t.version, v0 + 2);
  PlanOptions o;
  o.planner = "node";
  EXPECT_EQ(make_plan(t, o).tree_version, t.version);
  // a chain of 4096 nodes with 8193 queries on its leaf: path-depth sum 4096 x 8193 > 2^25
  // (fork_query refuses it, so the queries are written directly)
  std::string levels = "N=1", tokens = "C=1";
  for (int i = 1; i < 4096; ++i) levels += ",1", tokens += ",1";
  PrefixTree chain = tree_from_levels(parse_levels(levels + " " + tokens));
  chain.query_node.assign(8193, chain.query_node[0]);
  expect_invalid([&] { make_plan(chain, o); }, {"tree", "kMaxPathDepthSum"});
  RandomTreeOptions r;
  r.max_nodes = std::numeric_limits<int32_t>::max();
  expect_invalid([&] { random_tree(0, r); }, {"max_nodes"});
}

TEST(Reliability, PageSizeBoundedEverywhere) {
  // An 84-byte file with a huge page_size made `treeattn check` allocate gigabytes.
  for (const char* big : {"4097", "1048576", "2147483647", "99999999999999999999"}) {
    expect_invalid(
        [&] {
          tree_from_json(std::string(R"({"page_size": )") + big +
                         R"(, "nodes": [{"id": 0, "tokens": 1}], "queries": [{"node": 0}]})");
        },
        {"page_size"});
  }
  expect_invalid(
      [] {
        tree_from_json(
            R"({"page_size": 1048576, "nodes": [{"id": 0, "tokens": 1}], "queries": [{"node": 0}]})");
      },
      {"page_size", "kMaxPageSize=4096", "1048576"});
  const std::string max = std::to_string(kMaxPageSize), over = std::to_string(kMaxPageSize + 1);
  EXPECT_EQ(tree_from_json(R"({"page_size": )" + max +
                           R"(, "nodes": [{"id": 0, "tokens": 1}], "queries": [{"node": 0}]})")
                .page_size,
            kMaxPageSize);
  expect_invalid([&] { parse_levels("N=1 C=4 page=" + over); }, {"page", "kMaxPageSize"});
  LevelSpec spec = parse_levels("N=1 C=4");
  spec.page_size = kMaxPageSize + 1;
  expect_invalid([&] { tree_from_levels(spec); }, {"page", "kMaxPageSize"});
  expect_invalid([] { tree_from_block_tables({{0}}, {4}, kMaxPageSize + 1); },
                 {"page_size", "kMaxPageSize"});
  RandomTreeOptions r;
  r.page_size = kMaxPageSize + 1;
  expect_invalid([&] { random_tree(0, r); }, {"page_size", "kMaxPageSize"});
  PrefixTree t = two_node_tree();
  t.page_size = 2147483647;  // written directly: validate() and random_inputs() refuse it
  expect_invalid([&] { validate(t); }, {"page_size", "kMaxPageSize"});
  expect_invalid([&] { random_inputs(t, 8, 8, 128, false, 0); },
                 {"tree.page_size", "kMaxPageSize"});
  expect_invalid([&] { t.append_tokens(0, 1); }, {"page_size", "kMaxPageSize"});
}

TEST(Reliability, HeadroomAndDevice) {
  const PrefixTree t = two_node_tree();
  PlanOptions o;
  o.planner = "node";
  const Plan p = make_plan(t, o);
  for (const double h : {1e17, 1e30, std::numeric_limits<double>::infinity()})
    expect_invalid([&] { plan_layout(p, h); }, {"headroom"});
  EXPECT_GT(plan_layout(p, 1000.0).total_bytes, plan_layout(p, 1.0).total_bytes);
  DeviceInfo d = device_preset("h100");
  d.smem_per_sm_bytes = 0;
  expect_invalid([&] { validate_device(d); }, {"device.smem_per_sm_bytes"});
  d = device_preset("h100");
  d.launch_overhead_us = std::nan("");
  o.device = d;
  expect_invalid([&] { make_plan(t, o); }, {"device.launch_overhead_us"});
  expect_invalid([&] { plan_stats(t, p, d); }, {"device.launch_overhead_us"});
}

TEST(Reliability, FlattenRangesBounded) {
  const PrefixTree wide = tree_from_levels(parse_levels("N=1,131072 C=1,1"));
  PlanOptions o;
  o.planner = "flatten";
  expect_invalid([&] { make_plan(wide, o); }, {"planner", "kMaxFlattenRanges"});
  o.planner = "auto";
  const Plan p = make_plan(wide, o);
  EXPECT_EQ(p.shape.num_queries, 131072);
  EXPECT_NE(p.chosen_planner, "flatten");
}

}  // namespace
}  // namespace treeattn
