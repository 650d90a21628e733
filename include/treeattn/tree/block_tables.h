// Serving-engine block tables (vLLM layout: page ids per request) to a PrefixTree and back
// (src/tree/block_tables.cc).
#pragma once

#include <cstdint>
#include <vector>

#include "treeattn/tree/prefix_tree.h"

namespace treeattn {

/// Radix tree on common leading page ids. Request r holds seq_lens[r] tokens in
/// block_tables[r][0 .. ceil(seq_lens[r]/P)); token t sits in page block_tables[r][t / P], slot
/// t % P. Two requests share a node only over full pages with equal leading page ids (a partly
/// filled last page is shared only by requests with the same length and the same pages); a
/// request that is a prefix of another puts its query on an internal node; identical requests
/// share a node; a page id repeated at a non-leading position is not a shared prefix. One query
/// per request, in request order. num_pages: page ids must be < num_pages (0 = max id + 1).
PrefixTree tree_from_block_tables(const std::vector<std::vector<int32_t>>& block_tables,
                                  const std::vector<int64_t>& seq_lens, int32_t page_size,
                                  int32_t num_pages = 0);
/// The inverse: per query, the page ids of its path and its sequence length.
void to_block_tables(const PrefixTree& tree, std::vector<std::vector<int32_t>>* block_tables,
                     std::vector<int64_t>* seq_lens);

}  // namespace treeattn
