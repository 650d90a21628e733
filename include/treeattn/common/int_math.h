// Integer helpers shared by the tree and plan layers and the kernels: a ceiling division, and the
// division of small non-negative integers by a divisor fixed for a kernel (a multiply-high instead
// of a divide instruction).
#pragma once

#include <cstdint>

#include "treeattn/common/host_device.h"

namespace treeattn {

/// ceil(a / b) for a >= 0, b >= 1.
constexpr int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

/// n / d for a divisor d in [1, 2^16) fixed once, without a divide per call: the high 32 bits of
/// n * ceil(2^32 / d), exact for every n with n * d < 2^32 (n < 2^16 always is); d = 1, whose
/// multiplier would be 2^32, is the identity. Used by the epilogue of the attention kernels
/// (src/kernels/kernel_common.cuh) to map a packed row to its item row (d = the GQA group).
struct SmallDivider {
  uint32_t magic;  ///< ceil(2^32 / d); 0 for d = 1
  TA_HOST_DEVICE explicit SmallDivider(uint32_t d) : magic(d == 1u ? 0u : 0xffffffffu / d + 1u) {}
  TA_HOST_DEVICE uint32_t operator()(uint32_t n) const {
    if (magic == 0u) return n;
#if defined(__CUDA_ARCH__)
    return __umulhi(n, magic);
#else
    return static_cast<uint32_t>((static_cast<uint64_t>(n) * magic) >> 32);
#endif
  }
};

}  // namespace treeattn
