// Planning-speed benchmark (Google Benchmark, CPU): a full make_plan() for every planner on
// FastTree and PAT workload lines with 256 and 1024 queries. Goal (issue 3): full plan under
// 100 us for 256 queries.
#include <benchmark/benchmark.h>

#include <string>
#include <vector>

#include "treeattn/plan/planner.h"
#include "treeattn/tree/levels.h"

namespace {

using treeattn::PageLayout;
using treeattn::PlanOptions;
using treeattn::PrefixTree;

const std::vector<std::string>& bench_workloads() {
  static const std::vector<std::string> w = {
      "N=1,256 C=256,32 heads=32/8",                                    // fasttree, 256 queries
      "N=1,4,256 C=32,256,32 heads=32/8 page=32",                       // pat, 256 queries
      "N=1,8,512 C=32,512,256 heads=32/8 page=32",                      // pat, 512 queries
      "N=1,1024 C=2048,32 heads=32/8",                                  // fasttree, 1024 queries
      "N=1,4,16,64,256,1024 C=256,8,256,64,32,256 heads=32/8",          // fasttree, 1024 queries
      "N=1,16,32,64,256,1024 C=256,128,64,32,32,32 heads=32/8 page=32"  // pat, 1024 queries
  };
  return w;
}

PlanOptions options(const treeattn::LevelSpec& spec, const std::string& planner) {
  return treeattn::make_plan_options(planner, spec.shape.num_qo_heads, spec.shape.num_kv_heads,
                                     spec.shape.head_dim > 0 ? spec.shape.head_dim : 128);
}

void BM_FullPlan(benchmark::State& state, std::string planner, std::string line) {
  const treeattn::LevelSpec spec = treeattn::parse_levels(line);
  const PrefixTree tree = treeattn::tree_from_levels(spec, PageLayout::kShuffled, 1);
  const PlanOptions o = options(spec, planner);
  for (auto _ : state) benchmark::DoNotOptimize(treeattn::make_plan(tree, o));
  state.counters["queries"] = tree.num_queries();
}

int register_all() {
  for (const std::string& line : bench_workloads())
    for (const std::string& p : treeattn::planner_names())
      benchmark::RegisterBenchmark(("FullPlan/" + p + "/" + line).c_str(), BM_FullPlan, p, line)
          ->Unit(benchmark::kMicrosecond);
  return 0;
}
const int registered = register_all();

}  // namespace

BENCHMARK_MAIN();
