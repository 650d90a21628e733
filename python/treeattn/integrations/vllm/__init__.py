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

import json
import os
from typing import Any, Dict, Mapping

BACKEND_PATH = "treeattn.integrations.vllm.backend.TreeAttnBackend"

__all__ = ["BACKEND_PATH", "load_config", "register"]


def register() -> None:
    """Registers TreeAttnBackend as AttentionBackendEnum.CUSTOM (idempotent)."""
    from vllm.v1.attention.backends.registry import AttentionBackendEnum, register_backend

    custom = AttentionBackendEnum.CUSTOM
    if custom.is_overridden() and custom.get_path() == BACKEND_PATH:
        return
    register_backend(custom, BACKEND_PATH)


_KEYS = {"planner": str, "preset": str, "headroom": float}


def load_config(environ: Any = None) -> Dict[str, Any]:
    """The plugin's settings: TREEATTN_VLLM_* variables over the JSON file TREEATTN_VLLM_CONFIG
    over the defaults. Raises ValueError naming the variable or file on a bad value, TypeError
    naming `environ` when it is not a mapping."""
    env = os.environ if environ is None else environ
    if not isinstance(env, Mapping):
        raise TypeError(f"environ: expected a mapping of variables, got {type(env).__name__}")
    cfg: Dict[str, Any] = {"planner": "auto", "preset": None, "headroom": 2.0}
    path = env.get("TREEATTN_VLLM_CONFIG")
    if path:
        try:
            with open(path, encoding="utf-8") as f:
                data = json.load(f)
        except (OSError, ValueError, RecursionError) as e:  # RecursionError: deep nesting
            raise ValueError(f"TREEATTN_VLLM_CONFIG: cannot read {path!r}: {e}") from None
        if not isinstance(data, dict):
            raise ValueError(f"TREEATTN_VLLM_CONFIG: {path!r} must hold a JSON object")
        unknown = sorted(set(data) - set(_KEYS))
        if unknown:
            raise ValueError(f"TREEATTN_VLLM_CONFIG: unknown keys {unknown} in {path!r}, "
                             f"expected {sorted(_KEYS)}")
        for k, v in data.items():
            cfg[k] = _convert(f"TREEATTN_VLLM_CONFIG[{k!r}]", k, v)
    for k in _KEYS:
        name = f"TREEATTN_VLLM_{k.upper()}"
        if env.get(name):
            cfg[k] = _convert(name, k, env[name])
    return cfg


def _convert(name: str, key: str, value: Any) -> Any:
    import treeattn

    if key == "headroom":
        if isinstance(value, bool):
            raise ValueError(f"{name}: expected a number >= 1, got {value!r}")
        try:
            v = float(value)
        except (TypeError, ValueError):
            raise ValueError(f"{name}: expected a number >= 1, got {value!r}") from None
        if not v >= 1.0 or v != v or v == float("inf"):
            raise ValueError(f"{name}: expected a number >= 1, got {value!r}")
        return v
    if not isinstance(value, str):
        raise ValueError(f"{name}: expected a string, got {value!r}")
    if key == "planner" and value not in treeattn.planners():
        raise ValueError(f"{name}: unknown planner {value!r}, expected one of "
                         f"{treeattn.planners()}")
    if key == "preset" and value not in ("a100", "h100", "h200"):
        raise ValueError(f"{name}: unknown preset {value!r}, expected a100, h100 or h200")
    return value
