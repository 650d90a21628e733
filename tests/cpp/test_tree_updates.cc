// PrefixTree updates: unit cases for append (grow in place / copy-on-write fork), add, remove
// (pruning, page return, index shift), fork, their errors (the limits and pages are checked before
// anything changes: a refused update leaves the tree as it was, version included), the checked
// num_pages setter, the cost of many new pages, and random update sequences checked against an
// independent model of every query's logical token sequence plus a rebuild from the engine's
// block tables.
#include <gtest/gtest.h>

#include <chrono>
#include <functional>
#include <map>
#include <random>
#include <set>

#include "test_tree_util.h"
#include "treeattn/common/error.h"
#include "treeattn/tree/block_tables.h"
#include "treeattn/tree/json.h"
#include "treeattn/tree/levels.h"
#include "treeattn/tree/random_tree.h"

namespace treeattn {
namespace {

using testing_util::chain;
using testing_util::expect_invalid;
using testing_util::expect_rejected_unchanged;

// root 20 tokens (pages 0,1) with one query; P = 16; spare pages 10..13 in the pool.
PrefixTree one_query_tree() {
  PrefixTree t;
  t.page_size = 16;
  t.nodes = {{0, kNoParent, 20, 0, {0, 1}, true}};
  t.num_pages = 14;
  t.query_node = {0};
  t.free_pages = {13, 12, 11, 10};
  return t;
}

TEST(TreeUpdates, AppendGrowsLoneLeafInPlace) {
  PrefixTree t = one_query_tree();
  t.append_tokens(0, 12);  // fills page 1 exactly: no new page
  EXPECT_EQ(t.nodes.size(), 1u);
  EXPECT_EQ(t.nodes[0].tokens, 32);
  EXPECT_EQ(t.nodes[0].pages, std::vector<int32_t>({0, 1}));
  t.append_tokens(0, 17);  // two fresh pages from the back of the pool
  EXPECT_EQ(t.nodes[0].pages, std::vector<int32_t>({0, 1, 10, 11}));
  EXPECT_EQ(t.free_pages, std::vector<int32_t>({13, 12}));
  t.append_tokens(0, 16, {12, 7});  // given pages win; the used one leaves the pool
  EXPECT_EQ(t.nodes[0].pages, std::vector<int32_t>({0, 1, 10, 11, 12}));
  EXPECT_EQ(t.free_pages, std::vector<int32_t>({13}));
  EXPECT_NO_THROW(validate(t));
}

TEST(TreeUpdates, AppendForksWhenNodeIsShared) {
  PrefixTree t = one_query_tree();
  EXPECT_EQ(t.fork_query(0, 3), 1);
  EXPECT_EQ(t.query_node, std::vector<int32_t>({0, 0, 0}));
  t.append_tokens(1, 5);
  ASSERT_EQ(t.nodes.size(), 2u);
  EXPECT_EQ(t.nodes[1].parent, 0);
  EXPECT_EQ(t.nodes[1].page_offset, 4);                     // starts at position 20 = page 1 slot 4
  EXPECT_EQ(t.nodes[1].pages, std::vector<int32_t>({10}));  // fresh copy-on-write page
  EXPECT_EQ(t.nodes[1].id, 1);
  EXPECT_EQ(t.query_node, std::vector<int32_t>({0, 1, 0}));
  // The root is no longer a leaf: the lone query left on it also forks.
  t.remove_query(2);
  t.append_tokens(0, 1);
  EXPECT_EQ(t.nodes.size(), 3u);
  EXPECT_EQ(t.nodes[0].tokens, 20);
  EXPECT_EQ(t.query_node, std::vector<int32_t>({2, 1}));
  EXPECT_NO_THROW(validate(t));
  testing_util::expect_distinct_slots(t);
}

TEST(TreeUpdates, RemovePrunesAndReturnsPages) {
  PrefixTree t = one_query_tree();
  t.fork_query(0, 2);
  t.append_tokens(1, 28);  // child: offset 4, 28 tokens -> pages 10, 11
  EXPECT_EQ(t.nodes[1].pages, std::vector<int32_t>({10, 11}));
  t.add_query(1);     // query 2 on the child too
  t.remove_query(1);  // child still used by query 1 (was 2)
  EXPECT_TRUE(t.nodes[1].alive);
  EXPECT_EQ(t.query_node, std::vector<int32_t>({0, 1}));
  t.remove_query(1);
  EXPECT_FALSE(t.nodes[1].alive);
  EXPECT_TRUE(t.nodes[1].pages.empty());
  EXPECT_EQ(t.free_pages, std::vector<int32_t>({13, 12, 10, 11}));
  EXPECT_EQ(t.query_node, std::vector<int32_t>({0}));
  EXPECT_NO_THROW(validate(t));
  expect_invalid([&] { t.remove_query(0); }, {"q", "last query"});
  expect_invalid([&] { t.add_query(1); }, {"node", "dead"});
}

TEST(TreeUpdates, Errors) {
  PrefixTree t = one_query_tree();
  expect_invalid([&] { t.append_tokens(1, 1); }, {"q", "1"});
  expect_invalid([&] { t.append_tokens(0, 0); }, {"k", "0"});
  expect_invalid([&] { t.append_tokens(0, 1000); }, {"new_pages", "pool"});
  expect_invalid([&] { t.append_tokens(0, 40, {5}); }, {"new_pages", "need 2"});
  expect_invalid([&] { t.append_tokens(0, 40, {5, 99}); }, {"new_pages[1]", "99"});
  expect_invalid([&] { t.append_tokens(0, 40, {5, 5, 6}); }, {"new_pages[1]", "repeated"});
  expect_invalid([&] { t.fork_query(0, 0); }, {"n", "0"});
  expect_invalid([&] { t.fork_query(-1, 2); }, {"q"});
  expect_invalid([&] { t.add_query(5); }, {"node", "5"});
  expect_invalid([&] { t.remove_query(3); }, {"q", "3"});
  // Failed calls leave the tree unchanged.
  EXPECT_EQ(t.nodes[0].tokens, 20);
  EXPECT_EQ(t.free_pages.size(), 4u);
  EXPECT_EQ(t.num_queries(), 1);
}

TEST(TreeUpdates, PathDepthLimitCheckedBeforeForkAndAdd) {
  PrefixTree t = chain(4096);
  // 8192 queries of path length 4096 are exactly kMaxPathDepthSum = 2^25; one more is over.
  ASSERT_EQ(int64_t{4096} * 8192, kMaxPathDepthSum);
  expect_rejected_unchanged(t, [](PrefixTree& x) { x.fork_query(0, 8193); },
                            {"n", "path-depth sum", "kMaxPathDepthSum"});
  t.fork_query(0, 8192);
  validate(t);
  expect_rejected_unchanged(t, [](PrefixTree& x) { x.add_query(4095); },
                            {"node", "kMaxPathDepthSum"});
  // The root is one node deep, but the sum is already at the limit.
  expect_rejected_unchanged(t, [](PrefixTree& x) { x.add_query(0); }, {"node", "kMaxPathDepthSum"});
  // An append that forks a child lengthens a path by one node.
  t.free_pages = {t.num_pages};
  t.num_pages += 1;
  expect_rejected_unchanged(t, [](PrefixTree& x) { x.append_tokens(3, 1); },
                            {"q", "kMaxPathDepthSum"});
  t.remove_query(0);
  t.append_tokens(3, 1);  // room for one more node now
  validate(t);
}

TEST(TreeUpdates, TokenLimitCheckedBeforeAppend) {
  // Two roots of 2^30 and 2^30 - 100 tokens (page size 4096): 2^31 - 100 tokens in all.
  PrefixTree t = tree_from_json(R"({"page_size": 4096, "num_pages": 524290,
      "nodes": [{"id": 0, "tokens": 1073741824}, {"id": 1, "tokens": 1073741724}],
      "queries": [{"node": 0}, {"node": 1}], "free_pages": [524288, 524289]})");
  // Growing root 1 by 200 keeps it under 2^31 - 1 tokens but the tree over kMaxTreeTokens.
  expect_rejected_unchanged(t, [](PrefixTree& x) { x.append_tokens(1, 200); },
                            {"k", "kMaxTreeTokens"});
  // The same through a fork (root 0 shared by two queries).
  t.fork_query(0, 2);
  expect_rejected_unchanged(t, [](PrefixTree& x) { x.append_tokens(2, 200); },
                            {"k", "kMaxTreeTokens"});
  t.append_tokens(1, 99);  // exactly at the limit
  EXPECT_EQ(unique_tokens(t), kMaxTreeTokens);
  validate(t);
}

TEST(TreeUpdates, NumPagesSetterAndShrunkenPool) {
  PrefixTree t = one_query_tree();  // pages 0, 1 in use; pool 10..13; num_pages 14
  expect_rejected_unchanged(t, [](PrefixTree& x) { x.set_num_pages(-5); }, {"num_pages", "-5"});
  expect_rejected_unchanged(t, [](PrefixTree& x) { x.set_num_pages(1); },
                            {"num_pages", "page id 1", "in use"});
  expect_rejected_unchanged(t, [](PrefixTree& x) { x.set_num_pages(12); },
                            {"num_pages", "page id 13", "free_pages"});
  const uint64_t v = t.version;
  t.set_num_pages(20);
  EXPECT_EQ(t.num_pages, 20);
  EXPECT_EQ(t.version, v + 1);
  validate(t);
  // num_pages written directly below the pool: the append refuses to hand out page 10.
  t.num_pages = 10;
  expect_rejected_unchanged(t, [](PrefixTree& x) { x.append_tokens(0, 13); },
                            {"free_pages[3]", "page id 10", "num_pages=10"});
  // Given pages are checked the same way, and a page in use is refused.
  expect_rejected_unchanged(t, [](PrefixTree& x) { x.append_tokens(0, 13, {12}); },
                            {"new_pages[0]", "out of range"});
  t.num_pages = 20;
  expect_rejected_unchanged(t, [](PrefixTree& x) { x.append_tokens(0, 13, {1}); },
                            {"new_pages[0]", "in use"});
  expect_rejected_unchanged(t,
                            [](PrefixTree& x) {
                              x.append_tokens(0, 60, {5, 6, 5});
                            },
                            {"new_pages[2]", "repeated"});
}

TEST(TreeUpdates, ManyNewPagesAreCheckedInLinearTime) {
  // 200k tokens at page size 1 on fresh pages that the pool also lists: the repeat check, the
  // in-use check and the removal from the pool used to compare every pair (tens of seconds).
  constexpr int32_t kPages = 200000;
  PrefixTree t = one_query_tree();
  t.page_size = 1;
  t.nodes[0].tokens = 2;
  t.num_pages = kPages + 2;
  t.free_pages.clear();
  std::vector<int32_t> fresh(kPages);
  for (int32_t i = 0; i < kPages; ++i) fresh[i] = kPages + 1 - i;  // 200001 .. 2
  t.free_pages = fresh;
  validate(t);
  const auto t0 = std::chrono::steady_clock::now();
  t.append_tokens(0, kPages, fresh);
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_LT(seconds, 2.0);  // milliseconds when linear
  EXPECT_EQ(t.nodes[0].tokens, kPages + 2);
  EXPECT_TRUE(t.free_pages.empty());
  validate(t);
  // The repeat is found at its later position also among many pages.
  fresh.back() = fresh.front();
  PrefixTree u = one_query_tree();
  u.page_size = 1;
  u.nodes[0].tokens = 2;
  u.num_pages = kPages + 2;
  u.free_pages.clear();
  expect_rejected_unchanged(u, [&](PrefixTree& x) { x.append_tokens(0, kPages, fresh); },
                            {"new_pages[199999]", "repeated"});
}

// Model: per query, the logical ids of its tokens. Checks the tree against it.
struct Model {
  std::vector<std::vector<int64_t>> seq;
  int64_t next_id = 0;
};

Model model_of(const PrefixTree& t) {
  Model m;
  std::map<std::pair<int32_t, int32_t>, int64_t> id_of;  // (node, token) -> logical id
  for (int32_t q = 0; q < t.num_queries(); ++q) {
    std::vector<int64_t> s;
    for (int32_t v : query_path(t, q)) {
      for (int32_t i = 0; i < t.nodes[v].tokens; ++i) {
        auto [it, fresh] = id_of.emplace(std::make_pair(v, i), m.next_id);
        if (fresh) ++m.next_id;
        s.push_back(it->second);
      }
    }
    m.seq.push_back(std::move(s));
  }
  return m;
}

void check_against_model(const PrefixTree& t, const Model& m, const std::string& where) {
  ASSERT_NO_THROW(validate(t)) << where;
  ASSERT_EQ(static_cast<size_t>(t.num_queries()), m.seq.size()) << where;
  std::map<int64_t, std::pair<int32_t, int32_t>> slot_of;
  std::map<std::pair<int32_t, int32_t>, int64_t> id_at;
  std::set<int64_t> ids;
  for (int32_t q = 0; q < t.num_queries(); ++q) {
    const auto ex = testing_util::expand(t, q);
    ASSERT_EQ(ex.size(), m.seq[q].size()) << where << " query " << q;
    for (size_t k = 0; k < ex.size(); ++k) {
      const int64_t id = m.seq[q][k];
      ids.insert(id);
      ASSERT_EQ(ex[k].second, static_cast<int32_t>(k % t.page_size)) << where;  // vLLM slots
      auto [a, fa] = slot_of.emplace(id, ex[k]);
      ASSERT_EQ(a->second, ex[k]) << where << ": one token read from two places";
      auto [b, fb] = id_at.emplace(ex[k], id);
      ASSERT_EQ(b->second, id) << where << ": two tokens share page " << ex[k].first << " slot "
                               << ex[k].second;
    }
  }
  // Nothing unused is kept: the tree holds exactly the distinct tokens of the live queries.
  ASSERT_EQ(unique_tokens(t), static_cast<int64_t>(ids.size())) << where;
  int64_t live_tokens = 0;
  std::set<int32_t> live_pages;
  for (const TreeNode& nd : t.nodes) {
    if (!nd.alive) continue;
    live_tokens += nd.tokens;
    live_pages.insert(nd.pages.begin(), nd.pages.end());
  }
  ASSERT_EQ(live_tokens, static_cast<int64_t>(ids.size())) << where;
  std::set<int32_t> free(t.free_pages.begin(), t.free_pages.end());
  ASSERT_EQ(free.size(), t.free_pages.size()) << where << ": page twice in the pool";
  for (int32_t p : free) ASSERT_EQ(live_pages.count(p), 0u) << where << ": page " << p;
  // Rebuild from the engine's view: block tables -> tree. Same lengths; every token of the
  // rebuilt tree reads the block-table page, which is the updated tree's page except where a
  // later node restarted that page as its copy-on-write twin.
  std::vector<std::vector<int32_t>> bt;
  std::vector<int64_t> lens;
  to_block_tables(t, &bt, &lens);
  const PrefixTree r = tree_from_block_tables(bt, lens, t.page_size, t.num_pages);
  ASSERT_EQ(r.num_queries(), t.num_queries());
  for (int32_t q = 0; q < t.num_queries(); ++q) {
    ASSERT_EQ(query_context(r, q), static_cast<int64_t>(m.seq[q].size())) << where;
    const auto ex_t = testing_util::expand(t, q);
    const auto ex_r = testing_util::expand(r, q);
    std::set<int32_t> twins;
    for (int32_t v : query_path(t, q))
      if (t.nodes[v].page_offset > 0) twins.insert(t.nodes[v].pages[0]);
    for (size_t k = 0; k < ex_t.size(); ++k) {
      ASSERT_EQ(ex_r[k].second, ex_t[k].second);
      ASSERT_EQ(ex_r[k].first, bt[q][k / t.page_size]);
      ASSERT_TRUE(ex_r[k].first == ex_t[k].first || twins.count(ex_r[k].first)) << where;
    }
  }
}

TEST(TreeUpdates, RandomSequencesMatchModelAndRebuild) {
  for (uint64_t seed = 0; seed < 60; ++seed) {
    RandomTreeOptions opts;
    opts.page_size = static_cast<int32_t>(std::vector<int>{1, 4, 16, 5}[seed % 4]);
    opts.max_nodes = 12;
    opts.max_queries = 10;
    opts.max_tokens_per_node = 40;
    PrefixTree t = random_tree(seed, opts);
    Model m = model_of(t);
    std::mt19937_64 rng(seed + 1000);
    auto rnd = [&](int64_t lo, int64_t hi) {
      return lo + static_cast<int64_t>(rng() % static_cast<uint64_t>(hi - lo + 1));
    };
    check_against_model(t, m, "initial");
    for (int step = 0; step < 40; ++step) {
      // Keep the pool stocked: the engine may grow its cache.
      if (t.free_pages.size() < 8) {
        for (int k = 0; k < 16; ++k) t.free_pages.push_back(t.num_pages++);
      }
      const int64_t op = rnd(0, 9);
      const int32_t q = static_cast<int32_t>(rnd(0, t.num_queries() - 1));
      std::string what;
      if (op <= 4) {
        const int32_t k = static_cast<int32_t>(rnd(0, 1) ? 1 : rnd(1, 2 * t.page_size + 1));
        what = treeattn::detail::concat("append q", q, " k", k);
        if (rnd(0, 3) == 0) {
          // Pass pages explicitly (taken from the pool's front; more than needed is fine).
          const size_t cnt = std::min<size_t>(t.free_pages.size(), k / t.page_size + 2);
          std::vector<int32_t> given(t.free_pages.begin(), t.free_pages.begin() + cnt);
          t.append_tokens(q, k, given);
        } else {
          t.append_tokens(q, k);
        }
        for (int32_t i = 0; i < k; ++i) m.seq[q].push_back(m.next_id++);
      } else if (op == 5) {
        // A query on a random live node: its tokens are a prefix of any query below it.
        const TreeIndex ix = build_index(t);
        const int32_t v = ix.preorder[rnd(0, ix.preorder.size() - 1)];
        const int32_t below = ix.queries_below(v)[0];
        what = treeattn::detail::concat("add node", v);
        t.add_query(v);
        const size_t len = static_cast<size_t>(ix.start[v] + t.nodes[v].tokens);
        m.seq.emplace_back(m.seq[below].begin(), m.seq[below].begin() + len);
      } else if (op <= 7) {
        if (t.num_queries() == 1) continue;
        what = treeattn::detail::concat("remove q", q);
        t.remove_query(q);
        m.seq.erase(m.seq.begin() + q);
      } else {
        const int32_t n = static_cast<int32_t>(rnd(1, 3));
        what = treeattn::detail::concat("fork q", q, " n", n);
        EXPECT_EQ(t.fork_query(q, n), static_cast<int32_t>(m.seq.size()));
        for (int32_t i = 1; i < n; ++i) m.seq.push_back(m.seq[q]);
      }
      check_against_model(t, m, treeattn::detail::concat("seed ", seed, " step ", step, " ", what));
      if (::testing::Test::HasFatalFailure()) return;
    }
  }
}

}  // namespace
}  // namespace treeattn
