// Level specs: one line of data/workloads/*.txt parsed into a LevelSpec, and the tree it
// describes (src/tree/levels.cc).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "treeattn/tree/prefix_tree.h"

namespace treeattn {

/// One line of data/workloads/*.txt:
///   N=1,4,16 C=1024,256,32 [heads=32/8] [page=32] [dim=128] [dtype=fp16|bf16]
/// Level i has N[i] nodes of C[i] tokens; node j of level i+1 hangs under node
/// floor(j * N[i] / N[i+1]) of level i; every leaf carries one query. Level 0 may have N[0] > 1
/// roots. Missing keys keep the defaults below.
struct LevelSpec {
  std::vector<int32_t> nodes_per_level;
  std::vector<int32_t> tokens_per_level;
  ModelShape shape{32, 8, 128};
  int32_t page_size = 16;
  std::string dtype = "fp16";
  std::string text;  ///< the line it was parsed from (normalised)
};
/// Throws std::invalid_argument naming "levels" (or the key) on malformed text.
LevelSpec parse_levels(const std::string& text);

enum class PageLayout { kContiguous, kShuffled };
/// Pages laid out node by node in preorder (kContiguous) or randomly permuted with `seed`
/// (kShuffled, fragmentation). num_pages = pages used; free_pages empty.
PrefixTree tree_from_levels(const LevelSpec& spec, PageLayout layout = PageLayout::kContiguous,
                            uint64_t seed = 0);

}  // namespace treeattn
