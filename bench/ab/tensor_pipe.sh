#!/usr/bin/env bash
# ncu of the ws kM128 kernel on the compute-bound line `N=1,1024 C=32768,16 heads=32/8` (auto's
# plan, kM128 items on the ws kernel) for each build named in BUILDS [build-new build-old]: its
# duration, the tensor pipe's utilization (the sm__pipe_tensor_op_*cycles_active metrics this ncu
# knows), SM and memory throughput, L2 and DRAM throughput. Each profile is killed after 90 s.
# Files back: tensor_pipe.txt.
#   OUT=... bash bench/ab/tensor_pipe.sh     (repository root, on the device, after cost_ab.sh)
set -u
OUT=${OUT:-/tmp/tensor_pipe}
mkdir -p "$OUT"
R="$OUT/tensor_pipe.txt"
: >"$R"
LINE=${LINE:-"N=1,1024 C=32768,16 heads=32/8"}
metrics=$(ncu --query-metrics --chip gh100 2>/dev/null | grep -oE "^sm__pipe_tensor_op_[a-z0-9_]*cycles_active" |
  sort -u | sed 's/$/.avg.pct_of_peak_sustained_active/' | paste -sd, -)
for b in ${BUILDS:-build-new build-old}; do
  [[ -x $b/treeattn ]] || { echo "$b: no CLI" >>"$R"; continue; }
  timeout -s KILL 90 ncu --kernel-name-base mangled -k 'regex:decode_ws_kernel.*Li2EL' -c 1 \
    --section SpeedOfLight --section MemoryWorkloadAnalysis ${metrics:+--metrics "$metrics,lts__t_bytes.sum.per_second"} \
    -f -o "/tmp/tp_$b" ./$b/treeattn bench --levels "$LINE" --planner auto --runs 50 >"/tmp/tp_$b.log" 2>&1
  echo "===== $b ($LINE): rc=$?" >>"$R"
  [[ -f /tmp/tp_$b.ncu-rep ]] || { tail -5 "/tmp/tp_$b.log" >>"$R"; continue; }
  ncu -i "/tmp/tp_$b.ncu-rep" --page details 2>&1 |
    grep -E "Duration|Compute \(SM\) Throughput|Memory Throughput|L2 Cache Throughput|DRAM Throughput|pipe_tensor|lts__t_bytes|L2 Hit" >>"$R"
done
cat "$R"
