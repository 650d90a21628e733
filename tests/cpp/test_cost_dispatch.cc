// The cost model's schedule of a plan's CTAs: kM16 and kM64 CTAs longest first onto the slot
// that frees first; a kM128 CTA that fills an SM (m128_ctas_per_sm = 1) comes after all of them
// (its class launches last) and starts only when one SM has drained. So a kM128 item behind a
// full wave of kM16 CTAs adds its whole time to the wave's, while with no more CTAs than SMs it
// runs beside them; kM128 CTAs beyond one an SM queue behind each other; and with one slot per
// kM128 CTA (m128_ctas_per_sm = 0) the schedule is plain LPT over every CTA.
#include <gtest/gtest.h>

#include <algorithm>

#include "test_planners_util.h"
#include "treeattn/plan/cost/cost_model.h"
#include "treeattn/plan/planner.h"

namespace treeattn {
namespace {

using testing_util::item_summary;

/// One KV head (no head copies), 16 query heads: a kM128 item of 8 rows is 128 packed rows.
PlanShape shape() { return testing_util::plan_shape(16, 1, 128); }

/// The h100 preset with bytes and FLOPs free (bandwidth and tensor rate far above any CTA's
/// need, no L2 bound) and no wgmma kernels: every CTA's time is its overhead plus its tile
/// latencies, the same in every plan below.
DeviceInfo latency_device() {
  DeviceInfo d = device_preset("h100");
  d.hbm_read_GBps = 1e9;
  d.tc_TFLOPs = 1e9;
  d.l2_read_GBps = 0;
  d.warpgroup_mma = false;
  return d;
}

/// The plan's fixed terms (launches; no merge): what a one-CTA plan costs beyond its CTA.
double fixed_us(const DeviceInfo& d, int launches) {
  return d.first_launch_us + (launches - 1) * d.pdl_launch_us;
}

TEST(CostDispatch, AnSmFillingCtaWaitsForAFullWaveToDrain) {
  const DeviceInfo d = latency_device();
  const PlanShape s = shape();
  const int64_t wide_slots = int64_t{d.num_sms} * d.wide_ctas_per_sm;  // 528 on the h100 preset
  const ItemSummary m16 = item_summary(TileClass::kM16, 1, 2048, wide_slots);  // every slot busy
  const ItemSummary m128 = item_summary(TileClass::kM128, 8, 4096, 1);
  const double t16 = estimate_items_us(d, s, &m16, 1, {}) - fixed_us(d, 1);
  const double t128 = estimate_items_us(d, s, &m128, 1, {}) - fixed_us(d, 1);
  ASSERT_GT(t16, 0);
  ASSERT_GT(t128, t16);  // the kM128 CTA is the longest: LPT would start it first
  const ItemSummary both[] = {m16, m128};
  // The kM128 CTA starts when the wave ends (all SMs hold kM16 CTAs until then).
  EXPECT_NEAR(estimate_items_us(d, s, both, 2, {}) - fixed_us(d, 2), t16 + t128,
              1e-9 * (t16 + t128));

  // With no more CTAs than SMs, every CTA has an SM of its own from the start (a kM128 CTA then
  // takes one slot: the plain LPT path): the kM128 CTA runs beside the kM16 ones.
  const ItemSummary few16 = item_summary(TileClass::kM16, 1, 2048, d.num_sms - 1);
  const double t16_few = estimate_items_us(d, s, &few16, 1, {}) - fixed_us(d, 1);
  const ItemSummary sparse[] = {few16, m128};
  EXPECT_NEAR(estimate_items_us(d, s, sparse, 2, {}) - fixed_us(d, 2), std::max(t16_few, t128),
              1e-9 * t128);
}

TEST(CostDispatch, OneSlotPerKm128CtaIsPlainLpt) {
  DeviceInfo d = latency_device();
  d.m128_ctas_per_sm = 0;  // a kM128 CTA takes one slot like any other
  const PlanShape s = shape();
  const int64_t wide_slots = int64_t{d.num_sms} * d.wide_ctas_per_sm;
  const ItemSummary m16 = item_summary(TileClass::kM16, 1, 2048, wide_slots);
  const ItemSummary m128 = item_summary(TileClass::kM128, 8, 4096, 1);
  const double t16 = estimate_items_us(d, s, &m16, 1, {}) - fixed_us(d, 1);
  const double t128 = estimate_items_us(d, s, &m128, 1, {}) - fixed_us(d, 1);
  const ItemSummary both[] = {m16, m128};
  // LPT: the kM128 CTA first, on its own slot; the 528 kM16 CTAs then fill 527 slots at once and
  // the last one goes behind the earliest of them.
  EXPECT_NEAR(estimate_items_us(d, s, both, 2, {}) - fixed_us(d, 2), std::max(t128, 2 * t16),
              1e-9 * t128);
}

TEST(CostDispatch, Km128CtasQueueOnTheDrainedSms) {
  const DeviceInfo d = latency_device();
  const PlanShape s = shape();
  const int64_t wide_slots = int64_t{d.num_sms} * d.wide_ctas_per_sm;
  const ItemSummary m16 = item_summary(TileClass::kM16, 1, 2048, wide_slots);
  // two SMs' worth of kM128 CTAs more than there are SMs: the last two run second on an SM
  const ItemSummary m128 = item_summary(TileClass::kM128, 8, 1024, d.num_sms + 2);
  const double t16 = estimate_items_us(d, s, &m16, 1, {}) - fixed_us(d, 1);
  const ItemSummary one128 = item_summary(TileClass::kM128, 8, 1024, 1);
  const double t128 = estimate_items_us(d, s, &one128, 1, {}) - fixed_us(d, 1);
  const ItemSummary both[] = {m16, m128};
  EXPECT_NEAR(estimate_items_us(d, s, both, 2, {}) - fixed_us(d, 2), t16 + 2 * t128,
              1e-9 * (t16 + 2 * t128));
}

}  // namespace
}  // namespace treeattn
