#!/usr/bin/env bash
# Device sweep for issue 22: the named lines with many rows on a shared node, under every planner
# but `query` (whose plans these lines make slow) and both grouped kernels in one process each
# (--grouped-kernel legacy,ws), to see which tile class and kernel reach nearest the floor; the
# compute-bound line's auto plan is FastTree's, all kM64 items, whose KV re-reads from L2 (8.7 GB)
# bound it, while the node and forge plans' kM128 items read half of that. Builds build-final
# when missing. The whole call stays under DEADLINE [300] s. Files back: summary.txt,
# planner_lines.json.
#   OUT=... bash bench/ab/planner_kernel_lines.sh     (repository root, on the device)
set -u
source bench/ab/common.sh
ab_start /tmp/pl_out 300
if [[ ! -x build-final/treeattn ]]; then
  STAGES=build OUT=/tmp/b timeout -s KILL 200 bash bench/device_final.sh >/tmp/b.log 2>&1
  grep -E "^(gpu|build)" /tmp/b/summary.txt | tee -a "$S"
fi
rm -f /tmp/pl_*.json
i=0
for lv in "N=1,1024 C=32768,16 heads=32/8" "N=1,1024 C=2048,32 heads=32/8 page=32" \
          "N=1,4,16,512 C=1024,256,128,32 heads=64/8 page=32" "N=1,16,256 C=8192,512,64 heads=32/8"; do
  for pl in auto fasttree node forge pat flatten node-chunk; do
    timeout -s KILL "$(lim 40)" ./build-final/treeattn bench --levels "$lv" --planner $pl \
      --grouped-kernel legacy,ws --json /tmp/pl_$i.json 2>&1 | grep -E "^N=" | tee -a "$S"
    i=$((i + 1))
  done
done
python3 bench/merge_bench_json.py "$OUT/planner_lines.json" /tmp/pl_*.json >/dev/null
echo "done in $(($(date +%s) - T0)) s" | tee -a "$S"
