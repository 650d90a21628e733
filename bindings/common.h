// Shared pieces of the nanobind extension _treeattn: the Python-visible plan object (host plan,
// its tree, and the lazily made DevicePlan), the argument converters every binding takes its int
// and text arguments through, and the tensor validation helpers used by decode() and
// reference(). Bindings only validate and convert; the logic lives in the library.
#pragma once

#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>

#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "treeattn/common/fp8.h"
#include "treeattn/plan/cost/device_info.h"
#include "treeattn/plan/layout.h"
#include "treeattn/plan/plan.h"
#include "treeattn/plan/shared_plan.h"
#include "treeattn/tree/prefix_tree.h"

namespace treeattn {
class DevicePlan;
}  // namespace treeattn

namespace treeattn::py {

namespace nb = nanobind;
using AnyArray = nb::ndarray<>;

/// A parameter that takes any Python object and shows as `int` in signatures and stubs: the
/// binding converts it with int_arg, so a bad value gets an error naming the parameter instead
/// of nanobind's "incompatible function arguments". Declare it with nb::arg(...).none() (None
/// too gets the named error) and give the function an nb::sig, since nanobind would show such a
/// parameter as `int | None`.
using IntParam = nb::typed<nb::handle, int>;

/// `value` as a Python int, checked: a Python int or numpy integer (a bool is refused), within
/// [lo, hi] (Python ints of any size). Throws TypeError "name: expected an int, got float" or
/// ValueError "name: 5 is out of range [0, 3]". Bound as treeattn.check_int.
nb::int_ check_int(const std::string& name, nb::handle value, nb::handle lo, nb::handle hi);

/// check_int into a C integer: the range defaults to T's (int32 unless said otherwise).
template <typename T = int32_t>
T int_arg(const char* name, nb::handle value, T lo = std::numeric_limits<T>::min(),
          T hi = std::numeric_limits<T>::max()) {
  return nb::cast<T>(check_int(name, value, nb::int_(lo), nb::int_(hi)));
}

/// The UTF-8 text of a str, bytes or bytearray argument. Throws TypeError "name: expected str or
/// bytes, got int" or ValueError "name: not UTF-8 (...)".
std::string text_arg(const char* name, nb::handle value);

/// Parameters shown as `str` / `bool` in signatures that take any object, converted with
/// text_arg / bool_arg (so a wrong type gets an error naming the parameter; see IntParam).
using StrParam = nb::typed<nb::handle, nb::str>;
using BoolParam = nb::typed<nb::handle, bool>;

/// A Python bool or numpy.bool_. Throws TypeError "name: expected a bool, got str".
bool bool_arg(const char* name, nb::handle value);

/// A real number: a Python int or float or a numpy integer or floating scalar (not a bool).
/// Throws TypeError "name: expected a number, got str".
double real_arg(const char* name, nb::handle value);

/// A file path: str, bytes or os.PathLike. Throws TypeError "name: expected a path (str, bytes
/// or os.PathLike), got int".
std::string path_arg(const char* name, nb::handle value);

/// A sequence of ints (a list, tuple, range or 1-D array; not str or bytes), each checked like
/// check_int within [lo, hi]: TypeError "name: expected a sequence of ints, got str", or the
/// element's error naming "name[i]".
std::vector<int64_t> int_list_arg(const std::string& name, nb::handle value,
                                  int64_t lo = std::numeric_limits<int32_t>::min(),
                                  int64_t hi = std::numeric_limits<int32_t>::max());
/// int_list_arg as int32 (the default range).
std::vector<int32_t> int32_list_arg(const std::string& name, nb::handle value);
/// A sequence of rows, each an int32_list_arg named "name[r]" (block tables as lists).
std::vector<std::vector<int32_t>> int32_table_arg(const std::string& name, nb::handle value);

/// DLPack device types we accept.
inline constexpr int kDlCpu = 1;
inline constexpr int kDlCuda = 2;

/// The Python `Plan`: the plan and its tree as a SharedPlan (treeattn/plan/shared_plan.h: every
/// decode takes one immutable snapshot, so update() on another thread never changes a plan under
/// a running decode), the device layout (sized with `headroom`), and once used on a GPU its
/// DevicePlan (workspace and upload, treeattn/kernels/device_plan.h). The DevicePlan is made by
/// to_device() or the first GPU decode and freed by release_device() or the destructor. The
/// device side (layout, device, device_id) is read and written only with the GIL held.
struct PyPlan {
  SharedPlan state;
  PlanLayout layout;  ///< the DevicePlan's layout once on a device
  double headroom = 1.0;
  /// Capacities the layout keeps (Plan.reserve(): a CUDA-graph step's bound); none by default.
  LayoutReserve reserve;
  /// Launch grids of the next decodes (Plan._set_launch_caps; -1 = the layout's capacity).
  int64_t launch_class_items[kNumTileClasses] = {-1, -1, -1};
  int64_t launch_queries = -1;
  int32_t device_id = -1;  ///< CUDA device of the workspace, -1 = none
  DevicePlan* device = nullptr;
  /// Device-page labels (resolve_pages): page ids >= label_base are placeholders that only the
  /// device run can read, after resolve_pages() filled them in the workspace for the state
  /// `resolved` (any other state with labels is refused by decode); -1 = no labels seen.
  int64_t label_base = -1;
  std::shared_ptr<const PlanState> resolved;
  int64_t resolved_max_page_id = -1;  ///< largest page id the resolved state can read
  /// A host resolve (CPU): the state it made and the labelled state it came from (check()).
  std::shared_ptr<const PlanState> host_resolved, host_labelled;

  /// Plans a copy of `t`, without the GIL.
  PyPlan(const PrefixTree& t, const std::string& planner, int32_t num_qo_heads,
         int32_t num_kv_heads, int32_t head_dim, int32_t dtype_bytes, int32_t kv_dtype_bytes,
         const DeviceInfo& device, double headroom, int32_t paths_group = 0);
  ~PyPlan();
  PyPlan(const PyPlan&) = delete;
  PyPlan& operator=(const PyPlan&) = delete;

  /// Makes the DevicePlan on `device` (once) and uploads the current plan on `stream`.
  void to_device(int32_t device, uintptr_t stream);
  /// Adopts `other`'s current state (shared, not copied); when on a device, re-uploads into the
  /// existing workspace first (throws ValueError naming "plan" when the shapes differ or it does
  /// not fit the layout).
  void update(const PyPlan& other, uintptr_t stream);
  /// Replaces the page ids >= label_base of the current state, labels label_base + key *
  /// key_stride + col, with table[row_of_key[key], col] (an int32 [rows, cols] array):
  /// on the device (workspace entries, DevicePlan::resolve_pages) when the plan has a workspace,
  /// else in a new host state. Ids outside [0, num_pages) become 0. Errors name "label_base" /
  /// "key_stride" / "row_of_key" / "table" / "num_pages".
  void resolve_pages(int64_t label_base, int64_t key_stride, const int32_t* row_of_key,
                     int64_t num_keys, const AnyArray& table, int32_t num_pages, uintptr_t stream);
  /// Whether `other` fits this plan's layout (same shape, every capacity large enough).
  bool fits(const PyPlan& other) const;
  /// Sets `reserve` to graph_reserve(rows, pages_per_row) for this plan's heads and `device`,
  /// and lays the layout out again (before the first device upload only: ValueError naming
  /// "plan" after it).
  void set_reserve(int64_t rows, int64_t pages_per_row, const DeviceInfo& device);
  /// Frees the device workspace (no-op when none).
  void release_device();
};

/// "(3, 16, 8)".
std::string shape_str(const AnyArray& a);
/// "float16", "bfloat16", "float32", "int32", ...
std::string dtype_str(const nb::dlpack::dtype& dt);
/// True for float16 / bfloat16 / float32 / float64.
bool is_float_dtype(const nb::dlpack::dtype& dt);
bool is_half_dtype(const nb::dlpack::dtype& dt);  ///< float16 or bfloat16

/// Expected shape of a decode / reference call, taken from a plan or from q.
struct ExpectedShape {
  int64_t num_queries = 0, num_qo_heads = 0, num_kv_heads = 0, head_dim = 0, page_size = 0;
  int64_t max_page_id = -1;
};

/// Validates q/k/v (separate layout when v is given, else the combined 5-dim layout in k):
/// dims, shape, floating dtype, one device. With an fp8 `kv`, k and v are the caches' uint8 views
/// and q must be float16 / bfloat16. Throws ValueError / TypeError naming the argument.
void check_qkv(const ExpectedShape& e, const AnyArray& q, const AnyArray& k, const AnyArray* v,
               KvDType kv = KvDType::kSame);

void register_args(nb::module_& m);
void register_tree(nb::module_& m);
void register_plan(nb::module_& m);
void register_decode(nb::module_& m);

}  // namespace treeattn::py
