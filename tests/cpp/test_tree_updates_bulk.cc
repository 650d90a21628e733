// PrefixTree's whole-step updates, append_tokens_bulk and set_query_nodes: each gives the tree
// that the one-query updates give applied one after another (random trees; pages from the pool or
// given), refuses bad input with an error naming the argument and leaves the tree exactly as it
// was, and runs in linear time on sizes where one update per query is quadratic.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <random>

#include "test_tree_util.h"
#include "treeattn/common/error.h"
#include "treeattn/tree/block_tables.h"
#include "treeattn/tree/random_tree.h"

namespace treeattn {
namespace {

using testing_util::expect_rejected_unchanged;

// Same live structure, same node slots (dead ones included) and the same pool, in order.
void expect_identical(const PrefixTree& a, const PrefixTree& b, const std::string& where) {
  SCOPED_TRACE(where);
  ASSERT_EQ(a.nodes.size(), b.nodes.size());
  for (size_t i = 0; i < a.nodes.size(); ++i) ASSERT_EQ(a.nodes[i].alive, b.nodes[i].alive) << i;
  testing_util::expect_same_tree(a, b);
  EXPECT_EQ(a.query_node, b.query_node);
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// A random tree with queries sharing nodes (so that appends fork) and a stocked pool.
PrefixTree random_step_tree(uint64_t seed, std::mt19937_64& rng) {
  RandomTreeOptions opts;
  opts.page_size = std::vector<int32_t>{1, 4, 16, 5}[seed % 4];
  opts.max_nodes = 14;
  opts.max_queries = 12;
  opts.max_tokens_per_node = 40;
  PrefixTree t = random_tree(seed, opts);
  for (int k = 0; k < 3; ++k) t.fork_query(static_cast<int32_t>(rng() % t.num_queries()), 2);
  for (int k = 0; k < 200; ++k) t.free_pages.push_back(t.num_pages++);
  return t;
}

TEST(TreeUpdatesBulk, AppendEqualsAppendPerQueryInOrder) {
  int64_t grown = 0, forked = 0, forked_mid_page = 0;  // the cases covered
  for (uint64_t seed = 0; seed < 80; ++seed) {
    std::mt19937_64 rng(seed + 7);
    const PrefixTree t = random_step_tree(seed, rng);
    // A random subset of the queries in random order, 1 or up to 2P+1 tokens each.
    std::vector<int32_t> qs(t.num_queries());
    for (int32_t q = 0; q < t.num_queries(); ++q) qs[q] = q;
    std::shuffle(qs.begin(), qs.end(), rng);
    qs.resize(1 + rng() % qs.size());
    std::vector<int32_t> ks;
    for (size_t i = 0; i < qs.size(); ++i)
      ks.push_back(rng() % 2 ? 1 : static_cast<int32_t>(1 + rng() % (2 * t.page_size + 1)));
    const std::string where = detail::concat("seed ", seed);

    // Pages from the pool.
    PrefixTree one = t, bulk = t;
    std::vector<int64_t> need;  // fresh pages each append took
    for (size_t i = 0; i < qs.size(); ++i) {
      const size_t pool = one.free_pages.size();
      one.append_tokens(qs[i], ks[i]);
      need.push_back(static_cast<int64_t>(pool - one.free_pages.size()));
    }
    bulk.append_tokens_bulk(qs, ks);
    expect_identical(one, bulk, where + " pool");
    for (size_t v = t.nodes.size(); v < bulk.nodes.size(); ++v)
      forked_mid_page += bulk.nodes[v].page_offset > 0;
    forked += static_cast<int64_t>(bulk.nodes.size() - t.nodes.size());
    grown +=
        static_cast<int64_t>(qs.size()) - static_cast<int64_t>(bulk.nodes.size() - t.nodes.size());
    EXPECT_EQ(bulk.version, t.version + 1);
    ASSERT_NO_THROW(validate(bulk)) << where;

    // Given pages: fresh ids above num_pages, shuffled, split by page_ptr.
    PrefixTree base = t;
    const int32_t first = base.num_pages;
    std::vector<int64_t> ptr{0};
    for (const int64_t n : need) ptr.push_back(ptr.back() + n);
    base.num_pages += static_cast<int32_t>(ptr.back());
    std::vector<int32_t> given(ptr.back());
    for (size_t k = 0; k < given.size(); ++k) given[k] = first + static_cast<int32_t>(k);
    std::shuffle(given.begin(), given.end(), rng);
    one = base;
    bulk = base;
    for (size_t i = 0; i < qs.size(); ++i)
      one.append_tokens(qs[i], ks[i],
                        std::vector<int32_t>(given.begin() + ptr[i], given.begin() + ptr[i + 1]));
    bulk.append_tokens_bulk(qs, ks, ptr, given);
    expect_identical(one, bulk, where + " given");
    EXPECT_EQ(bulk.free_pages, base.free_pages) << where;  // given pages were not pooled
    ASSERT_NO_THROW(validate(bulk)) << where;
    if (::testing::Test::HasFatalFailure()) return;
  }
  EXPECT_GT(grown, 50);
  EXPECT_GT(forked, 50);
  EXPECT_GT(forked_mid_page, 20);
}

// root: 20 tokens on pages 0, 1 (P = 16) with queries 0 and 1 on it (appends fork), and a child
// with 28 tokens on pages 2, 3 where query 2 sits alone (appends grow it); pool 12, 11, 10.
PrefixTree small_tree() {
  PrefixTree t;
  t.page_size = 16;
  t.nodes = {{0, kNoParent, 20, 0, {0, 1}, true}, {1, 0, 28, 4, {2, 3}, true}};
  t.num_pages = 14;
  t.query_node = {0, 0, 1};
  t.free_pages = {12, 11, 10};
  validate(t);
  return t;
}

TEST(TreeUpdatesBulk, AppendRefusesBadInputAndLeavesTreeUnchanged) {
  PrefixTree t = small_tree();
  using V = std::vector<int32_t>;
  using P = std::vector<int64_t>;
  const auto bulk = [](V qs, V ks, P ptr = {}, V pages = {}) {
    return [=](PrefixTree& x) { x.append_tokens_bulk(qs, ks, ptr, pages); };
  };
  expect_rejected_unchanged(t, bulk({0, 2}, {1}), {"counts", "expected 2"});
  expect_rejected_unchanged(t, bulk({0, 3}, {1, 1}), {"queries[1]", "out of range"});
  expect_rejected_unchanged(t, bulk({2, 0, 2}, {1, 1, 1}), {"queries[2]", "listed twice"});
  expect_rejected_unchanged(t, bulk({0, 2}, {1, 0}), {"counts[1]", "must be >= 1"});
  // Query 0 forks a child at slot 4 of a fresh page: 1 page; query 2 grows its leaf from slot 0
  // of page 3 (32 tokens used, page 3 full after 0): 40 tokens -> 3 pages.
  expect_rejected_unchanged(t, bulk({0, 2}, {1, 40}, {0, 1}, {5}), {"page_ptr", "expected 3"});
  expect_rejected_unchanged(t, bulk({0, 2}, {1, 40}, {1, 1, 4}, {5, 6, 7, 8}),
                            {"page_ptr", "start at 0"});
  expect_rejected_unchanged(t, bulk({0, 2}, {1, 40}, {0, 3, 2}, {5, 6, 7, 8}),
                            {"page_ptr[2]", "below"});
  expect_rejected_unchanged(t, bulk({0, 2}, {1, 40}, {0, 1, 3}, {5, 6, 7, 8}),
                            {"page_ptr", "len(new_pages) = 4"});
  expect_rejected_unchanged(
      t, bulk({0, 2}, {1, 40}, {0, 2, 4}, {5, 6, 7, 8}),
      {"new_pages", "query 0", "queries[0]", "needs exactly 1", "gives it 2"});
  expect_rejected_unchanged(t, bulk({0, 2}, {1, 40}, {0, 1, 4}, {5, 6, 3, 8}),
                            {"new_pages[2]", "in use"});
  expect_rejected_unchanged(t, bulk({0, 2}, {1, 40}, {0, 1, 4}, {5, 6, 7, 5}),
                            {"new_pages[3]", "repeated"});
  expect_rejected_unchanged(t, bulk({0, 2}, {1, 40}, {0, 1, 4}, {5, 6, 14, 7}),
                            {"new_pages[2]", "out of range"});
  expect_rejected_unchanged(t, bulk({0, 2}, {1, 60}), {"new_pages", "pool holds 3", "need 5"});
  expect_rejected_unchanged(t, bulk({0, 2}, {1, 2147483600}), {"counts", "kMaxTreeTokens"});
  // The same calls, well formed, succeed; the given pages leave the pool where it lists them.
  PrefixTree u = t;
  u.append_tokens_bulk({0, 2}, {1, 40}, {0, 1, 4}, {10, 5, 6, 7});
  EXPECT_EQ(u.free_pages, V({12, 11}));
  EXPECT_EQ(u.nodes[1].pages, V({2, 3, 5, 6, 7}));
  ASSERT_EQ(u.nodes.size(), 3u);
  EXPECT_EQ(u.nodes[2].pages, V({10}));
  EXPECT_EQ(u.nodes[2].page_offset, 4);
  EXPECT_EQ(u.query_node, V({2, 0, 1}));
  validate(u);
  // An empty call changes nothing, version included.
  u = t;
  u.append_tokens_bulk({}, {});
  EXPECT_EQ(u.version, t.version);
}

TEST(TreeUpdatesBulk, AppendForksCheckedAgainstThePathDepthLimit) {
  // A chain of 4096 one-token nodes with 8191 queries on its leaf: path-depth sum 2^25 - 4096.
  PrefixTree t = testing_util::chain(4096);
  t.fork_query(0, 8191);
  t.free_pages = {t.num_pages, t.num_pages + 1};
  t.num_pages += 2;
  // Each append forks a child and lengthens its query's path by one node: 4096 forks fit, 4097
  // do not.
  std::vector<int32_t> qs(4097), ks(4097, 1);
  for (int32_t i = 0; i < 4097; ++i) qs[i] = i;
  expect_rejected_unchanged(t, [&](PrefixTree& x) { x.append_tokens_bulk(qs, ks); },
                            {"queries", "kMaxPathDepthSum"});
}

TEST(TreeUpdatesBulk, WholeStepOnManyQueriesTakesLinearTime) {
  // 100k requests under one 16-token root, each alone on a leaf of 4 tokens (page size 16): one
  // append_tokens or remove_query per request scans the whole tree, 10^10 steps in all.
  constexpr int32_t kRows = 100000;
  std::vector<std::vector<int32_t>> bt(kRows);
  for (int32_t r = 0; r < kRows; ++r) bt[r] = {0, r + 1};
  PrefixTree t = tree_from_block_tables(bt, std::vector<int64_t>(kRows, 20), 16, 2 * kRows + 1);
  std::vector<int32_t> qs(kRows), ks(kRows);
  std::vector<int64_t> ptr(kRows + 1);
  std::vector<int32_t> pages(kRows);
  for (int32_t r = 0; r < kRows; ++r) {
    qs[r] = kRows - 1 - r;  // any order
    ks[r] = 13;             // 4 + 13 tokens: one fresh page each
    ptr[r + 1] = r + 1;
    pages[r] = kRows + 1 + r;
  }
  auto t0 = std::chrono::steady_clock::now();
  t.append_tokens_bulk(qs, ks, ptr, pages);
  EXPECT_LT(seconds_since(t0), 2.0);  // milliseconds when linear
  EXPECT_EQ(t.nodes[t.query_node[0]].pages, std::vector<int32_t>({1, 2 * kRows}));
  // Half the requests finish and the rest are reversed, in one call.
  std::vector<int32_t> nodes;
  for (int32_t q = kRows - 1; q >= 0; q -= 2) nodes.push_back(t.query_node[q]);
  t0 = std::chrono::steady_clock::now();
  t.set_query_nodes(nodes);
  EXPECT_LT(seconds_since(t0), 2.0);
  EXPECT_EQ(t.num_queries(), kRows / 2);
  EXPECT_EQ(t.free_pages.size(), static_cast<size_t>(kRows));  // 2 pages per finished request
  validate(t);
}

TEST(TreeUpdatesBulk, SetQueryNodesEqualsAddingThenRemoving) {
  for (uint64_t seed = 0; seed < 80; ++seed) {
    std::mt19937_64 rng(seed + 99);
    const PrefixTree t = random_step_tree(seed, rng);
    const TreeIndex ix = build_index(t);
    // New rows: some previous queries' nodes (permuted, some repeated, some dropped) and some
    // random live nodes (requests joining anywhere).
    std::vector<int32_t> nodes;
    for (int32_t q = 0; q < t.num_queries(); ++q)
      for (uint64_t c = rng() % 3; c > 0; --c) nodes.push_back(t.query_node[q]);
    for (uint64_t c = rng() % 4; c > 0; --c)
      nodes.push_back(ix.preorder[rng() % ix.preorder.size()]);
    if (nodes.empty()) nodes.push_back(ix.preorder[0]);
    std::shuffle(nodes.begin(), nodes.end(), rng);
    PrefixTree one = t, bulk = t;
    for (const int32_t v : nodes) one.add_query(v);
    for (int32_t q = t.num_queries() - 1; q >= 0; --q) one.remove_query(q);
    bulk.set_query_nodes(nodes);
    const std::string where = detail::concat("seed ", seed);
    EXPECT_EQ(bulk.version, t.version + 1) << where;
    // Same nodes die; the pool gets the same pages (in another order: once per call).
    std::sort(one.free_pages.begin(), one.free_pages.end());
    std::sort(bulk.free_pages.begin(), bulk.free_pages.end());
    expect_identical(one, bulk, where);
    ASSERT_NO_THROW(validate(bulk)) << where;
    if (::testing::Test::HasFatalFailure()) return;
  }
}

TEST(TreeUpdatesBulk, SetQueryNodesRefusesBadInputAndLeavesTreeUnchanged) {
  PrefixTree t = small_tree();
  t.remove_query(2);  // node 1 dies
  const auto set = [](std::vector<int32_t> nodes) {
    return [=](PrefixTree& x) { x.set_query_nodes(nodes); };
  };
  expect_rejected_unchanged(t, set({}), {"nodes", "at least one query"});
  expect_rejected_unchanged(t, set({0, 0, 2}), {"nodes[2]", "out of range"});
  expect_rejected_unchanged(t, set({0, -1}), {"nodes[1]", "out of range"});
  expect_rejected_unchanged(t, set({0, 1}), {"nodes[1]", "dead"});
  // A chain of 4096 nodes: 8192 queries on its leaf are at the limit, 8193 above it.
  PrefixTree c = testing_util::chain(4096);
  expect_rejected_unchanged(c, set(std::vector<int32_t>(8193, c.query_node[0])),
                            {"nodes", "kMaxPathDepthSum"});
  c.set_query_nodes(std::vector<int32_t>(8192, c.query_node[0]));
  validate(c);
}

}  // namespace
}  // namespace treeattn
