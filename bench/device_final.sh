#!/usr/bin/env bash
# Device script of a results run: build, GPU tests, memcheck + racecheck, treeattn bench (auto on
# the FastTree and PAT sets, query on the FastTree set), then the peers named in PEERS
# ("ft": FastTree/DeFT artifact kernels on both sets; "fi": FlashInfer) in the same call.
# Needs `peers` (a copy of ../shared/peers) carried along, and build-devdeps/googletest.
set -uo pipefail
SAN_TIMEOUT=${SAN_TIMEOUT:-100} STAGES=${STAGES:-"build tests sanitize bench"} BENCH_SETS="fasttree pat" \
  BENCH_PLANNER=auto bash bench/run_device.sh > $OUT/run_device.txt 2>&1
rm -f $OUT/build.log
timeout 120 build-dev/treeattn bench --workloads fasttree --planner query --runs 50 \
  --json $OUT/bench_query.json > /tmp/bench_query.log 2>&1; echo "bench query rc=$?" >> $OUT/summary.txt
if [[ " ${PEERS:-ft} " == *" ft "* ]]; then
  t0=$(date +%s)
  python3 peers/fasttree_peer.py --configs artifact --json $OUT/ft.json > /tmp/ft.log 2>&1
  echo "ft artifact rc=$? $(( $(date +%s) - t0 )) s" >> $OUT/summary.txt
  python3 peers/fasttree_peer.py --workload-file data/workloads/pat.txt --peers fasttree,ftdeft \
    --json $OUT/ft_pat.json > /tmp/ft_pat.log 2>&1
  echo "ft pat rc=$? $(( $(date +%s) - t0 )) s" >> $OUT/summary.txt
fi
if [[ " ${PEERS:-ft} " == *" fi "* ]]; then
  t0=$(date +%s)
  python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site peers/wheels/*.whl > /tmp/pip.log 2>&1
  PYTHONPATH=/tmp/site python3 peers/flashinfer_peer.py \
    --workload-file data/workloads/fasttree.txt data/workloads/pat.txt \
    --variants decode_tc,decode_cc,cascade_auto,cascade_fa2,prefill_fa2 \
    --time-budget-s ${FI_BUDGET:-330} --json $OUT/fi.json > /tmp/fi.log 2>&1
  echo "flashinfer rc=$? $(( $(date +%s) - t0 )) s" >> $OUT/summary.txt
  tail -3 /tmp/fi.log >> $OUT/summary.txt
fi
cat $OUT/summary.txt
