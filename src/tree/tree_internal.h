// Internal helpers shared by the files of src/tree/: assembling a PrefixTree from a parent
// array with the vLLM page layout, a deterministic RNG helper and size limits. Not installed.
#pragma once

#include <cstdint>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "treeattn/common/int_math.h"
#include "treeattn/tree/levels.h"
#include "treeattn/tree/prefix_tree.h"

namespace treeattn::detail {

/// Most pages a builder lays out by itself (JSON without "pages", levels, generators): keeps a
/// hostile input from allocating gigabytes.
inline constexpr int64_t kMaxBuilderPages = int64_t{1} << 24;
/// Most nodes a level spec may describe.
inline constexpr int64_t kMaxLevelNodes = int64_t{1} << 22;

/// Builds a tree from `parents[i]` (kNoParent or an index < i), `tokens[i]` >= 1 and the node of
/// every query. Node ids are the indices. page_offset = absolute start % page_size; every node gets
/// fresh pages, allocated in preorder (contiguous) or with ids permuted by `seed` (shuffled);
/// num_pages = pages used + `spare_pages`, and the spare ids go to free_pages.
PrefixTree assemble_tree(const std::vector<int32_t>& parents, const std::vector<int32_t>& tokens,
                         const std::vector<int32_t>& query_nodes, int32_t page_size,
                         PageLayout layout, uint64_t seed, int32_t spare_pages = 0);

/// Children of every live node, in index order, as CSR (ptr: nodes + 1 entries, ids), and the
/// live roots in index order; nodes whose parent index is out of range are left out. Returns the
/// first live node with an out-of-range parent index, or -1.
int32_t children_csr(const PrefixTree& tree, std::vector<int32_t>* ptr, std::vector<int32_t>* ids,
                     std::vector<int32_t>* roots);
/// Preorder over a children CSR from `roots` (explicit stack: deep chains cannot overflow).
std::vector<int32_t> preorder_csr(const std::vector<int32_t>& ptr, const std::vector<int32_t>& ids,
                                  const std::vector<int32_t>& roots);
/// Live nodes in preorder (children in index order), iteratively; nodes on a cycle are skipped.
std::vector<int32_t> preorder_of(const PrefixTree& tree);
/// Sorts non-negative values (page ids) ascending, as std::sort would: an LSD radix sort of 11
/// bits a pass, as many passes as the largest value needs (std::sort below 256 values). O(n):
/// the sort of a serving tree's tens of thousands of listed pages was most of validate().
void sort_page_ids(std::vector<int32_t>* ids);

/// Node ids -> node indices over the live nodes of a tree. Ids are usually small (builders use
/// the node index), so a table over [min id, min id + 4n + 64) serves them in O(n); other id sets
/// are kept as (id, index) pairs sorted by id (O(n log n)). At most 16 bytes per node either way.
class IdIndex {
 public:
  explicit IdIndex(const PrefixTree& tree);
  /// The live node with this id (the lowest index if the id repeats), or -1.
  int32_t find(int64_t id) const;
  /// The first repeated id in index order: {its first node, the later node}, or {-1, -1}.
  std::pair<int32_t, int32_t> first_duplicate() const { return dup_; }

 private:
  int64_t lo_ = 0;
  std::vector<int32_t> table_;                       // dense: node of id lo_ + i, or -1
  std::vector<std::pair<int64_t, int32_t>> sorted_;  // sparse: (id, node) sorted
  std::pair<int32_t, int32_t> dup_{-1, -1};
};

/// validate() without the page checks (page_offset, page lists, page ownership, free_pages):
/// structure, ids, queries and the token and path-depth limits. The JSON reader runs it before
/// it lays pages out.
void validate_structure(const PrefixTree& tree);

/// Nodes on the path root -> v for every live node v reachable from a root (0 for the others),
/// from one preorder pass.
std::vector<int32_t> path_lengths(const PrefixTree& tree);
/// Sum over queries of their path lengths: the quantity kMaxPathDepthSum bounds.
int64_t path_depth_sum(const PrefixTree& tree, const std::vector<int32_t>& lengths);

/// Sets num_qo_heads / num_kv_heads from "QO/KV" (the value of a heads= word); throws
/// std::invalid_argument naming "heads" unless both are positive and KV divides QO.
void parse_heads(const std::string& val, ModelShape* shape);

/// Uniform integer in [lo, hi] from a 64-bit generator (portable, unlike std distributions).
inline int64_t rand_int(std::mt19937_64& rng, int64_t lo, int64_t hi) {
  const uint64_t span = static_cast<uint64_t>(hi - lo) + 1;
  return lo + static_cast<int64_t>(span == 0 ? rng() : rng() % span);
}
/// Uniform double in [0, 1).
inline double rand_unit(std::mt19937_64& rng) {
  return static_cast<double>(rng() >> 11) * (1.0 / 9007199254740992.0);
}
/// Portable Fisher-Yates shuffle.
template <typename T>
void shuffle_vec(std::vector<T>& v, std::mt19937_64& rng) {
  for (size_t i = v.size(); i > 1; --i) {
    const size_t j = static_cast<size_t>(rng() % i);
    std::swap(v[i - 1], v[j]);
  }
}

}  // namespace treeattn::detail
