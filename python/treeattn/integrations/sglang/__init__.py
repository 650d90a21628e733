"""treeattn's SGLang plugin: registers the attention backend ``treeattn``, selected with
``python -m sglang.launch_server --model-path MODEL --attention-backend treeattn`` (decode CUDA
graphs included).

SGLang (0.5.23) loads it through the ``sglang.srt.plugins`` entry point
(``sglang.srt.plugins.load_plugins``, filtered by ``SGLANG_PLUGINS``) in the launcher and in every
scheduler process, before the command line is parsed. :func:`register` puts :func:`create_backend`
into SGLang's backend registry (``register_attention_backend``) and ``treeattn`` into the
``--attention-backend`` choices (``add_attention_backend_choices``); calling it again is harmless.

Configuration (SGLang passes none to a backend): environment variables, else a JSON file named by
``TREEATTN_SGLANG_CONFIG`` with the same keys in lower case without the prefix:

* ``TREEATTN_SGLANG_PLANNER``  treeattn planner (``treeattn.planners()``; default ``auto``);
* ``TREEATTN_SGLANG_PRESET``   cost-model preset ``a100`` / ``h100`` / ``h200`` (default: from the
                               GPU's name, ``h100`` when unknown);
* ``TREEATTN_SGLANG_HEADROOM`` device-plan headroom >= 1 (default 2.0);
* ``TREEATTN_SGLANG_PREFILL``  the SGLang attention backend that runs extend (prefill) batches
                               (default ``flashinfer`` on CUDA, ``torch_native`` on the CPU).
"""

from __future__ import annotations

from typing import Any, Dict

from .. import _common

#: the name SGLang knows the backend by (--attention-backend)
BACKEND_NAME = "treeattn"

__all__ = ["BACKEND_NAME", "create_backend", "load_config", "register"]


def create_backend(model_runner: Any):
    """SGLang's backend factory: ``fn(model_runner) -> AttentionBackend``."""
    from .backend import TreeAttnBackend

    return TreeAttnBackend(model_runner)


def register() -> None:
    """Registers :func:`create_backend` as SGLang attention backend ``treeattn`` and adds the
    name to the ``--attention-backend`` choices (idempotent)."""
    from sglang.srt.arg_groups.choices import (
        ATTENTION_BACKEND_CHOICES,
        add_attention_backend_choices,
    )
    from sglang.srt.layers.attention.attention_registry import (
        ATTENTION_BACKENDS,
        register_attention_backend,
    )

    if ATTENTION_BACKENDS.get(BACKEND_NAME) is not create_backend:
        register_attention_backend(BACKEND_NAME)(create_backend)
    if BACKEND_NAME not in ATTENTION_BACKEND_CHOICES:
        add_attention_backend_choices([BACKEND_NAME])


def load_config(environ: Any = None) -> Dict[str, Any]:
    """The plugin's settings: TREEATTN_SGLANG_* variables over the JSON file
    TREEATTN_SGLANG_CONFIG over the defaults ('prefill': None means the device's default).
    Raises ValueError naming the variable or file on a bad value."""
    return _common.load_config("TREEATTN_SGLANG", environ, extra={"prefill": None})
