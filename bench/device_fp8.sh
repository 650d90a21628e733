#!/usr/bin/env bash
# fp8 KV cache on the GPU (issue 24), one device call of about 6 minutes, repository root. The
# caller has already built and pip-installed treeattn with the CUDA kernels and its fp8 API (e.g.
# bench/device_session.sh's step 1); this script only runs, and writes into $OUT:
#   1. fp8_peers.md / fp8_peers.json: bench/peers.py --fp8: per workload line (the no-sharing
#      lines N=256 C=4096 and N=512 C=1024 heads=32/8, then the PAT set) the fp8 floor, treeattn
#      fp16, treeattn fp8, FlashInfer's fp8 paged decode (best of CUDA / tensor cores), ratios;
#   2. engine_fp8.json / engine_fp8.log: treeattn-engine bench W1 (Llama-3-8B shape, 32 layers,
#      bf16, CUDA graphs) with the treeattn and flashinfer backends on bf16 and fp8_e4m3 KV:
#      tokens/s, and the logits drift of fp8 against bf16 KV (--drift: max / mean abs logit
#      difference, greedy-token agreement, KL) over DRIFT_STEPS teacher-forced decode steps;
#   3. pytest_fp8.log: the engine's fp8 GPU tests (tests/python/test_engine_gpu.py -k fp8);
#   summary.txt (printed last).
# FlashInfer: peers/wheels-fp8/ (FlashInfer 0.7.2 with its fp8 decode modules prebuilt for
# sm_90a, see its README; carry it) when present, else peers/wheels/ (then FlashInfer JIT-compiles
# four modules on first use, a few minutes: warmed up in the background at the start, and the
# peer table reports the first-call time of its two).
# Env knobs [defaults]: PEERS_BUDGET_S [140], ENGINE_BUDGET_S [90], TEST_TIMEOUT [100],
#   LAYERS [32], DRIFT_STEPS [16], KV [fp8_e4m3], SKIP_PEERS / SKIP_ENGINE / SKIP_TESTS [0].
set -uo pipefail
OUT=${OUT:-/tmp/fp8_out}
mkdir -p "$OUT"
PY=${PYTHON:-python3}
KV=${KV:-fp8_e4m3}
SUMMARY="$OUT/summary.txt"
: >"$SUMMARY"
note() { echo "$*" | tee -a "$SUMMARY"; }
T0=$SECONDS
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 HF_HUB_OFFLINE=1
export FLASHINFER_WORKSPACE_BASE=${FLASHINFER_WORKSPACE_BASE:-/tmp/flashinfer_fp8_jit}
export FLASHINFER_CUDA_ARCH_LIST=${FLASHINFER_CUDA_ARCH_LIST:-9.0a}
mkdir -p /tmp/site
export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}

note "gpu: $(nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>&1)"
(cd /tmp && "$PY" -c 'import treeattn, inspect; print("treeattn", treeattn.__file__, "cuda",
treeattn.built_with_cuda, "fp8 api", "kv_dtype" in inspect.signature(treeattn.plan).parameters)') \
  2>&1 | tee -a "$SUMMARY"

# ---- FlashInfer (prebuilt fp8 modules when peers/wheels-fp8 is here)
WHEELS=peers/wheels
ls peers/wheels-fp8/*.whl >/dev/null 2>&1 && WHEELS=peers/wheels-fp8
if [ $WHEELS = peers/wheels-fp8 ]; then  # over any FlashInfer without the prebuilt modules
  "$PY" -m pip install -q --upgrade --no-index --no-deps --no-compile --target /tmp/site \
    $WHEELS/*.whl
elif ! "$PY" -c 'import flashinfer' 2>/dev/null && ls $WHEELS/*.whl >/dev/null 2>&1; then
  "$PY" -m pip install -q --no-index --no-deps --no-compile --target /tmp/site $WHEELS/*.whl
fi
note "flashinfer: $("$PY" -c 'import flashinfer; print(flashinfer.__version__)' 2>&1 | tail -n 1) from $WHEELS"

# the engine's FlashInfer modules (bf16 q; bf16 and fp8 KV, tensor cores) while the peers run:
# instant when prebuilt
"$PY" - "$KV" >"$OUT/flashinfer_warmup.log" 2>&1 <<'EOF' &
import sys, time, torch, flashinfer
kv = {"fp8_e4m3": torch.float8_e4m3fn, "fp8_e5m2": torch.float8_e5m2}[sys.argv[1]]
ws = torch.zeros(64 << 20, dtype=torch.uint8, device="cuda")
i32 = lambda x: torch.tensor(x, dtype=torch.int32, device="cuda")
for kvt in (torch.bfloat16, kv):
    t = time.time()
    w = flashinfer.BatchDecodeWithPagedKVCacheWrapper(ws, "NHD", use_tensor_cores=True)
    w.plan(i32([0, 2, 3]), i32([0, 1, 2]), i32([16, 5]), 32, 8, 128, 16, pos_encoding_mode="NONE",
           q_data_type=torch.bfloat16, kv_data_type=kvt)
    k = torch.randn(3, 16, 8, 128, device="cuda").to(kvt)
    w.run(torch.randn(2, 32, 128, dtype=torch.bfloat16, device="cuda"), (k, k.clone()))
    torch.cuda.synchronize()
    print(f"flashinfer bf16 q, {kvt} KV (tensor cores): first call {time.time() - t:.1f} s")
EOF
warm_pid=$!

# ---- 1. the fp8 peer table
if [ "${SKIP_PEERS:-0}" != 1 ]; then
  t0=$SECONDS
  timeout $((${PEERS_BUDGET_S:-140} + 60)) "$PY" bench/peers.py --fp8 --kv-dtype "$KV" \
    --time-budget "${PEERS_BUDGET_S:-140}" --out "$OUT/fp8_peers.md" --json "$OUT/fp8_peers.json" \
    >"$OUT/fp8_peers.log" 2>&1
  note "peers fp8: rc=$? in $((SECONDS - t0)) s"
  grep -E "^ceilings|first calls" "$OUT/fp8_peers.log" | tee -a "$SUMMARY"
  sed -n '/^Per set/,$p' "$OUT/fp8_peers.md" 2>/dev/null | tee -a "$SUMMARY"
fi
wait $warm_pid
note "flashinfer warm-up: rc=$? $(tr '\n' ';' <"$OUT/flashinfer_warmup.log" | tail -c 300)"

# ---- 2. engine W1: bf16 vs fp8 KV, treeattn and FlashInfer, tokens/s and logits drift
if [ "${SKIP_ENGINE:-0}" != 1 ]; then
  t0=$SECONDS
  budget=${ENGINE_BUDGET_S:-90}
  timeout $((budget + 90)) "$PY" -m treeattn.engine.cli bench --model llama3-8b \
    --layers "${LAYERS:-32}" --dtype bf16 --workloads W1 --backends treeattn,flashinfer \
    --kv-dtype "auto,$KV" --drift --drift-steps "${DRIFT_STEPS:-16}" --time-budget "$budget" \
    --no-progress --json "$OUT/engine_fp8.json" >"$OUT/engine_fp8.log" 2>&1
  note "engine W1 fp8: rc=$? in $((SECONDS - t0)) s"
  grep -E "^\||^logits drift" "$OUT/engine_fp8.log" | tee -a "$SUMMARY"
  grep -E "Error" "$OUT/engine_fp8.log" | grep -v "^|" | head -n 5 | tee -a "$SUMMARY"
fi

# ---- 3. the engine's fp8 GPU tests
if [ "${SKIP_TESTS:-0}" != 1 ]; then
  t0=$SECONDS
  timeout "${TEST_TIMEOUT:-100}" "$PY" -m pytest tests/python/test_engine_gpu.py -k fp8 -q -rs \
    -p no:cacheprovider >"$OUT/pytest_fp8.log" 2>&1
  note "pytest engine fp8: rc=$? in $((SECONDS - t0)) s: $(grep -E '(passed|failed|error)' "$OUT/pytest_fp8.log" | tail -n 1)"
  grep -E "^(FAILED|ERROR)" "$OUT/pytest_fp8.log" | head -n 20 | tee -a "$SUMMARY"
fi

note "total: $((SECONDS - T0)) s"
echo "================ SUMMARY ================"
cat "$SUMMARY"
