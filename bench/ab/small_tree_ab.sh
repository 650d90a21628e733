#!/usr/bin/env bash
# Device A/B for a change of the attention kernel's critical path on small trees (issue 23), in one
# call:
#   1. builds, in parallel: the working tree's CLI and GPU tests (bench/device_final.sh
#      STAGES="build tests"), the old tree's CLI (ab-old/, as bench/ab/cost_ab.sh takes it) and, when
#      PROBE_SED is set, a probe CLI: a copy of the working tree with that sed script applied to
#      PROBE_FILE (default src/kernels/decode_kernel.cuh; e.g. a timeline stamp moved);
#   2. the GPU tests named by TESTS (a gtest filter; default every test), one process each, by
#      device_final.sh's tests stage, and its sanitizers too with NEW_STAGES="build tests
#      sanitize" (SMALL: their tests) (its summary comes back as tests.txt);
#   3. the launch floor of the bench's timing (bench/ab/launch_floor.cu);
#   4. `treeattn bench --timeline` of planner auto on the FastTree set's lines for old, new (and
#      probe), after an L2 flush and, with WARM=1, also warm (--l2-flush off): every CTA's phases,
#      the critical path per line (timelines.jsonl.gz);
#   5. bench/ab/cost_ab.sh: old against new on every set and the named lines, same call (in ab/);
#   6. the lines of EXTRA_LINES (';'-separated level specs), old then new.
# Files back: summary.txt, tests.txt, timelines.jsonl.gz, ab/summary.txt, ab/bench_old.json,
# ab/bench_new.json.
# SKIP_TL=1 skips steps 3 and 4.
#   OUT=... [TESTS=...] [NEW_STAGES=...] [PROBE_SED=... [PROBE_FILE=...]] [WARM=1] [SKIP_TL=1] [SKIP_AB=1] [EXTRA_LINES=...] \
#     bash bench/ab/small_tree_ab.sh
set -u
source bench/ab/common.sh
ab_start /tmp/small_tree_ab 570
gpu_note
[[ -f ab-old/CMakeLists.txt ]] || { note "no ab-old/ tree"; exit 1; }
ab_build ab-old build-old 6 &
if [[ -n ${PROBE_SED:-} ]]; then
  rm -rf /tmp/probe && mkdir -p /tmp/probe &&
    tar --exclude=./build-* --exclude=./ab-old --exclude=./peers -cf - . | tar -xf - -C /tmp/probe &&
    PF=${PROBE_FILE:-src/kernels/decode_kernel.cuh} &&
    sed -i "$PROBE_SED" "/tmp/probe/$PF" &&
    note "probe diff: $(diff "$PF" "/tmp/probe/$PF" | tr '\n' ' ' | head -c 400)"
  ab_build /tmp/probe /tmp/probe/build-probe 6 &
fi
# the new tree's CLI and GPU tests, then the tests named by TESTS, one process each
STAGES=${NEW_STAGES:-"build tests"} OUT=/tmp/lab_final JOBS=8 bash bench/device_final.sh >/tmp/lab_final.log 2>&1
grep -h "^build:\|^gpu tests\|^memcheck\|^racecheck\|^synccheck" /tmp/lab_final/summary.txt | while read -r l; do note "new: $l"; done
cp /tmp/lab_final/summary.txt "$OUT/tests.txt"
wait
note "builds: $(($(date +%s) - T0)) s; old $([[ -x build-old/treeattn ]] && echo ok || echo FAILED)"
[[ -x build-final/treeattn && -x build-old/treeattn ]] || { tail -20 build-old.log >>"$S"; exit 1; }

# ---- the launch floor and the timelines (SKIP_TL=1 skips both)
[[ -z ${SKIP_TL:-} ]] && nvcc -O3 -arch=sm_90a -o /tmp/launch_floor bench/ab/launch_floor.cu >/tmp/lf.log 2>&1 &&
  timeout 60 /tmp/launch_floor 2>&1 | tee -a "$S"

# ---- timelines of the FastTree set, after an L2 flush (as timed) and warm
: >/tmp/lab_tl.txt
for b in $([[ -z ${SKIP_TL:-} ]] && echo old final ${PROBE_SED:+probe}); do
  bin=./build-$b/treeattn
  [[ $b == probe ]] && bin=/tmp/probe/build-probe/treeattn
  for fl in on ${WARM:+off}; do
    timeout -s KILL "$(lim 90)" $bin bench --workloads fasttree --planner auto --baseline off \
      --l2-flush $fl --timeline /tmp/lab_tl_$b$fl.jsonl >/tmp/lab_tl_$b$fl.log 2>&1 ||
      note "timeline $b $fl: rc=$?"
    sed "s/^{/{\"build\": \"$b\", \"l2_flush\": \"$fl\", /" /tmp/lab_tl_$b$fl.jsonl >>/tmp/lab_tl.txt
  done
done
[[ -s /tmp/lab_tl.txt ]] && gzip -c /tmp/lab_tl.txt >"$OUT/timelines.jsonl.gz"
python3 - /tmp/lab_tl.txt <<'PY' | tee -a "$S"
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
by = {}
for r in rows:
    by.setdefault(r["workload"], {})[r["build"] + ("" if r["l2_flush"] == "on" else "-warm")] = r
print("timeline, FastTree lines with event < 25 us (old, or new where the old CLI has no "
      "timeline): event us / median CTA's item, chain, compute, epilogue")
for w, d in by.items():
    ref = d.get("old") or d.get("final")
    if ref is None or ref["event_us"] >= 25:
        continue
    parts = []
    for b in ("old", "final", "probe", "old-warm", "final-warm", "probe-warm"):
        if b in d:
            c = d[b].get("median", {})
            parts.append(f"{b} {d[b]['event_us']:.2f} ({c.get('item_us', -1):.2f} "
                         f"{c.get('chain_us', -1):.2f} {c.get('compute_us', -1):.2f} "
                         f"{c.get('epilogue_us', -1):.2f})")
    print(f"  {w[:40]:40s} " + " | ".join(parts))
PY

# ---- old against new, every set
rest=$(left)
if [[ -n ${SKIP_AB:-} ]]; then
  note "A/B skipped (SKIP_AB)"
elif ((rest > 200)); then
  OUT=$OUT/ab NEW=build-final DEADLINE=$((rest - 5)) bash bench/ab/cost_ab.sh >/tmp/lab_ab.log 2>&1
  note "cost_ab: rc=$?"
  grep "^set=" "$OUT/ab/summary.txt" | tee -a "$S"
else
  note "no time left for the A/B ($rest s)"
fi
# ---- lines outside the sets (EXTRA_LINES, ';'-separated level specs): old then new, same call
if [[ -n ${EXTRA_LINES:-} ]]; then
  IFS=';' read -ra extra <<<"$EXTRA_LINES"
  for lv in "${extra[@]}"; do
    for b in old final; do
      rm -f /tmp/lab_x.json
      timeout -s KILL "$(lim 40)" ./build-$b/treeattn bench --levels "$lv" --planner auto \
        --baseline off --json /tmp/lab_x.json >/dev/null 2>&1
      t=$(python3 -c "import json; r=json.load(open('/tmp/lab_x.json'))['results'][0]; print(f\"{r['median_ms']*1e3:.1f}\")" 2>/dev/null)
      note "extra $b: $lv: ${t:-?} us"
    done
  done
fi
note "done in $(($(date +%s) - T0)) s"
