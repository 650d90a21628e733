// Tests of the plan core: tile classes, validate_plan() and check_coverage() catching planted
// bugs, plan_layout()/pack_plan() round trip, cost-model sanity, device presets, make_plan() and
// make_plan_options() argument errors, and the fp16/bf16 rounding helpers.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <random>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "plan/planners/plan_builder.h"
#include "treeattn/common/half.h"
#include "treeattn/plan/cost/cost_model.h"
#include "treeattn/plan/coverage.h"
#include "treeattn/plan/layout.h"
#include "treeattn/plan/planner.h"
#include "treeattn/plan/ranges.h"
#include "treeattn/plan/stats.h"
#include "treeattn/plan/tile_policy.h"
#include "treeattn/tree/block_tables.h"
#include "treeattn/tree/levels.h"
#include "treeattn/tree/random_tree.h"

namespace treeattn {
namespace {

PrefixTree small_tree() {  // root of 40 tokens, 4 children of 20 (pages contiguous, P = 16)
  return tree_from_levels(parse_levels("N=1,4 C=40,20 heads=8/2"));
}

PlanOptions opts_for(const std::string& planner, int qo = 8, int kv = 2, int dim = 64) {
  PlanOptions o;
  o.planner = planner;
  o.num_qo_heads = qo;
  o.num_kv_heads = kv;
  o.head_dim = dim;
  return o;
}

/// One item per query over its path, with `edit` applied to each item's ranges first.
template <typename Edit>
Plan manual_plan(const PrefixTree& t, Edit edit) {
  planners::PlanBuilder b(t, opts_for("query"), "manual");
  for (int32_t q = 0; q < t.num_queries(); ++q) {
    std::vector<KvRange> ranges;
    for (const int32_t n : query_path(t, q))
      ranges.push_back(make_range(t, n, 0, t.nodes[n].tokens, &b.plan(), b.page_memo()));
    edit(q, &ranges, &b.plan(), b.page_memo());
    b.begin_item();
    b.add_row(q);
    for (const KvRange& r : ranges) b.add_kv_range(r);
    b.end_item();
  }
  return b.finish(planners::SlotOrder::kByQuery);
}

TEST(PlanCore, TileClassForRows) {
  EXPECT_EQ(tile_class_for_rows(1), TileClass::kM16);
  EXPECT_EQ(tile_class_for_rows(16), TileClass::kM16);
  EXPECT_EQ(tile_class_for_rows(17), TileClass::kM64);
  EXPECT_EQ(tile_class_for_rows(64), TileClass::kM64);
  EXPECT_EQ(tile_class_for_rows(65), TileClass::kM128);
  EXPECT_EQ(tile_class_for_rows(128), TileClass::kM128);
  EXPECT_THROW(tile_class_for_rows(129), std::invalid_argument);
  EXPECT_THROW(tile_class_for_rows(0), std::invalid_argument);
}

TEST(PlanCore, ManualPlanPassesChecks) {
  const PrefixTree t = small_tree();
  const Plan p = manual_plan(t, [](int, auto*, auto*, auto*) {});
  EXPECT_NO_THROW(validate_plan(p));
  EXPECT_NO_THROW(check_coverage(t, p));
  EXPECT_EQ(p.num_slots, 0);
}

TEST(PlanCore, CoverageCatchesTokenCoveredTwice) {
  const PrefixTree t = small_tree();
  const Plan p = manual_plan(t, [&](int q, std::vector<KvRange>* r, Plan* plan, auto* base) {
    if (q == 2) r->push_back(make_range(t, query_path(t, q)[0], 10, 11, plan, base));
  });
  EXPECT_NO_THROW(validate_plan(p));
  EXPECT_THROW(check_coverage(t, p), std::logic_error);
}

TEST(PlanCore, CoverageCatchesMissingToken) {
  const PrefixTree t = small_tree();
  const Plan p = manual_plan(t, [&](int q, std::vector<KvRange>* r, Plan* plan, auto* base) {
    if (q == 1) (*r)[0] = make_range(t, query_path(t, q)[0], 1, 40, plan, base);
  });
  EXPECT_THROW(check_coverage(t, p), std::logic_error);
  const Plan p2 = manual_plan(t, [&](int q, std::vector<KvRange>* r, Plan* plan, auto* base) {
    if (q == 3) r->back() = make_range(t, query_path(t, q).back(), 0, 19, plan, base);
  });
  EXPECT_THROW(check_coverage(t, p2), std::logic_error);
}

TEST(PlanCore, CoverageCatchesNodeOffPath) {
  const PrefixTree t = small_tree();
  const Plan p = manual_plan(t, [&](int q, std::vector<KvRange>* r, Plan* plan, auto* base) {
    if (q == 0) r->push_back(make_range(t, query_path(t, 1).back(), 0, 20, plan, base));
  });
  EXPECT_THROW(check_coverage(t, p), std::logic_error);
}

TEST(PlanCore, CoverageCatchesWrongPages) {
  const PrefixTree t = small_tree();
  Plan p = manual_plan(t, [](int, auto*, auto*, auto*) {});
  ASSERT_GE(p.page_ids.size(), 2u);
  std::swap(p.page_ids[0], p.page_ids[1]);  // ranges now read the root's pages out of order
  EXPECT_THROW(check_coverage(t, p), std::logic_error);
}

TEST(PlanCore, CoverageHonoursMasks) {
  const PrefixTree t = small_tree();
  // One item holding every query over every node; a mask gives each query its own path.
  planners::PlanBuilder b(t, opts_for("node"), "masked");
  const TreeIndex idx = build_index(t);
  std::vector<KvRange> ranges;
  std::vector<uint64_t> masks;
  std::vector<int32_t> qs;
  for (int32_t q = 0; q < t.num_queries(); ++q) qs.push_back(q);
  for (const int32_t n : idx.preorder) {
    ranges.push_back(make_range(t, n, 0, t.nodes[n].tokens, &b.plan(), b.page_memo()));
    uint64_t m = 0;
    for (const int32_t q : idx.queries_below(n)) m |= 1ull << q;
    masks.push_back(m);
  }
  b.begin_item();
  b.add_rows(qs.data(), static_cast<int32_t>(qs.size()));
  for (size_t j = 0; j < ranges.size(); ++j) b.add_kv_range(ranges[j], masks[j]);
  b.end_item();
  const Plan plan = b.finish(planners::SlotOrder::kByQuery);
  EXPECT_NO_THROW(check_coverage(t, plan));
  // Range 1 is a leaf: hide it from the query below it (missing tokens) ...
  const int32_t leaf = idx.preorder[1];
  ASSERT_EQ(idx.queries_below(leaf).size(), 1u);
  const int32_t q_in = idx.queries_below(leaf)[0], q_out = q_in == 0 ? 1 : 0;
  Plan missing = plan;
  missing.masks[1] &= ~(1ull << q_in);
  EXPECT_THROW(check_coverage(t, missing), std::logic_error);
  // ... or show it to a query whose path does not hold it.
  Plan extra = plan;
  extra.masks[1] |= 1ull << q_out;
  EXPECT_THROW(check_coverage(t, extra), std::logic_error);
}

TEST(PlanCore, ValidateCatchesSlotWrittenTwice) {
  const PrefixTree t = small_tree();
  Plan p = make_plan(t, opts_for("node"));
  ASSERT_GT(p.num_slots, 1);
  int a = -1, b = -1;
  for (size_t r = 0; r < p.rows.size(); ++r)
    if (p.rows[r].slot != kFinalOutput) (a < 0 ? a : b) = static_cast<int>(r);
  ASSERT_GE(b, 0);
  p.rows[b].slot = p.rows[a].slot;
  EXPECT_THROW(validate_plan(p), std::logic_error);
  EXPECT_THROW(check_coverage(t, p), std::logic_error);
}

TEST(PlanCore, ValidateCatchesInconsistencies) {
  const PrefixTree t = small_tree();
  const Plan good = make_plan(t, opts_for("node"));
  EXPECT_NO_THROW(validate_plan(good));
  Plan p = good;
  p.items[0].kv_tokens += 1;
  EXPECT_THROW(validate_plan(p), std::logic_error);
  p = good;
  p.class_begin[kNumTileClasses] += 1;
  EXPECT_THROW(validate_plan(p), std::logic_error);
  p = good;
  p.merge_slots.pop_back();
  EXPECT_THROW(validate_plan(p), std::logic_error);
  p = good;
  p.rows[0].query = t.num_queries();
  EXPECT_THROW(validate_plan(p), std::logic_error);
  p = good;  // a final-output row for a query that also has partials
  for (PlanRow& r : p.rows)
    if (r.slot != kFinalOutput) {
      r.slot = kFinalOutput;
      break;
    }
  EXPECT_THROW(validate_plan(p), std::logic_error);
  p = good;
  p.ranges[0].page_offset = t.page_size;
  EXPECT_THROW(validate_plan(p), std::logic_error);
}

TEST(PlanLayout, RoundTrip) {
  const PrefixTree t = small_tree();
  Plan p = make_plan(t, opts_for("node"));
  p.masks = {0x3, 0x1};  // exercise the mask array even though no item uses it
  const PlanLayout L = plan_layout(p);
  const int64_t offs[] = {L.items_off,      L.rows_off,      L.ranges_off,       L.page_ids_off,
                          L.records_off,    L.masks_off,     L.merge_indptr_off, L.merge_slots_off,
                          L.metadata_bytes, L.partial_o_off, L.partial_lse_off,  L.total_bytes};
  for (size_t i = 0; i < sizeof(offs) / sizeof(offs[0]); ++i) {
    EXPECT_EQ(offs[i] % 256, 0) << i;
    if (i > 0) EXPECT_LE(offs[i - 1], offs[i]) << i;
  }
  EXPECT_GE(L.total_bytes - L.partial_o_off,
            static_cast<int64_t>(p.num_slots) * 8 * 64 * 4 + p.num_slots * 8 * 4);
  std::vector<char> buf(L.metadata_bytes, 0x5a);
  pack_plan(p, L, buf.data());
  // item i of class c at class_item_off[c] + (i - class_begin[c]); the class's other slots empty
  int64_t off = 0;
  for (int c = 0; c < kNumTileClasses; ++c) {
    EXPECT_EQ(L.class_item_off[c], off) << c;
    EXPECT_EQ(L.class_items[c], p.class_begin[c + 1] - p.class_begin[c]) << c;
    off += L.class_items[c];
  }
  EXPECT_EQ(L.items, off);
  for (size_t i = 0; i < p.items.size(); ++i) {
    int c = 0;
    while (static_cast<int32_t>(i) >= p.class_begin[c + 1]) ++c;
    DeviceItem d;
    std::memcpy(&d,
                buf.data() + L.items_off +
                    (L.class_item_off[c] + static_cast<int64_t>(i) - p.class_begin[c]) *
                        static_cast<int64_t>(sizeof(DeviceItem)),
                sizeof(d));
    EXPECT_EQ(d.row_begin, p.items[i].row_begin);
    EXPECT_EQ(d.num_rows, p.items[i].num_rows);
    EXPECT_EQ(d.range_begin, p.items[i].range_begin);
    EXPECT_EQ(d.num_ranges, p.items[i].num_ranges);
    EXPECT_EQ(d.mask_begin, p.items[i].mask_begin);
    EXPECT_EQ(d.kv_tokens, p.items[i].kv_tokens);
    int32_t tb = 0;
    for (int32_t j = 0; j < d.num_ranges; ++j) {
      DeviceRange r;
      std::memcpy(&r, buf.data() + L.ranges_off + (d.range_begin + j) * sizeof(DeviceRange),
                  sizeof(r));
      const KvRange& g = p.ranges[d.range_begin + j];
      EXPECT_EQ(r.page_begin, g.page_begin);
      EXPECT_EQ(r.page_offset, g.page_offset);
      EXPECT_EQ(r.len, g.len);
      EXPECT_EQ(r.token_begin, tb);
      tb += g.len;
    }
  }
  for (size_t r = 0; r < p.rows.size(); ++r) {
    int32_t qs[2];
    std::memcpy(qs, buf.data() + L.rows_off + r * 8, 8);
    EXPECT_EQ(qs[0], p.rows[r].query);
    EXPECT_EQ(qs[1], p.rows[r].slot);
  }
  EXPECT_EQ(0, std::memcmp(buf.data() + L.page_ids_off, p.page_ids.data(), p.page_ids.size() * 4));
  EXPECT_EQ(0, std::memcmp(buf.data() + L.masks_off, p.masks.data(), p.masks.size() * 8));
  EXPECT_EQ(0, std::memcmp(buf.data() + L.merge_indptr_off, p.merge_indptr.data(),
                           p.merge_indptr.size() * 4));
  EXPECT_EQ(0, std::memcmp(buf.data() + L.merge_slots_off, p.merge_slots.data(),
                           p.merge_slots.size() * 4));
  // with headroom every class has spare slots: they hold empty items (num_rows 0), where the
  // kernels' CTAs exit
  const PlanLayout H = plan_layout(p, 2.0);
  std::vector<char> hb(H.metadata_bytes, 0x5a);
  pack_plan(p, H, hb.data());
  int64_t empty = 0;
  for (int c = 0; c < kNumTileClasses; ++c)
    for (int64_t j = p.class_begin[c + 1] - p.class_begin[c]; j < H.class_items[c]; ++j) {
      DeviceItem d;
      std::memcpy(&d, hb.data() + H.items_off + (H.class_item_off[c] + j) * sizeof(DeviceItem),
                  sizeof(d));
      EXPECT_EQ(d.num_rows, 0) << "class " << c << " slot " << j;
      ++empty;
    }
  EXPECT_GT(empty, 0);
}

// The (page, slot) of token `pos` of an item from its ranges and page ids (the plan's, or a
// record's own with its page_begin indexing `pages`).
std::pair<int32_t, int32_t> token_page_slot(const DeviceRange* ranges, int n, const int32_t* pages,
                                            int32_t pos, int32_t ps) {
  for (int j = 0; j < n; ++j)
    if (pos < ranges[j].token_begin + ranges[j].len) {
      const int32_t in = ranges[j].page_offset + pos - ranges[j].token_begin;
      return {pages[ranges[j].page_begin + in / ps], in % ps};
    }
  return {-1, -1};
}

// Every kM16 item's record holds the item, its rows, and ranges and page ids that find each of
// its first inline_tokens tokens where the plan's own arrays do; it covers the deep kM16
// prologue's 128 tokens (or the whole item) whenever the item's first ranges fit; each copied page
// id is listed with the copy's position, which a rewrite of the page id rewrites.
TEST(PlanLayout, RecordsMatchThePlan) {
  int checked = 0, covered = 0;
  for (int ps : {1, 2, 4, 16, 64}) {
    RandomTreeOptions ro;
    ro.page_size = ps;
    ro.max_tokens_per_node = 200;
    for (uint64_t seed = 1; seed <= 6; ++seed) {
      const PrefixTree t =
          seed == 1
              ? tree_from_levels(parse_levels("N=1,2,64 C=8,256,32 page=" + std::to_string(ps)))
              : random_tree(seed * 7 + ps, ro);
      for (const char* planner : {"query", "node", "flatten", "auto"}) {
        Plan p = make_plan(t, opts_for(planner, 8, 8, 128));
        const PlanLayout L = plan_layout(p, 1.5);
        ASSERT_EQ(L.record_bytes, record_bytes(ps));
        ASSERT_LE(L.page_ids_off + L.page_ids * 4, L.records_off);
        ASSERT_LE(L.records_off + L.class_items[0] * L.record_bytes, L.masks_off);
        std::vector<char> buf(L.metadata_bytes, 0x5a);
        pack_plan(p, L, buf.data());
        const std::vector<int32_t> copies = record_page_copies(L, buf.data());
        const auto* words = reinterpret_cast<const int32_t*>(buf.data() + L.page_ids_off);
        for (size_t c = 0; c < copies.size(); c += 2) {
          ASSERT_GE(copies[c + 1], L.page_ids) << c;
          EXPECT_EQ(words[copies[c + 1]], p.page_ids[copies[c]]) << c;
        }
        int64_t listed = 0;
        const auto* plan_ranges = reinterpret_cast<const DeviceRange*>(buf.data() + L.ranges_off);
        for (int64_t j = 0; j < L.class_items[0]; ++j) {
          const char* rec = buf.data() + L.records_off + j * L.record_bytes;
          DeviceRecordHead h;
          std::memcpy(&h, rec, sizeof(h));
          const int32_t i = p.class_begin[0] + static_cast<int32_t>(j);
          if (i >= p.class_begin[1]) {  // a spare slot: an empty item
            EXPECT_EQ(h.item.num_rows, 0);
            continue;
          }
          const WorkItem& it = p.items[i];
          EXPECT_EQ(h.item.row_begin, it.row_begin);
          EXPECT_EQ(h.item.num_rows, it.num_rows);
          EXPECT_EQ(h.item.range_begin, it.range_begin);
          EXPECT_EQ(h.item.num_ranges, it.num_ranges);
          EXPECT_EQ(h.item.mask_begin, it.mask_begin);
          EXPECT_EQ(h.item.kv_tokens, it.kv_tokens);
          for (int32_t r = 0; r < it.num_rows; ++r) {
            int32_t qs[2];
            std::memcpy(qs, rec + kRecordRowsOff + 8 * r, 8);
            EXPECT_EQ(qs[0], p.rows[it.row_begin + r].query);
            EXPECT_EQ(qs[1], p.rows[it.row_begin + r].slot);
          }
          ASSERT_LE(h.inline_ranges, std::min(it.num_ranges, kRecordRanges));
          ASSERT_LE(h.inline_tokens, it.kv_tokens);
          DeviceRange rr[kRecordRanges];
          std::memcpy(rr, rec + kRecordRangesOff, sizeof(rr));
          const auto* pages = reinterpret_cast<const int32_t*>(rec + kRecordPagesOff);
          int used = 0;
          for (int k = 0; k < h.inline_ranges; ++k) {
            const KvRange& g = p.ranges[it.range_begin + k];
            EXPECT_EQ(rr[k].page_offset, g.page_offset);
            EXPECT_EQ(rr[k].len, g.len);
            EXPECT_EQ(rr[k].token_begin, plan_ranges[it.range_begin + k].token_begin);
            EXPECT_EQ(rr[k].page_begin, used);
            used += std::min<int>((g.page_offset + g.len + ps - 1) / ps, record_pages(ps) - used);
          }
          listed += used;
          for (int32_t pos = 0; pos < h.inline_tokens; ++pos) {
            const auto a = token_page_slot(rr, h.inline_ranges, pages, pos, ps);
            const auto b = token_page_slot(plan_ranges + it.range_begin, it.num_ranges,
                                           p.page_ids.data(), pos, ps);
            ASSERT_EQ(a, b) << planner << " page " << ps << " item " << i << " token " << pos;
          }
          if (it.num_ranges <= kRecordRanges) {
            const int32_t want = std::min(it.kv_tokens, 128);
            // a range's pages cut at the record's capacity still cover 128 tokens, as
            // record_pages' static_assert promises
            EXPECT_GE(h.inline_tokens, want) << planner << " page " << ps << " item " << i;
          }
          covered += h.inline_tokens > 0;
          ++checked;
        }
        EXPECT_EQ(static_cast<int64_t>(copies.size()), 2 * listed);
      }
    }
  }
  EXPECT_GT(checked, 200);
  EXPECT_EQ(covered, checked);
}

TEST(PlanLayout, HeadroomAndCapacityErrors) {
  const PrefixTree small = small_tree();
  const PrefixTree big = tree_from_levels(parse_levels("N=1,16 C=64,40"));
  const Plan ps = make_plan(small, opts_for("node"));
  const Plan pb = make_plan(big, opts_for("node"));
  const PlanLayout L = plan_layout(ps);
  std::vector<char> buf(L.metadata_bytes);
  EXPECT_THROW(pack_plan(pb, L, buf.data()), std::invalid_argument);
  const PlanLayout H = plan_layout(ps, 1.5);
  EXPECT_GE(H.rows, static_cast<int64_t>(ps.rows.size() * 1.5));
  EXPECT_GE(H.slots, static_cast<int64_t>(ps.num_slots * 1.5));
  EXPECT_GE(H.total_bytes, L.total_bytes);
  // the kernel configs come from the planned counts, the same for every headroom
  EXPECT_EQ(H.m16_items_planned, L.m16_items_planned);
  EXPECT_EQ(L.m16_items_planned, ps.class_begin[1] - ps.class_begin[0]);
  EXPECT_THROW(plan_layout(ps, 0.5), std::invalid_argument);
  // A layout sized for the big plan holds the small one.
  const PlanLayout B = plan_layout(pb, 1.0);
  std::vector<char> bb(B.metadata_bytes);
  EXPECT_NO_THROW(pack_plan(ps, B, bb.data()));
}

TEST(PlanLayout, PlannedCountsPerClass) {
  // a root shared by 64 queries x 4 heads (kM128 items), 4 nodes of 16 queries (kM64), leaves
  const PrefixTree t = tree_from_levels(parse_levels("N=1,4,64 C=600,40,5"));
  const Plan p = make_plan(t, opts_for("node", 32, 8, 128));
  for (double headroom : {1.0, 2.5}) {
    const PlanLayout L = plan_layout(p, headroom);
    for (int c = 0; c < kNumTileClasses; ++c) {
      int64_t tokens = 0;
      for (int32_t i = p.class_begin[c]; i < p.class_begin[c + 1]; ++i)
        tokens += p.items[i].kv_tokens;
      EXPECT_EQ(L.class_items_planned[c], p.class_begin[c + 1] - p.class_begin[c]) << c;
      EXPECT_EQ(L.class_kv_tokens_planned[c], tokens) << c;
      EXPECT_GT(L.class_items_planned[c], 0) << "the tree must give items of every class";
    }
    EXPECT_EQ(L.m16_items_planned, L.class_items_planned[0]);
    // the merge counts: queries with a merge list (every query here) and all their slots
    EXPECT_EQ(L.merge_queries_planned, t.num_queries());
    EXPECT_EQ(L.merge_slots_planned, static_cast<int64_t>(p.merge_slots.size()));
  }
  // an existing layout takes a later plan's counts
  PlanLayout L = plan_layout(p);
  const Plan small = make_plan(small_tree(), opts_for("node", 32, 8, 128));
  const PlanLayout S = plan_layout(small);
  ASSERT_NE(L.class_kv_tokens_planned[0], S.class_kv_tokens_planned[0]);
  set_planned_counts(small, &L);
  for (int c = 0; c < kNumTileClasses; ++c) {
    EXPECT_EQ(L.class_items_planned[c], S.class_items_planned[c]) << c;
    EXPECT_EQ(L.class_kv_tokens_planned[c], S.class_kv_tokens_planned[c]) << c;
  }
  EXPECT_EQ(L.m16_items_planned, S.m16_items_planned);
  EXPECT_EQ(L.merge_queries_planned, S.merge_queries_planned);
  EXPECT_EQ(L.merge_slots_planned, S.merge_slots_planned);
  // class ranges outside the items are refused, naming the plan
  Plan bad = p;
  bad.class_begin[kNumTileClasses] = static_cast<int32_t>(bad.items.size()) + 1;
  try {
    set_planned_counts(bad, &L);
    FAIL() << "expected std::invalid_argument";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("plan"), std::string::npos) << e.what();
  }
  EXPECT_THROW(set_planned_counts(p, nullptr), std::invalid_argument);
}

TEST(TilePolicy, WsPaysOffOnlyWhereRunOneSawItWin) {
  constexpr int kSms = 132;  // H100
  // kM128: 16 items of one 128-token tile lost (N=1,256 C=256,32 32/8); 544-2080 tokens won
  EXPECT_FALSE(tile::ws_pays_off(2, 16, 16 * 128, 64, 8, kSms));
  EXPECT_TRUE(tile::ws_pays_off(2, 16, 16 * 544, 512, 8, kSms));
  EXPECT_TRUE(tile::ws_pays_off(2, 8, 8 * 2048, 0, 32, kSms));  // more CTAs than SMs: still
  // kM64 beyond one CTA per SM lost ~3 us per wave, long items too (N=1,1024 C=2048,32 32/8)
  EXPECT_FALSE(tile::ws_pays_off(1, 64, 64 * 2048, 1024, 8, kSms));
  EXPECT_FALSE(tile::ws_pays_off(1, 32, 32 * 704, 512, 8, kSms));
  // one wave of items of >= 4 tiles beside a wide kM16 launch won (N=1,4,256 C=8,256,32 32/8)
  EXPECT_TRUE(tile::ws_pays_off(1, 16, 16 * 264, 256, 8, kSms));
  EXPECT_TRUE(tile::ws_pays_off(1, 16, 16 * 264, 0, 8, kSms));  // no kM16 launch
  // ... but not 160-token items (N=1,16,64 C=1024,256,32 16/1), nor beside a deep kM16 launch of
  // long items (N=1,10 C=4000,400 32/8: 80 kM16 CTAs)
  EXPECT_FALSE(tile::ws_pays_off(1, 128, 128 * 160, 64, 1, kSms));
  EXPECT_FALSE(tile::ws_pays_off(1, 9, 9 * 444, 10, 8, kSms));
  // the threshold is the average over the class; kM16 and unknown classes never
  EXPECT_FALSE(tile::ws_pays_off(1, 16, 16 * tile::kWsMinTokensPerItem - 1, 0, 8, kSms));
  EXPECT_TRUE(tile::ws_pays_off(1, 16, 16 * tile::kWsMinTokensPerItem, 0, 8, kSms));
  EXPECT_FALSE(tile::ws_pays_off(0, 16, 16 * 4096, 0, 8, kSms));
  EXPECT_FALSE(tile::ws_pays_off(3, 16, 16 * 4096, 0, 8, kSms));
  EXPECT_FALSE(tile::ws_pays_off(2, 0, 0, 0, 8, kSms));
}

TEST(TilePolicy, DeepMergeForFewQueriesOrLongLists) {
  constexpr int kSms = 132;  // H100
  // what the A/B on one H100 saw (bench/results/h100-2026-11-25-merge-summary.txt): deep won on
  // chains (16 queries x 33 slots) and on 10 queries under a split 4k root; wide on 1024 queries
  // of 6 slots at 16 heads (1024 wide CTAs: deep gave 4096 and lost 17%)
  EXPECT_TRUE(tile::use_deep_merge(16, 16 * 33, 16, 128, kSms));
  EXPECT_TRUE(tile::use_deep_merge(10, 10 * 9, 32, 128, kSms));
  EXPECT_FALSE(tile::use_deep_merge(1024, 1024 * 6, 16, 128, kSms));
  // long lists take the deep merge whatever the CTA count; none without merged queries
  EXPECT_TRUE(tile::use_deep_merge(4096, 4096 * tile::kDeepMergeSlots, 32, 128, kSms));
  EXPECT_FALSE(tile::use_deep_merge(4096, 4096 * tile::kDeepMergeSlots - 1, 32, 128, kSms));
  EXPECT_FALSE(tile::use_deep_merge(0, 0, 32, 128, kSms));
  // heads a merge CTA covers: 256 / split pairs of head_dim / 8 chunks
  EXPECT_EQ(tile::merge_heads_per_cta(128, tile::kMergeSplitWide), 16);
  EXPECT_EQ(tile::merge_heads_per_cta(128, tile::kMergeSplitDeep), 4);
  EXPECT_EQ(tile::merge_heads_per_cta(256, tile::kMergeSplitDeep), 2);
  EXPECT_EQ(tile::merge_heads_per_cta(64, tile::kMergeSplitWide), 32);
}

TEST(TilePolicy, KM16PairsOnlyWhereSmsAreSpareAndItemsLong) {
  constexpr int kSms = 132;  // H100
  // the smallest FastTree line's query plan: 64 CTAs of 296 tokens (5 tiles) pair
  EXPECT_TRUE(tile::use_pair_m16(64, 64, 64 * 296, kSms, 128));
  EXPECT_TRUE(tile::use_pair_m16(66, 66, 66 * 128, kSms, 64));
  // no SM to spare for the second CTA, items of under two tiles on average, head_dim 256
  EXPECT_FALSE(tile::use_pair_m16(67, 67, 67 * 296, kSms, 128));
  EXPECT_FALSE(tile::use_pair_m16(64, 64, 64 * 128 - 1, kSms, 128));
  EXPECT_FALSE(tile::use_pair_m16(8, 8, 8 * 1024, kSms, 256));
  EXPECT_FALSE(tile::use_pair_m16(0, 0, 0, kSms, 128));
}

TEST(GraphReserve, HoldsEveryQueryPlanWithinTheBound) {
  // random block tables (rows share a random page prefix of an earlier row, then own pages) of
  // at most R rows and P pages: the query planner's plan of every one fits graph_reserve(R, P)
  std::mt19937 rng(5);
  for (const auto& [heads, kv] : {std::pair{32, 8}, std::pair{16, 1}, std::pair{8, 8}})
    for (int64_t R : {1, 3, 16, 70})
      for (int64_t P : {1, 5, 40, 300})
        for (int32_t page_size : {1, 16}) {
          PlanOptions o = opts_for("query", heads, kv, 128);
          o.device = device_preset("h100");
          const LayoutReserve r = graph_reserve(o, R, P, page_size);
          for (int trial = 0; trial < 3; ++trial) {
            const int64_t rows = 1 + static_cast<int64_t>(rng() % R);
            std::vector<std::vector<int32_t>> bt;
            std::vector<int64_t> lens;
            int32_t next_page = 0;
            for (int64_t i = 0; i < rows; ++i) {
              const int64_t pages = 1 + static_cast<int64_t>(rng() % P);
              std::vector<int32_t> row;
              if (i > 0 && rng() % 2) {  // share a full-page prefix of an earlier row
                const auto& src = bt[rng() % bt.size()];
                const int64_t keep = std::min<int64_t>(pages - 1, src.size() - 1);
                row.assign(src.begin(), src.begin() + std::max<int64_t>(0, keep));
              }
              while (static_cast<int64_t>(row.size()) < pages) row.push_back(next_page++);
              bt.push_back(row);
              lens.push_back((pages - 1) * page_size + 1 + static_cast<int64_t>(rng() % page_size));
            }
            const PrefixTree t = tree_from_block_tables(bt, lens, page_size, next_page);
            const Plan p = make_plan(t, o);
            SCOPED_TRACE(::testing::Message() << heads << "/" << kv << " R=" << R << " P=" << P
                                              << " page=" << page_size << " rows=" << rows);
            for (int c = 0; c < kNumTileClasses; ++c)
              EXPECT_LE(p.class_begin[c + 1] - p.class_begin[c], r.class_items[c]) << c;
            EXPECT_LE(static_cast<int64_t>(p.rows.size()), r.rows);
            EXPECT_LE(static_cast<int64_t>(p.ranges.size()), r.ranges);
            EXPECT_LE(static_cast<int64_t>(p.page_ids.size()), r.page_ids);
            EXPECT_LE(static_cast<int64_t>(p.masks.size()), r.masks);
            EXPECT_LE(p.num_slots, r.slots);
            EXPECT_LE(p.shape.num_queries, r.queries);
            // the layout of any plan reserved with it holds the query plan
            const Plan small = make_plan(
                tree_from_levels(parse_levels("N=1 C=1 page=" + std::to_string(page_size))), o);
            const PlanLayout L = plan_layout(small, 1.0, &r);
            EXPECT_TRUE(plan_fits(p, L));
          }
        }
  PlanOptions o = opts_for("query");
  EXPECT_THROW(graph_reserve(o, 0, 4, 16), std::invalid_argument);
  EXPECT_THROW(graph_reserve(o, 4, 0, 16), std::invalid_argument);
  EXPECT_THROW(graph_reserve(o, 4, 4, 0), std::invalid_argument);
  EXPECT_THROW(graph_reserve(o, 1 << 20, 1 << 20, 16), std::invalid_argument);
  try {  // 2^29 rows x 8 plan rows each pass 2^31-1: named rows, not pages_per_row
    graph_reserve(o, int64_t{1} << 29, 1, 16);
    FAIL() << "expected std::invalid_argument";
  } catch (const std::invalid_argument& e) {
    EXPECT_EQ(std::string(e.what()).rfind("rows", 0), 0u) << e.what();
  }
}

TEST(CostModel, MonotoneAndSane) {
  const DeviceInfo dev = device_preset("h200");
  PlanShape s;
  double prev = 0;
  for (int64_t kv : {64, 256, 1024, 4096, 65536}) {
    const ItemCost c = estimate_item(dev, s, TileClass::kM16, 4, kv, false);
    EXPECT_GT(c.us, prev);
    EXPECT_GT(c.bytes, 0);
    EXPECT_GE(c.us, dev.item_overhead_us);
    prev = c.us;
  }
  const ItemCost a = estimate_item(dev, s, TileClass::kM64, 32, 4096, false);
  const ItemCost b = estimate_item(dev, s, TileClass::kM64, 64, 4096, false);
  const ItemCost pa = estimate_item(dev, s, TileClass::kM64, 32, 4096, true);
  EXPECT_LE(a.us, b.us);
  EXPECT_LT(a.flops, b.flops);
  EXPECT_GT(pa.bytes, a.bytes);
  // kM16 pads to 16 rows: 4 and 16 rows issue the same FLOPs.
  EXPECT_EQ(estimate_item(dev, s, TileClass::kM16, 4, 512, false).flops,
            estimate_item(dev, s, TileClass::kM16, 16, 512, false).flops);

  const PrefixTree t = tree_from_levels(parse_levels("N=1,32 C=2048,64"));
  PlanOptions o = opts_for("node", 32, 8, 128);
  const Plan p = make_plan(t, o);
  const double h200 = estimate_plan_us(device_preset("h200"), p);
  const double a100 = estimate_plan_us(device_preset("a100"), p);
  EXPECT_GT(h200, 0);
  EXPECT_LT(h200, a100);
  EXPECT_EQ(h200, estimate_plan_us(device_preset("h200"), p));  // deterministic
  const PrefixTree t2 = tree_from_levels(parse_levels("N=1,32 C=8192,64"));
  EXPECT_LT(h200, estimate_plan_us(device_preset("h200"), make_plan(t2, o)));
  const PlanStats st = plan_stats(t, p, dev);
  EXPECT_EQ(st.redundant_kv_bytes, 0);  // 32 queries x group 4 fit one item per node
  EXPECT_EQ(st.kv_bytes_read, unique_tokens(t) * 8 * 128 * 2 * 2);
  EXPECT_GE(st.padding_fraction, 0.0);
  EXPECT_LT(st.padding_fraction, 1.0);
  EXPECT_EQ(st.ctas, st.items * 8);
  const PlanStats sq = plan_stats(t, make_plan(t, opts_for("query", 32, 8, 128)), dev);
  EXPECT_GT(sq.redundant_kv_bytes, 0);  // query-centric re-reads the shared prefix
}

TEST(DeviceInfo, Presets) {
  EXPECT_EQ(device_preset("A100").num_sms, 108);
  EXPECT_EQ(device_preset("h100").num_sms, 132);
  EXPECT_DOUBLE_EQ(device_preset("h100").hbm_read_GBps, 3040.0);
  EXPECT_DOUBLE_EQ(device_preset("h200").hbm_read_GBps, 4500.0);
  EXPECT_EQ(device_preset("a100").smem_per_sm_bytes, 164 * 1024);
  try {
    device_preset("v100");
    ADD_FAILURE() << "no throw";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("device"), std::string::npos);
  }
}

void expect_arg_error(const PrefixTree& t, const PlanOptions& o, const std::string& name) {
  try {
    make_plan(t, o);
    ADD_FAILURE() << "no throw for " << name;
  } catch (const std::invalid_argument& e) {
    EXPECT_EQ(std::string(e.what()).rfind(name, 0), 0u) << e.what();
  }
}

TEST(MakePlan, ArgumentErrorsNameTheArgument) {
  const PrefixTree t = small_tree();
  expect_arg_error(t, opts_for("nope"), "planner");
  expect_arg_error(t, opts_for("node", 0, 1), "num_qo_heads");
  expect_arg_error(t, opts_for("node", 8, 0), "num_kv_heads");
  expect_arg_error(t, opts_for("node", 8, 3), "num_kv_heads");
  expect_arg_error(t, opts_for("node", 8, 2, 96), "head_dim");
  expect_arg_error(t, opts_for("node", 256, 1), "num_qo_heads");
  EXPECT_EQ(planner_names().size(), 10u);
  EXPECT_EQ(planner_names()[0], "query");
}

TEST(MakePlanOptions, ConvertsTheArgumentsAndNamesTheBadOne) {
  const DeviceInfo h100 = device_preset("h100");
  const PlanOptions o = make_plan_options("pat", 16, 4, 256, h100, 4);
  EXPECT_EQ(o.planner, "pat");
  EXPECT_EQ(o.num_qo_heads, 16);
  EXPECT_EQ(o.num_kv_heads, 4);
  EXPECT_EQ(o.head_dim, 256);
  EXPECT_EQ(o.dtype_bytes, 4);
  EXPECT_EQ(o.device.name, h100.name);
  EXPECT_EQ(o.device.tile_latency_us, h100.tile_latency_us);
  const PlanOptions d = make_plan_options("node", 8, 2, 64);  // PlanOptions' own defaults
  EXPECT_EQ(d.dtype_bytes, PlanOptions().dtype_bytes);
  EXPECT_EQ(d.device.hbm_read_GBps, PlanOptions().device.hbm_read_GBps);
  const PrefixTree t = small_tree();
  EXPECT_EQ(make_plan(t, d).items.size(), make_plan(t, opts_for("node")).items.size());
  auto expect_names = [](const std::function<void()>& fn, const std::string& name) {
    try {
      fn();
      ADD_FAILURE() << "no throw for " << name;
    } catch (const std::invalid_argument& e) {
      EXPECT_EQ(std::string(e.what()).rfind(name, 0), 0u) << e.what();
    }
  };
  expect_names([] { make_plan_options("nope", 8, 2, 64); }, "planner");
  expect_names([] { make_plan_options("node", 0, 1, 64); }, "num_qo_heads");
  expect_names([] { make_plan_options("node", 8, 3, 64); }, "num_kv_heads");
  expect_names([] { make_plan_options("node", 256, 1, 64); }, "num_qo_heads");
  expect_names([] { make_plan_options("node", 8, 2, 96); }, "head_dim");
  expect_names([] { make_plan_options("node", 8, 2, 64, DeviceInfo(), 3); }, "dtype_bytes");
  for (const int32_t g : {-1, kMaxMaskedRows + 1, INT32_MAX}) {
    PlanOptions bad = make_plan_options("paths", 8, 2, 64);
    bad.paths_group = g;
    expect_names([&] { validate_plan_options(bad); }, "paths_group");
    expect_names([&] { make_plan(t, bad); }, "paths_group");
  }
  DeviceInfo broken = h100;
  broken.num_sms = 0;
  expect_names([&] { make_plan_options("node", 8, 2, 64, broken); }, "device.num_sms");
}

TEST(Half, Fp16RoundTripAndRounding) {
  for (uint32_t b = 0; b < 65536; ++b) {
    const uint16_t h = static_cast<uint16_t>(b);
    if ((h & 0x7c00) == 0x7c00 && (h & 0x3ff)) continue;  // NaN
    ASSERT_EQ(float_to_half_bits(half_bits_to_float(h)), h) << b;
  }
  EXPECT_EQ(round_to_fp16(65504.f), 65504.f);
  EXPECT_TRUE(std::isinf(round_to_fp16(65520.f)));
  EXPECT_EQ(round_to_fp16(65519.f), 65504.f);
  EXPECT_EQ(round_to_fp16(1.f + std::ldexp(1.f, -11)), 1.f);  // tie to even
  EXPECT_EQ(round_to_fp16(1.f + 3 * std::ldexp(1.f, -11)), 1.f + std::ldexp(1.f, -9));
  EXPECT_EQ(round_to_fp16(std::ldexp(1.f, -25)), 0.f);  // tie to even (0)
  EXPECT_EQ(round_to_fp16(3 * std::ldexp(1.f, -26)), std::ldexp(1.f, -24));
  EXPECT_EQ(round_to_fp16(-0.333333f), -0.33325195f);
  EXPECT_TRUE(std::isnan(round_to_fp16(NAN)));
  EXPECT_EQ(round_to_bf16(1.f + std::ldexp(1.f, -8)), 1.f);
  EXPECT_EQ(round_to_bf16(1.f + 3 * std::ldexp(1.f, -8)), 1.f + std::ldexp(1.f, -6));
  EXPECT_TRUE(std::isnan(round_to_bf16(NAN)));
  for (uint32_t b = 0; b < 65536; b += 7) {
    const uint16_t h = static_cast<uint16_t>(b);
    if ((h & 0x7f80) == 0x7f80 && (h & 0x7f)) continue;
    ASSERT_EQ(float_to_bf16_bits(bf16_bits_to_float(h)), h);
  }
}

}  // namespace
}  // namespace treeattn
