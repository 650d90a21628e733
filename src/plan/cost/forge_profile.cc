// FlashForge's profile-based cost estimator (see forge_profile.h): CSV parsing, bilinear
// interpolation, a process-wide cache of parsed tables and the analytic fallback.
#include "forge_profile.h"

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <fstream>
#include <map>
#include <mutex>
#include <sstream>
#include <tuple>

#include "treeattn/common/error.h"

namespace treeattn::planners {
namespace {

/// Index i with v[i] <= x <= v[i+1] (clamped to [0, size-2]); v sorted, size >= 2.
size_t bracket(const std::vector<double>& v, double x) {
  const size_t hi = static_cast<size_t>(std::upper_bound(v.begin(), v.end(), x) - v.begin());
  return std::min(v.size() - 2, hi == 0 ? 0 : hi - 1);
}

}  // namespace

double ForgeProfile::lookup(double packed_rows, double kv_tokens) const {
  const size_t nr = rows.size(), nk = kv.size();
  const double r = std::clamp(packed_rows, rows.front(), rows.back());
  auto along_kv = [&](size_t ri) {
    const double* u = &us[ri * nk];
    if (nk == 1) return u[0] * std::max(kv_tokens, 1.0) / std::max(kv[0], 1.0);
    const size_t k = bracket(kv, kv_tokens);
    const double t = (kv_tokens - kv[k]) / (kv[k + 1] - kv[k]);  // may be < 0 or > 1
    return std::max(0.0, u[k] + t * (u[k + 1] - u[k]));
  };
  if (nr == 1) return along_kv(0);
  const size_t i = bracket(rows, r);
  const double t = (r - rows[i]) / (rows[i + 1] - rows[i]);
  return along_kv(i) + t * (along_kv(i + 1) - along_kv(i));
}

ForgeProfile parse_forge_profile(const std::string& text, int32_t head_dim) {
  std::istringstream in(text);
  std::string line;
  bool header = false;
  std::map<std::pair<double, double>, double> pts;
  int lineno = 0;
  while (std::getline(in, line)) {
    ++lineno;
    const size_t b = line.find_first_not_of(" \t\r");
    if (b == std::string::npos || line[b] == '#') continue;
    if (!header) {
      TA_CHECK_ARG(line.find("head_dim") != std::string::npos, "profile", "line ", lineno,
                   ": expected header 'head_dim,packed_rows,kv_tokens,us'");
      header = true;
      continue;
    }
    std::replace(line.begin(), line.end(), ',', ' ');
    std::istringstream ls(line);
    double hd = 0, r = 0, k = 0, us = 0;
    TA_CHECK_ARG(static_cast<bool>(ls >> hd >> r >> k >> us) && r >= 1 && k >= 1 && us >= 0,
                 "profile", "line ", lineno, ": expected head_dim,packed_rows,kv_tokens,us");
    if (static_cast<int32_t>(hd) == head_dim) pts[{r, k}] = us;
  }
  ForgeProfile p;
  for (const auto& kv : pts) {
    p.rows.push_back(kv.first.first);
    p.kv.push_back(kv.first.second);
  }
  std::sort(p.rows.begin(), p.rows.end());
  p.rows.erase(std::unique(p.rows.begin(), p.rows.end()), p.rows.end());
  std::sort(p.kv.begin(), p.kv.end());
  p.kv.erase(std::unique(p.kv.begin(), p.kv.end()), p.kv.end());
  if (pts.empty() || pts.size() != p.rows.size() * p.kv.size()) return ForgeProfile{};
  for (const auto& kv : pts) p.us.push_back(kv.second);  // map order = row-major (rows, kv)
  return p;
}

std::shared_ptr<const ForgeProfile> load_forge_profile(const std::string& device_name,
                                                       int32_t head_dim) {
  static std::mutex mu;
  static std::map<std::pair<std::string, int32_t>, std::shared_ptr<const ForgeProfile>> cache;
  std::string name = device_name;
  for (char& c : name) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  for (char& c : name)
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '-' && c != '_') c = '_';
  const char* env = std::getenv("TREEATTN_PROFILE_DIR");
#ifdef TREEATTN_DATA_DIR
  const std::string dir = env != nullptr ? env : TREEATTN_DATA_DIR "/profiles";
#else
  const std::string dir = env != nullptr ? env : "data/profiles";
#endif
  const std::string path = dir + "/" + name + ".csv";
  std::lock_guard<std::mutex> lock(mu);
  auto it = cache.find({path, head_dim});
  if (it != cache.end()) return it->second;
  auto prof = std::make_shared<ForgeProfile>();
  std::ifstream f(path);
  if (f) {
    std::stringstream ss;
    ss << f.rdbuf();
    try {
      *prof = parse_forge_profile(ss.str(), head_dim);
    } catch (const std::invalid_argument&) {
      *prof = ForgeProfile{};  // a broken table falls back to the analytic model
    }
  }
  cache[{path, head_dim}] = prof;
  return prof;
}

ForgeEstimator::ForgeEstimator(const DeviceInfo& dev, const PlanShape& shape)
    : dev_(dev), shape_(shape), profile_(load_forge_profile(dev.name, shape.head_dim)) {}

double ForgeEstimator::operator()(int32_t packed_rows, int64_t kv_tokens,
                                  bool writes_partial) const {
  if (profiled()) return profile_->lookup(packed_rows, static_cast<double>(kv_tokens));
  return estimate_item(dev_, shape_, tile_class_for_rows(packed_rows), packed_rows, kv_tokens,
                       writes_partial)
      .us;
}

}  // namespace treeattn::planners
