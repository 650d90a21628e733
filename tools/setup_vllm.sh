#!/usr/bin/env bash
# Creates .venv-vllm for the vLLM contract tests (tests/integrations): vllm==0.33.0 with every
# transitive version pinned by tools/constraints-vllm.txt (CUDA wheels of torch 2.14.0; ~9.4 GB),
# pytest and the build tools, and treeattn built CPU-only into it. Idempotent: a venv that already
# has the pinned vllm is kept, and treeattn is rebuilt only when its sources changed.
#   bash tools/setup_vllm.sh            install / refresh
#   bash tools/setup_vllm.sh --relock   install the newest versions vllm==0.33.0 allows and
#                                       rewrite tools/constraints-vllm.txt
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=${VLLM_VENV:-.venv-vllm}
VLLM_VERSION=0.33.0
relock=0
[ "${1:-}" = "--relock" ] && relock=1
t0=$SECONDS
step() { echo "setup_vllm: $* ($((SECONDS - t0)) s)"; }

if [ ! -x "$VENV/bin/python" ]; then
  step "creating $VENV"
  python3 -m venv "$VENV"
fi
PIP=("$VENV/bin/python" -m pip --disable-pip-version-check)
have=$("$VENV/bin/python" -c 'import importlib.metadata as m; print(m.version("vllm"))' \
  2>/dev/null || true)
if [ $relock = 1 ]; then
  step "relock: installing vllm==$VLLM_VERSION with the newest allowed dependencies"
  "${PIP[@]}" install -q "vllm==$VLLM_VERSION" pytest nanobind scikit-build-core
  {
    sed -n '1,4p' tools/constraints-vllm.txt
    "${PIP[@]}" freeze --all | grep -v -E '^(setuptools|wheel|treeattn)=='
  } >tools/constraints-vllm.txt.new
  mv tools/constraints-vllm.txt.new tools/constraints-vllm.txt
elif [ "$have" != "$VLLM_VERSION" ]; then
  step "installing vllm==$VLLM_VERSION and its locked dependencies (first run: ~9 GB)"
  "${PIP[@]}" install -q "$(grep '^pip==' tools/constraints-vllm.txt)"
  "${PIP[@]}" install -q "vllm==$VLLM_VERSION" pytest nanobind scikit-build-core \
    -c tools/constraints-vllm.txt
else
  step "vllm==$VLLM_VERSION present"
fi

# treeattn, CPU-only, rebuilt when a source file is newer than the last install
stamp="$VENV/.treeattn-installed"
newer=$(find pyproject.toml CMakeLists.txt include src bindings python -newer "$stamp" \
  -type f -print -quit 2>/dev/null || echo rebuild)
if [ ! -f "$stamp" ] || [ -n "$newer" ]; then
  step "building treeattn (CPU-only) into $VENV"
  "${PIP[@]}" install -q --no-build-isolation --no-deps . \
    -C cmake.define.TREEATTN_CUDA=OFF -C build-dir=build-py-vllm
  touch "$stamp"
else
  step "treeattn up to date in $VENV"
fi
step "ok"
