// validate() errors (one test per error, each checking the message names the offender), the
// derived views (build_index, query_path, query_context, unique_tokens), page ownership with a
// page count far above the pages listed (with the radix sort of page ids behind it, against
// std::sort), and a 100000-node chain.
#include <gtest/gtest.h>

#include <algorithm>
#include <climits>
#include <random>
#include <type_traits>
#include <vector>

#include "test_tree_util.h"
#include "tree/tree_internal.h"
#include "treeattn/tree/block_tables.h"
#include "treeattn/tree/prefix_tree.h"
#include "treeattn/tree/random_tree.h"

namespace treeattn {
namespace {

using testing_util::expect_invalid;
using testing_util::ids;

// root(id 10, 20 tokens) -> a(id 11, 5 tokens, starts mid-page) ; root -> b(id 12, 12 tokens).
// P = 16. Queries on a, b and the root.
PrefixTree small_tree() {
  PrefixTree t;
  t.page_size = 16;
  t.nodes.resize(3);
  t.nodes[0] = {10, kNoParent, 20, 0, {0, 1}, true};
  t.nodes[1] = {11, 0, 5, 4, {2}, true};
  t.nodes[2] = {12, 0, 12, 4, {3}, true};
  t.num_pages = 4;
  t.query_node = {1, 2, 0};
  return t;
}

TEST(TreeValidate, SmallTreeIsValid) { EXPECT_NO_THROW(validate(small_tree())); }

TEST(TreeValidate, EmptyNoNodes) {
  PrefixTree t = small_tree();
  t.nodes.clear();
  t.query_node.clear();
  expect_invalid([&] { validate(t); }, {"tree", "no live node"});
}

TEST(TreeValidate, EmptyAllDead) {
  PrefixTree t = small_tree();
  for (auto& n : t.nodes) n.alive = false;
  t.query_node.clear();
  expect_invalid([&] { validate(t); }, {"tree", "no live node"});
}

TEST(TreeValidate, EmptyNoQuery) {
  PrefixTree t = small_tree();
  t.query_node.clear();
  expect_invalid([&] { validate(t); }, {"tree", "no query"});
}

TEST(TreeValidate, PageSizeZero) {
  PrefixTree t = small_tree();
  t.page_size = 0;
  expect_invalid([&] { validate(t); }, {"page_size", "0"});
}

TEST(TreeValidate, Cycle) {
  PrefixTree t = small_tree();
  // 3 -> 4 -> 3, plus a query on 4.
  t.nodes.push_back({20, 4, 16, 0, {0}, true});
  t.nodes.push_back({21, 3, 16, 0, {1}, true});
  t.query_node.push_back(4);
  expect_invalid([&] { validate(t); }, {"cycle", ".parent"});
}

TEST(TreeValidate, SelfLoop) {
  PrefixTree t = small_tree();
  t.nodes[2].parent = 2;
  expect_invalid([&] { validate(t); }, {"nodes[2].parent", "cycle", "id 12"});
}

TEST(TreeValidate, UnknownParent) {
  PrefixTree t = small_tree();
  t.nodes[1].parent = 99;
  expect_invalid([&] { validate(t); }, {"nodes[1].parent", "unknown parent index 99"});
}

TEST(TreeValidate, NegativeParent) {
  PrefixTree t = small_tree();
  t.nodes[1].parent = -7;
  expect_invalid([&] { validate(t); }, {"nodes[1].parent", "-7"});
}

TEST(TreeValidate, DeadParent) {
  PrefixTree t = small_tree();
  t.nodes[0].alive = false;
  t.query_node = {1};
  expect_invalid([&] { validate(t); }, {"nodes[1].parent", "parent index 0 is dead"});
}

TEST(TreeValidate, DuplicateId) {
  PrefixTree t = small_tree();
  t.nodes[2].id = 11;
  expect_invalid([&] { validate(t); }, {"nodes[2].id", "duplicate id 11", "nodes[1]"});
}

TEST(TreeValidate, DuplicateIdOfDeadNodeIsFine) {
  PrefixTree t = small_tree();
  t.nodes.push_back({11, kNoParent, 1, 0, {}, false});
  EXPECT_NO_THROW(validate(t));
}

TEST(TreeValidate, TokensZero) {
  PrefixTree t = small_tree();
  t.nodes[1].tokens = 0;
  expect_invalid([&] { validate(t); }, {"nodes[1].tokens", ">= 1", "got 0"});
}

TEST(TreeValidate, PageOffsetOutOfRange) {
  PrefixTree t = small_tree();
  t.nodes[2].page_offset = 16;
  expect_invalid([&] { validate(t); }, {"nodes[2].page_offset", "16"});
}

TEST(TreeValidate, PageCountMismatch) {
  PrefixTree t = small_tree();
  t.nodes[0].pages = {0};
  expect_invalid([&] { validate(t); }, {"nodes[0].pages", "has 1 pages", "need 2"});
  t = small_tree();
  t.nodes[1].pages = {2, 3};  // 4 + 5 tokens fit one page
  expect_invalid([&] { validate(t); }, {"nodes[1].pages", "has 2 pages", "need 1"});
}

TEST(TreeValidate, PageIdOutOfRange) {
  PrefixTree t = small_tree();
  t.nodes[2].pages = {4};
  expect_invalid([&] { validate(t); }, {"nodes[2].pages[0]", "page id 4", "num_pages=4"});
  t.nodes[2].pages = {-1};
  expect_invalid([&] { validate(t); }, {"nodes[2].pages[0]", "page id -1"});
}

TEST(TreeValidate, QueryOnUnknownNode) {
  PrefixTree t = small_tree();
  t.query_node[1] = 17;
  expect_invalid([&] { validate(t); }, {"query 1", "unknown node index 17"});
  t.query_node[1] = -1;
  expect_invalid([&] { validate(t); }, {"query 1", "unknown node index -1"});
}

TEST(TreeValidate, QueryOnDeadNode) {
  PrefixTree t = small_tree();
  t.nodes[2].alive = false;
  expect_invalid([&] { validate(t); }, {"query 1", "node index 2 is dead"});
}

TEST(TreeValidate, PageOwnershipWithFarMoreIdsThanPages) {
  // With num_pages far above the pages listed (a serving cache), validate() finds the pages listed
  // more than once through a sorted list instead of an array over num_pages: same rules.
  PrefixTree t = small_tree();
  t.num_pages = 1 << 30;
  EXPECT_NO_THROW(validate(t));
  PrefixTree cow = t;  // copy-on-write siblings: b shares a's first page (same slots, positions)
  cow.nodes[2].pages = {2};
  EXPECT_NO_THROW(validate(cow));
  PrefixTree later = t;  // a continues in its parent's last page, in the slots the parent leaves
  later.nodes[1].pages = {1};
  EXPECT_NO_THROW(validate(later));
  PrefixTree clash = t;  // b takes page 0, whose slots 4..15 hold the root's positions 4..15
  clash.nodes[2].pages = {0};
  expect_invalid([&] { validate(clash); }, {"page 0", "another position"});
  expect_invalid(
      [] {
        tree_from_block_tables({{1, 5, 6}, {2, 5, 6}}, {48, 48}, 16, 1 << 30);
      },
      {"page 5", "another prefix"});
}

TEST(TreeValidate, PageIdSortIsStdSort) {
  std::mt19937_64 rng(11);
  for (int trial = 0; trial < 300; ++trial) {
    const size_t n = trial < 20 ? static_cast<size_t>(trial) * 20 : rng() % 6000;
    const int64_t hi = trial % 3 == 0 ? 2 : trial % 3 == 1 ? 70000 : int64_t{INT32_MAX};
    std::vector<int32_t> v(n);
    for (int32_t& x : v) x = static_cast<int32_t>(rng() % static_cast<uint64_t>(hi + 1));
    if (n > 2 && trial % 5 == 0) v[n / 2] = INT32_MAX;  // the largest id: all 3 passes
    std::vector<int32_t> want = v;
    std::sort(want.begin(), want.end());
    detail::sort_page_ids(&v);
    ASSERT_EQ(v, want) << "trial " << trial << " n " << n;
  }
}

TEST(TreeValidate, PageOwnershipOfManyPagesFarBelowNumPages) {
  // 400 requests of 3 private pages under a shared 2-page prompt, ids spread up to 2^30, in a
  // cache of 2^31 - 1 pages: the listed pages (>= 256) take the radix sort; the same rules hold.
  std::vector<std::vector<int32_t>> bt;
  std::vector<int64_t> lens;
  for (int32_t r = 0; r < 400; ++r) {
    bt.push_back({7, 1 << 30, 1000 + 3 * r * 997, 1001 + 3 * r * 997, 1002 + 3 * r * 997});
    lens.push_back(5 * 16);
  }
  PrefixTree t = tree_from_block_tables(bt, lens, 16, INT32_MAX);
  EXPECT_NO_THROW(validate(t));
  std::vector<std::vector<int32_t>> clash = bt;  // request 399 reuses request 3's last page
  clash[399][4] = clash[3][4];
  expect_invalid([&] { tree_from_block_tables(clash, lens, 16, INT32_MAX); },
                 {"page", "another prefix"});
  PrefixTree pool = t;  // 300 free pages far apart, then one in use, then one listed twice
  for (int32_t k = 0; k < 300; ++k) pool.free_pages.push_back(5 + k * 1000003);
  EXPECT_NO_THROW(validate(pool));
  PrefixTree in_use = pool;
  in_use.free_pages.push_back(7);
  expect_invalid([&] { validate(in_use); }, {"free_pages[300]", "in use"});
  PrefixTree twice = pool;
  twice.free_pages.push_back(5 + 17 * 1000003);
  expect_invalid([&] { validate(twice); }, {"free_pages", "listed twice"});
}

TEST(TreeValidate, DeepChain100000) {
  const int32_t n = 100000;
  PrefixTree t;
  t.page_size = 16;
  t.nodes.resize(n);
  for (int32_t i = 0; i < n; ++i) {
    // Stored leaf first so that the parent chain runs against the index order.
    t.nodes[i] = {i, i + 1 < n ? i + 1 : kNoParent, 16, 0, {i}, true};
  }
  t.num_pages = n;
  t.query_node = {0, n / 2};
  EXPECT_NO_THROW(validate(t));
  const TreeIndex ix = build_index(t);
  EXPECT_EQ(ix.depth[0], n - 1);
  EXPECT_EQ(ix.start[0], int64_t{16} * (n - 1));
  EXPECT_EQ(ix.preorder.size(), static_cast<size_t>(n));
  EXPECT_EQ(ix.preorder.front(), n - 1);
  EXPECT_EQ(query_context(t, 0), int64_t{16} * n);
  EXPECT_EQ(unique_tokens(t), int64_t{16} * n);
  // A cycle at the end of a long chain is found without recursion.
  t.nodes[n - 1].parent = 0;
  expect_invalid([&] { validate(t); }, {"cycle"});
}

TEST(TreeValidate, IndexCountsQueriesBelowIn64Bit) {
  // queries_below holds sum over queries of path depth entries: a chain of 65,536 nodes with
  // 65,537 queries on its last node needs 2^32 + 2^16 of them, past int32 offsets. That size
  // does not fit a unit test's memory; this chain checks the 64-bit offsets on a smaller sum.
  static_assert(std::is_same_v<decltype(TreeIndex::below_ptr)::value_type, int64_t>);
  const int32_t n = 2048, nq = 2049;
  PrefixTree t;
  t.page_size = 1;
  t.nodes.resize(n);
  for (int32_t i = 0; i < n; ++i) t.nodes[i] = {i, i > 0 ? i - 1 : kNoParent, 1, 0, {i}, true};
  t.num_pages = n;
  t.query_node.assign(nq, n - 1);
  ASSERT_NO_THROW(validate(t));
  const TreeIndex ix = build_index(t);
  EXPECT_EQ(ix.below_ptr.back(), int64_t{n} * nq);
  for (const int32_t v : {0, n / 2, n - 1}) {
    ASSERT_EQ(ix.queries_below(v).size(), static_cast<size_t>(nq));
    EXPECT_EQ(ix.queries_below(v)[nq - 1], nq - 1);
  }
  EXPECT_EQ(ix.own_queries(n - 1).size(), static_cast<size_t>(nq));
  EXPECT_TRUE(ix.own_queries(0).empty());
}

TEST(TreeValidate, IndexRejectsWhatItCannotWalk) {
  // build_index needs no validate() first: bad parents, dead query nodes and cycles throw.
  PrefixTree t = small_tree();
  t.nodes[1].parent = 99;
  expect_invalid([&] { build_index(t); }, {"nodes[1].parent", "unknown parent index 99"});
  t = small_tree();
  t.nodes[2].alive = false;
  expect_invalid([&] { build_index(t); }, {"query 1", "node index 2", "dead"});
  t = small_tree();
  t.nodes[0].parent = 2;  // 0 -> 2 -> 0: no root reaches the queries
  expect_invalid([&] { build_index(t); }, {"query 0", "not reachable"});
  t = small_tree();
  t.nodes[2].alive = false;
  t.query_node = {0};
  const TreeIndex ix = build_index(t);  // a dead leaf without queries is simply left out
  EXPECT_EQ(ix.depth[2], -1);
  EXPECT_EQ(ix.preorder.size(), 2u);
}

TEST(TreeValidate, IndexViews) {
  PrefixTree t = small_tree();
  t.nodes.push_back({13, 2, 3, 0, {3}, true});  // unused leaf under b (slot 0 of page 3 is free)
  t.nodes[3].page_offset = 0;
  EXPECT_NO_THROW(validate(t));
  const TreeIndex ix = build_index(t);
  EXPECT_EQ(ix.roots, std::vector<int32_t>({0}));
  EXPECT_EQ(ix.depth, std::vector<int32_t>({0, 1, 1, 2}));
  EXPECT_EQ(ix.start, std::vector<int64_t>({0, 20, 20, 32}));
  EXPECT_EQ(ids(ix.children(0)), std::vector<int32_t>({1, 2}));
  EXPECT_EQ(ids(ix.children(2)), std::vector<int32_t>({3}));
  EXPECT_EQ(ix.preorder, std::vector<int32_t>({0, 1, 2, 3}));
  EXPECT_EQ(ids(ix.queries_below(0)), std::vector<int32_t>({0, 1, 2}));
  EXPECT_EQ(ids(ix.queries_below(1)), std::vector<int32_t>({0}));
  EXPECT_TRUE(ix.queries_below(3).empty());
  EXPECT_EQ(query_path(t, 1), std::vector<int32_t>({0, 2}));
  EXPECT_EQ(query_context(t, 0), 25);
  EXPECT_EQ(query_context(t, 1), 32);
  EXPECT_EQ(query_context(t, 2), 20);
  EXPECT_EQ(unique_tokens(t), 20 + 5 + 12);  // the unused leaf does not count
  expect_invalid([&] { query_path(t, 3); }, {"q", "3"});
}

TEST(TreeValidate, ForestRandomTreesAreValid) {
  for (uint64_t seed = 0; seed < 200; ++seed) {
    RandomTreeOptions opts;
    opts.page_size = 1 + static_cast<int32_t>(seed % 33);
    opts.max_roots = 1 + static_cast<int32_t>(seed % 4);
    const PrefixTree t = random_tree(seed, opts);
    ASSERT_NO_THROW(validate(t)) << "seed " << seed;
    testing_util::expect_distinct_slots(t);
    // Every live node is used by a query, every leaf carries one.
    const TreeIndex ix = build_index(t);
    for (int32_t v : ix.preorder) ASSERT_FALSE(ix.queries_below(v).empty()) << "seed " << seed;
    // Deterministic per seed.
    testing_util::expect_same_tree(t, random_tree(seed, opts));
  }
}

}  // namespace
}  // namespace treeattn
