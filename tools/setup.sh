#!/usr/bin/env bash
# Installs what treeattn needs on a fresh Debian machine of this project's kind (idempotent):
# compilers and CMake, GoogleTest, Google Benchmark, clang (libFuzzer), and a Python venv at
# .venv with the build/test packages (torch, safetensors and matplotlib included: the engine
# tests in tests/python need them). The CUDA toolkit (nvcc) is used when present.
set -euo pipefail
cd "$(dirname "$0")/.."

need=()
command -v cmake >/dev/null || need+=(cmake)
command -v g++ >/dev/null || need+=(g++)
command -v clang++ >/dev/null || need+=(clang)
command -v clang-format >/dev/null || need+=(clang-format)
[ -f /usr/include/gtest/gtest.h ] || need+=(libgtest-dev)
[ -f /usr/include/benchmark/benchmark.h ] || need+=(libbenchmark-dev)
python3 -c 'import venv, ensurepip' 2>/dev/null || need+=(python3-venv)
if [ ${#need[@]} -gt 0 ]; then
  echo "setup: installing ${need[*]}"
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO=sudo
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${need[@]}"
fi

if [ ! -x .venv/bin/python ]; then
  python3 -m venv .venv
fi
.venv/bin/python -m pip install -q --upgrade pip >/dev/null
.venv/bin/python -m pip install -q -r tools/requirements-dev.txt
echo "setup: ok (nvcc: $(command -v nvcc || echo 'not found, CPU-only build'))"
