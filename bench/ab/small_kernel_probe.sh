#!/usr/bin/env bash
# Device diagnostic for the small trees' CTA time (issue 23): is a kM16 CTA's time on the
# smallest lines the fetching of its cold instructions? The deep kM16 kernel is 50 KB of SASS at
# head_dim 128 (3144 instructions; its head loop 2369, the tile loop 659 with 32 HMMAs), and each
# CTA of the smallest lines runs most of its path once, alone on its SM. Two measures:
#   1. the launch floor (bench/ab/launch_floor.cu) with the same 4096 FMAs as 64 KB of
#      straight-line code and as loops over 4 and 16 KB of it: the difference is the fetch cost
#      per KB of code run once;
#   2. ncu on the attention and merge kernels of four small lines: the warp-stall reasons summed
#      (stall_no_inst: waiting for instructions) and the executed footprint (the instructions that
#      ran, and those that ran once a warp), bench/ab/stall_totals.py; the top instructions by
#      samples (stall_top.py).
# Files back: summary.txt, stalls.txt, NAME.sass.csv.gz per ncu run.
#   OUT=... bash bench/ab/small_kernel_probe.sh     (repository root, on the device; ~200 s)
set -u
source bench/ab/common.sh
stall_start /tmp/small_probe_out 330
nvcc -O3 -arch=sm_90a -o /tmp/launch_floor bench/ab/launch_floor.cu >/tmp/lf.log 2>&1 &&
  timeout -s KILL "$(lim 60)" /tmp/launch_floor 2>&1 | tee -a "$S"
probe() {  # name, kernel regex, input flags ...
  local name=$1 re=$2
  shift 2
  ncu_sass "$name" "$re" "$(lim 60)" --launch-skip 10 --warp-sampling-interval 0 -- \
    ./build-final/treeattn bench "$@" --planner auto --baseline off --runs 50 ||
    { tail -5 "$W/$name.log" | tee -a "$S"; return; }
  stall_report "$name" "$*"
  (cd bench/ab && python3 stall_totals.py "$W/$name.csv") | tee -a "$S" >>"$OUT/stalls.txt"
}
probe smallest 'decode_attention_kernel' --levels "N=1,2,64 C=8,256,32 heads=16/1"
probe long_leaf 'decode_attention_kernel' --levels "N=1,10 C=4000,400 heads=16/1"
probe beam 'decode_attention_kernel' --workload "beam requests=2 width=16 steps=128 heads=8/1 page=64"
probe chain_merge 'decode_merge_kernel' --workload "chain depth=32 queries=16 heads=16/1"
note "done in $(($(date +%s) - T0)) s"
