// Integer helpers shared by the tree and plan layers.
#pragma once

#include <cstdint>

namespace treeattn {

/// ceil(a / b) for a >= 0, b >= 1.
constexpr int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

}  // namespace treeattn
