// Device-side layout of a plan: plan_layout() computes every buffer's capacity and 256-byte
// aligned offset plus the workspace size in one place; pack_plan() writes the plan's metadata
// into host memory in exactly that layout (the caller copies [0, metadata_bytes) to the device);
// plan_fits() says whether a later plan can reuse a layout.
//
// Workspace, in order (each array starts on a 256-byte boundary):
//   DeviceItem   [items]       class c at [class_item_off[c], + class_items[c]), zero-padded
//   int32 x 2    [rows]        (query, slot) per PlanRow
//   DeviceRange  [ranges]      token_begin = prefix sum of len within the range's item
//   int32        [page_ids]
//   records      [class_items[0]] record_bytes each: the kM16 items' records (DeviceRecordHead),
//                                 after the page ids so that a copy's position counted from them
//                                 is positive (resolve_pages rewrites copies like page ids)
//   uint64       [masks]
//   int32        [queries + 1] merge_indptr
//   int32        [slots]       merge_slots (each slot is merged exactly once)
//   --- metadata_bytes ---
//   fp32         [slots, num_qo_heads, head_dim]  partial_o (the dtype in its first half under
//                                                  PartialPrecision::kHalf)
//   fp32         [slots, num_qo_heads]            partial_lse
#include "treeattn/plan/layout.h"

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdint>
#include <cstring>

#include "treeattn/common/error.h"

namespace treeattn {
namespace {

constexpr int64_t kAlign = 256;
int64_t align_up(int64_t x) { return (x + kAlign - 1) / kAlign * kAlign; }
// Capacities index int32 device arrays: a headroom that scales one past 2^31 - 1 is refused
// (also keeps the conversion from double defined).
constexpr double kMaxCapacity = 2147483647.0;
int64_t scaled(int64_t n, double headroom) {
  const double c = std::ceil(static_cast<double>(n) * headroom - 1e-9);
  TA_CHECK_ARG(c <= kMaxCapacity, "headroom", headroom, " scales a capacity of ", n, " to ", c,
               ", above the limit 2^31-1 of the device layout");
  return static_cast<int64_t>(c);
}

// Page ids a record copies of a range (page_offset, len) when `used` of its record_pages(ps) are
// taken: all the range's pages, or as many as are left.
int32_t record_range_pages(int32_t page_offset, int32_t len, int32_t used, int32_t ps) {
  return std::min((page_offset + len + ps - 1) / ps, record_pages(ps) - used);
}

// The kM16 items' records (DeviceRecordHead in layout.h): the item, its rows, and its first ranges
// with their page ids while the record has room; a range that does not fit whole is cut at a page.
void pack_records(const Plan& plan, const PlanLayout& layout, char* base) {
  const int32_t ps = plan.shape.page_size;
  TA_CHECK_ARG(layout.record_bytes == record_bytes(ps), "layout", "records of ",
               layout.record_bytes, " bytes, the page size ", ps, " wants ", record_bytes(ps));
  TA_CHECK_ARG((layout.metadata_bytes - layout.page_ids_off) / 4 <= INT32_MAX, "layout",
               "records beyond 2^31 words of the page ids");
  for (int32_t i = plan.class_begin[0]; i < plan.class_begin[1]; ++i) {
    const WorkItem& it = plan.items[i];
    TA_CHECK_ARG(it.num_rows <= kRecordRows, "plan", "kM16 item ", i, " has ", it.num_rows,
                 " rows, more than the ", kRecordRows, " of a kM16 tile");
    TA_CHECK_ARG(it.row_begin >= 0 && it.num_rows >= 0 &&
                     it.row_begin + static_cast<int64_t>(it.num_rows) <=
                         static_cast<int64_t>(plan.rows.size()) &&
                     it.range_begin >= 0 && it.num_ranges >= 0 &&
                     it.range_begin + static_cast<int64_t>(it.num_ranges) <=
                         static_cast<int64_t>(plan.ranges.size()),
                 "plan", "item ", i, "'s rows or ranges lie outside the plan's arrays");
    const int64_t rec_off = layout.records_off + (i - plan.class_begin[0]) * layout.record_bytes;
    char* rec = base + rec_off;
    DeviceRecordHead head{
        {it.row_begin, it.num_rows, it.range_begin, it.num_ranges, it.mask_begin, it.kv_tokens},
        0,
        0};
    auto* rows = reinterpret_cast<int32_t*>(rec + kRecordRowsOff);
    for (int32_t r = 0; r < it.num_rows; ++r) {
      rows[2 * r] = plan.rows[it.row_begin + r].query;
      rows[2 * r + 1] = plan.rows[it.row_begin + r].slot;
    }
    auto* pages = reinterpret_cast<int32_t*>(rec + kRecordPagesOff);
    int32_t tok = 0, used = 0;
    for (int32_t j = 0; j < std::min(it.num_ranges, kRecordRanges); ++j) {
      const KvRange& g = plan.ranges[it.range_begin + j];
      const int32_t take = record_range_pages(g.page_offset, g.len, used, ps);
      const int32_t covered =
          std::min<int64_t>(g.len, static_cast<int64_t>(take) * ps - g.page_offset);
      if (covered <= 0) break;
      TA_CHECK_ARG(g.page_begin >= 0 && g.page_begin + static_cast<int64_t>(take) <=
                                            static_cast<int64_t>(plan.page_ids.size()),
                   "plan", "range ", it.range_begin + j,
                   "'s pages lie outside the plan's page ids");
      const DeviceRange d{used, g.page_offset, g.len, tok};
      std::memcpy(rec + kRecordRangesOff + j * sizeof(DeviceRange), &d, sizeof(d));
      for (int32_t k = 0; k < take; ++k) pages[used + k] = plan.page_ids[g.page_begin + k];
      used += take;
      head.inline_ranges = j + 1;
      head.inline_tokens = tok + covered;
      if (covered < g.len) break;
      tok += g.len;
    }
    std::memcpy(rec, &head, sizeof(head));
  }
}

}  // namespace

PlanLayout plan_layout(const Plan& plan, double headroom, const LayoutReserve* reserve) {
  TA_CHECK_ARG(std::isfinite(headroom) && headroom >= 1.0, "headroom", "must be >= 1, got ",
               headroom);
  PlanLayout L;
  L.shape = plan.shape;
  const LayoutReserve none;
  const LayoutReserve& R = reserve != nullptr ? *reserve : none;
  auto at_least = [](int64_t n, int64_t floor) {
    TA_CHECK_ARG(floor >= 0 && floor <= static_cast<int64_t>(kMaxCapacity), "reserve", "capacity ",
                 floor, " is outside [0, 2^31-1]");
    return std::max(n, floor);
  };
  for (int c = 0; c < kNumTileClasses; ++c) {
    L.class_items[c] =
        at_least(scaled(plan.class_begin[c + 1] - plan.class_begin[c], headroom), R.class_items[c]);
    L.class_item_off[c] = L.items;
    L.items += L.class_items[c];
  }
  TA_CHECK_ARG(static_cast<double>(L.items) <= kMaxCapacity, "headroom", headroom,
               " makes the item capacity ", L.items, ", above the limit 2^31-1");
  set_planned_counts(plan, &L);
  L.rows = at_least(scaled(static_cast<int64_t>(plan.rows.size()), headroom), R.rows);
  L.ranges = at_least(scaled(static_cast<int64_t>(plan.ranges.size()), headroom), R.ranges);
  L.page_ids = at_least(scaled(static_cast<int64_t>(plan.page_ids.size()), headroom), R.page_ids);
  L.masks = at_least(scaled(static_cast<int64_t>(plan.masks.size()), headroom), R.masks);
  L.slots = at_least(scaled(plan.num_slots, headroom), R.slots);
  L.queries = at_least(scaled(plan.shape.num_queries, headroom), R.queries);
  L.num_qo_heads = plan.shape.num_qo_heads;
  L.head_dim = plan.shape.head_dim;

  int64_t off = 0;
  auto place = [&off](int64_t bytes) {
    const int64_t at = off;
    off = align_up(off + bytes);
    return at;
  };
  L.items_off = place(L.items * static_cast<int64_t>(sizeof(DeviceItem)));
  L.rows_off = place(L.rows * 2 * static_cast<int64_t>(sizeof(int32_t)));
  L.ranges_off = place(L.ranges * static_cast<int64_t>(sizeof(DeviceRange)));
  L.page_ids_off = place(L.page_ids * static_cast<int64_t>(sizeof(int32_t)));
  L.record_bytes = record_bytes(plan.shape.page_size);
  L.records_off = place(L.class_items[0] * L.record_bytes);
  L.masks_off = place(L.masks * static_cast<int64_t>(sizeof(uint64_t)));
  L.merge_indptr_off = place((L.queries + 1) * static_cast<int64_t>(sizeof(int32_t)));
  L.merge_slots_off = place(L.slots * static_cast<int64_t>(sizeof(int32_t)));
  L.metadata_bytes = off;
  // slots < 2^31 and heads x head_dim < 2^31 x 256: the products stay far below 2^63.
  TA_CHECK_ARG(static_cast<double>(L.slots) * L.num_qo_heads * L.head_dim * sizeof(float) < 0x1p60,
               "headroom", headroom, " makes the partial workspace ", L.slots, " slots x ",
               L.num_qo_heads, " heads x ", L.head_dim, " floats, too large");
  L.partial_o_off =
      place(L.slots * L.num_qo_heads * L.head_dim * static_cast<int64_t>(sizeof(float)));
  L.partial_lse_off = place(L.slots * L.num_qo_heads * static_cast<int64_t>(sizeof(float)));
  L.total_bytes = off;
  return L;
}

void set_planned_counts(const Plan& plan, PlanLayout* layout) {
  TA_CHECK_ARG(layout != nullptr, "layout", "null");
  for (int c = 0; c < kNumTileClasses; ++c)
    TA_CHECK_ARG(0 <= plan.class_begin[c] && plan.class_begin[c] <= plan.class_begin[c + 1] &&
                     plan.class_begin[c + 1] <= static_cast<int64_t>(plan.items.size()),
                 "plan", "class_begin[", c, "..", c + 1, "] = ", plan.class_begin[c], "..",
                 plan.class_begin[c + 1], " is not a range of its ", plan.items.size(), " items");
  for (int c = 0; c < kNumTileClasses; ++c) {
    layout->class_items_planned[c] = plan.class_begin[c + 1] - plan.class_begin[c];
    int64_t tokens = 0;
    for (int32_t i = plan.class_begin[c]; i < plan.class_begin[c + 1]; ++i)
      tokens += plan.items[i].kv_tokens;
    layout->class_kv_tokens_planned[c] = tokens;
  }
  layout->m16_items_planned = layout->class_items_planned[0];
  int64_t merged = 0;
  for (size_t q = 0; q + 1 < plan.merge_indptr.size(); ++q)
    merged += plan.merge_indptr[q + 1] > plan.merge_indptr[q];
  layout->merge_queries_planned = merged;
  layout->merge_slots_planned = static_cast<int64_t>(plan.merge_slots.size());
  layout->queries_planned = plan.shape.num_queries;
}

bool plan_fits(const Plan& plan, const PlanLayout& layout) {
  const PlanShape &a = layout.shape, &b = plan.shape;
  if (a.num_qo_heads != b.num_qo_heads || a.num_kv_heads != b.num_kv_heads ||
      a.head_dim != b.head_dim || a.page_size != b.page_size ||
      a.kv_dtype_bytes != b.kv_dtype_bytes)
    return false;
  const PlanLayout n = plan_layout(plan, 1.0);
  for (int c = 0; c < kNumTileClasses; ++c)
    if (n.class_items[c] > layout.class_items[c]) return false;
  return n.items <= layout.items && n.rows <= layout.rows && n.ranges <= layout.ranges &&
         n.page_ids <= layout.page_ids && n.masks <= layout.masks && n.slots <= layout.slots &&
         n.queries <= layout.queries;
}

void pack_plan(const Plan& plan, const PlanLayout& layout, void* host_metadata) {
  TA_CHECK_ARG(host_metadata != nullptr, "host_metadata", "null");
  const PlanShape& s = plan.shape;
  TA_CHECK_ARG(s.num_qo_heads == layout.num_qo_heads && s.head_dim == layout.head_dim, "layout",
               "laid out for ", layout.num_qo_heads, " qo heads x head_dim ", layout.head_dim,
               ", plan has ", s.num_qo_heads, " x ", s.head_dim);
  auto fits = [](const char* what, int64_t n, int64_t cap) {
    TA_CHECK_ARG(n <= cap, "layout", "plan has ", n, " ", what, ", capacity is ", cap);
  };
  for (int c = 0; c < kNumTileClasses; ++c)
    fits("items of a tile class", plan.class_begin[c + 1] - plan.class_begin[c],
         layout.class_items[c]);
  fits("rows", static_cast<int64_t>(plan.rows.size()), layout.rows);
  fits("ranges", static_cast<int64_t>(plan.ranges.size()), layout.ranges);
  fits("page ids", static_cast<int64_t>(plan.page_ids.size()), layout.page_ids);
  fits("masks", static_cast<int64_t>(plan.masks.size()), layout.masks);
  fits("slots", plan.num_slots, layout.slots);
  fits("merge slots", static_cast<int64_t>(plan.merge_slots.size()), layout.slots);
  fits("queries", s.num_queries, layout.queries);
  TA_CHECK_ARG(static_cast<int64_t>(plan.merge_indptr.size()) == s.num_queries + 1, "plan",
               "merge_indptr has ", plan.merge_indptr.size(), " entries for ", s.num_queries,
               " queries");

  char* base = static_cast<char*>(host_metadata);
  std::memset(base, 0, static_cast<size_t>(layout.metadata_bytes));

  auto* items = reinterpret_cast<DeviceItem*>(base + layout.items_off);
  auto* ranges = reinterpret_cast<DeviceRange*>(base + layout.ranges_off);
  for (int c = 0; c < kNumTileClasses; ++c)
    for (int32_t i = plan.class_begin[c]; i < plan.class_begin[c + 1]; ++i) {
      const WorkItem& it = plan.items[i];
      const DeviceItem d{it.row_begin,  it.num_rows,   it.range_begin,
                         it.num_ranges, it.mask_begin, it.kv_tokens};
      std::memcpy(&items[layout.class_item_off[c] + (i - plan.class_begin[c])], &d, sizeof(d));
    }
  // token_begin: prefix sums within each item (ranges not referenced by any item get 0).
  for (size_t r = 0; r < plan.ranges.size(); ++r) {
    const KvRange& g = plan.ranges[r];
    const DeviceRange d{g.page_begin, g.page_offset, g.len, 0};
    std::memcpy(&ranges[r], &d, sizeof(d));
  }
  for (const WorkItem& it : plan.items) {
    int32_t t = 0;
    for (int32_t j = 0; j < it.num_ranges; ++j) {
      ranges[it.range_begin + j].token_begin = t;
      t += plan.ranges[it.range_begin + j].len;
    }
  }
  auto* rows = reinterpret_cast<int32_t*>(base + layout.rows_off);
  for (size_t r = 0; r < plan.rows.size(); ++r) {
    rows[2 * r] = plan.rows[r].query;
    rows[2 * r + 1] = plan.rows[r].slot;
  }
  auto copy = [base](int64_t off, const auto& v) {
    if (!v.empty()) std::memcpy(base + off, v.data(), v.size() * sizeof(v[0]));
  };
  copy(layout.page_ids_off, plan.page_ids);
  pack_records(plan, layout, base);
  copy(layout.masks_off, plan.masks);
  copy(layout.merge_indptr_off, plan.merge_indptr);
  copy(layout.merge_slots_off, plan.merge_slots);
}

std::vector<int32_t> record_page_copies(const PlanLayout& layout, const void* host_metadata) {
  TA_CHECK_ARG(host_metadata != nullptr, "host_metadata", "null");
  const char* base = static_cast<const char*>(host_metadata);
  const int32_t ps = layout.shape.page_size;
  const int64_t words_from_pages = (layout.records_off - layout.page_ids_off) / 4;
  std::vector<int32_t> copies;
  for (int64_t j = 0; j < layout.class_items[0]; ++j) {
    const char* rec = base + layout.records_off + j * layout.record_bytes;
    DeviceRecordHead head;
    std::memcpy(&head, rec, sizeof(head));
    const int64_t first_word = words_from_pages + j * layout.record_bytes / 4 + kRecordPagesOff / 4;
    for (int32_t k = 0; k < head.inline_ranges; ++k) {
      DeviceRange r, g;  // the record's copy of the range, and the plan's
      std::memcpy(&r, rec + kRecordRangesOff + k * sizeof(DeviceRange), sizeof(r));
      std::memcpy(&g, base + layout.ranges_off + (head.item.range_begin + k) * sizeof(DeviceRange),
                  sizeof(g));
      for (int32_t i = 0; i < record_range_pages(r.page_offset, r.len, r.page_begin, ps); ++i) {
        copies.push_back(g.page_begin + i);
        copies.push_back(static_cast<int32_t>(first_word + r.page_begin + i));
      }
    }
  }
  return copies;
}

}  // namespace treeattn
