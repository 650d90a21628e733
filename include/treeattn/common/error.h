// Error helpers shared by every layer: host validation throws std::invalid_argument naming the
// argument and the bad value; internal invariants throw std::logic_error.
#pragma once

#include <sstream>
#include <stdexcept>
#include <string>

namespace treeattn {

namespace detail {
template <typename... Args>
std::string concat(const Args&... args) {
  std::ostringstream os;
  (os << ... << args);
  return os.str();
}
}  // namespace detail

/// Throws std::invalid_argument("<arg>: <message>") when `cond` is false.
#define TA_CHECK_ARG(cond, arg, ...)                                                   \
  do {                                                                                 \
    if (!(cond))                                                                       \
      throw std::invalid_argument(::treeattn::detail::concat(arg, ": ", __VA_ARGS__)); \
  } while (0)

/// Throws std::logic_error for broken internal invariants (a bug in treeattn, not bad input).
#define TA_CHECK_INTERNAL(cond, ...)                                                           \
  do {                                                                                         \
    if (!(cond))                                                                               \
      throw std::logic_error(::treeattn::detail::concat("treeattn internal error: ", __FILE__, \
                                                        ":", __LINE__, ": ", __VA_ARGS__));    \
  } while (0)

}  // namespace treeattn
