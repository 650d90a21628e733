#!/usr/bin/env bash
# Builds treeattn and runs every test (the README's test command; .ci/run runs it verbatim):
#   1. CMake build: core, CLI, tests, planning benchmark, and the CUDA kernels when nvcc is found
#      (compile-only without a GPU: a representative subset of kernel configs, TREEATTN_CI_KERNELS;
#      the full matrix when a GPU is present or TREEATTN_FULL_KERNELS=1);
#   2. ctest: CPU tests, CLI smoke test, GPU tests (they skip with a message without a GPU); then
#      the concurrency tests built with ThreadSanitizer (build-tsan, CPU-only, that target only);
#   3. libFuzzer smoke run of the JSON and block-table readers and of the planners (clang);
#   4. the planning-speed benchmark (short) and `treeattn check` on every workload line;
#   5. pip install . into .venv and pytest (GPU tests skip without a GPU);
#   6. the vLLM contract tests: tools/setup_vllm.sh (.venv-vllm, vllm==0.33.0, kept between runs;
#      ~11 min and ~9.4 GB the first time on 2 cores, ~3 min to rebuild treeattn into it, seconds
#      when nothing changed) and tests/integrations (~30 s). SKIP_VLLM=1 skips this step.
#      Then the SGLang contract tests: tools/setup_sglang.sh (.venv-sglang, sglang==0.5.23, kept
#      between runs; ~11 min and ~11 GB the first time on 2 cores, ~2 min to rebuild treeattn into
#      it, seconds when nothing changed) and test_sglang_contract.py (~30 s). SKIP_SGLANG=1 skips
#      them. Each engine step may remove the other engine's venv when the disk is short of the
#      ~16 GB an install takes (tools/setup_engine_venv.sh, ENGINE_VENV_EVICT).
set -euo pipefail
cd "$(dirname "$0")/.."
JOBS=${JOBS:-$(nproc)}
export CMAKE_BUILD_PARALLEL_LEVEL=$JOBS
PY=${PY:-.venv/bin/python}
[ -x "$PY" ] || { echo "test.sh: $PY missing: run tools/setup.sh first" >&2; exit 2; }

subset=ON
if nvidia-smi -L >/dev/null 2>&1 || [ "${TREEATTN_FULL_KERNELS:-0}" = 1 ]; then subset=OFF; fi

echo "== [1/6] build (TREEATTN_CI_KERNELS=$subset)"
cmake -S . -B build -DTREEATTN_CI_KERNELS=$subset >/dev/null
cmake --build build -j"$JOBS"

echo "== [2/6] ctest"
(cd build && ctest --output-on-failure -j"$JOBS" --timeout 600)
echo "== [2/6] ThreadSanitizer: concurrency tests"
cmake -S . -B build-tsan -DTREEATTN_TSAN=ON -DTREEATTN_CUDA=OFF -DTREEATTN_BENCH=OFF >/dev/null
cmake --build build-tsan -j"$JOBS" --target treeattn_concurrency_tests
TSAN_OPTIONS=halt_on_error=1 build-tsan/treeattn_concurrency_tests

echo "== [3/6] fuzz smoke"
# The core is compiled once with the sanitizers and linked into every fuzzer. Seeds: the corpus in
# git plus large generated inputs (tests/fuzz/make_seeds.py); per input at most 5 s, 2 GB of RSS
# and 1 GB per allocation; per fuzzer flags (max length) in tests/fuzz/<fuzzer>.flags.
CC=clang CXX=clang++ cmake -S . -B build-fuzz -DTREEATTN_FUZZ=ON -DTREEATTN_CUDA=OFF \
  -DTREEATTN_TESTS=OFF -DTREEATTN_BENCH=OFF >/dev/null
cmake --build build-fuzz -j"$JOBS" --target fuzzers
rm -rf build-fuzz/seeds && "$PY" tests/fuzz/make_seeds.py build-fuzz/seeds
for target in build-fuzz/fuzz_*; do
  [ -x "$target" ] || continue
  name=$(basename "$target")
  work=$(mktemp -d)
  for seeds in "tests/fuzz/corpus_${name#fuzz_}" "build-fuzz/seeds/${name#fuzz_}"; do
    if [ -d "$seeds" ]; then cp -r "$seeds/." "$work/"; fi
  done
  read -r -a flags <<<"$(cat "tests/fuzz/$name.flags" 2>/dev/null || true)"
  "$target" -max_total_time="${FUZZ_SECONDS:-20}" -timeout=5 -rss_limit_mb=2048 \
    -malloc_limit_mb=1024 -artifact_prefix=build-fuzz/ "${flags[@]}" "$work" \
    >"build-fuzz/$name.log" 2>&1 || { tail -n 40 "build-fuzz/$name.log"; exit 1; }
  echo "$name: $(grep -E '^Done|#[0-9]+.*DONE' "build-fuzz/$name.log" | tail -n 1)"
  rm -rf "$work"
done

echo "== [4/6] planning benchmark and workload check"
if [ -x build/treeattn_plan_bench ]; then
  build/treeattn_plan_bench --benchmark_min_time=0.02 --benchmark_filter='256' | tail -n 20
fi
build/treeattn check --workloads all --planner all

echo "== [5/6] python package"
# --no-build-isolation: build with the locked scikit-build-core and nanobind of .venv
"$PY" -m pip install -q --no-build-isolation . -C cmake.define.TREEATTN_CI_KERNELS=$subset
"$PY" -m pytest tests/python -q
# The GPU machines run Python 3.12, where the extension is built for the stable ABI (limited C
# API): build it once that way too (CPU-only) when a Python 3.12 is here, so a binding that uses
# a non-limited API fails here, not there.
PY312=""
for c in "$(command -v python3.12 || true)" /root/.pyenv/versions/3.12*/bin/python3.12; do
  if [ -n "$c" ] && [ -x "$c" ] && "$c" -c 'import venv' 2>/dev/null; then PY312=$c; break; fi
done
if [ -n "$PY312" ]; then
  [ -x build-abi3/venv/bin/python ] || "$PY312" -m venv build-abi3/venv
  build-abi3/venv/bin/python -m pip install -q -c tools/constraints.txt nanobind scikit-build-core numpy
  build-abi3/venv/bin/python -m pip install -q --no-build-isolation --no-deps . \
    -C cmake.define.TREEATTN_CUDA=OFF -C build-dir=build-abi3/build
  (cd build-abi3 && venv/bin/python -c 'import treeattn, sys; print("stable-ABI build:", sys.version.split()[0], treeattn.__file__)')
else
  echo "stable-ABI build: no Python 3.12 here, skipped"
fi

echo "== [6/6] vLLM contract tests"
if [ "${SKIP_VLLM:-0}" != 1 ]; then
  ENGINE_VENV_EVICT=.venv-sglang bash tools/setup_vllm.sh
  .venv-vllm/bin/python -m pytest tests/integrations/test_vllm_contract.py -q -p no:cacheprovider
fi
echo "== [6/6] SGLang contract tests"
if [ "${SKIP_SGLANG:-0}" != 1 ]; then
  ENGINE_VENV_EVICT=.venv-vllm bash tools/setup_sglang.sh
  .venv-sglang/bin/python -m pytest tests/integrations/test_sglang_contract.py -q \
    -p no:cacheprovider
fi
