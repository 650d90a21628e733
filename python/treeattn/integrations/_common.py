"""What the engine plugins (treeattn.integrations.vllm, treeattn.integrations.sglang) share: the
head sizes treeattn's CUDA kernels are compiled for, the cost-model preset of a GPU, and the
plugin settings read from environment variables and a JSON file.

Settings of a plugin with prefix ``PFX`` (``TREEATTN_VLLM``, ``TREEATTN_SGLANG``): the variables
``PFX_PLANNER``, ``PFX_PRESET``, ``PFX_HEADROOM`` (plus the plugin's own keys, e.g.
``PFX_PREFILL``) over a JSON file named by ``PFX_CONFIG`` holding the same keys in lower case
without the prefix, over the defaults.
"""

from __future__ import annotations

import json
import os
from typing import Any, Dict, Mapping, Optional

__all__ = ["HEAD_SIZES", "PRESETS", "load_config", "preset_for"]

#: head sizes treeattn's CUDA kernels are compiled for
HEAD_SIZES = [64, 128, 256]
#: cost-model presets a plugin may name
PRESETS = ("a100", "h100", "h200")

_KEYS = {"planner": "auto", "preset": None, "headroom": 2.0}


def preset_for(device: Any) -> str:
    """The cost-model preset of a torch device: from the GPU's name, 'h100' when unknown or not
    a CUDA device."""
    import torch

    device = torch.device(device)
    if device.type == "cuda":
        name = torch.cuda.get_device_name(device).lower()
        for p in ("h200", "h100", "a100"):
            if p in name:
                return p
    return "h100"


def load_config(prefix: str, environ: Optional[Mapping[str, str]] = None,
                extra: Optional[Dict[str, Any]] = None) -> Dict[str, Any]:
    """Settings 'planner', 'preset', 'headroom' and the string keys of `extra` (name -> default)
    from ``{prefix}_*`` variables over the JSON file ``{prefix}_CONFIG`` over the defaults.
    Raises ValueError naming the variable or file on a bad value, TypeError naming `environ`
    when it is not a mapping."""
    env = os.environ if environ is None else environ
    if not isinstance(env, Mapping):
        raise TypeError(f"environ: expected a mapping of variables, got {type(env).__name__}")
    cfg: Dict[str, Any] = dict(_KEYS, **(extra or {}))
    path = env.get(f"{prefix}_CONFIG")
    if path:
        name = f"{prefix}_CONFIG"
        try:
            with open(path, encoding="utf-8") as f:
                data = json.load(f)
        except (OSError, ValueError, RecursionError) as e:  # RecursionError: deep nesting
            raise ValueError(f"{name}: cannot read {path!r}: {e}") from None
        if not isinstance(data, dict):
            raise ValueError(f"{name}: {path!r} must hold a JSON object")
        unknown = sorted(set(data) - set(cfg))
        if unknown:
            raise ValueError(f"{name}: unknown keys {unknown} in {path!r}, expected "
                             f"{sorted(cfg)}")
        for k, v in data.items():
            cfg[k] = _convert(f"{name}[{k!r}]", k, v)
    for k in list(cfg):
        name = f"{prefix}_{k.upper()}"
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
    if key == "preset" and value not in PRESETS:
        raise ValueError(f"{name}: unknown preset {value!r}, expected a100, h100 or h200")
    return value
