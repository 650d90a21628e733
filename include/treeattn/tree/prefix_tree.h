// PrefixTree: which KV tokens every decode query sees, as a forest of nodes over paged KV.
//
// Token -> page mapping. A node holds `tokens` consecutive tokens that continue its parent's
// sequence. Its tokens fill its own page list starting at slot `page_offset` of pages[0]:
//   token i of the node  ->  page pages[(page_offset + i) / P], slot (page_offset + i) % P.
// So pages.size() == ceil((page_offset + tokens) / P). Builders set page_offset to the node's
// absolute start position modulo P (the vLLM layout: absolute position t sits in slot t % P), so a
// node that starts mid-page starts mid-way through its own first page; the slots before it in
// that page belong to whoever owns them (the parent's copy-on-write twin, or nobody) and are never
// read through this node. Page ids lie in [0, num_pages).
//
// A query attends every token on the path root -> its node, its node included. Several queries
// may share a node; queries may sit on internal nodes; the tree may be a forest of several roots.
// Query q is row q of the caller's q tensor.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace treeattn {

inline constexpr int32_t kNoParent = -1;

/// Documented limits, checked up front (validate(), the builders, the updates, the JSON reader)
/// with an error naming the limit and the argument, so that no input can make planning allocate
/// without bound. Planning memory grows with the path-depth sum (every query's path is walked).
inline constexpr int64_t kMaxTreeNodes = int64_t{1} << 24;         ///< node slots
inline constexpr int64_t kMaxTreeQueries = int64_t{1} << 24;       ///< queries
inline constexpr int64_t kMaxTreeTokens = (int64_t{1} << 31) - 1;  ///< tokens over live nodes
inline constexpr int64_t kMaxTreePages = int64_t{1} << 26;      ///< page ids listed by live nodes
inline constexpr int64_t kMaxPathDepthSum = int64_t{1} << 25;   ///< sum over queries of path nodes
inline constexpr int64_t kMaxJsonFileBytes = int64_t{1} << 28;  ///< tree_from_json(_file) input
/// Tokens per page. KV caches, random inputs and page slots grow with it, so it is bounded like
/// the counts above: every builder, the JSON reader, validate(), the CLI flag and the Python
/// constructors check it with check_page_size().
inline constexpr int32_t kMaxPageSize = 4096;

/// Throws std::invalid_argument naming `arg` unless 1 <= page_size <= kMaxPageSize.
void check_page_size(int64_t page_size, const std::string& arg);

/// One node: a run of KV tokens continuing its parent's sequence (see file comment for pages).
struct TreeNode {
  int64_t id = 0;              ///< user-visible id (JSON "id"); unique among live nodes
  int32_t parent = kNoParent;  ///< index into PrefixTree::nodes, or kNoParent for a root
  int32_t tokens = 0;          ///< >= 1 for a live node
  int32_t page_offset = 0;     ///< slot of token 0 in pages[0], in [0, page_size)
  std::vector<int32_t> pages;  ///< ceil((page_offset + tokens) / page_size) page ids
  bool alive = true;  ///< false for a slot freed by remove_query (kept so indices stay stable)
};

/// Optional model shape carried by JSON trees and workload lines (0 = not given).
struct ModelShape {
  int32_t num_qo_heads = 0;
  int32_t num_kv_heads = 0;
  int32_t head_dim = 0;
};

/// A forest of TreeNodes over paged KV, plus the decode queries attached to its nodes.
/// Plain data: builders and updates live in the functions below and in
/// tree/{levels,block_tables,json,random_tree}.h. Thread safety: like a standard container. Any
/// number of threads may read one tree at once (make_plan, build_index, the oracle); an update (the
/// members below, or writing a field) must not overlap any other use of the same tree. To plan
/// while another thread updates, plan a copy.
struct PrefixTree {
  int32_t page_size = 16;           ///< P >= 1 tokens per page
  int32_t num_pages = 0;            ///< page ids must lie in [0, num_pages)
  std::vector<TreeNode> nodes;      ///< indexed by node index; dead slots have alive == false
  std::vector<int32_t> query_node;  ///< query q attends root -> nodes[query_node[q]]
  ModelShape shape;                 ///< optional heads/head_dim from JSON or a workload line
  /// Incremented by every update below; a plan records the version it was made from
  /// (Plan::tree_version) so that a stale plan can be refused.
  uint64_t version = 0;

  int32_t num_queries() const { return static_cast<int32_t>(query_node.size()); }

  // ---- updates (src/tree/updates.cc); each keeps a valid tree valid and prunes what no query
  // uses. Each checks everything (arguments and the limits above) before it changes anything:
  // on error it throws std::invalid_argument naming the argument and leaves the tree unchanged,
  // version included. Pages for new tokens come from `new_pages` when given, else from the
  // free-page allocator (see PrefixTree::free_pages); running out throws naming "new_pages".

  /// Appends k >= 1 tokens to query q: its node grows when q is the only query below it and the
  /// node is a leaf, else q forks into a new child node holding the k tokens.
  void append_tokens(int32_t q, int32_t k, const std::vector<int32_t>& new_pages = {});
  /// Appends counts[i] >= 1 tokens to query queries[i] for every i, in one call: the result
  /// equals append_tokens(queries[i], counts[i], its pages) called for i = 0, 1, ... (each query
  /// listed once). Pages: with `page_ptr` and `new_pages` empty, from the free-page pool; else
  /// query i takes new_pages[page_ptr[i] .. page_ptr[i + 1]), which must be exactly the fresh
  /// pages its append needs (page_ptr has queries.size() + 1 nondecreasing offsets from 0 to
  /// new_pages.size()). O(nodes + queries + input + (pages listed + pool) log new pages): one
  /// pass over the tree for the whole step, where one append_tokens call per query pays it per
  /// query.
  void append_tokens_bulk(const std::vector<int32_t>& queries, const std::vector<int32_t>& counts,
                          const std::vector<int64_t>& page_ptr = {},
                          const std::vector<int32_t>& new_pages = {});
  /// Adds a query on node index `node`; returns its query index (the last one).
  int32_t add_query(int32_t node);
  /// Removes query q (later queries shift down by one) and prunes nodes no query uses any more,
  /// returning their pages to free_pages.
  void remove_query(int32_t q);
  /// Replaces every query at once: query r now sits on node index nodes[r] (a live node; any
  /// number of queries, at least one, may share a node). Nodes no query uses any more are pruned
  /// as remove_query prunes them. Expresses removals, additions and reorders of a whole step in
  /// one call: O(nodes + queries), plus O((pages listed + pool) log freed pages) when something
  /// is pruned.
  void set_query_nodes(const std::vector<int32_t>& nodes);
  /// Forks query q into n >= 1 queries on the same node (q plus n-1 new ones appended at the end);
  /// returns the index of the first new query.
  int32_t fork_query(int32_t q, int32_t n);
  /// Sets num_pages to n >= 0, which must stay above every page id listed by a live node or in
  /// free_pages (error naming "num_pages" otherwise). The field may also be written directly
  /// while a tree is being built, then checked with validate().
  void set_num_pages(int32_t n);

  /// Free-page pool used by the updates when no pages are passed. Builders that own their page
  /// layout (levels) fill it with every page id in [0, num_pages) they did not use.
  std::vector<int32_t> free_pages;
};

/// Throws std::invalid_argument naming the offender on: empty tree (no live node or no query),
/// page_size out of [1, kMaxPageSize], cycle, unknown parent, parent that is dead, duplicate id,
/// tokens < 1, page_offset out of [0, P), page count not matching tokens, page id out of [0,
/// num_pages), query on an unknown or dead node, a limit above exceeded, a (page, slot) holding two
/// different absolute positions (a page listed twice, a child reusing its parent's page at the
/// same slots; nodes may share a page only where the same slots hold the same positions, as
/// copy-on-write siblings do), and free_pages entries that are out of range, repeated or in use.
void validate(const PrefixTree& tree);

/// A read-only run of int32 values (one row of a TreeIndex CSR array).
struct IdSpan {
  const int32_t* first = nullptr;
  const int32_t* last = nullptr;
  const int32_t* begin() const { return first; }
  const int32_t* end() const { return last; }
  const int32_t* data() const { return first; }
  size_t size() const { return static_cast<size_t>(last - first); }
  bool empty() const { return first == last; }
  int32_t operator[](size_t i) const { return first[i]; }
};

/// Derived views of a tree, in flat (CSR) arrays: a handful of allocations instead of vectors
/// per node. Orders: preorder with children in index order, children in index order, queries in
/// query order. Computed in O(nodes + sum over queries of path depth); that sum may pass 2^31,
/// so the queries_below offsets are 64-bit.
struct TreeIndex {
  std::vector<int32_t> depth;                 ///< per node; roots 0, nodes not reached -1
  std::vector<int64_t> start;                 ///< per node: absolute position of the node's token 0
  std::vector<int32_t> roots;                 ///< live roots in index order
  std::vector<int32_t> preorder;              ///< live nodes, parents before children
  std::vector<int32_t> child_ptr, child_ids;  ///< children of node v: [child_ptr[v], [v + 1])
  std::vector<int32_t> own_ptr, own_ids;      ///< queries attached to node v itself
  std::vector<int64_t> below_ptr;             ///< queries whose path contains node v
  std::vector<int32_t> below_ids;

  /// Live children of node v, in index order.
  IdSpan children(int32_t v) const {
    return {child_ids.data() + child_ptr[v], child_ids.data() + child_ptr[v + 1]};
  }
  /// Queries attached to node v itself, in query order.
  IdSpan own_queries(int32_t v) const {
    return {own_ids.data() + own_ptr[v], own_ids.data() + own_ptr[v + 1]};
  }
  /// Queries whose path contains node v, in query order.
  IdSpan queries_below(int32_t v) const {
    return {below_ids.data() + below_ptr[v], below_ids.data() + below_ptr[v + 1]};
  }
};
/// The index of `tree`; throws std::invalid_argument on an unknown parent index or a query on
/// an unknown node, a dead one or one not reachable from a root (cycle).
TreeIndex build_index(const PrefixTree& tree);

/// Nodes on query q's path, root first.
std::vector<int32_t> query_path(const PrefixTree& tree, int32_t q);
/// Number of KV tokens query q attends (sum of tokens on its path).
int64_t query_context(const PrefixTree& tree, int32_t q);
/// Tokens summed over live nodes that at least one query uses.
int64_t unique_tokens(const PrefixTree& tree);

}  // namespace treeattn
