// GPU tests of the check harness's device half (DeviceInputs, treeattn/kernels/device_inputs.h):
// the q, K and V it writes are random_inputs()' values bit for bit in both KV layouts and both
// dtypes (the oracle recomputes them on the host), DecodeArgs points at them, and a refill with a
// larger tree or a run before any fill is refused.
#include <gtest/gtest.h>

#include <stdexcept>
#include <string>
#include <vector>

#include "gpu_test_util.h"
#include "treeattn/common/half.h"
#include "treeattn/cpu/random_inputs.h"
#include "treeattn/kernels/device_inputs.h"
#include "treeattn/tree/levels.h"

namespace treeattn::gpu_test {
namespace {

/// Device elements [0, n) at `p` as fp16 / bf16 bits.
std::vector<uint16_t> fetch(const void* p, int64_t n) {
  std::vector<uint16_t> v(static_cast<size_t>(n));
  EXPECT_EQ(cudaMemcpy(v.data(), p, v.size() * 2, cudaMemcpyDeviceToHost), cudaSuccess);
  return v;
}

TEST(DeviceInputs, AreTheHostRandomInputs) {
  TA_REQUIRE_GPU();
  const PrefixTree tree =
      tree_from_levels(parse_levels("N=1,3,7 C=50,20,9 page=16"), PageLayout::kShuffled, 2);
  const int32_t H = 8, KH = 2, D = 64, P = tree.page_size;
  for (const KvLayout layout : {KvLayout::kSplit, KvLayout::kCombined})
    for (const bool bf16 : {false, true}) {
      SCOPED_TRACE(std::string(layout == KvLayout::kSplit ? "split" : "combined") +
                   (bf16 ? " bf16" : " fp16"));
      DeviceInputs in;
      ASSERT_NO_THROW(in.fill(tree, RandomInputSpec{H, KH, D, bf16, 31}, layout, true));
      const RandomInputs host = random_inputs(tree, H, KH, D, bf16, 31);
      auto bits = [bf16](float x) { return bf16 ? float_to_bf16_bits(x) : float_to_half_bits(x); };
      const DecodeArgs& a = in.args;
      EXPECT_EQ(a.dtype, bf16 ? DType::kBFloat16 : DType::kFloat16);
      EXPECT_EQ(a.q_stride_query, H * D);
      ASSERT_NE(a.lse, nullptr);
      const std::vector<uint16_t> q = fetch(a.q, static_cast<int64_t>(host.q.size()));
      for (size_t i = 0; i < q.size(); ++i) ASSERT_EQ(q[i], bits(host.q[i])) << "q " << i;
      const int64_t page_elems = int64_t{P} * KH * D;
      ASSERT_EQ(a.slot_stride, KH * D);
      for (int32_t p = 0; p < tree.num_pages; ++p) {
        const auto* k = static_cast<const uint16_t*>(a.k) + p * a.page_stride;
        const auto* v = static_cast<const uint16_t*>(a.v) + p * a.page_stride;
        const std::vector<uint16_t> kp = fetch(k, page_elems), vp = fetch(v, page_elems);
        for (int64_t e = 0; e < page_elems; ++e) {
          ASSERT_EQ(kp[e], bits(host.k[p * page_elems + e])) << "k page " << p << " elem " << e;
          ASSERT_EQ(vp[e], bits(host.v[p * page_elems + e])) << "v page " << p << " elem " << e;
        }
      }
      EXPECT_EQ(in.spec().seed, 31u);
    }
}

TEST(DeviceInputs, RefusesAGrownTreeAndARunBeforeFill) {
  TA_REQUIRE_GPU();
  const PrefixTree small = tree_from_levels(parse_levels("N=1,2 C=30,5"));
  const PrefixTree large = tree_from_levels(parse_levels("N=1,8 C=30,5"));
  DeviceInputs in;
  DevicePlan dp;
  std::vector<uint16_t> out;
  std::vector<float> lse;
  EXPECT_THROW(in.run_and_fetch(dp, in.args, nullptr, nullptr, &out, &lse), std::logic_error);
  const RandomInputSpec spec{8, 2, 64, false, 1};
  ASSERT_NO_THROW(in.fill(small, spec, KvLayout::kSplit, false));
  EXPECT_EQ(in.args.lse, nullptr);
  try {
    in.fill(large, spec, KvLayout::kSplit, false);
    ADD_FAILURE() << "a larger tree was accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_EQ(std::string(e.what()).rfind("tree", 0), 0u) << e.what();
  }
  RandomInputSpec bad = spec;
  bad.head_dim = 0;
  EXPECT_THROW(in.fill(small, bad, KvLayout::kSplit, false), std::invalid_argument);
}

}  // namespace
}  // namespace treeattn::gpu_test
