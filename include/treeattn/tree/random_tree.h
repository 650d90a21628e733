// Random trees for tests and fuzzing (src/tree/random_tree.cc).
#pragma once

#include <cstdint>

#include "treeattn/tree/prefix_tree.h"

namespace treeattn {

/// A random tree for tests and fuzzing: deep chains, wide fan-out, one-token nodes, many roots,
/// lengths at tile edges and queries on internal nodes, chosen by `seed`.
struct RandomTreeOptions {
  int32_t max_nodes = 64;
  int32_t max_queries = 64;
  int32_t max_tokens_per_node = 300;
  int32_t max_roots = 3;
  int32_t page_size = 16;
  bool shuffle_pages = true;
};
PrefixTree random_tree(uint64_t seed, const RandomTreeOptions& opts = {});

}  // namespace treeattn
