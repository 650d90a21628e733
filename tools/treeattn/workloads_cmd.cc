// `treeattn workloads [--set NAME|all]`: lists the embedded workload sets, one line per workload
// with its node, query and unique-token counts; --json [FILE] writes them as JSON too (bare
// --json or '-': JSON on stdout, the table on stderr), as plan and check do.
#include <cstdio>
#include <stdexcept>
#include <string>

#include "args.h"
#include "cli_util.h"
#include "commands.h"
#include "treeattn/tree/workloads.h"

namespace treeattn::cli {

int workloads_command(int argc, char** argv) {
  const Args a(
      argc, argv, 2,
      {{"set", true, "only this set (fasttree, pat, deft, forge, irregular, all)"},
       {"json", true, "write JSON to FILE (bare --json or '-': stdout)", true, FileRole::kOutput}});
  if (a.help()) {
    std::printf("%s", a.usage("workloads").c_str());
    return 0;
  }
  const std::string only = a.str("set", "all");
  if (only != "all") {
    try {
      workload_set(only);  // validates the name
    } catch (const std::exception& e) {
      throw std::invalid_argument(std::string("--set: ") + e.what());
    }
  }
  JsonOut json(a.str("json"), "workloads");
  FILE* const out = json.human();
  json.text() << "{\"command\": \"workloads\", \"workloads\": [";
  bool first = true;
  std::fprintf(out, "%-10s %-5s %8s %8s %12s  %s\n", "set", "key", "nodes", "queries", "unique_tok",
               "workload");
  for (const std::string& set : workload_set_names()) {
    if (only != "all" && only != set) continue;
    const std::vector<Workload> ws = workload_set(set);
    for (size_t i = 0; i < ws.size(); ++i) {
      const PrefixTree t = build_workload(ws[i]);
      int64_t nodes = 0;
      for (const TreeNode& n : t.nodes) nodes += n.alive;
      json.text() << (first ? "" : ", ") << "{\"set\": \"" << set << "\", \"key\": \"" << set << ":"
                  << i << "\", \"nodes\": " << nodes << ", \"queries\": " << t.num_queries()
                  << ", \"unique_tokens\": " << unique_tokens(t) << ", \"workload\": \""
                  << json_escape(ws[i].name) << "\"}";
      first = false;
      std::fprintf(out, "%-10s %-5zu %8lld %8d %12lld  %s\n", set.c_str(), i,
                   static_cast<long long>(nodes), t.num_queries(),
                   static_cast<long long>(unique_tokens(t)), ws[i].name.c_str());
    }
  }
  json.text() << "]}\n";
  json.write();
  return 0;
}

}  // namespace treeattn::cli
