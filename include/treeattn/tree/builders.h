// Builders of PrefixTree: level specs (the published workloads), serving-engine block tables
// (vLLM layout: page ids per request), and the stable JSON format shared with other tools.
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

/// JSON: {"page_size": 16, "heads": [32, 8], "head_dim": 128,
///        "nodes": [{"id": 0, "parent": null, "tokens": 4096, "pages": [...]?}, ...],
///        "queries": [{"node": 1}, ...]}
/// Without "pages", pages are laid out contiguously in node order with page_offset = start % P.
/// Errors name the JSON path (e.g. "nodes[3].parent"). page_size <= kMaxPageSize; the text is at
/// most kMaxJsonFileBytes, read in linear time and memory (src/tree/json.cc states the bound).
PrefixTree tree_from_json(const std::string& text);
PrefixTree tree_from_json_file(const std::string& path);
std::string tree_to_json(const PrefixTree& tree);

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
