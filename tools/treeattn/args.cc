// Implementation of the shared CLI argument parser (args.h).
#include "args.h"

#include <sys/stat.h>

#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <sstream>
#include <stdexcept>

namespace treeattn::cli {
namespace {

[[noreturn]] void fail(const std::string& flag, const std::string& msg) {
  throw std::invalid_argument("--" + flag + ": " + msg);
}

/// Digits only, at least one, accumulated without overflow of uint64.
bool parse_digits(const std::string& s, size_t begin, uint64_t* out) {
  if (begin >= s.size()) return false;
  uint64_t v = 0;
  for (size_t i = begin; i < s.size(); ++i) {
    const char c = s[i];
    if (c < '0' || c > '9') return false;
    const uint64_t d = static_cast<uint64_t>(c - '0');
    if (v > (std::numeric_limits<uint64_t>::max() - d) / 10) return false;
    v = v * 10 + d;
  }
  *out = v;
  return true;
}

/// A decimal real: an optional '-', digits with an optional fraction (at least one digit), an
/// optional exponent ('e' or 'E', an optional sign, digits). No whitespace, '+', hex or names.
bool is_decimal_real(const std::string& s) {
  size_t i = s.size() > 0 && s[0] == '-' ? 1 : 0;
  const auto digits = [&] {
    const size_t start = i;
    while (i < s.size() && s[i] >= '0' && s[i] <= '9') ++i;
    return i - start;
  };
  size_t n = digits();
  if (i < s.size() && s[i] == '.') {
    ++i;
    n += digits();
  }
  if (n == 0) return false;
  if (i < s.size() && (s[i] == 'e' || s[i] == 'E')) {
    ++i;
    if (i < s.size() && (s[i] == '+' || s[i] == '-')) ++i;
    if (digits() == 0) return false;
  }
  return i == s.size();
}

}  // namespace

bool parse_uint64(const std::string& s, uint64_t* out) { return parse_digits(s, 0, out); }

bool parse_int64(const std::string& s, int64_t* out) {
  const bool negative = !s.empty() && s[0] == '-';
  uint64_t mag = 0;
  if (!parse_digits(s, negative ? 1 : 0, &mag)) return false;
  const uint64_t max = static_cast<uint64_t>(std::numeric_limits<int64_t>::max());
  if (mag > max + (negative ? 1 : 0)) return false;
  *out = negative
             ? (mag == max + 1 ? std::numeric_limits<int64_t>::min() : -static_cast<int64_t>(mag))
             : static_cast<int64_t>(mag);
  return true;
}

Args::Args(int argc, char** argv, int first, std::vector<FlagSpec> flags)
    : flags_(std::move(flags)) {
  for (int i = first; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--help" || a == "-h") {
      help_ = true;
      continue;
    }
    if (a.size() < 3 || a.compare(0, 2, "--") != 0)
      throw std::invalid_argument("unexpected argument '" + a + "' (flags start with --)");
    std::string name = a.substr(2), value;
    bool inline_value = false;
    if (const size_t eq = name.find('='); eq != std::string::npos) {
      value = name.substr(eq + 1);
      name = name.substr(0, eq);
      inline_value = true;
    }
    const FlagSpec* spec = nullptr;
    for (const FlagSpec& f : flags_)
      if (f.name == name) spec = &f;
    if (spec == nullptr) fail(name, "unknown flag (see --help)");
    if (values_.count(name)) fail(name, "given twice");
    if (spec->takes_value) {
      if (!inline_value) {
        const bool next_is_flag = i + 1 < argc && std::string(argv[i + 1]).compare(0, 2, "--") == 0;
        if (spec->optional_value && (i + 1 >= argc || next_is_flag)) {
          value = "-";
        } else {
          if (i + 1 >= argc) fail(name, "missing value");
          value = argv[++i];
        }
      }
      if (value.empty()) fail(name, "empty value");
    } else if (inline_value) {
      fail(name, "takes no value");
    }
    values_[name] = value;
  }
  refuse_overwriting_inputs();
}

void Args::refuse_overwriting_inputs() const {
  struct File {
    const FlagSpec* flag;
    struct stat st;
  };
  std::vector<File> inputs, outputs;
  for (const FlagSpec& f : flags_) {
    const auto it = values_.find(f.name);
    if (f.file == FileRole::kNone || it == values_.end() || it->second == "-") continue;
    File file{&f, {}};
    if (::stat(it->second.c_str(), &file.st) != 0) continue;  // not there (yet): no clash
    (f.file == FileRole::kInput ? inputs : outputs).push_back(file);
  }
  for (size_t i = 0; i < outputs.size(); ++i) {
    const File& out = outputs[i];
    auto clash = [&](const File& other, const char* what) {
      if (other.st.st_dev != out.st.st_dev || other.st.st_ino != out.st.st_ino) return;
      fail(out.flag->name, "'" + str(out.flag->name) + "' is the same file as the " + what + " --" +
                               other.flag->name + " '" + str(other.flag->name) +
                               "'; refusing to overwrite it (give another path)");
    };
    for (const File& in : inputs) clash(in, "input");
    for (size_t j = 0; j < i; ++j) clash(outputs[j], "output");
  }
}

std::string Args::str(const std::string& name, const std::string& def) const {
  const auto it = values_.find(name);
  return it == values_.end() ? def : it->second;
}

int64_t Args::integer(const std::string& name, int64_t def, int64_t lo, int64_t hi) const {
  const auto it = values_.find(name);
  if (it == values_.end()) return def;
  int64_t v = 0;
  if (!parse_int64(it->second, &v))
    fail(name, "expected a decimal integer (digits only), got '" + it->second + "'");
  if (v < lo || v > hi) {
    std::ostringstream os;
    os << "value " << v << " out of range [" << lo << ", " << hi << "]";
    fail(name, os.str());
  }
  return v;
}

double Args::real(const std::string& name, double def, double lo, double hi) const {
  const auto it = values_.find(name);
  if (it == values_.end()) return def;
  const std::string& s = it->second;
  // strtod alone would also take leading whitespace, hex floats, "nan" and "infinity"
  const bool decimal = is_decimal_real(s);
  char* end = nullptr;
  errno = 0;
  const double v = decimal ? std::strtod(s.c_str(), &end) : NAN;
  if (!decimal || errno != 0 || *end != '\0' || !std::isfinite(v))
    fail(name, "expected a finite decimal number, got '" + s + "'");
  if (v < lo || v > hi) {
    std::ostringstream os;
    os << "value " << v << " out of range [" << lo << ", " << hi << "]";
    fail(name, os.str());
  }
  return v;
}

uint64_t Args::u64(const std::string& name, uint64_t def) const {
  const auto it = values_.find(name);
  if (it == values_.end()) return def;
  uint64_t v = 0;
  if (!parse_uint64(it->second, &v))
    fail(name, "expected a non-negative decimal integer below 2^64 (digits only), got '" +
                   it->second + "'");
  return v;
}

bool Args::heads(const std::string& name, int32_t* qo, int32_t* kv) const {
  const auto it = values_.find(name);
  if (it == values_.end()) return false;
  const std::string& s = it->second;
  const size_t slash = s.find('/');
  int64_t a = 0, b = 0;
  const bool ok = slash == std::string::npos ? (parse_int64(s, &a) && (b = a, true))
                                             : (parse_int64(s.substr(0, slash), &a) &&
                                                parse_int64(s.substr(slash + 1), &b));
  if (!ok || a < 1 || b < 1 || a > 4096 || b > 4096)
    fail(name, "expected Q/KV head counts such as 32/8, got '" + s + "'");
  if (a % b != 0) fail(name, "query heads must be a multiple of KV heads, got '" + s + "'");
  *qo = static_cast<int32_t>(a);
  *kv = static_cast<int32_t>(b);
  return true;
}

std::string Args::usage(const std::string& command) const {
  std::ostringstream os;
  os << "usage: treeattn " << command << " [flags]\n";
  for (const FlagSpec& f : flags_)
    os << "  --" << f.name << (f.takes_value ? (f.optional_value ? " [VALUE]" : " VALUE") : "")
       << "\n      " << f.help << "\n";
  return os.str();
}

}  // namespace treeattn::cli
