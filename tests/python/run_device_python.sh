#!/usr/bin/env bash
# Runs the Python package on the GPU machine: pip-installs treeattn from this checkout (full
# kernel set, sm_90a, no build isolation: nanobind and scikit-build-core come from the image),
# runs pytest (GPU tests included) and bench/peers.py, and leaves under $OUT:
#   build.log, pytest.log, peers.md, peers.log
# Prints a short summary last. Exit code: the build's if it failed, else pytest's.
# Usage (repo root, on the device): bash tests/python/run_device_python.sh
# Budget: about 8 minutes in all (the bench gets what the build and tests leave).
set -x
set -o pipefail
OUT="${OUT:-/tmp/treeattn-out}"
mkdir -p "$OUT"
export CMAKE_BUILD_PARALLEL_LEVEL="${CMAKE_BUILD_PARALLEL_LEVEL:-16}"
export XLA_PYTHON_CLIENT_PREALLOCATE=false  # JAX test shares the GPU with torch
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1
PY="${PYTHON:-python3}"
TOTAL_BUDGET="${TREEATTN_DEVICE_BUDGET_S:-470}"
start=$SECONDS

nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader || true
"$PY" -c 'import torch, nanobind, scikit_build_core as s; print("torch", torch.__version__, "cuda", torch.version.cuda, "nanobind", nanobind.__version__, "skbuild", s.__version__)' || true

# ---- build + install (full kernel set for Hopper)
"$PY" -m pip install --no-build-isolation --no-deps -v . \
  -C cmake.define.TREEATTN_CUDA_ARCHS=90a \
  -C build-dir=${TREEATTN_PY_BUILD_DIR:-/tmp/treeattn-build-py} ${PIP_EXTRA:-} >"$OUT/build.log" 2>&1
build_rc=$?
build_s=$((SECONDS - start))
tail -n 25 "$OUT/build.log"
if [ "$build_rc" -ne 0 ]; then
  echo "SUMMARY: pip install FAILED (rc=$build_rc) after ${build_s}s; see build.log"
  exit "$build_rc"
fi
cd /tmp && "$PY" -c 'import treeattn; print("built_with_cuda", treeattn.built_with_cuda)'; cd - >/dev/null

# ---- tests (CPU + GPU); per-test timeout so a hang cannot eat the budget
test_start=$SECONDS
timeout 300 "$PY" -m pytest tests/python -q -rs -p no:cacheprovider \
  -o addopts="" --timeout=120 >"$OUT/pytest.log" 2>&1
pytest_rc=$?
if grep -q "unrecognized arguments: --timeout" "$OUT/pytest.log"; then  # no pytest-timeout
  timeout 300 "$PY" -m pytest tests/python -q -rs -p no:cacheprovider >"$OUT/pytest.log" 2>&1
  pytest_rc=$?
fi
test_s=$((SECONDS - test_start))
tail -n 40 "$OUT/pytest.log"

# ---- peers benchmark with what is left of the budget
left=$((TOTAL_BUDGET - (SECONDS - start)))
bench_budget=$((left - 60))
[ "$bench_budget" -lt 30 ] && bench_budget=30
bench_start=$SECONDS
timeout $((bench_budget + 90)) "$PY" bench/peers.py --out "$OUT/peers.md" \
  --time-budget "$bench_budget" >"$OUT/peers.log" 2>&1
bench_rc=$?
bench_s=$((SECONDS - bench_start))
tail -n 5 "$OUT/peers.log"

set +x
echo "================ SUMMARY ================"
echo "build: rc=$build_rc in ${build_s}s"
echo "pytest: rc=$pytest_rc in ${test_s}s: $(grep -E '(passed|failed|error)' "$OUT/pytest.log" | tail -n 1)"
grep -E "^(FAILED|ERROR)" "$OUT/pytest.log" | head -n 20
echo "peers: rc=$bench_rc in ${bench_s}s: $(grep -c '^| ' "$OUT/peers.md" 2>/dev/null) table lines"
grep -E "^- |^Not run" "$OUT/peers.md" 2>/dev/null
echo "total ${SECONDS}s; files in $OUT: $(ls "$OUT" | tr '\n' ' ')"
exit "$pytest_rc"
