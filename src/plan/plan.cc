// Plan core: tile-class selection, internal-consistency validation of a Plan (no tree needed),
// and finalize_plan() (sort items by tile class, fill class_begin) that every planner calls last.
#include "treeattn/plan/plan.h"

#include <algorithm>
#include <stdexcept>
#include <vector>

#include "treeattn/common/error.h"

namespace treeattn {

TileClass tile_class_for_rows(int32_t packed_rows) {
  TA_CHECK_ARG(packed_rows >= 1 && packed_rows <= 128, "packed_rows", "must be in [1, 128], got ",
               packed_rows);
  if (packed_rows <= 16) return TileClass::kM16;
  if (packed_rows <= 64) return TileClass::kM64;
  return TileClass::kM128;
}

void finalize_plan(Plan* plan) {
  TA_CHECK_ARG(plan != nullptr, "plan", "null");
  plan->version = kPlanVersion;
  // Class first (one launch per class); inside a class longest KV first so the GPU's block
  // scheduler sees the big CTAs early (a cheap LPT). Stable: ties keep the planner's order.
  const auto before = [](const WorkItem& a, const WorkItem& b) {
    if (a.tile != b.tile) return a.tile < b.tile;
    return a.kv_tokens > b.kv_tokens;
  };
  if (!std::is_sorted(plan->items.begin(), plan->items.end(), before))
    std::stable_sort(plan->items.begin(), plan->items.end(), before);
  for (int c = 0; c <= kNumTileClasses; ++c) plan->class_begin[c] = 0;
  for (const WorkItem& it : plan->items) ++plan->class_begin[static_cast<int>(it.tile) + 1];
  for (int c = 0; c < kNumTileClasses; ++c) plan->class_begin[c + 1] += plan->class_begin[c];
}

void validate_plan(const Plan& plan) {
  const PlanShape& s = plan.shape;
  TA_CHECK_INTERNAL(plan.version == kPlanVersion, "plan version ", plan.version);
  TA_CHECK_INTERNAL(s.num_queries >= 0 && s.num_qo_heads >= 1 && s.num_kv_heads >= 1 &&
                        s.num_qo_heads % s.num_kv_heads == 0 && s.head_dim >= 1 &&
                        s.page_size >= 1 && s.dtype_bytes >= 1 && s.kv_dtype_bytes >= 1,
                    "bad plan shape");
  const int64_t group = s.group();
  const int64_t nitems = static_cast<int64_t>(plan.items.size());
  const int64_t nrows = static_cast<int64_t>(plan.rows.size());
  const int64_t nranges = static_cast<int64_t>(plan.ranges.size());
  const int64_t npages = static_cast<int64_t>(plan.page_ids.size());
  const int64_t nmasks = static_cast<int64_t>(plan.masks.size());

  // Classes: class_begin matches the items' tiles.
  TA_CHECK_INTERNAL(plan.class_begin[0] == 0 && plan.class_begin[kNumTileClasses] == nitems,
                    "class_begin does not span the items (call finalize_plan)");
  for (int c = 0; c < kNumTileClasses; ++c) {
    TA_CHECK_INTERNAL(plan.class_begin[c] <= plan.class_begin[c + 1], "class_begin not monotone");
    for (int32_t i = plan.class_begin[c]; i < plan.class_begin[c + 1]; ++i)
      TA_CHECK_INTERNAL(static_cast<int>(plan.items[i].tile) == c, "item ", i,
                        " is not in class_begin's class ", c);
  }

  for (const int32_t p : plan.page_ids) TA_CHECK_INTERNAL(p >= 0, "negative page id ", p);
  for (int64_t r = 0; r < nranges; ++r) {
    const KvRange& g = plan.ranges[r];
    TA_CHECK_INTERNAL(g.len >= 1, "range ", r, " has len ", g.len);
    TA_CHECK_INTERNAL(g.page_offset >= 0 && g.page_offset < s.page_size, "range ", r,
                      " page_offset ", g.page_offset);
    const int64_t pages =
        (static_cast<int64_t>(g.page_offset) + g.len + s.page_size - 1) / s.page_size;
    TA_CHECK_INTERNAL(g.page_begin >= 0 && g.page_begin + pages <= npages, "range ", r,
                      " pages out of page_ids");
  }

  // Items: their rows/ranges/masks in bounds, kv_tokens consistent, tile large enough.
  TA_CHECK_INTERNAL(plan.num_slots >= 0, "num_slots ", plan.num_slots);
  // One scratch buffer: per slot its writes, writer and merges; per query its final / slot rows.
  const size_t ns = static_cast<size_t>(plan.num_slots), nq = static_cast<size_t>(s.num_queries);
  std::vector<int32_t> scratch(3 * ns + 2 * nq, 0);
  int32_t* const slot_writes = scratch.data();
  int32_t* const slot_owner = slot_writes + ns;
  int32_t* const merged = slot_owner + ns;
  int32_t* const final_rows = merged + ns;
  int32_t* const slot_rows = final_rows + nq;
  std::fill(slot_owner, slot_owner + ns, -1);
  for (int64_t i = 0; i < nitems; ++i) {
    const WorkItem& it = plan.items[i];
    TA_CHECK_INTERNAL(it.num_rows >= 1 && it.row_begin >= 0 && it.row_begin + it.num_rows <= nrows,
                      "item ", i, " rows out of range");
    TA_CHECK_INTERNAL(
        it.num_ranges >= 1 && it.range_begin >= 0 && it.range_begin + it.num_ranges <= nranges,
        "item ", i, " ranges out of range");
    TA_CHECK_INTERNAL(it.num_rows * group <= tile_rows(it.tile), "item ", i, " has ",
                      it.num_rows * group, " packed rows, more than its tile class holds");
    int64_t kv = 0;
    for (int32_t j = 0; j < it.num_ranges; ++j) kv += plan.ranges[it.range_begin + j].len;
    TA_CHECK_INTERNAL(kv == it.kv_tokens, "item ", i, " kv_tokens ", it.kv_tokens,
                      " != sum of range lengths ", kv);
    TA_CHECK_INTERNAL(it.private_tokens >= 0 && it.private_tokens <= it.kv_tokens, "item ", i,
                      " private_tokens ", it.private_tokens, " outside [0, kv_tokens]");
    if (it.mask_begin >= 0) {
      TA_CHECK_INTERNAL(it.num_rows <= kMaxMaskedRows, "masked item ", i, " has ", it.num_rows,
                        " rows");
      TA_CHECK_INTERNAL(it.mask_begin + it.num_ranges <= nmasks, "item ", i, " masks out of range");
      const uint64_t valid = it.num_rows == 64 ? ~0ull : ((1ull << it.num_rows) - 1ull);
      for (int32_t j = 0; j < it.num_ranges; ++j)
        TA_CHECK_INTERNAL((plan.masks[it.mask_begin + j] & ~valid) == 0, "item ", i,
                          " mask has bits beyond its rows");
    } else {
      TA_CHECK_INTERNAL(it.mask_begin == -1, "item ", i, " mask_begin ", it.mask_begin);
    }
    for (int32_t r = 0; r < it.num_rows; ++r) {
      const PlanRow& row = plan.rows[it.row_begin + r];
      TA_CHECK_INTERNAL(row.query >= 0 && row.query < s.num_queries, "row query ", row.query,
                        " out of range");
      if (row.slot == kFinalOutput) {
        ++final_rows[row.query];
      } else {
        TA_CHECK_INTERNAL(row.slot >= 0 && row.slot < plan.num_slots, "row slot ", row.slot,
                          " out of range");
        TA_CHECK_INTERNAL(++slot_writes[row.slot] == 1, "slot ", row.slot, " written twice");
        slot_owner[row.slot] = row.query;
        ++slot_rows[row.query];
      }
    }
  }
  for (int32_t sl = 0; sl < plan.num_slots; ++sl)
    TA_CHECK_INTERNAL(slot_writes[sl] == 1, "slot ", sl, " is never written");

  // Merge lists: per query exactly one final row and no merge list, or >= 1 slot rows and a merge
  // list naming exactly the slots those rows write.
  TA_CHECK_INTERNAL(static_cast<int64_t>(plan.merge_indptr.size()) == s.num_queries + 1,
                    "merge_indptr size ", plan.merge_indptr.size());
  TA_CHECK_INTERNAL(plan.merge_indptr[0] == 0 && plan.merge_indptr[s.num_queries] ==
                                                     static_cast<int64_t>(plan.merge_slots.size()),
                    "merge_indptr does not span merge_slots");
  for (int32_t q = 0; q < s.num_queries; ++q) {
    const int32_t b = plan.merge_indptr[q], e = plan.merge_indptr[q + 1];
    TA_CHECK_INTERNAL(b <= e, "merge_indptr not monotone at query ", q);
    if (final_rows[q] > 0) {
      TA_CHECK_INTERNAL(final_rows[q] == 1 && slot_rows[q] == 0 && b == e, "query ", q,
                        " has a final-output row and other rows or a merge list");
      continue;
    }
    TA_CHECK_INTERNAL(slot_rows[q] >= 1, "query ", q, " has no row");
    TA_CHECK_INTERNAL(e - b == slot_rows[q], "query ", q, " merges ", e - b, " slots but has ",
                      slot_rows[q], " partial rows");
    for (int32_t k = b; k < e; ++k) {
      const int32_t sl = plan.merge_slots[k];
      TA_CHECK_INTERNAL(sl >= 0 && sl < plan.num_slots, "merge slot ", sl, " out of range");
      TA_CHECK_INTERNAL(slot_owner[sl] == q, "query ", q, " merges slot ", sl,
                        " written for query ", slot_owner[sl]);
      TA_CHECK_INTERNAL(++merged[sl] == 1, "slot ", sl, " merged twice");
    }
  }
}

}  // namespace treeattn
