#!/usr/bin/env bash
# ncu of every kernel of one `auto` call on each line of LINES (below by default: the named lines
# issue 22 misses, and a latency-bound PAT and FastTree line), for the closing analysis of a
# missed target: per kernel its grid, duration, SM / memory / DRAM / L2 throughput, achieved
# occupancy and tensor-pipe utilization. ncu serializes the kernels (no PDL overlap) and flushes
# the caches before each, so the durations are each kernel alone; the bench's time of the whole
# call is printed beside them. `treeattn bench --baseline off` runs only auto's plan, so the first
# decode kernels are its checked call. Each line's profile is killed after 75 s.
# Files back: explain.txt.
#   OUT=... bash bench/ab/explain_lines.sh     (repository root, on the device; needs build-final)
set -u
OUT=${OUT:-/tmp/explain}
mkdir -p "$OUT"
R="$OUT/explain.txt"
: >"$R"
B=${BUILD:-build-final}
tensor=$(ncu --query-metrics --chip gh100 2>/dev/null | grep -oE "^sm__pipe_tensor_op_[a-z0-9_]*cycles_active" |
  sort -u | sed 's/$/.avg.pct_of_peak_sustained_active/' | paste -sd, -)
metrics="gpu__time_duration.sum,sm__throughput.avg.pct_of_peak_sustained_elapsed,\
gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed,\
dram__throughput.avg.pct_of_peak_sustained_elapsed,lts__t_sectors.avg.pct_of_peak_sustained_elapsed,\
sm__warps_active.avg.pct_of_peak_sustained_active,launch__grid_size,launch__block_size,\
dram__bytes_read.sum${tensor:+,$tensor}"
if [[ -n ${LINES:-} ]]; then
  mapfile -t lines <<<"$LINES"
else
  lines=("N=1,1024 C=2048,32 heads=32/8 page=32" "N=1,64 C=4096,64 heads=32/8"
    "N=1,1024 C=32768,16 heads=32/8" "N=1,10 C=4096,416 heads=32/8 page=32"
    "N=1,4,8,256 C=8,256,256,32 heads=16/1")
fi
for lv in "${lines[@]}"; do
  echo "===== $lv" >>"$R"
  timeout -s KILL 75 ncu -k regex:decode_ -c "${KERNELS:-5}" --metrics "$metrics" --csv \
    ./$B/treeattn bench --levels "$lv" --planner auto --baseline off --runs 50 >/tmp/ex.csv 2>/tmp/ex.err
  echo "rc=$?" >>"$R"
  python3 - /tmp/ex.csv >>"$R" <<'PY'
import csv, sys, collections
rows = [r for r in csv.reader(open(sys.argv[1])) if len(r) > 10]
if not rows: sys.exit()
hdr = rows[0]; idx = {h: i for i, h in enumerate(hdr)}
k = collections.OrderedDict()
for r in rows[1:]:
    if r[idx["ID"]] == "ID": continue
    key = (r[idx["ID"]], r[idx["Kernel Name"]][:60])
    k.setdefault(key, {})[r[idx["Metric Name"]]] = (r[idx["Metric Value"]], r[idx["Metric Unit"]])
for (i, name), m in k.items():
    print(f"  [{i}] {name}")
    print("      " + "; ".join(f"{n.split('.')[0].split('__')[-1]}={v}{u if u != '%' else '%'}"
                              for n, (v, u) in sorted(m.items())))
PY
  grep -E "^N=|auto " /tmp/ex.csv | grep -v "==" | tail -2 >>"$R" || true
done
cat "$R"
