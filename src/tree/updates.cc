// PrefixTree updates as a decode server applies them: append tokens to a query (grow its leaf in
// place, or fork a copy-on-write child), add a query, remove a query (pruning what no query uses
// and returning its pages to the free-page pool), fork a query, and the checked num_pages setter.
//
// Page rules:
//  * Growing a node fills the free slots of its last page first, then takes fresh pages.
//  * A forked child starts at absolute position s = start + tokens of its parent, with
//    page_offset = s % P and a fresh first page even when s is mid-page (vLLM's copy-on-write
//    layout: the engine copies the shared partial page into the child's first page).
//  * Fresh pages come from `new_pages` when it is non-empty (the first ones needed are used, the
//    rest are ignored; ids must lie in [0, num_pages), be distinct and not be in use, and are
//    removed from free_pages if listed there), else from the back of free_pages.
//  * Removed nodes keep their slot (alive = false, pages cleared) so indices stay stable; a freed
//    page goes back to free_pages unless a live node still lists it.
//
// Every update (set_num_pages included) runs all its checks, then allocates what it needs, and
// only then changes the tree, so an error leaves the tree as it was (version included). Each
// costs O(nodes + queries + pages listed) at most, times log(new pages) where pages are given.
#include <algorithm>
#include <limits>
#include <utility>

#include "tree_internal.h"
#include "treeattn/common/error.h"
#include "treeattn/tree/prefix_tree.h"

namespace treeattn {

namespace {

void check_query(const PrefixTree& t, int32_t q) {
  TA_CHECK_ARG(q >= 0 && q < t.num_queries(), "query", "index ", q, " out of range [0, ",
               t.num_queries(), ")");
  const int32_t v = t.query_node[q];
  TA_CHECK_ARG(v >= 0 && v < static_cast<int32_t>(t.nodes.size()) && t.nodes[v].alive,
               detail::concat("query ", q), "sits on node index ", v, " which is unknown or dead");
}

// The path-depth sum after adding `extra` path nodes must stay within kMaxPathDepthSum.
void check_path_depth_sum(const PrefixTree& t, int64_t extra, const char* arg) {
  const int64_t sum = detail::path_depth_sum(t, detail::path_lengths(t));
  TA_CHECK_ARG(sum + extra <= kMaxPathDepthSum, arg, "the update would make the path-depth sum ",
               "(nodes on every query's path, summed over queries) ", sum + extra,
               ", above the limit kMaxPathDepthSum=", kMaxPathDepthSum);
}

// The `need` fresh pages an append takes, checked; changes nothing. From `given` when non-empty
// (the first `need` entries: in [0, num_pages), distinct, not listed by a live node), else from
// the back of free_pages (in [0, num_pages): num_pages may have been lowered since the pool was
// filled). O((need + pages listed by live nodes) log need) time.
std::vector<int32_t> pages_to_take(const PrefixTree& t, int64_t need,
                                   const std::vector<int32_t>& given) {
  std::vector<int32_t> out;
  if (need == 0) return out;
  if (given.empty()) {
    TA_CHECK_ARG(static_cast<int64_t>(t.free_pages.size()) >= need, "new_pages",
                 "not given and the free-page pool holds ", t.free_pages.size(), " pages, need ",
                 need);
    out.assign(t.free_pages.rbegin(), t.free_pages.rbegin() + need);
    for (size_t k = 0; k < out.size(); ++k) {
      TA_CHECK_ARG(out[k] >= 0 && out[k] < t.num_pages,
                   detail::concat("free_pages[", t.free_pages.size() - 1 - k, "]"), "page id ",
                   out[k], " out of range [0, num_pages=", t.num_pages, ")");
    }
    return out;
  }
  TA_CHECK_ARG(static_cast<int64_t>(given.size()) >= need, "new_pages", "got ", given.size(),
               " pages, need ", need);
  out.assign(given.begin(), given.begin() + need);
  for (size_t k = 0; k < out.size(); ++k) {
    TA_CHECK_ARG(out[k] >= 0 && out[k] < t.num_pages, detail::concat("new_pages[", k, "]"),
                 "page id ", out[k], " out of range [0, num_pages=", t.num_pages, ")");
  }
  // (page, position) sorted: a repeat is a neighbour, a page in use a binary search.
  std::vector<std::pair<int32_t, int32_t>> sorted(out.size());
  for (size_t k = 0; k < out.size(); ++k) sorted[k] = {out[k], static_cast<int32_t>(k)};
  std::sort(sorted.begin(), sorted.end());
  int32_t repeat = -1;  // the first position that repeats an earlier one
  for (size_t k = 1; k < sorted.size(); ++k) {
    if (sorted[k].first == sorted[k - 1].first && (repeat < 0 || sorted[k].second < repeat))
      repeat = sorted[k].second;
  }
  TA_CHECK_ARG(repeat < 0, detail::concat("new_pages[", repeat, "]"), "page id ", out[repeat],
               " repeated");
  int32_t busy = -1;  // the first position holding a page a live node lists
  for (const TreeNode& nd : t.nodes) {
    if (!nd.alive) continue;
    for (const int32_t p : nd.pages) {
      const auto it = std::lower_bound(sorted.begin(), sorted.end(), std::make_pair(p, -1));
      if (it != sorted.end() && it->first == p && (busy < 0 || it->second < busy))
        busy = it->second;
    }
  }
  TA_CHECK_ARG(busy < 0, detail::concat("new_pages[", busy, "]"), "page id ", out[busy],
               " is in use by a live node");
  return out;
}

// Removes the pages pages_to_take() returned from free_pages: the pool's tail, or given pages
// wherever the pool lists them.
void remove_from_pool(PrefixTree& t, const std::vector<int32_t>& taken, bool from_pool) {
  if (taken.empty()) return;
  if (from_pool) {
    t.free_pages.resize(t.free_pages.size() - taken.size());
    return;
  }
  std::vector<int32_t> gone(taken);
  std::sort(gone.begin(), gone.end());
  t.free_pages.erase(
      std::remove_if(t.free_pages.begin(), t.free_pages.end(),
                     [&](int32_t p) { return std::binary_search(gone.begin(), gone.end(), p); }),
      t.free_pages.end());
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
  check_page_size(page_size, "page_size");
  TA_CHECK_ARG(k >= 1, "k", "must be >= 1, got ", k);
  const int32_t x = query_node[q];
  const int64_t P = page_size;
  bool leaf = true;
  int64_t tokens = 0, listed = 0;
  for (const TreeNode& nd : nodes) {
    if (!nd.alive) continue;
    leaf = leaf && nd.parent != x;
    tokens += nd.tokens;
    listed += static_cast<int64_t>(nd.pages.size());
  }
  TA_CHECK_ARG(tokens + k <= kMaxTreeTokens, "k", "appending ", k, " tokens would make ",
               tokens + k,
               " tokens over live nodes, above the limit kMaxTreeTokens=", kMaxTreeTokens);
  const bool alone = std::count(query_node.begin(), query_node.end(), x) == 1;
  const TreeNode& node = nodes[x];
  const bool grow = leaf && alone;
  int64_t need = 0;
  TreeNode child;
  if (grow) {
    TA_CHECK_ARG(int64_t{node.tokens} + k <= std::numeric_limits<int32_t>::max(), "k",
                 "node would exceed 2^31-1 tokens");
    const int64_t used = int64_t{node.page_offset} + node.tokens;
    need = ceil_div(used + k, P) - ceil_div(used, P);
  } else {
    TA_CHECK_ARG(static_cast<int64_t>(nodes.size()) < kMaxTreeNodes, "nodes", "tree has ",
                 nodes.size(), " node slots, the limit kMaxTreeNodes=", kMaxTreeNodes);
    int64_t max_id = std::numeric_limits<int64_t>::min();
    for (const TreeNode& nd : nodes) max_id = std::max(max_id, nd.id);
    TA_CHECK_ARG(max_id < std::numeric_limits<int64_t>::max(), "nodes", "no free node id");
    check_path_depth_sum(*this, 1, "q");  // q's path gains the new child
    child.id = max_id + 1;
    child.parent = x;
    child.tokens = k;
    child.page_offset = static_cast<int32_t>((node_start(*this, x) + node.tokens) % P);
    need = ceil_div(int64_t{child.page_offset} + k, P);
  }
  TA_CHECK_ARG(listed + need <= kMaxTreePages, "k", "appending ", k, " tokens would make ",
               listed + need,
               " page ids listed by live nodes, above the limit kMaxTreePages=", kMaxTreePages);
  std::vector<int32_t> fresh = pages_to_take(*this, need, new_pages);
  // Everything is checked; allocate before the first change so that none can fail half-way.
  if (grow) {
    nodes[x].pages.reserve(nodes[x].pages.size() + fresh.size());
  } else {
    nodes.reserve(nodes.size() + 1);
    child.pages = fresh;
  }
  remove_from_pool(*this, fresh, new_pages.empty());
  if (grow) {
    nodes[x].tokens += k;
    nodes[x].pages.insert(nodes[x].pages.end(), fresh.begin(), fresh.end());
  } else {
    nodes.push_back(std::move(child));
    query_node[q] = static_cast<int32_t>(nodes.size()) - 1;
  }
  ++version;
}

int32_t PrefixTree::add_query(int32_t node) {
  TA_CHECK_ARG(node >= 0 && node < static_cast<int32_t>(nodes.size()), "node", "node index ", node,
               " out of range [0, ", nodes.size(), ")");
  TA_CHECK_ARG(nodes[node].alive, "node", "node index ", node, " is dead");
  TA_CHECK_ARG(num_queries() < kMaxTreeQueries, "node", "tree has ", num_queries(),
               " queries, the limit kMaxTreeQueries=", kMaxTreeQueries);
  check_path_depth_sum(*this, detail::path_lengths(*this)[node], "node");
  query_node.push_back(node);
  ++version;
  return num_queries() - 1;
}

void PrefixTree::remove_query(int32_t q) {
  check_query(*this, q);
  TA_CHECK_ARG(num_queries() > 1, "query",
               "cannot remove the last query (the tree would be empty)");
  // Nodes still used by the other queries; the rest die and free their pages.
  const int32_t n = static_cast<int32_t>(nodes.size());
  std::vector<char> used(n, 0);
  for (int32_t r = 0; r < num_queries(); ++r) {
    if (r == q) continue;
    for (int32_t v = query_node[r]; v != kNoParent && !used[v]; v = nodes[v].parent) used[v] = 1;
  }
  std::vector<int32_t> freed;
  for (int32_t i = 0; i < n; ++i)
    if (nodes[i].alive && !used[i])
      freed.insert(freed.end(), nodes[i].pages.begin(), nodes[i].pages.end());
  // A page goes back to the pool once, and only if no live node still lists it (sorted lists,
  // not a bitmap over num_pages, which may be huge).
  std::vector<int32_t> busy(free_pages);
  for (int32_t i = 0; i < n; ++i)
    if (nodes[i].alive && used[i])
      busy.insert(busy.end(), nodes[i].pages.begin(), nodes[i].pages.end());
  std::sort(busy.begin(), busy.end());
  std::sort(freed.begin(), freed.end());
  freed.erase(std::unique(freed.begin(), freed.end()), freed.end());
  freed.erase(
      std::remove_if(freed.begin(), freed.end(),
                     [&](int32_t p) { return std::binary_search(busy.begin(), busy.end(), p); }),
      freed.end());
  free_pages.reserve(free_pages.size() + freed.size());
  // Only non-allocating changes from here on.
  query_node.erase(query_node.begin() + q);
  for (int32_t i = 0; i < n; ++i) {
    if (!nodes[i].alive || used[i]) continue;
    nodes[i].alive = false;
    nodes[i].pages.clear();
  }
  free_pages.insert(free_pages.end(), freed.begin(), freed.end());
  ++version;
}

int32_t PrefixTree::fork_query(int32_t q, int32_t n) {
  check_query(*this, q);
  TA_CHECK_ARG(n >= 1, "n", "must be >= 1, got ", n);
  TA_CHECK_ARG(int64_t{num_queries()} + n - 1 <= kMaxTreeQueries, "n", "forking query ", q,
               " into ", n, " would make ", int64_t{num_queries()} + n - 1,
               " queries, above the limit kMaxTreeQueries=", kMaxTreeQueries);
  if (n > 1)
    check_path_depth_sum(*this, int64_t{n - 1} * detail::path_lengths(*this)[query_node[q]], "n");
  const int32_t first = num_queries();
  query_node.insert(query_node.end(), static_cast<size_t>(n - 1), query_node[q]);
  ++version;
  return first;
}

void PrefixTree::set_num_pages(int32_t n) {
  TA_CHECK_ARG(n >= 0, "num_pages", "must be >= 0, got ", n);
  int32_t max_page = -1;
  for (const TreeNode& nd : nodes)
    if (nd.alive)
      for (const int32_t p : nd.pages) max_page = std::max(max_page, p);
  TA_CHECK_ARG(max_page < n, "num_pages", "must be above every page id a live node lists, got ", n,
               " but page id ", max_page, " is in use");
  for (const int32_t p : free_pages) max_page = std::max(max_page, p);
  TA_CHECK_ARG(max_page < n, "num_pages", "must be above every page id in free_pages, got ", n,
               " but page id ", max_page, " is in the pool");
  num_pages = n;
  ++version;
}

}  // namespace treeattn
