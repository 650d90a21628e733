"""treeattn.decode as PyTorch custom ops, so it can sit inside torch.compile(fullgraph=True) graphs.

Importing this module registers

* ``torch.ops.treeattn.decode(q, k_cache, v_cache, plan_handle, sm_scale, k_scale=None,
  v_scale=None, k_scale_tensor=None, v_scale_tensor=None) -> out``
* ``torch.ops.treeattn.decode_lse(...)`` (the same arguments) ``-> (out, lse)``

with fake (meta) implementations giving the output shapes (``sm_scale``: None for
1/sqrt(head_dim), else a finite float > 0). fp8 KV caches (torch.float8_e4m3fn / float8_e5m2,
with a plan made for them) take their dequantization scales as floats (``k_scale``, ``v_scale``)
or as 1-element float32 tensors on their device (``*_tensor``, read at run time: a compiled or
captured graph follows their value). A custom op cannot take a Python
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

import math
from typing import Optional, Tuple, Union

import torch

from . import _api

__all__ = ["decode"]


def _run(q: torch.Tensor, k_cache: torch.Tensor, v_cache: Optional[torch.Tensor],
         plan_handle: int, sm_scale: Optional[float], k_scale: Optional[float],
         v_scale: Optional[float], k_scale_tensor: Optional[torch.Tensor],
         v_scale_tensor: Optional[torch.Tensor], return_lse: bool):
    plan = _api.plan_from_handle(plan_handle)
    ks = k_scale_tensor if k_scale_tensor is not None else k_scale
    vs = v_scale_tensor if v_scale_tensor is not None else v_scale
    return _api.decode(q, k_cache, v_cache, plan, return_lse=return_lse, sm_scale=sm_scale,
                       k_scale=ks, v_scale=vs)


@torch.library.custom_op("treeattn::decode", mutates_args=())
def _decode_op(q: torch.Tensor, k_cache: torch.Tensor, v_cache: Optional[torch.Tensor],
               plan_handle: int, sm_scale: Optional[float], k_scale: Optional[float] = None,
               v_scale: Optional[float] = None, k_scale_tensor: Optional[torch.Tensor] = None,
               v_scale_tensor: Optional[torch.Tensor] = None) -> torch.Tensor:
    return _run(q, k_cache, v_cache, plan_handle, sm_scale, k_scale, v_scale, k_scale_tensor,
                v_scale_tensor, False)


@_decode_op.register_fake
def _decode_fake(q, k_cache, v_cache, plan_handle, sm_scale, k_scale=None, v_scale=None,
                 k_scale_tensor=None, v_scale_tensor=None):
    return q.new_empty(q.shape)


@torch.library.custom_op("treeattn::decode_lse", mutates_args=())
def _decode_lse_op(q: torch.Tensor, k_cache: torch.Tensor, v_cache: Optional[torch.Tensor],
                   plan_handle: int, sm_scale: Optional[float], k_scale: Optional[float] = None,
                   v_scale: Optional[float] = None,
                   k_scale_tensor: Optional[torch.Tensor] = None,
                   v_scale_tensor: Optional[torch.Tensor] = None
                   ) -> Tuple[torch.Tensor, torch.Tensor]:
    return _run(q, k_cache, v_cache, plan_handle, sm_scale, k_scale, v_scale, k_scale_tensor,
                v_scale_tensor, True)


@_decode_lse_op.register_fake
def _decode_lse_fake(q, k_cache, v_cache, plan_handle, sm_scale, k_scale=None, v_scale=None,
                     k_scale_tensor=None, v_scale_tensor=None):
    return q.new_empty(q.shape), q.new_empty((q.shape[0], q.shape[1]), dtype=torch.float32)


def _scale_pair(name: str, scale):
    """(float, None), (None, tensor) or (None, None) for the op's two scale arguments."""
    if scale is None:
        return None, None
    if isinstance(scale, torch.Tensor):
        return None, scale
    if isinstance(scale, bool) or not isinstance(scale, (int, float)):
        raise TypeError(f"{name}: expected a float, a 1-element float32 tensor or None, got "
                        f"{type(scale).__name__}")
    value = float(scale)
    if not (math.isfinite(value) and value > 0):
        raise ValueError(f"{name}: must be finite and > 0 in float32, got {scale!r}")
    return value, None


def decode(q: torch.Tensor, k_cache: torch.Tensor, v_cache: Optional[torch.Tensor],
           plan: Union["_api.Plan", int], *, sm_scale: Optional[float] = None,
           return_lse: bool = False, k_scale=None, v_scale=None):
    """treeattn.decode through the registered custom op (traceable by torch.compile).

    plan: a treeattn.Plan (its ``handle`` is read) or the handle itself. The output is always a
    new tensor (no out=). Same tensor layouts, fp8 caches and scales (k_scale / v_scale: None, a
    float or a 1-element float32 tensor) and errors as treeattn.decode."""
    if isinstance(plan, _api.Plan):
        handle = plan.handle
    elif isinstance(plan, int) and not isinstance(plan, bool):
        handle = plan
    else:
        raise TypeError(f"plan: expected a treeattn.Plan or its handle (an int), got "
                        f"{type(plan).__name__}")
    scale = _api.scale_arg(sm_scale)
    ks, kt = _scale_pair("k_scale", k_scale)
    vs, vt = _scale_pair("v_scale", v_scale)
    op = torch.ops.treeattn.decode_lse if return_lse else torch.ops.treeattn.decode
    return op(q, k_cache, v_cache, handle, scale, ks, vs, kt, vt)
