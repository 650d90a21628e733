// The generated workload trees, internal to src/tree/: a generator name such as
// "forest roots=16 samples=4 heads=16/1" names its family (first word) and its parameters
// (key=value words); build_generated() lays the tree out deterministically from a seed derived
// from the workload's set and name. The families and what they model are listed in
// generators.cc. Not installed.
#pragma once

#include <cstdint>
#include <string>

#include "treeattn/tree/levels.h"
#include "treeattn/tree/prefix_tree.h"

namespace treeattn::detail {

/// The model shape of a generated workload: "heads=Q/K" in the name, else 32/8; head_dim 128.
/// Throws std::invalid_argument naming "workload" on a malformed heads word.
ModelShape generated_shape(const std::string& name);

/// Largest page= of a generator name.
inline constexpr int32_t kMaxGeneratedPage = 4096;
/// Tokens per page of a generated workload: "page=P" in the name (1..kMaxGeneratedPage), else 16.
/// Throws std::invalid_argument naming "workload" on a malformed or too large page word.
int32_t generated_page_size(const std::string& name);

/// Builds the tree of generator `name` with `page_size` tokens per page. `gseed` fixes the tree's
/// shape and lengths; `layout` and `page_seed` fix the page ids. Throws std::invalid_argument
/// naming "workload" for an unknown family or a missing, malformed or too large parameter.
PrefixTree build_generated(const std::string& name, int32_t page_size, uint64_t gseed,
                           PageLayout layout, uint64_t page_seed);

}  // namespace treeattn::detail
