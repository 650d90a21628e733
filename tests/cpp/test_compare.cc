// Tests of compare_to_oracle() (include/treeattn/cpu/compare.h): the measure is relative to the
// largest reference value, NaN and infinity never pass, the bound follows the output dtype, and
// the attention form only looks at the sampled queries and accepts an empty row (oracle LSE -inf)
// only as exactly o = 0, lse = -inf; the query sample, and compare_to_sample reading a GPU
// batch's 16-bit rows of the sampled queries.
#include <gtest/gtest.h>

#include <cmath>
#include <stdexcept>
#include <string>
#include <vector>

#include "treeattn/common/half.h"
#include "treeattn/cpu/compare.h"

namespace treeattn {
namespace {

/// One query, one head: `out` against `ref` (head_dim = size), LSE not compared.
OracleComparison compare_row(const std::vector<double>& ref, const std::vector<float>& out,
                             OutputDtype dtype) {
  const double ref_lse = 0.0;
  return compare_to_oracle(ref.data(), &ref_lse, out.data(), nullptr, 1,
                           static_cast<int64_t>(ref.size()), {0}, dtype);
}

TEST(CompareToOracle, RelativeToLargestReference) {
  const std::vector<double> ref = {2.0, -4.0, 0.0, 1e-9};
  std::vector<float> out = {2.0f, -4.0f, 0.0f, 0.0f};
  OracleComparison c = compare_row(ref, out, OutputDtype::kFp32);
  EXPECT_TRUE(c.pass);  // the tiny element's relative error does not count on its own
  EXPECT_NEAR(c.max_rel_err, 1e-9 / 4.0, 1e-15);
  out[0] = 2.0f + 4.0f * 5e-4f;  // 5e-4 of max |ref|: fails fp32, passes fp16 and bf16
  c = compare_row(ref, out, OutputDtype::kFp32);
  EXPECT_FALSE(c.pass);
  EXPECT_NEAR(c.max_rel_err, 5e-4, 1e-6);
  EXPECT_EQ(c.bound, oracle_tolerance(OutputDtype::kFp32));
  EXPECT_TRUE(compare_row(ref, out, OutputDtype::kFp16).pass);
  EXPECT_TRUE(compare_row(ref, out, OutputDtype::kBf16).pass);
  EXPECT_LT(oracle_tolerance(OutputDtype::kFp32), oracle_tolerance(OutputDtype::kFp16));
  EXPECT_LT(oracle_tolerance(OutputDtype::kFp16), oracle_tolerance(OutputDtype::kBf16));
}

TEST(CompareToOracle, NanAndInfinityNeverPass) {
  const std::vector<double> ref = {1.0, 2.0};
  for (const float bad : {NAN, INFINITY, -INFINITY}) {
    const std::vector<float> out = {1.0f, bad};
    const OracleComparison c = compare_row(ref, out, OutputDtype::kBf16);
    EXPECT_TRUE(c.nan);
    EXPECT_FALSE(c.pass);
  }
}

TEST(CompareToOracle, AllZeroReferenceIsAbsolute) {
  const std::vector<double> ref = {0.0, 0.0};
  const std::vector<float> out = {0.0f, 1e-3f};
  const OracleComparison c = compare_row(ref, out, OutputDtype::kFp16);
  EXPECT_NEAR(c.max_rel_err, 1e-3, 1e-9);
  EXPECT_TRUE(c.pass);
}

TEST(CompareToOracle, QueriesOnlyLooksAtTheSample) {
  // 3 queries x 1 head x head_dim 2; query 1 is poisoned (not computed), 0 and 2 match.
  const std::vector<double> ref = {1, 2, 3, 4, 5, 6}, ref_lse = {0.5, 0.6, 0.7};
  const std::vector<float> out = {1, 2, NAN, NAN, 5, 6}, lse = {0.5f, NAN, 0.7f};
  auto cmp = [&](const std::vector<int32_t>& qs) {
    return compare_to_oracle(ref.data(), ref_lse.data(), out.data(), lse.data(), 1, 2, qs,
                             OutputDtype::kFp32);
  };
  EXPECT_TRUE(cmp({0, 2}).pass);
  EXPECT_FALSE(cmp({1}).pass);
  EXPECT_TRUE(cmp({1}).nan);
}

TEST(CompareToOracle, EmptyRowsMustBeExactlyTheEmptyState) {
  // 1 query x 2 heads x head_dim 2: head 0 sees keys, head 1 none (oracle o = 0, lse = -inf).
  const std::vector<double> ref = {1, 2, 0, 0}, ref_lse = {0.5, -INFINITY};
  std::vector<float> out = {1, 2, 0, 0}, lse = {0.5f, -INFINITY};
  auto cmp = [&](const float* l) {
    return compare_to_oracle(ref.data(), ref_lse.data(), out.data(), l, 2, 2, {0},
                             OutputDtype::kBf16);
  };
  OracleComparison c = cmp(lse.data());
  EXPECT_TRUE(c.pass) << c.describe();
  EXPECT_EQ(c.empty_rows, 1);
  EXPECT_EQ(c.lse_rel_err, 0.0);          // the empty row takes no part in the measure
  EXPECT_TRUE(cmp(nullptr).pass);         // without LSE output, the output alone is checked
  for (const float bad : {1e-6f, NAN}) {  // a tiny output or NaN in an empty row fails
    out[3] = bad;
    c = cmp(lse.data());
    EXPECT_FALSE(c.pass);
    EXPECT_EQ(c.bad_empty_rows, 1);
    EXPECT_FALSE(cmp(nullptr).pass);
  }
  out[3] = 0;
  for (const float bad : {-1e30f, 0.f, NAN, INFINITY}) {  // the LSE must be exactly -inf
    lse[1] = bad;
    EXPECT_FALSE(cmp(lse.data()).pass) << bad;
  }
  lse[1] = -INFINITY;
  lse[0] = -INFINITY;  // an empty state where the oracle saw keys
  EXPECT_FALSE(cmp(lse.data()).pass);
  // LSEs near 0: the error is measured against max(1, max |ref|)
  const std::vector<double> r1 = {1, 2}, l1 = {-7.9e-4};
  const std::vector<float> o1 = {1, 2}, g1 = {-7.9e-4f + 2e-7f};
  c = compare_to_oracle(r1.data(), l1.data(), o1.data(), g1.data(), 1, 2, {0}, OutputDtype::kFp32);
  EXPECT_TRUE(c.pass) << c.describe();
  EXPECT_LT(c.lse_rel_err, 1e-6);
}

TEST(SampleQueries, AllOrSpreadWithBothEnds) {
  EXPECT_EQ(sample_queries(3, 16), (std::vector<int32_t>{0, 1, 2}));
  EXPECT_EQ(sample_queries(0, 4), std::vector<int32_t>{});
  EXPECT_EQ(sample_queries(9, 3), (std::vector<int32_t>{0, 4, 8}));
  EXPECT_EQ(sample_queries(5, 1), std::vector<int32_t>{0});
  const std::vector<int32_t> s = sample_queries(1000, 16);
  ASSERT_EQ(s.size(), 16u);
  EXPECT_EQ(s.front(), 0);
  EXPECT_EQ(s.back(), 999);
  for (size_t i = 1; i < s.size(); ++i) EXPECT_LT(s[i - 1], s[i]);
  EXPECT_THROW(sample_queries(10, 0), std::invalid_argument);
}

TEST(CompareToSample, ReadsTheSampledRowsOfTheBatch) {
  // 3 queries x 2 heads x head_dim 4 of fp16 bits; the sample holds queries 0 and 2.
  OracleSample ref;
  ref.queries = {0, 2};
  ref.num_qo_heads = 2;
  ref.head_dim = 4;
  std::vector<uint16_t> out(3 * 2 * 4, 0x7E00);  // NaN everywhere: query 1 is never read
  std::vector<float> lse(3 * 2, NAN);
  for (size_t i = 0; i < ref.queries.size(); ++i) {
    const int32_t q = ref.queries[i];
    for (int h = 0; h < 2; ++h) {
      const double l = 0.25 * (q + h);
      ref.lse.push_back(l);
      lse[q * 2 + h] = static_cast<float>(l);
      for (int d = 0; d < 4; ++d) {
        const double x = 0.5 * (d + 1) - q + 0.125 * h;  // exact in fp16
        ref.out.push_back(x);
        out[(q * 2 + h) * 4 + d] = float_to_half_bits(static_cast<float>(x));
      }
    }
  }
  OracleComparison c = compare_to_sample(ref, out, &lse);
  EXPECT_TRUE(c.pass) << c.describe();
  EXPECT_EQ(c.max_rel_err, 0.0);
  EXPECT_EQ(c.bound, oracle_tolerance(OutputDtype::kFp16));
  ref.bf16 = true;  // the same bits read as bf16 are other numbers, at the bf16 bound
  c = compare_to_sample(ref, out, &lse);
  EXPECT_FALSE(c.pass);
  EXPECT_EQ(c.bound, oracle_tolerance(OutputDtype::kBf16));
  ref.bf16 = false;
  out[(2 * 2 + 1) * 4 + 3] = float_to_half_bits(3.0f);  // query 2, head 1, last element
  c = compare_to_sample(ref, out, nullptr);
  EXPECT_FALSE(c.pass);
  EXPECT_GT(c.max_rel_err, 0.1);
  out.resize(2 * 2 * 4);  // query 2 missing
  try {
    compare_to_sample(ref, out, &lse);
    ADD_FAILURE() << "no throw";
  } catch (const std::invalid_argument& e) {
    EXPECT_EQ(std::string(e.what()).rfind("out", 0), 0u) << e.what();
  }
}

}  // namespace
}  // namespace treeattn
