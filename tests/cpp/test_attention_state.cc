// Tests of AttentionState / merge_state / merge_weights
// (include/treeattn/common/attention_state.h): merging partial softmax states equals attention over
// the union, associativity within rounding, the empty state is the identity (exactly), two empties
// stay empty, and no NaN appears with -inf.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "treeattn/common/attention_state.h"

namespace treeattn {
namespace {

constexpr int kD = 8;
using State = AttentionState<double, kD>;

/// Attention state of logits s[b..e) over value rows v[b..e) (softmax-normalised o, natural lse).
State state_of(const std::vector<double>& s, const std::vector<std::vector<double>>& v, int b,
               int e) {
  State st;
  st.set_empty();
  if (b >= e) return st;
  double m = -INFINITY;
  for (int i = b; i < e; ++i) m = std::max(m, s[i]);
  double l = 0;
  for (int i = b; i < e; ++i) {
    const double w = std::exp(s[i] - m);
    l += w;
    for (int d = 0; d < kD; ++d) st.o[d] += w * v[i][d];
  }
  for (int d = 0; d < kD; ++d) st.o[d] /= l;
  st.lse = m + std::log(l);
  return st;
}

struct Data {
  std::vector<double> s;
  std::vector<std::vector<double>> v;
};

Data make_data(int n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> u(-1.0, 1.0);
  Data d;
  for (int i = 0; i < n; ++i) {
    d.s.push_back(8.0 * u(rng));  // spread logits so the max moves between parts
    d.v.emplace_back(kD);
    for (double& x : d.v.back()) x = u(rng);
  }
  return d;
}

TEST(AttentionState, MergeOfPartsEqualsWhole) {
  for (uint64_t seed = 1; seed <= 20; ++seed) {
    const Data d = make_data(50, seed);
    const State whole = state_of(d.s, d.v, 0, 50);
    const int cut = static_cast<int>(seed * 7 % 49) + 1;
    State a = state_of(d.s, d.v, 0, cut);
    a.merge(state_of(d.s, d.v, cut, 50));
    for (int k = 0; k < kD; ++k) EXPECT_NEAR(a.o[k], whole.o[k], 1e-12) << "seed " << seed;
    EXPECT_NEAR(a.lse, whole.lse, 1e-12);
  }
}

TEST(AttentionState, AssociativeWithinRounding) {
  for (uint64_t seed = 100; seed < 110; ++seed) {
    const Data d = make_data(30, seed);
    const State a = state_of(d.s, d.v, 0, 7), b = state_of(d.s, d.v, 7, 19),
                c = state_of(d.s, d.v, 19, 30);
    State left = a;
    left.merge(b);
    left.merge(c);
    State bc = b;
    bc.merge(c);
    State right = a;
    right.merge(bc);
    for (int k = 0; k < kD; ++k) EXPECT_NEAR(left.o[k], right.o[k], 1e-13);
    EXPECT_NEAR(left.lse, right.lse, 1e-13);
  }
}

TEST(AttentionState, EmptyIsExactIdentity) {
  const Data d = make_data(10, 7);
  const State x = state_of(d.s, d.v, 0, 10);
  State empty;
  empty.set_empty();
  State a = x;
  a.merge(empty);
  State b = empty;
  b.merge(x);
  for (int k = 0; k < kD; ++k) {
    EXPECT_EQ(a.o[k], x.o[k]);
    EXPECT_EQ(b.o[k], x.o[k]);
  }
  EXPECT_EQ(a.lse, x.lse);
  EXPECT_EQ(b.lse, x.lse);
}

TEST(AttentionState, TwoEmptiesStayEmptyWithoutNaN) {
  State a, b;
  a.set_empty();
  b.set_empty();
  a.merge(b);
  EXPECT_EQ(a.lse, -INFINITY);
  for (int k = 0; k < kD; ++k) {
    EXPECT_FALSE(std::isnan(a.o[k]));
    EXPECT_EQ(a.o[k], 0.0);
  }
  const MergeWeights<float> w = merge_weights<float>(-INFINITY, -INFINITY);
  EXPECT_EQ(w.wa, 0.f);
  EXPECT_EQ(w.wb, 0.f);
  EXPECT_EQ(w.lse, -INFINITY);
}

TEST(AttentionState, WeightsSumToOneAndHandleHugeGaps) {
  const double pairs[][2] = {{0, 0}, {-3, 5}, {1e3, -1e3}, {-INFINITY, 2.5}, {40, 40.5}};
  for (const auto& p : pairs) {
    const MergeWeights<double> w = merge_weights(p[0], p[1]);
    EXPECT_FALSE(std::isnan(w.wa) || std::isnan(w.wb) || std::isnan(w.lse));
    EXPECT_NEAR(w.wa + w.wb, 1.0, 1e-15);
    const double ref = std::max(p[0], p[1]) + std::log(std::exp(p[0] - std::max(p[0], p[1])) +
                                                       std::exp(p[1] - std::max(p[0], p[1])));
    EXPECT_NEAR(w.lse, ref, 1e-12);
  }
}

}  // namespace
}  // namespace treeattn
