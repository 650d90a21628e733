// random_tree(): deterministic random PrefixTrees for tests and fuzzing. Each seed picks a shape
// style (deep chain, wide fan-out, bushy mix, several roots), node lengths from a menu of tile
// edges (15/16/17 ... 127/128/129), one-token nodes and primes, queries on every leaf plus extra
// queries on internal nodes and repeated queries on one node, optionally shuffled node indices,
// and pages in the vLLM layout (contiguous or shuffled) with a few spare pages in free_pages.
#include "treeattn/tree/random_tree.h"

#include <algorithm>

#include "tree_internal.h"
#include "treeattn/common/error.h"
#include "treeattn/tree/levels.h"

namespace treeattn {

namespace {

constexpr int32_t kEdgeLengths[] = {1,  1,  2,  3,  5,   7,   13,  15,  16,  17,  31,  32,  33,
                                    37, 63, 64, 65, 101, 127, 128, 129, 251, 255, 256, 257, 509};

int32_t pick_length(std::mt19937_64& rng, int32_t max_tokens) {
  const int64_t roll = detail::rand_int(rng, 0, 9);
  int64_t len;
  if (roll < 6) {
    len = kEdgeLengths[detail::rand_int(rng, 0, std::size(kEdgeLengths) - 1)];
  } else {
    len = detail::rand_int(rng, 1, max_tokens);
  }
  return static_cast<int32_t>(std::min<int64_t>(len, max_tokens));
}

}  // namespace

PrefixTree random_tree(uint64_t seed, const RandomTreeOptions& opts) {
  TA_CHECK_ARG(opts.max_nodes >= 1, "max_nodes", "must be >= 1, got ", opts.max_nodes);
  TA_CHECK_ARG(opts.max_queries >= 1, "max_queries", "must be >= 1, got ", opts.max_queries);
  TA_CHECK_ARG(opts.max_tokens_per_node >= 1, "max_tokens_per_node", "must be >= 1, got ",
               opts.max_tokens_per_node);
  TA_CHECK_ARG(opts.max_roots >= 1, "max_roots", "must be >= 1, got ", opts.max_roots);
  check_page_size(opts.page_size, "page_size");
  // A test generator: bounded so that no argument can make it allocate without bound.
  constexpr int32_t kMaxRandom = 1 << 20;
  TA_CHECK_ARG(opts.max_nodes <= kMaxRandom, "max_nodes", "must be <= ", kMaxRandom, ", got ",
               opts.max_nodes);
  TA_CHECK_ARG(opts.max_queries <= kMaxRandom, "max_queries", "must be <= ", kMaxRandom, ", got ",
               opts.max_queries);
  std::mt19937_64 rng(seed * 0x2545F4914F6CDD1DULL + 0x1234567ULL);
  const int32_t n = static_cast<int32_t>(detail::rand_int(rng, 1, opts.max_nodes));
  const int32_t roots = static_cast<int32_t>(
      detail::rand_int(rng, 1, std::min(opts.max_roots, std::min(n, opts.max_queries))));
  // 0 chain, 1 wide fan-out, 2 bushy mix, 3 caterpillar (chain with one-token side leaves).
  const int style = static_cast<int>(detail::rand_int(rng, 0, 3));

  std::vector<int32_t> parents(n), tokens(n);
  std::vector<int32_t> child_count(n, 0);
  int32_t leaves = 0;
  int32_t tail = -1;  // end of the main chain
  for (int32_t i = 0; i < n; ++i) {
    tokens[i] = pick_length(rng, opts.max_tokens_per_node);
    if (i < roots) {
      parents[i] = kNoParent;
      ++leaves;
      tail = i;
      continue;
    }
    int32_t p;
    switch (style) {
      case 0:
        p = tail;
        break;
      case 1:
        p = static_cast<int32_t>(detail::rand_int(rng, 0, std::min(i - 1, roots + 1)));
        break;
      case 2:
        p = static_cast<int32_t>(detail::rand_int(rng, 0, i - 1));
        break;
      default:
        p = (i % 2 == 0) ? tail : static_cast<int32_t>(detail::rand_int(rng, 0, i - 1));
        break;
    }
    // Keep the leaf count within max_queries: a new leaf under a non-leaf adds one.
    if (child_count[p] > 0 && leaves >= opts.max_queries) p = tail;
    if (child_count[p] > 0) ++leaves;
    if (style == 3 && i % 2 == 1) tokens[i] = 1;
    parents[i] = p;
    ++child_count[p];
    if (p == tail) tail = i;
  }
  // Queries: one per leaf, then extras on random nodes (internal ones and repeats).
  std::vector<int32_t> queries;
  for (int32_t i = 0; i < n; ++i)
    if (child_count[i] == 0) queries.push_back(i);
  const int32_t extra =
      static_cast<int32_t>(detail::rand_int(rng, 0, opts.max_queries - queries.size()));
  for (int32_t e = 0; e < extra; ++e) {
    const bool repeat = !queries.empty() && detail::rand_int(rng, 0, 2) == 0;
    queries.push_back(repeat ? queries[detail::rand_int(rng, 0, queries.size() - 1)]
                             : static_cast<int32_t>(detail::rand_int(rng, 0, n - 1)));
  }
  detail::shuffle_vec(queries, rng);
  const int32_t spare = static_cast<int32_t>(detail::rand_int(rng, 0, 8));
  PrefixTree tree = detail::assemble_tree(
      parents, tokens, queries, opts.page_size,
      opts.shuffle_pages ? PageLayout::kShuffled : PageLayout::kContiguous, rng(), spare);
  // Ids that differ from indices, and (half the time) node indices permuted so that children may
  // come before their parents.
  const int64_t id_base = detail::rand_int(rng, -1000, 1000);
  for (int32_t i = 0; i < n; ++i) tree.nodes[i].id = id_base + 3 * int64_t{i};
  if (detail::rand_int(rng, 0, 1) == 1) {
    std::vector<int32_t> perm(n);
    for (int32_t i = 0; i < n; ++i) perm[i] = i;
    detail::shuffle_vec(perm, rng);  // old index i -> new index perm[i]
    std::vector<TreeNode> moved(n);
    for (int32_t i = 0; i < n; ++i) {
      TreeNode nd = std::move(tree.nodes[i]);
      if (nd.parent != kNoParent) nd.parent = perm[nd.parent];
      moved[perm[i]] = std::move(nd);
    }
    tree.nodes = std::move(moved);
    for (int32_t& v : tree.query_node) v = perm[v];
  }
  return tree;
}

}  // namespace treeattn
