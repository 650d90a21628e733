#!/usr/bin/env bash
# Device diagnostic for issue 22: where the warp-specialized kernel's warps stall, per SASS
# instruction. ncu samples warp stalls per instruction (SourceCounters); the per-instruction table
# (`--page source --print-source sass`) is summed per opcode and per role by ws_stall_report.py,
# which answers what the aggregate stall reasons of earlier runs could not: do the consumers wait
# for K/V (mbarrier waits on full barriers: the producer is behind), does the producer wait for
# free stages (empty barriers: the consumers are behind), or do the consumers wait on their own
# wgmma and softmax (issue-bound)?
# Lines: the compute-bound `N=1,1024 C=32768,16 32/8` (ws kM64) and `N=1,8,512 C=512,512,256 32/8
# page=32` (ws kM128), both with --grouped-kernel ws; the first line again under the node planner
# (kM128 items, the ws kM128 kernel); and the legacy kernel on the first line for contrast. Each ncu run is killed after NCU_S [100] s; the whole call stays under DEADLINE [540].
# Files back: summary.txt, stalls.txt (the reports), ncu_logs.txt, NAME.sass.csv.gz (the
# per-instruction tables, for ws_stall_report.py here).
#   OUT=... bash bench/ab/ws_stall_sources.sh     (repository root, on the device)
set -u
source bench/ab/common.sh
ab_start /tmp/stall_out 540
W=/tmp/stall_work
mkdir -p "$W"
ab_cli 330
: >"$OUT/stalls.txt"
: >"$OUT/ncu_logs.txt"
run() {  # name, kernel regex (mangled), grouped kernel, levels[, planner (auto)]
  ncu_sass "$1" "$2" "$(lim "${NCU_S:-100}")" -- ./build-final/treeattn bench --levels "$4" \
    --planner "${5:-auto}" --grouped-kernel "$3" --runs 50
  local ok=$?
  { echo "===== $1"; tail -n 30 "$W/$1.log"; } >>"$OUT/ncu_logs.txt"
  ((ok == 0)) || return
  { echo "===== $1 ($3, $4)"
    grep -E "Duration|Compute \(SM\) Throughput|Memory Throughput|Issued Warp|Warp Cycles Per Issued" \
      "$W/$1.details" | head -8
    python3 bench/ab/ws_stall_report.py "$W/$1.csv"; } >>"$OUT/stalls.txt" 2>&1
}
run ws_m64 'decode_ws_kernel.*Li1EL' ws "N=1,1024 C=32768,16 heads=32/8"
run ws_m128 'decode_ws_kernel.*Li2EL' ws "N=1,8,512 C=512,512,256 heads=32/8 page=32"
# the kM128 ws kernel on the compute-bound line, whose auto plan (FastTree's) is all kM64 items
run ws_m128_node 'decode_ws_kernel.*Li2EL' ws "N=1,1024 C=32768,16 heads=32/8" node
run legacy_m64 'decode_attention_kernel.*Li1EL' legacy "N=1,1024 C=32768,16 heads=32/8"
tail -n 60 "$OUT/stalls.txt"
