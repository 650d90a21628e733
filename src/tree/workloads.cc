// The embedded benchmark workload sets: every non-comment line of data/workloads/<set>.txt is a
// workload, either a level spec ("N=... C=... heads=...") or a generator name ("tot depth=5
// width=10", built by generators.cc from a seed derived from the set and the name); listing
// and lookup by set, index or name.
#include "treeattn/tree/workloads.h"

#include <algorithm>
#include <sstream>
#include <utility>

#include "generators.h"
#include "tree_internal.h"
#include "treeattn/common/error.h"

namespace treeattn {

namespace detail {
// Generated at build time by tools/embed_workloads.cmake: {set name, file text} per file.
const std::vector<std::pair<std::string, std::string>>& embedded_workload_files();
}  // namespace detail

namespace {

uint64_t name_seed(const std::string& name) {
  uint64_t h = 1469598103934665603ULL;  // FNV-1a
  for (unsigned char c : name) h = (h ^ c) * 1099511628211ULL;
  return h;
}

Workload generated(const std::string& set, const std::string& name) {
  Workload w;
  w.set = set;
  w.name = name;
  w.generated = true;
  w.spec.shape = detail::generated_shape(name);
  w.spec.page_size = detail::generated_page_size(name);
  w.spec.text = name;
  return w;
}

std::vector<Workload> one_set(const std::string& set) {
  std::vector<Workload> out;
  std::istringstream in(workload_file_text(set));
  std::string line;
  while (std::getline(in, line)) {
    const size_t b = line.find_first_not_of(" \t\r");
    if (b == std::string::npos || line[b] == '#') continue;
    const std::string text = line.substr(b);
    if (text.rfind("N=", 0) != 0) {
      out.push_back(generated(set, text.substr(0, text.find_last_not_of(" \t\r") + 1)));
      continue;
    }
    Workload w;
    w.set = set;
    w.spec = parse_levels(text);
    w.name = w.spec.text;
    out.push_back(std::move(w));
  }
  return out;
}

}  // namespace

const std::vector<std::string>& workload_set_names() {
  static const std::vector<std::string> names = {"fasttree", "pat", "deft", "forge", "irregular"};
  return names;
}

namespace {
// "fasttree, pat, ..." for error messages.
std::string known_sets() {
  std::string s;
  for (const std::string& n : workload_set_names()) s += (s.empty() ? "" : ", ") + n;
  return s;
}
}  // namespace

const std::string& workload_file_text(const std::string& set) {
  for (const auto& [name, text] : detail::embedded_workload_files()) {
    if (name == set) return text;
  }
  TA_CHECK_ARG(false, "workload", "unknown set '", set, "' (known: ", known_sets(), ")");
  static const std::string empty;
  return empty;
}

std::vector<Workload> workload_set(const std::string& set) {
  if (set == "all") {
    std::vector<Workload> all;
    for (const std::string& s : workload_set_names()) {
      std::vector<Workload> part = one_set(s);
      all.insert(all.end(), std::make_move_iterator(part.begin()),
                 std::make_move_iterator(part.end()));
    }
    return all;
  }
  const auto& names = workload_set_names();
  TA_CHECK_ARG(std::find(names.begin(), names.end(), set) != names.end(), "workload",
               "unknown set '", set, "' (known: ", known_sets(), ", all)");
  return one_set(set);
}

Workload find_workload(const std::string& key) {
  const size_t colon = key.find(':');
  if (colon != std::string::npos) {
    const std::string set = key.substr(0, colon);
    const std::string idx = key.substr(colon + 1);
    const auto& names = workload_set_names();
    if (std::find(names.begin(), names.end(), set) != names.end() || set == "all") {
      TA_CHECK_ARG(!idx.empty() && idx.size() < 10 &&
                       idx.find_first_not_of("0123456789") == std::string::npos,
                   "workload", "bad index '", idx, "' in '", key, "'");
      std::vector<Workload> ws = workload_set(set);
      const size_t i = static_cast<size_t>(std::stoul(idx));
      TA_CHECK_ARG(i < ws.size(), "workload", "index ", i, " out of range: set '", set, "' has ",
                   ws.size(), " workloads");
      return ws[i];
    }
  }
  for (Workload& w : workload_set("all")) {
    if (w.name == key) return w;
  }
  // Accept a level line written with other spacing.
  std::string normalised;
  try {
    normalised = parse_levels(key).text;
  } catch (const std::invalid_argument&) {
  }
  if (!normalised.empty()) {
    for (Workload& w : workload_set("all")) {
      if (w.name == normalised) return w;
    }
  }
  TA_CHECK_ARG(false, "workload", "no workload named '", key,
               "' (use SET:INDEX, e.g. fasttree:3, or an exact name; see `treeattn workloads`)");
  return {};
}

PrefixTree build_workload(const Workload& w, PageLayout layout, uint64_t seed) {
  if (!w.generated) {
    PrefixTree t = tree_from_levels(w.spec, layout, seed);
    return t;
  }
  // The heads and page words are left out of the seed: a generator line gives the same tree for
  // every head configuration and page size.
  std::string family_and_params;
  std::istringstream words(w.name);
  for (std::string word; words >> word;) {
    if (word.rfind("heads=", 0) != 0 && word.rfind("page=", 0) != 0)
      family_and_params += (family_and_params.empty() ? "" : " ") + word;
  }
  PrefixTree t = detail::build_generated(w.name, w.spec.page_size,
                                         name_seed(w.set + "/" + family_and_params), layout, seed);
  t.shape = w.spec.shape;
  return t;
}

}  // namespace treeattn
