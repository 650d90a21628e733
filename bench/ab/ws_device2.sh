#!/usr/bin/env bash
# Second device script of issue 22 (about 150 s on one H100, 16 cores): the grouped kernel settings
# legacy / ws / auto back to back on the FastTree and PAT sets and two named lines, after the
# warp-specialized kernel's GPU tests, with ncu of the ws kernels last.
#   0. binaries: the prebuilt ones in $BIN (treeattn, treeattn_gpu_tests; carried) when their
#      SOURCES.sha256 matches this tree's sources and they run here, else a build (sm_90a only,
#      -j $JOBS; GoogleTest from the system or build-devdeps/googletest, carried)
#   1. GPU tests, one process per WsGpu test plus the other GPU tests and compute-sanitizer
#      racecheck / synccheck / memcheck of WsGpu.SanitizerSmall, all side by side
#   2. treeattn bench --planner auto --grouped-kernel legacy,ws,auto on fasttree and pat (JSON with
#      the kernel each of kM64 / kM128 ran on: "grouped_run")
#   3. ncu (WarpStateStats, SourceCounters, ComputeWorkloadAnalysis, MemoryWorkloadAnalysis and the
#      tensor pipe) of the ws kM64 kernel on the compute-bound line (its grouped items are kM64)
#   4. the bench of the named lines, then while time is left ncu of the ws kM128 kernel on a kM128
#      line and of the legacy kM64 kernel on the compute-bound line
#   5. the summary (printed last; bench/ab/ws_analysis.py)
# At most 8 files come back from $OUT: summary.txt, logs.txt (every log, concatenated), ncu.txt,
# bench_fasttree.json, bench_pat.json, bench_named.json. Each stage has a time cap, and the whole
# script ends by DEADLINE seconds (a stage gets what is left after the reserves of the ones behind
# it). Make the prebuilt binaries here with `bash bench/ab/ws_device2.sh prebuild` (needs a CUDA
# build of this tree in $BUILD_HERE, default build-k, with TREEATTN_CUDA_ARCHS containing 90a).
set -uo pipefail
OUT=${OUT:-/tmp/ws2_out}
WORK=${WORK:-/tmp/ws2_work}
BIN=${BIN:-build-ws2-bin}
BUILD=${BUILD:-build-ws2}
JOBS=${JOBS:-16}
DEADLINE=${DEADLINE:-148}
NAMED_LINES=("N=1,1024 C=32768,16 heads=32/8" "N=1,64 C=4096,64 heads=32/8")
# a kM128 line of auto's plans (16 items of 1024 tokens, 128 CTAs) for the ws kM128 profile
KM128_LINE="N=1,8,512 C=512,512,256 heads=32/8 page=32"
OTHER_FILTER=${OTHER_FILTER:-"-WsGpu.*:DecodeGpu.WorkloadLinesShuffledPages:DecodeGpu.RandomTreesAllPlanners:DecodeGpu.HeadLoopManyShortLeaves"}

# the sources the binaries are built from (the hash the prebuilt ones carry)
sources_hash() {
  find src include tools/treeattn tools/embed_workloads.cmake tests/cpp data/workloads \
    CMakeLists.txt -type f -print0 | LC_ALL=C sort -z | xargs -0 sha256sum | sha256sum | cut -c1-64
}

if [[ "${1:-}" == prebuild ]]; then
  BUILD_HERE=${BUILD_HERE:-build-k}
  cmake --build "$BUILD_HERE" -j 2 --target treeattn treeattn_gpu_tests || exit 1
  mkdir -p "$BIN"
  cp "$BUILD_HERE/treeattn" "$BUILD_HERE/treeattn_gpu_tests" "$BIN/"
  sources_hash >"$BIN/SOURCES.sha256"
  echo "prebuilt binaries in $BIN: $(cat "$BIN/SOURCES.sha256")"
  exit 0
fi

mkdir -p "$OUT" "$WORK"
rm -f "$WORK"/*.log "$WORK"/*.txt 2>/dev/null
SUMMARY="$OUT/summary.txt"
: >"$SUMMARY"
T0=$(date +%s)
note() { echo "$*" | tee -a "$SUMMARY"; }
since() { echo $(($(date +%s) - $1)); }
# slot CAP RESERVE: a stage's timeout (CAP, or what is left before DEADLINE - RESERVE); 0 when
# fewer than 8 s are left
slot() {
  local left=$((DEADLINE - $(since "$T0") - $2))
  if ((left < 8)); then echo 0; elif ((left < $1)); then echo "$left"; else echo "$1"; fi
}
pack_logs() {  # every log of $WORK into $OUT/logs.txt, ncu outputs into $OUT/ncu.txt
  : >"$OUT/logs.txt"
  for f in "$WORK"/*.log; do
    [[ -e "$f" ]] || continue
    printf '\n===== %s (%s lines) =====\n' "$(basename "$f")" "$(wc -l <"$f")" >>"$OUT/logs.txt"
    tail -n 400 "$f" >>"$OUT/logs.txt"
  done
  : >"$OUT/ncu.txt"
  for f in "$WORK"/ncu_*.txt; do
    [[ -e "$f" ]] || continue
    printf '\n===== %s =====\n' "$(basename "$f")" >>"$OUT/ncu.txt"
    cat "$f" >>"$OUT/ncu.txt"
  done
}
trap pack_logs EXIT

note "gpu: $(nvidia-smi --query-gpu=name,clocks.max.sm,driver_version --format=csv,noheader 2>&1 | head -1)"

# ---- 0. binaries
t0=$(date +%s)
TREEATTN="" TESTS=""
if [[ -x "$BIN/treeattn" && -x "$BIN/treeattn_gpu_tests" && -f "$BIN/SOURCES.sha256" ]]; then
  have=$(sources_hash)
  if [[ "$have" != "$(cat "$BIN/SOURCES.sha256")" ]]; then
    note "binaries: $BIN was built from other sources ($(cut -c1-12 "$BIN/SOURCES.sha256") vs ${have:0:12}): building"
  elif ! "$BIN/treeattn_gpu_tests" --gtest_filter='WsGpu.SwitchRefusesUnknownKernels' >"$WORK/bin_check.log" 2>&1; then
    note "binaries: $BIN does not run here ($(tail -2 "$WORK/bin_check.log" | tr '\n' ' ')): building"
  else
    TREEATTN="./$BIN/treeattn" TESTS="./$BIN/treeattn_gpu_tests"
    note "binaries: prebuilt $BIN (sources ${have:0:12}) in $(since "$t0") s"
  fi
else
  note "binaries: no prebuilt $BIN: building"
fi
if [[ -z "$TREEATTN" ]]; then
  bash bench/ab/ws_build.sh "$BUILD" "$JOBS" "$WORK/build.log"
  rc=$?
  note "build: rc=$rc in $(since "$t0") s"
  if [[ $rc -ne 0 ]]; then
    grep -E "error" "$WORK/build.log" | head -20
    exit 1
  fi
  TREEATTN="./$BUILD/treeattn" TESTS="./$BUILD/treeattn_gpu_tests"
fi

# ---- 1. GPU tests, side by side (each its own process; the oracle checks use the cores)
HUNG=()
t0=$(date +%s)
to=$(slot 50 75)
pids=()
names=()
if ((to > 0)); then
  for t in $("$TESTS" --gtest_list_tests --gtest_filter='WsGpu.*' | awk '/^[^ ]/{s=$1} /^  /{print s $1}'); do
    timeout "$to" "$TESTS" --gtest_filter="$t" >"$WORK/test_$t.log" 2>&1 &
    pids+=($!) names+=("$t")
  done
  timeout "$to" "$TESTS" --gtest_filter="$OTHER_FILTER" >"$WORK/test_others.log" 2>&1 &
  pids+=($!) names+=("others")
  for tool in racecheck synccheck memcheck; do
    timeout "$to" compute-sanitizer --tool "$tool" --error-exitcode 3 "$TESTS" \
      --gtest_filter='WsGpu.SanitizerSmall' >"$WORK/sanitizer_$tool.log" 2>&1 &
    pids+=($!) names+=("$tool")
  done
  failed=()
  for i in "${!pids[@]}"; do
    wait "${pids[$i]}"
    rc=$?
    ((rc != 0)) && failed+=("${names[$i]}(rc=$rc)")
    ((rc == 124)) && [[ ${names[$i]} == WsGpu.* ]] && HUNG+=("${names[$i]}")
  done
  note "gpu tests: ${#pids[@]} processes in $(since "$t0") s; failed: ${failed[*]:-none}"
  note "  $(grep -hoE '^\[ +(OK|FAILED) +\] [A-Za-z]+\.[A-Za-z0-9]+ \([0-9]+ ms\)' "$WORK"/test_*.log |
    sed -E 's/^\[ +(OK|FAILED) +\] ([A-Za-z]+\.[A-Za-z0-9]+) \(([0-9]+) ms\)/\2 \1 \3ms/' | tr '\n' ';')"
  if grep -q '^\[  SKIPPED \]' "$WORK"/test_WsGpu.SanitizerSmall.log 2>/dev/null; then
    note "  !!!! the warp-specialized kernel did not run (skipped: $(grep -m1 -A1 'Skipped' "$WORK"/test_WsGpu.SanitizerSmall.log | tail -1))"
  fi
  for f in "$WORK"/test_*.log; do
    grep -hE "Failure|FAILED  \]|Expected|Which is|max_err" "$f" | head -6 | sed "s|^|  $(basename "$f" .log): |"
  done | head -40 | tee -a "$SUMMARY"
  grep -hE "ERROR SUMMARY|RACECHECK SUMMARY" "$WORK"/sanitizer_*.log | sed 's/^/  /' | tee -a "$SUMMARY"
else
  note "gpu tests: skipped, no time left"
fi

# ---- 2. bench: legacy, ws and auto back to back in one process per set
if ((${#HUNG[@]})); then
  note "!!!! WsGpu tests timed out (a hang of the ws kernel?): ${HUNG[*]}; last test lines:"
  for t in "${HUNG[@]}"; do tail -3 "$WORK/test_$t.log" | sed 's/^/  /' | tee -a "$SUMMARY"; done
  note "bench and ncu skipped: a hanging kernel would eat their time"
  exit 1
fi
for s in fasttree pat; do
  t0=$(date +%s)
  to=$(slot $([[ $s == fasttree ]] && echo "45 50" || echo "70 5"))
  ((to == 0)) && { note "bench $s: skipped, no time left"; continue; }
  timeout "$to" "$TREEATTN" bench --workloads "$s" --planner auto --grouped-kernel legacy,ws,auto \
    --runs 50 --json "$OUT/bench_$s.json" >"$WORK/bench_$s.log" 2>&1
  note "bench $s: rc=$? in $(since "$t0") s; $(grep -c 'CHECK FAILED' "$WORK/bench_$s.log") check failures"
done

# ---- 3. ncu of the ws kernels (kernels matched by mangled name: Li1EE = kM64, Li2EE = kM128)
metrics=$(ncu --query-metrics --chip gh100 2>/dev/null | grep -oE "^sm__pipe_tensor_op_[a-z0-9_]*cycles_active" |
  sort -u | sed 's/$/.avg.pct_of_peak_sustained_active/' | paste -sd, -)
# one profiled launch exported, then its details page and, from the raw page, the stall reasons
# (issue-active ratios), tensor pipe and instruction counts
profile() {  # profile NAME KERNEL_REGEX SETTING LINE RESERVE
  local t0 to rc
  t0=$(date +%s)
  to=$(slot 30 "$5")
  ((to == 0)) && { note "ncu $1: skipped, no time left"; return; }
  timeout "$to" ncu --kernel-name-base mangled -k "$2" -c 1 --section SpeedOfLight \
    --section WarpStateStats --section SourceCounters --section ComputeWorkloadAnalysis \
    --section MemoryWorkloadAnalysis --section Occupancy ${metrics:+--metrics "$metrics"} \
    -f -o "$WORK/ncu_$1" "$TREEATTN" bench --levels "$4" --planner auto --grouped-kernel "$3" \
    --runs 50 >"$WORK/ncu_$1.log" 2>&1
  rc=$?
  if [[ -f "$WORK/ncu_$1.ncu-rep" ]]; then
    { ncu -i "$WORK/ncu_$1.ncu-rep" --page details
      echo "---- raw: stalls (warps per issue-active cycle), tensor pipe, instructions"
      ncu -i "$WORK/ncu_$1.ncu-rep" --page raw --csv 2>&1 | python3 -c '
import csv, sys
rows = list(csv.reader(sys.stdin))
if len(rows) >= 3:
    for name, unit, val in zip(rows[0], rows[1], rows[2]):
        if any(k in name for k in ("issue_stalled", "pipe_tensor", "inst_executed", "warps_active", "cycles_elapsed")):
            print("%-90s %-12s %s" % (name, unit or "-", val))
'
    } >"$WORK/ncu_$1.txt" 2>&1
  fi
  note "ncu $1: rc=$rc in $(since "$t0") s"
}
profile ws_m64_computebound "regex:decode_ws_kernel.*Li1EE" ws "${NAMED_LINES[0]}" 8

# ---- 4. the named lines, then the other profiles while time is left
t0=$(date +%s)
named_json=()
for i in "${!NAMED_LINES[@]}"; do
  to=$(slot 12 0)
  ((to == 0)) && continue
  timeout "$to" "$TREEATTN" bench --levels "${NAMED_LINES[$i]}" --planner auto \
    --grouped-kernel legacy,ws,auto --runs 50 --json "$WORK/named$i.json" >>"$WORK/bench_named.log" 2>&1
  [[ -s "$WORK/named$i.json" ]] && named_json+=("$WORK/named$i.json")
done
if ((${#named_json[@]})); then
  python3 - "$OUT/bench_named.json" "${named_json[@]}" <<'PY'
import json, sys
docs = [json.load(open(f)) for f in sys.argv[2:]]
merged = dict(docs[0])
merged["results"] = [r for d in docs for r in d["results"]]
json.dump(merged, open(sys.argv[1], "w"), indent=1)
PY
fi
note "bench named lines: $(since "$t0") s"
profile ws_m128 "regex:decode_ws_kernel.*Li2EE" ws "$KM128_LINE" 0
profile legacy_m64_computebound "regex:decode_attention_kernel.*Li1EE" legacy "${NAMED_LINES[0]}" 0

# ---- 5. summary
{
  echo "==== ncu (key lines)"
  for f in "$WORK"/ncu_*.txt; do
    [[ -e "$f" ]] || continue
    echo "  $(basename "$f" .txt):"
    grep -E "pipe_tensor.*pct|Duration|Issued Warp Per Scheduler|No Eligible|Warp Cycles Per Issued|Achieved Occupancy|L2 Hit|Mem Busy" "$f" |
      sed -E 's/\s{2,}/  /g' | head -10 | sed 's/^/    /'
    # the five largest stall reasons (warps per issue-active cycle)
    grep -E "issue_stalled_.*per_issue_active" "$f" | sort -k3 -g -r | head -5 |
      sed -E 's/smsp__average_warps_issue_stalled_//; s/_per_issue_active.ratio//; s/\s{2,}/  /g; s/^/    stall /'
  done
  echo "==== legacy / ws / auto (planner auto, same process; speedup = legacy time / time)"
  python3 bench/ab/ws_analysis.py --bench "$OUT"/bench_fasttree.json "$OUT"/bench_pat.json \
    "$OUT"/bench_named.json --named "${NAMED_LINES[@]}" "N=1,1024 C=2048,32 heads=32/8 page=32" 2>&1
} | tee -a "$SUMMARY"
note "total: $(since "$T0") s"
