// `treeattn bench --timeline`: stamped runs of one plan (DecodeArgs::timeline), the median run's
// per-CTA stamps as a JSON line, and a one-line account of its critical path; and what every timed
// run of the bench is preceded by (the L2 flush, or a spin kernel under --l2-flush off).
#include <algorithm>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include "bench_timeline.h"
#include "cli_util.h"
#include "treeattn/plan/tile_policy.h"

namespace treeattn::cli {
namespace {

void cuda_ok(cudaError_t e, const char* what) {
  if (e != cudaSuccess)
    throw std::runtime_error(std::string("timeline: ") + what + ": " + cudaGetErrorString(e));
}

__device__ __forceinline__ uint64_t global_ns() {
  uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;\n" : "=l"(t)::"memory");
  return t;
}

__global__ void stamp_kernel(uint64_t* out) { *out = global_ns(); }

__global__ void spin_kernel(uint64_t ns) {
  const uint64_t t0 = global_ns();
  while (global_ns() - t0 < ns) {
  }
}

__global__ void clock_rate_kernel(uint64_t* out) {
  const uint64_t t0 = global_ns();
  const uint64_t c0 = clock64();
  uint64_t t1 = t0;
  while (t1 - t0 < 1000000) t1 = global_ns();
  out[0] = t1 - t0;
  out[1] = clock64() - c0;
}

const char* config_name(int cfg) {
  switch (cfg) {
    case tile::kConfigWide:
      return "kM16-wide";
    case tile::kConfigDeep:
      return "kM16-deep";
    case tile::kConfigShort:
      return "kM16-short";
    case 1:
      return "kM64";
    case 2:
      return "kM128";
    case kTlMergeConfig:
      return "merge";
  }
  return "?";
}

/// One CTA's record, times in ns from the first attention CTA's start (-1: phase not reached).
struct Cta {
  int cfg = 0;
  int64_t index = 0;  ///< item of its tile class, or the merge's query
  int head_group = 0, sm = 0;
  double start = -1, item = -1, kv = -1, loop = -1, end = -1;
  bool empty() const { return item < 0; }
};

/// Reads the valid records of one run; t0 (global ns) = the first attention CTA's start.
std::vector<Cta> decode(const std::vector<uint64_t>& w, const PlanLayout& layout,
                        double clocks_per_ns, uint64_t* t0) {
  const int64_t kv_heads = layout.shape.num_kv_heads;
  const int64_t records = static_cast<int64_t>(w.size()) / kTimelineWords;
  const int64_t merge_base = layout.items * kv_heads;
  *t0 = UINT64_MAX;
  for (int64_t i = 0; i < std::min(records, merge_base); ++i)
    if (w[i * kTimelineWords + kTlTag] >> 63) *t0 = std::min(*t0, w[i * kTimelineWords]);
  std::vector<Cta> out;
  if (*t0 == UINT64_MAX) return out;
  for (int64_t i = 0; i < records; ++i) {
    const uint64_t* r = &w[i * kTimelineWords];
    if (!(r[kTlTag] >> 63)) continue;
    Cta c;
    c.cfg = static_cast<int>((r[kTlTag] >> 16) & 15);
    c.sm = static_cast<int>(r[kTlTag] & 0xffff);
    c.head_group = static_cast<int>((r[kTlTag] >> 20) & 0xfffff);
    if (c.cfg == kTlMergeConfig) {
      c.index = i - merge_base;
    } else {
      c.index = i / kv_heads - layout.class_item_off[tile::plan_class(c.cfg)];
    }
    c.start = static_cast<double>(static_cast<int64_t>(r[kTlGlobalStart] - *t0));
    auto at = [&](int word) {
      return r[word] == 0
                 ? -1.0
                 : c.start + static_cast<double>(static_cast<int64_t>(r[word] - r[kTlClockStart])) /
                                 clocks_per_ns;
    };
    c.item = at(kTlClockItem);
    c.kv = at(kTlClockKv);
    c.loop = at(kTlClockLoop);
    c.end = r[kTlGlobalEnd] == 0 ? -1.0
                                 : static_cast<double>(static_cast<int64_t>(r[kTlGlobalEnd] - *t0));
    out.push_back(c);
  }
  return out;
}

double median_of(std::vector<double> v) {
  if (v.empty()) return -1;
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

/// "x.x" in us from ns, or "-" for a phase not reached.
std::string us(double ns) {
  if (ns < 0) return "-";
  char b[32];
  std::snprintf(b, sizeof(b), "%.2f", ns * 1e-3);
  return b;
}
/// JSON number in us, or null.
std::string jus(double ns) { return ns < 0 ? "null" : us(ns); }
double span(double a, double b) { return a < 0 || b < 0 ? -1 : b - a; }

}  // namespace

void before_timed_run(cudaStream_t stream, void* flush, size_t flush_bytes, int run) {
  if (flush_bytes > 0) {
    cuda_ok(cudaMemsetAsync(flush, run & 0xFF, flush_bytes, stream), "L2 flush");
  } else {
    spin_kernel<<<1, 1, 0, stream>>>(30000);
    cuda_ok(cudaGetLastError(), "spin kernel");
  }
}

double timeline_clocks_per_ns() {
  static double cached = 0;
  if (cached > 0) return cached;
  uint64_t* d = nullptr;
  cuda_ok(cudaMalloc(&d, 2 * sizeof(uint64_t)), "cudaMalloc");
  clock_rate_kernel<<<1, 1>>>(d);
  uint64_t h[2] = {0, 0};
  const cudaError_t e = cudaMemcpy(h, d, sizeof(h), cudaMemcpyDeviceToHost);
  cudaFree(d);
  cuda_ok(e, "clock rate kernel");
  cached = h[0] > 0 ? static_cast<double>(h[1]) / static_cast<double>(h[0]) : 1.0;
  return cached;
}

void timeline_line(const DevicePlan& dp, DecodeArgs args, const TimelineSetup& setup,
                   const std::string& line, const std::string& planner) {
  const PlanLayout& layout = dp.layout();
  const int64_t words = timeline_records(layout) * kTimelineWords;
  const double cpn = timeline_clocks_per_ns();
  uint64_t* d_words = nullptr;
  uint64_t* d_stamp = nullptr;
  cuda_ok(cudaMalloc(&d_words, words * sizeof(uint64_t)), "cudaMalloc of the stamps");
  cuda_ok(cudaMalloc(&d_stamp, sizeof(uint64_t)), "cudaMalloc");
  cudaEvent_t e0, e1;
  cuda_ok(cudaEventCreate(&e0), "cudaEventCreate");
  cuda_ok(cudaEventCreate(&e1), "cudaEventCreate");
  struct Run {
    double event_ms = 0;
    uint64_t stamp = 0;
    std::vector<uint64_t> w;
  };
  std::vector<Run> runs(std::max(1, setup.runs));
  args.timeline = d_words;
  for (size_t r = 0; r < runs.size(); ++r) {
    cuda_ok(cudaMemsetAsync(d_words, 0, words * sizeof(uint64_t), setup.stream), "memset");
    before_timed_run(setup.stream, setup.flush, setup.flush_bytes, static_cast<int>(r));
    stamp_kernel<<<1, 1, 0, setup.stream>>>(d_stamp);
    cuda_ok(cudaEventRecord(e0, setup.stream), "cudaEventRecord");
    dp.run(args, setup.stream);
    cuda_ok(cudaEventRecord(e1, setup.stream), "cudaEventRecord");
    cuda_ok(cudaEventSynchronize(e1), "stamped run");
    float ms = 0;
    cuda_ok(cudaEventElapsedTime(&ms, e0, e1), "cudaEventElapsedTime");
    runs[r].event_ms = ms;
    runs[r].w.resize(words);
    cuda_ok(cudaMemcpy(runs[r].w.data(), d_words, words * sizeof(uint64_t), cudaMemcpyDeviceToHost),
            "stamps to host");
    cuda_ok(cudaMemcpy(&runs[r].stamp, d_stamp, sizeof(uint64_t), cudaMemcpyDeviceToHost),
            "stamp to host");
  }
  cudaEventDestroy(e0);
  cudaEventDestroy(e1);
  cudaFree(d_words);
  cudaFree(d_stamp);
  std::sort(runs.begin(), runs.end(),
            [](const Run& a, const Run& b) { return a.event_ms < b.event_ms; });
  const Run& run = runs[runs.size() / 2];

  uint64_t t0 = 0;
  const std::vector<Cta> ctas = decode(run.w, layout, cpn, &t0);
  const double event = run.event_ms * 1e6;
  const double launch =
      ctas.empty() ? -1 : static_cast<double>(static_cast<int64_t>(t0 - run.stamp));
  // the critical attention CTA (latest end), medians of the non-empty ones, the merge
  const Cta* crit = nullptr;
  const Cta* merge_last = nullptr;
  std::vector<double> m_item, m_kv, m_compute, m_epi;
  double last_end = -1, merge_first = -1, release_first = -1, release_last = -1;
  int attn = 0, empty = 0, merges = 0;
  std::vector<double> starts;
  for (const Cta& c : ctas) {
    if (c.cfg == kTlMergeConfig) {
      if (c.empty()) continue;  // a query without a merge list
      ++merges;
      merge_first = merge_first < 0 ? c.start : std::min(merge_first, c.start);
      release_first = release_first < 0 ? c.kv : std::min(release_first, c.kv);
      release_last = std::max(release_last, c.kv);
      if (merge_last == nullptr || c.end > merge_last->end) merge_last = &c;
    } else {
      ++attn;
      starts.push_back(c.start);
      if (c.empty()) {
        ++empty;
        continue;
      }
      if (crit == nullptr || c.end > crit->end) crit = &c;
      m_item.push_back(span(c.start, c.item));
      m_kv.push_back(span(c.item, c.kv));
      m_compute.push_back(span(c.kv, c.loop));
      m_epi.push_back(span(c.loop, c.end));
    }
    last_end = std::max(last_end, c.end);
  }
  // the global timer's step, seen as the smallest gap between distinct CTA starts
  std::sort(starts.begin(), starts.end());
  double step = -1;
  for (size_t i = 1; i < starts.size(); ++i)
    if (starts[i] > starts[i - 1] && (step < 0 || starts[i] - starts[i - 1] < step))
      step = starts[i] - starts[i - 1];

  std::printf(
      "  timeline %s %s: event %s us, CTAs span %s (launch and drain inside the events %s); "
      "previous kernel's end to the first CTA %s\n",
      line.c_str(), planner.c_str(), us(event).c_str(), us(last_end).c_str(),
      us(last_end < 0 ? -1 : event - last_end).c_str(), us(launch).c_str());
  if (crit != nullptr)
    std::printf(
        "    critical CTA %s item %lld group %d sm %d: starts +%s, item +%s, chain to first KV "
        "+%s, compute %s, epilogue %s, ends at %s\n",
        config_name(crit->cfg), static_cast<long long>(crit->index), crit->head_group, crit->sm,
        us(crit->start).c_str(), us(span(crit->start, crit->item)).c_str(),
        us(span(crit->item, crit->kv)).c_str(), us(span(crit->kv, crit->loop)).c_str(),
        us(span(crit->loop, crit->end)).c_str(), us(crit->end).c_str());
  std::printf(
      "    median CTA: item %s, chain to first KV %s, compute %s, epilogue %s; %d CTAs "
      "(%d empty), timer step %s us\n",
      us(median_of(m_item)).c_str(), us(median_of(m_kv)).c_str(), us(median_of(m_compute)).c_str(),
      us(median_of(m_epi)).c_str(), attn, empty, us(step).c_str());
  if (merges > 0)
    std::printf("    merge: %d CTAs, first starts +%s, released %s..%s, last ends %s\n", merges,
                us(merge_first).c_str(), us(release_first).c_str(), us(release_last).c_str(),
                us(merge_last->end).c_str());
  std::fflush(stdout);

  if (setup.json == nullptr) return;
  FILE* f = setup.json;
  std::fprintf(f,
               "{\"workload\": \"%s\", \"planner\": \"%s\", \"event_us\": %s, \"launch_us\": %s, "
               "\"span_us\": %s, \"clocks_per_ns\": %.4f, \"timer_step_us\": %s, \"runs\": %zu",
               json_escape(line).c_str(), json_escape(planner).c_str(), jus(event).c_str(),
               jus(launch).c_str(), jus(last_end).c_str(), cpn, jus(step).c_str(), runs.size());
  if (crit != nullptr)
    std::fprintf(f,
                 ", \"critical\": {\"config\": \"%s\", \"item\": %lld, \"head_group\": %d, "
                 "\"sm\": %d, \"start_us\": %s, \"item_us\": %s, \"chain_us\": %s, "
                 "\"compute_us\": %s, \"epilogue_us\": %s, \"end_us\": %s}",
                 config_name(crit->cfg), static_cast<long long>(crit->index), crit->head_group,
                 crit->sm, jus(crit->start).c_str(), jus(span(crit->start, crit->item)).c_str(),
                 jus(span(crit->item, crit->kv)).c_str(), jus(span(crit->kv, crit->loop)).c_str(),
                 jus(span(crit->loop, crit->end)).c_str(), jus(crit->end).c_str());
  std::fprintf(f,
               ", \"median\": {\"item_us\": %s, \"chain_us\": %s, \"compute_us\": %s, "
               "\"epilogue_us\": %s}, \"attention_ctas\": %d, \"empty_ctas\": %d",
               jus(median_of(m_item)).c_str(), jus(median_of(m_kv)).c_str(),
               jus(median_of(m_compute)).c_str(), jus(median_of(m_epi)).c_str(), attn, empty);
  if (merges > 0)
    std::fprintf(f,
                 ", \"merge\": {\"ctas\": %d, \"first_start_us\": %s, \"released_first_us\": %s, "
                 "\"released_last_us\": %s, \"end_us\": %s}",
                 merges, jus(merge_first).c_str(), jus(release_first).c_str(),
                 jus(release_last).c_str(), jus(merge_last->end).c_str());
  // every CTA: [config, item or query, head group, sm, start, item, kv, loop, end] in ns from
  // the first attention CTA's start (-1: not reached)
  std::fprintf(f, ", \"ctas\": [");
  for (size_t i = 0; i < ctas.size(); ++i) {
    const Cta& c = ctas[i];
    std::fprintf(f, "%s[%d,%lld,%d,%d,%.0f,%.0f,%.0f,%.0f,%.0f]", i ? "," : "", c.cfg,
                 static_cast<long long>(c.index), c.head_group, c.sm, c.start, c.item, c.kv, c.loop,
                 c.end);
  }
  std::fprintf(f, "]}\n");
  std::fflush(f);
}

}  // namespace treeattn::cli
