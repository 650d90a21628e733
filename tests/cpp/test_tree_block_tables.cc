// Block tables <-> tree: the sharing rule's edge cases (partial last page, prefix requests,
// identical requests, a request ending inside a page another one fills further, equal page ids at
// non-leading positions), input errors, random round trips, and the trie's shortcut over the
// leading run a row shares with the row before it against a plain trie.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <random>
#include <tuple>

#include "test_tree_util.h"
#include "treeattn/tree/block_tables.h"
#include "treeattn/tree/random_tree.h"

namespace treeattn {
namespace {

using testing_util::expect_invalid;
using Tables = std::vector<std::vector<int32_t>>;

TEST(TreeBlockTables, SharedFullPagesThenDiverge) {
  const PrefixTree t = tree_from_block_tables({{1, 2, 3}, {1, 2, 4, 5}}, {48, 60}, 16);
  ASSERT_NO_THROW(validate(t));
  ASSERT_EQ(t.nodes.size(), 3u);
  EXPECT_EQ(t.nodes[0].pages, std::vector<int32_t>({1, 2}));
  EXPECT_EQ(t.nodes[0].tokens, 32);
  EXPECT_EQ(t.nodes[1].pages, std::vector<int32_t>({3}));
  EXPECT_EQ(t.nodes[2].pages, std::vector<int32_t>({4, 5}));
  EXPECT_EQ(t.nodes[2].tokens, 28);
  EXPECT_EQ(t.query_node, std::vector<int32_t>({1, 2}));
  EXPECT_EQ(t.num_pages, 6);
  EXPECT_EQ(unique_tokens(t), 32 + 16 + 28);
}

TEST(TreeBlockTables, IdenticalRequestsShareOneNode) {
  const PrefixTree t = tree_from_block_tables({{7, 8, 9}, {7, 8, 9}, {7, 8, 9}}, {40, 40, 40}, 16);
  ASSERT_EQ(t.nodes.size(), 1u);
  EXPECT_EQ(t.nodes[0].tokens, 40);
  EXPECT_EQ(t.query_node, std::vector<int32_t>({0, 0, 0}));
}

TEST(TreeBlockTables, PartialLastPageSharedOnlyWithSameLength) {
  // Same pages, lengths 40 and 45: the partial page 9 is not shared.
  const PrefixTree t = tree_from_block_tables({{7, 8, 9}, {7, 8, 9}}, {40, 45}, 16);
  ASSERT_EQ(t.nodes.size(), 3u);
  EXPECT_EQ(t.nodes[0].tokens, 32);
  EXPECT_EQ(t.nodes[1].tokens, 8);
  EXPECT_EQ(t.nodes[2].tokens, 13);
  EXPECT_EQ(t.nodes[1].pages, std::vector<int32_t>({9}));
  EXPECT_EQ(t.nodes[2].pages, std::vector<int32_t>({9}));
  EXPECT_EQ(t.nodes[1].parent, 0);
  EXPECT_EQ(t.nodes[2].parent, 0);
}

TEST(TreeBlockTables, PageAlignedPrefixRequestSitsOnInternalNode) {
  const PrefixTree t = tree_from_block_tables({{1, 2}, {1, 2, 3, 4}}, {32, 60}, 16);
  ASSERT_EQ(t.nodes.size(), 2u);
  EXPECT_EQ(t.nodes[0].pages, std::vector<int32_t>({1, 2}));
  EXPECT_EQ(t.nodes[1].pages, std::vector<int32_t>({3, 4}));
  EXPECT_EQ(t.query_node, std::vector<int32_t>({0, 1}));
  // Same when the longer request comes first (the node is split at the page boundary).
  const PrefixTree u = tree_from_block_tables({{1, 2, 3, 4}, {1, 2}}, {60, 32}, 16);
  ASSERT_EQ(u.nodes.size(), 2u);
  EXPECT_EQ(u.query_node, std::vector<int32_t>({1, 0}));
  EXPECT_EQ(u.nodes[0].tokens, 32);
}

TEST(TreeBlockTables, ShorterRequestEndingMidPageGetsOwnTailNode) {
  // r0 = 20 tokens on pages 1,2 (page 2 holds 4); r1 = 40 tokens fills page 2 and goes on to 3.
  const PrefixTree t = tree_from_block_tables({{1, 2}, {1, 2, 3}}, {20, 40}, 16);
  ASSERT_EQ(t.nodes.size(), 3u);
  EXPECT_EQ(t.nodes[0].pages, std::vector<int32_t>({1}));  // last FULL shared page
  EXPECT_EQ(t.nodes[1].pages, std::vector<int32_t>({2}));  // r0's one-page tail
  EXPECT_EQ(t.nodes[1].tokens, 4);
  EXPECT_EQ(t.nodes[2].pages, std::vector<int32_t>({2, 3}));
  EXPECT_EQ(t.nodes[2].tokens, 24);
  EXPECT_EQ(t.query_node, std::vector<int32_t>({1, 2}));
}

TEST(TreeBlockTables, SamePageAtNonLeadingPositionIsNotShared) {
  const PrefixTree t = tree_from_block_tables({{1, 5, 6}, {1, 5, 7}}, {48, 48}, 16);
  EXPECT_EQ(build_index(t).roots.size(), 1u);
  EXPECT_EQ(unique_tokens(t), 64);
  // Sharing is positional, and a page slot holds one token of one sequence: page 1 at position 1
  // and at position 0, or pages 5, 6 after two different first pages, are refused (issue 11).
  expect_invalid(
      [] {
        tree_from_block_tables({{1, 2}, {3, 1}}, {32, 32}, 16);
      },
      {"nodes[1].pages[1]", "page 1 slot 0", "another position"});
  expect_invalid(
      [] {
        tree_from_block_tables({{1, 5, 6}, {2, 5, 6}}, {48, 48}, 16);
      },
      {"pages[1]", "page 5", "another prefix"});
}

TEST(TreeBlockTables, PaddedTablesAndPageSizeOne) {
  const PrefixTree t = tree_from_block_tables({{4, 0, 0, -1}, {4, 5}}, {16, 17}, 16, 8);
  ASSERT_EQ(t.nodes.size(), 2u);  // r0 ends on the full page 4: internal node
  EXPECT_EQ(t.num_pages, 8);
  EXPECT_EQ(t.query_node, std::vector<int32_t>({0, 1}));
  const PrefixTree one = tree_from_block_tables({{0, 1, 2}, {0, 1, 3}}, {3, 3}, 1);
  EXPECT_EQ(one.nodes[0].tokens, 2);
  EXPECT_EQ(one.nodes.size(), 3u);
}

TEST(TreeBlockTables, Errors) {
  expect_invalid([] { tree_from_block_tables({}, {}, 16); }, {"block_tables", "empty"});
  expect_invalid([] { tree_from_block_tables({{1}}, {16, 3}, 16); }, {"seq_lens", "2 entries"});
  expect_invalid([] { tree_from_block_tables({{1}, {2}}, {16, 0}, 16); }, {"seq_lens[1]", "got 0"});
  expect_invalid([] { tree_from_block_tables({{1}, {2}}, {16, -4}, 16); }, {"seq_lens[1]"});
  expect_invalid(
      [] {
        tree_from_block_tables({{1}, {2}}, {16, 17}, 16);
      },
      {"block_tables[1]", "holds 1 pages", "needs 2"});
  expect_invalid(
      [] {
        tree_from_block_tables({{1, 2, 9}}, {40}, 16, 9);
      },
      {"block_tables[0][2]", "page id 9"});
  expect_invalid(
      [] {
        tree_from_block_tables({{1, -2}}, {20}, 16);
      },
      {"block_tables[0][1]", "page id -2"});
  expect_invalid([] { tree_from_block_tables({{1}}, {1}, 0); }, {"page_size"});
  expect_invalid([] { tree_from_block_tables({{1}}, {1}, 16, -1); }, {"num_pages"});
  expect_invalid([] { tree_from_block_tables({{1}}, {int64_t{1} << 40}, 16); }, {"seq_lens[0]"});
}

// Random requests with real sharing: each request copies a random prefix (in pages) of an
// earlier one, then continues on fresh pages; some are exact copies or page-aligned prefixes.
void random_tables(uint64_t seed, int32_t P, Tables* tables, std::vector<int64_t>* lens) {
  std::mt19937_64 rng(seed);
  auto rnd = [&](int64_t lo, int64_t hi) {
    return lo + static_cast<int64_t>(rng() % (hi - lo + 1));
  };
  const int r = static_cast<int>(rnd(1, 12));
  int32_t next_page = 0;
  tables->clear();
  lens->clear();
  for (int i = 0; i < r; ++i) {
    std::vector<int32_t> tb;
    int64_t len;
    const int64_t mode = i == 0 ? 3 : rnd(0, 3);
    if (mode == 0) {  // exact copy
      const int j = static_cast<int>(rnd(0, i - 1));
      tb = (*tables)[j];
      len = (*lens)[j];
    } else if (mode == 1) {  // prefix of an earlier one, possibly ending mid-page
      const int j = static_cast<int>(rnd(0, i - 1));
      len = rnd(1, (*lens)[j]);
      tb.assign((*tables)[j].begin(), (*tables)[j].begin() + (len + P - 1) / P);
    } else {  // shared full pages, then fresh pages
      int64_t shared = 0;
      if (i > 0) {
        const int j = static_cast<int>(rnd(0, i - 1));
        shared = rnd(0, (*lens)[j] / P);
        tb.assign((*tables)[j].begin(), (*tables)[j].begin() + shared);
      }
      len = shared * P + rnd(1, 5 * P);
      while (static_cast<int64_t>(tb.size()) * P < len) tb.push_back(next_page++);
    }
    if (rnd(0, 3) == 0) tb.push_back(-1);  // padding beyond the needed pages
    tables->push_back(tb);
    lens->push_back(len);
  }
}

TEST(TreeBlockTables, RoundTripRandom) {
  for (uint64_t seed = 0; seed < 300; ++seed) {
    const int32_t P = static_cast<int32_t>(1 + seed % 17);
    Tables in;
    std::vector<int64_t> lens;
    random_tables(seed, P, &in, &lens);
    const PrefixTree t = tree_from_block_tables(in, lens, P);
    ASSERT_NO_THROW(validate(t)) << "seed " << seed;
    Tables out;
    std::vector<int64_t> out_lens;
    to_block_tables(t, &out, &out_lens);
    ASSERT_EQ(out_lens, lens) << "seed " << seed;
    for (size_t r = 0; r < in.size(); ++r) {
      const std::vector<int32_t> want(in[r].begin(), in[r].begin() + (lens[r] + P - 1) / P);
      ASSERT_EQ(out[r], want) << "seed " << seed << " request " << r;
      // The tree reads exactly the engine's (page, slot) for every token.
      const auto ex = testing_util::expand(t, static_cast<int32_t>(r));
      ASSERT_EQ(static_cast<int64_t>(ex.size()), lens[r]);
      for (int64_t k = 0; k < lens[r]; ++k) {
        ASSERT_EQ(ex[k].first, want[k / P]);
        ASSERT_EQ(ex[k].second, k % P);
      }
    }
    // Maximal sharing: no node with one child and no query (path compression).
    const TreeIndex ix = build_index(t);
    for (int32_t v : ix.preorder) {
      bool has_query = false;
      for (int32_t q : t.query_node) has_query = has_query || q == v;
      ASSERT_TRUE(has_query || ix.children(v).size() != 1) << "seed " << seed;
    }
  }
}

// The trie of tree_from_block_tables() without its shortcut (row r following row r-1's path over
// their common leading run): every unit looked up by (parent, page, fill), then path compression;
// returns per node (parent, tokens, pages) and the query nodes.
struct PlainTree {
  std::vector<std::tuple<int64_t, int64_t, std::vector<int32_t>>> nodes;
  std::vector<int32_t> query_node;
};
PlainTree plain_trie(const Tables& bt, const std::vector<int64_t>& lens, int64_t P) {
  std::map<std::tuple<int32_t, int32_t, int64_t>, int32_t> edges;
  std::vector<int32_t> parent, page, children, queries, end(bt.size());
  std::vector<int64_t> fill;
  for (size_t r = 0; r < bt.size(); ++r) {
    const int64_t need = (lens[r] + P - 1) / P;
    int32_t cur = -1;
    for (int64_t k = 0; k < need; ++k) {
      const int64_t f = k + 1 < need ? P : lens[r] - (need - 1) * P;
      const auto [it, fresh] =
          edges.emplace(std::make_tuple(cur, bt[r][k], f), static_cast<int32_t>(parent.size()));
      if (fresh) {
        parent.push_back(cur);
        page.push_back(bt[r][k]);
        fill.push_back(f);
        children.push_back(0);
        queries.push_back(0);
        if (cur >= 0) ++children[cur];
      }
      cur = it->second;
    }
    end[r] = cur;
    ++queries[cur];
  }
  PlainTree out;
  std::vector<int32_t> node_of(parent.size());
  for (size_t u = 0; u < parent.size(); ++u) {
    const int32_t p = parent[u];
    if (p >= 0 && children[p] == 1 && queries[p] == 0) {
      node_of[u] = node_of[p];
      std::get<1>(out.nodes[node_of[u]]) += fill[u];
      std::get<2>(out.nodes[node_of[u]]).push_back(page[u]);
    } else {
      node_of[u] = static_cast<int32_t>(out.nodes.size());
      out.nodes.emplace_back(p >= 0 ? node_of[p] : -1, fill[u], std::vector<int32_t>{page[u]});
    }
  }
  for (const int32_t e : end) out.query_node.push_back(node_of[e]);
  return out;
}

// Rows as an engine lists them for speculative decoding and forks: runs of rows holding one
// table at growing lengths (a draft chain), tables sharing leading pages with the row before
// (forks), a row repeated, a page id reused after a different prefix, in random order.
TEST(TreeBlockTables, ConsecutiveRowsMatchThePlainTrie) {
  for (uint64_t seed = 0; seed < 400; ++seed) {
    std::mt19937_64 rng(seed);
    auto rnd = [&](int64_t lo, int64_t hi) {
      return lo + static_cast<int64_t>(rng() % (hi - lo + 1));
    };
    const int64_t P = rnd(1, 9);
    Tables bt;
    std::vector<int64_t> lens;
    int32_t next_page = 0;
    const int64_t groups = rnd(1, 6);
    for (int64_t g = 0; g < groups; ++g) {
      std::vector<int32_t> base;
      if (!bt.empty() && rnd(0, 2) > 0) {  // share a leading run of the previous row's pages
        base = bt.back();
        base.resize(static_cast<size_t>(rnd(0, static_cast<int64_t>(base.size()))));
      }
      const int64_t forks = rnd(1, 4), depth = rnd(1, 2 * P + 2);
      for (int64_t f = 0; f < forks; ++f) {
        std::vector<int32_t> tb = base;
        const int64_t start = static_cast<int64_t>(tb.size()) * P - (tb.empty() ? 0 : rnd(0, 1));
        const int64_t top = std::max<int64_t>(start, 0) + depth;
        while (static_cast<int64_t>(tb.size()) * P < top)
          tb.push_back(rnd(0, 5) == 0 && next_page > 0 ? static_cast<int32_t>(rnd(0, next_page - 1))
                                                       : next_page++);
        for (int64_t len = std::max<int64_t>(top - depth + 1, 1); len <= top; ++len) {
          bt.push_back(tb);
          lens.push_back(len);
          if (rnd(0, 7) == 0) {  // the same row again
            bt.push_back(tb);
            lens.push_back(len);
          }
        }
      }
    }
    if (seed % 3 == 0) {  // shuffled rows: shorter leading runs between neighbours
      std::vector<size_t> order(bt.size());
      for (size_t i = 0; i < order.size(); ++i) order[i] = i;
      std::shuffle(order.begin(), order.end(), rng);
      Tables b2;
      std::vector<int64_t> l2;
      for (const size_t i : order) b2.push_back(bt[i]), l2.push_back(lens[i]);
      bt.swap(b2);
      lens.swap(l2);
    }
    PrefixTree t;
    try {
      t = tree_from_block_tables(bt, lens, static_cast<int32_t>(P));
    } catch (const std::invalid_argument&) {
      continue;  // a reused page id listed after two prefixes: no tree (validate refuses it)
    }
    const PlainTree want = plain_trie(bt, lens, P);
    ASSERT_EQ(t.nodes.size(), want.nodes.size()) << "seed " << seed;
    for (size_t v = 0; v < t.nodes.size(); ++v) {
      ASSERT_EQ(t.nodes[v].parent, std::get<0>(want.nodes[v])) << "seed " << seed << " node " << v;
      ASSERT_EQ(t.nodes[v].tokens, std::get<1>(want.nodes[v])) << "seed " << seed << " node " << v;
      ASSERT_EQ(t.nodes[v].pages, std::get<2>(want.nodes[v])) << "seed " << seed << " node " << v;
    }
    ASSERT_EQ(t.query_node, want.query_node) << "seed " << seed;
  }
}

TEST(TreeBlockTables, RandomTreeToTablesAndBack) {
  for (uint64_t seed = 0; seed < 100; ++seed) {
    RandomTreeOptions opts;
    opts.page_size = 1 + static_cast<int32_t>(seed % 16);
    const PrefixTree t = random_tree(seed, opts);
    Tables bt;
    std::vector<int64_t> lens;
    to_block_tables(t, &bt, &lens);
    for (int32_t q = 0; q < t.num_queries(); ++q) ASSERT_EQ(lens[q], query_context(t, q));
    const PrefixTree r = tree_from_block_tables(bt, lens, t.page_size, t.num_pages);
    Tables bt2;
    std::vector<int64_t> lens2;
    to_block_tables(r, &bt2, &lens2);
    EXPECT_EQ(bt2, bt) << "seed " << seed;
    EXPECT_EQ(lens2, lens);
    EXPECT_LE(unique_tokens(t), unique_tokens(r));  // the tree shares at least as much
  }
  // A node whose page_offset is not start % P has no block-table form.
  PrefixTree bad;
  bad.page_size = 16;
  bad.nodes = {{0, kNoParent, 20, 0, {0, 1}, true}, {1, 0, 5, 0, {2}, true}};
  bad.num_pages = 3;
  bad.query_node = {1};
  ASSERT_NO_THROW(validate(bad));
  Tables bt;
  std::vector<int64_t> lens;
  expect_invalid([&] { to_block_tables(bad, &bt, &lens); }, {"nodes[1].page_offset", "start"});
}

}  // namespace
}  // namespace treeattn
