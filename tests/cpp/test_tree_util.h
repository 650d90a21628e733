// Helpers shared by the tree tests: expected-error checks (and refused updates leaving the tree
// unchanged), a chain-shaped tree, per-token page/slot expansion of a query's path and structural
// equality of live nodes.
#pragma once

#include <gtest/gtest.h>

#include <functional>
#include <initializer_list>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "treeattn/tree/levels.h"
#include "treeattn/tree/prefix_tree.h"

namespace treeattn::testing_util {

/// Runs `fn` and checks that it throws std::invalid_argument whose message contains every part.
inline void expect_invalid(const std::function<void()>& fn,
                           std::initializer_list<std::string> parts) {
  try {
    fn();
  } catch (const std::invalid_argument& e) {
    const std::string msg = e.what();
    for (const std::string& p : parts)
      EXPECT_NE(msg.find(p), std::string::npos) << "message '" << msg << "' lacks '" << p << "'";
    return;
  }
  ADD_FAILURE() << "no std::invalid_argument thrown";
}

/// Runs `update` on `t`, which must throw std::invalid_argument naming every part and leave the
/// tree exactly as it was: nodes (dead slots included), queries, pool, num_pages and version.
inline void expect_rejected_unchanged(PrefixTree& t, const std::function<void(PrefixTree&)>& update,
                                      std::initializer_list<std::string> parts) {
  const PrefixTree before = t;
  expect_invalid([&] { update(t); }, parts);
  EXPECT_EQ(t.version, before.version);
  EXPECT_EQ(t.num_pages, before.num_pages);
  EXPECT_EQ(t.query_node, before.query_node);
  EXPECT_EQ(t.free_pages, before.free_pages);
  ASSERT_EQ(t.nodes.size(), before.nodes.size());
  for (size_t i = 0; i < t.nodes.size(); ++i) {
    EXPECT_EQ(t.nodes[i].alive, before.nodes[i].alive) << "node " << i;
    EXPECT_EQ(t.nodes[i].tokens, before.nodes[i].tokens) << "node " << i;
    EXPECT_EQ(t.nodes[i].pages, before.nodes[i].pages) << "node " << i;
  }
}

/// A chain of `n` one-token nodes with one query on its leaf (path length n).
inline PrefixTree chain(int n) {
  std::string levels = "N=1", tokens = "C=1";
  for (int i = 1; i < n; ++i) levels += ",1", tokens += ",1";
  return tree_from_levels(parse_levels(levels + " " + tokens));
}

/// The values of an index span, for comparisons.
inline std::vector<int32_t> ids(IdSpan s) { return std::vector<int32_t>(s.begin(), s.end()); }

/// (page, slot) of every token query q attends, in order.
inline std::vector<std::pair<int32_t, int32_t>> expand(const PrefixTree& t, int32_t q) {
  std::vector<std::pair<int32_t, int32_t>> out;
  const int32_t P = t.page_size;
  for (int32_t v : query_path(t, q)) {
    const TreeNode& nd = t.nodes[v];
    for (int32_t i = 0; i < nd.tokens; ++i)
      out.emplace_back(nd.pages[(nd.page_offset + i) / P], (nd.page_offset + i) % P);
  }
  return out;
}

/// Compares the live structure of two trees (ids, parents by id, tokens, pages, queries by id).
inline void expect_same_tree(const PrefixTree& a, const PrefixTree& b) {
  EXPECT_EQ(a.page_size, b.page_size);
  EXPECT_EQ(a.num_pages, b.num_pages);
  EXPECT_EQ(a.shape.num_qo_heads, b.shape.num_qo_heads);
  EXPECT_EQ(a.shape.num_kv_heads, b.shape.num_kv_heads);
  EXPECT_EQ(a.shape.head_dim, b.shape.head_dim);
  auto live = [](const PrefixTree& t) {
    std::vector<int32_t> v;
    for (size_t i = 0; i < t.nodes.size(); ++i)
      if (t.nodes[i].alive) v.push_back(static_cast<int32_t>(i));
    return v;
  };
  const std::vector<int32_t> la = live(a), lb = live(b);
  ASSERT_EQ(la.size(), lb.size());
  for (size_t k = 0; k < la.size(); ++k) {
    const TreeNode& x = a.nodes[la[k]];
    const TreeNode& y = b.nodes[lb[k]];
    EXPECT_EQ(x.id, y.id);
    EXPECT_EQ(x.parent == kNoParent, y.parent == kNoParent);
    if (x.parent != kNoParent && y.parent != kNoParent)
      EXPECT_EQ(a.nodes[x.parent].id, b.nodes[y.parent].id);
    EXPECT_EQ(x.tokens, y.tokens);
    EXPECT_EQ(x.page_offset, y.page_offset);
    EXPECT_EQ(x.pages, y.pages);
  }
  ASSERT_EQ(a.num_queries(), b.num_queries());
  for (int32_t q = 0; q < a.num_queries(); ++q)
    EXPECT_EQ(a.nodes[a.query_node[q]].id, b.nodes[b.query_node[q]].id);
  EXPECT_EQ(a.free_pages, b.free_pages);
}

/// Every (node, token) of live nodes maps to a distinct (page, slot) inside [0, num_pages).
inline void expect_distinct_slots(const PrefixTree& t) {
  std::vector<char> seen(static_cast<size_t>(t.num_pages) * t.page_size, 0);
  for (const TreeNode& nd : t.nodes) {
    if (!nd.alive) continue;
    for (int32_t i = 0; i < nd.tokens; ++i) {
      const int32_t page = nd.pages[(nd.page_offset + i) / t.page_size];
      const int32_t slot = (nd.page_offset + i) % t.page_size;
      ASSERT_GE(page, 0);
      ASSERT_LT(page, t.num_pages);
      char& s = seen[static_cast<size_t>(page) * t.page_size + slot];
      ASSERT_EQ(s, 0) << "page " << page << " slot " << slot << " used twice (node " << nd.id
                      << ")";
      s = 1;
    }
  }
}

}  // namespace treeattn::testing_util
