// Bindings of the tree side: PrefixTree (builders, updates, derived views, JSON), the embedded
// workload sets, DeviceInfo presets and the planner names.
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>
#include <nanobind/stl/vector.h>

#include <algorithm>
#include <stdexcept>

#include "common.h"
#include "treeattn/common/error.h"
#include "treeattn/plan/planner.h"
#include "treeattn/tree/block_tables.h"
#include "treeattn/tree/json.h"
#include "treeattn/tree/levels.h"
#include "treeattn/tree/random_tree.h"
#include "treeattn/tree/workloads.h"

namespace treeattn::py {
namespace {

PageLayout parse_layout(const std::string& s) {
  if (s == "contiguous") return PageLayout::kContiguous;
  if (s == "shuffled") return PageLayout::kShuffled;
  throw std::invalid_argument("layout: expected 'contiguous' or 'shuffled', got '" + s + "'");
}

/// Reads an integer 1-D or 2-D CPU array element as int64 (int32 / int64 / uint32 accepted).
int64_t int_at(const AnyArray& a, int64_t offset_elems) {
  const auto dt = a.dtype();
  const char* p = static_cast<const char*>(a.data()) + offset_elems * a.itemsize();
  if (dt == nb::dtype<int32_t>()) return *reinterpret_cast<const int32_t*>(p);
  if (dt == nb::dtype<int64_t>()) return *reinterpret_cast<const int64_t*>(p);
  if (dt == nb::dtype<uint32_t>()) return *reinterpret_cast<const uint32_t*>(p);
  return *reinterpret_cast<const int64_t*>(p);  // unreachable: dtype checked by caller
}

void check_int_array(const AnyArray& a, const char* name, size_t ndim) {
  if (a.device_type() != kDlCpu)
    throw nb::type_error(
        (std::string(name) + ": expected a CPU array (call .cpu() first)").c_str());
  const auto dt = a.dtype();
  if (!(dt == nb::dtype<int32_t>() || dt == nb::dtype<int64_t>() || dt == nb::dtype<uint32_t>()))
    throw nb::type_error(
        (std::string(name) + ": expected int32 or int64, got " + dtype_str(dt)).c_str());
  TA_CHECK_ARG(a.ndim() == ndim, name, "expected ", ndim, " dims, got ", shape_str(a));
}

/// block_tables as a 2-D integer array (rows may be padded past ceil(seq_len / page_size)).
PrefixTree from_block_tables_array(const AnyArray& bt, const AnyArray& lens, IntParam page_size_arg,
                                   IntParam num_pages_arg) {
  const int32_t page_size = int_arg("page_size", page_size_arg);
  const int32_t num_pages = int_arg("num_pages", num_pages_arg);
  check_int_array(bt, "block_tables", 2);
  check_int_array(lens, "seq_lens", 1);
  TA_CHECK_ARG(lens.shape(0) == bt.shape(0), "seq_lens", "expected ", bt.shape(0),
               " entries (one per block_tables row), got ", lens.shape(0));
  TA_CHECK_ARG(page_size >= 1, "page_size", "must be >= 1, got ", page_size);
  const int64_t rows = static_cast<int64_t>(bt.shape(0)), cols = static_cast<int64_t>(bt.shape(1));
  std::vector<std::vector<int32_t>> tables(rows);
  std::vector<int64_t> seq_lens(rows);
  // the page ids read with bt's element type resolved once (int_at tests the dtype per entry)
  const auto read = [&](const auto* data) {
    for (int64_t r = 0; r < rows; ++r) {
      seq_lens[r] = int_at(lens, r * lens.stride(0));
      TA_CHECK_ARG(seq_lens[r] >= 0, "seq_lens", "entry ", r, " is negative: ", seq_lens[r]);
      TA_CHECK_ARG(seq_lens[r] <= INT32_MAX, "seq_lens", "entry ", r, " is ", seq_lens[r],
                   ", above 2^31-1 tokens");
      const int64_t need = (seq_lens[r] + page_size - 1) / page_size;
      TA_CHECK_ARG(need <= cols, "block_tables", "row ", r, " has ", cols, " pages, seq_lens[", r,
                   "] = ", seq_lens[r], " needs ", need);
      tables[r].resize(need);
      const auto* row = data + r * bt.stride(0);
      for (int64_t c = 0; c < need; ++c) {
        const int64_t id = static_cast<int64_t>(row[c * bt.stride(1)]);
        TA_CHECK_ARG(id >= 0 && id <= INT32_MAX, "block_tables", "page id ", id, " at [", r, ", ",
                     c, "] out of range");
        tables[r][c] = static_cast<int32_t>(id);
      }
    }
  };
  const auto dt = bt.dtype();
  if (dt == nb::dtype<int32_t>())
    read(static_cast<const int32_t*>(bt.data()));
  else if (dt == nb::dtype<uint32_t>())
    read(static_cast<const uint32_t*>(bt.data()));
  else
    read(static_cast<const int64_t*>(bt.data()));  // int64: check_int_array allows no other
  return tree_from_block_tables(tables, seq_lens, page_size, num_pages);
}

/// `h` as T values in [lo, T's max]: a 1-D integer CPU array, or a sequence whose items int_arg
/// takes; errors name `name` or `name[i]`.
template <typename T>
std::vector<T> int_list(nb::handle h, const char* name, T lo = std::numeric_limits<T>::min()) {
  const T hi = std::numeric_limits<T>::max();
  std::vector<T> out;
  AnyArray a;
  if (nb::try_cast(h, a, false)) {
    check_int_array(a, name, 1);
    out.resize(a.shape(0));
    for (size_t i = 0; i < out.size(); ++i) {
      const int64_t v = int_at(a, static_cast<int64_t>(i) * a.stride(0));
      TA_CHECK_ARG(v >= lo && v <= hi, detail::concat(name, "[", i, "]"), v, " is out of range [",
                   lo, ", ", hi, "]");
      out[i] = static_cast<T>(v);
    }
  } else if (nb::isinstance<nb::sequence>(h) && !nb::isinstance<nb::str>(h) &&
             !nb::isinstance<nb::bytes>(h)) {
    const nb::sequence seq = nb::borrow<nb::sequence>(h);
    out.reserve(nb::len(seq));
    for (nb::handle item : seq) {
      int overflow = 1;  // a plain int in range is taken directly; int_arg checks the rest
      const long long v =
          PyLong_CheckExact(item.ptr()) ? PyLong_AsLongLongAndOverflow(item.ptr(), &overflow) : 0;
      if (overflow == 0 && v >= lo && v <= hi)
        out.push_back(static_cast<T>(v));
      else
        out.push_back(int_arg<T>(detail::concat(name, "[", out.size(), "]").c_str(), item, lo, hi));
    }
  } else {
    const std::string msg = std::string(name) + ": expected a 1-D integer array or a sequence " +
                            "of ints, got " + nb::type_name(h.type()).c_str();
    throw nb::type_error(msg.c_str());
  }
  return out;
}

/// Sets one field and validates the tree, restoring the old value when validation fails.
template <typename T>
void set_checked(PrefixTree& t, T PrefixTree::*field, const T& value) {
  T old = t.*field;
  t.*field = value;
  try {
    validate(t);
  } catch (...) {
    t.*field = std::move(old);
    throw;
  }
}

nb::dict node_dict(const PrefixTree& t, IntParam index) {
  const int32_t i = int_arg("index", index);
  TA_CHECK_ARG(i >= 0 && i < static_cast<int32_t>(t.nodes.size()), "node", "index ", i,
               " out of range [0, ", t.nodes.size(), ")");
  const TreeNode& n = t.nodes[i];
  nb::dict d;
  d["id"] = n.id;
  d["parent"] = n.parent == kNoParent ? nb::object(nb::none()) : nb::object(nb::int_(n.parent));
  d["tokens"] = n.tokens;
  d["page_offset"] = n.page_offset;
  d["pages"] = n.pages;
  d["alive"] = n.alive;
  return d;
}

nb::dict workload_dict(const Workload& w, size_t index) {
  nb::dict d;
  d["key"] = w.set + ":" + std::to_string(index);
  d["set"] = w.set;
  d["name"] = w.name;
  d["num_qo_heads"] = w.spec.shape.num_qo_heads;
  d["num_kv_heads"] = w.spec.shape.num_kv_heads;
  d["head_dim"] = w.spec.shape.head_dim;
  d["page_size"] = w.spec.page_size;
  d["dtype"] = w.spec.dtype;
  d["generated"] = w.generated;
  return d;
}

/// Field values of DeviceInfo, by the field's type (the ranges are checked where the planners
/// use a DeviceInfo: plan(), Plan.stats(), naming "device.<field>").
std::string field_value(const char* name, nb::handle v, const std::string*) {
  return text_arg(name, v);
}
int32_t field_value(const char* name, nb::handle v, const int32_t*) { return int_arg(name, v); }
double field_value(const char* name, nb::handle v, const double*) { return real_arg(name, v); }
bool field_value(const char* name, nb::handle v, const bool*) { return bool_arg(name, v); }

/// A read-write DeviceInfo property whose setter checks the value's type, naming the field.
template <typename T>
void def_field(nb::class_<DeviceInfo>& c, const char* name, T DeviceInfo::*field) {
  c.def_prop_rw(
      name, [field](const DeviceInfo& d) { return d.*field; },
      [name, field](DeviceInfo& d, nb::typed<nb::handle, T> v) {
        d.*field = field_value(name, v, static_cast<const T*>(nullptr));
      },
      nb::for_setter(nb::arg("value").none()));
}

}  // namespace

void register_tree(nb::module_& m) {
  nb::class_<PrefixTree>(m, "PrefixTree", nb::is_weak_referenceable(),
                         "A forest of nodes over paged KV plus the decode queries attached to "
                         "them. Query q attends every token on the path root -> its node; it is "
                         "row q of decode()'s q tensor. Build it with a from_* method.")
      .def_static("from_block_tables", &from_block_tables_array, nb::arg("block_tables"),
                  nb::arg("seq_lens"), nb::arg("page_size").none() = 16,
                  nb::arg("num_pages").none() = 0,
                  nb::sig("def from_block_tables(block_tables: ndarray[], seq_lens: ndarray[], "
                          "page_size: int = 16, num_pages: int = 0) -> PrefixTree"),
                  "Radix tree on common leading page ids (vLLM layout). block_tables: 2-D int "
                  "array [requests, max_pages] (rows may be padded); seq_lens: [requests]. One "
                  "query per request, in order. num_pages = 0 means max page id + 1.")
      .def_static(
          "from_block_tables",
          [](nb::handle block_tables, nb::handle seq_lens, IntParam page_size, IntParam num_pages) {
            const int32_t ps = int_arg("page_size", page_size);
            const int32_t np = int_arg("num_pages", num_pages);
            return tree_from_block_tables(
                int32_table_arg("block_tables", block_tables),
                int_list_arg("seq_lens", seq_lens, std::numeric_limits<int64_t>::min(),
                             std::numeric_limits<int64_t>::max()),
                ps, np);
          },
          nb::arg("block_tables").none(), nb::arg("seq_lens").none(),
          nb::arg("page_size").none() = 16, nb::arg("num_pages").none() = 0,
          nb::sig("def from_block_tables(block_tables: collections.abc.Sequence[collections.abc."
                  "Sequence[int]], seq_lens: collections.abc.Sequence[int], page_size: int = 16, "
                  "num_pages: int = 0) -> PrefixTree"),
          "Same, from lists: block_tables[r] holds at least ceil(seq_lens[r] / "
          "page_size) page ids.")
      .def_static(
          "from_json", [](nb::handle path) { return tree_from_json_file(path_arg("path", path)); },
          nb::arg("path").none(), nb::sig("def from_json(path: str | os.PathLike) -> PrefixTree"),
          "Reads the stable JSON tree format from a file.")
      .def_static(
          "from_json_str", [](nb::handle text) { return tree_from_json(text_arg("text", text)); },
          nb::arg("text").none(), nb::sig("def from_json_str(text: str | bytes) -> PrefixTree"),
          "Parses the stable JSON tree format from a string (or UTF-8 bytes).")
      .def_static(
          "from_levels",
          [](StrParam text, StrParam layout, IntParam seed) {
            const uint64_t s = int_arg<uint64_t>("seed", seed);
            return tree_from_levels(parse_levels(text_arg("levels", text)),
                                    parse_layout(text_arg("layout", layout)), s);
          },
          nb::arg("levels").none(), nb::arg("layout").none() = "contiguous",
          nb::arg("seed").none() = 0,
          nb::sig("def from_levels(levels: str, layout: str = 'contiguous', seed: int = 0) -> "
                  "PrefixTree"),
          "Level spec such as 'N=1,8 C=2048,128 [heads=32/8] [page=16] [dim=128]'; pages "
          "'contiguous' or 'shuffled' (with seed).")
      .def_static(
          "from_workload",
          [](StrParam key, StrParam layout, IntParam seed) {
            const uint64_t s = int_arg<uint64_t>("seed", seed);
            return build_workload(find_workload(text_arg("key", key)),
                                  parse_layout(text_arg("layout", layout)), s);
          },
          nb::arg("key").none(), nb::arg("layout").none() = "contiguous",
          nb::arg("seed").none() = 0,
          nb::sig("def from_workload(key: str, layout: str = 'contiguous', seed: int = 0) -> "
                  "PrefixTree"),
          "An embedded workload by 'set:index' (e.g. 'fasttree:3') or by its exact name.")
      .def_static(
          "random",
          [](IntParam seed, IntParam max_nodes, IntParam max_queries, IntParam max_tokens_per_node,
             IntParam max_roots, IntParam page_size, BoolParam shuffle_pages) {
            const uint64_t s = int_arg<uint64_t>("seed", seed);
            RandomTreeOptions o;
            o.max_nodes = int_arg("max_nodes", max_nodes);
            o.max_queries = int_arg("max_queries", max_queries);
            o.max_tokens_per_node = int_arg("max_tokens_per_node", max_tokens_per_node);
            o.max_roots = int_arg("max_roots", max_roots);
            o.page_size = int_arg("page_size", page_size);
            o.shuffle_pages = bool_arg("shuffle_pages", shuffle_pages);
            return random_tree(s, o);
          },
          nb::arg("seed").none(), nb::arg("max_nodes").none() = 64,
          nb::arg("max_queries").none() = 64, nb::arg("max_tokens_per_node").none() = 300,
          nb::arg("max_roots").none() = 3, nb::arg("page_size").none() = 16,
          nb::arg("shuffle_pages").none() = true,
          nb::sig("def random(seed: int, max_nodes: int = 64, max_queries: int = 64, "
                  "max_tokens_per_node: int = 300, max_roots: int = 3, page_size: int = 16, "
                  "shuffle_pages: bool = True) -> PrefixTree"),
          "A random tree for tests (deep chains, wide fan-out, one-token nodes, many roots).")
      .def("to_json", &tree_to_json, "The stable JSON format (round-trips through from_json_str).")
      .def(
          "to_block_tables",
          [](const PrefixTree& t) {
            std::vector<std::vector<int32_t>> bt;
            std::vector<int64_t> lens;
            to_block_tables(t, &bt, &lens);
            return nb::make_tuple(bt, lens);
          },
          "(block_tables, seq_lens): per query, the page ids of its path and its length.")
      .def("validate", &validate, "Raises ValueError naming the offender if the tree is invalid.")
      .def("copy", [](const PrefixTree& t) { return PrefixTree(t); })
      .def("__copy__", [](const PrefixTree& t) { return PrefixTree(t); })
      .def(
          "__deepcopy__", [](const PrefixTree& t, nb::handle) { return PrefixTree(t); },
          nb::arg("memo"))
      .def_prop_ro("num_queries", &PrefixTree::num_queries)
      .def_prop_ro(
          "version", [](const PrefixTree& t) { return t.version; },
          "Incremented by every update (append_tokens, add_query, remove_query, fork_query); "
          "a plan records it (Plan.tree_version) and decode() refuses a plan of an older one.")
      .def_prop_ro(
          "num_nodes", [](const PrefixTree& t) { return t.nodes.size(); },
          "Node slots, dead ones included (see node()['alive']).")
      .def_prop_ro("num_live_nodes",
                   [](const PrefixTree& t) {
                     return std::count_if(t.nodes.begin(), t.nodes.end(),
                                          [](const TreeNode& n) { return n.alive; });
                   })
      .def_prop_ro("page_size", [](const PrefixTree& t) { return t.page_size; })
      .def_prop_rw(
          "num_pages", [](const PrefixTree& t) { return t.num_pages; },
          [](PrefixTree& t, IntParam n) { t.set_num_pages(int_arg("num_pages", n)); },
          "Page ids must lie in [0, num_pages) (set it before free_pages). Setting it is an update "
          "(version + 1); it must stay above every page id in use or in free_pages.")
      .def_prop_rw(
          "free_pages", [](const PrefixTree& t) { return t.free_pages; },
          [](PrefixTree& t, nb::handle v) {
            set_checked(t, &PrefixTree::free_pages, int32_list_arg("free_pages", v));
          },
          nb::for_setter(nb::sig("def free_pages(self, arg: collections.abc.Sequence[int], /) "
                                 "-> None")),
          "Pool the updates take new pages from when none are passed; setting it validates the "
          "tree (each page in range, listed once, not in use).")
      .def_prop_ro(
          "query_node", [](const PrefixTree& t) { return t.query_node; },
          "Node index of every query.")
      .def_prop_ro(
          "shape",
          [](const PrefixTree& t) {
            return nb::make_tuple(t.shape.num_qo_heads, t.shape.num_kv_heads, t.shape.head_dim);
          },
          "(num_qo_heads, num_kv_heads, head_dim) from JSON or a workload line; 0 = not given.")
      .def("node", &node_dict, nb::arg("index").none(),
           nb::sig("def node(self, index: int) -> dict"),
           "Node `index` as a dict: id, parent (index or None), tokens, page_offset, pages, "
           "alive.")
      .def(
          "query_path",
          [](const PrefixTree& t, IntParam q) { return query_path(t, int_arg("query", q)); },
          nb::arg("query").none(), nb::sig("def query_path(self, query: int) -> list[int]"),
          "Node indices of a query's path, root first.")
      .def(
          "query_context",
          [](const PrefixTree& t, IntParam q) { return query_context(t, int_arg("query", q)); },
          nb::arg("query").none(), nb::sig("def query_context(self, query: int) -> int"),
          "KV tokens a query attends.")
      .def("unique_tokens", &unique_tokens, "Tokens over live nodes some query uses.")
      .def(
          "append_tokens",
          [](PrefixTree& t, IntParam q, IntParam k, nb::handle new_pages) {
            const int32_t query = int_arg("query", q);
            const int32_t count = int_arg("k", k);
            t.append_tokens(query, count, int32_list_arg("new_pages", new_pages));
          },
          nb::arg("query").none(), nb::arg("k").none() = 1,
          nb::arg("new_pages").none() = nb::tuple(),
          nb::sig("def append_tokens(self, query: int, k: int = 1, new_pages: "
                  "collections.abc.Sequence[int] = []) -> None"),
          "Appends k tokens to a query (its leaf grows, or it forks into a new child). New "
          "pages come from new_pages, else from free_pages.")
      .def(
          "append_tokens_bulk",
          [](PrefixTree& t, nb::handle queries, nb::handle counts, nb::handle page_ptr,
             nb::handle new_pages) {
            t.append_tokens_bulk(int_list<int32_t>(queries, "queries"),
                                 int_list<int32_t>(counts, "counts"),
                                 page_ptr.is_none() ? std::vector<int64_t>{}
                                                    : int_list<int64_t>(page_ptr, "page_ptr", 0),
                                 new_pages.is_none() ? std::vector<int32_t>{}
                                                     : int_list<int32_t>(new_pages, "new_pages"));
          },
          nb::arg("queries").none(), nb::arg("counts").none(),
          nb::arg("page_ptr").none() = nb::none(), nb::arg("new_pages").none() = nb::none(),
          nb::sig("def append_tokens_bulk(self, queries: collections.abc.Sequence[int], counts: "
                  "collections.abc.Sequence[int], page_ptr: collections.abc.Sequence[int] | None "
                  "= None, new_pages: collections.abc.Sequence[int] | None = None) -> None"),
          "Appends counts[i] tokens to query queries[i] for every i in one call (the same tree "
          "as append_tokens per query, each query listed once). Pages from the pool, or query i "
          "takes new_pages[page_ptr[i]:page_ptr[i + 1]], exactly the fresh pages it needs. "
          "1-D integer arrays or sequences of ints; one pass over the tree for the whole step.")
      .def(
          "set_query_nodes",
          [](PrefixTree& t, nb::handle nodes) {
            t.set_query_nodes(int_list<int32_t>(nodes, "nodes"));
          },
          nb::arg("nodes").none(),
          nb::sig("def set_query_nodes(self, nodes: collections.abc.Sequence[int]) -> None"),
          "Replaces every query at once: query r sits on node index nodes[r]; nodes no query "
          "uses any more are pruned (their pages go to free_pages). One pass over the tree.")
      .def(
          "add_query",
          [](PrefixTree& t, IntParam node) { return t.add_query(int_arg("node", node)); },
          nb::arg("node").none(), nb::sig("def add_query(self, node: int) -> int"),
          "Adds a query on node index `node`; returns its query index.")
      .def(
          "remove_query", [](PrefixTree& t, IntParam q) { t.remove_query(int_arg("query", q)); },
          nb::arg("query").none(), nb::sig("def remove_query(self, query: int) -> None"),
          "Removes a query (later ones shift down) and prunes unused nodes.")
      .def(
          "fork_query",
          [](PrefixTree& t, IntParam q, IntParam n) {
            const int32_t query = int_arg("query", q);
            return t.fork_query(query, int_arg("n", n));
          },
          nb::arg("query").none(), nb::arg("n").none(),
          nb::sig("def fork_query(self, query: int, n: int) -> int"),
          "Forks a query into n on the same node; returns the first new query index.")
      .def("__repr__", [](const PrefixTree& t) {
        return "PrefixTree(queries=" + std::to_string(t.num_queries()) +
               ", nodes=" + std::to_string(t.nodes.size()) +
               ", page_size=" + std::to_string(t.page_size) +
               ", num_pages=" + std::to_string(t.num_pages) + ")";
      });

  nb::class_<DeviceInfo> device_info(
      m, "DeviceInfo",
      "What the planners' cost model knows about a GPU (plain values; every field of the C++ "
      "DeviceInfo, include/treeattn/plan/cost/device_info.h).");
  device_info.def(nb::init<>())
      .def_static(
          "preset", [](StrParam name) { return device_preset(text_arg("name", name)); },
          nb::arg("name").none(), "'a100', 'h100' or 'h200'.")
      .def("__repr__", [](const DeviceInfo& d) {
        return "DeviceInfo(name='" + d.name + "', num_sms=" + std::to_string(d.num_sms) +
               ", hbm_read_GBps=" + std::to_string(d.hbm_read_GBps) +
               ", tc_TFLOPs=" + std::to_string(d.tc_TFLOPs) + ")";
      });
  def_field(device_info, "name", &DeviceInfo::name);
  def_field(device_info, "num_sms", &DeviceInfo::num_sms);
  def_field(device_info, "smem_per_sm_bytes", &DeviceInfo::smem_per_sm_bytes);
  def_field(device_info, "hbm_read_GBps", &DeviceInfo::hbm_read_GBps);
  def_field(device_info, "tc_TFLOPs", &DeviceInfo::tc_TFLOPs);
  def_field(device_info, "mma_efficiency", &DeviceInfo::mma_efficiency);
  def_field(device_info, "launch_overhead_us", &DeviceInfo::launch_overhead_us);
  def_field(device_info, "item_overhead_us", &DeviceInfo::item_overhead_us);
  def_field(device_info, "ctas_per_sm", &DeviceInfo::ctas_per_sm);
  def_field(device_info, "merge_launch_us", &DeviceInfo::merge_launch_us);
  def_field(device_info, "tile_latency_us", &DeviceInfo::tile_latency_us);
  def_field(device_info, "tile_latency_m128_us", &DeviceInfo::tile_latency_m128_us);
  def_field(device_info, "tile_latency_ws_m128_us", &DeviceInfo::tile_latency_ws_m128_us);
  def_field(device_info, "tile_latency_ws_m64_us", &DeviceInfo::tile_latency_ws_m64_us);
  def_field(device_info, "mma_efficiency_ws_m128", &DeviceInfo::mma_efficiency_ws_m128);
  def_field(device_info, "l2_read_GBps", &DeviceInfo::l2_read_GBps);
  def_field(device_info, "tile_latency_wide_us", &DeviceInfo::tile_latency_wide_us);
  def_field(device_info, "merge_slot_us", &DeviceInfo::merge_slot_us);
  def_field(device_info, "wide_ctas_per_sm", &DeviceInfo::wide_ctas_per_sm);
  def_field(device_info, "wide_m16_ctas_per_sm", &DeviceInfo::wide_m16_ctas_per_sm);
  def_field(device_info, "m128_ctas_per_sm", &DeviceInfo::m128_ctas_per_sm);
  def_field(device_info, "mask_penalty", &DeviceInfo::mask_penalty);
  def_field(device_info, "mask_penalty_m16", &DeviceInfo::mask_penalty_m16);
  def_field(device_info, "path_mask_penalty", &DeviceInfo::path_mask_penalty);
  def_field(device_info, "path_mask_penalty_m16", &DeviceInfo::path_mask_penalty_m16);
  def_field(device_info, "cta_bw_factor", &DeviceInfo::cta_bw_factor);
  def_field(device_info, "warpgroup_mma", &DeviceInfo::warpgroup_mma);
  def_field(device_info, "latency_terms", &DeviceInfo::latency_terms);
  def_field(device_info, "first_launch_us", &DeviceInfo::first_launch_us);
  def_field(device_info, "pdl_launch_us", &DeviceInfo::pdl_launch_us);
  def_field(device_info, "round_trip_us", &DeviceInfo::round_trip_us);
  def_field(device_info, "cta_fixed_us", &DeviceInfo::cta_fixed_us);
  def_field(device_info, "prologue_round_trips", &DeviceInfo::prologue_round_trips);
  def_field(device_info, "merge_release_us", &DeviceInfo::merge_release_us);
  def_field(device_info, "merge_round_trips", &DeviceInfo::merge_round_trips);
  def_field(device_info, "kv_pairs", &DeviceInfo::kv_pairs);
  def_field(device_info, "pair_exchange_us", &DeviceInfo::pair_exchange_us);

  m.def("planners", &planner_names, "Planner names accepted by plan(), in display order.");
  m.def("workload_sets", &workload_set_names, "'fasttree', 'pat', 'deft', 'forge', 'irregular'.");
  m.def(
      "workloads",
      [](StrParam set_arg, BoolParam details_arg) -> nb::list {
        const std::string set = text_arg("set", set_arg);
        const bool details = bool_arg("details", details_arg);
        nb::list out;
        std::vector<std::string> sets =
            set == "all" ? workload_set_names() : std::vector<std::string>{set};
        for (const std::string& s : sets) {
          const std::vector<Workload> ws = workload_set(s);
          for (size_t i = 0; i < ws.size(); ++i) {
            if (details)
              out.append(workload_dict(ws[i], i));
            else
              out.append(ws[i].name);
          }
        }
        return out;
      },
      nb::arg("set").none() = "all", nb::arg("details").none() = false,
      "Workload names of a set ('fasttree', 'pat', 'deft', 'forge', 'irregular' or 'all'); with "
      "details=True, dicts with key ('set:index' for PrefixTree.from_workload), set, name, "
      "heads, head_dim, page_size, dtype, generated.");
}

}  // namespace treeattn::py
