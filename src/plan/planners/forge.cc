// FlashForge (CoDec): task division and min-max scheduling over a KV forest.
//  * Tasks: one per used node (its KV with every query below it; the forest's virtual root is
//    implicit). FlashForge keeps b_q = 1 (never split the queries of a node); our per-CTA cap of
//    128 packed rows forces b_q = ceil(queries / cap) where a node has more queries.
//  * Cost estimator C_est(packed_rows, kv_tokens): forge_profile.h (profile table of the device
//    when data/profiles/<device>.csv exists, the analytic cost model otherwise).
//  * Lower bound: m = CTA slots per KV head (slots / kv_heads: every item runs once per KV head).
//    cost_l is the smallest c with  sum_i b_q[i] b_k[i](c) C_est(task i / b_k[i](c)) / m <= c,
//    b_k[i](c) = ceil(C_est(task i) / c)  (bisection; the average load grows as c shrinks and
//    tasks are cut finer). Eq. (5) caps the splits of each node at ceil(C_est(i) / cost_l).
//  * Grid search: the cap scaled by 1, 1/1.25, 1/1.5, 1/2, 1/3 (coarser divisions), each scored by
//    the LPT makespan bound max(largest subtask, total / m); the best wins.
//  * Scheduling: subtasks are emitted longest first (LPT order). finalize_plan() then orders items
//    by tile class and KV length, which keeps longest-first within a class up to row counts.
#include <algorithm>
#include <cmath>
#include <numeric>
#include <tuple>
#include <vector>

#include "plan/cost/forge_profile.h"
#include "planner_util.h"
#include "planners.h"

namespace treeattn::planners {
namespace {

/// A division class: tasks with equal (rows, chunks, tokens, partial) divide alike; the searches
/// run over classes (level-spec trees have a handful) instead of nodes.
struct TaskClass {
  int32_t rows = 0;    ///< packed rows of the first (largest) query chunk
  int32_t chunks = 1;  ///< b_q
  int32_t tokens = 0;
  bool partial = true;  ///< rows write partials even when b_k = 1
  int32_t max_parts = 1;
  int64_t count = 0;  ///< tasks in the class
  double full = 0;    ///< C_est of the undivided chunk
  int32_t parts = 1;  ///< chosen b_k
  double piece = 0;   ///< C_est of one subtask
  bool operator<(const TaskClass& o) const {
    return std::tie(rows, chunks, tokens, partial) <
           std::tie(o.rows, o.chunks, o.tokens, o.partial);
  }
  bool same(const TaskClass& o) const { return !(*this < o) && !(o < *this); }
};

}  // namespace

void forge(const PrefixTree& tree, const TreeIndex& index, const PlanOptions& opts,
           PlanBuilder* b) {
  const PlanShape shape = plan_shape(tree, opts);
  const ForgeEstimator est(opts.device, shape);
  const int32_t cap = max_queries_per_item(opts, /*masked=*/false);
  const int32_t group = shape.group();
  const double m = std::max<double>(
      1.0, static_cast<double>(device_slots(opts.device)) / std::max(1, opts.num_kv_heads));
  constexpr int32_t kMinPiece = 32;

  std::vector<TaskClass> keys;  // one per task, in preorder
  std::vector<int32_t> task_node;
  keys.reserve(index.preorder.size());
  for (const int32_t v : index.preorder) {
    const int32_t nq = static_cast<int32_t>(index.queries_below(v).size());
    if (nq == 0) continue;
    TaskClass t;
    t.chunks = static_cast<int32_t>(ceil_div(nq, cap));
    t.rows = std::min(nq, cap) * group;
    t.tokens = tree.nodes[v].tokens;
    // Rows write the final output only when this node is the whole path of all its queries.
    t.partial = !(tree.nodes[v].parent == kNoParent && index.children(v).empty() && t.chunks == 1);
    keys.push_back(t);
    task_node.push_back(v);
  }
  std::vector<TaskClass> tasks = keys;
  std::sort(tasks.begin(), tasks.end());
  {
    size_t w = 0;
    for (size_t i = 0; i < tasks.size(); ++i) {
      if (w > 0 && tasks[w - 1].same(tasks[i])) {
        ++tasks[w - 1].count;
      } else {
        tasks[w] = tasks[i];
        tasks[w].count = 1;
        ++w;
      }
    }
    tasks.resize(w);
  }
  for (TaskClass& t : tasks) {
    t.max_parts = std::max(1, t.tokens / kMinPiece);
    t.full = est(t.rows, t.tokens, t.partial);
  }

  auto parts_for = [&](const TaskClass& t, double c) {
    const double k = std::ceil(t.full / std::max(c, 1e-9));
    return static_cast<int32_t>(std::clamp<double>(k, 1.0, t.max_parts));
  };
  auto piece_cost = [&](const TaskClass& t, int32_t parts) {
    return est(t.rows, ceil_div(t.tokens, parts), t.partial || parts > 1);
  };
  auto avg_load = [&](double c) {
    double sum = 0;
    for (const TaskClass& t : tasks) {
      const int32_t k = parts_for(t, c);
      sum += static_cast<double>(t.count) * t.chunks * k * piece_cost(t, k);
    }
    return sum / m;
  };

  // Lower bound cost_l by bisection on c (avg_load(c) - c is decreasing in c).
  double hi = 0;
  for (const TaskClass& t : tasks) hi = std::max(hi, t.full);
  double cost_l = hi;
  if (!tasks.empty() && avg_load(hi) < hi) {
    double lo = hi * 1e-4;
    for (int it = 0; it < 24; ++it) {
      const double mid = std::sqrt(lo * hi);
      (avg_load(mid) <= mid ? hi : lo) = mid;
    }
    cost_l = hi;
  }

  // Grid search over coarser divisions, scored by the LPT bound.
  static constexpr double kScales[] = {1.0, 1.25, 1.5, 2.0, 3.0};
  double best = -1, best_scale = 1.0;
  for (const double s : kScales) {
    double total = 0, largest = 0;
    for (const TaskClass& t : tasks) {
      const int32_t k = std::min(parts_for(t, cost_l), parts_for(t, cost_l * s));
      const double pc = piece_cost(t, k);
      total += static_cast<double>(t.count) * t.chunks * k * pc;
      largest = std::max(largest, pc);
    }
    const double makespan = std::max(largest, total / m);
    if (best < 0 || makespan < best - 1e-12) {
      best = makespan;
      best_scale = s;
    }
  }
  for (TaskClass& t : tasks) {
    t.parts = std::min(parts_for(t, cost_l), parts_for(t, cost_l * best_scale));
    t.piece = piece_cost(t, t.parts);
  }
  for (TaskClass& k : keys) {
    const TaskClass& c = *std::lower_bound(tasks.begin(), tasks.end(), k);
    k.parts = c.parts;
    k.piece = c.piece;
  }

  // LPT order: longest subtasks first.
  std::vector<int32_t> order(keys.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(),
                   [&](int32_t a, int32_t b) { return keys[a].piece > keys[b].piece; });
  for (const int32_t i : order) {
    const int32_t v = task_node[i];
    const IdSpan qs = index.queries_below(v);
    const Seg seg{v, 0, keys[i].tokens};
    b->emit_group(qs.data(), static_cast<int32_t>(qs.size()), &seg, 1, cap, keys[i].parts);
  }
}

}  // namespace treeattn::planners
