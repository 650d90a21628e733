// The embedded benchmark workloads: every non-comment line of data/workloads/<set>.txt is a level
// spec; DeFT and FlashForge also get the irregular shapes their files describe in comments,
// generated deterministically (fixed seeds derived from the workload name):
//   deft:  "specdec base=6000 t=16|32|64"  a 6000-token root and a random tree of t one-token
//          draft nodes (parents biased to shallow nodes, as Medusa trees), a query per draft node;
//          "tot depth=3|5|8|10 width=10"  tree-of-thoughts BFS: a 1000-token document root, then
//          `depth` levels of 50-400-token thoughts; each level keeps <= 10 thoughts (pruned ones
//          are gone from the KV cache); the last level's 1-5 children per kept thought each carry a
//          query (<= 50 queries).
//   forge: "degenerate depth=2..6 C=512"  only left children have children; each internal node
//          has 2 children, every leaf carries a query.
// Generated workloads use heads 32/8, head_dim 128, page 16, fp16 and come after the level lines.
#include "treeattn/tree/workloads.h"

#include <algorithm>
#include <sstream>
#include <utility>

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
  w.spec.shape = ModelShape{32, 8, 128};
  w.spec.text = name;
  return w;
}

// Reads "key=value" from a generator name; throws naming "workload" when absent.
int32_t name_param(const std::string& name, const std::string& key) {
  std::istringstream in(name);
  std::string tok;
  while (in >> tok) {
    if (tok.rfind(key + "=", 0) == 0) {
      const std::string v = tok.substr(key.size() + 1);
      TA_CHECK_ARG(
          !v.empty() && v.size() < 10 && v.find_first_not_of("0123456789") == std::string::npos,
          "workload", "bad ", key, " in '", name, "'");
      const int32_t x = std::stoi(v);
      TA_CHECK_ARG(x >= 1, "workload", "bad ", key, " in '", name, "'");
      return x;
    }
  }
  TA_CHECK_ARG(false, "workload", "missing ", key, "= in '", name, "'");
  return 0;
}

PrefixTree build_specdec(int32_t base, int32_t t, int32_t page, uint64_t seed, PageLayout layout,
                         uint64_t page_seed) {
  std::mt19937_64 rng(seed);
  std::vector<int32_t> parents{kNoParent}, tokens{base}, queries;
  for (int32_t k = 1; k <= t; ++k) {
    // Among the base and the k-1 earlier drafts, biased toward early (shallow) ones.
    const double u = detail::rand_unit(rng);
    parents.push_back(static_cast<int32_t>(u * u * k));
    tokens.push_back(1);
    queries.push_back(k);
  }
  return detail::assemble_tree(parents, tokens, queries, page, layout, page_seed);
}

PrefixTree build_tot(int32_t depth, int32_t width, int32_t page, uint64_t seed, PageLayout layout,
                     uint64_t page_seed) {
  std::mt19937_64 rng(seed);
  // Generate levels of candidate parents first, then drop thoughts with no descendant on the
  // last level (pruned branches), then assemble.
  std::vector<int32_t> par{kNoParent}, tok{1000};
  std::vector<int32_t> frontier{0};
  for (int32_t level = 1; level <= depth; ++level) {
    std::vector<int32_t> next;
    if (level < depth) {
      const int32_t count = width;
      for (int32_t j = 0; j < count; ++j) {
        par.push_back(frontier[detail::rand_int(rng, 0, frontier.size() - 1)]);
        tok.push_back(static_cast<int32_t>(detail::rand_int(rng, 50, 400)));
        next.push_back(static_cast<int32_t>(par.size()) - 1);
      }
    } else {
      for (int32_t f : frontier) {
        const int64_t c = detail::rand_int(rng, 1, 5);
        for (int64_t j = 0; j < c; ++j) {
          par.push_back(f);
          tok.push_back(static_cast<int32_t>(detail::rand_int(rng, 50, 400)));
          next.push_back(static_cast<int32_t>(par.size()) - 1);
        }
      }
    }
    frontier = std::move(next);
  }
  const int32_t n = static_cast<int32_t>(par.size());
  std::vector<char> keep(n, 0);
  for (int32_t f : frontier) keep[f] = 1;
  for (int32_t i = n - 1; i > 0; --i)
    if (keep[i]) keep[par[i]] = 1;
  std::vector<int32_t> remap(n, -1), parents, tokens, queries;
  for (int32_t i = 0; i < n; ++i) {
    if (!keep[i]) continue;
    remap[i] = static_cast<int32_t>(parents.size());
    parents.push_back(par[i] == kNoParent ? kNoParent : remap[par[i]]);
    tokens.push_back(tok[i]);
  }
  for (int32_t f : frontier) queries.push_back(remap[f]);
  return detail::assemble_tree(parents, tokens, queries, page, layout, page_seed);
}

PrefixTree build_degenerate(int32_t depth, int32_t c, int32_t page, PageLayout layout,
                            uint64_t page_seed) {
  std::vector<int32_t> parents{kNoParent}, tokens{c}, queries;
  int32_t left = 0;
  for (int32_t d = 1; d <= depth; ++d) {
    parents.push_back(left);  // left child
    parents.push_back(left);  // right child (a leaf)
    tokens.push_back(c);
    tokens.push_back(c);
    const int32_t l = static_cast<int32_t>(parents.size()) - 2;
    queries.push_back(l + 1);
    if (d == depth) queries.push_back(l);
    left = l;
  }
  return detail::assemble_tree(parents, tokens, queries, page, layout, page_seed);
}

std::vector<Workload> one_set(const std::string& set) {
  std::vector<Workload> out;
  std::istringstream in(workload_file_text(set));
  std::string line;
  while (std::getline(in, line)) {
    const size_t b = line.find_first_not_of(" \t\r");
    if (b == std::string::npos || line[b] == '#') continue;
    Workload w;
    w.set = set;
    w.spec = parse_levels(line);
    w.name = w.spec.text;
    out.push_back(std::move(w));
  }
  if (set == "deft") {
    for (int t : {16, 32, 64})
      out.push_back(generated(set, detail::concat("specdec base=6000 t=", t)));
    for (int d : {3, 5, 8, 10})
      out.push_back(generated(set, detail::concat("tot depth=", d, " width=10")));
  } else if (set == "forge") {
    for (int d = 2; d <= 6; ++d)
      out.push_back(generated(set, detail::concat("degenerate depth=", d, " C=512")));
  }
  return out;
}

}  // namespace

const std::vector<std::string>& workload_set_names() {
  static const std::vector<std::string> names = {"fasttree", "pat", "deft", "forge"};
  return names;
}

const std::string& workload_file_text(const std::string& set) {
  for (const auto& [name, text] : detail::embedded_workload_files()) {
    if (name == set) return text;
  }
  TA_CHECK_ARG(false, "workload", "unknown set '", set, "' (known: fasttree, pat, deft, forge)");
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
               "unknown set '", set, "' (known: fasttree, pat, deft, forge, all)");
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
  const uint64_t gseed = name_seed(w.set + "/" + w.name);
  const int32_t page = w.spec.page_size;
  PrefixTree t;
  if (w.name.rfind("specdec", 0) == 0) {
    const int32_t t_draft = name_param(w.name, "t");
    TA_CHECK_ARG(t_draft <= (1 << 20), "workload", "t too large in '", w.name, "'");
    t = build_specdec(name_param(w.name, "base"), t_draft, page, gseed, layout, seed);
  } else if (w.name.rfind("tot", 0) == 0) {
    const int32_t depth = name_param(w.name, "depth"), width = name_param(w.name, "width");
    TA_CHECK_ARG(depth <= 64 && width <= 1024, "workload", "depth/width too large in '", w.name,
                 "'");
    t = build_tot(depth, width, page, gseed, layout, seed);
  } else if (w.name.rfind("degenerate", 0) == 0) {
    const int32_t depth = name_param(w.name, "depth");
    TA_CHECK_ARG(depth <= (1 << 16), "workload", "depth too large in '", w.name, "'");
    t = build_degenerate(depth, name_param(w.name, "C"), page, layout, seed);
  } else {
    TA_CHECK_ARG(false, "workload", "unknown generator '", w.name, "'");
  }
  t.shape = w.spec.shape;
  return t;
}

}  // namespace treeattn
