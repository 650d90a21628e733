#!/usr/bin/env bash
# One device call that checks a whole change on the GPU (repository root, <= 9 minutes on an H100
# with 16 cores), for sessions with little device time:
#   1. builds the CLI + GPU tests (bench/device_final.sh's build stage) and, at the same time,
#      pip-installs the Python package (sm_90a, no build isolation)
#   2. runs every C++ GPU test (one process each) with memcheck/racecheck/synccheck on the small
#      ones, and, at the same time, the Python GPU tests (tests/python -m gpu, test_docs.py)
#   3. treeattn bench --planner auto on the FastTree and PAT sets and the named lines (nothing else
#      on the GPU meanwhile); BENCH_SETS and BENCH_VARIANTS (see the stage) for an A/B
#   4. the engine's bench on W1 and W6 with the treeattn backend (32 layers, bf16, CUDA graphs)
# Carry: build-devdeps. Files back: summary.txt (printed last), logs.txt, bench.json (and
# bench_v<i>.json per extra variant), engine_bench.json.
set -uo pipefail
OUT=${OUT:-/tmp/session_out}
mkdir -p "$OUT"
LOGS=/tmp/session_logs
mkdir -p "$LOGS"
SUMMARY="$OUT/summary.txt"
: >"$SUMMARY"
T0=$(date +%s)
note() { echo "$*" | tee -a "$SUMMARY"; }
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 HF_HUB_OFFLINE=1

# ---- 1. both builds at once (8 jobs each)
t0=$(date +%s)
(OUT=$LOGS/cpp STAGES="build" JOBS=8 bash bench/device_final.sh >"$LOGS/cpp_build.log" 2>&1) &
cpp_pid=$!
(CMAKE_BUILD_PARALLEL_LEVEL=8 timeout 300 python3 -m pip install --no-build-isolation --no-deps . \
  -C cmake.define.TREEATTN_CUDA_ARCHS=90a -C build-dir=/tmp/treeattn-build-py \
  >"$LOGS/pip.log" 2>&1; echo $? >"$LOGS/pip.rc") &
py_pid=$!
wait $cpp_pid
note "cpp build: $(grep -h 'build:' "$LOGS/cpp/summary.txt" 2>/dev/null) $(grep -h 'sass' "$LOGS/cpp/summary.txt" 2>/dev/null)"
wait $py_pid
note "pip install: rc=$(cat "$LOGS/pip.rc") at $(($(date +%s) - t0)) s"
(cd /tmp && python3 -c 'import treeattn; print("treeattn built_with_cuda", treeattn.built_with_cuda)') \
  2>&1 | tee -a "$SUMMARY"

# ---- 2. C++ GPU tests + sanitizers, and the Python GPU tests, side by side
t0=$(date +%s)
(OUT=$LOGS/cpp STAGES="tests sanitize" bash bench/device_final.sh >"$LOGS/cpp_tests.log" 2>&1) &
cpp_pid=$!
ln -sfn build-final build  # test_docs.py runs the documented CLI commands from build/
timeout 240 python3 -m pytest tests/python -m gpu -q -rs -p no:cacheprovider \
  >"$LOGS/pytest_gpu.log" 2>&1
note "pytest gpu: rc=$? in $(($(date +%s) - t0)) s: $(grep -E '(passed|failed|error)' "$LOGS/pytest_gpu.log" | tail -n 1)"
grep -E "^(FAILED|ERROR)" "$LOGS/pytest_gpu.log" | head -n 20 | tee -a "$SUMMARY"
timeout 120 python3 -m pytest tests/python/test_docs.py -q -rs -p no:cacheprovider \
  >"$LOGS/pytest_docs.log" 2>&1
note "pytest docs: rc=$? at $(($(date +%s) - t0)) s: $(grep -E '(passed|failed|error)' "$LOGS/pytest_docs.log" | tail -n 1)"
grep -E "^(FAILED|ERROR)" "$LOGS/pytest_docs.log" | head -n 10 | tee -a "$SUMMARY"
wait $cpp_pid
grep -hE "gpu tests|memcheck|racecheck|synccheck|SKIPPED|Failure|FAILED" "$LOGS/cpp/summary.txt" \
  | tee -a "$SUMMARY"
note "tests: $(($(date +%s) - t0)) s"

# ---- 3. bench (alone on the GPU), once per variant of BENCH_VARIANTS ('|'-separated extra flags,
# e.g. "--cost-merge old|--cost-merge new"; default one run without extra flags) on the sets of
# BENCH_SETS [fasttree pat] and the named lines; variant i's JSON is $OUT/bench.json (i = 0) or
# $OUT/bench_v<i>.json
t0=$(date +%s)
IFS='|' read -ra variants <<<"${BENCH_VARIANTS:-}"
((${#variants[@]} == 0)) && variants=("")
for vi in "${!variants[@]}"; do
  v=${variants[$vi]}
  rm -f /tmp/bench_*.json
  for s in ${BENCH_SETS:-fasttree pat}; do
    timeout 120 ./build-final/treeattn bench --workloads $s --planner auto $v --json /tmp/bench_$s.json \
      >>"$LOGS/bench.log" 2>&1
    note "bench $s [$v]: rc=$? at $(($(date +%s) - t0)) s"
  done
  i=0
  for lv in "N=1,1024 C=32768,16 heads=32/8" "N=1,1024 C=2048,32 heads=32/8 page=32" \
            "N=1,64 C=4096,64 heads=32/8" "N=256 C=4096 heads=32/8"; do
    timeout 45 ./build-final/treeattn bench --levels "$lv" --planner auto $v \
      --json /tmp/bench_named$i.json >>"$LOGS/bench.log" 2>&1
    i=$((i + 1))
  done
  out_json="$OUT/bench.json"
  ((vi > 0)) && out_json="$OUT/bench_v$vi.json"
  python3 bench/merge_bench_json.py "$out_json" /tmp/bench_*.json
done
note "bench: $(($(date +%s) - t0)) s; check failures: $(grep -c 'CHECK FAILED' "$LOGS/bench.log")"

# ---- 4. engine W1 and W6 on the serving core
t0=$(date +%s)
left=$((560 - (t0 - T0)))
if ((left > 60)); then
  timeout $((left - 10)) python3 -m treeattn.engine.cli bench --model llama3-8b --layers 32 \
    --dtype bf16 --workloads W1,W6 --backends treeattn --time-budget $((left - 40)) \
    --json "$OUT/engine_bench.json" >"$LOGS/engine.log" 2>&1
  note "engine: rc=$? in $(($(date +%s) - t0)) s"
  grep -E "^\||tok/s|Error" "$LOGS/engine.log" | head -20 | tee -a "$SUMMARY"
else
  note "engine: skipped, $left s left"
fi

for f in "$LOGS"/*.log "$LOGS"/cpp/summary.txt; do echo "===== $f"; cat "$f"; done >"$OUT/logs.txt" 2>/dev/null
cat /tmp/final_logs/*.log >>"$OUT/logs.txt" 2>/dev/null
note "total: $(($(date +%s) - T0)) s"
echo "==== summary"
cat "$SUMMARY"
