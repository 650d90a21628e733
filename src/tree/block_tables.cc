// Serving-engine block tables <-> PrefixTree (vLLM layout: token t of a request sits in page
// block_tables[r][t / P], slot t % P).
//
// Exact sharing rule of tree_from_block_tables():
//   Each request is cut into page units: its ceil(L/P) leading table entries, each a pair
//   (page id, fill) where fill = P for a full page and L % P for a partly filled last page.
//   The tree is the radix tree (path-compressed trie) over these unit sequences, requests
//   inserted in order. Two units are equal only when both the page id and the fill are equal, so
//   * requests share a node exactly over their common leading run of equal units;
//   * a partly filled last page is shared only by requests of the same length with the same
//     pages (identical requests share their node and both queries sit on it);
//   * a request that ends mid-page inside a page that a longer request fills further (same page
//     id, smaller fill) shares only up to the last FULL common page; its tail page becomes its
//     own one-page node (a sibling of the longer request's continuation) holding page id x with
//     fill L % P. Both nodes read page x, the shorter one only its leading slots;
//   * a request that is a page-aligned prefix of another puts its query on the internal node
//     where it ends (the longer request's node is split at that page boundary);
//   * equal page ids at non-leading positions are never shared: only leading runs are compared.
//   A trie node with one child and no query ending on it is merged into its child, so node
//   boundaries are exactly the branch points and query ends. Nodes are numbered in creation
//   order (id = index); every node starts on a page boundary (page_offset 0).
// Table entries beyond ceil(L/P) are ignored and not checked (engines pad their tables).
#include "treeattn/tree/block_tables.h"

#include <algorithm>
#include <limits>

#include "tree_internal.h"
#include "treeattn/common/error.h"

namespace treeattn {

namespace {

struct UnitKey {
  int32_t parent;  // trie node index, -1 for the virtual root
  int32_t page;
  int32_t fill;
  bool operator==(const UnitKey& o) const {
    return parent == o.parent && page == o.page && fill == o.fill;
  }
};
struct UnitKeyHash {
  size_t operator()(const UnitKey& k) const {
    uint64_t h = static_cast<uint32_t>(k.parent);
    h = h * 0x9e3779b97f4a7c15ULL ^ static_cast<uint32_t>(k.page);
    h = h * 0xbf58476d1ce4e5b9ULL ^ static_cast<uint32_t>(k.fill);
    return static_cast<size_t>(h ^ (h >> 31));
  }
};

/// The trie's edges: UnitKey -> child index, open addressing with linear probing (one flat
/// array, no allocation per edge), at most half full.
class EdgeMap {
 public:
  /// Room for about 2 * `edges` edges before the first growth.
  explicit EdgeMap(size_t edges) {
    size_t n = 256;
    while (n < 4 * edges) n *= 2;
    slots_.resize(n);
  }

  /// The child under `key`, inserting `child` first when there is none (*fresh set then).
  int32_t emplace(const UnitKey& key, int32_t child, bool* fresh) {
    if (2 * (size_ + 1) > slots_.size()) grow();
    size_t i = UnitKeyHash()(key) & (slots_.size() - 1);
    for (;; i = (i + 1) & (slots_.size() - 1)) {
      Slot& s = slots_[i];
      if (s.child < 0) {
        s = {key, child};
        ++size_;
        *fresh = true;
        return child;
      }
      if (s.key == key) {
        *fresh = false;
        return s.child;
      }
    }
  }

 private:
  struct Slot {
    UnitKey key;
    int32_t child = -1;  // -1: empty
  };
  void grow() {
    std::vector<Slot> old(2 * slots_.size());
    old.swap(slots_);
    for (const Slot& s : old) {
      if (s.child < 0) continue;
      size_t i = UnitKeyHash()(s.key) & (slots_.size() - 1);
      while (slots_[i].child >= 0) i = (i + 1) & (slots_.size() - 1);
      slots_[i] = s;
    }
  }
  std::vector<Slot> slots_;
  size_t size_ = 0;
};

/// Tokens of unit k of a request of L tokens in `need` pages of P.
int32_t unit_fill(int64_t L, int64_t need, int64_t k, int64_t P) {
  return static_cast<int32_t>(k + 1 < need ? P : L - (need - 1) * P);
}

}  // namespace

PrefixTree tree_from_block_tables(const std::vector<std::vector<int32_t>>& block_tables,
                                  const std::vector<int64_t>& seq_lens, int32_t page_size,
                                  int32_t num_pages) {
  check_page_size(page_size, "page_size");
  TA_CHECK_ARG(num_pages >= 0, "num_pages", "must be >= 0, got ", num_pages);
  TA_CHECK_ARG(block_tables.size() == seq_lens.size(), "seq_lens", "has ", seq_lens.size(),
               " entries but block_tables has ", block_tables.size());
  TA_CHECK_ARG(!block_tables.empty(), "block_tables", "empty: no request");
  TA_CHECK_ARG(block_tables.size() <= static_cast<size_t>(std::numeric_limits<int32_t>::max()),
               "block_tables", "too many requests");
  const int64_t P = page_size;
  int32_t max_page = -1;
  for (size_t r = 0; r < block_tables.size(); ++r) {
    const int64_t L = seq_lens[r];
    TA_CHECK_ARG(L >= 1, detail::concat("seq_lens[", r, "]"), "must be >= 1, got ", L);
    TA_CHECK_ARG(L <= std::numeric_limits<int32_t>::max(), detail::concat("seq_lens[", r, "]"),
                 "must be <= 2^31-1, got ", L);
    const int64_t need = ceil_div(L, P);
    TA_CHECK_ARG(static_cast<int64_t>(block_tables[r].size()) >= need,
                 detail::concat("block_tables[", r, "]"), "holds ", block_tables[r].size(),
                 " pages but seq_lens[", r, "]=", L, " needs ", need, " (page_size ", P, ")");
    for (int64_t k = 0; k < need; ++k) {
      const int32_t p = block_tables[r][k];
      TA_CHECK_ARG(p >= 0 && (num_pages == 0 || p < num_pages),
                   detail::concat("block_tables[", r, "][", k, "]"), "page id ", p,
                   " out of range [0, ",
                   (num_pages == 0 ? std::string("inf") : std::to_string(num_pages)), ")");
      max_page = std::max(max_page, p);
    }
  }

  // Trie over page units.
  // Consecutive requests often share a leading run of units (forks, a draft chain's rows share
  // one table): over the run, row r follows row r-1's trie path (the same key from the same
  // node finds the same edge), so only the units after the run are looked up in `edges`.
  EdgeMap edges(block_tables.size());  // sized for about 2 edges a row, grows past that
  std::vector<int32_t> t_parent, t_page, t_fill, t_children, t_queries;
  std::vector<int32_t> request_end(block_tables.size());
  std::vector<int32_t> path;  // trie node after each unit of row r-1, then of row r
  for (size_t r = 0; r < block_tables.size(); ++r) {
    const std::vector<int32_t>& row = block_tables[r];
    const int64_t L = seq_lens[r];
    const int64_t need = ceil_div(L, P);
    int64_t k = 0;
    if (r > 0) {
      const std::vector<int32_t>& pt = block_tables[r - 1];
      const int64_t pL = seq_lens[r - 1], pneed = static_cast<int64_t>(path.size());
      const int64_t common = std::min(need, pneed);
      // units before the last of either row are full pages in both: equal ids continue the run
      k = std::mismatch(row.begin(), row.begin() + (common - 1), pt.begin()).first - row.begin();
      if (k == common - 1 && row[k] == pt[k] &&
          unit_fill(L, need, k, P) == unit_fill(pL, pneed, k, P))
        ++k;
    }
    int32_t cur = k > 0 ? path[k - 1] : -1;
    path.resize(static_cast<size_t>(need));
    for (; k < need; ++k) {
      const int32_t fill = unit_fill(L, need, k, P);
      const UnitKey key{cur, row[k], fill};
      bool fresh = false;
      const int32_t child = edges.emplace(key, static_cast<int32_t>(t_parent.size()), &fresh);
      if (fresh) {
        t_parent.push_back(cur);
        t_page.push_back(key.page);
        t_fill.push_back(fill);
        t_children.push_back(0);
        t_queries.push_back(0);
        if (cur >= 0) ++t_children[cur];
      }
      cur = path[k] = child;
    }
    request_end[r] = cur;
    ++t_queries[cur];
  }

  // Path compression: a trie node continues its parent's tree node when the parent has exactly
  // one child and no query ends there. Trie parents precede children, so one pass suffices.
  const int32_t m = static_cast<int32_t>(t_parent.size());
  std::vector<int32_t> tree_node_of(m);
  PrefixTree tree;
  tree.page_size = page_size;
  tree.num_pages = num_pages > 0 ? num_pages : max_page + 1;
  for (int32_t u = 0; u < m; ++u) {
    const int32_t p = t_parent[u];
    if (p >= 0 && t_children[p] == 1 && t_queries[p] == 0) {
      const int32_t v = tree_node_of[p];
      tree_node_of[u] = v;
      tree.nodes[v].tokens += t_fill[u];
      tree.nodes[v].pages.push_back(t_page[u]);
    } else {
      TreeNode nd;
      nd.id = static_cast<int64_t>(tree.nodes.size());
      nd.parent = p >= 0 ? tree_node_of[p] : kNoParent;
      nd.tokens = t_fill[u];
      nd.page_offset = 0;
      nd.pages.push_back(t_page[u]);
      tree_node_of[u] = static_cast<int32_t>(tree.nodes.size());
      tree.nodes.push_back(std::move(nd));
    }
  }
  tree.query_node.resize(block_tables.size());
  for (size_t r = 0; r < block_tables.size(); ++r)
    tree.query_node[r] = tree_node_of[request_end[r]];
  validate(tree);  // page ownership: e.g. one request listing a page twice ([[0, 0, 0]])
  return tree;
}

void to_block_tables(const PrefixTree& tree, std::vector<std::vector<int32_t>>* block_tables,
                     std::vector<int64_t>* seq_lens) {
  TA_CHECK_ARG(block_tables != nullptr, "block_tables", "null output pointer");
  TA_CHECK_ARG(seq_lens != nullptr, "seq_lens", "null output pointer");
  validate(tree);
  const TreeIndex ix = build_index(tree);
  const int64_t P = tree.page_size;
  block_tables->assign(tree.num_queries(), {});
  seq_lens->assign(tree.num_queries(), 0);
  for (int32_t q = 0; q < tree.num_queries(); ++q) {
    std::vector<int32_t>& table = (*block_tables)[q];
    int64_t len = 0;
    for (int32_t v : query_path(tree, q)) {
      const TreeNode& nd = tree.nodes[v];
      const int64_t s = ix.start[v];
      TA_CHECK_ARG(nd.page_offset == s % P, detail::concat("nodes[", v, "].page_offset"), "is ",
                   nd.page_offset, " but the node starts at position ", s,
                   "; a block table needs page_offset == start % page_size");
      // Page index s / P onward; a later node starting mid-page replaces the shared page with its
      // own copy-on-write twin (the engine's view of that page).
      const size_t first = static_cast<size_t>(s / P);
      table.resize(first + nd.pages.size());
      for (size_t k = 0; k < nd.pages.size(); ++k) table[first + k] = nd.pages[k];
      len = s + nd.tokens;
    }
    (*seq_lens)[q] = len;
  }
}

}  // namespace treeattn
