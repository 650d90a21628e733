// Problem selection shared by the CLI subcommands that take a tree: --tree FILE.json,
// --levels 'N=.. C=..', --workload KEY (or, where allowed, --workloads SET|all), with
// --heads/--head-dim/--page-size overriding the input's own values and --shuffle-pages/--seed
// choosing the page layout.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "args.h"
#include "treeattn/common/fp8.h"
#include "treeattn/plan/cost/device_info.h"
#include "treeattn/plan/planner.h"
#include "treeattn/tree/prefix_tree.h"

namespace treeattn::cli {

/// One tree plus the model shape to plan it for.
struct Problem {
  std::string set;   ///< workload set, or "" for --tree / --levels
  std::string name;  ///< workload line / levels text / file path
  PrefixTree tree;
  int32_t num_qo_heads = 32, num_kv_heads = 8, head_dim = 128;
  bool bf16 = false;
  /// K/V storage (--kv-dtype, --k-scale, --v-scale): kSame = the dtype of q; fp8 = one byte per
  /// element standing for scale x value.
  KvDType kv_dtype = KvDType::kSame;
  float k_scale = 1.f, v_scale = 1.f;
  /// PlanOptions::kv_dtype_bytes for it: 1 for fp8, 0 (= dtype_bytes) otherwise.
  int32_t kv_dtype_bytes() const { return is_fp8(kv_dtype) ? 1 : 0; }
};

/// The input flags (with --kv-dtype, --k-scale and --v-scale); `with_sets` adds --workloads.
std::vector<FlagSpec> input_flags(bool with_sets);
/// Builds the selected problems (one, or a whole set for --workloads). Throws
/// std::invalid_argument whose message starts with the offending flag.
std::vector<Problem> load_problems(const Args& args, bool with_sets);
/// Planner names for a --planner value: every planner for "all", else the one named; throws
/// std::invalid_argument naming --planner for an unknown name.
std::vector<std::string> planner_list(const std::string& planner);
/// The flags of the commands that plan: --planner NAME|all, --device PRESET and --paths-group K.
std::vector<FlagSpec> planner_flags();
/// --paths-group (PlanOptions::paths_group): 0 to kMaxMaskedRows, 0 when absent; throws
/// std::invalid_argument naming the flag.
int32_t paths_group_flag(const Args& a);
/// PlanOptions of planner `name` for problem `p` with the cost model `dev` and the paths
/// planner's group size `paths_group`; throws std::invalid_argument naming the option.
PlanOptions planner_options(const std::string& name, const Problem& p, const DeviceInfo& dev,
                            int32_t paths_group);
/// The --device preset (h200 when not given); throws std::invalid_argument naming --device.
DeviceInfo device_flag(const Args& args);
/// Human-readable "heads=32/8 dim=128 page=16" suffix (then " kv=fp8_e4m3" and the scales that
/// are not 1 for an fp8 KV cache).
std::string shape_text(const Problem& p);

}  // namespace treeattn::cli
