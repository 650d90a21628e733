#!/usr/bin/env bash
# Device diagnostic for issue 23: where the small lines' CTAs stall, per SASS instruction. The
# timeline (`treeattn bench --timeline`) gives each CTA's phases (item, chain to the first K/V
# tile, compute, epilogue) but not which instruction a phase waits on; ncu's warp-stall sampling
# (SourceCounters, every 32 cycles) does. One launch per run after 20 skipped ones, caches flushed
# by ncu before it (its default), like the bench's L2 flush.
# Runs: the smallest FastTree line's deep kM16 kernel with pairs off and on, the kM64 and merge
# kernels of `N=1,16,64 C=1024,256,32 16/1`, and the timeline of the same lines beside them.
# Files back: summary.txt, stalls.txt (bench/ab/stall_top.py of each run), NAME.sass.csv.gz.
#   OUT=... bash bench/ab/small_stall_sources.sh     (repository root, on the device)
set -u
source bench/ab/common.sh
stall_start /tmp/stall_out 420
run() {  # name, kernel regex (mangled), levels, env ...
  local name=$1 re=$2 lv=$3
  shift 3
  ncu_sass "$name" "$re" "$(lim 90)" --launch-skip 20 --warp-sampling-interval 0 -- \
    env "$@" ./build-final/treeattn bench --levels "$lv" --planner auto --runs 50 ||
    { tail -5 "$W/$name.log" | tee -a "$S"; return; }
  stall_report "$name" "$lv $*"
}
SMALL="N=1,2,64 C=8,256,32 heads=16/1"
MID="N=1,16,64 C=1024,256,32 heads=16/1"
run m16_pairs_off 'decode_attention_kernel' "$SMALL" TREEATTN_PAIR_M16=off
run m16_pairs_on 'decode_attention_kernel' "$SMALL" TREEATTN_PAIR_M16=on
run m64_mid 'decode_(attention|ws)_kernel.*Li128ELi1EL' "$MID"
run merge_mid 'decode_merge_kernel' "$MID"
for lv in "$SMALL" "$MID"; do
  timeout -s KILL "$(lim 40)" ./build-final/treeattn bench --levels "$lv" --planner auto \
    --pair-m16 off,on --timeline /tmp/tl.jsonl 2>&1 | grep -E "^  timeline|^    |us" | head -30 |
    tee -a "$S"
done
gzip -c /tmp/tl.jsonl >"$OUT/timeline.jsonl.gz" 2>/dev/null
note "done at $(($(date +%s) - T0)) s"
