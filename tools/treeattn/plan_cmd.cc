// `treeattn plan`: plans one tree (or each line of a workload set) with one planner or all of
// them and prints the plan statistics as a table, and as JSON with --json [FILE] (numbers with
// full precision; bare --json or '-': JSON on stdout, the table on stderr; per tile class the
// items, their KV tokens and whether GroupedKernel::kAuto would run the class on the
// warp-specialized kernel of an sm_90a device with the --device's SM count). A planner that throws
// gets its error in its row instead of aborting the others; any failure makes the exit code 1.
// Each row says which planner's plan it is (`chosen`: auto's pick, or the planner itself); the
// estimated times are the cost model's for the --device preset, not a measurement on this
// machine, and the output says so. --kv-dtype fp8_e4m3|fp8_e5m2 plans for an fp8 KV cache: the
// KV bytes (and the cost model's) count 1 byte per element, Q/O 2.
#include <cstdio>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "args.h"
#include "cli_util.h"
#include "commands.h"
#include "inputs.h"
#include "treeattn/plan/layout.h"
#include "treeattn/plan/planner.h"
#include "treeattn/plan/stats.h"
#include "treeattn/plan/tile_policy.h"

namespace treeattn::cli {
namespace {

struct Row {
  std::string planner, chosen, error;
  PlanStats st;
  PlanLayout layout;  ///< the plan's counts per tile class (class_items_planned, ...)
};

constexpr double kMB = 1e6;

}  // namespace

int plan_command(int argc, char** argv) {
  std::vector<FlagSpec> flags = input_flags(true);
  for (const FlagSpec& f : planner_flags()) flags.push_back(f);
  flags.push_back({"json", true,
                   "write JSON to FILE (bare --json or '-': JSON on stdout, table on stderr)", true,
                   FileRole::kOutput});
  const Args a(argc, argv, 2, flags);
  if (a.help()) {
    std::printf("%s", a.usage("plan").c_str());
    return 0;
  }
  const std::string planner = a.str("planner", "all");
  const std::vector<std::string> planners = planner_list(planner);
  const DeviceInfo dev = device_flag(a);
  const int32_t paths_group = paths_group_flag(a);
  JsonOut jout(a.str("json"), "plan");
  const bool json = jout.enabled();
  FILE* const out = jout.human();
  const std::vector<Problem> problems = load_problems(a, true);

  int failures = 0;
  std::ostringstream& js = jout.text();
  js << "{\"command\": \"plan\", \"device\": \"" << dev.name
     << "\", \"paths_group\": " << paths_group << ", \"workloads\": [";
  for (size_t pi = 0; pi < problems.size(); ++pi) {
    const Problem& p = problems[pi];
    std::vector<Row> rows;
    for (const std::string& name : planners) {
      Row r;
      r.planner = name;
      try {
        const Plan plan =
            planned(p.tree, planner_options(name, p, dev, paths_group), "plan", p.name);
        r.chosen = plan.chosen_planner;
        r.st = plan_stats(p.tree, plan, dev);
        r.layout = plan_layout(plan);
      } catch (const std::exception& e) {
        r.error = e.what();
        ++failures;
        std::fprintf(stderr, "treeattn plan: %s on %s: %s\n", name.c_str(), p.name.c_str(),
                     e.what());
      }
      rows.push_back(r);
    }
    const int64_t unique = unique_tokens(p.tree);
    if (json) {
      js << (pi ? ", " : "") << "{\"workload\": \"" << json_escape(p.name) << "\", \"set\": \""
         << json_escape(p.set) << "\", \"heads\": [" << p.num_qo_heads << ", " << p.num_kv_heads
         << "], \"head_dim\": " << p.head_dim << ", \"page_size\": " << p.tree.page_size
         << ", \"kv_dtype\": \"" << kv_dtype_name(p.kv_dtype)
         << "\", \"kv_dtype_bytes\": " << (is_fp8(p.kv_dtype) ? 1 : 2)
         << ", \"queries\": " << p.tree.num_queries() << ", \"unique_tokens\": " << unique
         << ", \"plans\": [";
      for (size_t i = 0; i < rows.size(); ++i) {
        const Row& r = rows[i];
        js << (i ? ", " : "") << "{\"planner\": \"" << r.planner << "\", ";
        if (!r.error.empty()) {
          js << "\"error\": \"" << json_escape(r.error) << "\"}";
          continue;
        }
        js << "\"chosen\": \"" << json_escape(r.chosen) << "\", \"items\": " << r.st.items
           << ", \"ctas\": " << r.st.ctas << ", \"launches\": " << r.st.launches
           << ", \"kv_bytes_read\": " << r.st.kv_bytes_read
           << ", \"unique_kv_bytes\": " << r.st.unique_kv_bytes
           << ", \"redundant_kv_bytes\": " << r.st.redundant_kv_bytes
           << ", \"partial_bytes\": " << r.st.partial_bytes << ", \"qo_bytes\": " << r.st.qo_bytes
           << ", \"padding_fraction\": " << json_number(r.st.padding_fraction)
           << ", \"flops\": " << json_number(r.st.flops)
           << ", \"est_time_us\": " << json_number(r.st.est_time_us) << ", \"classes\": [";
        const PlanLayout& L = r.layout;
        for (int c = 0; c < kNumTileClasses; ++c) {
          const bool ws =
              tile::block_layout(c, p.head_dim) &&
              tile::ws_pays_off(c, L.class_items_planned[c], L.class_kv_tokens_planned[c],
                                L.m16_items_planned, p.num_kv_heads, dev.num_sms);
          js << (c ? ", " : "") << "{\"items\": " << L.class_items_planned[c]
             << ", \"kv_tokens\": " << L.class_kv_tokens_planned[c]
             << ", \"auto_ws\": " << (ws ? "true" : "false") << "}";
        }
        js << "]}";
      }
      js << "]}";
    }
    {
      std::fprintf(out, "%s%s  [%s, %d queries, %lld unique tokens, cost-model preset %s]\n",
                   pi ? "\n" : "", p.name.c_str(), shape_text(p).c_str(), p.tree.num_queries(),
                   static_cast<long long>(unique), dev.name.c_str());
      std::fprintf(out, "%-11s %-11s %8s %8s %11s %13s %11s %9s %10s\n", "planner", "chosen",
                   "items", "CTAs", "KV MB read", "redundant MB", "partial MB", "padding%",
                   "est us");
      for (const Row& r : rows) {
        if (!r.error.empty()) {
          std::fprintf(out, "%-11s error: %s\n", r.planner.c_str(), r.error.c_str());
          continue;
        }
        std::fprintf(out, "%-11s %-11s %8lld %8lld %11.3f %13.3f %11.3f %9.1f %10.2f\n",
                     r.planner.c_str(), r.chosen.c_str(), static_cast<long long>(r.st.items),
                     static_cast<long long>(r.st.ctas), r.st.kv_bytes_read / kMB,
                     r.st.redundant_kv_bytes / kMB, r.st.partial_bytes / kMB,
                     100.0 * r.st.padding_fraction, r.st.est_time_us);
      }
    }
  }
  js << "], \"failures\": " << failures << "}\n";
  std::fprintf(out,
               "\nchosen: the planner whose plan it is (auto's pick among its candidates, 'auto' "
               "when it built its own).\nest us: the cost model's estimated kernel time in "
               "microseconds on the %s preset (--device), not a measurement on this machine.\n",
               dev.name.c_str());
  jout.write();
  // Every planner failure is reported in its row and makes the exit code 1.
  if (failures > 0)
    std::fprintf(stderr, "treeattn plan: %d planner run%s failed\n", failures,
                 failures == 1 ? "" : "s");
  return failures > 0 ? 1 : 0;
}

}  // namespace treeattn::cli
