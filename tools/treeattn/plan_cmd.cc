// `treeattn plan`: plans one tree (or each line of a workload set) with one planner or all of
// them and prints the plan statistics, as a table or as JSON (--json). A planner that throws
// gets its error in its row instead of aborting the others, and the command exits with 1.
#include <cstdio>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "args.h"
#include "commands.h"
#include "inputs.h"
#include "treeattn/plan/planner.h"
#include "treeattn/plan/stats.h"

namespace treeattn::cli {
namespace {

std::string json_escape(const std::string& s) {
  std::string o;
  for (const char c : s) {
    if (c == '"' || c == '\\') {
      o += '\\';
      o += c;
    } else if (static_cast<unsigned char>(c) < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof(buf), "\\u%04x", c);
      o += buf;
    } else {
      o += c;
    }
  }
  return o;
}

struct Row {
  std::string planner, error;
  PlanStats st;
};

constexpr double kMB = 1e6;

}  // namespace

int plan_command(int argc, char** argv) {
  std::vector<FlagSpec> flags = input_flags(true);
  for (const FlagSpec& f : planner_flags()) flags.push_back(f);
  flags.push_back({"json", false, "print JSON instead of a table"});
  const Args a(argc, argv, 2, flags);
  if (a.help()) {
    std::printf("%s", a.usage("plan").c_str());
    return 0;
  }
  const std::string planner = a.str("planner", "all");
  const std::vector<std::string> planners = planner_list(planner);
  const DeviceInfo dev = device_flag(a);
  const bool json = a.has("json");
  const std::vector<Problem> problems = load_problems(a, true);

  int failures = 0;
  std::ostringstream js;
  js << "{\"device\": \"" << dev.name << "\", \"workloads\": [";
  for (size_t pi = 0; pi < problems.size(); ++pi) {
    const Problem& p = problems[pi];
    PlanOptions opts;
    opts.num_qo_heads = p.num_qo_heads;
    opts.num_kv_heads = p.num_kv_heads;
    opts.head_dim = p.head_dim;
    opts.device = dev;
    std::vector<Row> rows;
    for (const std::string& name : planners) {
      Row r;
      r.planner = name;
      opts.planner = name;
      try {
        const Plan plan = make_plan(p.tree, opts);
        r.st = plan_stats(p.tree, plan, dev);
      } catch (const std::exception& e) {
        r.error = e.what();
        ++failures;
      }
      rows.push_back(r);
    }
    const int64_t unique = unique_tokens(p.tree);
    if (json) {
      js << (pi ? ", " : "") << "{\"workload\": \"" << json_escape(p.name) << "\", \"set\": \""
         << json_escape(p.set) << "\", \"heads\": [" << p.num_qo_heads << ", " << p.num_kv_heads
         << "], \"head_dim\": " << p.head_dim << ", \"page_size\": " << p.tree.page_size
         << ", \"queries\": " << p.tree.num_queries() << ", \"unique_tokens\": " << unique
         << ", \"plans\": [";
      for (size_t i = 0; i < rows.size(); ++i) {
        const Row& r = rows[i];
        js << (i ? ", " : "") << "{\"planner\": \"" << r.planner << "\", ";
        if (!r.error.empty()) {
          js << "\"error\": \"" << json_escape(r.error) << "\"}";
          continue;
        }
        js << "\"items\": " << r.st.items << ", \"ctas\": " << r.st.ctas
           << ", \"launches\": " << r.st.launches << ", \"kv_bytes_read\": " << r.st.kv_bytes_read
           << ", \"unique_kv_bytes\": " << r.st.unique_kv_bytes
           << ", \"redundant_kv_bytes\": " << r.st.redundant_kv_bytes
           << ", \"partial_bytes\": " << r.st.partial_bytes << ", \"qo_bytes\": " << r.st.qo_bytes
           << ", \"padding_fraction\": " << r.st.padding_fraction << ", \"flops\": " << r.st.flops
           << ", \"est_time_us\": " << r.st.est_time_us << "}";
      }
      js << "]}";
    } else {
      std::printf("%s%s  [%s, %d queries, %lld unique tokens, device %s]\n", pi ? "\n" : "",
                  p.name.c_str(), shape_text(p).c_str(), p.tree.num_queries(),
                  static_cast<long long>(unique), dev.name.c_str());
      std::printf("%-11s %8s %8s %11s %13s %11s %9s %10s\n", "planner", "items", "CTAs",
                  "KV MB read", "redundant MB", "partial MB", "padding%", "est us");
      for (const Row& r : rows) {
        if (!r.error.empty()) {
          std::printf("%-11s error: %s\n", r.planner.c_str(), r.error.c_str());
          continue;
        }
        std::printf("%-11s %8lld %8lld %11.3f %13.3f %11.3f %9.1f %10.2f\n", r.planner.c_str(),
                    static_cast<long long>(r.st.items), static_cast<long long>(r.st.ctas),
                    r.st.kv_bytes_read / kMB, r.st.redundant_kv_bytes / kMB,
                    r.st.partial_bytes / kMB, 100.0 * r.st.padding_fraction, r.st.est_time_us);
      }
    }
  }
  if (json) std::printf("%s]}\n", js.str().c_str());
  // A planner that throws is a failure: its row shows the error, and the exit status is 1.
  return failures > 0 ? 1 : 0;
}

}  // namespace treeattn::cli
