// The generated workload trees (src/tree/generators.cc): the shape every family promises (node
// and query counts, length ranges, what is shared), the heads word (same tree for every head
// configuration) and the errors for bad generator names (unknown words, trees over the limits).
#include <gtest/gtest.h>

#include <algorithm>
#include <set>
#include <tuple>

#include "test_tree_util.h"
#include "tree/generators.h"
#include "treeattn/common/error.h"
#include "treeattn/tree/workloads.h"

namespace treeattn {
namespace {

using testing_util::expect_invalid;

PrefixTree named(const std::string& name) { return build_workload(find_workload(name)); }
// A generator name that no set lists (any parameters), page 16, seed 7.
PrefixTree generated(const std::string& name) {
  return detail::build_generated(name, 16, 7, PageLayout::kContiguous, 0);
}

// Children per node and roots of a tree built by a generator (every node alive).
struct Shape {
  explicit Shape(const PrefixTree& t) : ix(build_index(t)) {
    for (size_t v = 0; v < t.nodes.size(); ++v) {
      if (t.nodes[v].parent == kNoParent) roots.push_back(static_cast<int32_t>(v));
    }
    queried.insert(t.query_node.begin(), t.query_node.end());
  }
  bool leaf(int32_t v) const { return ix.children(v).empty(); }
  TreeIndex ix;
  std::vector<int32_t> roots;
  std::set<int32_t> queried;
};

// Every leaf carries a query (a query may also sit on an inner node only where said).
void expect_queries_on_leaves(const PrefixTree& t, const Shape& s) {
  for (size_t v = 0; v < t.nodes.size(); ++v) {
    if (s.leaf(static_cast<int32_t>(v))) EXPECT_TRUE(s.queried.count(static_cast<int32_t>(v)));
  }
}

// The request (root) above every node.
std::vector<int32_t> roots_of(const PrefixTree& t, const Shape& s) {
  std::vector<int32_t> root_of(t.nodes.size());
  for (int32_t v : s.ix.preorder)
    root_of[v] = t.nodes[v].parent == kNoParent ? v : root_of[t.nodes[v].parent];
  return root_of;
}

TEST(TreeGenerators, PublishedShapes) {
  for (int t : {16, 32, 64}) {
    const PrefixTree tr = named(detail::concat("specdec base=6000 t=", t));
    EXPECT_EQ(tr.nodes.size(), static_cast<size_t>(t + 1));
    EXPECT_EQ(tr.num_queries(), t);
    EXPECT_EQ(tr.nodes[0].tokens, 6000);
    std::set<int32_t> on(tr.query_node.begin(), tr.query_node.end());
    EXPECT_EQ(on.size(), static_cast<size_t>(t));  // a query on every draft node
    for (int32_t v = 1; v <= t; ++v) EXPECT_EQ(tr.nodes[v].tokens, 1);
    EXPECT_EQ(tr.shape.num_kv_heads, 8);
  }
  for (int d : {3, 5, 8, 10}) {
    const PrefixTree tr = named(detail::concat("tot depth=", d, " width=10"));
    const TreeIndex ix = build_index(tr);
    EXPECT_EQ(tr.nodes[0].tokens, 1000);
    int32_t maxdepth = 0;
    for (int32_t v : ix.preorder) maxdepth = std::max(maxdepth, ix.depth[v]);
    EXPECT_EQ(maxdepth, d);
    for (int32_t q = 0; q < tr.num_queries(); ++q) EXPECT_EQ(ix.depth[tr.query_node[q]], d);
    for (size_t v = 1; v < tr.nodes.size(); ++v) {
      EXPECT_GE(tr.nodes[v].tokens, 50);
      EXPECT_LE(tr.nodes[v].tokens, 400);
    }
  }
  for (int d = 2; d <= 6; ++d) {
    const PrefixTree tr = named(detail::concat("degenerate depth=", d, " C=512"));
    EXPECT_EQ(tr.nodes.size(), static_cast<size_t>(1 + 2 * d));
    EXPECT_EQ(tr.num_queries(), d + 1);
    const TreeIndex ix = build_index(tr);
    int internal = 0;
    for (int32_t v : ix.preorder) {
      const size_t c = ix.children(v).size();
      EXPECT_TRUE(c == 0 || c == 2);
      if (c == 2) {
        ++internal;
        EXPECT_TRUE(ix.children(ix.children(v)[1]).empty());  // right child is a leaf
      }
    }
    EXPECT_EQ(internal, d);
  }
}

TEST(TreeGenerators, Forest) {
  for (const auto& [roots, samples] : {std::pair{64, 1}, std::pair{16, 8}, std::pair{4, 32}}) {
    const PrefixTree t =
        named(detail::concat("forest roots=", roots, " samples=", samples, " heads=32/8"));
    const Shape s(t);
    ASSERT_EQ(static_cast<int>(s.roots.size()), roots);
    std::set<int32_t> lengths;
    for (int32_t r : s.roots) {
      EXPECT_GE(t.nodes[r].tokens, 256);
      EXPECT_LT(t.nodes[r].tokens, 256 << 5);
      lengths.insert(t.nodes[r].tokens);
      const auto kids = s.ix.children(r);
      EXPECT_LE(static_cast<int>(kids.size()), samples);
      EXPECT_NE(kids.size(), 1u);  // one sample decodes on the prompt itself
      EXPECT_EQ(s.queried.count(r), kids.empty() ? 1u : 0u);
      for (int32_t c : kids) {
        EXPECT_TRUE(s.leaf(c));
        EXPECT_GE(t.nodes[c].tokens, 16);
        EXPECT_LE(t.nodes[c].tokens, 512);
      }
    }
    EXPECT_GT(lengths.size(), s.roots.size() / 2);  // ragged
    expect_queries_on_leaves(t, s);
    EXPECT_EQ(static_cast<size_t>(t.num_queries()), s.queried.size());
  }
}

TEST(TreeGenerators, Agent) {
  for (const auto& [sessions, depth] : {std::pair{16, 8}, std::pair{64, 3}}) {
    const PrefixTree t =
        named(detail::concat("agent sessions=", sessions, " depth=", depth, " heads=32/8"));
    const Shape s(t);
    ASSERT_EQ(s.roots.size(), 1u);
    EXPECT_GE(t.nodes[0].tokens, 2000);
    EXPECT_LE(t.nodes[0].tokens, 4000);
    EXPECT_GE(t.num_queries(), sessions);
    expect_queries_on_leaves(t, s);
    int32_t maxdepth = 0;
    for (int32_t v : s.ix.preorder) {
      maxdepth = std::max(maxdepth, s.ix.depth[v]);
      if (v == 0) continue;
      EXPECT_GE(t.nodes[v].tokens, 32);
      EXPECT_LE(t.nodes[v].tokens, 1536);
    }
    EXPECT_LE(maxdepth, depth);
    EXPECT_GE(maxdepth, 2);
    EXPECT_EQ(static_cast<size_t>(t.num_queries()), s.queried.size());
  }
}

TEST(TreeGenerators, Chain) {
  for (const auto& [depth, queries] : {std::pair{32, 16}, std::pair{128, 1}}) {
    const PrefixTree t =
        named(detail::concat("chain depth=", depth, " queries=", queries, " heads=32/8"));
    const Shape s(t);
    ASSERT_EQ(s.roots.size(), 1u);
    EXPECT_EQ(t.num_queries(), queries);
    // Nodes 0..depth-1 are the chain; the last turn carries the first query.
    for (int32_t d = 0; d < depth; ++d) {
      EXPECT_EQ(s.ix.depth[d], d);
      EXPECT_GE(t.nodes[d].tokens, 64);
      EXPECT_LE(t.nodes[d].tokens, 512);
    }
    EXPECT_EQ(t.query_node[0], depth - 1);
    for (int32_t q = 1; q < queries; ++q) {
      const int32_t v = t.query_node[q];
      EXPECT_GE(v, depth);
      EXPECT_TRUE(s.leaf(v));
      EXPECT_LT(t.nodes[v].parent, depth);
      EXPECT_LE(t.nodes[v].tokens, 64);
    }
  }
}

TEST(TreeGenerators, SpecTree) {
  for (const auto& [batch, drafts] : {std::pair{8, 32}, std::pair{32, 8}}) {
    const PrefixTree t =
        named(detail::concat("spectree batch=", batch, " t=", drafts, " heads=32/8"));
    const Shape s(t);
    ASSERT_EQ(static_cast<int>(s.roots.size()), batch);
    EXPECT_EQ(t.num_queries(), batch * drafts);
    EXPECT_EQ(t.nodes.size(), static_cast<size_t>(batch * (drafts + 1)));
    for (int32_t r : s.roots) {
      EXPECT_GE(t.nodes[r].tokens, 1024);
      EXPECT_LT(t.nodes[r].tokens, 1024 << 3);
      EXPECT_EQ(s.queried.count(r), 0u);
    }
    // Every draft is one token and carries a query; drafts of one request stay under its root.
    const std::vector<int32_t> root_of = roots_of(t, s);
    std::vector<int> per_root(t.nodes.size(), 0);
    for (int32_t q = 0; q < t.num_queries(); ++q) {
      const int32_t v = t.query_node[q];
      EXPECT_EQ(t.nodes[v].tokens, 1);
      ++per_root[root_of[v]];
    }
    for (int32_t r : s.roots) EXPECT_EQ(per_root[r], drafts);
  }
}

TEST(TreeGenerators, Eagle) {
  struct P {
    int batch, depth, topk, tokens;
  };
  for (const P& p : {P{8, 6, 10, 60}, P{4, 8, 4, 48}, P{3, 2, 3, 100}}) {
    const PrefixTree t = generated(detail::concat("eagle batch=", p.batch, " depth=", p.depth,
                                                  " topk=", p.topk, " tokens=", p.tokens));
    const Shape s(t);
    ASSERT_EQ(static_cast<int>(s.roots.size()), p.batch);
    // every candidate level holds <= topk^2 drafts: fewer than `tokens` exist when the tree is
    // small (depth 2, top-3: 3 + 9)
    const int most = std::min(p.tokens, p.topk + (p.depth - 1) * p.topk * p.topk);
    EXPECT_EQ(t.num_queries(), p.batch * most);
    EXPECT_EQ(t.nodes.size(), static_cast<size_t>(p.batch * (most + 1)));
    std::set<int32_t> on(t.query_node.begin(), t.query_node.end());
    EXPECT_EQ(on.size(), t.query_node.size());  // one query per draft
    const std::vector<int32_t> root_of = roots_of(t, s);
    std::vector<int> per_root(t.nodes.size(), 0);
    for (size_t v = 0; v < t.nodes.size(); ++v) {
      if (t.nodes[v].parent == kNoParent) {
        EXPECT_GE(t.nodes[v].tokens, 512);
        EXPECT_LT(t.nodes[v].tokens, 8192);
        EXPECT_EQ(s.queried.count(static_cast<int32_t>(v)), 0u);
        continue;
      }
      EXPECT_EQ(t.nodes[v].tokens, 1);
      EXPECT_TRUE(s.queried.count(static_cast<int32_t>(v)));
      EXPECT_LE(s.ix.depth[v], p.depth);
      EXPECT_LE(static_cast<int>(s.ix.children(static_cast<int32_t>(v)).size()), p.topk);
      ++per_root[root_of[v]];
    }
    for (int32_t r : s.roots) {
      EXPECT_EQ(per_root[r], most);
      EXPECT_LE(static_cast<int>(s.ix.children(r).size()), p.topk);
    }
  }
}

TEST(TreeGenerators, Beam) {
  for (const auto& [requests, width, steps] :
       {std::tuple{4, 8, 64}, std::tuple{16, 4, 32}, std::tuple{2, 16, 128}}) {
    const PrefixTree t =
        generated(detail::concat("beam requests=", requests, " width=", width, " steps=", steps));
    const Shape s(t);
    ASSERT_EQ(static_cast<int>(s.roots.size()), requests);
    EXPECT_EQ(t.num_queries(), requests * width);
    expect_queries_on_leaves(t, s);
    const std::vector<int32_t> root_of = roots_of(t, s);
    std::vector<int> beams(t.nodes.size(), 0);
    for (int32_t q = 0; q < t.num_queries(); ++q) {
      const int32_t v = t.query_node[q];
      EXPECT_TRUE(s.leaf(v));  // beams are distinct hypotheses, each a leaf
      ++beams[root_of[v]];
      // every beam's sequence is its prompt plus one token per step
      int64_t len = 0;
      for (int32_t u = v; u != kNoParent; u = t.nodes[u].parent) len += t.nodes[u].tokens;
      const int64_t prompt = len - steps;
      EXPECT_GE(prompt, 256);
      EXPECT_LT(prompt, 4096);
    }
    for (int32_t r : s.roots) EXPECT_EQ(beams[r], width);
    // a radix tree: no query-free node with a single child
    for (size_t v = 0; v < t.nodes.size(); ++v)
      if (!s.queried.count(static_cast<int32_t>(v)))
        EXPECT_NE(s.ix.children(static_cast<int32_t>(v)).size(), 1u);
  }
}

TEST(TreeGenerators, Rollout) {
  for (const auto& [groups, samples, len] :
       {std::tuple{4, 16, 2048}, std::tuple{16, 4, 1024}, std::tuple{2, 32, 3}}) {
    const PrefixTree t =
        generated(detail::concat("rollout groups=", groups, " samples=", samples, " len=", len));
    const Shape s(t);
    ASSERT_EQ(s.roots.size(), 1u);
    const int32_t system = s.roots[0];
    EXPECT_GE(t.nodes[system].tokens, 128);
    EXPECT_LT(t.nodes[system].tokens, 1024);
    ASSERT_EQ(static_cast<int>(s.ix.children(system).size()), groups);
    for (int32_t g : s.ix.children(system)) {
      EXPECT_GE(t.nodes[g].tokens, 64);
      EXPECT_LT(t.nodes[g].tokens, 2048);
      EXPECT_EQ(static_cast<int>(s.ix.children(g).size()), samples);
      for (int32_t v : s.ix.children(g)) {
        EXPECT_TRUE(s.leaf(v));
        EXPECT_GE(t.nodes[v].tokens, std::max(1, len / 2));
        EXPECT_LE(t.nodes[v].tokens, len);
      }
    }
    EXPECT_EQ(t.num_queries(), groups * samples);
    expect_queries_on_leaves(t, s);
  }
}

TEST(TreeGenerators, PageWordKeepsTheTree) {
  const Workload a = find_workload("eagle batch=32 depth=5 topk=8 tokens=32 heads=16/2 page=1");
  EXPECT_EQ(a.spec.page_size, 1);
  EXPECT_EQ(a.spec.shape.num_kv_heads, 2);
  Workload b = a;
  b.name = "eagle batch=32 depth=5 topk=8 tokens=32";
  b.spec.page_size = 16;
  const PrefixTree ta = build_workload(a), tb = build_workload(b);
  EXPECT_EQ(ta.page_size, 1);
  EXPECT_EQ(tb.page_size, 16);
  ASSERT_EQ(ta.nodes.size(), tb.nodes.size());
  for (size_t v = 0; v < ta.nodes.size(); ++v) {
    EXPECT_EQ(ta.nodes[v].parent, tb.nodes[v].parent);
    EXPECT_EQ(ta.nodes[v].tokens, tb.nodes[v].tokens);
  }
  EXPECT_EQ(ta.query_node, tb.query_node);
  EXPECT_EQ(detail::generated_page_size("forest roots=2 samples=2"), 16);
  EXPECT_EQ(detail::generated_page_size("forest roots=2 samples=2 page=256"), 256);
  for (const std::string& pg : {"page=0", "page=x", "page=4097", "page=-1"})
    expect_invalid([&] { detail::generated_page_size("forest roots=1 samples=1 " + pg); },
                   {"workload", "page"});
}

TEST(TreeGenerators, HeadsWordKeepsTheTree) {
  for (const std::string& f : {"forest roots=16 samples=8", "agent sessions=64 depth=3",
                               "chain depth=32 queries=16", "spectree batch=8 t=32"}) {
    const Workload a = find_workload(f + " heads=32/8"), b = find_workload(f + " heads=16/1");
    EXPECT_EQ(a.spec.shape.num_qo_heads, 32);
    EXPECT_EQ(a.spec.shape.num_kv_heads, 8);
    EXPECT_EQ(b.spec.shape.num_qo_heads, 16);
    EXPECT_EQ(b.spec.shape.num_kv_heads, 1);
    const PrefixTree ta = build_workload(a, PageLayout::kShuffled, 5);
    PrefixTree tb = build_workload(b, PageLayout::kShuffled, 5);
    EXPECT_EQ(tb.shape.num_qo_heads, 16);
    tb.shape = ta.shape;
    testing_util::expect_same_tree(ta, tb);
  }
  EXPECT_EQ(detail::generated_shape("forest roots=2 samples=2").num_kv_heads, 8);
  EXPECT_EQ(detail::generated_shape("chain depth=2 queries=1 heads=28/4").num_qo_heads, 28);
}

TEST(TreeGenerators, BadNames) {
  const auto build = [](const std::string& name) {
    detail::build_generated(name, 16, 1, PageLayout::kContiguous, 0);
  };
  expect_invalid([&] { build("bush roots=2"); }, {"workload", "unknown generator", "bush"});
  expect_invalid([&] { build("forest samples=2"); }, {"workload", "missing roots="});
  expect_invalid([&] { build("forest roots=0 samples=2"); }, {"workload", "roots"});
  expect_invalid([&] { build("forest roots=x samples=2"); }, {"workload", "bad roots"});
  expect_invalid([&] { build("forest roots=5000 samples=2"); }, {"workload", "roots", "4096"});
  expect_invalid([&] { build("tot depth=65 width=2"); }, {"workload", "depth"});
  expect_invalid([&] { build("spectree batch=2 t=99999"); }, {"workload", "t must lie"});
  expect_invalid([&] { build("forest roots=2 samples=2 dim=64"); }, {"workload", "'dim=64'"});
  expect_invalid([&] { build("chain depth=2 queries=1 queries"); }, {"workload", "'queries'"});
  expect_invalid([&] { build("degenerate depth=65536 C=1048576"); }, {"workload", "tokens"});
  expect_invalid([&] { build("forest roots=4096 samples=1024"); }, {"workload", "nodes"});
  expect_invalid([&] { build("eagle batch=2 depth=17 topk=2 tokens=4"); }, {"workload", "depth"});
  expect_invalid([&] { build("eagle batch=2 depth=2 topk=2"); }, {"workload", "missing tokens="});
  expect_invalid([&] { build("beam requests=4096 width=256 steps=16384"); }, {"workload", "nodes"});
  expect_invalid([&] { build("rollout groups=1 samples=1 len=2 width=3"); },
                 {"workload", "'width=3'"});
  expect_invalid([&] { build("rollout groups=4096 samples=4096 len=1048576"); },
                 {"workload", "tokens"});
  EXPECT_NO_THROW(build("rollout groups=1 samples=1 len=1 page=64 heads=8/1"));
  EXPECT_NO_THROW(build("chain depth=2 queries=1 heads=8/1"));
  for (const std::string& h :
       {"heads=3/2", "heads=x", "heads=8", "heads=/8", "heads=8/0", "heads=1/8", "heads=8/2/1"}) {
    expect_invalid([&] { detail::generated_shape("forest roots=1 samples=1 " + h); },
                   {"workload", "heads"});
  }
}

}  // namespace
}  // namespace treeattn
