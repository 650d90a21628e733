// Argument converters of the bindings: check_int (a Python int or numpy integer in a range) and
// text_arg (str or UTF-8 bytes), raising TypeError / ValueError whose message starts with the
// parameter's name; and treeattn.check_int, the same int check for Python code built on treeattn.
#include <nanobind/stl/string.h>

#include <stdexcept>
#include <string>

#include "common.h"

namespace treeattn::py {
namespace {

std::string type_name_of(nb::handle value) {
  return nb::cast<std::string>(value.type().attr("__name__"));
}

/// Whether `value` is a numpy integer scalar (numpy.integer; numpy.bool_ is not one). A process
/// that never imported numpy has none.
bool is_numpy_integer(nb::handle value) {
  PyObject* modules = PySys_GetObject("modules");  // borrowed
  if (modules == nullptr) return false;
  nb::dict mods = nb::borrow<nb::dict>(modules);
  if (!mods.contains("numpy")) return false;
  nb::object integer = mods["numpy"].attr("integer");
  const int r = PyObject_IsInstance(value.ptr(), integer.ptr());
  if (r < 0) nb::raise_python_error();
  return r == 1;
}

/// `value` as a Python int: a Python int or numpy integer, not a bool.
nb::int_ as_int(const std::string& name, nb::handle value) {
  if (PyBool_Check(value.ptr()) || !(PyLong_Check(value.ptr()) || is_numpy_integer(value)))
    throw nb::type_error((name + ": expected an int, got " + type_name_of(value)).c_str());
  nb::int_ v = nb::steal<nb::int_>(PyNumber_Index(value.ptr()));
  if (!v.is_valid()) nb::raise_python_error();
  return v;
}

bool less(nb::handle a, nb::handle b) {
  const int r = PyObject_RichCompareBool(a.ptr(), b.ptr(), Py_LT);
  if (r < 0) nb::raise_python_error();
  return r == 1;
}

}  // namespace

nb::int_ check_int(const std::string& name, nb::handle value, nb::handle lo, nb::handle hi) {
  nb::int_ v = as_int(name, value);
  if (less(v, lo) || less(hi, v))
    throw std::invalid_argument(name + ": " + nb::str(v).c_str() + " is out of range [" +
                                nb::str(lo).c_str() + ", " + nb::str(hi).c_str() + "]");
  return v;
}

std::string text_arg(const char* name, nb::handle value) {
  const char* data = nullptr;
  Py_ssize_t size = 0;
  if (PyUnicode_Check(value.ptr())) {
    data = PyUnicode_AsUTF8AndSize(value.ptr(), &size);
  } else if (PyBytes_Check(value.ptr()) || PyByteArray_Check(value.ptr())) {
    nb::bytes b = nb::steal<nb::bytes>(PyBytes_FromObject(value.ptr()));
    if (!b.is_valid()) nb::raise_python_error();
    // Decoding only validates; the parser takes the UTF-8 bytes as they are.
    nb::object decoded = nb::steal(PyUnicode_DecodeUTF8(b.c_str(), b.size(), "strict"));
    if (decoded.is_valid()) return std::string(b.c_str(), b.size());
  } else {
    throw nb::type_error(
        (std::string(name) + ": expected str or bytes, got " + type_name_of(value)).c_str());
  }
  if (data != nullptr) return std::string(data, size);
  nb::python_error e;  // the UnicodeDecodeError / UnicodeEncodeError just raised
  throw std::invalid_argument(std::string(name) + ": not UTF-8 (" + nb::str(e.value()).c_str() +
                              ")");
}

void register_args(nb::module_& m) {
  m.def(
      "check_int",
      [](const std::string& name, nb::handle value, IntParam lo, IntParam hi) {
        return check_int(name, value, as_int("lo", lo), as_int("hi", hi));
      },
      nb::arg("name"), nb::arg("value").none(),
      nb::arg("lo").none() = std::numeric_limits<int32_t>::min(),
      nb::arg("hi").none() = std::numeric_limits<int32_t>::max(),
      nb::sig("def check_int(name: str, value: object, lo: int = -2147483648, hi: int = "
              "2147483647) -> int"),
      "`value` as an int, checked the way every int argument of treeattn is: a Python int or "
      "numpy integer (not a bool) within [lo, hi]. Raises TypeError \"name: expected an int, "
      "got float\" or ValueError \"name: 5 is out of range [0, 3]\".");
}

}  // namespace treeattn::py
