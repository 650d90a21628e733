#!/usr/bin/env bash
# Device check of the fp8 KV cache on the warp-specialized kernel (the producer converts): build,
# the ws and fp8 GPU tests (each killed after TEST_S), then, if they pass, the fp8 PAT set and two
# shared-prefix lines with --grouped-kernel legacy,auto in one process. Files back: summary.txt,
# bench_fp8_ws.json, tests.log.
set -u
source bench/ab/common.sh
# every step is killed at min(its own limit, what is left of DEADLINE [540] s since the start)
ab_start /tmp/fp8ws_out 540
# (device_final.sh exits nonzero even after a good build-only run: its last grep finds no bench.log)
STAGES=build OUT=/tmp/b timeout -s KILL 330 bash bench/device_final.sh >/tmp/b.log 2>&1
grep -E "^(build|sass)" /tmp/b/summary.txt | tee "$S"
grep -q "^build: rc=0 " /tmp/b/summary.txt || { echo "build failed or killed" | tee -a "$S"; exit 1; }
T=./build-final/treeattn_gpu_tests
ok=1
for f in WsGpu.Fp8KvCacheEveryGroupedClass WsGpu.SanitizerSmall 'Fp8Gpu.*' \
         WsGpu.PlannersDtypesHeadDimsPagesGroups4To32; do
  timeout -s KILL "$(lim "${TEST_S:-90}")" $T --gtest_filter="$f" >>"$OUT/tests.log" 2>&1
  rc=$?
  echo "test $f: rc=$rc" | tee -a "$S"
  [[ $rc -ne 0 ]] && ok=0
done
grep -E "Failure|FAILED|error" "$OUT/tests.log" | head -10 | tee -a "$S"
if [[ $ok == 1 ]]; then
  timeout -s KILL "$(lim 120)" compute-sanitizer --tool racecheck --error-exitcode 3 $T \
    --gtest_filter=WsGpu.SanitizerSmall >/tmp/rc.log 2>&1
  echo "racecheck SanitizerSmall: rc=$? $(grep -E 'RACECHECK SUMMARY' /tmp/rc.log)" | tee -a "$S"
  rm -f /tmp/fw_*.json
  for lv in "N=1,64 C=4096,64 heads=32/8" "N=1,1024 C=2048,32 heads=32/8"; do
    timeout -s KILL "$(lim 40)" ./build-final/treeattn bench --levels "$lv" --planner auto \
      --kv-dtype fp8_e4m3 --grouped-kernel legacy,auto --json /tmp/fw_$RANDOM.json 2>&1 |
      grep -E "^N=" | tee -a "$S"
  done
  timeout -s KILL "$(lim 150)" ./build-final/treeattn bench --workloads pat --planner auto \
    --kv-dtype fp8_e4m3 --grouped-kernel legacy,auto --json /tmp/fw_pat.json >/tmp/fw_pat.log 2>&1
  echo "pat: rc=$?" | tee -a "$S"
  grep -A4 "geometric mean" /tmp/fw_pat.log | tee -a "$S"
  python3 bench/merge_bench_json.py "$OUT/bench_fp8_ws.json" /tmp/fw_*.json >/dev/null
fi
