// Level-spec trees (the published workloads): parse_levels() reads one workload line
// "N=1,4,16 C=1024,256,32 heads=32/8 page=32 dim=128 dtype=bf16" and tree_from_levels() builds
// the regular tree it describes with the vLLM page layout (contiguous or shuffled pages).
#include "treeattn/tree/levels.h"

#include <cctype>
#include <limits>
#include <sstream>

#include "tree_internal.h"
#include "treeattn/common/error.h"

namespace treeattn {

namespace {

// Parses a positive decimal int32 for `key`; rejects signs, junk and overflow.
int32_t parse_positive(const std::string& s, const std::string& key) {
  TA_CHECK_ARG(!s.empty(), key, "empty value");
  int64_t v = 0;
  for (char c : s) {
    TA_CHECK_ARG(c >= '0' && c <= '9', key, "expected a positive integer, got '", s, "'");
    v = v * 10 + (c - '0');
    TA_CHECK_ARG(v <= std::numeric_limits<int32_t>::max(), key, "value '", s,
                 "' is out of int32 range");
  }
  TA_CHECK_ARG(v >= 1, key, "must be positive, got ", v);
  return static_cast<int32_t>(v);
}

std::vector<int32_t> parse_list(const std::string& s, const std::string& key) {
  std::vector<int32_t> out;
  size_t pos = 0;
  while (true) {
    const size_t comma = s.find(',', pos);
    out.push_back(parse_positive(s.substr(pos, comma - pos), key));
    if (comma == std::string::npos) break;
    pos = comma + 1;
  }
  return out;
}

}  // namespace

namespace detail {
void parse_heads(const std::string& val, ModelShape* shape) {
  const size_t slash = val.find('/');
  TA_CHECK_ARG(slash != std::string::npos, "heads", "expected QO/KV such as 32/8, got '", val, "'");
  shape->num_qo_heads = parse_positive(val.substr(0, slash), "heads");
  shape->num_kv_heads = parse_positive(val.substr(slash + 1), "heads");
  TA_CHECK_ARG(shape->num_qo_heads % shape->num_kv_heads == 0, "heads", "query heads ",
               shape->num_qo_heads, " are not a multiple of kv heads ", shape->num_kv_heads);
}
}  // namespace detail

LevelSpec parse_levels(const std::string& text) {
  LevelSpec spec;
  std::istringstream in(text);
  std::string tok;
  std::vector<std::string> seen;
  bool have_n = false, have_c = false;
  while (in >> tok) {
    const size_t eq = tok.find('=');
    TA_CHECK_ARG(eq != std::string::npos && eq > 0, "levels", "expected key=value, got '", tok,
                 "' in '", text, "'");
    const std::string key = tok.substr(0, eq);
    const std::string val = tok.substr(eq + 1);
    for (const std::string& s : seen) TA_CHECK_ARG(s != key, key, "given twice");
    seen.push_back(key);
    if (key == "N") {
      spec.nodes_per_level = parse_list(val, "N");
      have_n = true;
    } else if (key == "C") {
      spec.tokens_per_level = parse_list(val, "C");
      have_c = true;
    } else if (key == "heads") {
      detail::parse_heads(val, &spec.shape);
    } else if (key == "page") {
      spec.page_size = parse_positive(val, "page");
      check_page_size(spec.page_size, "page");
    } else if (key == "dim") {
      spec.shape.head_dim = parse_positive(val, "dim");
    } else if (key == "dtype") {
      TA_CHECK_ARG(val == "fp16" || val == "bf16", "dtype", "expected fp16 or bf16, got '", val,
                   "'");
      spec.dtype = val;
    } else {
      TA_CHECK_ARG(false, "levels", "unknown key '", key,
                   "' (known: N, C, heads, page, dim, dtype)");
    }
    if (!spec.text.empty()) spec.text += ' ';
    spec.text += tok;
  }
  TA_CHECK_ARG(have_n, "levels", "missing N=... in '", text, "'");
  TA_CHECK_ARG(have_c, "levels", "missing C=... in '", text, "'");
  TA_CHECK_ARG(spec.nodes_per_level.size() == spec.tokens_per_level.size(), "levels",
               "N and C differ in length (", spec.nodes_per_level.size(), " vs ",
               spec.tokens_per_level.size(), ")");
  int64_t total = 0;
  for (size_t i = 0; i < spec.nodes_per_level.size(); ++i) {
    total += spec.nodes_per_level[i];
    TA_CHECK_ARG(total <= detail::kMaxLevelNodes, "N", "more than ", detail::kMaxLevelNodes,
                 " nodes in all");
    if (i > 0) {
      TA_CHECK_ARG(spec.nodes_per_level[i] >= spec.nodes_per_level[i - 1], "N", "level ", i,
                   " has ", spec.nodes_per_level[i], " nodes, fewer than level ", i - 1, "'s ",
                   spec.nodes_per_level[i - 1], " (some nodes would have no child slot)");
    }
  }
  return spec;
}

PrefixTree tree_from_levels(const LevelSpec& spec, PageLayout layout, uint64_t seed) {
  const auto& N = spec.nodes_per_level;
  const auto& C = spec.tokens_per_level;
  TA_CHECK_ARG(!N.empty(), "levels", "no levels");
  TA_CHECK_ARG(N.size() == C.size(), "levels", "N and C differ in length (", N.size(), " vs ",
               C.size(), ")");
  check_page_size(spec.page_size, "page");
  int64_t total = 0;
  for (size_t i = 0; i < N.size(); ++i) {
    TA_CHECK_ARG(N[i] >= 1 && C[i] >= 1, "levels", "level ", i, " has N=", N[i], " C=", C[i],
                 "; both must be positive");
    total += N[i];
    TA_CHECK_ARG(total <= detail::kMaxLevelNodes, "N", "more than ", detail::kMaxLevelNodes,
                 " nodes in all");
  }
  std::vector<int32_t> parents, tokens;
  parents.reserve(total);
  tokens.reserve(total);
  std::vector<char> has_child(total, 0);
  int64_t prev_offset = 0;
  for (size_t i = 0; i < N.size(); ++i) {
    const int64_t offset = static_cast<int64_t>(parents.size());
    for (int64_t j = 0; j < N[i]; ++j) {
      int32_t p = kNoParent;
      if (i > 0) {
        p = static_cast<int32_t>(prev_offset + j * N[i - 1] / N[i]);
        has_child[p] = 1;
      }
      parents.push_back(p);
      tokens.push_back(C[i]);
    }
    prev_offset = offset;
  }
  // Leaves in leaf order: the parent map is monotone, so index order is depth-first leaf order
  // within each level; earlier-level leaves (only possible if N shrinks) come first.
  std::vector<int32_t> queries;
  for (int64_t v = 0; v < total; ++v) {
    if (!has_child[v]) queries.push_back(static_cast<int32_t>(v));
  }
  PrefixTree tree =
      detail::assemble_tree(parents, tokens, queries, spec.page_size, layout, seed, 0);
  tree.shape = spec.shape;
  return tree;
}

}  // namespace treeattn
