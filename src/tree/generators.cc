// Generated workload trees (see generators.h). Lengths are drawn with integer arithmetic only, so
// a name and seed give the same tree on every platform. The families:
//   specdec base=B t=T        one B-token sequence and a random draft tree of T one-token nodes
//                             (parents biased to shallow nodes, as Medusa trees); a query per
//                             draft node (DeFT).
//   tot depth=D width=W       tree-of-thoughts BFS: a 1000-token document, D levels of 50-400-token
//                             thoughts, <= W kept per level, pruned branches gone; the last
//                             level's 1-5 children per kept thought carry the queries (DeFT).
//   degenerate depth=D C=c    only left children have children, two children per internal node,
//                             c tokens a node, a query on every leaf (FlashForge).
//   forest roots=R samples=S  R unrelated requests with prompts of 256-8191 tokens (log-uniform)
//                             and 1-S parallel samples each of 16-512 tokens (a query per
//                             sample; one sample decodes on the prompt itself).
//   agent sessions=S depth=D  a 2000-4000-token system prompt (tools) shared by S sessions; a
//                             session is a chain of 1-D turns of 64-1536 tokens (message, tool
//                             call, tool output); after a turn, with probability 1/4, 1-2 other
//                             branches of 32-512 tokens (parallel tool calls, retries) decode too;
//                             a query on every leaf.
//   chain depth=L queries=Q   a conversation stored as a chain of L turns of 64-512 tokens; the
//                             last turn carries a query and Q-1 requests fork off random turns
//                             with 1-64 tokens of their own (regenerated answers).
//   spectree batch=B t=T      B requests with contexts of 1024-8191 tokens (log-uniform), each
//                             with its own random draft tree of T one-token nodes as in specdec.
//   eagle batch=B depth=D topk=K tokens=T
//                             B requests with contexts of 512-8191 tokens (log-uniform), each
//                             with an EAGLE-2-style draft tree of one-token nodes: D levels, each
//                             expanding the K best nodes of the level above into K children, then
//                             the T best drafts of all levels kept (scores are integer costs that
//                             grow along a path, so the kept set is closed under ancestors); a
//                             query on every kept draft.
//   beam requests=R width=W steps=S
//                             R requests with prompts of 256-4095 tokens (log-uniform), each
//                             decoded by beam search for S steps with W beams: every step's W
//                             hypotheses extend the beams of the step before (better beams more
//                             often); hypotheses that died are dropped and chains of one-token
//                             nodes merged (a radix tree); a query on every live beam.
//   rollout groups=G samples=S len=L
//                             RL rollouts: a shared 128-1023-token system prompt, G group prompts
//                             of 64-2047 tokens (log-uniform) under it, S samples of L/2..L
//                             tokens under each group prompt; a query per sample.
// Every name may end in "heads=Q/K" (default 32/8) and "page=P" (default 16); head_dim is 128.
#include "generators.h"

#include <algorithm>
#include <initializer_list>
#include <sstream>
#include <stdexcept>
#include <utility>
#include <vector>

#include "tree_internal.h"
#include "treeattn/common/error.h"

namespace treeattn::detail {

namespace {

// Reads "key=value" (value in [1, max]) from a generator name; throws naming "workload" when
// malformed or larger than max, or when absent and `absent` is 0 (else returns `absent`).
int32_t name_param(const std::string& name, const std::string& key, int32_t max,
                   int32_t absent = 0) {
  std::istringstream in(name);
  std::string tok;
  while (in >> tok) {
    if (tok.rfind(key + "=", 0) != 0) continue;
    const std::string v = tok.substr(key.size() + 1);
    TA_CHECK_ARG(
        !v.empty() && v.size() < 10 && v.find_first_not_of("0123456789") == std::string::npos,
        "workload", "bad ", key, " in '", name, "'");
    const int64_t x = std::stoll(v);
    TA_CHECK_ARG(x >= 1 && x <= max, "workload", key, " must lie in [1, ", max, "] in '", name,
                 "'");
    return static_cast<int32_t>(x);
  }
  TA_CHECK_ARG(absent != 0, "workload", "missing ", key, "= in '", name, "'");
  return absent;
}

// Roughly log-uniform in [lo, 2^k lo): an octave uniformly, then uniformly inside it.
int32_t log_uniform(std::mt19937_64& rng, int32_t lo, int32_t octaves) {
  const int64_t base = int64_t{lo} << rand_int(rng, 0, octaves - 1);
  return static_cast<int32_t>(rand_int(rng, base, 2 * base - 1));
}

// Refuses words other than the family's keys, heads= and page=, and trees over the builders'
// limits (checked from the parameters, before anything is allocated).
void check_name(const std::string& name, std::initializer_list<const char*> keys, double max_nodes,
                double max_tokens) {
  std::istringstream in(name);
  std::string word;
  in >> word;  // the family
  while (in >> word) {
    const std::string key = word.substr(0, word.find('='));
    bool known = (key == "heads" || key == "page") && word.size() > key.size();
    for (const char* k : keys) known |= key == k && word.size() > key.size();
    TA_CHECK_ARG(known, "workload", "unknown word '", word, "' in '", name, "'");
  }
  TA_CHECK_ARG(max_nodes <= static_cast<double>(kMaxLevelNodes) &&
                   max_tokens <= static_cast<double>(kMaxBuilderPages),
               "workload", "'", name, "' may build up to ", max_nodes, " nodes and ", max_tokens,
               " tokens (limits ", kMaxLevelNodes, " and ", kMaxBuilderPages, ")");
}

// The parent arrays every generator fills: parents[i] (kNoParent or < i), tokens[i], and the
// node of every query.
struct Nodes {
  std::vector<int32_t> parents, tokens, queries;
  int32_t add(int32_t parent, int64_t tok) {
    parents.push_back(parent);
    tokens.push_back(static_cast<int32_t>(tok));
    return static_cast<int32_t>(parents.size()) - 1;
  }
};

// A draft tree of t one-token nodes under `base`: draft k hangs under the base or one of the
// k-1 earlier drafts, biased toward early (shallow) ones; a query on every draft.
void add_draft_tree(Nodes& n, int32_t base, int32_t t, std::mt19937_64& rng) {
  std::vector<int32_t> ids{base};
  for (int32_t k = 1; k <= t; ++k) {
    const double u = rand_unit(rng);
    const int32_t d = n.add(ids[static_cast<size_t>(u * u * k)], 1);
    n.queries.push_back(d);
    ids.push_back(d);
  }
}

Nodes specdec(const std::string& name, std::mt19937_64& rng) {
  const int32_t b = name_param(name, "base", 1 << 24), t = name_param(name, "t", 1 << 20);
  check_name(name, {"base", "t"}, t + 1.0, static_cast<double>(b) + t);
  Nodes n;
  add_draft_tree(n, n.add(kNoParent, b), t, rng);
  return n;
}

Nodes tot(const std::string& name, std::mt19937_64& rng) {
  const int32_t depth = name_param(name, "depth", 64), width = name_param(name, "width", 1024);
  check_name(name, {"depth", "width"}, 1.0 + 5.0 * depth * width, 1000.0 + 2000.0 * depth * width);
  // Levels of candidate thoughts first; then thoughts with no descendant on the last level
  // (pruned branches) are dropped.
  std::vector<int32_t> par{kNoParent}, tok{1000};
  std::vector<int32_t> frontier{0};
  for (int32_t level = 1; level <= depth; ++level) {
    std::vector<int32_t> next;
    if (level < depth) {
      for (int32_t j = 0; j < width; ++j) {
        par.push_back(frontier[rand_int(rng, 0, frontier.size() - 1)]);
        tok.push_back(static_cast<int32_t>(rand_int(rng, 50, 400)));
        next.push_back(static_cast<int32_t>(par.size()) - 1);
      }
    } else {
      for (int32_t f : frontier) {
        const int64_t c = rand_int(rng, 1, 5);
        for (int64_t j = 0; j < c; ++j) {
          par.push_back(f);
          tok.push_back(static_cast<int32_t>(rand_int(rng, 50, 400)));
          next.push_back(static_cast<int32_t>(par.size()) - 1);
        }
      }
    }
    frontier = std::move(next);
  }
  const int32_t count = static_cast<int32_t>(par.size());
  std::vector<char> keep(count, 0);
  for (int32_t f : frontier) keep[f] = 1;
  for (int32_t i = count - 1; i > 0; --i)
    if (keep[i]) keep[par[i]] = 1;
  std::vector<int32_t> remap(count, -1);
  Nodes n;
  for (int32_t i = 0; i < count; ++i) {
    if (keep[i]) remap[i] = n.add(par[i] == kNoParent ? kNoParent : remap[par[i]], tok[i]);
  }
  for (int32_t f : frontier) n.queries.push_back(remap[f]);
  return n;
}

Nodes degenerate(const std::string& name) {
  const int32_t depth = name_param(name, "depth", 1 << 16), c = name_param(name, "C", 1 << 20);
  check_name(name, {"depth", "C"}, 2.0 * depth + 1, (2.0 * depth + 1) * c);
  Nodes n;
  int32_t left = n.add(kNoParent, c);
  for (int32_t d = 1; d <= depth; ++d) {
    const int32_t l = n.add(left, c);
    n.queries.push_back(n.add(left, c));  // the right child, a leaf
    if (d == depth) n.queries.push_back(l);
    left = l;
  }
  return n;
}

Nodes forest(const std::string& name, std::mt19937_64& rng) {
  const int32_t roots = name_param(name, "roots", 4096),
                samples = name_param(name, "samples", 1024);
  check_name(name, {"roots", "samples"}, roots * (1.0 + samples),
             roots * (8191.0 + 512.0 * samples));
  Nodes n;
  for (int32_t r = 0; r < roots; ++r) {
    const int32_t prompt = n.add(kNoParent, log_uniform(rng, 256, 5));
    const int64_t s = rand_int(rng, 1, samples);
    if (s == 1) {
      n.queries.push_back(prompt);
      continue;
    }
    for (int64_t j = 0; j < s; ++j) n.queries.push_back(n.add(prompt, rand_int(rng, 16, 512)));
  }
  return n;
}

Nodes agent(const std::string& name, std::mt19937_64& rng) {
  const int32_t sessions = name_param(name, "sessions", 4096),
                depth = name_param(name, "depth", 256);
  check_name(name, {"sessions", "depth"}, 1.0 + 3.0 * sessions * depth,
             4000.0 + sessions * depth * (1536.0 + 2 * 512.0));
  Nodes n;
  const int32_t system = n.add(kNoParent, rand_int(rng, 2000, 4000));
  for (int32_t s = 0; s < sessions; ++s) {
    int32_t cur = system;
    const int64_t turns = rand_int(rng, 1, depth);
    for (int64_t k = 1; k <= turns; ++k) {
      const int32_t turn = n.add(cur, rand_int(rng, 64, 1536));
      if (k < turns && rand_int(rng, 0, 3) == 0) {
        const int64_t others = rand_int(rng, 1, 2);
        for (int64_t j = 0; j < others; ++j)
          n.queries.push_back(n.add(cur, rand_int(rng, 32, 512)));
      }
      cur = turn;
    }
    n.queries.push_back(cur);
  }
  return n;
}

Nodes chain(const std::string& name, std::mt19937_64& rng) {
  const int32_t depth = name_param(name, "depth", 1 << 16),
                queries = name_param(name, "queries", 4096);
  check_name(name, {"depth", "queries"}, static_cast<double>(depth) + queries,
             512.0 * depth + 64.0 * queries);
  Nodes n;
  std::vector<int32_t> turns;
  for (int32_t d = 0; d < depth; ++d)
    turns.push_back(n.add(d == 0 ? kNoParent : turns.back(), rand_int(rng, 64, 512)));
  n.queries.push_back(turns.back());
  for (int32_t q = 1; q < queries; ++q) {
    const int32_t at = turns[rand_int(rng, 0, depth - 1)];
    n.queries.push_back(n.add(at, rand_int(rng, 1, 64)));
  }
  return n;
}

Nodes spectree(const std::string& name, std::mt19937_64& rng) {
  const int32_t batch = name_param(name, "batch", 4096), t = name_param(name, "t", 1 << 12);
  check_name(name, {"batch", "t"}, batch * (t + 1.0), batch * (8191.0 + t));
  Nodes n;
  for (int32_t b = 0; b < batch; ++b)
    add_draft_tree(n, n.add(kNoParent, log_uniform(rng, 1024, 3)), t, rng);
  return n;
}

// Merges chains into radix-tree nodes and drops dead branches: a node with no query and no live
// descendant goes, and a live node whose parent has no query and no other live child is
// appended to its parent (tokens added).
Nodes compress(const Nodes& n) {
  const size_t count = n.parents.size();
  std::vector<int32_t> queried(count, 0), live_children(count, 0);
  std::vector<char> live(count, 0);
  for (int32_t q : n.queries) queried[q] = 1;
  for (size_t i = count; i-- > 0;) {
    live[i] = live[i] || queried[i];
    if (live[i] && n.parents[i] != kNoParent) {
      live[n.parents[i]] = 1;
      ++live_children[n.parents[i]];
    }
  }
  Nodes out;
  std::vector<int32_t> rep(count, -1);
  for (size_t i = 0; i < count; ++i) {
    if (!live[i]) continue;
    const int32_t p = n.parents[i];
    if (p != kNoParent && !queried[p] && live_children[p] == 1) {
      rep[i] = rep[p];
      out.tokens[rep[i]] += n.tokens[i];
    } else {
      rep[i] = out.add(p == kNoParent ? kNoParent : rep[p], n.tokens[i]);
    }
  }
  for (int32_t q : n.queries) out.queries.push_back(rep[q]);
  return out;
}

Nodes eagle(const std::string& name, std::mt19937_64& rng) {
  const int32_t batch = name_param(name, "batch", 4096), depth = name_param(name, "depth", 16),
                topk = name_param(name, "topk", 16), tokens = name_param(name, "tokens", 1 << 12);
  check_name(name, {"batch", "depth", "topk", "tokens"}, batch * (1.0 + tokens),
             batch * (8191.0 + tokens));
  Nodes n;
  for (int32_t b = 0; b < batch; ++b) {
    const int32_t context = n.add(kNoParent, log_uniform(rng, 512, 4));
    // candidates: (cost, parent candidate or -1 for the context); a child costs more than its
    // parent, the j-th best child of a node more than the first
    std::vector<std::pair<int64_t, int32_t>> cand;
    std::vector<int32_t> level{-1};
    for (int32_t d = 1; d <= depth; ++d) {
      // the topk cheapest nodes of the level above (ties: the earlier)
      std::vector<int32_t> expand = level;
      const auto cost = [&](int32_t c) { return c < 0 ? int64_t{0} : cand[c].first; };
      std::stable_sort(expand.begin(), expand.end(),
                       [&](int32_t a, int32_t b2) { return cost(a) < cost(b2); });
      if (static_cast<int32_t>(expand.size()) > topk) expand.resize(topk);
      level.clear();
      for (int32_t e : expand) {
        for (int32_t j = 0; j < topk; ++j) {
          cand.emplace_back(cost(e) + 1 + int64_t{j} * j + rand_int(rng, 0, 3), e);
          level.push_back(static_cast<int32_t>(cand.size()) - 1);
        }
      }
    }
    // the `tokens` cheapest candidates (ties: the earlier), in candidate order so parents come
    // first
    std::vector<int32_t> order(cand.size());
    for (size_t i = 0; i < order.size(); ++i) order[i] = static_cast<int32_t>(i);
    std::stable_sort(order.begin(), order.end(),
                     [&](int32_t a, int32_t b2) { return cand[a].first < cand[b2].first; });
    if (static_cast<int32_t>(order.size()) > tokens) order.resize(tokens);
    std::sort(order.begin(), order.end());
    std::vector<int32_t> node(cand.size(), -1);
    for (int32_t c : order) {
      const int32_t parent = cand[c].second < 0 ? context : node[cand[c].second];
      node[c] = n.add(parent, 1);
      n.queries.push_back(node[c]);
    }
  }
  return n;
}

Nodes beam(const std::string& name, std::mt19937_64& rng) {
  const int32_t requests = name_param(name, "requests", 4096),
                width = name_param(name, "width", 256), steps = name_param(name, "steps", 1 << 14);
  check_name(name, {"requests", "width", "steps"}, requests * (1.0 + 1.0 * width * steps),
             requests * (4095.0 + 1.0 * width * steps));
  Nodes all;
  for (int32_t r = 0; r < requests; ++r) {
    Nodes n;  // one token per hypothesis, then compressed
    std::vector<int32_t> beams(width, n.add(kNoParent, log_uniform(rng, 256, 4)));
    for (int32_t s = 0; s < steps; ++s) {
      std::vector<int32_t> next(width);
      for (int32_t k = 0; k < width; ++k) {
        const double u = rand_unit(rng);
        next[k] = n.add(beams[static_cast<size_t>(u * u * width)], 1);
      }
      beams = std::move(next);
    }
    n.queries = beams;
    const Nodes c = compress(n);
    const int32_t off = static_cast<int32_t>(all.parents.size());
    for (size_t i = 0; i < c.parents.size(); ++i)
      all.add(c.parents[i] == kNoParent ? kNoParent : c.parents[i] + off, c.tokens[i]);
    for (int32_t q : c.queries) all.queries.push_back(q + off);
  }
  return all;
}

Nodes rollout(const std::string& name, std::mt19937_64& rng) {
  const int32_t groups = name_param(name, "groups", 4096),
                samples = name_param(name, "samples", 4096), len = name_param(name, "len", 1 << 20);
  check_name(name, {"groups", "samples", "len"}, 1.0 + groups * (1.0 + samples),
             1023.0 + groups * (2047.0 + 1.0 * samples * len));
  Nodes n;
  const int32_t system = n.add(kNoParent, rand_int(rng, 128, 1023));
  for (int32_t g = 0; g < groups; ++g) {
    const int32_t prompt = n.add(system, log_uniform(rng, 64, 5));
    for (int32_t s = 0; s < samples; ++s)
      n.queries.push_back(n.add(prompt, rand_int(rng, std::max(1, len / 2), len)));
  }
  return n;
}

}  // namespace

int32_t generated_page_size(const std::string& name) {
  return name_param(name, "page", kMaxGeneratedPage, 16);
}

ModelShape generated_shape(const std::string& name) {
  ModelShape shape{32, 8, 128};
  std::istringstream in(name);
  std::string tok;
  while (in >> tok) {
    if (tok.rfind("heads=", 0) != 0) continue;
    try {
      parse_heads(tok.substr(6), &shape);  // the level specs' rule
    } catch (const std::invalid_argument& e) {
      TA_CHECK_ARG(false, "workload", e.what(), " in '", name, "'");
    }
  }
  return shape;
}

PrefixTree build_generated(const std::string& name, int32_t page_size, uint64_t gseed,
                           PageLayout layout, uint64_t page_seed) {
  std::mt19937_64 rng(gseed);
  const std::string family = name.substr(0, name.find(' '));
  Nodes n;
  if (family == "specdec") {
    n = specdec(name, rng);
  } else if (family == "tot") {
    n = tot(name, rng);
  } else if (family == "degenerate") {
    n = degenerate(name);
  } else if (family == "forest") {
    n = forest(name, rng);
  } else if (family == "agent") {
    n = agent(name, rng);
  } else if (family == "chain") {
    n = chain(name, rng);
  } else if (family == "spectree") {
    n = spectree(name, rng);
  } else if (family == "eagle") {
    n = eagle(name, rng);
  } else if (family == "beam") {
    n = beam(name, rng);
  } else if (family == "rollout") {
    n = rollout(name, rng);
  } else {
    TA_CHECK_ARG(false, "workload", "unknown generator '", name,
                 "' (known: specdec, tot, degenerate, forest, agent, chain, spectree, eagle, "
                 "beam, rollout)");
  }
  return assemble_tree(n.parents, n.tokens, n.queries, page_size, layout, page_seed);
}

}  // namespace treeattn::detail
