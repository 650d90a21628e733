// The benchmark workload sets, embedded in the library at build time from data/workloads/*.txt
// (nothing is read from disk at run time): the published ones (FastTree, PAT, DeFT, FlashForge)
// and the irregular trees of serving (ragged forests, agent tool trees, chains, batched token
// trees). A line is a level spec, built by tree_from_levels, or a generator name, built
// deterministically from a seed (src/tree/generators.cc lists the generators).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "treeattn/tree/levels.h"

namespace treeattn {

struct Workload {
  std::string set;   ///< one of workload_set_names()
  std::string name;  ///< level line text, or a generator name such as "specdec base=6000 t=64"
  LevelSpec spec;    ///< shape, page size, dtype (and levels when not generated)
  bool generated = false;
};

/// "fasttree", "pat", "deft", "forge", "irregular" (data/workloads/<set>.txt).
const std::vector<std::string>& workload_set_names();
/// Every workload of a set, or of all sets for "all"; throws std::invalid_argument naming
/// "workload" for an unknown set.
std::vector<Workload> workload_set(const std::string& set);
/// Looks up a single workload by set name plus index ("fasttree:3") or by its exact name.
Workload find_workload(const std::string& key);
/// Builds the tree (pages contiguous or shuffled with `seed`).
PrefixTree build_workload(const Workload& w, PageLayout layout = PageLayout::kContiguous,
                          uint64_t seed = 0);
/// The raw embedded text of data/workloads/<set>.txt.
const std::string& workload_file_text(const std::string& set);

}  // namespace treeattn
