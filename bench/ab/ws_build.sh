#!/usr/bin/env bash
# The device scripts' build of the CLI and the GPU tests (bench/ab/ws_device*.sh): sm_90a only,
# every kernel instantiation, Release, Ninja when present. GoogleTest from the system, else built
# from build-devdeps/googletest (carried into the device call) and installed in /tmp/gtest.
#   bash bench/ab/ws_build.sh BUILD_DIR JOBS LOG   (exit status: the build's; output in LOG)
set -uo pipefail
BUILD=$1 JOBS=$2 LOG=$3
gen=() extra=()
command -v ninja >/dev/null && gen=(-G Ninja)
: >"$LOG"
if [[ ! -f /usr/lib/x86_64-linux-gnu/libgtest.a && ! -f /usr/local/lib/libgtest.a ]]; then
  if [[ -d build-devdeps/googletest ]]; then
    { cmake -S build-devdeps/googletest -B /tmp/gtest-build "${gen[@]}" -DCMAKE_BUILD_TYPE=Release \
        -DCMAKE_INSTALL_PREFIX=/tmp/gtest -DBUILD_GMOCK=OFF &&
        cmake --build /tmp/gtest-build -j "$JOBS" --target install; } >>"$LOG" 2>&1
    extra+=(-DCMAKE_PREFIX_PATH=/tmp/gtest)
  else
    echo "build: no GoogleTest (system or build-devdeps/googletest): carry build-devdeps/googletest" |
      tee -a "$LOG"
  fi
fi
cmake -S . -B "$BUILD" "${gen[@]}" -DCMAKE_BUILD_TYPE=Release -DTREEATTN_CUDA_ARCHS=90a \
  -DTREEATTN_CI_KERNELS=OFF -DTREEATTN_BENCH=OFF "${extra[@]}" >>"$LOG" 2>&1 &&
  cmake --build "$BUILD" -j "$JOBS" --target treeattn treeattn_gpu_tests >>"$LOG" 2>&1
