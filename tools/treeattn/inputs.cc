// Implementation of the CLI's problem selection (inputs.h).
#include "inputs.h"

#include <cfloat>
#include <sstream>
#include <stdexcept>

#include "treeattn/plan/planner.h"
#include "treeattn/tree/json.h"
#include "treeattn/tree/levels.h"
#include "treeattn/tree/workloads.h"

namespace treeattn::cli {
namespace {

[[noreturn]] void rethrow(const std::string& flag, const std::exception& e) {
  throw std::invalid_argument("--" + flag + ": " + e.what());
}

struct Overrides {
  bool heads = false;
  int32_t qo = 0, kv = 0, head_dim = 0, page_size = 0;
};

Overrides read_overrides(const Args& a) {
  Overrides o;
  o.heads = a.heads("heads", &o.qo, &o.kv);
  o.head_dim = static_cast<int32_t>(a.integer("head-dim", 0, 1, 1024));
  if (a.has("head-dim") && o.head_dim != 64 && o.head_dim != 128 && o.head_dim != 256)
    throw std::invalid_argument("--head-dim: must be 64, 128 or 256, got " + a.str("head-dim"));
  o.page_size = static_cast<int32_t>(a.integer("page-size", 0, 1, kMaxPageSize));
  return o;
}

void apply_shape(const Overrides& o, const ModelShape& own, Problem* p) {
  p->num_qo_heads = o.heads ? o.qo : own.num_qo_heads > 0 ? own.num_qo_heads : 32;
  p->num_kv_heads = o.heads ? o.kv : own.num_kv_heads > 0 ? own.num_kv_heads : 8;
  p->head_dim = o.head_dim > 0 ? o.head_dim : own.head_dim > 0 ? own.head_dim : 128;
}

Problem from_workload(const Workload& w0, const Overrides& o, PageLayout layout, uint64_t seed) {
  Workload w = w0;
  if (o.page_size > 0) w.spec.page_size = o.page_size;
  Problem p;
  p.set = w.set;
  p.name = w.name;
  p.tree = build_workload(w, layout, seed);
  apply_shape(o, w.spec.shape, &p);
  p.bf16 = w.spec.dtype == "bf16";
  return p;
}

}  // namespace

std::vector<FlagSpec> input_flags(bool with_sets) {
  std::vector<FlagSpec> f = {
      {"tree", true, "JSON tree file (format in include/treeattn/tree/json.h)", false,
       FileRole::kInput},
      {"levels", true, "level spec, e.g. 'N=1,16 C=1024,64 heads=32/8'"},
      {"workload", true, "one named workload: 'fasttree:3' or its exact line (treeattn workloads)"},
      {"heads", true, "query/KV heads, e.g. 32/8 (overrides the input's own)"},
      {"head-dim", true, "64, 128 or 256 (overrides the input's own)"},
      {"page-size", true, "tokens per KV page for --levels/--workload (overrides)"},
      {"shuffle-pages", false, "lay pages out in random order (fragmentation), see --seed"},
      {"seed", true, "random seed (page shuffle, inputs, sampling); default 0"},
      {"kv-dtype", true,
       "K/V element type: same (as q, default), fp8_e4m3 or fp8_e5m2 (1 byte per element)"},
      {"k-scale", true, "fp8 K dequantization scale (K = k_scale x stored), > 0; default 1"},
      {"v-scale", true, "fp8 V dequantization scale (V = v_scale x stored), > 0; default 1"},
  };
  if (with_sets) f.push_back({"workloads", true, "every line of a workload set, or 'all'"});
  return f;
}

namespace {

/// --k-scale / --v-scale: a positive normal float32 (the kernels read a float32 scale).
float scale_flag(const Args& a, const std::string& name) {
  return static_cast<float>(
      a.real(name, 1.0, static_cast<double>(FLT_MIN), static_cast<double>(FLT_MAX)));
}

/// The K/V storage flags, applied to every problem.
void read_kv_flags(const Args& a, KvDType* dtype, float* k_scale, float* v_scale) {
  const std::string name = a.str("kv-dtype", "same");
  if (name == "same") {
    *dtype = KvDType::kSame;
  } else if (name == "fp8_e4m3") {
    *dtype = KvDType::kFloat8E4M3;
  } else if (name == "fp8_e5m2") {
    *dtype = KvDType::kFloat8E5M2;
  } else {
    throw std::invalid_argument("--kv-dtype: expected same, fp8_e4m3 or fp8_e5m2, got '" + name +
                                "'");
  }
  for (const char* flag : {"k-scale", "v-scale"})
    if (a.has(flag) && !is_fp8(*dtype))
      throw std::invalid_argument(std::string("--") + flag +
                                  ": only with an fp8 --kv-dtype (fp8_e4m3 or fp8_e5m2)");
  *k_scale = scale_flag(a, "k-scale");
  *v_scale = scale_flag(a, "v-scale");
}

/// The selected trees and their shapes (load_problems without the K/V storage).
std::vector<Problem> load_trees(const Args& a, bool with_sets);

}  // namespace

std::vector<Problem> load_problems(const Args& a, bool with_sets) {
  KvDType kv_dtype = KvDType::kSame;
  float k_scale = 1.f, v_scale = 1.f;
  read_kv_flags(a, &kv_dtype, &k_scale, &v_scale);
  std::vector<Problem> out = load_trees(a, with_sets);
  for (Problem& p : out) {
    p.kv_dtype = kv_dtype;
    p.k_scale = k_scale;
    p.v_scale = v_scale;
  }
  return out;
}

namespace {

std::vector<Problem> load_trees(const Args& a, bool with_sets) {
  int sources =
      a.has("tree") + a.has("levels") + a.has("workload") + (with_sets && a.has("workloads"));
  if (sources != 1) {
    const std::string opts = with_sets ? "--tree, --levels, --workload or --workloads"
                                       : "--tree, --levels or --workload";
    throw std::invalid_argument(std::string(sources == 0 ? "--tree: missing input, give one of "
                                                         : "--tree: give only one of ") +
                                opts);
  }
  const Overrides o = read_overrides(a);
  const PageLayout layout =
      a.has("shuffle-pages") ? PageLayout::kShuffled : PageLayout::kContiguous;
  const uint64_t seed = a.u64("seed", 0);
  std::vector<Problem> out;
  if (a.has("tree")) {
    if (o.page_size > 0)
      throw std::invalid_argument("--page-size: a JSON tree's page size is fixed by its pages");
    if (a.has("shuffle-pages"))
      throw std::invalid_argument("--shuffle-pages: a JSON tree's pages are fixed by the file");
    Problem p;
    p.name = a.str("tree");
    try {
      p.tree = tree_from_json_file(p.name);
    } catch (const std::exception& e) {
      rethrow("tree", e);
    }
    apply_shape(o, p.tree.shape, &p);
    out.push_back(std::move(p));
  } else if (a.has("levels")) {
    Problem p;
    try {
      LevelSpec spec = parse_levels(a.str("levels"));
      if (o.page_size > 0) spec.page_size = o.page_size;
      p.name = spec.text.empty() ? a.str("levels") : spec.text;
      p.tree = tree_from_levels(spec, layout, seed);
      apply_shape(o, spec.shape, &p);
      p.bf16 = spec.dtype == "bf16";
    } catch (const std::exception& e) {
      rethrow("levels", e);
    }
    out.push_back(std::move(p));
  } else if (a.has("workload")) {
    Workload w;
    try {
      w = find_workload(a.str("workload"));
    } catch (const std::exception& e) {
      rethrow("workload", e);
    }
    out.push_back(from_workload(w, o, layout, seed));
  } else {
    std::vector<Workload> ws;
    try {
      ws = workload_set(a.str("workloads"));
    } catch (const std::exception& e) {
      rethrow("workloads", e);
    }
    for (const Workload& w : ws) out.push_back(from_workload(w, o, layout, seed));
  }
  return out;
}

}  // namespace

std::string shape_text(const Problem& p) {
  std::ostringstream os;
  os << "heads=" << p.num_qo_heads << "/" << p.num_kv_heads << " dim=" << p.head_dim
     << " page=" << p.tree.page_size;
  if (is_fp8(p.kv_dtype)) {
    os << " kv=" << kv_dtype_name(p.kv_dtype);
    if (p.k_scale != 1.f) os << " k_scale=" << p.k_scale;
    if (p.v_scale != 1.f) os << " v_scale=" << p.v_scale;
  }
  return os.str();
}

std::vector<FlagSpec> planner_flags() {
  return {
      {"planner", true, "planner name or 'all' (default all)"},
      {"device", true,
       "cost-model preset the planners target: a100, h100 or h200 (default h200); not the "
       "hardware this runs on"},
      {"paths-group", true,
       "most queries per group of the paths and paths-split planners, also as auto's candidates "
       "(PlanOptions::paths_group): 0 (default) lets the cost model choose, 1-64 fixes it"}};
}

int32_t paths_group_flag(const Args& a) {
  return static_cast<int32_t>(a.integer("paths-group", 0, 0, kMaxMaskedRows));
}

PlanOptions planner_options(const std::string& name, const Problem& p, const DeviceInfo& dev,
                            int32_t paths_group) {
  return make_plan_options(name, p.num_qo_heads, p.num_kv_heads, p.head_dim, dev, 2,
                           p.kv_dtype_bytes(), paths_group);
}

DeviceInfo device_flag(const Args& a) {
  try {
    return device_preset(a.str("device", "h200"));
  } catch (const std::exception& e) {
    throw std::invalid_argument(std::string("--device: ") + e.what());
  }
}

std::vector<std::string> planner_list(const std::string& planner) {
  if (planner == "all") return planner_names();
  for (const std::string& n : planner_names())
    if (n == planner) return {planner};
  throw std::invalid_argument("--planner: unknown planner '" + planner + "'");
}

}  // namespace treeattn::cli
