// treeattn CLI entry point: dispatches argv[1] to the subcommands of commands.h. Argument errors
// (std::invalid_argument, message naming the flag) print "treeattn <cmd>: <message>" and exit 2.
#include <cstdio>
#include <cstring>
#include <exception>
#include <stdexcept>
#include <string>

#include "commands.h"
#include "treeattn/plan/plan.h"

#ifndef TREEATTN_VERSION
#define TREEATTN_VERSION "unknown"
#endif

namespace {

#if defined(TREEATTN_WITH_CUDA)
constexpr bool kWithCuda = true;
#else
constexpr bool kWithCuda = false;
#endif

void print_usage(FILE* out) {
  std::fprintf(
      out,
      "usage: treeattn <command> [flags]\n"
      "commands:\n"
      "  plan       plan a tree and print plan statistics per planner\n"
      "  check      check plans: coverage, then CPU executor vs float64 oracle\n"
      "  workloads  list the embedded workload sets\n"
      "  bench      GPU benchmark (CUDA builds only)\n"
      "run 'treeattn <command> --help' for its flags; 'treeattn --version' for the version\n");
}

}  // namespace

#if !defined(TREEATTN_WITH_CUDA)
namespace treeattn::cli {
int bench_command(int, char**) {
  std::fprintf(stderr,
               "treeattn bench: this build has no CUDA kernels (nvcc was not found at configure "
               "time)\n");
  return 2;
}
}  // namespace treeattn::cli
#endif

int main(int argc, char** argv) {
  if (argc < 2 || !std::strcmp(argv[1], "--help") || !std::strcmp(argv[1], "-h") ||
      !std::strcmp(argv[1], "help")) {
    // no command is an error: the usage goes to stderr with exit code 2
    print_usage(argc < 2 ? stderr : stdout);
    return argc < 2 ? 2 : 0;
  }
  const std::string cmd = argv[1];
  if (cmd == "--version" || cmd == "version") {
    std::printf("treeattn %s (plan format %d, CUDA kernels: %s)\n", TREEATTN_VERSION,
                treeattn::kPlanVersion, kWithCuda ? "yes" : "no");
    return 0;
  }
  try {
    if (cmd == "plan") return treeattn::cli::plan_command(argc, argv);
    if (cmd == "check") return treeattn::cli::check_command(argc, argv);
    if (cmd == "workloads") return treeattn::cli::workloads_command(argc, argv);
    if (cmd == "bench") return treeattn::cli::bench_command(argc, argv);
    std::fprintf(stderr, "treeattn: unknown command '%s'\n", cmd.c_str());
    print_usage(stderr);
    return 2;
  } catch (const std::invalid_argument& e) {
    std::fprintf(stderr, "treeattn %s: %s\n", cmd.c_str(), e.what());
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "treeattn %s: error: %s\n", cmd.c_str(), e.what());
    return 1;
  }
}
