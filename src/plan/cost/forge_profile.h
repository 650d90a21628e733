// FlashForge's profile-based cost estimator C_est(packed_rows, kv_tokens): one CTA's time in
// microseconds, read from data/profiles/<device>.csv (written on the device by the benchmark) and
// bilinearly interpolated; absent a table, the analytic estimate_item() of cost_model.h.
//
// File format (lines starting with '#' are comments; the header line is required):
//   head_dim,packed_rows,kv_tokens,us
//   128,16,512,3.10
// Rows for other head dims are ignored; the grid may be irregular but must be a full product of
// its distinct packed_rows and kv_tokens values for each head dim (missing points make the table
// unusable and the estimator falls back to the analytic model). Outside the grid, packed_rows is
// clamped and kv_tokens extrapolated linearly from the last two grid columns. Not installed.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "treeattn/plan/cost/cost_model.h"

namespace treeattn::planners {

/// A parsed profile for one head dim: us[r * kv.size() + k] at (rows[r], kv[k]).
struct ForgeProfile {
  std::vector<double> rows, kv, us;
  bool empty() const { return us.empty(); }
  /// Interpolated CTA time; requires !empty().
  double lookup(double packed_rows, double kv_tokens) const;
};

/// Parses `text` (the CSV above) for `head_dim`; returns an empty profile when it has no complete
/// grid for that head dim. Throws std::invalid_argument naming "profile" on malformed lines.
ForgeProfile parse_forge_profile(const std::string& text, int32_t head_dim);

/// The profile of device `device_name` (file <dir>/<name>.csv, dir = $TREEATTN_PROFILE_DIR or
/// TREEATTN_DATA_DIR/profiles), parsed once per (path, head_dim) and cached; empty when absent.
std::shared_ptr<const ForgeProfile> load_forge_profile(const std::string& device_name,
                                                       int32_t head_dim);

/// C_est: the profile when present, else estimate_item(...).us.
class ForgeEstimator {
 public:
  ForgeEstimator(const DeviceInfo& dev, const PlanShape& shape);
  double operator()(int32_t packed_rows, int64_t kv_tokens, bool writes_partial) const;
  bool profiled() const { return profile_ && !profile_->empty(); }

 private:
  DeviceInfo dev_;
  PlanShape shape_;
  std::shared_ptr<const ForgeProfile> profile_;
};

}  // namespace treeattn::planners
