#!/usr/bin/env bash
# Device diagnostic for issue 23: which of a CTA's warps ends the epilogue's write last. Stop 38's
# probes (NOTES "The epilogue's write") found warp 0 (which stamps) done with its writes, stores
# visible, ~1 us before the CTA's final barrier releases, though every warp writes the same
# number of chunks. This probe build (bench/ab/small_tree_ab.sh PROBE_SED on decode_kernel.cuh)
# drops the item, first-tile and loop stamps and has lane 0 of warps 1-3 stamp their own clock
# into those words right after their write loop; the end stamp still follows the final barrier.
# bench/ab/epilogue_warps.py then prints, per FastTree line and kernel config, the median over
# CTAs of (end - warp k's write end) for k = 1..3: ~0 marks the late warp. Builds the working
# tree, ab-old/ and the probe; no A/B, no tests (about 3 minutes).
#   OUT=... bash bench/ab/epilogue_warps.sh     (repository root, on the device; carry ab-old)
set -u
OUT=${OUT:-/tmp/epi_warps}
mkdir -p "$OUT"
stamp='\1{ const int wq = threadIdx.x >> 5; if (stamps \&\& p.timeline != nullptr \&\& (threadIdx.x \& 31) == 0 \&\& wq >= 1 \&\& wq <= 3) { uint64_t v; asm volatile("mov.u64 %0, %%clock64;" : "=l"(v)::"memory"); p.timeline[tl_rec() * kTimelineWords + 1 + wq] = v; } }'
PROBE_SED="/timeline_stamp(p, tl_rec, kTlClockItem);/d; /timeline_stamp(p, tl_rec, kTlClockKv);/d; /timeline_stamp(p, tl_rec, kTlClockLoop);/d; s/^\( *\)sRows);\$/&\n$stamp/; s/^\( *\)sRows, pO, pM, pL);\$/&\n$stamp/" \
  NEW_STAGES=build SKIP_AB=1 OUT="$OUT/ab" DEADLINE=${DEADLINE:-300} bash bench/ab/small_tree_ab.sh >"$OUT/ab.log" 2>&1
grep -E "probe diff|builds|rc=" "$OUT/ab.log" | cut -c1-300
python3 bench/ab/epilogue_warps.py /tmp/lab_tl.txt | tee "$OUT/warps.txt"
