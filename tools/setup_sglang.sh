#!/usr/bin/env bash
# Creates .venv-sglang for the SGLang contract tests (tests/integrations/test_sglang_contract.py):
# sglang==0.5.23 with every transitive version pinned by tools/constraints-sglang.txt (CUDA wheels
# of torch; ~11 GB, ~11 min the first time on 2 cores), pytest and the build tools, and treeattn
# built CPU-only into it (tools/setup_engine_venv.sh). Idempotent.
#   bash tools/setup_sglang.sh            install / refresh
#   bash tools/setup_sglang.sh --relock   install the newest versions sglang==0.5.23 allows and
#                                         rewrite tools/constraints-sglang.txt
set -euo pipefail
exec bash "$(dirname "$0")/setup_engine_venv.sh" sglang 0.5.23 "${SGLANG_VENV:-.venv-sglang}" "$@"
