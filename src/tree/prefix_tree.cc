// PrefixTree checks and derived views: validate() (every error names its offender; cycle
// detection is iterative so deep chains cannot overflow the stack), build_index(), query paths,
// per-query context and unique tokens, and the shared tree assembler used by the builders.
#include "treeattn/tree/prefix_tree.h"

#include <algorithm>
#include <limits>
#include <numeric>
#include <random>
#include <utility>

#include "tree_internal.h"
#include "treeattn/common/error.h"

namespace treeattn {

namespace {

std::string node_name(int32_t i) { return detail::concat("nodes[", i, "]"); }

// Colours every live node by walking up its parent chain: 0 = unseen, walk stamp while on the
// current walk, kDone once known to reach a root. Meeting the current stamp again is a cycle.
void check_acyclic(const PrefixTree& tree) {
  const int32_t n = static_cast<int32_t>(tree.nodes.size());
  constexpr int32_t kDone = -1;
  std::vector<int32_t> mark(n, 0);
  std::vector<int32_t> walk;
  for (int32_t i = 0; i < n; ++i) {
    if (!tree.nodes[i].alive || mark[i] != 0) continue;
    const int32_t stamp = i + 1;
    walk.clear();
    int32_t v = i;
    while (v != kNoParent && mark[v] == 0) {
      mark[v] = stamp;
      walk.push_back(v);
      v = tree.nodes[v].parent;
    }
    TA_CHECK_ARG(v == kNoParent || mark[v] != stamp, node_name(v) + ".parent",
                 "cycle through node index ", v, " (id ", tree.nodes[v].id, ")");
    for (int32_t w : walk) mark[w] = kDone;
  }
}

// Limits on what depends on the whole structure: tokens, listed pages (unless `pages` is false)
// and the path-depth sum (the tree is known to be acyclic).
void check_limits(const PrefixTree& tree, bool pages) {
  int64_t tokens = 0, listed = 0;
  for (const TreeNode& nd : tree.nodes) {
    if (!nd.alive) continue;
    tokens += nd.tokens;
    listed += static_cast<int64_t>(nd.pages.size());
  }
  TA_CHECK_ARG(tokens <= kMaxTreeTokens, "tree", tokens,
               " tokens over live nodes exceed the limit kMaxTreeTokens=", kMaxTreeTokens);
  TA_CHECK_ARG(!pages || listed <= kMaxTreePages, "tree", listed,
               " page ids listed by live nodes exceed the limit kMaxTreePages=", kMaxTreePages);
  const int64_t sum = detail::path_depth_sum(tree, detail::path_lengths(tree));
  TA_CHECK_ARG(sum <= kMaxPathDepthSum, "tree", "the path-depth sum (nodes on every query's path, ",
               "summed over ", tree.query_node.size(), " queries) is ", sum,
               ", above the limit kMaxPathDepthSum=", kMaxPathDepthSum);
}

// Page ownership. A (page, slot) holds the KV of one token: of one position after one prefix.
// Two uses of the same slots must be the first pages of siblings (same parent) mapping them to
// the same positions (copy-on-write siblings sharing a partly filled page), so a page listed twice
// at the same slots, a child reusing its parent's page at the same slots, or one page under two
// different prefixes is refused. free_pages entries must be in range, unique and not listed by a
// live node. Pages are counted in an array over num_pages when that is not much larger than the
// pages listed and pooled (else sorted); only pages listed more than once are compared slot by
// slot, and those uses are kept as 8-byte references (memory stays within a few bytes per listed
// page).
void check_pages(const PrefixTree& tree) {
  struct Use {
    int32_t page, node, k;
    int64_t prefix;  ///< what precedes the page: the parent for a first page, else the node
    int64_t begin, end, pos;  ///< slots [begin, end) of the page hold positions pos + slot
  };
  struct Ref {
    int32_t rank, k;  ///< page k of the node at position `rank` of the preorder
  };
  const int32_t n = static_cast<int32_t>(tree.nodes.size());
  const int64_t P = tree.page_size;
  std::vector<int32_t> order = detail::preorder_of(tree);
  std::vector<int64_t> start(n, 0);
  size_t listed = 0;
  for (const int32_t v : order) {
    const int32_t p = tree.nodes[v].parent;
    if (p != kNoParent) start[v] = start[p] + tree.nodes[p].tokens;
    listed += tree.nodes[v].pages.size();
  }
  auto use_of = [&](Ref r) {
    const int32_t v = order[r.rank];
    const int32_t k = r.k;
    const TreeNode& nd = tree.nodes[v];
    const int64_t lo = std::max<int64_t>(nd.page_offset, int64_t{k} * P);
    const int64_t hi = std::min<int64_t>(int64_t{nd.page_offset} + nd.tokens, int64_t{k + 1} * P);
    // token i sits in slot page_offset + i - k*P: position start + i = start - page_offset + k*P
    // + slot.
    const int64_t base = int64_t{k} * P;
    const int64_t prefix = k == 0 ? int64_t{nd.parent} : -2 - int64_t{v};
    return Use{nd.pages[k], v, k, prefix, lo - base, hi - base, start[v] - nd.page_offset + base};
  };
  auto use_name = [&](const Use& u) {
    return detail::concat(node_name(u.node), ".pages[", u.k, "]");
  };
  std::vector<Ref> shared;  // uses of pages listed more than once
  const uint64_t entries = listed + tree.free_pages.size();
  const bool dense = static_cast<uint64_t>(tree.num_pages) <= 2 * entries + 4096;
  std::vector<int32_t> count;
  std::vector<int32_t> sorted_used;
  if (dense) {
    count.assign(static_cast<size_t>(tree.num_pages), 0);
    for (const int32_t v : order)
      for (const int32_t p : tree.nodes[v].pages) ++count[p];
  } else {
    sorted_used.reserve(listed);
    for (const int32_t v : order)
      sorted_used.insert(sorted_used.end(), tree.nodes[v].pages.begin(), tree.nodes[v].pages.end());
    detail::sort_page_ids(&sorted_used);
  }
  std::vector<int32_t> repeated;  // sparse: the page ids listed more than once (usually few)
  for (size_t k = 1; k < sorted_used.size(); ++k)
    if (sorted_used[k] == sorted_used[k - 1] &&
        (repeated.empty() || repeated.back() != sorted_used[k]))
      repeated.push_back(sorted_used[k]);
  auto listed_twice = [&](int32_t p) {
    if (dense) return count[p] > 1;
    return !repeated.empty() && std::binary_search(repeated.begin(), repeated.end(), p);
  };
  size_t num_shared = 0;  // counted first: the list is reserved exactly
  for (const int32_t v : order)
    for (const int32_t p : tree.nodes[v].pages) num_shared += listed_twice(p);
  shared.reserve(num_shared);
  for (int32_t rank = 0; rank < static_cast<int32_t>(order.size()); ++rank) {
    const std::vector<int32_t>& pages = tree.nodes[order[rank]].pages;
    for (size_t k = 0; k < pages.size(); ++k)
      if (listed_twice(pages[k])) shared.push_back({rank, static_cast<int32_t>(k)});
  }
  // By page, then first slot, then preorder position and page index (a total order).
  std::sort(shared.begin(), shared.end(), [&](Ref x, Ref y) {
    const Use a = use_of(x), b = use_of(y);
    if (a.page != b.page) return a.page < b.page;
    if (a.begin != b.begin) return a.begin < b.begin;
    return x.rank != y.rank ? x.rank < y.rank : x.k < y.k;
  });
  // Within one page, uses sorted by first slot form clusters of overlapping slots; every use of
  // a cluster must share the parent and the slot -> position map of the others.
  size_t reach = 0;  // the use of the current cluster whose slots reach furthest
  for (size_t i = 0; i < shared.size(); ++i) {
    const Use b = use_of(shared[i]);
    const Use a = use_of(shared[reach]);
    if (i == 0 || b.page != a.page || b.begin >= a.end) {
      reach = i;
      continue;
    }
    TA_CHECK_ARG(a.pos == b.pos, use_name(b), "page ", b.page, " slot ", b.begin,
                 " is also used by ", use_name(a),
                 " for another position (a page slot holds one token; a child needs its own "
                 "pages where its parent's pages are in use)");
    TA_CHECK_ARG(a.prefix == b.prefix, use_name(b), "page ", b.page, " slot ", b.begin,
                 " is also used by ", use_name(a),
                 " after another prefix (a page slot holds one token of one sequence)");
    if (b.end > a.end) reach = i;
  }
  for (size_t k = 0; k < tree.free_pages.size(); ++k) {
    const int32_t p = tree.free_pages[k];
    // Called only for a message: a string per entry cost more than the checks.
    const auto name = [k] { return detail::concat("free_pages[", k, "]"); };
    TA_CHECK_ARG(p >= 0 && p < tree.num_pages, name(), "page id ", p,
                 " out of range [0, num_pages=", tree.num_pages, ")");
    if (dense) {
      TA_CHECK_ARG(count[p] <= 0, name(), "page id ", p, " is in use by a live node");
      TA_CHECK_ARG(count[p] == 0, name(), "page id ", p, " is listed twice");
      count[p] = -1;
    } else {
      TA_CHECK_ARG(!std::binary_search(sorted_used.begin(), sorted_used.end(), p), name(),
                   "page id ", p, " is in use by a live node");
    }
  }
  if (!dense && !tree.free_pages.empty()) {
    std::vector<int32_t> f(tree.free_pages);
    detail::sort_page_ids(&f);  // (in range: checked above)
    const auto dup = std::adjacent_find(f.begin(), f.end());
    TA_CHECK_ARG(dup == f.end(), "free_pages", "page id ", *dup, " is listed twice");
  }
}

// validate(), with the page checks only when `pages` is true (detail::validate_structure).
// Messages (and the node names in them) are built only when a check fails: TA_CHECK_ARG
// evaluates its argument name and message lazily, so the passing path allocates nothing per node.
void validate_tree(const PrefixTree& tree, bool pages) {
  check_page_size(tree.page_size, "page_size");
  TA_CHECK_ARG(tree.num_pages >= 0, "num_pages", "must be >= 0, got ", tree.num_pages);
  TA_CHECK_ARG(static_cast<int64_t>(tree.nodes.size()) <= kMaxTreeNodes, "nodes", "tree has ",
               tree.nodes.size(), " node slots, above the limit kMaxTreeNodes=", kMaxTreeNodes);
  TA_CHECK_ARG(static_cast<int64_t>(tree.query_node.size()) <= kMaxTreeQueries, "queries",
               "tree has ", tree.query_node.size(),
               " queries, above the limit kMaxTreeQueries=", kMaxTreeQueries);
  const int32_t n = static_cast<int32_t>(tree.nodes.size());
  const int64_t P = tree.page_size;
  int32_t live = 0;
  // A repeated id is reported at its later node.
  const auto [dup_first, dup_second] = detail::IdIndex(tree).first_duplicate();
  for (int32_t i = 0; i < n; ++i) {
    const TreeNode& nd = tree.nodes[i];
    if (!nd.alive) continue;
    ++live;
    TA_CHECK_ARG(i != dup_second, node_name(i) + ".id", "duplicate id ", nd.id, " (also ",
                 node_name(dup_first), ")");
    if (nd.parent != kNoParent) {
      TA_CHECK_ARG(nd.parent >= 0 && nd.parent < n, node_name(i) + ".parent",
                   "unknown parent index ", nd.parent, " (node id ", nd.id, "; tree has ", n,
                   " node slots)");
      TA_CHECK_ARG(tree.nodes[nd.parent].alive, node_name(i) + ".parent", "parent index ",
                   nd.parent, " is dead (node id ", nd.id, ")");
    }
    TA_CHECK_ARG(nd.tokens >= 1, node_name(i) + ".tokens", "must be >= 1, got ", nd.tokens,
                 " (node id ", nd.id, ")");
    if (!pages) continue;
    TA_CHECK_ARG(nd.page_offset >= 0 && nd.page_offset < P, node_name(i) + ".page_offset",
                 "must lie in [0, page_size=", P, "), got ", nd.page_offset);
    const int64_t want = ceil_div(int64_t{nd.page_offset} + nd.tokens, P);
    TA_CHECK_ARG(static_cast<int64_t>(nd.pages.size()) == want, node_name(i) + ".pages", "has ",
                 nd.pages.size(), " pages but page_offset ", nd.page_offset, " + tokens ",
                 nd.tokens, " need ", want, " (page_size ", P, ")");
    for (size_t k = 0; k < nd.pages.size(); ++k) {
      TA_CHECK_ARG(nd.pages[k] >= 0 && nd.pages[k] < tree.num_pages,
                   detail::concat(node_name(i), ".pages[", k, "]"), "page id ", nd.pages[k],
                   " out of range [0, num_pages=", tree.num_pages, ")");
    }
  }
  TA_CHECK_ARG(live > 0, "tree", "empty: no live node");
  TA_CHECK_ARG(!tree.query_node.empty(), "tree", "empty: no query");
  check_acyclic(tree);
  for (size_t q = 0; q < tree.query_node.size(); ++q) {
    const int32_t v = tree.query_node[q];
    TA_CHECK_ARG(v >= 0 && v < n, detail::concat("query ", q), "unknown node index ", v,
                 " (tree has ", n, " node slots)");
    TA_CHECK_ARG(tree.nodes[v].alive, detail::concat("query ", q), "node index ", v, " is dead");
  }
  check_limits(tree, pages);
  if (pages) check_pages(tree);
}

}  // namespace

void check_page_size(int64_t page_size, const std::string& arg) {
  TA_CHECK_ARG(page_size >= 1 && page_size <= kMaxPageSize, arg,
               "must lie in [1, kMaxPageSize=", kMaxPageSize, "], got ", page_size);
}

void validate(const PrefixTree& tree) { validate_tree(tree, true); }

namespace detail {

IdIndex::IdIndex(const PrefixTree& tree) {
  const int32_t n = static_cast<int32_t>(tree.nodes.size());
  int64_t lo = std::numeric_limits<int64_t>::max(), hi = std::numeric_limits<int64_t>::min();
  for (const TreeNode& nd : tree.nodes) {
    if (!nd.alive) continue;
    lo = std::min(lo, nd.id);
    hi = std::max(hi, nd.id);
  }
  lo_ = lo;
  if (lo > hi) return;
  if (static_cast<uint64_t>(hi) - static_cast<uint64_t>(lo) < 4 * static_cast<uint64_t>(n) + 64) {
    table_.assign(static_cast<size_t>(hi - lo) + 1, -1);
    for (int32_t i = 0; i < n; ++i) {
      const TreeNode& nd = tree.nodes[i];
      if (!nd.alive) continue;
      int32_t& o = table_[static_cast<size_t>(nd.id - lo)];
      if (o < 0) {
        o = i;
      } else if (dup_.second < 0) {
        dup_ = {o, i};
      }
    }
    return;
  }
  sorted_.reserve(tree.nodes.size());
  for (int32_t i = 0; i < n; ++i)
    if (tree.nodes[i].alive) sorted_.emplace_back(tree.nodes[i].id, i);
  std::sort(sorted_.begin(), sorted_.end());
  size_t run = 0;  // start of the run of equal ids: the id's first node
  for (size_t k = 1; k < sorted_.size(); ++k) {
    if (sorted_[k].first != sorted_[k - 1].first) {
      run = k;
    } else if (dup_.second < 0 || sorted_[k].second < dup_.second) {
      dup_ = {sorted_[run].second, sorted_[k].second};
    }
  }
}

int32_t IdIndex::find(int64_t id) const {
  if (!table_.empty()) {
    if (id < lo_ || static_cast<uint64_t>(id) - static_cast<uint64_t>(lo_) >= table_.size())
      return -1;
    return table_[static_cast<size_t>(static_cast<uint64_t>(id) - static_cast<uint64_t>(lo_))];
  }
  const auto it =
      std::lower_bound(sorted_.begin(), sorted_.end(), std::pair<int64_t, int32_t>{id, -1});
  return it != sorted_.end() && it->first == id ? it->second : -1;
}

void validate_structure(const PrefixTree& tree) { validate_tree(tree, false); }

std::vector<int32_t> path_lengths(const PrefixTree& tree) {
  std::vector<int32_t> len(tree.nodes.size(), 0);
  for (const int32_t v : preorder_of(tree)) {
    const int32_t p = tree.nodes[v].parent;
    len[v] = p == kNoParent ? 1 : len[p] + 1;
  }
  return len;
}

int64_t path_depth_sum(const PrefixTree& tree, const std::vector<int32_t>& lengths) {
  int64_t sum = 0;
  for (const int32_t v : tree.query_node)
    if (v >= 0 && v < static_cast<int32_t>(lengths.size())) sum += lengths[v];
  return sum;
}

int32_t children_csr(const PrefixTree& tree, std::vector<int32_t>* ptr, std::vector<int32_t>* ids,
                     std::vector<int32_t>* roots) {
  const int32_t n = static_cast<int32_t>(tree.nodes.size());
  ptr->assign(n + 1, 0);
  roots->clear();
  const auto has_parent = [&](const TreeNode& nd) {
    return nd.alive && nd.parent != kNoParent && nd.parent >= 0 && nd.parent < n;
  };
  int32_t bad = -1;
  for (int32_t i = 0; i < n; ++i) {
    const TreeNode& nd = tree.nodes[i];
    if (nd.alive && nd.parent == kNoParent) roots->push_back(i);
    if (has_parent(nd)) {
      ++(*ptr)[nd.parent + 1];
    } else if (nd.alive && nd.parent != kNoParent && bad < 0) {
      bad = i;
    }
  }
  for (int32_t i = 0; i < n; ++i) (*ptr)[i + 1] += (*ptr)[i];
  ids->resize((*ptr)[n]);
  std::vector<int32_t> fill(ptr->begin(), ptr->end() - 1);
  for (int32_t i = 0; i < n; ++i)
    if (has_parent(tree.nodes[i])) (*ids)[fill[tree.nodes[i].parent]++] = i;
  return bad;
}

std::vector<int32_t> preorder_csr(const std::vector<int32_t>& ptr, const std::vector<int32_t>& ids,
                                  const std::vector<int32_t>& roots) {
  std::vector<int32_t> order;
  order.reserve(ptr.size() - 1);
  std::vector<int32_t> stack(roots.rbegin(), roots.rend());
  while (!stack.empty()) {
    const int32_t v = stack.back();
    stack.pop_back();
    order.push_back(v);
    for (int32_t k = ptr[v + 1] - 1; k >= ptr[v]; --k) stack.push_back(ids[k]);
  }
  return order;
}

std::vector<int32_t> preorder_of(const PrefixTree& tree) {
  std::vector<int32_t> ptr, ids, roots;
  children_csr(tree, &ptr, &ids, &roots);
  return preorder_csr(ptr, ids, roots);
}

void sort_page_ids(std::vector<int32_t>* ids) {
  std::vector<int32_t>& v = *ids;
  if (v.size() < 256) {
    std::sort(v.begin(), v.end());
    return;
  }
  constexpr int kBits = 11;
  constexpr uint32_t kDigits = 1u << kBits;
  const uint32_t hi = static_cast<uint32_t>(*std::max_element(v.begin(), v.end()));
  thread_local std::vector<int32_t> tmp;
  tmp.resize(v.size());
  std::vector<size_t> start(kDigits + 1);
  for (int shift = 0; shift < 32 && (shift == 0 || (hi >> shift) != 0); shift += kBits) {
    std::fill(start.begin(), start.end(), 0);
    for (const int32_t x : v) ++start[((static_cast<uint32_t>(x) >> shift) & (kDigits - 1)) + 1];
    for (uint32_t d = 0; d < kDigits; ++d) start[d + 1] += start[d];
    for (const int32_t x : v) tmp[start[(static_cast<uint32_t>(x) >> shift) & (kDigits - 1)]++] = x;
    v.swap(tmp);
  }
}

PrefixTree assemble_tree(const std::vector<int32_t>& parents, const std::vector<int32_t>& tokens,
                         const std::vector<int32_t>& query_nodes, int32_t page_size,
                         PageLayout layout, uint64_t seed, int32_t spare_pages) {
  check_page_size(page_size, "page_size");
  const int32_t n = static_cast<int32_t>(parents.size());
  TA_CHECK_INTERNAL(tokens.size() == parents.size(), "parents/tokens size mismatch");
  PrefixTree tree;
  tree.page_size = page_size;
  tree.nodes.resize(n);
  for (int32_t i = 0; i < n; ++i) {
    TA_CHECK_INTERNAL(parents[i] == kNoParent || (parents[i] >= 0 && parents[i] < i),
                      "assemble_tree: parent must precede child");
    tree.nodes[i].id = i;
    tree.nodes[i].parent = parents[i];
    tree.nodes[i].tokens = tokens[i];
  }
  tree.query_node = query_nodes;
  // Parents precede children, so one forward pass gives absolute starts.
  std::vector<int64_t> start(n, 0);
  for (int32_t i = 0; i < n; ++i) {
    if (parents[i] != kNoParent) start[i] = start[parents[i]] + tokens[parents[i]];
  }
  const std::vector<int32_t> order = preorder_of(tree);
  int64_t total = 0;
  for (int32_t v : order) {
    TreeNode& nd = tree.nodes[v];
    nd.page_offset = static_cast<int32_t>(start[v] % page_size);
    total += ceil_div(int64_t{nd.page_offset} + nd.tokens, page_size);
  }
  TA_CHECK_ARG(total + spare_pages <= kMaxBuilderPages, "pages", "layout needs ",
               total + spare_pages, " pages, more than the builder limit ", kMaxBuilderPages);
  const int32_t num = static_cast<int32_t>(total) + spare_pages;
  std::vector<int32_t> ids(num);
  std::iota(ids.begin(), ids.end(), 0);
  if (layout == PageLayout::kShuffled) {
    std::mt19937_64 rng(seed ^ 0x9e3779b97f4a7c15ULL);
    shuffle_vec(ids, rng);
  }
  int32_t next = 0;
  for (int32_t v : order) {
    TreeNode& nd = tree.nodes[v];
    nd.pages.resize(ceil_div(int64_t{nd.page_offset} + nd.tokens, page_size));
    for (int32_t& p : nd.pages) p = ids[next++];
  }
  tree.num_pages = num;
  // Spare ids, handed out lowest position first (the allocator pops from the back).
  tree.free_pages.assign(ids.begin() + next, ids.end());
  std::reverse(tree.free_pages.begin(), tree.free_pages.end());
  return tree;
}

}  // namespace detail

// Children and queries are counted first and filled into CSR arrays; queries walk up their
// parent chain instead of materialising their paths.
TreeIndex build_index(const PrefixTree& tree) {
  const int32_t n = static_cast<int32_t>(tree.nodes.size());
  TreeIndex ix;
  const int32_t bad = detail::children_csr(tree, &ix.child_ptr, &ix.child_ids, &ix.roots);
  TA_CHECK_ARG(bad < 0, node_name(bad) + ".parent", "unknown parent index ",
               tree.nodes[bad].parent);
  ix.preorder = detail::preorder_csr(ix.child_ptr, ix.child_ids, ix.roots);
  ix.depth.assign(n, -1);
  ix.start.assign(n, 0);
  for (const int32_t v : ix.preorder) {
    const int32_t p = tree.nodes[v].parent;
    if (p != kNoParent) {
      ix.depth[v] = ix.depth[p] + 1;
      ix.start[v] = ix.start[p] + tree.nodes[p].tokens;
    } else {
      ix.depth[v] = 0;
    }
  }
  // Queries below each node: own counts summed bottom-up (64-bit: the total is the sum of the
  // queries' path depths), then each query walks up its path.
  const int32_t nq = tree.num_queries();
  ix.own_ptr.assign(n + 1, 0);
  for (int32_t q = 0; q < nq; ++q) {
    const int32_t v = tree.query_node[q];
    TA_CHECK_ARG(v >= 0 && v < n, detail::concat("query ", q), "unknown node index ", v);
    ++ix.own_ptr[v + 1];
  }
  ix.below_ptr.assign(ix.own_ptr.begin(), ix.own_ptr.end());
  for (auto it = ix.preorder.rbegin(); it != ix.preorder.rend(); ++it) {
    const int32_t p = tree.nodes[*it].parent;
    if (p != kNoParent) ix.below_ptr[p + 1] += ix.below_ptr[*it + 1];
  }
  for (int32_t i = 0; i < n; ++i) {
    ix.below_ptr[i + 1] += ix.below_ptr[i];
    ix.own_ptr[i + 1] += ix.own_ptr[i];
  }
  ix.own_ids.resize(nq);
  std::vector<int32_t> own_fill(ix.own_ptr.begin(), ix.own_ptr.end() - 1);
  for (int32_t q = 0; q < nq; ++q) ix.own_ids[own_fill[tree.query_node[q]]++] = q;
  ix.below_ids.resize(static_cast<size_t>(ix.below_ptr[n]));
  std::vector<int64_t> fill(ix.below_ptr.begin(), ix.below_ptr.end() - 1);
  // A query on a node of the preorder has a path of live nodes up to a root.
  for (int32_t q = 0; q < nq; ++q) {
    TA_CHECK_ARG(ix.depth[tree.query_node[q]] >= 0, detail::concat("query ", q), "node index ",
                 tree.query_node[q], " is dead or not reachable from a root");
    for (int32_t v = tree.query_node[q]; v != kNoParent; v = tree.nodes[v].parent)
      ix.below_ids[fill[v]++] = q;
  }
  return ix;
}

std::vector<int32_t> query_path(const PrefixTree& tree, int32_t q) {
  TA_CHECK_ARG(q >= 0 && q < tree.num_queries(), "query", "index ", q, " out of range [0, ",
               tree.num_queries(), ")");
  const int32_t n = static_cast<int32_t>(tree.nodes.size());
  std::vector<int32_t> path;
  int32_t v = tree.query_node[q];
  TA_CHECK_ARG(v >= 0 && v < n, detail::concat("query ", q), "unknown node index ", v);
  while (v != kNoParent) {
    TA_CHECK_ARG(v >= 0 && v < n && static_cast<int32_t>(path.size()) < n,
                 detail::concat("query ", q), "path is broken or cyclic at node index ", v);
    path.push_back(v);
    v = tree.nodes[v].parent;
  }
  std::reverse(path.begin(), path.end());
  return path;
}

int64_t query_context(const PrefixTree& tree, int32_t q) {
  int64_t sum = 0;
  for (int32_t v : query_path(tree, q)) sum += tree.nodes[v].tokens;
  return sum;
}

int64_t unique_tokens(const PrefixTree& tree) {
  const int32_t n = static_cast<int32_t>(tree.nodes.size());
  std::vector<char> used(n, 0);
  int64_t sum = 0;
  for (int32_t q = 0; q < tree.num_queries(); ++q) {
    int32_t v = tree.query_node[q];
    int32_t steps = 0;
    while (v != kNoParent && v >= 0 && v < n && !used[v] && steps++ <= n) {
      used[v] = 1;
      sum += tree.nodes[v].tokens;
      v = tree.nodes[v].parent;
    }
  }
  return sum;
}

}  // namespace treeattn
