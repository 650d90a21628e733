"""treeattn's vLLM plugin: registers :class:`~treeattn.integrations.vllm.backend.TreeAttnBackend`
as vLLM's CUSTOM attention backend, selected with ``vllm serve MODEL --attention-backend CUSTOM``.

vLLM (0.33.0) loads it through the ``vllm.general_plugins`` entry point in every process
(``vllm.plugins.load_general_plugins``); :func:`register` only records a class path in vLLM's
backend registry, so calling it again, or in a process without a GPU, is harmless.

Configuration (vLLM passes none to a backend): environment variables, else a JSON file named by
``TREEATTN_VLLM_CONFIG`` with the same keys in lower case without the prefix
(``{"planner": "auto", "preset": "h100", "headroom": 2.0}``):

* ``TREEATTN_VLLM_PLANNER``  treeattn planner (``treeattn.planners()``; default ``auto``);
* ``TREEATTN_VLLM_PRESET``   cost-model preset ``a100`` / ``h100`` / ``h200`` (default: from the
                             GPU's name, ``h100`` when unknown);
* ``TREEATTN_VLLM_HEADROOM`` device-plan headroom >= 1 (default 2.0).
"""

from __future__ import annotations

from typing import Any, Dict

from .. import _common

BACKEND_PATH = "treeattn.integrations.vllm.backend.TreeAttnBackend"

__all__ = ["BACKEND_PATH", "load_config", "register"]


def register() -> None:
    """Registers TreeAttnBackend as AttentionBackendEnum.CUSTOM (idempotent)."""
    from vllm.v1.attention.backends.registry import AttentionBackendEnum, register_backend

    custom = AttentionBackendEnum.CUSTOM
    if custom.is_overridden() and custom.get_path() == BACKEND_PATH:
        return
    register_backend(custom, BACKEND_PATH)


def load_config(environ: Any = None) -> Dict[str, Any]:
    """The plugin's settings: TREEATTN_VLLM_* variables over the JSON file TREEATTN_VLLM_CONFIG
    over the defaults. Raises ValueError naming the variable or file on a bad value."""
    return _common.load_config("TREEATTN_VLLM", environ)
