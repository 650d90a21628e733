// `treeattn bench --timeline FILE`: runs a line's plan a few times with per-CTA phase stamps
// (DecodeArgs::timeline), writes the stamps of the median run as one JSON line and prints where the
// microseconds of the critical path go (launch, metadata chain, first K/V, compute, epilogue,
// merge).
#pragma once

#include <cuda_runtime.h>

#include <cstdio>
#include <string>

#include "treeattn/kernels/decode.h"
#include "treeattn/kernels/device_plan.h"

namespace treeattn::cli {

/// What one timeline measurement needs besides the plan: the stream, the L2 flush buffer the
/// timed runs use, and where the JSON line goes.
struct TimelineSetup {
  cudaStream_t stream{};
  void* flush = nullptr;
  size_t flush_bytes = 0;  ///< 0: no flush (`--l2-flush off`)
  FILE* json = nullptr;
  int runs = 7;  ///< stamped runs; the one with the median event time is reported
};

/// SM cycles (clock64) per global-timer ns on the current device, measured once per process by a
/// kernel that spins ~1 ms reading both.
double timeline_clocks_per_ns();

/// Runs `dp` with `args` setup.runs times, each after before_timed_run() and a one-thread
/// kernel that stamps the global timer (so the launch latency of the first attention CTA is
/// measured from the end of the previous kernel), then writes the median run as a JSON line and
/// prints its summary. `line` and `planner` label the output.
void timeline_line(const DevicePlan& dp, DecodeArgs args, const TimelineSetup& setup,
                   const std::string& line, const std::string& planner);

/// What a timed run is preceded by on `stream`: the L2 flush when `flush_bytes` > 0 (a memset of
/// `flush` that takes ~100 us), else a kernel that spins for 30 us on one thread and touches no
/// memory. Either way the GPU is busy while the host enqueues the run, so the events around it time
/// the GPU's work, not the host's launch calls.
void before_timed_run(cudaStream_t stream, void* flush, size_t flush_bytes, int run);

}  // namespace treeattn::cli
