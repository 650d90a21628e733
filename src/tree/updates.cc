// PrefixTree updates as a decode server applies them: append tokens to a query (grow its leaf in
// place, or fork a copy-on-write child) or to many queries in one call, add a query, remove a
// query (pruning what no query uses and returning its pages to the free-page pool), replace every
// query's node at once (a whole step's finished, joining and moved requests), fork a query, and
// the checked num_pages setter.
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
// costs O(nodes + queries + pages listed + pool) at most, times log(new or freed pages), once per
// call: the bulk forms pay it once for a whole step.
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

// Absolute position of token 0 of every node reachable from a root (-1 for the others: dead,
// or on a broken or cyclic parent chain), from one preorder pass.
std::vector<int64_t> node_starts(const PrefixTree& t) {
  std::vector<int64_t> start(t.nodes.size(), -1);
  for (const int32_t v : detail::preorder_of(t)) {
    const int32_t p = t.nodes[v].parent;
    start[v] = p == kNoParent ? 0 : start[p] + t.nodes[p].tokens;
  }
  return start;
}

// Appends counts[i] tokens to query queries[i] for every i (append_tokens when `page_ptr` is
// null: one query, `given` holds at least the pages it needs, extra ones ignored;
// append_tokens_bulk otherwise: `given` split by *page_ptr, exactly the pages each query needs,
// or both empty for the pool). Every check runs before the first change.
void append_many(PrefixTree& t, const std::vector<int32_t>& queries,
                 const std::vector<int32_t>& counts, const std::vector<int64_t>* page_ptr,
                 const std::vector<int32_t>& given) {
  const bool bulk = page_ptr != nullptr;
  const auto q_name = [&](size_t i) {
    return bulk ? detail::concat("queries[", i, "]") : std::string("query");
  };
  const auto k_name = [&](size_t i) {
    return bulk ? detail::concat("counts[", i, "]") : std::string("k");
  };
  const size_t n = queries.size();
  TA_CHECK_ARG(counts.size() == n, "counts", "expected ", n, " entries (one per query), got ",
               counts.size());
  const bool from_pool = given.empty() && (!bulk || page_ptr->empty());
  if (bulk && !from_pool) {
    const std::vector<int64_t>& ptr = *page_ptr;
    TA_CHECK_ARG(ptr.size() == n + 1, "page_ptr", "expected ", n + 1,
                 " offsets (queries + 1), got ", ptr.size());
    TA_CHECK_ARG(ptr[0] == 0, "page_ptr", "must start at 0, got ", ptr[0]);
    for (size_t i = 0; i < n; ++i)
      TA_CHECK_ARG(ptr[i] <= ptr[i + 1], detail::concat("page_ptr[", i + 1, "]"), ptr[i + 1],
                   " is below page_ptr[", i, "] = ", ptr[i]);
    TA_CHECK_ARG(ptr[n] == static_cast<int64_t>(given.size()), "page_ptr",
                 "must end at len(new_pages) = ", given.size(), ", got ", ptr[n]);
  }
  check_page_size(t.page_size, "page_size");
  if (n == 0) return;
  const int64_t P = t.page_size;
  const int32_t num_nodes = static_cast<int32_t>(t.nodes.size());
  // One pass over the tree: live children and queries per node (for one query, of its node
  // only), and the totals the limits need.
  std::vector<int32_t> children(bulk ? num_nodes : 0, 0), on_node(bulk ? num_nodes : 0, 0);
  const int32_t x = !bulk && queries[0] >= 0 && queries[0] < t.num_queries()
                        ? t.query_node[queries[0]]
                        : kNoParent;
  int32_t x_children = 0, x_queries = 0;
  int64_t tokens = 0, listed = 0, max_id = std::numeric_limits<int64_t>::min();
  for (const TreeNode& nd : t.nodes) {
    max_id = std::max(max_id, nd.id);
    if (!nd.alive) continue;
    tokens += nd.tokens;
    listed += static_cast<int64_t>(nd.pages.size());
    if (!bulk)
      x_children += nd.parent == x && x != kNoParent;
    else if (nd.parent >= 0 && nd.parent < num_nodes)
      ++children[nd.parent];
  }
  for (const int32_t v : t.query_node) {
    if (!bulk)
      x_queries += v == x;
    else if (v >= 0 && v < num_nodes)
      ++on_node[v];
  }
  std::vector<char> listed_query(bulk ? t.query_node.size() : 0, 0);
  std::vector<char> grow(n);
  int64_t appended = 0, forks = 0;
  for (size_t i = 0; i < n; ++i) {
    const int32_t q = queries[i];
    TA_CHECK_ARG(q >= 0 && q < t.num_queries(), q_name(i), "query index ", q, " out of range [0, ",
                 t.num_queries(), ")");
    const int32_t v = t.query_node[q];
    TA_CHECK_ARG(v >= 0 && v < num_nodes && t.nodes[v].alive, q_name(i), "query ", q,
                 " sits on node index ", v, " which is unknown or dead");
    if (bulk) {
      TA_CHECK_ARG(!listed_query[q], q_name(i), "query ", q, " is listed twice");
      listed_query[q] = 1;
    }
    TA_CHECK_ARG(counts[i] >= 1, k_name(i), "must be >= 1, got ", counts[i]);
    appended += counts[i];
    grow[i] = bulk ? children[v] == 0 && on_node[v] == 1 : x_children == 0 && x_queries == 1;
    if (grow[i]) {
      TA_CHECK_ARG(int64_t{t.nodes[v].tokens} + counts[i] <= std::numeric_limits<int32_t>::max(),
                   k_name(i), "node would exceed 2^31-1 tokens");
    } else {
      ++forks;
    }
  }
  const char* total_name = bulk ? "counts" : "k";
  TA_CHECK_ARG(tokens + appended <= kMaxTreeTokens, total_name, "appending ", appended,
               " tokens would make ", tokens + appended,
               " tokens over live nodes, above the limit kMaxTreeTokens=", kMaxTreeTokens);
  std::vector<int64_t> start;  // per node, only when some query forks
  if (forks > 0) {
    TA_CHECK_ARG(num_nodes + forks <= kMaxTreeNodes, "nodes", "tree has ", num_nodes,
                 " node slots and the appends add ", forks,
                 ", the limit kMaxTreeNodes=", kMaxTreeNodes);
    TA_CHECK_ARG(max_id <= std::numeric_limits<int64_t>::max() - forks, "nodes", "no free node id");
    check_path_depth_sum(t, forks,
                         bulk ? "queries" : "query");  // each fork lengthens a path by one
    start = node_starts(t);
  }
  // Fresh pages per query: a grown node fills its last page first; a forked child starts at
  // slot (start + tokens of its parent) % P of a fresh page.
  std::vector<int64_t> need(n);
  std::vector<int32_t> child_offset(n, 0);
  int64_t total_need = 0;
  for (size_t i = 0; i < n; ++i) {
    const int32_t v = t.query_node[queries[i]];
    const TreeNode& nd = t.nodes[v];
    if (grow[i]) {
      const int64_t used = int64_t{nd.page_offset} + nd.tokens;
      need[i] = ceil_div(used + counts[i], P) - ceil_div(used, P);
    } else {
      TA_CHECK_ARG(start[v] >= 0, detail::concat("nodes[", v, "]"),
                   "parent chain is broken or cyclic (validate())");
      child_offset[i] = static_cast<int32_t>((start[v] + nd.tokens) % P);
      need[i] = ceil_div(int64_t{child_offset[i]} + counts[i], P);
    }
    total_need += need[i];
    if (bulk && !from_pool) {
      const int64_t got = (*page_ptr)[i + 1] - (*page_ptr)[i];
      TA_CHECK_ARG(got == need[i], "new_pages", "query ", queries[i], " (", q_name(i), ") appends ",
                   counts[i], " tokens ", grow[i] ? "to its leaf" : "in a new child node",
                   " and needs exactly ", need[i], " fresh pages, page_ptr gives it ", got);
    }
  }
  TA_CHECK_ARG(listed + total_need <= kMaxTreePages, total_name, "appending ", appended,
               " tokens would make ", listed + total_need,
               " page ids listed by live nodes, above the limit kMaxTreePages=", kMaxTreePages);
  const std::vector<int32_t> fresh = pages_to_take(t, total_need, given);
  // Everything is checked; allocate before the first change so that none can fail half-way.
  std::vector<TreeNode> children_made(static_cast<size_t>(forks));
  size_t c = 0, at = 0;
  for (size_t i = 0; i < n; ++i) {
    const int32_t v = t.query_node[queries[i]];
    const auto first = fresh.begin() + static_cast<std::ptrdiff_t>(at);
    at += static_cast<size_t>(need[i]);
    if (grow[i]) {
      t.nodes[v].pages.reserve(t.nodes[v].pages.size() + need[i]);
    } else {
      TreeNode& child = children_made[c++];
      child.id = max_id + static_cast<int64_t>(c);
      child.parent = v;
      child.tokens = counts[i];
      child.page_offset = child_offset[i];
      child.pages.assign(first, first + need[i]);
    }
  }
  t.nodes.reserve(t.nodes.size() + children_made.size());
  remove_from_pool(t, fresh, from_pool);
  c = at = 0;
  for (size_t i = 0; i < n; ++i) {
    const int32_t v = t.query_node[queries[i]];
    const auto first = fresh.begin() + static_cast<std::ptrdiff_t>(at);
    at += static_cast<size_t>(need[i]);
    if (grow[i]) {
      t.nodes[v].tokens += counts[i];
      t.nodes[v].pages.insert(t.nodes[v].pages.end(), first, first + need[i]);
    } else {
      t.nodes.push_back(std::move(children_made[c++]));
      t.query_node[queries[i]] = static_cast<int32_t>(t.nodes.size()) - 1;
    }
  }
  ++t.version;
}

// Makes `qnodes` (live node indices, checked by the caller) the queries and prunes the nodes no
// query uses: they die and their pages go back to free_pages once, unless a surviving node still
// lists them (a copy-on-write sibling) or the pool already does. O(nodes + queries) plus, when
// something is pruned, O((pages listed + pool) log pruned pages).
void replace_queries(PrefixTree& t, std::vector<int32_t> qnodes) {
  const int32_t n = static_cast<int32_t>(t.nodes.size());
  std::vector<char> used(n, 0);
  for (const int32_t q : qnodes)
    for (int32_t v = q; v >= 0 && v < n && !used[v]; v = t.nodes[v].parent) used[v] = 1;
  std::vector<int32_t> freed;
  for (int32_t i = 0; i < n; ++i)
    if (t.nodes[i].alive && !used[i])
      freed.insert(freed.end(), t.nodes[i].pages.begin(), t.nodes[i].pages.end());
  if (!freed.empty()) {
    std::sort(freed.begin(), freed.end());
    freed.erase(std::unique(freed.begin(), freed.end()), freed.end());
    std::vector<char> busy(freed.size(), 0);
    const auto mark = [&](int32_t p) {
      if (p < freed.front() || p > freed.back()) return;
      const auto it = std::lower_bound(freed.begin(), freed.end(), p);
      if (it != freed.end() && *it == p) busy[it - freed.begin()] = 1;
    };
    for (int32_t i = 0; i < n; ++i)
      if (t.nodes[i].alive && used[i])
        for (const int32_t p : t.nodes[i].pages) mark(p);
    for (const int32_t p : t.free_pages) mark(p);
    size_t kept = 0;
    for (size_t k = 0; k < freed.size(); ++k)
      if (!busy[k]) freed[kept++] = freed[k];
    freed.resize(kept);
  }
  t.free_pages.reserve(t.free_pages.size() + freed.size());
  // Only non-allocating changes from here on.
  t.query_node.swap(qnodes);
  for (int32_t i = 0; i < n; ++i) {
    if (!t.nodes[i].alive || used[i]) continue;
    t.nodes[i].alive = false;
    t.nodes[i].pages.clear();
  }
  t.free_pages.insert(t.free_pages.end(), freed.begin(), freed.end());
  ++t.version;
}

}  // namespace

void PrefixTree::append_tokens(int32_t q, int32_t k, const std::vector<int32_t>& new_pages) {
  append_many(*this, {q}, {k}, nullptr, new_pages);
}

void PrefixTree::append_tokens_bulk(const std::vector<int32_t>& queries,
                                    const std::vector<int32_t>& counts,
                                    const std::vector<int64_t>& page_ptr,
                                    const std::vector<int32_t>& new_pages) {
  append_many(*this, queries, counts, &page_ptr, new_pages);
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
  std::vector<int32_t> rest;
  rest.reserve(query_node.size() - 1);
  rest.insert(rest.end(), query_node.begin(), query_node.begin() + q);
  rest.insert(rest.end(), query_node.begin() + q + 1, query_node.end());
  replace_queries(*this, std::move(rest));
}

void PrefixTree::set_query_nodes(const std::vector<int32_t>& nodes_of) {
  TA_CHECK_ARG(!nodes_of.empty(), "nodes", "expected at least one query (the tree would be empty)");
  TA_CHECK_ARG(static_cast<int64_t>(nodes_of.size()) <= kMaxTreeQueries, "nodes", "got ",
               nodes_of.size(), " queries, the limit kMaxTreeQueries=", kMaxTreeQueries);
  const int32_t n = static_cast<int32_t>(nodes.size());
  for (size_t r = 0; r < nodes_of.size(); ++r) {
    const int32_t v = nodes_of[r];
    TA_CHECK_ARG(v >= 0 && v < n, detail::concat("nodes[", r, "]"), "node index ", v,
                 " out of range [0, ", n, ")");
    TA_CHECK_ARG(nodes[v].alive, detail::concat("nodes[", r, "]"), "node index ", v, " is dead");
  }
  const std::vector<int32_t> len = detail::path_lengths(*this);
  int64_t sum = 0;
  for (const int32_t v : nodes_of) sum += len[v];
  TA_CHECK_ARG(sum <= kMaxPathDepthSum, "nodes", "the path-depth sum (nodes on every query's ",
               "path, summed over queries) would be ", sum,
               ", above the limit kMaxPathDepthSum=", kMaxPathDepthSum);
  replace_queries(*this, nodes_of);
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
