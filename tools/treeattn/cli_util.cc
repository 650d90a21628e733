// Implementation of the CLI output helpers (cli_util.h).
#include "cli_util.h"

#include <chrono>
#include <cmath>
#include <condition_variable>
#include <fstream>
#include <mutex>
#include <stdexcept>
#include <thread>

namespace treeattn::cli {

void JsonOut::write() const {
  if (!enabled()) return;
  if (to_stdout()) {
    std::fputs(os_.str().c_str(), stdout);
    std::fflush(stdout);
    return;
  }
  std::ofstream f(path_, std::ios::binary);
  f << os_.str();
  f.close();
  if (!f) throw std::invalid_argument("--json: cannot write '" + path_ + "'");
  std::fprintf(stderr, "treeattn %s: wrote %s\n", command_.c_str(), path_.c_str());
}

std::string json_number(double v) {
  if (!std::isfinite(v)) return "null";
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.17g", v);
  return buf;
}

std::string json_escape(const std::string& s) {
  std::string o;
  for (const char c : s) {
    if (c == '"' || c == '\\') {
      o += '\\';
      o += c;
    } else if (static_cast<unsigned char>(c) < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof(buf), "\\u%04x", c);
      o += buf;
    } else {
      o += c;
    }
  }
  return o;
}

Plan planned(const PrefixTree& tree, const PlanOptions& opts, const std::string& command,
             const std::string& label) {
  using Clock = std::chrono::steady_clock;
  const auto t0 = Clock::now();
  std::mutex mu;
  std::condition_variable cv;
  bool done = false, announced = false;
  std::thread watcher([&] {
    std::unique_lock<std::mutex> lock(mu);
    if (cv.wait_for(lock, std::chrono::seconds(1), [&] { return done; })) return;
    announced = true;
    std::fprintf(stderr, "treeattn %s: planning %s with %s ...\n", command.c_str(), label.c_str(),
                 opts.planner.c_str());
  });
  auto finish = [&] {
    {
      std::lock_guard<std::mutex> lock(mu);
      done = true;
    }
    cv.notify_all();
    watcher.join();
    if (announced)
      std::fprintf(stderr, "treeattn %s: planning %s with %s took %.1f s\n", command.c_str(),
                   label.c_str(), opts.planner.c_str(),
                   std::chrono::duration<double>(Clock::now() - t0).count());
  };
  try {
    Plan plan = make_plan(tree, opts);
    finish();
    return plan;
  } catch (...) {
    finish();
    throw;
  }
}

}  // namespace treeattn::cli
