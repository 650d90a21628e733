#!/usr/bin/env bash
# Same-machine A/B of the fp8 KV pipeline depth (TREEATTN_FP8_STAGES 3, 4, 5): three CLI builds
# at once, then treeattn bench --planner auto --kv-dtype fp8_e4m3 with each on the no-sharing
# lines, two shared-prefix lines and the PAT set. One device call (~5 minutes); files back:
# fp8_stages.tar.gz (bench JSON per depth, logs, summary.txt).
set -uo pipefail
OUT=${OUT:-/tmp/fp8_stages}
R=/tmp/fp8_stages_results
mkdir -p "$OUT" "$R"
note() { echo "$*" | tee -a "$R/summary.txt"; }
T0=$(date +%s)
note "gpu: $(nvidia-smi --query-gpu=name --format=csv,noheader); date: $(date -u +%FT%TZ)"
for s in 3 4 5; do
  (cmake -S . -B build-s$s -G Ninja -DTREEATTN_BENCH=OFF -DTREEATTN_TESTS=OFF \
     -DTREEATTN_CUDA_ARCHS=90a -DCMAKE_CUDA_FLAGS=-DTREEATTN_FP8_STAGES=$s >"$R/build_s$s.log" 2>&1 &&
     ninja -C build-s$s -j5 treeattn >>"$R/build_s$s.log" 2>&1; echo $? >"$R/build_s$s.rc") &
done
wait
note "builds: $(cat "$R"/build_s*.rc | paste -sd' ') in $(($(date +%s) - T0)) s"
LINES=("N=256 C=4096 heads=32/8" "N=512 C=1024 heads=32/8" "N=1,1024 C=2048,32 heads=32/8"
       "N=1,64 C=4096,64 heads=32/8")
for s in 3 4 5; do
  t0=$(date +%s)
  i=0
  for lv in "${LINES[@]}"; do
    timeout 60 ./build-s$s/treeattn bench --levels "$lv" --planner auto --kv-dtype fp8_e4m3 \
      --json /tmp/st_s${s}_named$i.json >>"$R/bench_s$s.log" 2>&1
    i=$((i + 1))
  done
  timeout 120 ./build-s$s/treeattn bench --workloads pat --planner auto --kv-dtype fp8_e4m3 \
    --json /tmp/st_s${s}_pat.json >>"$R/bench_s$s.log" 2>&1
  note "stages $s: $(python3 bench/merge_bench_json.py "$R/bench_s$s.json" /tmp/st_s${s}_*.json | tr '\n' ';') ($(($(date +%s) - t0)) s, check failures $(grep -c 'CHECK FAILED' "$R/bench_s$s.log"))"
done
tar -czf "$OUT/fp8_stages.tar.gz" -C /tmp fp8_stages_results
cat "$R/summary.txt"
