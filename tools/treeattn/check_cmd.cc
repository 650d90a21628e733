// `treeattn check`: for each selected tree (or every line of --workloads SET|all) and planner,
//   1. make_plan() and check_coverage() (every (query, token) pair exactly once, slots, merges);
//   2. the float32 CPU executor against the float64 oracle on fresh random fp16 (bf16 where the
//      workload says so) inputs, on a sample of queries; with --kv-dtype fp8_e4m3|fp8_e5m2 K and V
//      are the dequantized fp8 values k_scale x fp8(value / k_scale) (random_inputs()), which the
//      oracle sees too, and the plan is made for 1-byte KV.
// PASS when compare_to_oracle() (treeattn/cpu/compare.h: the one tolerance rule, documented there)
// passes for the outputs and for the LSEs of every sampled query, at the fp32 bound (the executor
// computes in float32); --tolerance replaces that bound.
//
// Cost bounding (so `check --workloads all --planner all` runs in about a minute on 2 cores):
// the sample defaults to all queries when there are <= 64, else 64 random ones (--sample-queries
// overrides; 0 = all); then, while the oracle work (sampled context tokens x checked query heads
// x head_dim) exceeds kWorkBudget or the random K/V would exceed kInputBudget elements, only the
// first KV heads (each with its whole GQA group) are
// checked, and, with the sample not given explicitly, the sample shrinks (to >= 2 queries). KV
// heads are independent in both executor and oracle and the plan does not depend on head data,
// so checking a head subset checks the plan's structure fully; the executor and oracle then run
// on a plan copy whose shape says num_kv_heads = checked heads, num_qo_heads = group x that.
// Random K/V exist only for the pages the tree uses: the tree is checked with its used page ids
// renumbered densely in increasing order (compact_pages), so a large declared num_pages costs
// nothing. A planner run that fails says why in its FAIL line and on stderr. Every line says how
// many queries and KV heads it compared; --json FILE writes the results as JSON ('-' = stdout).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <numeric>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "args.h"
#include "cli_util.h"
#include "commands.h"
#include "inputs.h"
#include "treeattn/cpu/compare.h"
#include "treeattn/cpu/executor.h"
#include "treeattn/cpu/random_inputs.h"
#include "treeattn/cpu/reference.h"
#include "treeattn/plan/coverage.h"
#include "treeattn/plan/planner.h"

namespace treeattn::cli {
namespace {

constexpr double kWorkBudget = 4e7;   // oracle multiply-adds per q.k pass, ~0.1 s
constexpr double kInputBudget = 4e6;  // K elements generated (num_pages x P x heads x head_dim)

struct Sample {
  std::vector<int32_t> queries;  // sorted
  int32_t kv_heads = 1;          // checked KV heads (the first ones)
};

Sample choose_sample(const Problem& p, int64_t requested, bool explicit_k, uint64_t seed) {
  const int32_t nq = p.tree.num_queries();
  std::vector<int32_t> perm(nq);
  std::iota(perm.begin(), perm.end(), 0);
  std::mt19937_64 rng(seed ^ 0xC0FFEEull);
  std::shuffle(perm.begin(), perm.end(), rng);
  int64_t k = requested == 0 ? nq : std::min<int64_t>(requested, nq);
  const int64_t group = p.num_qo_heads / p.num_kv_heads;
  std::vector<int64_t> ctx(nq);
  for (int32_t q = 0; q < nq; ++q) ctx[q] = query_context(p.tree, q);
  auto work = [&](int64_t kk, int64_t heads) {
    double w = 0;
    for (int64_t i = 0; i < kk; ++i) w += static_cast<double>(ctx[perm[i]]);
    return w * static_cast<double>(heads * group * p.head_dim);
  };
  int64_t heads = p.num_kv_heads;
  const double kv_rows = static_cast<double>(p.tree.num_pages) * p.tree.page_size * p.head_dim;
  while (heads > 1 && kv_rows * heads > kInputBudget) heads = std::max<int64_t>(1, heads / 2);
  while (heads > 1 && work(k, heads) > kWorkBudget) heads = std::max<int64_t>(1, heads / 2);
  if (!explicit_k)
    while (k > 2 && work(k, heads) > kWorkBudget) k = std::max<int64_t>(2, k * 3 / 4);
  Sample s;
  s.queries.assign(perm.begin(), perm.begin() + std::min<int64_t>(k, nq));
  std::sort(s.queries.begin(), s.queries.end());
  s.kv_heads = static_cast<int32_t>(heads);
  return s;
}

/// The tree with its used page ids renumbered 0.. in increasing order (same layout otherwise).
PrefixTree compact_pages(const PrefixTree& tree) {
  std::vector<int32_t> ids;
  for (const TreeNode& nd : tree.nodes)
    if (nd.alive) ids.insert(ids.end(), nd.pages.begin(), nd.pages.end());
  std::sort(ids.begin(), ids.end());
  ids.erase(std::unique(ids.begin(), ids.end()), ids.end());
  PrefixTree out = tree;
  for (TreeNode& nd : out.nodes)
    for (int32_t& p : nd.pages)
      p = static_cast<int32_t>(std::lower_bound(ids.begin(), ids.end(), p) - ids.begin());
  out.num_pages = static_cast<int32_t>(ids.size());
  out.free_pages.clear();
  return out;
}

}  // namespace

int check_command(int argc, char** argv) {
  std::vector<FlagSpec> flags = input_flags(true);
  for (const FlagSpec& f : planner_flags()) flags.push_back(f);
  flags.push_back({"sample-queries", true, "queries checked against float64 (0 = all)"});
  flags.push_back({"tolerance", true,
                   "PASS bound on both relative errors (default: compare_to_oracle's fp32 bound)"});
  flags.push_back({"json", true, "write the results as JSON to FILE (bare --json or '-': stdout)",
                   true, FileRole::kOutput});
  const Args a(argc, argv, 2, flags);
  if (a.help()) {
    std::printf("%s", a.usage("check").c_str());
    return 0;
  }
  const std::string planner = a.str("planner", "all");
  const std::vector<std::string> planners = planner_list(planner);
  const int64_t requested = a.integer("sample-queries", 64, 0, 1 << 24);
  const bool explicit_k = a.has("sample-queries");
  const uint64_t seed = a.u64("seed", 0);
  const double tolerance = a.real("tolerance", oracle_tolerance(OutputDtype::kFp32), 0.0, 1e9);
  JsonOut json(a.str("json"), "check");
  const DeviceInfo dev = device_flag(a);
  const int32_t paths_group = paths_group_flag(a);
  const std::vector<Problem> problems = load_problems(a, true);

  int total = 0, passed = 0;
  int64_t compared_queries = 0, compared_heads = 0;
  json.text() << "{\"command\": \"check\", \"device\": \"" << dev.name
              << "\", \"paths_group\": " << paths_group
              << ", \"tolerance\": " << json_number(tolerance) << ", \"results\": [";
  for (const Problem& given : problems) {
    Problem p = given;
    p.tree = compact_pages(given.tree);
    const int32_t nq = p.tree.num_queries();
    const Sample s = choose_sample(p, requested, explicit_k, seed);
    const int32_t checked_qo_heads = p.num_qo_heads / p.num_kv_heads * s.kv_heads;
    RandomInputs data;
    HostAttentionInputs in;
    std::vector<double> ref, ref_lse;
    bool inputs_ok = true;
    std::string input_error;
    try {
      RandomInputSpec spec{checked_qo_heads, s.kv_heads, p.head_dim, p.bf16, seed};
      spec.kv_dtype = p.kv_dtype;
      spec.k_scale = p.k_scale;
      spec.v_scale = p.v_scale;
      data = random_inputs(p.tree, spec);
      in = host_inputs(data, checked_qo_heads, s.kv_heads, p.head_dim);
      ref.assign(static_cast<size_t>(nq) * in.num_qo_heads * p.head_dim, 0.0);
      ref_lse.assign(static_cast<size_t>(nq) * in.num_qo_heads, 0.0);
      reference_attention(p.tree, in, s.queries, ref.data(), ref_lse.data());
    } catch (const std::exception& e) {
      inputs_ok = false;
      input_error = e.what();
    }
    const std::string label = (p.set.empty() ? "" : p.set + "  ") + p.name + "  " + shape_text(p);
    for (const std::string& name : planners) {
      ++total;
      std::string verdict, detail;
      double rel = NAN, max_lse_err = NAN;
      try {
        if (!inputs_ok) throw std::runtime_error("inputs: " + input_error);
        const Plan plan =
            planned(p.tree, planner_options(name, p, dev, paths_group), "check", p.name);
        check_coverage(p.tree, plan);
        Plan sub = plan;  // same items, restricted to the checked KV heads (see file comment)
        sub.shape.num_kv_heads = in.num_kv_heads;
        sub.shape.num_qo_heads = in.num_qo_heads;
        std::vector<float> out(ref.size(), NAN), lse(ref_lse.size(), NAN);
        execute_plan_cpu(sub, in, s.queries, out.data(), lse.data());
        const OracleComparison c =
            compare_to_oracle(ref.data(), ref_lse.data(), out.data(), lse.data(), in.num_qo_heads,
                              p.head_dim, s.queries, OutputDtype::kFp32);
        const bool nan = c.nan || c.bad_empty_rows > 0;
        rel = c.max_rel_err;
        max_lse_err = c.lse_rel_err;
        const bool ok = c.passes(tolerance);
        compared_queries += static_cast<int64_t>(s.queries.size());
        compared_heads += static_cast<int64_t>(s.queries.size()) * s.kv_heads;
        char buf[160];
        std::snprintf(buf, sizeof(buf),
                      "max_rel_err %.2e  lse_rel_err %.2e%s  (queries %zu/%d, kv heads %d/%d)", rel,
                      max_lse_err, nan ? "  NaN or bad empty row" : "", s.queries.size(), nq,
                      s.kv_heads, p.num_kv_heads);
        verdict = ok ? "PASS" : "FAIL";
        detail = buf;
      } catch (const std::exception& e) {
        verdict = "FAIL";
        detail = std::string("error: ") + e.what();
        std::fprintf(stderr, "treeattn check: %s on %s: %s\n", name.c_str(), p.name.c_str(),
                     e.what());
      }
      passed += verdict == "PASS";
      json.text() << (total > 1 ? ", " : "") << "{\"workload\": \"" << json_escape(p.name)
                  << "\", \"set\": \"" << json_escape(p.set) << "\", \"planner\": \"" << name
                  << "\", \"kv_dtype\": \"" << kv_dtype_name(p.kv_dtype)
                  << "\", \"pass\": " << (verdict == "PASS" ? "true" : "false")
                  << ", \"max_rel_err\": " << json_number(rel)
                  << ", \"lse_rel_err\": " << json_number(max_lse_err)
                  << ", \"queries_compared\": " << s.queries.size() << ", \"queries\": " << nq
                  << ", \"kv_heads_compared\": " << s.kv_heads
                  << ", \"kv_heads\": " << p.num_kv_heads << ", \"detail\": \""
                  << json_escape(detail) << "\"}";
      std::fprintf(json.human(), "%s  %-10s  %s  %s\n", verdict.c_str(), name.c_str(),
                   label.c_str(), detail.c_str());
      std::fflush(json.human());
    }
  }
  json.text() << "], \"passed\": " << passed << ", \"total\": " << total << "}\n";
  json.write();
  std::fprintf(
      json.human(),
      "%d/%d passed (compare_to_oracle: max|out-ref|/max|ref| <= %.3g, out and lse; compared "
      "%lld queries, %lld query x KV-head pairs, in all)\n",
      passed, total, tolerance, static_cast<long long>(compared_queries),
      static_cast<long long>(compared_heads));
  return passed == total ? 0 : 1;
}

}  // namespace treeattn::cli
