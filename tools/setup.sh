#!/usr/bin/env bash
# Installs what treeattn needs on a fresh Debian machine of this project's kind (idempotent):
# compilers and CMake, GoogleTest, Google Benchmark, clang (libFuzzer, ThreadSanitizer), and a
# Python venv at .venv with the build/test packages of tools/requirements-dev.txt at the versions
# locked in tools/constraints.txt (torch, safetensors and matplotlib included: the engine tests in
# tests/python need them). The Debian packages are the distribution's. The CUDA toolkit (nvcc) is
# used when present.
#   bash tools/setup.sh            install (each step says what it does and how long it took)
#   bash tools/setup.sh --relock   install the newest allowed versions and rewrite the lock file
set -euo pipefail
cd "$(dirname "$0")/.."
relock=0
[ "${1:-}" = "--relock" ] && relock=1
t0=$SECONDS
step() { echo "setup: $* ($((SECONDS - t0)) s)"; }

need=()
command -v cmake >/dev/null || need+=(cmake)
command -v g++ >/dev/null || need+=(g++)
command -v clang++ >/dev/null || need+=(clang)
command -v clang-format >/dev/null || need+=(clang-format)
[ -f /usr/include/gtest/gtest.h ] || need+=(libgtest-dev)
[ -f /usr/include/benchmark/benchmark.h ] || need+=(libbenchmark-dev)
python3 -c 'import venv, ensurepip' 2>/dev/null || need+=(python3-venv)
if [ ${#need[@]} -gt 0 ]; then
  step "installing Debian packages: ${need[*]}"
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO=sudo
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${need[@]}"
else
  step "Debian packages present"
fi

if [ ! -x .venv/bin/python ]; then
  step "creating the Python venv .venv"
  python3 -m venv .venv
fi
PIP=(.venv/bin/python -m pip --disable-pip-version-check --no-cache-dir)
if [ $relock = 1 ]; then
  step "relock: installing the newest versions tools/requirements-dev.txt allows"
  "${PIP[@]}" install -q --upgrade pip
  "${PIP[@]}" install -q --upgrade -r tools/requirements-dev.txt
  {
    sed -n '1,3p' tools/constraints.txt
    "${PIP[@]}" freeze --all | grep -v -E '^(setuptools|wheel)=='
  } >tools/constraints.txt.new
  mv tools/constraints.txt.new tools/constraints.txt
  step "relock: tools/constraints.txt rewritten; run tools/test.sh and commit it"
else
  step "installing the locked Python packages (torch is the largest, ~1 GB download on first run)"
  "${PIP[@]}" install -q "$(grep '^pip==' tools/constraints.txt)"
  "${PIP[@]}" install -q --no-compile -r tools/requirements-dev.txt -c tools/constraints.txt
fi
step "ok (nvcc: $(command -v nvcc || echo 'not found, CPU-only build'))"
