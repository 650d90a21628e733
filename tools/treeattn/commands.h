// Subcommands of the treeattn CLI; main.cc dispatches on argv[1].
#pragma once

namespace treeattn::cli {

int plan_command(int argc, char** argv);       // treeattn plan ...
int check_command(int argc, char** argv);      // treeattn check ...
int workloads_command(int argc, char** argv);  // treeattn workloads
/// treeattn bench ...: defined in bench.cu when built with CUDA; main.cc prints a clear message
/// and exits 2 otherwise (TREEATTN_WITH_CUDA undefined).
int bench_command(int argc, char** argv);

}  // namespace treeattn::cli
