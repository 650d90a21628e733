#!/usr/bin/env bash
# Device script of issue 22: the warp-specialized Hopper kernel of the grouped tile classes
# (src/kernels/sm90/) against the legacy kernel, in one call on an H100 (about 9 minutes):
#   1. build (sm_90a only) and the kernels' resource usage (registers, spills)
#   2. GPU tests: the warp-specialized ones first (WsGpu.*, fail fast), then the others
#   3. compute-sanitizer memcheck / racecheck / synccheck on WsGpu.SanitizerSmall
#   4. treeattn bench --planner auto --grouped-kernel both on the FastTree and PAT sets and on the
#      named lines (legacy and ws back to back in one process; JSON to $OUT)
#   5. ncu of both kernels on `N=1,1024 C=32768,16 heads=32/8` (tensor pipe, issue, stalls)
#   6. a summary table (printed last): geomean ws/legacy speedup per set, the named lines
# Run from the repository root with OUT set. GoogleTest: the system one, else the sources in
# build-devdeps/googletest (carry that folder). Stages can be chosen with STAGES (words from:
# build tests sanitize bench ncu; empty: only the summary of an earlier run's $OUT), and each has
# a time cap (env below), so a hung kernel costs at most its stage's cap.
set -uo pipefail
OUT=${OUT:-/tmp/ws_out}
mkdir -p "$OUT"
STAGES=${STAGES-"build tests sanitize bench ncu"}
BUILD=${BUILD:-build-ws}
JOBS=${JOBS:-16}
WS_TEST_TIMEOUT=${WS_TEST_TIMEOUT:-180}
OTHER_TEST_TIMEOUT=${OTHER_TEST_TIMEOUT:-90}
# the other GPU tests, without the three longest sweeps (the legacy kernel only moved its shared
# pieces into headers); OTHER_FILTER='-WsGpu.*' runs them all
OTHER_FILTER=${OTHER_FILTER:-"-WsGpu.*:DecodeGpu.WorkloadLinesShuffledPages:DecodeGpu.RandomTreesAllPlanners:DecodeGpu.HeadLoopManyShortLeaves"}
SAN_TIMEOUT=${SAN_TIMEOUT:-60}
BENCH_TIMEOUT=${BENCH_TIMEOUT:-150}  # per set
NCU_TIMEOUT=${NCU_TIMEOUT:-90}        # per kernel
# the whole script ends by DEADLINE seconds: a stage gets at most what is left after the reserves
# of the stages behind it (bench about 170 s, ncu about 80 s), and is skipped with a note when
# nothing is left
DEADLINE=${DEADLINE:-525}
NAMED_LINES=("N=1,1024 C=32768,16 heads=32/8" "N=1,1024 C=2048,32 heads=32/8 page=32"
  "N=1,64 C=4096,64 heads=32/8")
SUMMARY="$OUT/summary.txt"
: >"$SUMMARY"
T0=$(date +%s)
has() { [[ " $STAGES " == *" $1 "* ]]; }
note() { echo "$*" | tee -a "$SUMMARY"; }
since() { echo $(($(date +%s) - $1)); }
# slot CAP RESERVE: the timeout for a stage (CAP, or what is left before DEADLINE - RESERVE);
# 0 when fewer than 10 s are left
slot() {
  local left=$((DEADLINE - $(since "$T0") - $2))
  if ((left < 10)); then echo 0; elif ((left < $1)); then echo "$left"; else echo "$1"; fi
}

note "gpu: $(nvidia-smi --query-gpu=name,memory.total,clocks.max.sm,driver_version \
  --format=csv,noheader 2>&1 | head -1); git: $(git rev-parse --short HEAD 2>/dev/null)"

# ---- 1. build
if has build; then
  t0=$(date +%s)
  bash bench/ab/ws_build.sh "$BUILD" "$JOBS" "$OUT/build.log"
  rc=$?
  note "build: rc=$rc in $(since "$t0") s"
  if [[ $rc -ne 0 ]]; then
    grep -E "error" "$OUT/build.log" | head -20
    tail -20 "$OUT/build.log"
    exit 1
  fi
  # registers / stack / spills of the attention kernels (sm_90a)
  for f in "$BUILD"/CMakeFiles/treeattn_cuda.dir/src/kernels/inst_*.o; do
    cuobjdump --dump-resource-usage "$f" 2>/dev/null | grep -E "Function|REG" | paste - - |
      grep -E "attention|ws_kernel" | sed -E 's/.*Function _ZN8treeattn11cuda_detail//; s/EEEvNS0_12KernelParamsE.*REG:/ REG:/; s/SHARED.*//'
  done >"$OUT/resources.txt" 2>&1
  ldl=0
  for f in "$BUILD"/CMakeFiles/treeattn_cuda.dir/src/kernels/inst_*.o; do
    ldl=$((ldl + $(cuobjdump -sass "$f" 2>/dev/null | grep -cE "\b(LDL|STL)\b")))
  done
  note "sass: LDL/STL in the kernels: $ldl; ws kernels: $(grep -c ws_kernel "$OUT/resources.txt") (resources.txt)"
fi
TESTS="./$BUILD/treeattn_gpu_tests"
TREEATTN="./$BUILD/treeattn"

# ---- 2. GPU tests
WS_OK=1
if has tests; then
  t0=$(date +%s)
  timeout "$(slot "$WS_TEST_TIMEOUT" 260)" "$TESTS" --gtest_filter='WsGpu.*' --gtest_fail_fast \
    >"$OUT/gpu_tests_ws.log" 2>&1
  rc=$?
  [[ $rc -ne 0 ]] && WS_OK=0
  note "gpu tests WsGpu.*: rc=$rc in $(since "$t0") s; $(grep -E '^\[  (PASSED|FAILED|SKIPPED) *\] [0-9]+ test' "$OUT/gpu_tests_ws.log" | tr '\n' ' ')"
  grep -E "Failure|FAILED|error|max_err|Expected|Which is" "$OUT/gpu_tests_ws.log" | head -30
  if grep -qE '^\[  SKIPPED \] WsGpu.SanitizerSmall' "$OUT/gpu_tests_ws.log"; then
    WS_OK=0
    note "  !!!! the warp-specialized kernel did not run: $(grep -m1 -A1 'Skipped' "$OUT/gpu_tests_ws.log" | tail -1)"
  fi
  [[ $rc -eq 124 ]] && note "  WsGpu.* TIMED OUT (a hang?): last test started: $(grep -E '^\[ RUN' "$OUT/gpu_tests_ws.log" | tail -1)"
  t0=$(date +%s)
  to=$(slot "$OTHER_TEST_TIMEOUT" 300)
  if ((to > 0)); then
    timeout "$to" "$TESTS" --gtest_filter="$OTHER_FILTER" >"$OUT/gpu_tests_other.log" 2>&1
    rc=$?
    note "gpu tests (others, filter $OTHER_FILTER): rc=$rc in $(since "$t0") s; $(grep -E '^\[  (PASSED|FAILED|SKIPPED) *\] [0-9]+ test' "$OUT/gpu_tests_other.log" | tr '\n' ' ')"
    grep -E "Failure|FAILED" "$OUT/gpu_tests_other.log" | head -10
  else
    note "gpu tests (others): skipped, no time left"
  fi
fi

# ---- 3. compute-sanitizer on the small warp-specialized test
if has sanitize; then
  for tool in memcheck racecheck synccheck; do
    t0=$(date +%s)
    to=$(slot "$SAN_TIMEOUT" 250)
    if ((to == 0)); then
      note "$tool: skipped, no time left"
      continue
    fi
    timeout "$to" compute-sanitizer --tool "$tool" --error-exitcode 3 "$TESTS" \
      --gtest_filter='WsGpu.SanitizerSmall' >"$OUT/$tool.log" 2>&1
    rc=$?
    note "$tool: rc=$rc in $(since "$t0") s; $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY|SYNCCHECK SUMMARY|PASSED|FAILED' "$OUT/$tool.log" | tr '\n' ' ' | cut -c1-200)"
  done
fi

# ---- 4. bench: auto's plans on both grouped kernels, back to back in one process
if has bench; then
  if [[ $WS_OK -ne 1 ]]; then
    note "bench: the WsGpu tests failed; benchmarking anyway (failed checks show as CHECK FAILED)"
  fi
  for s in fasttree pat; do
    t0=$(date +%s)
    to=$(slot "$BENCH_TIMEOUT" $([[ $s == fasttree ]] && echo 190 || echo 90))
    ((to == 0)) && { note "bench $s: skipped, no time left"; continue; }
    timeout "$to" "$TREEATTN" bench --workloads "$s" --planner auto --grouped-kernel both \
      --runs 50 --json "$OUT/bench_$s.json" >"$OUT/bench_$s.log" 2>&1
    note "bench $s: rc=$? in $(since "$t0") s; $(grep -cE 'CHECK FAILED' "$OUT/bench_$s.log") check failures"
  done
  t0=$(date +%s)
  : >"$OUT/bench_named.log"
  i=0
  for lv in "${NAMED_LINES[@]}"; do
    to=$(slot 60 75)
    ((to == 0)) && continue
    timeout "$to" "$TREEATTN" bench --levels "$lv" --planner auto --grouped-kernel both --runs 50 \
      --json "$OUT/bench_named$i.json" >>"$OUT/bench_named.log" 2>&1
    i=$((i + 1))
  done
  note "bench named lines: $(since "$t0") s"
fi

# ---- 5. ncu: the first kM128 launch of auto's plan on the first named line, each kernel
if has ncu; then
  metrics=$(ncu --query-metrics --chip gh100 2>/dev/null | grep -oE "^sm__pipe_tensor_op_[a-z0-9_]*cycles_active" | sort -u |
    sed 's/$/.avg.pct_of_peak_sustained_active/' | paste -sd, -)
  # kernel names matched on the mangled name: class 2 (kM128) of each kernel, else any class
  for k in ws legacy; do
    t0=$(date +%s)
    if [[ $k == ws ]]; then base="decode_ws_kernel"; else base="decode_attention_kernel"; fi
    for regex in "regex:$base.*Li2EE" "regex:$base.*Li[12]EE"; do
      to=$(slot "$NCU_TIMEOUT" $([[ $k == ws ]] && echo 40 || echo 5))
      ((to == 0)) && { rc=skipped; break; }
      timeout "$to" ncu --kernel-name-base mangled -k "$regex" -c 1 --section SpeedOfLight \
        --section ComputeWorkloadAnalysis --section SchedulerStats --section WarpStateStats \
        --section Occupancy --section LaunchStats ${metrics:+--metrics "$metrics"} \
        "$TREEATTN" bench --levels "${NAMED_LINES[0]}" --planner auto --grouped-kernel "$k" \
        --runs 50 >"$OUT/ncu_$k.txt" 2>&1
      rc=$?
      grep -q "No kernels were profiled" "$OUT/ncu_$k.txt" || break
    done
    note "ncu $k ($regex): rc=$rc in $(since "$t0") s"
  done
fi

# ---- 6. summary
python3 - "$OUT" "${NAMED_LINES[@]}" <<'PY' | tee -a "$SUMMARY"
import glob, json, math, os, re, sys
out, named = sys.argv[1], sys.argv[2:]
def load(pattern):
    res = []
    for f in sorted(glob.glob(os.path.join(out, pattern))):
        try:
            res += json.load(open(f))["results"]
        except Exception as e:
            print("skip", f, e)
    return res
def pairs(results):
    by = {}
    for r in results:
        if r["planner"] != "auto":
            continue
        by.setdefault((r["workload"], r["page_size"]), {})[r.get("grouped_kernel", "?")] = r
    return {k: v for k, v in by.items() if "ws" in v and "legacy" in v}
print("==== ws vs legacy (planner auto, same process; speedup = legacy time / ws time)")
print("%-9s %5s %9s %9s %9s %8s %8s  %s" % ("set", "lines", "geomean", "min", "max", "legacy%", "ws%", "checks"))
for s in ("fasttree", "pat"):
    p = pairs(load("bench_%s.json" % s))
    if not p:
        print("%-9s   no results" % s)
        continue
    sp = [v["legacy"]["median_ms"] / v["ws"]["median_ms"] for v in p.values()]
    gl = math.exp(sum(math.log(v["legacy"]["floor_fraction"]) for v in p.values()) / len(p))
    gw = math.exp(sum(math.log(v["ws"]["floor_fraction"]) for v in p.values()) / len(p))
    bad = sum(1 for v in p.values() for k in ("ws", "legacy") if not v[k]["check_ok"])
    print("%-9s %5d %8.3fx %8.3fx %8.3fx %7.1f%% %7.1f%%  %d failed" %
          (s, len(p), math.exp(sum(map(math.log, sp)) / len(sp)), min(sp), max(sp), 100 * gl, 100 * gw, bad))
    worst = sorted(p.items(), key=lambda kv: kv[1]["legacy"]["median_ms"] / kv[1]["ws"]["median_ms"])[:3]
    for (w, pg), v in worst:
        print("    slowest: %-52s %8.1f -> %8.1f us" % (w[:52], 1e3 * v["legacy"]["median_ms"], 1e3 * v["ws"]["median_ms"]))
print("==== named lines (auto)")
print("%-42s %10s %10s %8s %8s %8s" % ("line", "legacy us", "ws us", "speedup", "legacy%", "ws%"))
p = pairs(load("bench_named*.json"))
for lv in named:
    key = next((k for k in p if k[0].startswith(lv.split(" page=")[0]) and
                ("page=" not in lv or k[1] == int(lv.split("page=")[1]))), None)
    if key is None:
        print("%-42s   no result" % lv)
        continue
    L, W = p[key]["legacy"], p[key]["ws"]
    print("%-42s %10.1f %10.1f %7.3fx %7.1f%% %7.1f%%" % (lv[:42], 1e3 * L["median_ms"], 1e3 * W["median_ms"],
          L["median_ms"] / W["median_ms"], 100 * L["floor_fraction"], 100 * W["floor_fraction"]))
print("==== ncu (first kM128 launch of auto's plan on %s)" % named[0])
for k in ("ws", "legacy"):
    f = os.path.join(out, "ncu_%s.txt" % k)
    if not os.path.exists(f):
        continue
    keep = ("Duration", "Registers Per Thread", "Issued Warp Per Scheduler", "No Eligible",
            "Warp Cycles Per Issued Instruction", "Compute (SM) Throughput", "pipe_tensor",
            "Achieved Occupancy", "stalled", "highest-utilized")
    lines = [l.strip() for l in open(f, errors="replace") if any(x in l for x in keep)]
    print("  %s:" % k)
    for l in lines[:16]:
        print("    " + re.sub(r"\s{2,}", "  ", l))
PY
note "total: $(since "$T0") s"
