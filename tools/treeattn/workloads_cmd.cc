// `treeattn workloads [--set NAME|all]`: lists the embedded workload sets, one line per workload
// with its node, query and unique-token counts.
#include <cstdio>

#include "args.h"
#include "commands.h"
#include "treeattn/tree/workloads.h"

namespace treeattn::cli {

int workloads_command(int argc, char** argv) {
  const Args a(argc, argv, 2, {{"set", true, "only this set (fasttree, pat, deft, forge, all)"}});
  if (a.help()) {
    std::printf("%s", a.usage("workloads").c_str());
    return 0;
  }
  const std::string only = a.str("set", "all");
  if (only != "all") workload_set(only);  // validates the name (throws naming "workload")
  std::printf("%-10s %-5s %8s %8s %12s  %s\n", "set", "key", "nodes", "queries", "unique_tok",
              "workload");
  for (const std::string& set : workload_set_names()) {
    if (only != "all" && only != set) continue;
    const std::vector<Workload> ws = workload_set(set);
    for (size_t i = 0; i < ws.size(); ++i) {
      const PrefixTree t = build_workload(ws[i]);
      int64_t nodes = 0;
      for (const TreeNode& n : t.nodes) nodes += n.alive;
      std::printf("%-10s %-5zu %8lld %8d %12lld  %s\n", set.c_str(), i,
                  static_cast<long long>(nodes), t.num_queries(),
                  static_cast<long long>(unique_tokens(t)), ws[i].name.c_str());
    }
  }
  return 0;
}

}  // namespace treeattn::cli
