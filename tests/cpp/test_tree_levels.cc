// Level specs and the embedded workloads: parse_levels() (values and errors naming the key),
// tree_from_levels() counts and parent rule, the page-mapping property in contiguous and
// shuffled layouts, build speed, and the workload sets (sizes, lookup, every line builds).
#include <gtest/gtest.h>

#include <chrono>
#include <numeric>
#include <set>

#include "test_tree_util.h"
#include "treeattn/common/error.h"
#include "treeattn/tree/levels.h"
#include "treeattn/tree/workloads.h"

namespace treeattn {
namespace {

using testing_util::expect_invalid;

TEST(TreeLevels, ParseFullLine) {
  const LevelSpec s =
      parse_levels("  N=1,4,16   C=1024,256,32 heads=32/8 page=32 dim=128 dtype=bf16 ");
  EXPECT_EQ(s.nodes_per_level, std::vector<int32_t>({1, 4, 16}));
  EXPECT_EQ(s.tokens_per_level, std::vector<int32_t>({1024, 256, 32}));
  EXPECT_EQ(s.shape.num_qo_heads, 32);
  EXPECT_EQ(s.shape.num_kv_heads, 8);
  EXPECT_EQ(s.shape.head_dim, 128);
  EXPECT_EQ(s.page_size, 32);
  EXPECT_EQ(s.dtype, "bf16");
  EXPECT_EQ(s.text, "N=1,4,16 C=1024,256,32 heads=32/8 page=32 dim=128 dtype=bf16");
}

TEST(TreeLevels, ParseDefaults) {
  const LevelSpec s = parse_levels("N=256 C=4096");
  EXPECT_EQ(s.shape.num_qo_heads, 32);
  EXPECT_EQ(s.shape.num_kv_heads, 8);
  EXPECT_EQ(s.shape.head_dim, 128);
  EXPECT_EQ(s.page_size, 16);
  EXPECT_EQ(s.dtype, "fp16");
}

TEST(TreeLevels, ParseErrorsNameTheKey) {
  expect_invalid([] { parse_levels("N=1,4 C=8"); }, {"levels", "N and C differ in length"});
  expect_invalid([] { parse_levels("N=1,4 C=8,8 heads=32"); }, {"heads", "QO/KV"});
  expect_invalid([] { parse_levels("N=1,4 C=8,8 heads=32/x"); }, {"heads", "'x'"});
  expect_invalid([] { parse_levels("N=1,4 C=8,8 heads=32/5"); }, {"heads", "multiple"});
  expect_invalid([] { parse_levels("N=1,4 C=8,8 heads=0/8"); }, {"heads", "positive"});
  expect_invalid([] { parse_levels("N=1,4 C=8,8 foo=3"); }, {"levels", "unknown key 'foo'"});
  expect_invalid([] { parse_levels("N=1,0 C=8,8"); }, {"N", "positive"});
  expect_invalid([] { parse_levels("N=1,4 C=8,-8"); }, {"C", "'-8'"});
  expect_invalid([] { parse_levels("N=1,,4 C=8,8,8"); }, {"N", "empty"});
  expect_invalid([] { parse_levels("N=4,2 C=8,8"); }, {"N", "fewer than level 0"});
  expect_invalid([] { parse_levels("C=8"); }, {"levels", "missing N"});
  expect_invalid([] { parse_levels("N=1"); }, {"levels", "missing C"});
  expect_invalid([] { parse_levels("N=1 C=8 N=2"); }, {"N", "twice"});
  expect_invalid([] { parse_levels("N=1 C=8 page=0"); }, {"page"});
  expect_invalid([] { parse_levels("N=1 C=8 dim=abc"); }, {"dim"});
  expect_invalid([] { parse_levels("N=1 C=8 dtype=fp8"); }, {"dtype", "fp8"});
  expect_invalid([] { parse_levels("N=1 C=99999999999"); }, {"C", "int32"});
  expect_invalid([] { parse_levels("N=1 C=8 junk"); }, {"levels", "key=value"});
  expect_invalid([] { parse_levels(""); }, {"levels", "missing N"});
  expect_invalid([] { parse_levels("N=1,4096,4194304 C=1,1,1"); }, {"N", "nodes in all"});
}

// Checks counts and the parent rule of a level tree against the spec.
void check_level_tree(const LevelSpec& s, const PrefixTree& t) {
  ASSERT_NO_THROW(validate(t));
  const auto& N = s.nodes_per_level;
  const auto& C = s.tokens_per_level;
  const int64_t nodes = std::accumulate(N.begin(), N.end(), int64_t{0});
  int64_t unique = 0, ctx = 0;
  for (size_t i = 0; i < N.size(); ++i) {
    unique += int64_t{N[i]} * C[i];
    ctx += C[i];
  }
  EXPECT_EQ(static_cast<int64_t>(t.nodes.size()), nodes) << s.text;
  EXPECT_EQ(t.num_queries(), N.back()) << s.text;
  EXPECT_EQ(unique_tokens(t), unique) << s.text;
  for (int32_t q = 0; q < t.num_queries(); ++q) ASSERT_EQ(query_context(t, q), ctx) << s.text;
  // Parent rule: node j of level i+1 under node floor(j * N[i] / N[i+1]) of level i; queries in
  // leaf order.
  int64_t off = 0;
  for (size_t i = 0; i + 1 < N.size(); ++i) {
    const int64_t next = off + N[i];
    for (int64_t j = 0; j < N[i + 1]; ++j)
      ASSERT_EQ(t.nodes[next + j].parent, off + j * N[i] / N[i + 1]) << s.text;
    off = next;
  }
  for (int32_t q = 0; q < t.num_queries(); ++q) ASSERT_EQ(t.query_node[q], off + q);
  EXPECT_EQ(t.shape.num_qo_heads, s.shape.num_qo_heads);
  EXPECT_EQ(t.page_size, s.page_size);
  EXPECT_TRUE(t.free_pages.empty());
}

TEST(TreeLevels, CountsOnWorkloadLines) {
  const LevelSpec a = parse_levels("N=1,4,16 C=1024,256,32");
  const PrefixTree t = tree_from_levels(a);
  check_level_tree(a, t);
  EXPECT_EQ(t.nodes.size(), 21u);
  EXPECT_EQ(unique_tokens(t), 1024 + 4 * 256 + 16 * 32);
  // Several roots and a single-level forest.
  check_level_tree(parse_levels("N=4,16,256,512 C=512,32,128,32 page=32"),
                   tree_from_levels(parse_levels("N=4,16,256,512 C=512,32,128,32 page=32")));
  const PrefixTree flat = tree_from_levels(parse_levels("N=256 C=4096 page=32"));
  EXPECT_EQ(build_index(flat).roots.size(), 256u);
  EXPECT_EQ(flat.num_pages, 256 * 128);
  // Uneven division: 3 -> 7 children.
  check_level_tree(parse_levels("N=3,7 C=5,9 page=4"),
                   tree_from_levels(parse_levels("N=3,7 C=5,9 page=4")));
}

TEST(TreeLevels, PageMappingContiguousAndShuffled) {
  for (const char* line : {"N=1,4,16 C=1024,256,32", "N=3,7,11 C=5,9,17 page=4",
                           "N=1,2,64 C=8,256,32 page=1", "N=2,8,16,256 C=256,256,32,33 page=32"}) {
    const LevelSpec s = parse_levels(line);
    const PrefixTree c = tree_from_levels(s, PageLayout::kContiguous);
    testing_util::expect_distinct_slots(c);
    // Contiguous: pages are handed out 0, 1, 2, ... in preorder; nodes start at start % P.
    const TreeIndex ix = build_index(c);
    int32_t next = 0;
    for (int32_t v : ix.preorder) {
      EXPECT_EQ(c.nodes[v].page_offset, ix.start[v] % s.page_size);
      for (int32_t p : c.nodes[v].pages) ASSERT_EQ(p, next++) << line;
    }
    EXPECT_EQ(next, c.num_pages);
    const PrefixTree sh = tree_from_levels(s, PageLayout::kShuffled, 42);
    testing_util::expect_distinct_slots(sh);
    EXPECT_EQ(sh.num_pages, c.num_pages);
    bool differs = false;
    for (size_t v = 0; v < c.nodes.size(); ++v)
      differs = differs || c.nodes[v].pages != sh.nodes[v].pages;
    EXPECT_TRUE(differs) << line;
    testing_util::expect_same_tree(sh, tree_from_levels(s, PageLayout::kShuffled, 42));
  }
}

TEST(TreeLevels, BuildIsFast) {
  const std::vector<std::string> lines = {
      "N=1,64 C=120000,512 heads=32/8", "N=1,1024 C=2048,32 heads=32/8",
      "N=1,2,4,8,16,32,64,128,1024 C=256,128,64,16,16,16,16,16,16"};
  for (const std::string& line : lines) {
    const LevelSpec s = parse_levels(line);
    tree_from_levels(s);  // warm up
    const auto t0 = std::chrono::steady_clock::now();
    const PrefixTree t = tree_from_levels(s, PageLayout::kShuffled, 1);
    const double ms =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    EXPECT_LT(ms, 50.0) << line;  // typically well under 1 ms; generous for a loaded CI machine
    EXPECT_GT(t.num_pages, 0);
  }
}

TEST(TreeWorkloads, SetsAndLookup) {
  EXPECT_EQ(workload_set_names(),
            std::vector<std::string>({"fasttree", "pat", "deft", "forge", "irregular"}));
  const auto fasttree = workload_set("fasttree");
  const auto pat = workload_set("pat");
  const auto deft = workload_set("deft");
  const auto forge = workload_set("forge");
  const auto irregular = workload_set("irregular");
  EXPECT_EQ(fasttree.size(), 45u);
  EXPECT_EQ(pat.size(), 80u);
  EXPECT_EQ(deft.size(), 3u + 3u + 4u);
  EXPECT_EQ(forge.size(), 5u + 5u);
  EXPECT_EQ(irregular.size(), 9u * 2u + 12u);
  EXPECT_EQ(workload_set("all").size(),
            fasttree.size() + pat.size() + deft.size() + forge.size() + irregular.size());
  EXPECT_EQ(find_workload("fasttree:3").name, fasttree[3].name);
  EXPECT_EQ(fasttree[3].name, "N=1,4,256 C=8,256,32 heads=16/1");
  EXPECT_EQ(find_workload("N=256 C=4096 heads=32/8 page=32").set, "pat");
  EXPECT_EQ(find_workload("N=256  C=4096 heads=32/8  page=32").name,
            "N=256 C=4096 heads=32/8 page=32");
  EXPECT_EQ(find_workload("specdec base=6000 t=64").set, "deft");
  EXPECT_TRUE(find_workload("forge:9").generated);
  EXPECT_EQ(find_workload("deft:3").name, "specdec base=6000 t=16");  // after the level lines
  EXPECT_EQ(find_workload("irregular:17").spec.shape.num_qo_heads, 16);
  EXPECT_EQ(find_workload("irregular:19").spec.page_size, 1);  // a page= word
  EXPECT_EQ(find_workload("irregular:18").spec.page_size, 16);
  expect_invalid([] { workload_set("nope"); }, {"workload", "nope"});
  expect_invalid([] { find_workload("fasttree:45"); }, {"workload", "45"});
  expect_invalid([] { find_workload("fasttree:x"); }, {"workload", "x"});
  expect_invalid([] { find_workload("no such"); }, {"workload", "no such"});
  EXPECT_NE(workload_file_text("pat").find("N=256 C=4096"), std::string::npos);
  expect_invalid([] { workload_file_text("zzz"); }, {"workload"});
}

TEST(TreeWorkloads, EveryWorkloadBuilds) {
  for (const Workload& w : workload_set("all")) {
    const PrefixTree t = build_workload(w);
    ASSERT_NO_THROW(validate(t)) << w.name;
    testing_util::expect_distinct_slots(t);
    EXPECT_LE(t.num_queries(), 1024) << w.name;
    if (!w.generated) check_level_tree(w.spec, t);
    const TreeIndex ix = build_index(t);
    for (int32_t v : ix.preorder) ASSERT_FALSE(ix.queries_below(v).empty()) << w.name;
    // Deterministic.
    testing_util::expect_same_tree(t, build_workload(w));
    testing_util::expect_same_tree(build_workload(w, PageLayout::kShuffled, 3),
                                   build_workload(w, PageLayout::kShuffled, 3));
  }
}

}  // namespace
}  // namespace treeattn
