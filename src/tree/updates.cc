// PrefixTree updates as a decode server applies them: append tokens to a query (grow its leaf in
// place, or fork a copy-on-write child), add a query, remove a query (pruning what no query uses
// and returning its pages to the free-page pool), fork a query.
//
// Page rules:
//  * Growing a node fills the free slots of its last page first, then takes fresh pages.
//  * A forked child starts at absolute position s = start + tokens of its parent, with
//    page_offset = s % P and a fresh first page even when s is mid-page (vLLM's copy-on-write
//    layout: the engine copies the shared partial page into the child's first page).
//  * Fresh pages come from `new_pages` when it is non-empty (the first ones needed are used, the
//    rest are ignored; ids must lie in [0, num_pages) and are removed from free_pages if listed
//    there), else from the back of free_pages. The caller must not pass pages in use.
//  * Removed nodes keep their slot (alive = false, pages cleared) so indices stay stable; a freed
//    page goes back to free_pages unless a live node still lists it.
#include <algorithm>
#include <limits>

#include "tree_internal.h"
#include "treeattn/common/error.h"
#include "treeattn/tree/prefix_tree.h"

namespace treeattn {

namespace {

void check_query(const PrefixTree& t, int32_t q) {
  TA_CHECK_ARG(q >= 0 && q < t.num_queries(), "q", "query index ", q, " out of range [0, ",
               t.num_queries(), ")");
  const int32_t v = t.query_node[q];
  TA_CHECK_ARG(v >= 0 && v < static_cast<int32_t>(t.nodes.size()) && t.nodes[v].alive,
               detail::concat("query ", q), "sits on node index ", v, " which is unknown or dead");
}

// Takes `need` fresh pages from new_pages (when given) or the free pool.
std::vector<int32_t> take_pages(PrefixTree& t, int64_t need, const std::vector<int32_t>& given) {
  std::vector<int32_t> out;
  if (need == 0) return out;
  if (!given.empty()) {
    TA_CHECK_ARG(static_cast<int64_t>(given.size()) >= need, "new_pages", "got ", given.size(),
                 " pages, need ", need);
    out.assign(given.begin(), given.begin() + need);
    for (size_t k = 0; k < out.size(); ++k) {
      TA_CHECK_ARG(out[k] >= 0 && out[k] < t.num_pages, detail::concat("new_pages[", k, "]"),
                   "page id ", out[k], " out of range [0, num_pages=", t.num_pages, ")");
      for (size_t j = 0; j < k; ++j)
        TA_CHECK_ARG(out[j] != out[k], detail::concat("new_pages[", k, "]"), "page id ", out[k],
                     " repeated");
    }
    // Pages a live node lists are in use (sorted copy: the check is O(pages log pages)).
    std::vector<int32_t> busy;
    for (const TreeNode& nd : t.nodes)
      if (nd.alive) busy.insert(busy.end(), nd.pages.begin(), nd.pages.end());
    std::sort(busy.begin(), busy.end());
    for (size_t k = 0; k < out.size(); ++k)
      TA_CHECK_ARG(!std::binary_search(busy.begin(), busy.end(), out[k]),
                   detail::concat("new_pages[", k, "]"), "page id ", out[k],
                   " is in use by a live node");
    auto used = [&](int32_t p) { return std::find(out.begin(), out.end(), p) != out.end(); };
    t.free_pages.erase(std::remove_if(t.free_pages.begin(), t.free_pages.end(), used),
                       t.free_pages.end());
    return out;
  }
  TA_CHECK_ARG(static_cast<int64_t>(t.free_pages.size()) >= need, "new_pages",
               "not given and the free-page pool holds ", t.free_pages.size(), " pages, need ",
               need);
  out.assign(t.free_pages.end() - need, t.free_pages.end());
  std::reverse(out.begin(), out.end());
  t.free_pages.resize(t.free_pages.size() - need);
  return out;
}

int64_t node_start(const PrefixTree& t, int32_t v) {
  int64_t s = 0;
  size_t steps = 0;
  for (int32_t p = t.nodes[v].parent; p != kNoParent; p = t.nodes[p].parent) {
    TA_CHECK_ARG(p >= 0 && p < static_cast<int32_t>(t.nodes.size()) && ++steps <= t.nodes.size(),
                 detail::concat("nodes[", v, "]"), "parent chain is broken or cyclic (validate())");
    s += t.nodes[p].tokens;
  }
  return s;
}

}  // namespace

void PrefixTree::append_tokens(int32_t q, int32_t k, const std::vector<int32_t>& new_pages) {
  check_query(*this, q);
  TA_CHECK_ARG(page_size >= 1, "page_size", "must be >= 1, got ", page_size);
  TA_CHECK_ARG(k >= 1, "k", "must be >= 1, got ", k);
  const int32_t x = query_node[q];
  const int64_t P = page_size;
  bool leaf = true;
  for (const TreeNode& nd : nodes) leaf = leaf && !(nd.alive && nd.parent == x);
  const bool alone = std::count(query_node.begin(), query_node.end(), x) == 1;
  TreeNode& node = nodes[x];
  if (leaf && alone) {
    TA_CHECK_ARG(int64_t{node.tokens} + k <= std::numeric_limits<int32_t>::max(), "k",
                 "node would exceed 2^31-1 tokens");
    const int64_t used = int64_t{node.page_offset} + node.tokens;
    const int64_t need = ceil_div(used + k, P) - ceil_div(used, P);
    std::vector<int32_t> fresh = take_pages(*this, need, new_pages);
    nodes[x].tokens += k;
    nodes[x].pages.insert(nodes[x].pages.end(), fresh.begin(), fresh.end());
    ++version;
    return;
  }
  TA_CHECK_ARG(static_cast<int64_t>(nodes.size()) < kMaxTreeNodes, "nodes", "tree has ",
               nodes.size(), " node slots, the limit kMaxTreeNodes=", kMaxTreeNodes);
  int64_t max_id = std::numeric_limits<int64_t>::min();
  for (const TreeNode& nd : nodes) max_id = std::max(max_id, nd.id);
  TA_CHECK_ARG(max_id < std::numeric_limits<int64_t>::max(), "nodes", "no free node id");
  TreeNode child;
  child.id = max_id + 1;
  child.parent = x;
  child.tokens = k;
  child.page_offset = static_cast<int32_t>((node_start(*this, x) + node.tokens) % P);
  child.pages = take_pages(*this, ceil_div(int64_t{child.page_offset} + k, P), new_pages);
  nodes.push_back(std::move(child));
  query_node[q] = static_cast<int32_t>(nodes.size()) - 1;
  ++version;
}

int32_t PrefixTree::add_query(int32_t node) {
  TA_CHECK_ARG(node >= 0 && node < static_cast<int32_t>(nodes.size()), "node", "node index ", node,
               " out of range [0, ", nodes.size(), ")");
  TA_CHECK_ARG(nodes[node].alive, "node", "node index ", node, " is dead");
  TA_CHECK_ARG(num_queries() < kMaxTreeQueries, "node", "tree has ", num_queries(),
               " queries, the limit kMaxTreeQueries=", kMaxTreeQueries);
  query_node.push_back(node);
  ++version;
  return num_queries() - 1;
}

void PrefixTree::remove_query(int32_t q) {
  check_query(*this, q);
  TA_CHECK_ARG(num_queries() > 1, "q", "cannot remove the last query (the tree would be empty)");
  query_node.erase(query_node.begin() + q);
  ++version;
  const int32_t n = static_cast<int32_t>(nodes.size());
  std::vector<char> used(n, 0);
  for (int32_t v : query_node) {
    for (; v != kNoParent && !used[v]; v = nodes[v].parent) used[v] = 1;
  }
  std::vector<int32_t> freed;
  for (int32_t i = 0; i < n; ++i) {
    if (!nodes[i].alive || used[i]) continue;
    nodes[i].alive = false;
    freed.insert(freed.end(), nodes[i].pages.begin(), nodes[i].pages.end());
    nodes[i].pages.clear();
  }
  if (freed.empty()) return;
  // A page goes back to the pool once, and only if no live node still lists it (sorted lists,
  // not a bitmap over num_pages, which may be huge).
  std::vector<int32_t> busy(free_pages);
  for (const TreeNode& nd : nodes) {
    if (nd.alive) busy.insert(busy.end(), nd.pages.begin(), nd.pages.end());
  }
  std::sort(busy.begin(), busy.end());
  std::sort(freed.begin(), freed.end());
  freed.erase(std::unique(freed.begin(), freed.end()), freed.end());
  for (int32_t p : freed) {
    if (!std::binary_search(busy.begin(), busy.end(), p)) free_pages.push_back(p);
  }
}

int32_t PrefixTree::fork_query(int32_t q, int32_t n) {
  check_query(*this, q);
  TA_CHECK_ARG(n >= 1, "n", "must be >= 1, got ", n);
  TA_CHECK_ARG(int64_t{num_queries()} + n - 1 <= kMaxTreeQueries, "n", "forking query ", q,
               " into ", n, " would make ", int64_t{num_queries()} + n - 1,
               " queries, above the limit kMaxTreeQueries=", kMaxTreeQueries);
  const int32_t first = num_queries();
  query_node.insert(query_node.end(), static_cast<size_t>(n - 1), query_node[q]);
  ++version;
  return first;
}

}  // namespace treeattn
