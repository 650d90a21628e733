// Implementation of the shared CLI argument parser (args.h).
#include "args.h"

#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <sstream>
#include <stdexcept>

namespace treeattn::cli {
namespace {

[[noreturn]] void fail(const std::string& flag, const std::string& msg) {
  throw std::invalid_argument("--" + flag + ": " + msg);
}

bool parse_i64(const std::string& s, int64_t* out) {
  if (s.empty()) return false;
  char* end = nullptr;
  errno = 0;
  const long long v = std::strtoll(s.c_str(), &end, 10);
  if (errno != 0 || end == s.c_str() || *end != '\0') return false;
  *out = v;
  return true;
}

}  // namespace

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
}

std::string Args::str(const std::string& name, const std::string& def) const {
  const auto it = values_.find(name);
  return it == values_.end() ? def : it->second;
}

int64_t Args::integer(const std::string& name, int64_t def, int64_t lo, int64_t hi) const {
  const auto it = values_.find(name);
  if (it == values_.end()) return def;
  int64_t v = 0;
  if (!parse_i64(it->second, &v)) fail(name, "expected an integer, got '" + it->second + "'");
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
  char* end = nullptr;
  errno = 0;
  const double v = std::strtod(s.c_str(), &end);
  if (errno != 0 || end == s.c_str() || *end != '\0' || !std::isfinite(v))
    fail(name, "expected a finite number, got '" + s + "'");
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
  const std::string& s = it->second;
  char* end = nullptr;
  errno = 0;
  const unsigned long long v = std::strtoull(s.c_str(), &end, 10);
  if (s[0] == '-' || errno != 0 || end == s.c_str() || *end != '\0')
    fail(name, "expected a non-negative integer, got '" + s + "'");
  return v;
}

bool Args::heads(const std::string& name, int32_t* qo, int32_t* kv) const {
  const auto it = values_.find(name);
  if (it == values_.end()) return false;
  const std::string& s = it->second;
  const size_t slash = s.find('/');
  int64_t a = 0, b = 0;
  const bool ok = slash == std::string::npos
                      ? (parse_i64(s, &a) && (b = a, true))
                      : (parse_i64(s.substr(0, slash), &a) && parse_i64(s.substr(slash + 1), &b));
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
