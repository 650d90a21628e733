// The nanobind extension module treeattn._treeattn: tree builders and updates, planners and plans,
// decode (CUDA or CPU) and the float64 reference. std::invalid_argument maps to ValueError
// (nanobind's default); every other C++ exception to RuntimeError.
#include "common.h"

NB_MODULE(_treeattn, m) {
  m.doc() = "treeattn native extension (use the treeattn package, not this module directly)";
  // torch.compile caches and other frameworks may hold plans until after module teardown.
  nanobind::set_leak_warnings(false);
  treeattn::py::register_args(m);
  treeattn::py::register_tree(m);
  treeattn::py::register_plan(m);
  treeattn::py::register_decode(m);
}
