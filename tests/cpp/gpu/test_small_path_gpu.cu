// GPU tests of the small-tree path: the per-CTA timeline (DecodeArgs::timeline: every CTA of the
// plan stamps its phases in order, padding CTAs and queries without a merge list stop after their
// first words, and the stamps change no output bit), and the kM16 records' page-id copies
// rewritten by DevicePlan::resolve_pages.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "gpu_test_util.h"
#include "treeattn/kernels/decode.h"
#include "treeattn/kernels/device_plan.h"
#include "treeattn/plan/layout.h"
#include "treeattn/plan/tile_policy.h"
#include "treeattn/tree/levels.h"

namespace treeattn::gpu_test {
namespace {

/// Restores the tile policy's heads per CTA when the test ends.
struct OneHeadPerCta {
  OneHeadPerCta() { set_kv_heads_per_cta(1); }
  ~OneHeadPerCta() { set_kv_heads_per_cta(0); }
};

TEST(SmallPathGpu, TimelineStampsEveryCtaInOrder) {
  TA_REQUIRE_GPU();
  const OneHeadPerCta one_head;  // one record per (item, KV head) of the kM16 launch too
  // fasttree: kM16 and kM64 items with a merge; query: kM16 items without one
  for (const char* planner : {"fasttree", "query"}) {
    const LevelsCase lc =
        levels_case("N=1,4,48 C=300,100,37 heads=16/2 dim=128 page=16", planner, false, 11);
    const Case& c = lc.c;
    SCOPED_TRACE(c.describe());
    const Plan plan = make_case_plan(lc.tree, c);
    if (std::string(planner) == "fasttree") ASSERT_GT(plan.num_slots, 0) << "a plan with a merge";
    CaseInputs in;
    fill_inputs(lc.tree, c, 3, &in);
    ASSERT_FALSE(HasFatalFailure());
    DevicePlan dp;
    dp.upload(plan, nullptr, 2.0);  // headroom: padding CTAs and queries past the plan
    std::vector<uint16_t> out_plain, out;
    std::vector<float> lse_plain, lse;
    run_and_fetch(dp, in, nullptr, nullptr, &out_plain, &lse_plain);
    const PlanLayout& L = dp.layout();
    const int64_t words = timeline_records(L) * kTimelineWords;
    DevBuf tl(words * sizeof(uint64_t));
    TA_CUDA_OK(cudaMemset(tl.ptr, 0, tl.bytes));
    in.args.timeline = tl.as<uint64_t>();
    run_and_fetch(dp, in, nullptr, nullptr, &out, &lse);
    in.args.timeline = nullptr;
    ASSERT_FALSE(HasFatalFailure());
    EXPECT_EQ(out, out_plain);
    EXPECT_EQ(0, std::memcmp(lse.data(), lse_plain.data(), lse.size() * sizeof(float)));
    expect_matches_oracle(lc.tree, c, in, out, lse);
    std::vector<uint64_t> w(words);
    TA_CUDA_OK(cudaMemcpy(w.data(), tl.ptr, tl.bytes, cudaMemcpyDeviceToHost));

    const int64_t kv = c.num_kv_heads;
    int checked = 0;
    for (int cls = 0; cls < kNumTileClasses; ++cls) {
      const int64_t planned = plan.class_begin[cls + 1] - plan.class_begin[cls];
      for (int64_t i = 0; i < L.class_items[cls]; ++i) {
        for (int64_t h = 0; h < kv; ++h) {
          const uint64_t* r = &w[((L.class_item_off[cls] + i) * kv + h) * kTimelineWords];
          SCOPED_TRACE("class " + std::to_string(cls) + " item " + std::to_string(i) + " head " +
                       std::to_string(h));
          ASSERT_TRUE(r[kTlTag] >> 63) << "every launched CTA stamps its start";
          const int cfg = static_cast<int>((r[kTlTag] >> 16) & 15);
          EXPECT_EQ(tile::plan_class(cfg), cls);
          EXPECT_EQ(static_cast<int64_t>((r[kTlTag] >> 20) & 0xfffff), h);
          EXPECT_NE(r[kTlGlobalStart], 0u);
          if (i >= planned) {  // an empty padding item: exits after reading it
            EXPECT_EQ(r[kTlClockItem], 0u);
            EXPECT_EQ(r[kTlGlobalEnd], 0u);
            continue;
          }
          EXPECT_LE(r[kTlClockStart], r[kTlClockItem]);
          EXPECT_LE(r[kTlClockItem], r[kTlClockKv]);
          EXPECT_LE(r[kTlClockKv], r[kTlClockLoop]);
          EXPECT_LE(r[kTlClockLoop], r[kTlClockEnd]);
          EXPECT_NE(r[kTlClockItem], 0u);
          EXPECT_LT(r[kTlGlobalStart], r[kTlGlobalEnd]);
          ++checked;
        }
      }
    }
    EXPECT_EQ(checked, static_cast<int>(plan.items.size() * kv));
    // merge CTAs: one per query of the layout; those with a merge list stamp every phase
    const int64_t base = L.items * kv;
    for (int64_t q = 0; q < L.queries && plan.num_slots > 0; ++q) {
      const uint64_t* r = &w[(base + q) * kTimelineWords];
      SCOPED_TRACE("merge query " + std::to_string(q));
      ASSERT_TRUE(r[kTlTag] >> 63);
      EXPECT_EQ(static_cast<int>((r[kTlTag] >> 16) & 15), kTlMergeConfig);
      const bool merged =
          q < lc.tree.num_queries() && plan.merge_indptr[q + 1] > plan.merge_indptr[q];
      EXPECT_EQ(r[kTlClockItem] != 0, merged);
      if (merged) {
        EXPECT_LE(r[kTlClockStart], r[kTlClockKv]);
        EXPECT_LE(r[kTlClockKv], r[kTlClockEnd]);
        EXPECT_LE(r[kTlClockItem], r[kTlClockEnd]);
        EXPECT_LT(r[kTlGlobalStart], r[kTlGlobalEnd]);
      }
    }
    if (plan.num_slots == 0)  // no merge launch: its records stay untouched
      for (int64_t q = 0; q < L.queries; ++q)
        EXPECT_EQ(w[(base + q) * kTimelineWords + kTlTag], 0u);
  }
}

// DevicePlan::resolve_pages rewrites the kM16 records' copies of a page id with the id: every page
// id of a query plan (kM16 items only, whose records copy their first pages) is uploaded as a wrong
// but valid id and resolved to the real one from a device table. The resolved run matches the
// oracle over the real pages; a copy left as uploaded would read a wrong page for the item's first
// tokens and miss it. The unresolved run must differ, so the wrong ids are read.
TEST(SmallPathGpu, ResolvePagesRewritesTheRecordCopies) {
  TA_REQUIRE_GPU();
  for (const char* spec : {"N=1,2,64 C=8,256,32 heads=16/1 dim=128 page=16",
                           "N=1,4,8 C=40,30,20 heads=8/2 dim=64 page=1"}) {
    const LevelsCase lc = levels_case(spec, "query", false, 5);
    const Case& c = lc.c;
    SCOPED_TRACE(c.describe());
    const Plan plan = make_case_plan(lc.tree, c);
    ASSERT_GT(plan.class_begin[1] - plan.class_begin[0], 0) << "kM16 items";
    CaseInputs in;
    fill_inputs(lc.tree, c, 7, &in);
    ASSERT_FALSE(HasFatalFailure());
    Plan wrong = plan;
    for (int32_t& id : wrong.page_ids) id = (id + 1) % lc.tree.num_pages;
    const int64_t n = static_cast<int64_t>(plan.page_ids.size());
    DevBuf table(n * sizeof(int32_t));
    TA_CUDA_OK(cudaMemcpy(table.ptr, plan.page_ids.data(), table.bytes, cudaMemcpyHostToDevice));
    std::vector<int32_t> pairs(2 * n);
    for (int64_t i = 0; i < n; ++i) pairs[2 * i] = pairs[2 * i + 1] = static_cast<int32_t>(i);
    DevicePlan dp;
    std::vector<uint16_t> out_wrong, out;
    std::vector<float> lse_wrong, lse;
    dp.upload(wrong, nullptr);
    run_and_fetch(dp, in, nullptr, nullptr, &out_wrong, &lse_wrong);
    dp.upload(wrong, nullptr);
    dp.resolve_pages(pairs.data(), n, table.as<int32_t>(), lc.tree.num_pages, nullptr);
    run_and_fetch(dp, in, nullptr, nullptr, &out, &lse);
    ASSERT_FALSE(HasFatalFailure());
    EXPECT_NE(out, out_wrong);
    expect_matches_oracle(lc.tree, c, in, out, lse);
  }
}

}  // namespace
}  // namespace treeattn::gpu_test
