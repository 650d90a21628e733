#!/usr/bin/env bash
# Creates .venv-sglang for the SGLang contract tests (tests/integrations/test_sglang_contract.py):
# sglang==0.5.23 with every transitive version pinned by tools/constraints-sglang.txt (CUDA wheels
# of torch; ~11 GB), pytest and the build tools, and treeattn built CPU-only into it. Idempotent:
# a venv that already has the pinned sglang is kept, and treeattn is rebuilt only when its sources
# changed.
#   bash tools/setup_sglang.sh            install / refresh
#   bash tools/setup_sglang.sh --relock   install the newest versions sglang==0.5.23 allows and
#                                         rewrite tools/constraints-sglang.txt
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=${SGLANG_VENV:-.venv-sglang}
SGLANG_VERSION=0.5.23
CONSTRAINTS=tools/constraints-sglang.txt
relock=0
[ "${1:-}" = "--relock" ] && relock=1
t0=$SECONDS
step() { echo "setup_sglang: $* ($((SECONDS - t0)) s)"; }

if [ ! -x "$VENV/bin/python" ]; then
  step "creating $VENV"
  python3 -m venv "$VENV"
fi
PIP=("$VENV/bin/python" -m pip --disable-pip-version-check)
have=$("$VENV/bin/python" -c 'import importlib.metadata as m; print(m.version("sglang"))' \
  2>/dev/null || true)
if [ $relock = 1 ]; then
  step "relock: installing sglang==$SGLANG_VERSION with the newest allowed dependencies"
  "${PIP[@]}" install -q "sglang==$SGLANG_VERSION" pytest nanobind scikit-build-core
  {
    grep '^#' "$CONSTRAINTS"
    "${PIP[@]}" freeze --all | grep -v -E '^(setuptools|wheel|treeattn)( |==)'
  } >"$CONSTRAINTS.new"
  mv "$CONSTRAINTS.new" "$CONSTRAINTS"
elif [ "$have" != "$SGLANG_VERSION" ]; then
  step "installing sglang==$SGLANG_VERSION and its locked dependencies (first run: ~11 GB)"
  "${PIP[@]}" install -q "$(grep '^pip==' "$CONSTRAINTS")"
  "${PIP[@]}" install -q "sglang==$SGLANG_VERSION" pytest nanobind scikit-build-core \
    -c "$CONSTRAINTS"
else
  step "sglang==$SGLANG_VERSION present"
fi

# treeattn, CPU-only, rebuilt when a source file is newer than the last install
stamp="$VENV/.treeattn-installed"
newer=$(find pyproject.toml CMakeLists.txt include src bindings python -newer "$stamp" \
  -type f -print -quit 2>/dev/null || echo rebuild)
if [ ! -f "$stamp" ] || [ -n "$newer" ]; then
  step "building treeattn (CPU-only) into $VENV"
  "${PIP[@]}" install -q --no-build-isolation --no-deps . \
    -C cmake.define.TREEATTN_CUDA=OFF -C build-dir=build-py-sglang
  touch "$stamp"
else
  step "treeattn up to date in $VENV"
fi
step "ok"
