#!/usr/bin/env bash
# Creates .venv-vllm for the vLLM contract tests (tests/integrations): vllm==0.33.0 with every
# transitive version pinned by tools/constraints-vllm.txt (CUDA wheels of torch 2.14.0; ~9.4 GB),
# pytest and the build tools, and treeattn built CPU-only into it (tools/setup_engine_venv.sh).
# Idempotent: a venv that already has the pinned vllm is kept, and treeattn is rebuilt only when
# its sources changed.
#   bash tools/setup_vllm.sh            install / refresh
#   bash tools/setup_vllm.sh --relock   install the newest versions vllm==0.33.0 allows and
#                                       rewrite tools/constraints-vllm.txt
set -euo pipefail
exec bash "$(dirname "$0")/setup_engine_venv.sh" vllm 0.33.0 "${VLLM_VENV:-.venv-vllm}" "$@"
