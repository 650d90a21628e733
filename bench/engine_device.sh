#!/usr/bin/env bash
# The engine's GPU run (repository root, on the H100 device): pip-installs treeattn with the CUDA
# kernels (sm_90a), runs the GPU engine tests (and the HF transformers logits check), then
# `treeattn-engine bench` for W0-W6 with every backend, and writes into $OUT:
#   build.log, pytest_engine.log, bench.log, engine_bench.json, engine_bench.png, summary.txt
# The bench table prints last. Budget: about 6 minutes in all (the bench gets what the build and
# the tests leave, and skips the runs that no longer fit; its JSON says which).
#
# Carried folders (optional; ignored by git):
#   .whl/         wheels for what the device may lack: nanobind, scikit-build-core (build),
#                 matplotlib and its deps (PNG), safetensors. Made on a CPU machine with
#                 pip download -d .whl --only-binary=:all: --python-version 3.12 \
#                   --platform manylinux2014_x86_64 --platform manylinux_2_28_x86_64 \
#                   nanobind scikit-build-core matplotlib safetensors   (then drop numpy)
#                 Only the wheels whose module is not importable are installed (/tmp/site).
#   peers/wheels/ flashinfer + apache-tvm-ffi (../shared/peers/wheels): the flashinfer backend.
#                 FlashInfer JIT-compiles its decode module on first use (cached in /tmp).
# Layers: the full 32 by default. If the build and tests leave too little time, the bench skips
# the last workloads (see "skipped" in the JSON): then run again with SKIP_TESTS=1, or LAYERS=16
# (every layer has the 8B shape, so attention's share of a step and the backend ratios stay the
# same; absolute tokens/s double and host planning's share is overstated).
# Env knobs [defaults]: LAYERS [32: the full Llama-3-8B], DTYPE [bf16], WORKLOADS [W1,W0,...,W6],
#   BACKENDS [treeattn,treeattn-query,flashinfer,none,sdpa], SDPA_STEPS [16],
#   TOTAL_BUDGET_S [340], SKIP_TESTS [0], PIP_EXTRA [], TEST_TIMEOUT [170],
#   PYTEST_FILES [tests/python/test_engine_gpu.py: the GPU tests run before the bench],
#   W1_SWEEP [0; 1 appends the issue's other W1 sizes: n=16/32, prompt 1k/8k, run if time is left].
set -uo pipefail
OUT=${OUT:-/tmp/engine_out}
mkdir -p "$OUT"
PY=${PYTHON:-python3}
LAYERS=${LAYERS:-32}
DTYPE=${DTYPE:-bf16}
WORKLOADS=${WORKLOADS:-W1,W0,W2,W3,W4,W5,W6}
BACKENDS=${BACKENDS:-treeattn,treeattn-query,flashinfer,none,sdpa}
SDPA_STEPS=${SDPA_STEPS:-16}
if [ "${W1_SWEEP:-0}" = 1 ]; then
  WORKLOADS="$(echo "$WORKLOADS" | tr ',' ';');W1@n=16;W1@n=32;W1@prompt=1024;W1@prompt=8192"
fi
TOTAL_BUDGET_S=${TOTAL_BUDGET_S:-340}
export CMAKE_BUILD_PARALLEL_LEVEL=${CMAKE_BUILD_PARALLEL_LEVEL:-16}
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1  # the HF check reads a checkpoint the test writes
export FLASHINFER_WORKSPACE_BASE=${FLASHINFER_WORKSPACE_BASE:-/tmp/flashinfer_engine_jit}
export FLASHINFER_CUDA_ARCH_LIST=${FLASHINFER_CUDA_ARCH_LIST:-9.0a}
SUMMARY="$OUT/summary.txt"
: >"$SUMMARY"
note() { echo "$*" | tee -a "$SUMMARY"; }
start=$SECONDS

note "gpu: $(nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>&1)"

# ---- wheels the device may lack
mkdir -p /tmp/site
export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}
if [ -d .whl ]; then
  "$PY" - <<'EOF'
import glob, importlib.util, os, subprocess, sys
mods = {"scikit_build_core": "scikit_build_core", "python_dateutil": "dateutil",
        "fonttools": "fontTools", "pillow": "PIL"}
need = []
for w in sorted(glob.glob(".whl/*.whl")):
    dist = os.path.basename(w).split("-")[0].lower()
    if importlib.util.find_spec(mods.get(dist, dist)) is None:
        need.append(w)
print("wheels to install:", [os.path.basename(w) for w in need] or "none")
if need:
    subprocess.call([sys.executable, "-m", "pip", "install", "-q", "--no-index", "--no-deps",
                     "--no-compile", "--target", "/tmp/site", *need])
EOF
fi
if ls peers/wheels/*.whl >/dev/null 2>&1 && ! "$PY" -c 'import flashinfer' 2>/dev/null; then
  "$PY" -m pip install -q --no-index --no-deps --no-compile --target /tmp/site peers/wheels/*.whl
fi
"$PY" -c 'import torch, sys; print("torch", torch.__version__, "cuda", torch.version.cuda)'
"$PY" -c 'import flashinfer; print("flashinfer", flashinfer.__version__)' 2>&1 | tail -n 1

# ---- FlashInfer JIT (its tensor-core decode module, bf16/fp16, head_dim 128) in the background,
# while treeattn builds; the engine's flashinfer backend uses exactly this variant
if [[ ",$BACKENDS," == *",flashinfer,"* ]] && "$PY" -c 'import flashinfer' 2>/dev/null; then
  DT=$([ "$DTYPE" = fp16 ] && echo float16 || echo bfloat16)
  timeout 240 "$PY" - "$DT" >"$OUT/flashinfer_jit.log" 2>&1 <<'EOF' &
import sys, time, torch, flashinfer
t = time.time()
dt = getattr(torch, sys.argv[1])
ws = torch.zeros(64 << 20, dtype=torch.uint8, device="cuda")
w = flashinfer.BatchDecodeWithPagedKVCacheWrapper(ws, "NHD", use_tensor_cores=True)
i32 = lambda x: torch.tensor(x, dtype=torch.int32, device="cuda")
w.plan(i32([0, 2, 3]), i32([0, 1, 2]), i32([16, 5]), 32, 8, 128, 16, pos_encoding_mode="NONE",
       q_data_type=dt, kv_data_type=dt)
k = torch.randn(3, 16, 8, 128, dtype=dt, device="cuda")
w.run(torch.randn(2, 32, 128, dtype=dt, device="cuda"), (k, k.clone()))
torch.cuda.synchronize()
print(f"flashinfer JIT warm-up done in {time.time() - t:.0f} s")
EOF
  fi_pid=$!
fi

# ---- build + install treeattn with the CUDA kernels (Hopper only)
t0=$SECONDS
"$PY" -m pip install --no-build-isolation --no-deps -v . \
  -C cmake.define.TREEATTN_CUDA_ARCHS=90a \
  -C build-dir=${TREEATTN_PY_BUILD_DIR:-/tmp/treeattn-build-py} ${PIP_EXTRA:-} >"$OUT/build.log" 2>&1
rc=$?
note "build: rc=$rc in $((SECONDS - t0)) s"
if [ $rc -ne 0 ]; then tail -n 30 "$OUT/build.log"; exit $rc; fi
(cd /tmp && "$PY" -c 'import treeattn; print("treeattn built_with_cuda", treeattn.built_with_cuda)')

if [ -n "${fi_pid:-}" ]; then
  t0=$SECONDS; wait $fi_pid; note "flashinfer warm-up: rc=$? (waited $((SECONDS - t0)) s): $(tail -n 1 "$OUT/flashinfer_jit.log")"
fi

# ---- engine tests: the GPU ones, and the HF transformers comparison (CI has no transformers;
# the other CPU tests run in CI)
if [ "${SKIP_TESTS:-0}" != 1 ]; then
  t0=$SECONDS
  timeout ${TEST_TIMEOUT:-170} "$PY" -m pytest ${PYTEST_FILES:-tests/python/test_engine_gpu.py} \
    tests/python/test_engine.py::test_hf_transformers_logits -q -rs \
    -p no:cacheprovider >"$OUT/pytest_engine.log" 2>&1
  rc=$?
  note "pytest engine: rc=$rc in $((SECONDS - t0)) s: $(grep -E '(passed|failed|error)' "$OUT/pytest_engine.log" | tail -n 1)"
  grep -E "^(FAILED|ERROR)" "$OUT/pytest_engine.log" | head -n 20 | tee -a "$SUMMARY"
fi

# ---- bench with what is left
left=$((TOTAL_BUDGET_S - (SECONDS - start)))
budget=$((left - 45))
[ $budget -lt 40 ] && budget=40
t0=$SECONDS
timeout $((budget + 100)) "$PY" -m treeattn.engine.cli bench --model llama3-8b --layers "$LAYERS" \
  --dtype "$DTYPE" --workloads "$WORKLOADS" --backends "$BACKENDS" --sdpa-steps "$SDPA_STEPS" \
  --time-budget "$budget" --json "$OUT/engine_bench.json" --png "$OUT/engine_bench.png" \
  >"$OUT/bench.log" 2>&1
rc=$?
note "bench: rc=$rc in $((SECONDS - t0)) s (budget ${budget}s, layers $LAYERS, $DTYPE)"
command -v treeattn-engine >/dev/null && note "console script: $(command -v treeattn-engine)"
grep -E "Error|error" "$OUT/bench.log" | grep -v "^|" | head -n 10
echo "================ SUMMARY (total $((SECONDS - start)) s) ================"
cat "$SUMMARY"
grep -E "^\||^tree per step" "$OUT/bench.log"
