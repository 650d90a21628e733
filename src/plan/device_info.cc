// DeviceInfo presets. Bandwidth and tensor-core figures are achievable (measured) ceilings, not
// datasheet peaks: H100 from ../shared/baselines/h100.md (HBM read 3.04 TB/s, cuBLAS fp16
// 757 TFLOP/s), H200 from h200.md (4.20 TB/s, 762 TFLOP/s), A100 typical (1.6 TB/s, 290 TFLOP/s).
#include "treeattn/plan/device_info.h"

#include <algorithm>
#include <cctype>

#include "treeattn/common/error.h"

namespace treeattn {

DeviceInfo device_preset(const std::string& name) {
  std::string n = name;
  std::transform(n.begin(), n.end(), n.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  DeviceInfo d;  // defaults are the H200 figures
  if (n == "h200") {
    d.name = "h200";
    d.num_sms = 132;
    d.smem_per_sm_bytes = 228 * 1024;
    d.hbm_read_GBps = 4200.0;
    d.tc_TFLOPs = 762.0;
  } else if (n == "h100") {
    d.name = "h100";
    d.num_sms = 132;
    d.smem_per_sm_bytes = 228 * 1024;
    d.hbm_read_GBps = 3040.0;
    d.tc_TFLOPs = 757.0;
  } else if (n == "a100") {
    d.name = "a100";
    d.num_sms = 108;
    d.smem_per_sm_bytes = 164 * 1024;
    d.hbm_read_GBps = 1600.0;
    d.tc_TFLOPs = 290.0;
  } else {
    TA_CHECK_ARG(false, "device", "unknown device '", name, "' (expected a100, h100 or h200)");
  }
  return d;
}

}  // namespace treeattn
