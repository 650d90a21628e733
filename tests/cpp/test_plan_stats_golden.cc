// Same plans as recorded: the statistics and a hash of every plan array of every planner on every
// embedded workload line (H100 preset) match tests/data/plan_stats_h100.txt. A refactor that
// changes no plan keeps this test green; a change that alters plans on purpose regenerates the
// file and says why in its commit:
//   TREEATTN_WRITE_PLAN_STATS=tests/data/plan_stats_h100.txt \
//     build/treeattn_tests --gtest_filter=PlanStatsGolden.*
// (then restore the two comment lines at the top of the file).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "treeattn/plan/planner.h"
#include "treeattn/plan/stats.h"
#include "treeattn/tree/workloads.h"

namespace treeattn {
namespace {

/// FNV-1a over the bytes of 64-bit values.
struct Fnv {
  uint64_t h = 1469598103934665603ull;
  void mix(int64_t v) {
    for (int i = 0; i < 8; ++i) {
      h ^= static_cast<uint64_t>(v >> (8 * i)) & 0xffu;
      h *= 1099511628211ull;
    }
  }
};

uint64_t plan_hash(const Plan& p) {
  Fnv f;
  for (const WorkItem& it : p.items) {
    for (const int64_t v : {it.row_begin, it.num_rows, it.range_begin, it.num_ranges, it.kv_tokens,
                            static_cast<int32_t>(it.tile), it.mask_begin})
      f.mix(v);
  }
  for (const PlanRow& r : p.rows) {
    f.mix(r.query);
    f.mix(r.slot);
  }
  for (const KvRange& r : p.ranges)
    for (const int64_t v : {r.page_begin, r.page_offset, r.len, r.node}) f.mix(v);
  for (const int32_t x : p.page_ids) f.mix(x);
  for (const uint64_t x : p.masks) f.mix(static_cast<int64_t>(x));
  for (const int32_t x : p.merge_indptr) f.mix(x);
  for (const int32_t x : p.merge_slots) f.mix(x);
  return f.h;
}

/// "set|workload|planner" -> "items=.. rows=.. ... hash=..", one line per plan.
std::map<std::string, std::string> current_lines() {
  std::map<std::string, std::string> out;
  const DeviceInfo dev = device_preset("h100");
  for (const Workload& w : workload_set("all")) {
    const PrefixTree tree = build_workload(w);
    for (const std::string& name : planner_names()) {
      PlanOptions o;
      o.planner = name;
      o.num_qo_heads = w.spec.shape.num_qo_heads;
      o.num_kv_heads = w.spec.shape.num_kv_heads;
      o.head_dim = w.spec.shape.head_dim;
      o.device = dev;
      const Plan p = make_plan(tree, o);  // a planner that throws fails the test
      const PlanStats st = plan_stats(tree, p, dev);
      char buf[512];
      std::snprintf(buf, sizeof(buf),
                    "items=%zu rows=%zu ranges=%zu slots=%d masks=%zu pages=%zu kv=%lld ctas=%lld "
                    "est=%.12g flops=%.12g pad=%.12g hash=%016llx",
                    p.items.size(), p.rows.size(), p.ranges.size(), p.num_slots, p.masks.size(),
                    p.page_ids.size(), static_cast<long long>(st.kv_bytes_read),
                    static_cast<long long>(st.ctas), st.est_time_us, st.flops, st.padding_fraction,
                    static_cast<unsigned long long>(plan_hash(p)));
      out[w.set + "|" + w.name + "|" + name] = buf;
    }
  }
  return out;
}

std::map<std::string, std::string> fields(const std::string& line) {
  std::map<std::string, std::string> f;
  std::istringstream is(line);
  std::string tok;
  while (is >> tok) {
    const size_t eq = tok.find('=');
    if (eq != std::string::npos) f[tok.substr(0, eq)] = tok.substr(eq + 1);
  }
  return f;
}

TEST(PlanStatsGolden, EveryPlannerOnEveryWorkloadLine) {
  const std::map<std::string, std::string> now = current_lines();
  if (const char* path = std::getenv("TREEATTN_WRITE_PLAN_STATS")) {
    std::ofstream os(path);
    for (const auto& [key, line] : now) os << key << " " << line << "\n";
    GTEST_SKIP() << "wrote " << path;
  }
  std::ifstream is(std::string(TREEATTN_TEST_DATA_DIR) + "/plan_stats_h100.txt");
  ASSERT_TRUE(is.good()) << "missing tests/data/plan_stats_h100.txt";
  std::string line;
  size_t checked = 0;
  while (std::getline(is, line)) {
    if (line.empty() || line[0] == '#') continue;
    const size_t pos = line.find(" items=");
    ASSERT_NE(pos, std::string::npos) << line;
    const std::string key = line.substr(0, pos);
    const auto it = now.find(key);
    if (it == now.end()) {
      ADD_FAILURE() << "no plan for " << key;
      continue;
    }
    ++checked;
    const std::map<std::string, std::string> want = fields(line.substr(pos)),
                                             got = fields(it->second);
    for (const auto& [k, v] : want) {
      if (k == "est" || k == "flops" || k == "pad") {  // doubles: within rounding
        const double a = std::stod(v), b = std::stod(got.at(k));
        EXPECT_NEAR(b, a, 1e-9 * std::max(1.0, std::fabs(a))) << key << " " << k;
      } else {
        EXPECT_EQ(got.at(k), v) << key << " " << k;
      }
    }
  }
  EXPECT_EQ(checked, now.size()) << "workload lines or planners without a recorded plan";
}

}  // namespace
}  // namespace treeattn
