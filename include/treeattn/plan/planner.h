// Planners: turn a PrefixTree into a Plan. One entry point, make_plan() (src/plan/planner.cc),
// dispatches on the planner name; each planner lives in its own file under src/plan/planners/.
#pragma once

#include <string>
#include <vector>

#include "treeattn/plan/cost/device_info.h"
#include "treeattn/plan/layout.h"
#include "treeattn/plan/plan.h"
#include "treeattn/tree/prefix_tree.h"

namespace treeattn {

struct PlanOptions {
  std::string planner = "auto";
  int32_t num_qo_heads = 32;
  int32_t num_kv_heads = 8;
  int32_t head_dim = 128;
  int32_t dtype_bytes = 2;     ///< Q/O element size
  int32_t kv_dtype_bytes = 0;  ///< K/V element size (1 = fp8 cache); 0 = dtype_bytes
  /// The most queries per group of the `paths` and `paths-split` planners (also where auto scores
  /// them; a group may end early at a subtree, src/plan/planners/paths.cc): 0 lets the cost model
  /// choose among 1, 2, 4, ... up to the masked items' cap; 1 to kMaxMaskedRows fixes it, lowered
  /// to the cap of the head group (128 packed rows: 128 / group queries) where that is smaller.
  int32_t paths_group = 0;
  DeviceInfo device;  ///< the uncalibrated defaults of DeviceInfo (device_preset() gives presets)
};

/// Names accepted by make_plan, in display order (the planner table, src/plan/planners/):
/// query, node, node-chunk, flatten, fasttree, pat, forge, paths, paths-split, auto.
const std::vector<std::string>& planner_names();

/// Throws std::invalid_argument naming "planner" (not in planner_names()), "num_qo_heads",
/// "num_kv_heads" (each >= 1, num_kv_heads dividing num_qo_heads, a group of <= 128),
/// "head_dim" (64, 128 or 256), "dtype_bytes" (1, 2 or 4), "kv_dtype_bytes" (1, 2, 4 or 0),
/// "paths_group" (0 to kMaxMaskedRows) or the offending "device.*" field.
void validate_plan_options(const PlanOptions& opts);

/// The one conversion of a caller's planning arguments (the CLI's flags, the Python plan(), the
/// benchmarks) into PlanOptions, checked with validate_plan_options().
PlanOptions make_plan_options(const std::string& planner, int32_t num_qo_heads,
                              int32_t num_kv_heads, int32_t head_dim,
                              const DeviceInfo& device = DeviceInfo(), int32_t dtype_bytes = 2,
                              int32_t kv_dtype_bytes = 0, int32_t paths_group = 0);

/// The paths planners' queries per group when opts.paths_group fixes it: paths_group lowered to
/// the head group's cap (128 packed rows, kMaxMaskedRows rows); 0 when the cost model chooses.
int32_t fixed_paths_group(const PlanOptions& opts);

/// Validates the options (validate_plan_options) and the tree, then runs the named planner.
/// Throws std::invalid_argument naming the option (see validate_plan_options) or the tree's
/// offender.
/// Thread safety: every planner is reentrant. Any number of threads may call make_plan() at once,
/// on the same tree too (it only reads it); their one shared structure, FlashForge's profile
/// cache, is behind a mutex.
Plan make_plan(const PrefixTree& tree, const PlanOptions& opts);

/// Capacities for the device layout of a CUDA-graph step (plan_layout's `reserve`): every plan
/// of the `query` planner (opts' heads and device) over at most `rows` queries, each on a path
/// of at most `pages_per_row` pages of `page_size` tokens (one page list per path: nodes start on
/// page boundaries, as those built from block tables do), fits them, so a serving step whose
/// tree plan does not fit can always run the query plan instead. Beyond that bound they keep a
/// budget for tree plans: kGraphItemsPerQuery items (in the class of one query's rows) and
/// kGraphRowsPerQuery rows and merge slots per query, and kGraphWaves waves
/// of one CTA per SM in each grouped tile class that `rows` queries can fill (kM64 when they pack
/// more than 16 rows, kM128 more than 64). Its class_items and queries also serve as the launch
/// grids of a graph step of `rows` rows (DecodeArgs::launch_class_items). O(1); throws
/// std::invalid_argument naming
/// "rows", "pages_per_row" or "page_size" when < 1, or a capacity above 2^31 - 1.
inline constexpr int kGraphItemsPerQuery = 2;
inline constexpr int kGraphRowsPerQuery = 8;
inline constexpr int kGraphWaves = 2;
LayoutReserve graph_reserve(const PlanOptions& opts, int64_t rows, int64_t pages_per_row,
                            int32_t page_size);

}  // namespace treeattn
