#!/usr/bin/env bash
# Makes the virtual environment of one engine's contract tests (tests/integrations), shared by
# tools/setup_vllm.sh and tools/setup_sglang.sh: the engine at its pinned version with every
# transitive version pinned by tools/constraints-ENGINE.txt, pytest and the build tools, and
# treeattn built CPU-only into it. Idempotent: a venv that already has the pinned engine is kept,
# and treeattn is rebuilt only when its sources changed.
# Disk: an install takes about ENGINE_VENV_NEED_GB (default 16: the venv plus the wheels pip
# downloads first); pip keeps no wheel cache and compiles no bytecode up front (Python writes it
# for the modules a test imports). When the disk holds less, the venvs named in
# ENGINE_VENV_EVICT (space-separated; tools/test.sh names the other engine's) are removed first:
# they are caches that their own setup script recreates.
#   bash tools/setup_engine_venv.sh ENGINE VERSION VENV [--relock]
#     --relock  install the newest versions ENGINE==VERSION allows and rewrite the constraints
#               file (its leading '#' lines are kept)
set -euo pipefail
cd "$(dirname "$0")/.."
ENGINE=$1 VERSION=$2 VENV=$3
CONSTRAINTS=tools/constraints-$ENGINE.txt
relock=0
[ "${4:-}" = "--relock" ] && relock=1
t0=$SECONDS
step() { echo "setup_$ENGINE: $* ($((SECONDS - t0)) s)"; }

if [ ! -x "$VENV/bin/python" ]; then
  step "creating $VENV"
  python3 -m venv "$VENV"
fi
PIP=("$VENV/bin/python" -m pip --disable-pip-version-check --no-cache-dir)
have=$("$VENV/bin/python" -c "import importlib.metadata as m; print(m.version('$ENGINE'))" \
  2>/dev/null || true)
if [ $relock = 1 ]; then
  step "relock: installing $ENGINE==$VERSION with the newest allowed dependencies"
  "${PIP[@]}" install -q "$ENGINE==$VERSION" pytest nanobind scikit-build-core
  {
    grep '^#' "$CONSTRAINTS"
    "${PIP[@]}" freeze --all | grep -v -E '^(setuptools|wheel|treeattn)( |==)'
  } >"$CONSTRAINTS.new"
  mv "$CONSTRAINTS.new" "$CONSTRAINTS"
elif [ "$have" != "$VERSION" ]; then
  need_gb=${ENGINE_VENV_NEED_GB:-16}
  free_gb() { df -Pk . | awk 'NR == 2 { print int($4 / 1048576) }'; }
  for other in ${ENGINE_VENV_EVICT:-}; do
    if [ "$(free_gb)" -lt "$need_gb" ] && [ -d "$other" ] && [ "$other" != "$VENV" ]; then
      step "$(free_gb) GB free, the install needs about $need_gb GB: removing $other (its setup script recreates it)"
      rm -rf "$other"
    fi
  done
  [ "$(free_gb)" -ge "$need_gb" ] ||
    step "warning: $(free_gb) GB free, the install needs about $need_gb GB"
  step "installing $ENGINE==$VERSION and its locked dependencies"
  "${PIP[@]}" install -q "$(grep '^pip==' "$CONSTRAINTS")"
  "${PIP[@]}" install -q --no-compile "$ENGINE==$VERSION" pytest nanobind scikit-build-core -c "$CONSTRAINTS"
else
  step "$ENGINE==$VERSION present"
fi

# treeattn, CPU-only, rebuilt when a source file is newer than the last install
stamp="$VENV/.treeattn-installed"
newer=$(find pyproject.toml CMakeLists.txt include src bindings python -newer "$stamp" \
  -type f -print -quit 2>/dev/null || echo rebuild)
if [ ! -f "$stamp" ] || [ -n "$newer" ]; then
  step "building treeattn (CPU-only) into $VENV"
  "${PIP[@]}" install -q --no-build-isolation --no-deps . \
    -C cmake.define.TREEATTN_CUDA=OFF -C build-dir="build-py-$ENGINE"
  touch "$stamp"
else
  step "treeattn up to date in $VENV"
fi
step "ok"
