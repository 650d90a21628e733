#!/usr/bin/env bash
# Device A/B of the grouped kernel in the engine (repository root, about 2 minutes on an H100):
# builds the CLI and the Python package (sm_90a), times W1-like trees with legacy / ws / auto in one
# treeattn bench process (bf16), then runs the engine's W1 and W6 (treeattn backend, 32 layers,
# bf16, CUDA graphs) once per TREEATTN_GROUPED_KERNEL setting. Files: $OUT/w1_lines.json,
# $OUT/engine_{legacy,auto}.json, $OUT/summary.txt.
set -uo pipefail
OUT=${OUT:-/tmp/engine_ab}
mkdir -p "$OUT"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 HF_HUB_OFFLINE=1
S="$OUT/summary.txt"
: >"$S"
t0=$SECONDS
({ cmake -S . -B build-final -G Ninja -DTREEATTN_BENCH=OFF -DTREEATTN_TESTS=OFF \
    -DTREEATTN_CUDA_ARCHS=90a && ninja -C build-final -j8 treeattn; } >/tmp/cli_build.log 2>&1
 echo "cli build rc=$?" >>"$S") &
CMAKE_BUILD_PARALLEL_LEVEL=8 python3 -m pip install -q --no-build-isolation --no-deps . \
  -C cmake.define.TREEATTN_CUDA_ARCHS=90a -C build-dir=/tmp/treeattn-build-py >/tmp/pip.log 2>&1
echo "pip rc=$?" >>"$S"
wait
echo "builds: $((SECONDS - t0)) s" >>"$S"
i=0
for lv in "N=1,64 C=4096,16" "N=1,64 C=4096,128" "N=1,64 C=4096,256"; do
  timeout 60 ./build-final/treeattn bench --levels "$lv heads=32/8 page=16" --dtype bf16 \
    --planner auto --grouped-kernel legacy,ws,auto --json /tmp/w1_$i.json >>/tmp/w1.log 2>&1
  i=$((i + 1))
done
python3 - "$OUT/w1_lines.json" /tmp/w1_*.json >>"$S" <<'PY'
import json, sys
out, m = sys.argv[1], None
for f in sorted(sys.argv[2:]):
    d = json.load(open(f))
    if m is None: m = d
    else: m["results"] += d["results"]
json.dump(m, open(out, "w"), indent=1)
for r in m["results"]:
    print(f"{r['workload']:40s} {r['grouped_kernel']:7s} ran {r.get('grouped_run','-'):14s} "
          f"{1e3 * r['median_ms']:8.1f} us ok={r['check_ok']}")
PY
for gk in legacy auto; do
  TREEATTN_GROUPED_KERNEL=$gk timeout 120 python3 -m treeattn.engine.cli bench --model llama3-8b \
    --layers 32 --dtype bf16 --workloads W1,W6 --backends treeattn --time-budget 60 \
    --json "$OUT/engine_$gk.json" >"/tmp/engine_$gk.log" 2>&1
  echo "engine $gk rc=$?" >>"$S"
  python3 - "$OUT/engine_$gk.json" "$gk" >>"$S" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
for r in d["records"]:
    print(f"{sys.argv[2]:7s} {r['workload']} {r['decode_tok_s']:7.0f} tok/s attn {r['attn_ms_per_step']:.2f} "
          f"plan {r['plan_ms_per_step']:.2f} prefetch {r['prefetch_ms_per_step']:.2f} "
          f"meta {r['host_meta_ms_per_step']:.2f} step p50 {r['step_p50_ms']:.2f} captures {r['captures']}")
PY
done
echo "total $((SECONDS - t0)) s" >>"$S"
cat "$S"
