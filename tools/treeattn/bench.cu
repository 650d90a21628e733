// `treeattn bench`: GPU benchmark of the decode kernels (through DevicePlan) against the physical
// floor.
//
// In one process: (1) ceilings: HBM read bandwidth from a streaming-read kernel (16-byte loads over
// 2 GiB, median of 15) and the tensor-core rate from cuBLAS (fp16 GEMM 8192^3, fp32 compute,
// median of 10); (2) per problem (tree / levels / workload line) and planner: plan on the host
// (not timed), upload, fill the random inputs on the GPU (DeviceInputs, treeattn/kernels/
// device_inputs.h: random_inputs()' values, rounded to the dtype), one checked run on poisoned
// outputs against the float64 oracle on a sample of up to 16 queries (oracle_sample, which
// recomputes the inputs of the sampled paths on the host; compare_to_sample on outputs and LSEs,
// treeattn/cpu/compare.h), then >= 50
// timed runs, each after an L2 flush (cudaMemsetAsync over >= 2x L2, outside the events;
// `--l2-flush off`: a spin kernel instead, a warm-cache diagnostic), CUDA events around
// DevicePlan::run only, median. A planner that throws, a failed check or a CUDA error on a line is
// a failure: the line is reported and the exit status is nonzero. Floor = max(bytes_min / hbm,
// flops_min / tc) as in bench/NOTES.md ("The two numbers"). Baseline: the `query` planner
// (FlashDecoding-style split-KV) through the same kernel, timed the same way, on every line
// (`--baseline off` skips it). `--grouped-kernel` picks the kernel setting of the kM64/kM128
// classes (set_grouped_kernel: legacy, ws, auto, or a comma list of them; both = legacy,ws); with
// several, every plan is checked and timed on each, back to back, and the JSON results carry
// "grouped_kernel" (the setting) and "grouped_run" (the kernel each of kM64 and kM128 ran on).
// `--partials fp32,half` does the same for the partial outputs' precision (set_partial_precision;
// with both lists, every pair), and each result carries "partials"; `--short-m16 off,on` likewise
// for the 2-stage kM16 config (set_short_m16), and `--pair-m16 off,on` for the deep kM16 config's
// cluster pairs (set_pair_m16).
// --kv-dtype fp8_e4m3|fp8_e5m2 (with --k-scale/--v-scale) runs an fp8 KV cache: the inputs are
// filled as fp8(value / scale) with the scales in device memory (DeviceInputs sets DecodeArgs'
// kv_dtype, k_scale and v_scale), the oracle sees the dequantized values, the plan and the floor
// count 1 byte per KV element, and the JSON results carry "kv_dtype".
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <map>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

#include "args.h"
#include "bench_timeline.h"
#include "cli_util.h"
#include "commands.h"
#include "inputs.h"
#include "treeattn/cpu/compare.h"
#include "treeattn/cpu/random_inputs.h"
#include "treeattn/kernels/decode.h"
#include "treeattn/kernels/device_inputs.h"
#include "treeattn/kernels/device_plan.h"
#include "treeattn/plan/planner.h"
#include "treeattn/plan/stats.h"

namespace treeattn::cli {
namespace {

#define BENCH_CUDA(expr)                                                            \
  do {                                                                              \
    const cudaError_t e_ = (expr);                                                  \
    if (e_ != cudaSuccess)                                                          \
      throw std::runtime_error(std::string(#expr) + ": " + cudaGetErrorString(e_)); \
  } while (0)

// ---- ceilings -----------------------------------------------------------------------------------

__global__ void stream_read_kernel(const uint4* __restrict__ src, uint64_t n, uint32_t* sink) {
  uint32_t acc = 0;
  const uint64_t stride = static_cast<uint64_t>(gridDim.x) * blockDim.x;
  uint64_t i = blockIdx.x * static_cast<uint64_t>(blockDim.x) + threadIdx.x;
  for (; i + 3 * stride < n; i += 4 * stride) {  // 4 independent loads in flight
    const uint4 a = __ldcs(src + i), b = __ldcs(src + i + stride), c = __ldcs(src + i + 2 * stride),
                d = __ldcs(src + i + 3 * stride);
    acc ^= a.x ^ a.y ^ a.z ^ a.w ^ b.x ^ b.y ^ b.z ^ b.w ^ c.x ^ c.y ^ c.z ^ c.w ^ d.x ^ d.y ^ d.z ^
           d.w;
  }
  for (; i < n; i += stride) {
    const uint4 a = __ldcs(src + i);
    acc ^= a.x ^ a.y ^ a.z ^ a.w;
  }
  if (acc == 0x12345678u) *sink = acc;  // keeps the loads alive
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n == 0 ? 0 : (n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]));
}

double measure_hbm_GBps(int num_sms) {
  const uint64_t bytes = 2ull << 30;
  void* buf = nullptr;
  uint32_t* sink = nullptr;
  BENCH_CUDA(cudaMalloc(&buf, bytes));
  BENCH_CUDA(cudaMalloc(&sink, 4));
  BENCH_CUDA(cudaMemset(buf, 0x5A, bytes));
  cudaEvent_t e0, e1;
  BENCH_CUDA(cudaEventCreate(&e0));
  BENCH_CUDA(cudaEventCreate(&e1));
  std::vector<double> gbps;
  for (int r = 0; r < 18; ++r) {
    BENCH_CUDA(cudaEventRecord(e0));
    stream_read_kernel<<<num_sms * 8, 512>>>(static_cast<const uint4*>(buf), bytes / 16, sink);
    BENCH_CUDA(cudaEventRecord(e1));
    BENCH_CUDA(cudaEventSynchronize(e1));
    float ms = 0;
    BENCH_CUDA(cudaEventElapsedTime(&ms, e0, e1));
    if (r >= 3) gbps.push_back(bytes / (ms * 1e-3) / 1e9);
  }
  BENCH_CUDA(cudaGetLastError());
  cudaEventDestroy(e0);
  cudaEventDestroy(e1);
  cudaFree(buf);
  cudaFree(sink);
  return median(gbps);
}

double measure_tc_TFLOPs() {
  const int n = 8192;
  const size_t elems = static_cast<size_t>(n) * n;
  uint16_t *a = nullptr, *b = nullptr, *c = nullptr;
  BENCH_CUDA(cudaMalloc(&a, elems * 2));
  BENCH_CUDA(cudaMalloc(&b, elems * 2));
  BENCH_CUDA(cudaMalloc(&c, elems * 2));
  RandomInputSpec gemm;  // a and b: the K and V values of a one-head stream
  gemm.num_qo_heads = gemm.num_kv_heads = gemm.head_dim = 1;
  gemm.seed = 11;
  const RandomValueStream values = random_value_stream(gemm, 0, elems, 1);
  fill_random_values(a, values, InputTensor::kK, elems, false, nullptr);
  fill_random_values(b, values, InputTensor::kV, elems, false, nullptr);
  cublasHandle_t h;
  if (cublasCreate(&h) != CUBLAS_STATUS_SUCCESS) throw std::runtime_error("cublasCreate failed");
  const float alpha = 1.f, beta = 0.f;
  cudaEvent_t e0, e1;
  BENCH_CUDA(cudaEventCreate(&e0));
  BENCH_CUDA(cudaEventCreate(&e1));
  std::vector<double> tf;
  for (int r = 0; r < 13; ++r) {
    BENCH_CUDA(cudaEventRecord(e0));
    const cublasStatus_t st =
        cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_N, n, n, n, &alpha, a, CUDA_R_16F, n, b, CUDA_R_16F,
                     n, &beta, c, CUDA_R_16F, n, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
    BENCH_CUDA(cudaEventRecord(e1));
    BENCH_CUDA(cudaEventSynchronize(e1));
    if (st != CUBLAS_STATUS_SUCCESS) throw std::runtime_error("cublasGemmEx failed");
    float ms = 0;
    BENCH_CUDA(cudaEventElapsedTime(&ms, e0, e1));
    if (r >= 3) tf.push_back(2.0 * n * n * static_cast<double>(n) / (ms * 1e-3) / 1e12);
  }
  cublasDestroy(h);
  cudaEventDestroy(e0);
  cudaEventDestroy(e1);
  cudaFree(a);
  cudaFree(b);
  cudaFree(c);
  return median(tf);
}

// ---- one problem --------------------------------------------------------------------------------

/// The checked run's oracle: up to 16 queries spread over the batch, stopping before the sampled
/// paths pass this many multiply-adds.
constexpr double kOracleWork = 6e7;

struct Result {
  std::string workload, set, planner, dtype, kv_dtype = "same";
  int32_t page_size = 0, qo = 0, kv = 0, head_dim = 0, queries = 0;
  double median_ms = 0, floor_ms = 0, floor_fraction = 0, baseline_ms = 0, max_rel_err = 0;
  double GBps = 0, bytes_min = 0, flops_min = 0, est_us = 0, kv_read_bytes = 0;
  int64_t items = 0;
  bool check_ok = true;
  std::string grouped_kernel = "legacy";  ///< setting of the kM64/kM128 kernel (--grouped-kernel)
  std::string grouped_run = "-,-";  ///< kernel kM64 and kM128 ran on ("-": no items of the class)
  std::string partials = "half";    ///< partial output precision (--partials)
  int32_t paths_group = 0;          ///< the paths group used (fixed_paths_group of --paths-group)
};

/// One setting to time each plan on: set_grouped_kernel, set_partial_precision, set_short_m16 and
/// set_pair_m16, named as in the results.
struct KernelSetting {
  GroupedKernel kernel;
  PartialPrecision partials;
  bool short_m16;
  bool pair_m16;
  std::string name;
};

const char* grouped_kernel_name(GroupedKernel k) {
  return k == GroupedKernel::kWarpSpecialized ? "ws"
         : k == GroupedKernel::kAuto          ? "auto"
                                              : "legacy";
}
const char* partials_name(PartialPrecision p) {
  return p == PartialPrecision::kHalf ? "half" : "fp32";
}

struct Timer {
  void* flush = nullptr;
  size_t flush_bytes = 0;  ///< 0 under --l2-flush off
  cudaEvent_t e0{}, e1{};
  cudaStream_t stream{};
};

/// Plans and uploads once, then per grouped kernel of `kernels` (set_grouped_kernel): checks once
/// and times `runs` runs, one result each in `res`. Throws on CUDA errors; returns false (and
/// counts a failure, so the exit status is nonzero) if the planner throws.
int g_planner_failures = 0;
/// The planners' view of this GPU: the preset matching its name, with the SM count and the two
/// ceilings measured in this process (set in bench_command before any planning).
DeviceInfo g_device = device_preset("h200");
/// --timeline: stamped runs after the timed ones (json null = off).
TimelineSetup g_timeline;

/// The line's name with its heads (added when the name has none).
std::string line_name(const Problem& pb) {
  if (pb.name.find("heads=") != std::string::npos) return pb.name;
  return pb.name + " heads=" + std::to_string(pb.num_qo_heads) + "/" +
         std::to_string(pb.num_kv_heads);
}

/// A planner's name with "/g16" when the paths group size was fixed (16).
std::string planner_label(const std::string& planner, int32_t group) {
  return group > 0 ? planner + "/g" + std::to_string(group) : planner;
}

bool run_one(const Problem& pb, const std::string& planner, int32_t paths_group,
             const DeviceInputs& in, const OracleSample& ref, int runs, Timer& tm,
             const std::vector<KernelSetting>& kernels, std::vector<Result>* results) {
  Plan plan;
  int32_t group_used = 0;  // fixed_paths_group: what a group above the head group's cap becomes
  try {
    const PlanOptions opts = planner_options(planner, pb, g_device, paths_group);
    group_used = fixed_paths_group(opts);
    plan = make_plan(pb.tree, opts);
  } catch (const std::exception& e) {
    std::printf("  !!!! PLANNER FAILED: %s planner=%s: %s (line skipped: counted as a failure)\n",
                pb.name.c_str(), planner.c_str(), e.what());
    ++g_planner_failures;
    return false;
  }
  DevicePlan dp;
  dp.upload(plan, tm.stream);
  DecodeArgs a = in.args;  // with the fill's KV type and device scales
  const PlanStats stats = plan_stats(pb.tree, plan, g_device);
  results->clear();
  for (const KernelSetting& ks : kernels) {
    set_grouped_kernel(ks.kernel);
    set_partial_precision(ks.partials);
    set_short_m16(ks.short_m16);
    set_pair_m16(ks.pair_m16);
    Result one;
    Result* res = &one;
    res->grouped_kernel = ks.name;
    res->partials = partials_name(ks.partials);
    res->paths_group = group_used;
    res->grouped_run.clear();
    for (TileClass cls : {TileClass::kM64, TileClass::kM128}) {
      const bool any = dp.layout().class_items_planned[static_cast<int>(cls)] > 0;
      res->grouped_run += std::string(res->grouped_run.empty() ? "" : ",") +
                          (any ? grouped_kernel_name(grouped_kernel_for(dp.layout(), cls)) : "-");
    }
    // checked run on poisoned outputs
    std::vector<uint16_t> out;
    std::vector<float> lse;
    in.run_and_fetch(dp, a, tm.stream, nullptr, &out, &lse);
    const OracleComparison cmp = compare_to_sample(ref, out, &lse);
    res->max_rel_err = cmp.max_rel_err;
    res->check_ok = cmp.pass;
    if (!res->check_ok)
      std::printf("  !!!! CHECK FAILED: %s planner=%s kernel=%s %s\n", pb.name.c_str(),
                  planner.c_str(), res->grouped_kernel.c_str(), cmp.describe().c_str());
    // timed runs
    std::vector<double> ms;
    for (int r = 0; r < runs + 3; ++r) {
      before_timed_run(tm.stream, tm.flush, tm.flush_bytes, r);
      BENCH_CUDA(cudaEventRecord(tm.e0, tm.stream));
      dp.run(a, tm.stream);
      BENCH_CUDA(cudaEventRecord(tm.e1, tm.stream));
      BENCH_CUDA(cudaEventSynchronize(tm.e1));
      float t = 0;
      BENCH_CUDA(cudaEventElapsedTime(&t, tm.e0, tm.e1));
      if (r >= 3) ms.push_back(t);
    }
    BENCH_CUDA(cudaGetLastError());
    res->median_ms = median(ms);
    if (g_timeline.json != nullptr && &ks == &kernels.front()) {
      g_timeline.stream = tm.stream;
      g_timeline.flush = tm.flush;
      g_timeline.flush_bytes = tm.flush_bytes;
      timeline_line(dp, a, g_timeline, line_name(pb), planner_label(planner, group_used));
    }
    res->items = static_cast<int64_t>(plan.items.size());
    res->est_us = stats.est_time_us;
    res->kv_read_bytes = static_cast<double>(stats.kv_bytes_read);
    results->push_back(one);
  }
  return true;
}

/// The planner column: the planner, with "/ws" or "/legacy" when several grouped kernels run and
/// "/g16" when --paths-group fixed the paths planners' group size (planner_label).
std::string display_planner(const Result& r, size_t num_kernels) {
  const std::string p = planner_label(r.planner, r.paths_group);
  return num_kernels > 1 ? p + "/" + r.grouped_kernel : p;
}

std::string today() {
  const std::time_t now = std::time(nullptr);
  char buf[32];
  std::strftime(buf, sizeof(buf), "%Y-%m-%d", std::gmtime(&now));
  return buf;
}

/// The words of a comma list ("" -> none; "a,,b" keeps the empty word, which the callers refuse).
std::vector<std::string> comma_words(const std::string& list) {
  std::vector<std::string> words;
  for (size_t at = 0; !list.empty() && at <= list.size();) {
    const size_t comma = std::min(list.find(',', at), list.size());
    words.push_back(list.substr(at, comma - at));
    at = comma + 1;
  }
  return words;
}

/// The value of an on/off flag (`fallback` when absent); throws naming the flag otherwise.
bool on_off(const Args& a, const std::string& flag, bool fallback) {
  if (!a.has(flag)) return fallback;
  const std::string v = a.str(flag);
  if (v != "on" && v != "off")
    throw std::invalid_argument("--" + flag + ": expected on or off, got '" + v + "'");
  return v == "on";
}

}  // namespace

int bench_command(int argc, char** argv) {
  std::vector<FlagSpec> flags = input_flags(true);
  flags.push_back({"planner", true, "planner name or 'all' (default all; placeholders skipped)"});
  flags.push_back({"dtype", true, "fp16 (default) or bf16"});
  flags.push_back({"json", true, "write results as JSON to this file", false, FileRole::kOutput});
  flags.push_back({"runs", true, "timed runs per line and planner (>= 50, default 50)"});
  flags.push_back({"baseline", true,
                   "on (default) or off: time the query planner's plan on every line as its "
                   "baseline (off: only the named planners' kernels run, e.g. under a profiler)"});
  flags.push_back({"cost-latency", true,
                   "on (default) or off: the cost model's critical-path latency terms "
                   "(DeviceInfo::latency_terms) for the planners, for a same-binary A/B"});
  flags.push_back({"timeline", true,
                   "after the timed runs, stamp every CTA's phases (7 more runs), write the median "
                   "run as a JSON line per line and planner to FILE and print its critical path"});
  flags.push_back({"l2-flush", true,
                   "on (default) or off: flush L2 before every timed and stamped run; off keeps "
                   "the caches warm (a 30 us spin kernel holds the stream instead), a diagnostic: "
                   "the floor assumes a cold L2"});
  flags.push_back({"grouped-kernel", true,
                   "kernel of the kM64/kM128 classes: legacy, ws (warp-specialized, sm_90 with "
                   "sm_90a code), auto (per class where ws pays off), a comma list of them, or "
                   "both (= legacy,ws); with several, every plan is timed on each in this "
                   "process; default: the library's"});
  flags.push_back({"short-m16", true,
                   "the 2-stage kM16 config for short items (set_short_m16): on, off or a comma "
                   "list, timed on each like --grouped-kernel; default: the library's"});
  flags.push_back({"pair-m16", true,
                   "cluster pairs for the deep kM16 config's items (set_pair_m16): on, off or a "
                   "comma list, timed on each like --grouped-kernel; default: the library's"});
  flags.push_back(
      {"paths-group", true,
       "queries per group of the paths planners, also as auto's candidates "
       "(PlanOptions::paths_group): 0 (default: the cost model's choice), 1-64, or a "
       "comma list of them; with several, the paths, paths-split and auto plans of each line are "
       "built and timed once per group size used (a value above the head group's cap "
       "is the cap)"});
  flags.push_back({"partials", true,
                   "precision of the partial outputs (set_partial_precision): fp32, half or a "
                   "comma list of them, timed on each like --grouped-kernel (with both lists, "
                   "every pair); default: the library's"});
  const Args a(argc, argv, 2, flags);
  if (a.help()) {
    std::printf("%s", a.usage("bench").c_str());
    return 0;
  }
  const std::string planner_arg = a.str("planner", "all");
  const std::string dtype = a.str("dtype", "fp16");
  if (dtype != "fp16" && dtype != "bf16")
    throw std::invalid_argument("--dtype: expected fp16 or bf16, got '" + dtype + "'");
  const bool bf16 = dtype == "bf16";
  const bool cost_latency = on_off(a, "cost-latency", true);
  const bool with_baseline = on_off(a, "baseline", true);
  const int runs = static_cast<int>(a.integer("runs", 50, 50, 100000));
  const uint64_t seed = a.u64("seed", 0);
  const std::vector<std::string> planners = planner_list(planner_arg);
  const std::vector<Problem> problems = load_problems(a, true);
  const std::string gk = a.str("grouped-kernel", "");
  std::vector<GroupedKernel> grouped;
  if (gk.empty()) grouped = {grouped_kernel()};
  for (const std::string& word : comma_words(gk)) {
    if (word == "both") {
      grouped.push_back(GroupedKernel::kLegacy);
      grouped.push_back(GroupedKernel::kWarpSpecialized);
    } else if (word == "legacy" || word == "ws" || word == "auto") {
      grouped.push_back(word == "ws"     ? GroupedKernel::kWarpSpecialized
                        : word == "auto" ? GroupedKernel::kAuto
                                         : GroupedKernel::kLegacy);
    } else {
      throw std::invalid_argument(
          "--grouped-kernel: expected legacy, ws, auto, both or a comma list of them, got '" + gk +
          "'");
    }
  }
  // --partials and --short-m16: each a comma list of its two words (absent: the library's value)
  const auto two_way = [&a](const char* flag, const char* no, const char* yes, bool dflt) {
    const std::string list = a.str(flag, "");
    std::vector<bool> v;
    if (list.empty()) v = {dflt};
    for (const std::string& word : comma_words(list)) {
      if (word != no && word != yes)
        throw std::invalid_argument(std::string("--") + flag + ": expected " + no + ", " + yes +
                                    " or a comma list of them, got '" + list + "'");
      v.push_back(word == yes);
    }
    return v;
  };
  std::vector<PartialPrecision> partials;
  for (const bool half :
       two_way("partials", "fp32", "half", partial_precision() == PartialPrecision::kHalf))
    partials.push_back(half ? PartialPrecision::kHalf : PartialPrecision::kFloat32);
  const std::vector<bool> shorts = two_way("short-m16", "off", "on", short_m16());
  const std::vector<bool> pairs = two_way("pair-m16", "off", "on", pair_m16());
  std::vector<int32_t> groups;
  for (const std::string& word : comma_words(a.str("paths-group", "0"))) {
    int64_t g = -1;
    if (!parse_int64(word, &g) || g < 0 || g > kMaxMaskedRows)
      throw std::invalid_argument("--paths-group: expected integers from 0 to " +
                                  std::to_string(kMaxMaskedRows) + " (a comma list), got '" +
                                  a.str("paths-group") + "'");
    groups.push_back(static_cast<int32_t>(g));
  }
  if (groups.empty())
    throw std::invalid_argument("--paths-group: expected at least one value, got '" +
                                a.str("paths-group") + "'");
  // (planner, paths group) of each plan a line times: every group for paths and auto
  std::vector<std::pair<std::string, int32_t>> planner_runs;
  for (const std::string& pl : planners)
    for (const int32_t g :
         pl == "paths" || pl == "paths-split" || pl == "auto" ? groups : std::vector<int32_t>{0})
      planner_runs.emplace_back(pl, g);
  // every (grouped kernel, partials, short kM16, kM16 pairs) setting; the name shows what varies
  std::vector<KernelSetting> kernels;
  for (const GroupedKernel g : grouped)
    for (const PartialPrecision pp : partials)
      for (const bool sh : shorts)
        for (const bool pa : pairs) {
          std::string name = grouped.size() > 1 || (partials.size() == 1 && shorts.size() == 1 &&
                                                    pairs.size() == 1)
                                 ? grouped_kernel_name(g)
                                 : "";
          const auto add = [&name](const std::string& part) {
            name += (name.empty() ? "" : "+") + part;
          };
          if (partials.size() > 1) add(partials_name(pp));
          if (shorts.size() > 1) add(sh ? "short" : "noshort");
          if (pairs.size() > 1) add(pa ? "pair" : "nopair");
          kernels.push_back({g, pp, sh, pa, name});
        }

  int dev = 0;
  cudaDeviceProp prop{};
  {
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess || n == 0) {
      std::fprintf(stderr, "treeattn bench: no CUDA GPU\n");
      return 1;
    }
  }
  BENCH_CUDA(cudaGetDevice(&dev));
  BENCH_CUDA(cudaGetDeviceProperties(&prop, dev));
  for (const KernelSetting& k : kernels)
    if (!grouped_kernel_supported(k.kernel))
      throw std::invalid_argument(
          "--grouped-kernel: ws needs an sm_90 device and a build with sm_90a code (this is " +
          std::string(prop.name) + ")");
  const double hbm = measure_hbm_GBps(prop.multiProcessorCount);
  const double tc = measure_tc_TFLOPs();
  {
    const std::string name = prop.name;
    g_device = device_preset(name.find("H100") != std::string::npos   ? "h100"
                             : name.find("A100") != std::string::npos ? "a100"
                                                                      : "h200");
    g_device.num_sms = prop.multiProcessorCount;
    g_device.hbm_read_GBps = hbm;
    g_device.tc_TFLOPs = tc;
    g_device.latency_terms = cost_latency;
  }
  std::printf(
      "device: %s, %d SMs, L2 %d MB\nceilings: HBM read %.0f GB/s, fp16 tensor %.0f TFLOP/s\n"
      "cost model latency terms: %s\n",
      prop.name, prop.multiProcessorCount, prop.l2CacheSize >> 20, hbm, tc,
      g_device.latency_terms ? "on" : "off");

  FILE* timeline_file = nullptr;
  if (a.has("timeline")) {
    timeline_file = std::fopen(a.str("timeline").c_str(), "w");
    if (timeline_file == nullptr)
      throw std::invalid_argument("--timeline: cannot write '" + a.str("timeline") + "'");
    g_timeline.json = timeline_file;
    std::printf("timeline: %.3f SM clocks per ns\n", timeline_clocks_per_ns());
  }

  Timer tm;
  if (on_off(a, "l2-flush", true)) {
    tm.flush_bytes = std::max<size_t>(static_cast<size_t>(prop.l2CacheSize) * 3, 256u << 20);
    BENCH_CUDA(cudaMalloc(&tm.flush, tm.flush_bytes));
  }
  BENCH_CUDA(cudaEventCreate(&tm.e0));
  BENCH_CUDA(cudaEventCreate(&tm.e1));
  BENCH_CUDA(cudaStreamCreate(&tm.stream));

  std::vector<Result> results;
  std::printf("%-44s %-6s %-13s %9s %9s %6s %7s %9s %7s %9s\n", "workload", "heads", "planner",
              "median_us", "floor_us", "floor%", "GB/s", "base_us", "speedup", "rel_err");
  for (const Problem& pb : problems) {
    const PrefixTree& t = pb.tree;
    const int64_t H = pb.num_qo_heads, KH = pb.num_kv_heads, D = pb.head_dim;
    const int64_t nq = t.num_queries();
    RandomInputSpec spec{pb.num_qo_heads, pb.num_kv_heads, pb.head_dim, bf16, seed};
    spec.kv_dtype = pb.kv_dtype;
    spec.k_scale = pb.k_scale;
    spec.v_scale = pb.v_scale;
    DeviceInputs in;
    in.fill(t, spec, KvLayout::kSplit, /*with_lse=*/true, tm.stream);
    // floor
    double ctx_sum = 0;
    for (int32_t q = 0; q < nq; ++q) ctx_sum += static_cast<double>(query_context(t, q));
    const double kv_bytes = is_fp8(pb.kv_dtype) ? 1 : 2;  // per K or V element
    const double bytes_min = static_cast<double>(unique_tokens(t)) * KH * D * 2 * kv_bytes +
                             static_cast<double>(nq) * H * D * 2 * 2;
    const double flops_min = 4.0 * ctx_sum * H * D;
    const double floor_ms = std::max(bytes_min / (hbm * 1e9), flops_min / (tc * 1e12)) * 1e3;
    const std::string wname = line_name(pb);
    const OracleSample ref = oracle_sample(t, spec, 16, kOracleWork);
    // baseline first (on the first grouped kernel only, unless the query planner is listed)
    std::vector<Result> base;
    const bool query_listed =
        std::find(planners.begin(), planners.end(), "query") != planners.end();
    const bool have_base =
        (with_baseline || query_listed) &&
        run_one(pb, "query", 0, in, ref, runs, tm,
                query_listed ? kernels : std::vector<KernelSetting>{kernels.front()}, &base);
    std::set<std::pair<std::string, int32_t>> timed;  // (planner, group used): once a line
    for (const auto& [pl, group] : planner_runs) {
      if (group > 0 &&
          !timed.insert({pl, fixed_paths_group(planner_options(pl, pb, g_device, group))}).second)
        continue;  // a group above the head group's cap: the plan of a smaller one, timed already
      std::vector<Result> rs;
      if (pl == "query") {
        if (!have_base) continue;  // the baseline's failure is already counted
        rs = base;
      } else if (!run_one(pb, pl, group, in, ref, runs, tm, kernels, &rs)) {
        continue;  // counted in g_planner_failures: the exit status is nonzero
      }
      for (Result& r : rs) {
        r.workload = wname;
        r.set = pb.set;
        r.planner = pl;
        r.dtype = dtype;
        r.kv_dtype = kv_dtype_name(pb.kv_dtype);
        r.page_size = t.page_size;
        r.qo = static_cast<int32_t>(H);
        r.kv = static_cast<int32_t>(KH);
        r.head_dim = static_cast<int32_t>(D);
        r.queries = static_cast<int32_t>(nq);
        r.floor_ms = floor_ms;
        r.bytes_min = bytes_min;
        r.flops_min = flops_min;
        r.floor_fraction = floor_ms / r.median_ms;
        r.GBps = bytes_min / (r.median_ms * 1e-3) / 1e9;
        r.baseline_ms = have_base ? base.front().median_ms : 0;
        char heads[16];
        std::snprintf(heads, sizeof(heads), "%d/%d", r.qo, r.kv);
        const std::string shown = display_planner(r, kernels.size());
        std::printf("%-44.44s %-6s %-13s %9.1f %9.1f %5.1f%% %7.0f %9.1f %6.2fx %9.2e%s\n",
                    pb.name.c_str(), heads, shown.c_str(), r.median_ms * 1e3, floor_ms * 1e3,
                    100 * r.floor_fraction, r.GBps, r.baseline_ms * 1e3,
                    r.baseline_ms > 0 ? r.baseline_ms / r.median_ms : 0.0, r.max_rel_err,
                    r.check_ok ? "" : "  CHECK FAILED");
        std::fflush(stdout);
        results.push_back(r);
      }
    }
  }

  // geometric means of the floor fraction per (set, planner) and of the best planner per line
  std::map<std::pair<std::string, std::string>, std::pair<double, int>> gm;
  std::map<std::string, std::map<std::string, double>> best;  // set -> line -> best fraction
  int failures = 0;
  for (const Result& r : results) {
    auto& g = gm[{r.set.empty() ? "-" : r.set, display_planner(r, kernels.size())}];
    g.first += std::log(r.floor_fraction);
    g.second += 1;
    double& b =
        best[r.set.empty() ? "-" : r.set + (kernels.size() > 1 ? "/" + r.grouped_kernel : "")]
            [r.workload + "|" + std::to_string(r.page_size)];
    b = std::max(b, r.floor_fraction);
    failures += !r.check_ok;
  }
  std::printf("\ngeometric mean of floor fraction:\n");
  for (const auto& [key, v] : gm)
    std::printf("  set=%-9s planner=%-10s %6.1f%%  (%d lines)\n", key.first.c_str(),
                key.second.c_str(), 100 * std::exp(v.first / v.second), v.second);
  for (const auto& [set, lines] : best) {
    double s = 0;
    for (const auto& [line, f] : lines) s += std::log(f);
    std::printf("  set=%-9s best planner per line %6.1f%%  (%zu lines)\n", set.c_str(),
                100 * std::exp(s / lines.size()), lines.size());
  }
  if (failures) std::printf("!!!! %d CHECK FAILURES\n", failures);
  if (g_planner_failures) std::printf("!!!! %d PLANNER FAILURES\n", g_planner_failures);
  failures += g_planner_failures;

  if (a.has("json")) {
    FILE* f = std::fopen(a.str("json").c_str(), "w");
    if (f == nullptr) throw std::invalid_argument("--json: cannot write '" + a.str("json") + "'");
    std::fprintf(f,
                 "{\"device\": \"%s\", \"date\": \"%s\", \"ceilings\": {\"hbm_read_GBps\": %.1f, "
                 "\"tc_TFLOPs\": %.1f}, \"l2_flush\": %s,\n \"results\": [",
                 json_escape(prop.name).c_str(), today().c_str(), hbm, tc,
                 tm.flush_bytes > 0 ? "true" : "false");
    for (size_t i = 0; i < results.size(); ++i) {
      const Result& r = results[i];
      std::fprintf(f,
                   "%s\n  {\"workload\": \"%s\", \"set\": \"%s\", \"planner\": \"%s\", \"dtype\": "
                   "\"%s\", \"page_size\": %d, \"median_ms\": %.6f, \"floor_ms\": %.6f, "
                   "\"floor_fraction\": %.4f, \"baseline_query_ms\": %.6f, \"max_rel_err\": %.3e, "
                   "\"heads\": \"%d/%d\", \"head_dim\": %d, \"queries\": %d, \"GBps\": %.1f, "
                   "\"bytes_min\": %.0f, \"flops_min\": %.0f, \"items\": %lld, "
                   "\"kv_bytes_read\": %.0f, \"est_us\": %.2f, \"grouped_kernel\": \"%s\", "
                   "\"grouped_run\": \"%s\", \"partials\": \"%s\", \"kv_dtype\": \"%s\", "
                   "\"paths_group\": %d, \"check_ok\": %s}",
                   i ? "," : "", json_escape(r.workload).c_str(), json_escape(r.set).c_str(),
                   r.planner.c_str(), r.dtype.c_str(), r.page_size, r.median_ms, r.floor_ms,
                   r.floor_fraction, r.baseline_ms, r.max_rel_err, r.qo, r.kv, r.head_dim,
                   r.queries, r.GBps, r.bytes_min, r.flops_min, static_cast<long long>(r.items),
                   r.kv_read_bytes, r.est_us, r.grouped_kernel.c_str(), r.grouped_run.c_str(),
                   r.partials.c_str(), r.kv_dtype.c_str(), r.paths_group,
                   r.check_ok ? "true" : "false");
    }
    std::fprintf(f, "\n]}\n");
    std::fclose(f);
  }
  if (timeline_file != nullptr) std::fclose(timeline_file);
  cudaFree(tm.flush);
  cudaEventDestroy(tm.e0);
  cudaEventDestroy(tm.e1);
  cudaStreamDestroy(tm.stream);
  return failures ? 1 : 0;
}

}  // namespace treeattn::cli
