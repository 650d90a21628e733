#!/usr/bin/env bash
# One device call that checks the fp8 KV cache on the GPU (repository root, <= 9.5 minutes on an
# H100 with 16 cores):
#   1. builds the CLI + GPU tests (bench/device_final.sh's build stage) and, at the same time,
#      pip-installs the Python package (sm_90a, no build isolation)
#   2. every C++ GPU test (fp8 included) with the sanitizers on the small ones, and at the same
#      time the Python GPU tests
#   3. treeattn bench --planner auto, KV in the dtype (fp16) and in fp8 e4m3, on the no-sharing
#      lines and one shared-prefix line, and with BENCH_PAT=1 the PAT set (alone on the GPU)
#   4. STEP4 (optional): a script run last with the time left (e.g. bench/device_fp8.sh: the
#      FlashInfer fp8 peer and the engine)
# Carry: build-devdeps (and peers when STEP4 needs it). Files back: summary.txt, logs.txt,
# bench_fp16.json, bench_fp8.json, and what STEP4 writes under step4/.
set -uo pipefail
OUT=${OUT:-/tmp/fp8_out}
mkdir -p "$OUT"
LOGS=/tmp/fp8_logs
mkdir -p "$LOGS"
SUMMARY="$OUT/summary.txt"
: >"$SUMMARY"
T0=$(date +%s)
DEADLINE=${DEADLINE:-570}
note() { echo "$*" | tee -a "$SUMMARY"; }
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 HF_HUB_OFFLINE=1

# ---- 1. both builds at once (8 jobs each)
t0=$(date +%s)
(OUT=$LOGS/cpp STAGES="build" JOBS=8 bash bench/device_final.sh >"$LOGS/cpp_build.log" 2>&1) &
cpp_pid=$!
(CMAKE_BUILD_PARALLEL_LEVEL=8 timeout 400 python3 -m pip install --no-build-isolation --no-deps . \
  -C cmake.define.TREEATTN_CUDA_ARCHS=90a -C build-dir=/tmp/treeattn-build-py \
  >"$LOGS/pip.log" 2>&1; echo $? >"$LOGS/pip.rc") &
py_pid=$!
wait $cpp_pid
note "cpp build: $(grep -h 'build:' "$LOGS/cpp/summary.txt" 2>/dev/null) $(grep -h 'sass' "$LOGS/cpp/summary.txt" 2>/dev/null)"
if [[ ! -x build-final/treeattn ]]; then
  tail -n 60 "$LOGS/cpp_build.log" "$LOGS/cpp/build.log" >"$OUT/logs.txt" 2>/dev/null
  exit 1
fi

# ---- 2. C++ GPU tests + sanitizers, and the Python GPU tests, side by side
t0=$(date +%s)
(OUT=$LOGS/cpp STAGES="tests sanitize" bash bench/device_final.sh >"$LOGS/cpp_tests.log" 2>&1) &
cpp_pid=$!
wait $py_pid
note "pip install: rc=$(cat "$LOGS/pip.rc") at $(($(date +%s) - T0)) s"
ln -sfn build-final build
timeout 200 python3 -m pytest tests/python -m gpu -q -rs -p no:cacheprovider -x \
  >"$LOGS/pytest_gpu.log" 2>&1
note "pytest gpu: rc=$? in $(($(date +%s) - t0)) s: $(grep -E '(passed|failed|error)' "$LOGS/pytest_gpu.log" | tail -n 1)"
grep -E "^(FAILED|ERROR)" "$LOGS/pytest_gpu.log" | head -n 20 | tee -a "$SUMMARY"
wait $cpp_pid
grep -hE "gpu tests|memcheck|racecheck|synccheck|Failure|FAILED" "$LOGS/cpp/summary.txt" \
  | head -n 30 | tee -a "$SUMMARY"
note "tests: $(($(date +%s) - t0)) s"

# ---- 3. fp16 vs fp8 KV, same process per line pair, alone on the GPU
t0=$(date +%s)
for kv in same fp8_e4m3; do
  tag=$([[ $kv == same ]] && echo fp16 || echo fp8)
  i=0
  for lv in "N=256 C=4096 heads=32/8" "N=512 C=1024 heads=32/8" "N=1,1024 C=2048,32 heads=32/8"; do
    timeout 60 ./build-final/treeattn bench --levels "$lv" --planner auto --kv-dtype $kv \
      --json /tmp/b_${tag}_named$i.json >>"$LOGS/bench.log" 2>&1
    i=$((i + 1))
  done
  if [[ "${BENCH_PAT:-0}" == 1 ]]; then
    timeout 120 ./build-final/treeattn bench --workloads pat --planner auto --kv-dtype $kv \
      --json /tmp/b_${tag}_pat.json >>"$LOGS/bench.log" 2>&1
  fi
  note "bench $kv: rc=$? at $(($(date +%s) - t0)) s"
  python3 bench/merge_bench_json.py "$OUT/bench_$tag.json" /tmp/b_${tag}_*.json
done
note "bench check failures: $(grep -c 'CHECK FAILED' "$LOGS/bench.log")"

# ---- 4. the caller's last step with the time left
if [[ -n "${STEP4:-}" ]]; then
  left=$((DEADLINE - ($(date +%s) - T0)))
  note "step4 ($STEP4): ${left} s left"
  if ((left > 40)); then
    OUT=$OUT/step4 LEFT=$((left - 15)) timeout $((left - 10)) bash $STEP4 >"$LOGS/step4.log" 2>&1
    note "step4: rc=$?"
  fi
fi

for f in "$LOGS"/cpp/summary.txt "$LOGS"/bench.log "$LOGS"/pytest_gpu.log "$LOGS"/cpp_tests.log \
         "$LOGS"/step4.log "$LOGS"/cpp/*.log; do
  [[ -f "$f" ]] && { echo "===== $f"; tail -n 400 "$f"; }
done >"$OUT/logs.txt" 2>/dev/null
note "total: $(($(date +%s) - T0)) s"
cat "$SUMMARY"
