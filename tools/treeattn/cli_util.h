// Output helpers shared by the CLI subcommands: `--json [FILE]` handling (JSON to a file, or to
// stdout with the human-readable text moved to stderr), full-precision JSON numbers, and
// planning with a progress note on stderr when it takes over a second.
#pragma once

#include <cstdio>
#include <sstream>
#include <string>

#include "treeattn/plan/planner.h"

namespace treeattn::cli {

/// Collects a command's JSON and writes it where `--json` said: nowhere when `path` is empty,
/// stdout for "-", else the file (an error naming --json if it cannot be written).
class JsonOut {
 public:
  JsonOut(std::string path, std::string command)
      : path_(std::move(path)), command_(std::move(command)) {}
  bool enabled() const { return !path_.empty(); }
  bool to_stdout() const { return path_ == "-"; }
  /// Where the human-readable text goes: stderr when the JSON takes stdout.
  FILE* human() const { return to_stdout() ? stderr : stdout; }
  std::ostringstream& text() { return os_; }
  void write() const;

 private:
  std::string path_, command_;
  std::ostringstream os_;
};

/// A JSON number with full precision (%.17g, round-trips a double); null when not finite.
std::string json_number(double v);
/// JSON string escaping (quotes, backslashes, control characters).
std::string json_escape(const std::string& s);

/// make_plan(), printing "treeattn <command>: planning <label> with <planner>..." on stderr
/// once it has run for a second, and the time taken when it ends.
Plan planned(const PrefixTree& tree, const PlanOptions& opts, const std::string& command,
             const std::string& label);

}  // namespace treeattn::cli
