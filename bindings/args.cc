// Argument converters of the bindings: check_int (a Python int or numpy integer in a range),
// text_arg (str or UTF-8 bytes), bool_arg, real_arg, path_arg, int_list_arg and int32_table_arg
// (sequences of checked ints), raising TypeError / ValueError whose message starts with the
// parameter's name; and treeattn.check_int, the same int check for Python code built on treeattn.
#include <nanobind/stl/string.h>

#include <stdexcept>
#include <string>
#include <vector>

#include "common.h"

namespace treeattn::py {
namespace {

std::string type_name_of(nb::handle value) {
  return nb::cast<std::string>(value.type().attr("__name__"));
}

/// Whether `value` is an instance of numpy.<type_name> (e.g. "integer", "floating", "bool_").
/// A process that never imported numpy has none.
bool is_numpy(nb::handle value, const char* type_name) {
  PyObject* modules = PySys_GetObject("modules");  // borrowed
  if (modules == nullptr) return false;
  nb::dict mods = nb::borrow<nb::dict>(modules);
  if (!mods.contains("numpy")) return false;
  nb::object type = mods["numpy"].attr(type_name);
  const int r = PyObject_IsInstance(value.ptr(), type.ptr());
  if (r < 0) nb::raise_python_error();
  return r == 1;
}

/// Whether `value` is a numpy integer scalar (numpy.integer; numpy.bool_ is not one).
bool is_numpy_integer(nb::handle value) { return is_numpy(value, "integer"); }

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

bool bool_arg(const char* name, nb::handle value) {
  if (PyBool_Check(value.ptr())) return value.ptr() == Py_True;
  if (is_numpy(value, "bool_")) return PyObject_IsTrue(value.ptr()) == 1;
  throw nb::type_error(
      (std::string(name) + ": expected a bool, got " + type_name_of(value)).c_str());
}

double real_arg(const char* name, nb::handle value) {
  PyObject* v = value.ptr();
  if (!PyBool_Check(v) && (PyLong_Check(v) || PyFloat_Check(v) || is_numpy_integer(value) ||
                           is_numpy(value, "floating"))) {
    const double d = PyFloat_AsDouble(v);  // an int too large for a double raises OverflowError
    if (d == -1.0 && PyErr_Occurred()) {
      PyErr_Clear();
      throw std::invalid_argument(std::string(name) + ": " + nb::str(value).c_str() +
                                  " is out of the range of a double");
    }
    return d;
  }
  throw nb::type_error(
      (std::string(name) + ": expected a number, got " + type_name_of(value)).c_str());
}

std::string path_arg(const char* name, nb::handle value) {
  if (!PyUnicode_Check(value.ptr()) && !PyBytes_Check(value.ptr()) &&
      !PyObject_HasAttrString(value.ptr(), "__fspath__"))
    throw nb::type_error((std::string(name) +
                          ": expected a path (str, bytes or os.PathLike), got " +
                          type_name_of(value))
                             .c_str());
  nb::object p = nb::steal(PyOS_FSPath(value.ptr()));
  if (!p.is_valid()) nb::raise_python_error();
  if (PyBytes_Check(p.ptr())) {
    char* buf = nullptr;
    Py_ssize_t len = 0;
    if (PyBytes_AsStringAndSize(p.ptr(), &buf, &len) != 0) nb::raise_python_error();
    return std::string(buf, static_cast<size_t>(len));
  }
  return text_arg(name, p);
}

namespace {

/// The items of a sequence argument as a new list (only the limited C API: the extension is built
/// for the stable ABI); str and bytes, though sequences, are refused. Throws TypeError
/// "name: expected <what>, got <type>".
nb::object sequence_arg(const std::string& name, nb::handle value, const char* what) {
  PyObject* v = value.ptr();
  if (PyUnicode_Check(v) || PyBytes_Check(v) || PyByteArray_Check(v) || !PySequence_Check(v))
    throw nb::type_error((name + ": expected " + what + ", got " + type_name_of(value)).c_str());
  nb::object seq = nb::steal(PySequence_List(v));
  if (!seq.is_valid()) nb::raise_python_error();
  return seq;
}

}  // namespace

std::vector<int64_t> int_list_arg(const std::string& name, nb::handle value, int64_t lo,
                                  int64_t hi) {
  const nb::object seq = sequence_arg(name, value, "a sequence of ints");
  const Py_ssize_t n = PyList_Size(seq.ptr());
  std::vector<int64_t> out(static_cast<size_t>(n));
  for (Py_ssize_t i = 0; i < n; ++i) {
    PyObject* e = PyList_GetItem(seq.ptr(), i);  // borrowed from seq
    if (PyLong_CheckExact(e)) {  // the common case, without building the element's name
      int overflow = 0;
      const long long x = PyLong_AsLongLongAndOverflow(e, &overflow);
      if (overflow == 0 && !(x == -1 && PyErr_Occurred()) && x >= lo && x <= hi) {
        out[i] = x;
        continue;
      }
      PyErr_Clear();
    }
    out[i] = nb::cast<int64_t>(
        check_int(name + "[" + std::to_string(i) + "]", e, nb::int_(lo), nb::int_(hi)));
  }
  return out;
}

std::vector<int32_t> int32_list_arg(const std::string& name, nb::handle value) {
  const std::vector<int64_t> v = int_list_arg(name, value);
  return std::vector<int32_t>(v.begin(), v.end());
}

std::vector<std::vector<int32_t>> int32_table_arg(const std::string& name, nb::handle value) {
  const nb::object seq = sequence_arg(name, value, "a sequence of sequences of ints");
  const Py_ssize_t n = PyList_Size(seq.ptr());
  std::vector<std::vector<int32_t>> out(static_cast<size_t>(n));
  for (Py_ssize_t r = 0; r < n; ++r)
    out[r] = int32_list_arg(name + "[" + std::to_string(r) + "]", PyList_GetItem(seq.ptr(), r));
  return out;
}

void register_args(nb::module_& m) {
  m.def(
      "check_int",
      [](StrParam name, nb::handle value, IntParam lo, IntParam hi) {
        return check_int(text_arg("name", name), value, as_int("lo", lo), as_int("hi", hi));
      },
      nb::arg("name").none(), nb::arg("value").none(),
      nb::arg("lo").none() = std::numeric_limits<int32_t>::min(),
      nb::arg("hi").none() = std::numeric_limits<int32_t>::max(),
      nb::sig("def check_int(name: str, value: object, lo: int = -2147483648, hi: int = "
              "2147483647) -> int"),
      "`value` as an int, checked the way every int argument of treeattn is: a Python int or "
      "numpy integer (not a bool) within [lo, hi]. Raises TypeError \"name: expected an int, "
      "got float\" or ValueError \"name: 5 is out of range [0, 3]\".");
}

}  // namespace treeattn::py
