#!/usr/bin/env bash
# Device diagnostic: the CLI built alone (bench/device_final.sh STAGES=build), then
# `treeattn bench --timeline` (every CTA's phases, median of 7 stamped runs) of planner auto on the
# lines below, with the grouped classes on the kernel that stamps its phases (legacy). Files back:
# tl.jsonl.gz (one JSON line per line and planner; the `query` baseline's too) and the printed
# critical-path summaries on stdout.
set -u
OUT=${OUT:-/tmp/tl_out}
mkdir -p "$OUT"
STAGES=build OUT=/tmp/b bash bench/device_final.sh >/tmp/b.log 2>&1
tail -3 /tmp/b/summary.txt
i=0
for lv in "N=1,1024 C=2048,32 heads=32/8 page=32" "N=1,256 C=256,32 heads=32/8 page=32" \
  "N=1,4,16,512 C=1024,256,128,32 heads=64/8 page=32" \
  "N=1,8,16,32,64,256,1024 C=256,128,64,32,32,32,32 heads=64/8 page=32" \
  "N=1,64 C=4096,64 heads=32/8" "N=1,10 C=4096,416 heads=64/8 page=32" \
  "N=1,4,8,256 C=32,256,256,32 heads=32/8 page=32" \
  "N=1,16,32,64,128,1024 C=256,128,64,32,32,32 heads=32/8 page=32"; do
  timeout 60 ./build-final/treeattn bench --levels "$lv" --planner auto --grouped-kernel legacy \
    --timeline /tmp/tl_$i.jsonl 2>&1 | grep -E "^  timeline|^    "
  i=$((i + 1))
done
cat /tmp/tl_*.jsonl | gzip >"$OUT/tl.jsonl.gz"
