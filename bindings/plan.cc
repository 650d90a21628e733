// Bindings of the plan side: the Python-visible Plan (host plan + its tree + lazily made
// DevicePlan), its statistics and layout, and the device upload (to_device / update) through
// DevicePlan.
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <algorithm>
#include <limits>
#include <stdexcept>

#include "common.h"
#include "treeattn/common/error.h"
#include "treeattn/plan/cost/cost_model.h"
#include "treeattn/plan/coverage.h"
#include "treeattn/plan/planner.h"
#include "treeattn/plan/stats.h"

#if TREEATTN_PY_WITH_CUDA
#include "treeattn/kernels/device_plan.h"
#endif

namespace treeattn::py {
namespace {

/// Uploads `plan` into the plan's DevicePlan on `stream` (the caller made sure it fits).
void upload(PyPlan& p, const Plan& plan, uintptr_t stream) {
#if TREEATTN_PY_WITH_CUDA
  p.device->upload(plan, reinterpret_cast<cudaStream_t>(stream), p.headroom, &p.reserve);
  p.layout = p.device->layout();
#else
  (void)p;
  (void)plan;
  (void)stream;
#endif
}

nb::dict stats_dict(const PyPlan& p, const DeviceInfo& dev) {
  const std::shared_ptr<const PlanState> st = p.state.snapshot();
  const PlanStats s = plan_stats(st->tree, st->plan, dev);
  nb::dict d;
  d["items"] = s.items;
  d["ctas"] = s.ctas;
  d["launches"] = s.launches;
  d["kv_bytes_read"] = s.kv_bytes_read;
  d["unique_kv_bytes"] = s.unique_kv_bytes;
  d["redundant_kv_bytes"] = s.redundant_kv_bytes;
  d["partial_bytes"] = s.partial_bytes;
  d["qo_bytes"] = s.qo_bytes;
  d["padding_fraction"] = s.padding_fraction;
  d["flops"] = s.flops;
  d["est_time_us"] = s.est_time_us;
  return d;
}

nb::dict layout_dict(const PlanLayout& L) {
  nb::dict d;
  d["class_items"] = std::vector<int64_t>(L.class_items, L.class_items + kNumTileClasses);
  d["m16_items_planned"] = L.m16_items_planned;
  d["items"] = L.items;
  d["rows"] = L.rows;
  d["ranges"] = L.ranges;
  d["page_ids"] = L.page_ids;
  d["masks"] = L.masks;
  d["slots"] = L.slots;
  d["queries"] = L.queries;
  d["metadata_bytes"] = L.metadata_bytes;
  d["total_bytes"] = L.total_bytes;
  return d;
}

/// A property getter reading the plan of the current snapshot through `get`.
template <typename Get>
auto of_plan(Get get) {
  return [get](const PyPlan& p) { return get(p.state.snapshot()->plan); };
}

DeviceInfo device_from(nb::handle h) {
  if (nb::isinstance<nb::str>(h)) return device_preset(nb::cast<std::string>(h));
  if (nb::isinstance<DeviceInfo>(h)) return nb::cast<DeviceInfo>(h);
  throw nb::type_error("device: expected a preset name ('a100', 'h100', 'h200') or a DeviceInfo");
}

/// Plans a copy of `t` (taken with the GIL held) with the GIL released: other threads may run
/// Python, decode, or update the caller's tree meanwhile.
std::shared_ptr<const PlanState> plan_copy(const PrefixTree& t, const std::string& planner,
                                           int32_t num_qo_heads, int32_t num_kv_heads,
                                           int32_t head_dim, int32_t dtype_bytes,
                                           int32_t kv_dtype_bytes, const DeviceInfo& device,
                                           int32_t paths_group) {
  TA_CHECK_ARG(dtype_bytes == 2 || dtype_bytes == 4, "dtype_bytes", "expected 2 or 4, got ",
               dtype_bytes);
  const PlanOptions o = make_plan_options(planner, num_qo_heads, num_kv_heads, head_dim, device,
                                          dtype_bytes, kv_dtype_bytes, paths_group);
  PrefixTree copy = t;
  nb::gil_scoped_release release;
  return make_plan_state(std::move(copy), o);
}

}  // namespace

PyPlan::PyPlan(const PrefixTree& t, const std::string& planner, int32_t num_qo_heads,
               int32_t num_kv_heads, int32_t head_dim, int32_t dtype_bytes, int32_t kv_dtype_bytes,
               const DeviceInfo& device, double headroom_, int32_t paths_group)
    : state(plan_copy(t, planner, num_qo_heads, num_kv_heads, head_dim, dtype_bytes, kv_dtype_bytes,
                      device, paths_group)),
      headroom(headroom_) {
  layout = plan_layout(state.snapshot()->plan, headroom);
}

PyPlan::~PyPlan() { release_device(); }

void PyPlan::release_device() {
#if TREEATTN_PY_WITH_CUDA
  delete device;  // errors at interpreter exit are ignored
#endif
  device = nullptr;
  device_id = -1;
  resolved.reset();  // a new workspace holds the labels again until the next resolve
  resolved_max_page_id = -1;
}

void PyPlan::to_device(int32_t device_index, uintptr_t stream) {
#if TREEATTN_PY_WITH_CUDA
  if (device != nullptr) {
    TA_CHECK_ARG(device_index == device_id, "device", "plan workspace lives on cuda:", device_id,
                 ", asked for cuda:", device_index, " (make one plan per device)");
    return;
  }
  TA_CHECK_ARG(device_index >= 0, "device", "expected a CUDA device index >= 0, got ",
               device_index);
  device = new DevicePlan(device_index);
  device_id = device_index;
  try {
    upload(*this, state.snapshot()->plan, stream);
  } catch (...) {
    release_device();
    throw;
  }
#else
  (void)device_index;
  (void)stream;
  throw std::runtime_error(
      "device: no GPU support: treeattn was built without CUDA (nvcc not found at build time)");
#endif
}

bool PyPlan::fits(const PyPlan& other) const {
  return plan_fits(other.state.snapshot()->plan, layout);
}

void PyPlan::update(const PyPlan& other, uintptr_t stream) {
  if (&other == this) return;
  std::shared_ptr<const PlanState> next = other.state.snapshot();
  SharedPlan::check_replaceable(state.snapshot()->plan, next->plan);
  if (device != nullptr) {
    TA_CHECK_ARG(plan_fits(next->plan, layout), "plan",
                 "the new plan does not fit this plan's device layout (different heads/head_dim/"
                 "page_size, or more items/rows/ranges/pages/slots/queries than its capacity); "
                 "make the first plan with a larger headroom");
    upload(*this, next->plan, stream);
  } else {
    layout = plan_layout(next->plan, headroom, &reserve);
  }
  state.replace(std::move(next));
}

void PyPlan::resolve_pages(int64_t base, int64_t key_stride, const int32_t* row_of_key,
                           int64_t num_keys, const AnyArray& table, int32_t num_pages,
                           uintptr_t stream) {
  TA_CHECK_ARG(base >= 0, "label_base", "must be >= 0, got ", base);
  TA_CHECK_ARG(key_stride >= 1, "key_stride", "must be >= 1, got ", key_stride);
  // from now on a decode refuses any state with ids >= base that this call did not resolve, also
  // when it throws below
  label_base = base;
  TA_CHECK_ARG(num_pages >= 1, "num_pages", "must be >= 1, got ", num_pages);
  if (table.dtype() != nb::dtype<int32_t>())
    throw nb::type_error(("table: expected int32, got " + dtype_str(table.dtype())).c_str());
  TA_CHECK_ARG(table.ndim() == 2, "table", "expected 2 dims [rows, pages], got ", shape_str(table));
  const std::shared_ptr<const PlanState> st = state.snapshot();
  const std::vector<int32_t>& ids = st->plan.page_ids;
  const int64_t rows = static_cast<int64_t>(table.shape(0)),
                cols = static_cast<int64_t>(table.shape(1));
  std::vector<int32_t> pairs;  // (position in page_ids, element offset in table)
  int64_t max_real = -1;
  for (size_t i = 0; i < ids.size(); ++i) {
    const int64_t id = ids[i];
    if (id < base) {
      max_real = std::max(max_real, id);
      continue;
    }
    const int64_t key = (id - base) / key_stride, col = (id - base) % key_stride;
    TA_CHECK_ARG(key < num_keys && row_of_key[key] >= 0, "row_of_key", "the plan reads page label ",
                 id, " of key ", key, ", which has no row in this step");
    const int64_t row = row_of_key[key];
    TA_CHECK_ARG(row < rows, "row_of_key", "key ", key, " names row ", row, ", table has ", rows);
    TA_CHECK_ARG(col < cols, "table", "shape ", shape_str(table), " has no entry [", row, ", ", col,
                 "]");
    const int64_t src = row * table.stride(0) + col * table.stride(1);
    TA_CHECK_ARG(src >= 0 && src <= std::numeric_limits<int32_t>::max(), "table", "entry [", row,
                 ", ", col, "] lies ", src, " elements from its start (at most 2^31-1)");
    pairs.push_back(static_cast<int32_t>(i));
    pairs.push_back(static_cast<int32_t>(src));
  }
  const int64_t n = static_cast<int64_t>(pairs.size() / 2);
  if (table.device_type() == kDlCpu) {
    TA_CHECK_ARG(device == nullptr, "table",
                 "is on the CPU but the plan's "
                 "workspace is on cuda:",
                 device_id);
    auto next = std::make_shared<PlanState>(*st);
    const int32_t* t = static_cast<const int32_t*>(table.data());
    for (int64_t i = 0; i < n; ++i) {
      const int32_t v = t[pairs[2 * i + 1]];
      next->plan.page_ids[pairs[2 * i]] = (v >= 0 && v < num_pages) ? v : 0;
    }
    next->max_page_id = max_page_id(next->plan);
    host_labelled = st;  // check() checks the state the labels came from (same structure)
    host_resolved = next;
    state.replace(std::move(next));
    return;
  }
#if TREEATTN_PY_WITH_CUDA
  TA_CHECK_ARG(table.device_type() == kDlCuda, "table", "expected a CPU or CUDA array");
  TA_CHECK_ARG(device != nullptr && table.device_id() == device_id, "table",
               "is on cuda:", table.device_id(), " but the plan's workspace is ",
               device ? "on cuda:" + std::to_string(device_id) : std::string("not made yet"));
  device->resolve_pages(pairs.data(), n, static_cast<const int32_t*>(table.data()), num_pages,
                        reinterpret_cast<cudaStream_t>(stream));
  resolved = st;
  resolved_max_page_id = n > 0 ? std::max<int64_t>(max_real, num_pages - 1) : max_real;
#else
  (void)stream;
  throw nb::type_error("table: a CUDA array, but treeattn was built without CUDA");
#endif
}

void PyPlan::set_reserve(int64_t rows, int64_t pages_per_row, const DeviceInfo& dev) {
  TA_CHECK_ARG(device == nullptr, "plan",
               "its device workspace exists already: reserve before "
               "the first GPU use (to_device / decode)");
  const Plan& p = state.snapshot()->plan;
  PlanOptions o;
  o.num_qo_heads = p.shape.num_qo_heads;
  o.num_kv_heads = p.shape.num_kv_heads;
  o.head_dim = p.shape.head_dim;
  o.device = dev;
  const LayoutReserve r = graph_reserve(o, rows, pages_per_row, p.shape.page_size);
  layout = plan_layout(p, headroom, &r);  // checks before anything changes
  reserve = r;
}

void register_plan(nb::module_& m) {
  nb::class_<PyPlan>(m, "Plan", nb::is_weak_referenceable(),
                     "A host plan (work items over the tree's KV) plus, once used on a GPU, its "
                     "device workspace. Made by treeattn.plan(); reused across layers.")
      .def(
          "__init__",
          [](PyPlan* self, const PrefixTree& tree, const std::string& planner,
             IntParam num_qo_heads, IntParam num_kv_heads, IntParam head_dim, IntParam dtype_bytes,
             const DeviceInfo& device_info, double headroom, IntParam kv_dtype_bytes,
             IntParam paths_group) {
            const int32_t qo = int_arg("num_qo_heads", num_qo_heads);
            const int32_t kv = int_arg("num_kv_heads", num_kv_heads);
            const int32_t dim = int_arg("head_dim", head_dim);
            const int32_t bytes = int_arg("dtype_bytes", dtype_bytes);
            const int32_t kv_bytes = int_arg("kv_dtype_bytes", kv_dtype_bytes);
            const int32_t group = int_arg<int32_t>("paths_group", paths_group, 0, kMaxMaskedRows);
            new (self)
                PyPlan(tree, planner, qo, kv, dim, bytes, kv_bytes, device_info, headroom, group);
          },
          nb::arg("tree"), nb::arg("planner"), nb::arg("num_qo_heads").none(),
          nb::arg("num_kv_heads").none(), nb::arg("head_dim").none(), nb::arg("dtype_bytes").none(),
          nb::arg("device_info"), nb::arg("headroom"), nb::arg("kv_dtype_bytes").none() = 0,
          nb::arg("paths_group").none() = 0,
          nb::sig("def __init__(self, tree: PrefixTree, planner: str, num_qo_heads: int, "
                  "num_kv_heads: int, head_dim: int, dtype_bytes: int, device_info: DeviceInfo, "
                  "headroom: float, kv_dtype_bytes: int = 0, paths_group: int = 0) -> None"))
      .def_prop_ro("planner", of_plan([](const Plan& p) { return p.planner; }),
                   "The planner asked for.")
      .def_prop_ro(
          "chosen_planner", of_plan([](const Plan& p) { return p.chosen_planner; }),
          "The planner whose plan this is: the one asked for, or for 'auto' the candidate it "
          "chose ('auto' when its own grouping won, else e.g. 'fasttree').")
      .def_prop_ro("version", of_plan([](const Plan& p) { return p.version; }))
      .def_prop_ro("tree_version", of_plan([](const Plan& p) { return p.tree_version; }),
                   "PrefixTree.version of the tree the plan was made from.")
      .def_prop_ro("num_queries", of_plan([](const Plan& p) { return p.shape.num_queries; }))
      .def_prop_ro("num_qo_heads", of_plan([](const Plan& p) { return p.shape.num_qo_heads; }))
      .def_prop_ro("num_kv_heads", of_plan([](const Plan& p) { return p.shape.num_kv_heads; }))
      .def_prop_ro("head_dim", of_plan([](const Plan& p) { return p.shape.head_dim; }))
      .def_prop_ro("page_size", of_plan([](const Plan& p) { return p.shape.page_size; }))
      .def_prop_ro("kv_dtype_bytes", of_plan([](const Plan& p) { return p.shape.kv_dtype_bytes; }),
                   "Bytes per K/V element the plan was made for: 1 = an fp8 KV cache.")
      .def_prop_ro("num_items", of_plan([](const Plan& p) { return p.items.size(); }))
      .def_prop_ro("num_rows", of_plan([](const Plan& p) { return p.rows.size(); }))
      .def_prop_ro("num_ranges", of_plan([](const Plan& p) { return p.ranges.size(); }))
      .def_prop_ro("num_slots", of_plan([](const Plan& p) { return p.num_slots; }))
      .def_prop_ro(
          "class_items",
          [](const PyPlan& p) {
            const std::shared_ptr<const PlanState> st = p.state.snapshot();
            std::vector<int32_t> v(kNumTileClasses);
            for (int c = 0; c < kNumTileClasses; ++c)
              v[c] = st->plan.class_begin[c + 1] - st->plan.class_begin[c];
            return v;
          },
          "Items per tile class (M16, M64, M128).")
      .def_prop_ro(
          "max_page_id", [](const PyPlan& p) { return p.state.snapshot()->max_page_id; },
          "Largest page id the plan reads; caches need num_pages > max_page_id.")
      .def_prop_ro("headroom", [](const PyPlan& p) { return p.headroom; })
      .def_prop_ro(
          "workspace_bytes", [](const PyPlan& p) { return p.layout.total_bytes; },
          "Device workspace size (metadata + fp32 partials), headroom included.")
      .def_prop_ro(
          "device_index",
          [](const PyPlan& p) -> nb::object {
            return p.device ? nb::object(nb::int_(p.device_id)) : nb::object(nb::none());
          },
          "CUDA device holding the workspace, or None before first GPU use.")
      .def_prop_ro(
          "tree", [](const PyPlan& p) { return p.state.snapshot()->tree; },
          "A copy of the planned tree.")
      .def(
          "layout", [](const PyPlan& p) { return layout_dict(p.layout); },
          "Capacities and sizes of the device layout.")
      .def(
          "stats",
          [](const PyPlan& p, nb::handle device) { return stats_dict(p, device_from(device)); },
          nb::arg("device") = "h200",
          "Plan statistics (bytes read, redundant bytes, partials, padding, estimated time on "
          "`device`, a preset name or DeviceInfo) as a dict.")
      .def(
          "check",
          [](const PyPlan& p) {
            std::shared_ptr<const PlanState> st = p.state.snapshot();
            if (st == p.host_resolved) st = p.host_labelled;  // its tree holds the labels
            validate_plan(st->plan);
            check_coverage(st->tree, st->plan);
          },
          "Raises RuntimeError unless every (query, KV token) pair is covered exactly once.")
      .def(
          "fits",
          [](const PyPlan& p, nb::handle other) {
            if (!nb::isinstance<PyPlan>(other))
              throw nb::type_error(("other: expected a treeattn.Plan, got " +
                                    nb::cast<std::string>(other.type().attr("__name__")))
                                       .c_str());
            return p.fits(nb::cast<const PyPlan&>(other));
          },
          nb::arg("other").none(), nb::sig("def fits(self, other: Plan) -> bool"),
          "Whether `other` fits this plan's device layout (update() would succeed).")
      .def(
          "_reserve",
          [](PyPlan& p, IntParam rows, IntParam pages_per_row, nb::handle device) {
            p.set_reserve(int_arg<int64_t>("rows", rows, 1, 2147483647),
                          int_arg<int64_t>("pages_per_row", pages_per_row, 1, 2147483647),
                          device_from(device));
          },
          nb::arg("rows").none(), nb::arg("pages_per_row").none(), nb::arg("device"))
      .def(
          "_graph_caps",
          [](const PyPlan& p, IntParam rows, IntParam pages_per_row, nb::handle device) {
            const Plan& pl = p.state.snapshot()->plan;
            PlanOptions o;
            o.num_qo_heads = pl.shape.num_qo_heads;
            o.num_kv_heads = pl.shape.num_kv_heads;
            o.head_dim = pl.shape.head_dim;
            o.device = device_from(device);
            const LayoutReserve r =
                graph_reserve(o, int_arg<int64_t>("rows", rows, 1, 2147483647),
                              int_arg<int64_t>("pages_per_row", pages_per_row, 1, 2147483647),
                              pl.shape.page_size);
            return nb::make_tuple(
                std::vector<int64_t>(r.class_items, r.class_items + kNumTileClasses), r.queries);
          },
          nb::arg("rows").none(), nb::arg("pages_per_row").none(), nb::arg("device"))
      .def(
          "_set_launch_caps",
          [](PyPlan& p, nb::handle class_items, IntParam queries) {
            if (class_items.is_none()) {
              for (int64_t& c : p.launch_class_items) c = -1;
              p.launch_queries = -1;
              return;
            }
            const std::vector<int64_t> v =
                int_list_arg("class_items", class_items, -1, int64_t{2147483647});
            TA_CHECK_ARG(v.size() == kNumTileClasses, "class_items", "expected ", kNumTileClasses,
                         " caps, got ", v.size());
            const int64_t q = int_arg<int64_t>("queries", queries, -1, 2147483647);
            std::copy(v.begin(), v.end(), p.launch_class_items);
            p.launch_queries = q;
          },
          nb::arg("class_items").none(), nb::arg("queries").none())
      .def("_to_device", &PyPlan::to_device, nb::arg("device"), nb::arg("stream"))
      .def("_update", &PyPlan::update, nb::arg("other"), nb::arg("stream"))
      .def(
          "_resolve_pages",
          [](PyPlan& p, int64_t label_base, int64_t key_stride,
             nb::ndarray<const int32_t, nb::ndim<1>, nb::c_contig, nb::device::cpu> row_of_key,
             const AnyArray& table, int32_t num_pages, uintptr_t stream) {
            p.resolve_pages(label_base, key_stride, row_of_key.data(),
                            static_cast<int64_t>(row_of_key.shape(0)), table, num_pages, stream);
          },
          nb::arg("label_base"), nb::arg("key_stride"), nb::arg("row_of_key"), nb::arg("table"),
          nb::arg("num_pages"), nb::arg("stream"))
      .def("release_device", &PyPlan::release_device,
           "Frees the device workspace now (the next GPU decode allocates it again). Make sure "
           "no kernel using it is still running.");
}

}  // namespace treeattn::py
