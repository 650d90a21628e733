#!/usr/bin/env bash
# Device diagnostic for the paths planner's masked kM128 items (issue 23, stop 40): on
# `N=1,4,16,512 C=1024,256,128,32 16/1` the paths plan (64 masked items of 8 queries, 1664 tokens,
# ws kM128) ran at ~1.6 us per 64-token tile against the model's 0.78 for ws kM128 CTAs. ncu's
# warp-stall sampling of its ws kernel, beside the node plan's unmasked ws kM128 root items on the
# same line, and both plans' timelines (each CTA's phases).
# Files back: summary.txt, stalls.txt (bench/ab/stall_top.py of each run), NAME.sass.csv.gz,
# timeline.jsonl.gz.
#   OUT=... bash bench/ab/paths_ws_stalls.sh     (repository root, on the device)
set -u
source bench/ab/common.sh
stall_start /tmp/paths_ws_out 400
LV="N=1,4,16,512 C=1024,256,128,32 heads=16/1"
run() {  # name, planner
  ncu_sass "$1" 'decode_ws_kernel' "$(lim 90)" --launch-skip 20 --warp-sampling-interval 0 \
    --section SchedulerStats -- ./build-final/treeattn bench --levels "$LV" --planner "$2" \
    --runs 50 || { tail -5 "$W/$1.log" | tee -a "$S"; return; }
  stall_report "$1" "$LV, planner $2"
}
run ws_paths paths
run ws_node node
: >/tmp/pws_tl.jsonl
for pl in paths node auto; do
  timeout -s KILL "$(lim 40)" ./build-final/treeattn bench --levels "$LV" --planner $pl \
    --timeline /tmp/pws_tl_$pl.jsonl 2>&1 | grep -E "us|timeline" | head -8 | tee -a "$S"
  cat /tmp/pws_tl_$pl.jsonl >>/tmp/pws_tl.jsonl 2>/dev/null
done
gzip -c /tmp/pws_tl.jsonl >"$OUT/timeline.jsonl.gz"
note "done in $(($(date +%s) - T0)) s"
