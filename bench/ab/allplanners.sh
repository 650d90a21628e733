#!/usr/bin/env bash
# Every planner on the workload sets named in SETS [fasttree pat irregular], one process per set,
# for tools/calibrate_cost_model.py (the cost model's fit on this GPU: the H200 refit of issue 22
# item 5 runs it on an H200, then the calibration on the CPU). Builds build-final when missing.
# Each set is killed at what is left of DEADLINE [540] s; on an H100 one set takes a call of its
# own. PATHS_GROUPS (bench --paths-group, e.g. 0,1,2,4,8,16,32,64) times the paths and auto plans
# once per paths group size as well: the sweep that fits the paths mask penalties. Files back:
# summary.txt, allplanners-SET.json per set.
#   SETS=pat OUT=... bash bench/ab/allplanners.sh     (repository root, on the device)
set -u
source bench/ab/common.sh
ab_start /tmp/allplanners 540
gpu_note
if [[ ! -x build-final/treeattn ]]; then
  STAGES=build OUT=/tmp/b timeout -s KILL 200 bash bench/device_final.sh >/tmp/b.log 2>&1
  grep -E "^build" /tmp/b/summary.txt | tee -a "$S"
fi
for s in ${SETS:-fasttree pat irregular}; do
  timeout -s KILL "$(left)" ./build-final/treeattn bench --workloads "$s" --planner all \
    ${PATHS_GROUPS:+--paths-group "$PATHS_GROUPS"} --json "$OUT/allplanners-$s.json" \
    >"/tmp/allplanners-$s.log" 2>&1
  echo "set $s: rc=$? at $(($(date +%s) - T0)) s; check failures $(grep -c 'CHECK FAILED' /tmp/allplanners-$s.log)" |
    tee -a "$S"
  sed -n '/^geometric mean/,$p' "/tmp/allplanners-$s.log" >>"$S"
done
