#!/usr/bin/env bash
# The fp8 KV results run in one device call (repository root, <= 9.5 minutes on an H100):
#   1. builds: the CLI + GPU tests and the Python package, at once
#   2. every C++ GPU test with the sanitizers on the small ones, and the Python GPU tests
#   3. treeattn bench --planner auto, fp16 KV then fp8 e4m3, on the no-sharing lines, two
#      shared-prefix lines and the PAT set (FP8_BENCH_ARGS: extra flags of the fp8 runs, e.g.
#      --grouped-kernel legacy,auto for an A/B in one process)
#   4. bench/device_fp8.sh: the fp8 peer table (treeattn fp16 / fp8 beside FlashInfer's fp8
#      decode) and the engine (W1 bf16 vs fp8 KV, drift, the engine's fp8 GPU tests)
#   5. ncu of the fp8 kernel on N=256 C=4096 heads=32/8 (memory throughput, stalls, occupancy)
# Carry: build-devdeps, peers/wheels-fp8. Everything lands in results.tar.gz; summary.txt prints
# last.
set -uo pipefail
OUT=${OUT:-/tmp/fp8_final}
R=/tmp/fp8_results
mkdir -p "$OUT" "$R"
LOGS=$R/logs
mkdir -p "$LOGS"
SUMMARY="$R/summary.txt"
: >"$SUMMARY"
T0=$(date +%s)
note() { echo "$*" | tee -a "$SUMMARY"; }
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 HF_HUB_OFFLINE=1
note "gpu: $(nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader); date: $(date -u +%FT%TZ); commit: $(git rev-parse --short HEAD 2>/dev/null)"

# ---- 1. both builds at once
(OUT=$LOGS/cpp STAGES="build" JOBS=8 bash bench/device_final.sh >"$LOGS/cpp_build.log" 2>&1) &
cpp_pid=$!
(CMAKE_BUILD_PARALLEL_LEVEL=8 timeout 400 python3 -m pip install --no-build-isolation --no-deps . \
  -C cmake.define.TREEATTN_CUDA_ARCHS=90a -C build-dir=/tmp/treeattn-build-py \
  >"$LOGS/pip.log" 2>&1; echo $? >"$LOGS/pip.rc") &
py_pid=$!
wait $cpp_pid
note "cpp build: $(grep -h 'build:' "$LOGS/cpp/summary.txt" 2>/dev/null)"
[[ -x build-final/treeattn ]] || { tail -n 40 "$LOGS/cpp/build.log"; exit 1; }

# ---- 2. tests
t0=$(date +%s)
(OUT=$LOGS/cpp STAGES="tests sanitize" bash bench/device_final.sh >"$LOGS/cpp_tests.log" 2>&1) &
cpp_pid=$!
wait $py_pid
note "pip install: rc=$(cat "$LOGS/pip.rc") at $(($(date +%s) - T0)) s"
ln -sfn build-final build
timeout 200 python3 -m pytest tests/python -m gpu -q -rs -p no:cacheprovider \
  >"$LOGS/pytest_gpu.log" 2>&1
note "pytest gpu: rc=$?: $(grep -E '(passed|failed|error)' "$LOGS/pytest_gpu.log" | tail -n 1)"
grep -E "^(FAILED|ERROR)" "$LOGS/pytest_gpu.log" | head -n 20 | tee -a "$SUMMARY"
wait $cpp_pid
grep -hE "gpu tests|memcheck|racecheck|synccheck|Failure|FAILED" "$LOGS/cpp/summary.txt" \
  | head -n 30 | tee -a "$SUMMARY"
note "tests: $(($(date +%s) - t0)) s"

# ---- 3. fp16 then fp8 KV on the same lines
t0=$(date +%s)
LINES=("N=256 C=4096 heads=32/8" "N=512 C=1024 heads=32/8" "N=1,1024 C=2048,32 heads=32/8"
       "N=1,64 C=4096,64 heads=32/8")
run_set() {  # run_set <tag> <cli> <kv> [extra bench flags]
  local i=0
  for lv in "${LINES[@]}"; do
    timeout 60 "$2" bench --levels "$lv" --planner auto --kv-dtype "$3" ${4:-} \
      --json /tmp/ab_$1_named$i.json >>"$LOGS/bench_$1.log" 2>&1
    i=$((i + 1))
  done
  timeout 180 "$2" bench --workloads pat --planner auto --kv-dtype "$3" ${4:-} \
    --json /tmp/ab_$1_pat.json >>"$LOGS/bench_$1.log" 2>&1
  python3 bench/merge_bench_json.py "$R/bench_$1.json" /tmp/ab_$1_*.json
  note "bench $1: $(($(date +%s) - t0)) s; check failures $(grep -c 'CHECK FAILED' "$LOGS/bench_$1.log")"
}
run_set fp16 ./build-final/treeattn same
run_set fp8 ./build-final/treeattn fp8_e4m3 "${FP8_BENCH_ARGS:-}"

# ---- 4. peers and engine
left=$((480 - ($(date +%s) - T0)))
note "device_fp8.sh with ${left} s left"
if ((left > 60)); then
  OUT=$R/peers PEERS_BUDGET_S=$((left / 3)) ENGINE_BUDGET_S=60 TEST_TIMEOUT=80 \
    timeout $((left - 5)) bash bench/device_fp8.sh >"$LOGS/device_fp8.log" 2>&1
  note "device_fp8.sh: rc=$?"
fi

# ---- 5. ncu of the fp8 kernel on the first no-sharing line
left=$((560 - ($(date +%s) - T0)))
if ((left > 30)); then
  timeout $((left - 5)) ncu --kernel-name-base mangled -k "regex:decode_attention_kernel.*KvDTypeE1E" \
    -c 1 --section SpeedOfLight --section MemoryWorkloadAnalysis --section WarpStateStats \
    --section Occupancy --section LaunchStats ./build-final/treeattn bench \
    --levels "N=256 C=4096 heads=32/8" --planner query --kv-dtype fp8_e4m3 >"$R/ncu_fp8.txt" 2>&1
  note "ncu: rc=$?"
fi
note "total: $(($(date +%s) - T0)) s"
tar -czf "$OUT/results.tar.gz" -C /tmp fp8_results
cat "$SUMMARY"
