#!/usr/bin/env bash
# The paths-split planner at every group size (bench --paths-group 0,1,2,4,8,16,32,64) on the sets
# named in SETS [irregular fasttree deft], and at the model's group size on PAT_SETS [pat], one
# process per set: with stop 42's sweep of every other planner (bench/results/*-s42-sweep-*), the
# input of tools/calibrate_cost_model.py's replay of auto. Builds build-final when missing. Files
# back: summary.txt, split-SET.json per set.
#   OUT=... bash bench/ab/paths_split_sweep.sh     (repository root, on the device)
set -u
source bench/ab/common.sh
ab_start /tmp/paths_split_sweep 560
gpu_note
ab_cli 200
run_set() {  # set, groups
  timeout -s KILL "$(left)" ./build-final/treeattn bench --workloads "$1" --planner paths-split \
    --paths-group "$2" --json "$OUT/split-$1.json" >"/tmp/split-$1.log" 2>&1
  note "set $1: rc=$? at $(($(date +%s) - T0)) s; check failures $(grep -c 'CHECK FAILED' /tmp/split-$1.log)"
}
for s in ${SETS:-irregular fasttree deft}; do run_set "$s" 0,1,2,4,8,16,32,64; done
for s in ${PAT_SETS-pat}; do run_set "$s" 0; done
