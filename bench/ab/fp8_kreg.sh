#!/usr/bin/env bash
# Device check and A/B of the fp8 kM16 path with K converted in registers (TREEATTN_FP8_KREG=1,
# the default) against K through the dtype tile (=0): two CLI builds side by side and the GPU
# tests built with the default; the fp8 GPU tests first (each killed after TEST_S), then, if they
# pass, treeattn bench --kv-dtype fp8_e4m3 with each build on the no-sharing lines, two
# shared-prefix lines and the PAT set (fp16 KV on the no-sharing lines too, as the 1.8x target's
# reference). The whole call stays under DEADLINE [540] s. Carry build-devdeps (GoogleTest for
# the GPU tests' build). Files back: summary.txt, bench_kreg0.json, bench_kreg1.json, tests.log,
# bench.log.
set -u
source bench/ab/common.sh
ab_start /tmp/kreg_out 540
gpu_note
# the GPU tests and the default CLI (KREG=1) through device_final.sh's build; the KREG=0 CLI beside
(STAGES=build OUT=/tmp/b timeout -s KILL 330 bash bench/device_final.sh >/tmp/b.log 2>&1) &
(cmake -S . -B build-kreg0 -G Ninja -DTREEATTN_BENCH=OFF -DTREEATTN_TESTS=OFF \
   -DTREEATTN_CUDA_ARCHS=90a -DCMAKE_CUDA_FLAGS=-DTREEATTN_FP8_KREG=0 >/tmp/k0.log 2>&1 &&
   timeout -s KILL 330 ninja -C build-kreg0 -j6 treeattn >>/tmp/k0.log 2>&1; echo $? >/tmp/k0.rc) &
wait
grep -E "^build" /tmp/b/summary.txt | tee -a "$S"
note "build KREG=0: rc=$(cat /tmp/k0.rc 2>/dev/null) in $(($(date +%s) - T0)) s"
grep -q "^build: rc=0 " /tmp/b/summary.txt && [[ "$(cat /tmp/k0.rc 2>/dev/null)" == 0 ]] ||
  { note "a build failed or was killed"; tail -20 /tmp/k0.log >>"$S"; exit 1; }
T=./build-final/treeattn_gpu_tests
ok=1
for f in 'Fp8Gpu.*' DecodeGpu.ShortM16MatchesWideBitwise; do
  timeout -s KILL "$(lim "${TEST_S:-120}")" $T --gtest_filter="$f" >>"$OUT/tests.log" 2>&1
  rc=$?
  note "test $f: rc=$rc"
  [[ $rc -ne 0 ]] && ok=0
done
grep -E "Failure|FAILED" "$OUT/tests.log" | head -10 | tee -a "$S"
[[ $ok == 1 ]] || { note "tests failed: no bench"; exit 1; }
timeout -s KILL "$(lim 90)" compute-sanitizer --tool racecheck --error-exitcode 3 $T \
  --gtest_filter=Fp8Gpu.NanInTheCacheReachesTheRowsThatAttendIt >/tmp/rc.log 2>&1
note "racecheck Fp8Gpu.NanInTheCache...: rc=$? $(grep -E 'RACECHECK SUMMARY' /tmp/rc.log)"
LINES=("N=256 C=4096 heads=32/8" "N=512 C=1024 heads=32/8" "N=1,64 C=4096,64 heads=32/8"
       "N=1,1024 C=2048,32 heads=32/8")
for k in 1 0; do
  bin=./build-final/treeattn
  [[ $k == 0 ]] && bin=./build-kreg0/treeattn
  rm -f /tmp/kr_*.json
  : >/tmp/kr_$k.log
  : >/tmp/kr16.log
  i=0
  for lv in "${LINES[@]}"; do
    timeout -s KILL "$(lim 40)" $bin bench --levels "$lv" --planner auto --kv-dtype fp8_e4m3 \
      --json /tmp/kr_named$i.json >>/tmp/kr_$k.log 2>&1
    i=$((i + 1))
  done
  if [[ $k == 1 ]]; then
    for lv in "${LINES[@]:0:2}"; do
      timeout -s KILL "$(lim 40)" $bin bench --levels "$lv" --planner auto \
        --json /tmp/kr_fp16_$i.json >>/tmp/kr16.log 2>&1
      i=$((i + 1))
    done
  fi
  timeout -s KILL "$(lim 120)" $bin bench --workloads pat --planner auto --kv-dtype fp8_e4m3 \
    --json /tmp/kr_pat.json >>/tmp/kr_$k.log 2>&1
  python3 bench/merge_bench_json.py "$OUT/bench_kreg$k.json" /tmp/kr_*.json >/dev/null
  note "KREG=$k: $(grep -E '^N=(256|512)' /tmp/kr_$k.log | tr '\n' ';') check failures $(grep -c 'CHECK FAILED' /tmp/kr_$k.log)"
  note "KREG=$k PAT: $(grep -E 'set=pat ' /tmp/kr_$k.log | tr '\n' ' ')"
  [[ $k == 1 ]] && note "fp16 reference: $(grep -E '^N=(256|512)' /tmp/kr16.log | tr '\n' ';')"
  cat /tmp/kr_$k.log /tmp/kr16.log >>"$OUT/bench.log"
done
cat /tmp/rc.log >>"$OUT/bench.log" 2>/dev/null
note "done in $(($(date +%s) - T0)) s"
