// The stable JSON format of a PrefixTree, shared with other tools: reader and writer
// (src/tree/json.cc).
#pragma once

#include <cstdint>
#include <string>

#include "treeattn/tree/prefix_tree.h"

namespace treeattn {

/// JSON: {"page_size": 16, "heads": [32, 8], "head_dim": 128,
///        "nodes": [{"id": 0, "parent": null, "tokens": 4096, "pages": [...]?}, ...],
///        "queries": [{"node": 1}, ...]}
/// Without "pages", pages are laid out contiguously in node order with page_offset = start % P.
/// Errors name the JSON path (e.g. "nodes[3].parent"). page_size <= kMaxPageSize; the text is at
/// most kMaxJsonFileBytes, read in linear time and memory (src/tree/json.cc states the bound).
PrefixTree tree_from_json(const std::string& text);
PrefixTree tree_from_json_file(const std::string& path);
std::string tree_to_json(const PrefixTree& tree);

}  // namespace treeattn
