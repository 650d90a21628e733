#!/usr/bin/env bash
# Device script of the merge A/B (issue 23), <= 8 minutes on one H100 (16 cores): build for sm_90a
# (the CLI and the GPU tests), the GPU tests that run the merge (and every other GPU test, one
# process each), memcheck/racecheck on the small merge cases, then `treeattn bench --planner auto`
# on the FastTree, irregular and PAT sets on one binary, twice:
#   A  the merge of this branch, its variant (wide / deep) chosen per plan (tile_policy.h)
#   L  TREEATTN_MERGE_VARIANT=legacy: the previous merge (one CTA per query, two passes)
#   W  TREEATTN_MERGE_VARIANT=wide on every plan
#   D  TREEATTN_MERGE_VARIANT=deep on every plan
# (A with --timeline); then the FastTree/DeFT peers on the FastTree set in the same call, and a
# summary last (bench/ab/small_summary.py). Run from the repository root; carry build-devdeps
# (GoogleTest sources) and peers. Everything lands in $OUT (<= 8 files).
#
# The variant switch (TREEATTN_MERGE_VARIANT) existed for this A/B only, at commit 2bcdd7a; on
# later commits every variant runs the per-plan choice.
#
# Env knobs: STAGES (words of: build tests bench peers) [build tests bench peers], BENCH_RUNS [50].
set -uo pipefail
OUT=${OUT:-/tmp/treeattn_small_out}
mkdir -p "$OUT"
STAGES=${STAGES:-"build tests bench peers"}
BENCH_RUNS=${BENCH_RUNS:-50}
BUILD=build-small
SUMMARY="$OUT/summary.txt"
: >"$SUMMARY"
has() { [[ " $STAGES " == *" $1 "* ]]; }
note() { echo "$*" | tee -a "$SUMMARY"; }
T0=$(date +%s)
note "gpu: $(nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,driver_version --format=csv,noheader 2>&1)"
note "commit: $(git rev-parse --short HEAD 2>/dev/null) $(git status --porcelain 2>/dev/null | wc -l) changed files"

if has build; then
  t0=$(date +%s)
  extra=()
  if [[ ! -f /usr/lib/x86_64-linux-gnu/libgtest.a && ! -f /usr/local/lib/libgtest.a ]]; then
    if [[ -d build-devdeps/googletest ]]; then
      cmake -S build-devdeps/googletest -B /tmp/gtest-build -G Ninja -DCMAKE_BUILD_TYPE=Release \
        -DCMAKE_INSTALL_PREFIX=/tmp/gtest -DBUILD_GMOCK=OFF >"$OUT/build.log" 2>&1 &&
        ninja -C /tmp/gtest-build install >>"$OUT/build.log" 2>&1
      extra+=(-DCMAKE_PREFIX_PATH=/tmp/gtest)
    else
      note "no GoogleTest and no build-devdeps/googletest: GPU tests will not build"
    fi
  fi
  { cmake -S . -B $BUILD -G Ninja -DCMAKE_BUILD_TYPE=Release -DTREEATTN_BENCH=OFF \
      -DTREEATTN_CUDA_ARCHS=90a ${extra[@]+"${extra[@]}"} &&
    ninja -C $BUILD -j16 treeattn treeattn_gpu_tests; } >>"$OUT/build.log" 2>&1
  rc=$?
  note "build: rc=$rc in $(($(date +%s) - t0)) s"
  grep -E "spill|error" "$OUT/build.log" | grep -v "0 bytes spill" | head -10 | tee -a "$SUMMARY"
  if [[ $rc -ne 0 ]]; then tail -30 "$OUT/build.log"; exit 1; fi
  rm -f "$OUT/build.log"  # only kept on failure (the files that come back are limited)
fi

if has tests; then
  t0=$(date +%s)
  T=./$BUILD/treeattn_gpu_tests
  mapfile -t tests < <($T --gtest_list_tests | awk '/^[^ ]/{s=$1} /^  /{print s $1}')
  for t in "${tests[@]}"; do
    (timeout 200 $T --gtest_filter="$t" >"/tmp/test_$t.log" 2>&1; echo $? >"/tmp/test_$t.rc") &
    while (( $(jobs -rp | wc -l) >= 8 )); do sleep 0.2; done
  done
  wait
  failed=()
  for t in "${tests[@]}"; do
    rc=$(cat "/tmp/test_$t.rc" 2>/dev/null || echo 99)
    [[ "$rc" != 0 ]] && failed+=("$t(rc=$rc)")
  done
  for t in "${tests[@]}"; do echo "== $t rc=$(cat /tmp/test_$t.rc)"; grep -E "^\[ +(OK|FAILED|SKIPPED) |Failure|Value of|Expected|Which is|pass=" "/tmp/test_$t.log" | head -30; done >"$OUT/gpu_tests.log"
  note "gpu tests: ${#tests[@]} in $(($(date +%s) - t0)) s; failed: ${failed[*]:-none}"
  t0=$(date +%s)
  SAN='DecodeGpu.MergeWithEmptyPartials:DecodeGpu.BlockGroupsSmall:SmallPathGpu.TimelineStampsEveryCtaInOrder'
  { timeout 60 compute-sanitizer --tool memcheck --error-exitcode 3 $T --gtest_filter="$SAN"
    echo "memcheck rc=$?"
    timeout 60 compute-sanitizer --tool racecheck --error-exitcode 3 $T --gtest_filter="$SAN"
    echo "racecheck rc=$?"
    timeout 60 compute-sanitizer --tool synccheck --error-exitcode 3 $T --gtest_filter="$SAN"
    echo "synccheck rc=$?"; } >"$OUT/sanitizers.log" 2>&1
  note "sanitizers in $(($(date +%s) - t0)) s: $(grep -E '^(memcheck|racecheck|synccheck) rc=|ERROR SUMMARY|RACECHECK SUMMARY' "$OUT/sanitizers.log" | tr '\n' ' ')"
fi

if has bench; then
  : >"$OUT/bench.log"
  bench() {  # variant, extra flags...
    local v=$1
    shift
    local t0=$(date +%s)
    local env=()
    [[ $v == L ]] && env=(TREEATTN_MERGE_VARIANT=legacy)
    [[ $v == W ]] && env=(TREEATTN_MERGE_VARIANT=wide)
    [[ $v == D ]] && env=(TREEATTN_MERGE_VARIANT=deep)
    for set in fasttree irregular pat; do
      echo "==== variant $v set $set: $*" >>"$OUT/bench.log"
      env ${env[@]+"${env[@]}"} timeout 90 ./$BUILD/treeattn bench --workloads $set --planner auto \
        --runs "$BENCH_RUNS" --json "/tmp/small_${v}_$set.json" "$@" \
        >>"$OUT/bench.log" 2>&1
      echo "bench $v $set rc=$?" >>"$SUMMARY"
    done
    note "bench $v: $(($(date +%s) - t0)) s"
  }
  bench A --timeline /tmp/timeline_A.jsonl
  bench L
  bench W
  bench D
  gzip -c /tmp/timeline_A.jsonl >"$OUT/timeline_A.jsonl.gz" 2>/dev/null
  python3 bench/ab/small_summary.py "$OUT/bench.json" /tmp/small_*.json \
    --timeline A=/tmp/timeline_A.jsonl | tee -a "$SUMMARY"
fi
if has peers; then
  t0=$(date +%s)
  timeout 150 python3 peers/fasttree_peer.py --configs artifact --json $OUT/ft.json \
    >/tmp/ft.log 2>&1
  note "ft artifact peers: rc=$? in $(($(date +%s) - t0)) s; $(tail -2 /tmp/ft.log | tr '\n' ' ')"
fi
note "total: $(($(date +%s) - T0)) s"
echo "==== summary"
cat "$SUMMARY"
