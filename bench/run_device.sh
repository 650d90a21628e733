#!/usr/bin/env bash
# The one script the GPU device runs (from the repository root): build with CUDA (sm_80 + sm_90a),
# kernel resource report and SASS check, GPU tests, compute-sanitizer memcheck on a subset, then
# `treeattn bench`. Logs and bench JSON go to $OUT; a short summary prints last.
#
# Env knobs (defaults in brackets):
#   STAGES       words from: build tests sanitize bench  [build tests sanitize bench]
#   BENCH_SETS   workload sets for --workloads, space separated  [fasttree]
#   BENCH_PLANNER planner name or all  [all]
#   BENCH_LEVELS extra --levels lines, ';' separated  [N=256 C=4096 heads=32/8]
#   BENCH_RUNS   timed runs  [50]
#   GTEST_FILTER filter for the GPU tests  [*]
# GoogleTest: uses the system one, else builds build-devdeps/googletest (carry that folder).
set -uo pipefail
OUT=${OUT:-/tmp/treeattn_out}
mkdir -p "$OUT"
STAGES=${STAGES:-"build tests sanitize bench"}
BENCH_SETS=${BENCH_SETS:-fasttree}
BENCH_PLANNER=${BENCH_PLANNER:-all}
BENCH_LEVELS=${BENCH_LEVELS:-"N=256 C=4096 heads=32/8"}
BENCH_RUNS=${BENCH_RUNS:-50}
GTEST_FILTER=${GTEST_FILTER:-*}
BUILD=build-dev
SUMMARY="$OUT/summary.txt"
: >"$SUMMARY"
has() { [[ " $STAGES " == *" $1 "* ]]; }
note() { echo "$*" | tee -a "$SUMMARY"; }

note "gpu: $(nvidia-smi --query-gpu=name,memory.total,clocks.sm,clocks.mem,driver_version \
  --format=csv,noheader 2>&1)"

if has build; then
  extra=()
  if [[ ! -f /usr/lib/x86_64-linux-gnu/libgtest.a && ! -f /usr/local/lib/libgtest.a && \
        -d build-devdeps/googletest ]]; then
    cmake -S build-devdeps/googletest -B /tmp/gtest-build -G Ninja -DCMAKE_BUILD_TYPE=Release \
      -DCMAKE_INSTALL_PREFIX=/tmp/gtest -DBUILD_GMOCK=OFF >"$OUT/build.log" 2>&1 &&
      ninja -C /tmp/gtest-build install >>"$OUT/build.log" 2>&1
    extra+=(-DCMAKE_PREFIX_PATH=/tmp/gtest)
  fi
  t0=$(date +%s)
  touch "$OUT/build.log"
  { cmake -S . -B $BUILD -G Ninja -DTREEATTN_BENCH=OFF -DTREEATTN_CUDA_ARCHS="80;90a" \
      "${extra[@]}" && ninja -C $BUILD -j16 treeattn treeattn_gpu_tests; } >>"$OUT/build.log" 2>&1
  rc=$?
  note "build: rc=$rc in $(( $(date +%s) - t0 )) s"
  if [[ $rc -ne 0 ]]; then grep -E "error|Error" "$OUT/build.log" | head -20; tail -20 "$OUT/build.log"; exit 1; fi
  # resource usage (registers, stack, spills) and HMMA count of the sm_90a kernels
  for f in $BUILD/CMakeFiles/treeattn_cuda.dir/src/kernels/inst_*.o; do
    cuobjdump --dump-resource-usage "$f" 2>/dev/null | grep -E "Function|REG" | paste - - |
      sed -E 's/.*Function _ZN8treeattn11cuda_detail[0-9]+//; s/EEEvNS0_12KernelParamsE:?//; s/CONSTANT.*//'
  done >>"$SUMMARY"
  note "sass HMMA (fp16 hd128): $(cuobjdump -sass $BUILD/CMakeFiles/treeattn_cuda.dir/src/kernels/inst_fp16_hd128.cu.o | grep -c HMMA), LDL/STL: $(cuobjdump -sass $BUILD/CMakeFiles/treeattn_cuda.dir/src/kernels/inst_fp16_hd128.cu.o | grep -cE 'LDL|STL')"
fi

if has tests; then
  t0=$(date +%s)
  timeout ${TEST_TIMEOUT:-240} ./$BUILD/treeattn_gpu_tests --gtest_filter="$GTEST_FILTER" >"$OUT/gpu_tests.log" 2>&1
  rc=$?
  note "gpu tests: rc=$rc in $(( $(date +%s) - t0 )) s; $(grep -E '^\[  (PASSED|FAILED) ' "$OUT/gpu_tests.log" | tr '\n' ' ')"
  grep -E "Failure|FAILED|error|max_err|note" "$OUT/gpu_tests.log" | head -30
fi

if has sanitize; then
  t0=$(date +%s)
  SAN_FILTER='DecodeGpu.CombinedKvLayoutAndNoLse:DecodeGpu.InvalidArguments:DecodeGpu.GraphReplayAfterAppend:DecodeGpu.HeadLoopSmall:DecodeGpu.BlockGroupsSmall:DecodeGpu.MergeWithEmptyPartials'
  timeout ${SAN_TIMEOUT:-150} compute-sanitizer --tool memcheck --error-exitcode 3 ./$BUILD/treeattn_gpu_tests \
    --gtest_filter="$SAN_FILTER" >"$OUT/memcheck.log" 2>&1
  note "memcheck: rc=$? in $(( $(date +%s) - t0 )) s; $(grep -E 'ERROR SUMMARY' "$OUT/memcheck.log" | tail -1)"
  t0=$(date +%s)
  timeout ${SAN_TIMEOUT:-150} compute-sanitizer --tool racecheck --error-exitcode 3 ./$BUILD/treeattn_gpu_tests \
    --gtest_filter='DecodeGpu.CombinedKvLayoutAndNoLse:DecodeGpu.HeadLoopSmall:DecodeGpu.BlockGroupsSmall:DecodeGpu.MergeWithEmptyPartials' >"$OUT/racecheck.log" 2>&1
  note "racecheck: rc=$? in $(( $(date +%s) - t0 )) s; $(grep -E 'RACECHECK SUMMARY|ERROR SUMMARY' "$OUT/racecheck.log" | tail -1)"
fi

if has bench; then
  t0=$(date +%s)
  : >"$OUT/bench.log"
  IFS=';' read -ra levels <<<"$BENCH_LEVELS"
  i=0
  for lv in "${levels[@]}"; do
    [[ -z "$lv" ]] && continue
    timeout 120 ./$BUILD/treeattn bench --levels "$lv" --planner "$BENCH_PLANNER" --runs "$BENCH_RUNS" \
      --json "/tmp/bench_levels$i.json" >>"$OUT/bench.log" 2>&1
    i=$((i + 1))
  done
  for s in $BENCH_SETS; do
    timeout ${BENCH_TIMEOUT:-240} ./$BUILD/treeattn bench --workloads "$s" --planner "$BENCH_PLANNER" --runs "$BENCH_RUNS" \
      --json "/tmp/bench_$s.json" >>"$OUT/bench.log" 2>&1
    note "bench $s: rc=$?"
  done
  note "bench: $(( $(date +%s) - t0 )) s"
  # one JSON for the whole call (the device returns at most 8 files)
  python3 - "$OUT/bench.json" /tmp/bench_levels*.json /tmp/bench_*.json <<'PY'
import json, sys
out, files, merged = sys.argv[1], sorted(set(sys.argv[2:])), None
for f in files:
    try:
        d = json.load(open(f))
    except Exception as e:
        print("skip", f, e); continue
    if merged is None: merged = d
    else: merged["results"] += d["results"]
if merged: json.dump(merged, open(out, "w"), indent=1)
PY
  grep -E "ceilings|geometric|set=|CHECK|skip|error" "$OUT/bench.log" | head -60
fi
echo "==== summary"
cat "$SUMMARY"
