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
  size_t flush_bytes = 0;
  FILE* json = nullptr;
  int runs = 7;  ///< stamped runs; the one with the median event time is reported
};

/// SM cycles (clock64) per global-timer ns on the current device, measured once per process by a
/// kernel that spins ~1 ms reading both.
double timeline_clocks_per_ns();

/// Runs `dp` with `args` setup.runs times, each after an L2 flush and a one-thread kernel that
/// stamps the global timer (so the launch latency of the first attention CTA is measured from the
/// end of the previous kernel), then writes the median run as a JSON line and prints its summary.
/// `line` and `planner` label the output.
void timeline_line(const DevicePlan& dp, DecodeArgs args, const TimelineSetup& setup,
                   const std::string& line, const std::string& planner);

}  // namespace treeattn::cli
