"""treeattn.decode as PyTorch custom ops, so it can sit inside torch.compile(fullgraph=True) graphs.

Importing this module registers

* ``torch.ops.treeattn.decode(q, k_cache, v_cache, plan_handle, sm_scale) -> out``
* ``torch.ops.treeattn.decode_lse(q, k_cache, v_cache, plan_handle, sm_scale) -> (out, lse)``

with fake (meta) implementations giving the output shapes (``sm_scale``: None for
1/sqrt(head_dim), else a finite float > 0). A custom op cannot take a Python
object, so the plan is passed as its integer ``plan.handle`` (plans register themselves in a
weak table when made; keep the Plan alive while graphs use it). Use :func:`decode`::

    import torch, treeattn, treeattn.torch_ops as tops

    plan = treeattn.plan(tree, 32, 8, 128)

    @torch.compile(fullgraph=True)
    def layer(q, k, v):
        return tops.decode(q, k, v, plan) * 2

The ops are not differentiable (decode is inference-only).
"""

from __future__ import annotations

from typing import Optional, Tuple, Union

import torch

from . import _api

__all__ = ["decode"]


def _run(q: torch.Tensor, k_cache: torch.Tensor, v_cache: Optional[torch.Tensor],
         plan_handle: int, sm_scale: Optional[float], return_lse: bool):
    plan = _api.plan_from_handle(plan_handle)
    return _api.decode(q, k_cache, v_cache, plan, return_lse=return_lse, sm_scale=sm_scale)


@torch.library.custom_op("treeattn::decode", mutates_args=())
def _decode_op(q: torch.Tensor, k_cache: torch.Tensor, v_cache: Optional[torch.Tensor],
               plan_handle: int, sm_scale: Optional[float]) -> torch.Tensor:
    return _run(q, k_cache, v_cache, plan_handle, sm_scale, False)


@_decode_op.register_fake
def _decode_fake(q, k_cache, v_cache, plan_handle, sm_scale):
    return q.new_empty(q.shape)


@torch.library.custom_op("treeattn::decode_lse", mutates_args=())
def _decode_lse_op(q: torch.Tensor, k_cache: torch.Tensor, v_cache: Optional[torch.Tensor],
                   plan_handle: int, sm_scale: Optional[float]
                   ) -> Tuple[torch.Tensor, torch.Tensor]:
    return _run(q, k_cache, v_cache, plan_handle, sm_scale, True)


@_decode_lse_op.register_fake
def _decode_lse_fake(q, k_cache, v_cache, plan_handle, sm_scale):
    return q.new_empty(q.shape), q.new_empty((q.shape[0], q.shape[1]), dtype=torch.float32)


def decode(q: torch.Tensor, k_cache: torch.Tensor, v_cache: Optional[torch.Tensor],
           plan: Union["_api.Plan", int], *, sm_scale: Optional[float] = None,
           return_lse: bool = False):
    """treeattn.decode through the registered custom op (traceable by torch.compile).

    plan: a treeattn.Plan (its ``handle`` is read) or the handle itself. The output is always a
    new tensor (no out=). Same tensor layouts and errors as treeattn.decode."""
    if isinstance(plan, _api.Plan):
        handle = plan.handle
    elif isinstance(plan, int) and not isinstance(plan, bool):
        handle = plan
    else:
        raise TypeError(f"plan: expected a treeattn.Plan or its handle (an int), got "
                        f"{type(plan).__name__}")
    scale = _api.scale_arg(sm_scale)
    if return_lse:
        return torch.ops.treeattn.decode_lse(q, k_cache, v_cache, handle, scale)
    return torch.ops.treeattn.decode(q, k_cache, v_cache, handle, scale)
