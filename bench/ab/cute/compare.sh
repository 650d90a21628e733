#!/usr/bin/env bash
# The CuTe experiment of issue 22 item 3, on a CPU machine with nvcc (no GPU needed):
#   1. layout_check.cu: CuTe's GMMA shared-memory layouts address every element of Q, K and V
#      where the producer writes it (both tile configs, head dims 64 and 128);
#   2. the warp-specialized kernel's instantiations of ws_inst.cu compiled twice for sm_90a, with
#      the PTX wrappers of wgmma.cuh and with the consumer MMAs in CuTe
#      (bench/wip/ws-cute-mma.patch applied to a copy of src/), timed;
#   3. per kernel: registers, spills, static instruction counts, the HGMMA instructions of both
#      (equal or not), and the instructions between the first and the last HGMMA.
# Needs the CUTLASS headers of the pinned nvidia-cutlass wheel: CUTLASS_INCLUDE=DIR, or the script
# installs nvidia-cutlass==4.2.0.0 with pip --target into the work directory; and cuobjdump
# (CUOBJDUMP=PATH, else from PATH).
#   bash bench/ab/cute/compare.sh [WORK_DIR]
set -euo pipefail
cd "$(dirname "$0")/../../.."
WORK=${1:-$(mktemp -d)}
mkdir -p "$WORK"
if [ -z "${CUTLASS_INCLUDE:-}" ]; then
  python3 -m pip install -q --no-deps --target "$WORK/cutlass" nvidia-cutlass==4.2.0.0
  CUTLASS_INCLUDE=$WORK/cutlass/cutlass_library/source/include
fi
CUOBJDUMP=${CUOBJDUMP:-cuobjdump}
FLAGS=(-DTREEATTN_WITH_CUDA=1 -O3 --generate-code=arch=compute_90a,code=sm_90a
  --expt-relaxed-constexpr -std=c++17 -Xptxas=-v,-warn-spills)

echo "== layout check"
nvcc -std=c++17 -I"$CUTLASS_INCLUDE" -x cu bench/ab/cute/layout_check.cu -o "$WORK/layout_check"
"$WORK/layout_check"

echo "== compile (sm_90a)"
rm -rf "$WORK/tree" && mkdir -p "$WORK/tree/bench/ab" && cp -r include src "$WORK/tree/"
cp -r bench/ab/cute "$WORK/tree/bench/ab/"
(cd "$WORK/tree" && git apply --unidiff-zero "$OLDPWD/bench/wip/ws-cute-mma.patch")
t0=$(date +%s.%N)
nvcc "${FLAGS[@]}" -Iinclude -cubin bench/ab/cute/ws_inst.cu -o "$WORK/ptx.cubin" >"$WORK/ptx.log" 2>&1
t1=$(date +%s.%N)
(cd "$WORK/tree" && nvcc "${FLAGS[@]}" -Iinclude -I"$CUTLASS_INCLUDE" -DTREEATTN_WS_CUTE -cubin \
  bench/ab/cute/ws_inst.cu -o "$WORK/cute.cubin") >"$WORK/cute.log" 2>&1
t2=$(date +%s.%N)
echo "compile time: PTX wrappers $(echo "$t1 - $t0" | bc) s, CuTe $(echo "$t2 - $t1" | bc) s"
for v in ptx cute; do
  echo "$v: $(grep -c 'Used 168 registers' "$WORK/$v.log") kernels at 168 registers," \
    "spills: $(grep -o '[0-9]* bytes spill stores' "$WORK/$v.log" | sort -u | tr '\n' ' ')," \
    "ptxas warnings: $(grep -c 'warning' "$WORK/$v.log" || true)"
  "$CUOBJDUMP" -sass "$WORK/$v.cubin" >"$WORK/$v.sass"
done
echo "== SASS"
python3 bench/ab/cute/sass_compare.py "$WORK/ptx.sass" "$WORK/cute.sass"
