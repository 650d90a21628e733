#!/usr/bin/env bash
# The results run on one GPU device (repository root), in one call of <= 9 minutes:
#   1. build the CLI and the GPU tests (sm_90a, ninja -j16; GoogleTest from the carried
#      build-devdeps/googletest when the machine has none)
#   2. every GPU test, as parallel processes (one per test; a hang costs its own timeout only)
#   3. compute-sanitizer memcheck, racecheck and synccheck on the small tests
#   4. treeattn bench --planner auto on the FastTree, PAT and irregular sets and the named lines
#      (each result also holds the query planner's time on the line: baseline_query_ms)
#   5. the peers named in PEERS, on the same card in the same call: "ft" FastTree/DeFT artifact
#      kernels (both sets), "fi" FlashInfer 0.7.2 (needs peers/wheels; prebuilt AOT modules in the
#      wheel skip its JIT)
# Carry: peers (a copy of ../shared/peers) and build-devdeps. At most 8 files come back: the logs
# are concatenated into logs.txt, the bench JSON into bench.json, and summary.txt prints last.
# Env knobs [defaults]: STAGES [build tests sanitize bench peers], TESTS [*] (a gtest filter of the
# tests stage), PEERS [ft fi], DEADLINE [540],
# JOBS [16], BENCH_ARGS [--planner auto] (e.g. add --grouped-kernel legacy,ws64,ws128 for an A/B in
# one process), BENCH_TIMEOUT [150] (per set),
# FI_BUDGET [150] (FlashInfer's own time budget, s).
set -uo pipefail
OUT=${OUT:-/tmp/final_out}
mkdir -p "$OUT"
STAGES=${STAGES:-"build tests sanitize bench peers"}
PEERS=${PEERS:-"ft fi"}
DEADLINE=${DEADLINE:-540}
BUILD=build-final
SUMMARY="$OUT/summary.txt"
LOGS=/tmp/final_logs
mkdir -p "$LOGS"
: >"$SUMMARY"
T0=$(date +%s)
has() { [[ " $STAGES " == *" $1 "* ]]; }
note() { echo "$*" | tee -a "$SUMMARY"; }
left() { echo $((DEADLINE - ($(date +%s) - T0))); }
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1
note "gpu: $(nvidia-smi --query-gpu=name,memory.total,clocks.max.sm,driver_version \
  --format=csv,noheader 2>&1 | head -1); date: $(date -u +%FT%TZ)"

# ---- 1. build
if has build; then
  t0=$(date +%s)
  extra=()
  if [[ ! -f /usr/lib/x86_64-linux-gnu/libgtest.a && ! -f /usr/local/lib/libgtest.a && \
        -d build-devdeps/googletest ]]; then
    { cmake -S build-devdeps/googletest -B /tmp/gtest-build -G Ninja -DCMAKE_BUILD_TYPE=Release \
        -DCMAKE_INSTALL_PREFIX=/tmp/gtest -DBUILD_GMOCK=OFF &&
        ninja -C /tmp/gtest-build install; } >"$LOGS/build.log" 2>&1
    extra+=(-DCMAKE_PREFIX_PATH=/tmp/gtest)
  fi
  { cmake -S . -B $BUILD -G Ninja -DTREEATTN_BENCH=OFF -DTREEATTN_CUDA_ARCHS=90a "${extra[@]}" &&
      ninja -C $BUILD -j"${JOBS:-16}" treeattn treeattn_gpu_tests; } >>"$LOGS/build.log" 2>&1
  rc=$?
  note "build: rc=$rc in $(($(date +%s) - t0)) s"
  if [[ $rc -ne 0 ]]; then grep -E "error" "$LOGS/build.log" | head -20; cp "$LOGS/build.log" "$OUT/"; exit 1; fi
  for f in $BUILD/CMakeFiles/treeattn_cuda.dir/src/kernels/inst_fp16_hd128.cu.o; do
    note "sass fp16 hd128: LDL/STL $(cuobjdump -sass "$f" | grep -cE 'LDL|STL'), HGMMA $(cuobjdump -sass "$f" | grep -c HGMMA)"
  done
fi
T=./$BUILD/treeattn_gpu_tests

# ---- 2. GPU tests, one process per test
if has tests; then
  t0=$(date +%s)
  mapfile -t tests < <($T --gtest_list_tests --gtest_filter="${TESTS:-*}" |
    awk '/^[^ ]/{s=$1} /^  /{print s $1}')
  pids=()
  for t in "${tests[@]}"; do
    (timeout 200 $T --gtest_filter="$t" >"$LOGS/test_$t.log" 2>&1; echo $? >"$LOGS/test_$t.rc") &
    pids+=($!)
    # at most 8 at a time: they share one GPU
    while (( $(jobs -rp | wc -l) >= 8 )); do sleep 0.2; done
  done
  wait
  failed=()
  for t in "${tests[@]}"; do
    rc=$(cat "$LOGS/test_$t.rc" 2>/dev/null || echo 99)
    [[ "$rc" != 0 ]] && failed+=("$t(rc=$rc)")
  done
  note "gpu tests: ${#tests[@]} in $(($(date +%s) - t0)) s; failed: ${failed[*]:-none}"
  for t in "${tests[@]}"; do grep -hE "SKIPPED \]|Failure|FAILED \]" "$LOGS/test_$t.log" | head -3; done \
    | sort | uniq | head -20 | tee -a "$SUMMARY"
fi

# ---- 3. sanitizers
if has sanitize; then
  t0=$(date +%s)
  SMALL=${SMALL:-'DecodeGpu.BlockGroupsSmall:DecodeGpu.HeadLoopSmall:DecodeGpu.MergeWithEmptyPartials:DecodeGpu.CombinedKvLayoutAndNoLse:WsGpu.SanitizerSmall:SmallPathGpu.TimelineStampsEveryCtaInOrder:Fp8Gpu.RandomTreesCombinedLayoutNoLse:Fp8Gpu.InvalidArgumentsNameTheMismatch'}
  for tool in memcheck racecheck synccheck; do
    timeout 90 compute-sanitizer --tool $tool --error-exitcode 3 $T --gtest_filter="$SMALL" \
      >"$LOGS/san_$tool.log" 2>&1 &
  done
  wait
  for tool in memcheck racecheck synccheck; do
    note "$tool: $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' "$LOGS/san_$tool.log" | tail -1) $(grep -cE '^\[       OK' "$LOGS/san_$tool.log") ok"
  done
  note "sanitizers: $(($(date +%s) - t0)) s"
fi

# ---- 4. bench
if has bench; then
  t0=$(date +%s)
  for s in fasttree pat irregular; do
    timeout ${BENCH_TIMEOUT:-150} ./$BUILD/treeattn bench --workloads $s ${BENCH_ARGS:---planner auto} --json /tmp/bench_$s.json \
      >>"$LOGS/bench.log" 2>&1
    note "bench $s: rc=$? at $(($(date +%s) - t0)) s"
  done
  i=0
  for lv in "N=1,1024 C=32768,16 heads=32/8" "N=1,1024 C=2048,32 heads=32/8 page=32" \
            "N=1,64 C=4096,64 heads=32/8" "N=256 C=4096 heads=32/8" "N=512 C=1024 heads=32/8"; do
    timeout 60 ./$BUILD/treeattn bench --levels "$lv" ${BENCH_ARGS:---planner auto} --json /tmp/bench_named$i.json \
      >>"$LOGS/bench.log" 2>&1
    i=$((i + 1))
  done
  note "bench: $(($(date +%s) - t0)) s; check failures: $(grep -c 'CHECK FAILED' "$LOGS/bench.log")"
  python3 bench/merge_bench_json.py "$OUT/bench.json" /tmp/bench_*.json
fi

# ---- 5. peers
if has peers; then
  if [[ " $PEERS " == *" ft "* ]]; then
    t0=$(date +%s)
    timeout 150 python3 peers/fasttree_peer.py --configs artifact --json $OUT/ft.json \
      >"$LOGS/ft.log" 2>&1
    note "ft artifact: rc=$? in $(($(date +%s) - t0)) s"
    timeout 120 python3 peers/fasttree_peer.py --workload-file data/workloads/pat.txt \
      --peers fasttree,ftdeft --json $OUT/ft_pat.json >"$LOGS/ft_pat.log" 2>&1
    note "ft pat: rc=$? at $(($(date +%s) - t0)) s"
  fi
  if [[ " $PEERS " == *" fi "* ]]; then
    budget=$(( $(left) - 40 ))
    (( budget > ${FI_BUDGET:-150} )) && budget=${FI_BUDGET:-150}
    if (( budget >= 40 )); then
      t0=$(date +%s)
      python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site \
        peers/wheels/*.whl >"$LOGS/fi_pip.log" 2>&1
      PYTHONPATH=/tmp/site timeout $((budget + 60)) python3 peers/flashinfer_peer.py \
        --workload-file data/workloads/fasttree.txt data/workloads/pat.txt \
        --variants decode_tc,decode_cc,cascade_auto,cascade_fa2,prefill_fa2 \
        --time-budget-s $budget --json $OUT/fi.json >"$LOGS/fi.log" 2>&1
      note "flashinfer: rc=$? in $(($(date +%s) - t0)) s (budget $budget s); $(tail -1 "$LOGS/fi.log")"
    else
      note "flashinfer: skipped, $(left) s left"
    fi
  fi
fi

for f in "$LOGS"/*.log; do echo "===== $(basename "$f")"; cat "$f"; done >"$OUT/logs.txt" 2>/dev/null
note "total: $(($(date +%s) - T0)) s"
echo "==== summary"
cat "$SUMMARY"
grep -E "geometric|geomean|set=" "$LOGS/bench.log" | head -20
