#!/usr/bin/env bash
# Same-call A/B of two builds' `auto` plans on the device: the working tree (build-final) against
# an older tree carried under ab-old/ (e.g. `git archive REV | tar -x -C ab-old`, with ab-old/ in
# .git/info/exclude and named in carry), both CLIs built at once; then treeattn bench --planner
# auto on the FastTree, PAT and irregular sets and the named lines, old then new per set, each
# ratio within this call. For a cost-model or planner change the plans differ and the kernels are
# the same; for a kernel change the plans are the same. Listed per set: every line whose plan
# changed or whose time moved by more than 3%. The whole call stays under DEADLINE [420] s.
# Files back: summary.txt, bench_old.json, bench_new.json. NEW=DIR takes the new CLI from DIR (e.g.
# build-final after bench/device_final.sh built it in the same call) instead of building it again.
#   OUT=... bash bench/ab/cost_ab.sh     (repository root, on the device)
set -u
source bench/ab/common.sh
ab_start /tmp/cost_ab 420
gpu_note
[[ -f ab-old/CMakeLists.txt ]] || { note "no ab-old/ tree"; exit 1; }
if [[ -n ${NEW:-} && -x ${NEW}/treeattn ]]; then
  rm -rf build-new && ln -s "$NEW" build-new
  ab_build ab-old build-old
else
  ab_build . build-new & ab_build ab-old build-old & wait
fi
for b in build-new build-old; do
  [[ -x $b/treeattn ]] || { note "$b failed"; tail -20 $b.log >>"$S"; exit 1; }
done
note "builds: $(($(date +%s) - T0)) s"
rm -rf /tmp/cab && mkdir -p /tmp/cab/old /tmp/cab/new
run() {  # which, json name, bench args...
  local w=$1 j=$2
  shift 2
  timeout -s KILL "$(lim 100)" ./build-$w/treeattn bench --planner auto "$@" --json /tmp/cab/$w/$j.json \
    >>/tmp/cab/$w.log 2>&1 || note "$w $j: rc=$?"
}
for s in fasttree pat irregular; do
  run old $s --workloads $s
  run new $s --workloads $s
done
i=0
for lv in "N=1,1024 C=32768,16 heads=32/8" "N=1,1024 C=2048,32 heads=32/8 page=32" \
          "N=1,4,16,512 C=1024,256,128,32 heads=64/8 page=32" "N=1,16,256 C=8192,512,64 heads=32/8" \
          "N=1,64 C=4096,64 heads=32/8"; do
  run old named$i --levels "$lv"
  run new named$i --levels "$lv"
  i=$((i + 1))
done
note "check failures: old $(grep -c 'CHECK FAILED' /tmp/cab/old.log) new $(grep -c 'CHECK FAILED' /tmp/cab/new.log)"
python3 bench/merge_bench_json.py "$OUT/bench_old.json" /tmp/cab/old/*.json >/dev/null
python3 bench/merge_bench_json.py "$OUT/bench_new.json" /tmp/cab/new/*.json >/dev/null
python3 - "$OUT/bench_old.json" "$OUT/bench_new.json" <<'PY' | tee -a "$S"
import json, math, sys
def load(p):
    return {(r["set"], r["workload"]): r for r in json.load(open(p))["results"]}
old, new = load(sys.argv[1]), load(sys.argv[2])
gm = lambda v: math.exp(sum(map(math.log, v)) / len(v)) if v else float("nan")
for s in sorted({k[0] for k in new}):
    ks = [k for k in new if k[0] == s and k in old]
    fo = gm([old[k]["floor_ms"] / old[k]["median_ms"] for k in ks])
    fn = gm([new[k]["floor_ms"] / new[k]["median_ms"] for k in ks])
    r = [old[k]["median_ms"] / new[k]["median_ms"] for k in ks]
    print(f"set={s or 'named'}: {len(ks)} lines; floor fraction old {fo:.1%} new {fn:.1%}; "
          f"old/new time geomean {gm(r):.3f}, min {min(r):.3f}, max {max(r):.3f}; "
          f"changed plans {sum(old[k]['items'] != new[k]['items'] or old[k]['kv_bytes_read'] != new[k]['kv_bytes_read'] for k in ks)}")
    for k in ks:
        changed = old[k]["items"] != new[k]["items"] or old[k]["kv_bytes_read"] != new[k]["kv_bytes_read"]
        ratio = old[k]["median_ms"] / new[k]["median_ms"]
        if changed or abs(ratio - 1) > 0.03:
            print(f"  {k[1][:60]:60s} old {old[k]['median_ms']*1e3:8.1f} us new "
                  f"{new[k]['median_ms']*1e3:8.1f} us ({ratio:.3f}x){' plan changed' if changed else ''}")
PY
note "done in $(($(date +%s) - T0)) s"
