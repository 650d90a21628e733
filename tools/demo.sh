#!/usr/bin/env bash
# The main job on the embedded default workload (FastTree's N=1,4,16,512 C=1024,256,128,32,
# heads 32/8): build, print every planner's plan summary, check the auto plan on the CPU executor
# against the float64 oracle; with a GPU, run the GPU benchmark on the FastTree workload set.
set -euo pipefail
cd "$(dirname "$0")/.."
JOBS=${JOBS:-$(nproc)}
# Without a GPU the CUDA code is compiled only, so a representative kernel subset is enough.
subset=ON
if nvidia-smi -L >/dev/null 2>&1 || [ "${TREEATTN_FULL_KERNELS:-0}" = 1 ]; then subset=OFF; fi
cmake -S . -B build -DTREEATTN_CI_KERNELS=$subset >/dev/null
cmake --build build -j"$JOBS"
W='N=1,4,16,512 C=1024,256,128,32 heads=32/8'
build/treeattn plan --levels "$W" --planner all
build/treeattn check --levels "$W" --planner auto --sample-queries 32
if nvidia-smi -L >/dev/null 2>&1; then
  mkdir -p bench/results
  build/treeattn bench --workloads fasttree --planner auto --json "bench/results/local-$(date +%F).json"
else
  echo "demo: no GPU here, skipping the GPU benchmark (treeattn bench)"
fi
