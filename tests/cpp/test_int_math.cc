// The integer helpers of treeattn/common/int_math.h against plain division: SmallDivider (the
// kernels' packed row -> item row map) exhaustively over the divisors and dividends the kernels
// can meet (group sizes up to 4096, packed rows up to 4096), then over the whole documented range
// (d < 2^16, n < 2^16) on a grid that includes both ends and the powers of two and their
// neighbours.
#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "treeattn/common/int_math.h"

namespace treeattn {
namespace {

TEST(IntMath, CeilDiv) {
  EXPECT_EQ(ceil_div(0, 7), 0);
  EXPECT_EQ(ceil_div(1, 7), 1);
  EXPECT_EQ(ceil_div(7, 7), 1);
  EXPECT_EQ(ceil_div(8, 7), 2);
  EXPECT_EQ(ceil_div(int64_t{1} << 40, 3), ((int64_t{1} << 40) + 2) / 3);
}

TEST(IntMath, SmallDividerExhaustiveSmall) {
  for (uint32_t d = 1; d <= 4096; ++d) {
    const SmallDivider div(d);
    for (uint32_t n = 0; n < 4096; ++n) ASSERT_EQ(div(n), n / d) << "n=" << n << " d=" << d;
  }
}

TEST(IntMath, SmallDividerWholeRange) {
  std::vector<uint32_t> values;
  for (uint32_t k = 0; k < 16; ++k) {
    const uint32_t p = 1u << k;
    for (uint32_t v : {p - 1, p, p + 1, 3 * p, 3 * p + 1}) values.push_back(v);
  }
  for (uint32_t v = 1; v < 65536; v += 997) values.push_back(v);
  values.push_back(65535);
  for (uint32_t d : values) {
    if (d == 0 || d >= 65536) continue;
    const SmallDivider div(d);
    for (uint32_t n : values) {
      if (n >= 65536) continue;
      ASSERT_EQ(div(n), n / d) << "n=" << n << " d=" << d;
    }
    for (uint32_t n = 65536 - 512; n < 65536; ++n)
      ASSERT_EQ(div(n), n / d) << "n=" << n << " d=" << d;
  }
}

}  // namespace
}  // namespace treeattn
