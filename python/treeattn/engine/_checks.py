"""Argument checks of the engine's public entry points: each raises TypeError (wrong kind of
value) or ValueError (right kind, bad value) whose message starts with the argument's name, and
returns the value normalised (Python ints, a list of token ids, a torch dtype or device). Integers
go through ``treeattn.check_int``, the check of treeattn's own int arguments (bools refused, numpy
integers accepted)."""

from __future__ import annotations

import math
import os
from typing import Any, List, Optional

import numpy as np
import torch

from treeattn import check_int

#: Upper bound of a KV cache's page count (page ids are int32 in treeattn's trees; the engine's
#: per-page bookkeeping is a Python list, so the bound also keeps it within reason).
MAX_PAGES = 1 << 24
#: Page sizes the KV manager takes (treeattn's kernels read pages of any size up to this).
MAX_PAGE_SIZE = 256
_U64 = 2**64 - 1


def int_arg(name: str, value: Any, lo: int = 0, hi: int = _U64) -> int:
    """An int (not a bool) in [lo, hi]."""
    return check_int(name, value, lo, hi)


def real_arg(name: str, value: Any, lo: float = 0.0, hi: float = math.inf,
             lo_open: bool = False) -> float:
    """A finite real (int or float, not a bool) in [lo, hi] (or (lo, hi] with lo_open)."""
    if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)):
        raise TypeError(f"{name}: expected a number, got {type(value).__name__}")
    v = float(value)
    if not math.isfinite(v) or v < lo or v > hi or (lo_open and v == lo):
        rng = f"{'(' if lo_open else '['}{lo:g}, {hi:g}]"
        raise ValueError(f"{name}: expected a finite number in {rng}, got {value!r}")
    return v


def bool_arg(name: str, value: Any, allow_none: bool = False) -> Optional[bool]:
    if value is None and allow_none:
        return None
    if not isinstance(value, (bool, np.bool_)):
        raise TypeError(f"{name}: expected True or False, got {type(value).__name__}")
    return bool(value)


def tokens_arg(name: str, tokens: Any, vocab_size: int, allow_empty: bool = False) -> List[int]:
    """Token ids (a list, tuple, 1-D numpy array or torch tensor of integers) in [0, vocab_size),
    as a list of Python ints."""
    if isinstance(tokens, (str, bytes)) or not hasattr(tokens, "__len__"):
        raise TypeError(f"{name}: expected a sequence of integer token ids, got "
                        f"{type(tokens).__name__}")
    if torch.is_tensor(tokens):
        tokens = tokens.detach().cpu().numpy()
    arr = np.asarray(tokens)
    if arr.ndim != 1:
        raise ValueError(f"{name}: expected a flat sequence of token ids, got shape {arr.shape}")
    if arr.size == 0:
        if allow_empty:
            return []
        raise ValueError(f"{name}: empty (at least one token is needed)")
    if arr.dtype.kind not in "iu":
        raise TypeError(f"{name}: expected integer token ids, got {arr.dtype} values")
    lo, hi = int(arr.min()), int(arr.max())
    if lo < 0 or hi >= vocab_size:
        bad = lo if lo < 0 else hi
        at = int(np.argmax(arr == bad))
        raise ValueError(f"{name}[{at}]: token id {bad} is outside the vocabulary "
                         f"[0, {vocab_size})")
    return arr.tolist()


def dtype_arg(name: str, dtype: Any) -> torch.dtype:
    """A floating torch dtype (what weights and the KV cache hold)."""
    if not isinstance(dtype, torch.dtype):
        raise TypeError(f"{name}: expected a torch dtype such as torch.float32, got {dtype!r}")
    if not dtype.is_floating_point:
        raise ValueError(f"{name}: expected a floating dtype (float32, float16, bfloat16), got "
                         f"{dtype}")
    return dtype


def device_arg(name: str, device: Any) -> torch.device:
    """A torch device (or its name) that exists here."""
    if not isinstance(device, (str, torch.device)):
        raise TypeError(f"{name}: expected a device such as 'cpu' or 'cuda:0', got "
                        f"{type(device).__name__}")
    try:
        dev = torch.device(device)
    except (RuntimeError, ValueError) as e:
        raise ValueError(f"{name}: not a device: {device!r} ({e})") from None
    if dev.type == "cuda":
        if not torch.cuda.is_available():
            raise ValueError(f"{name}: {device!r} but CUDA is not available here")
        if dev.index is not None and dev.index >= torch.cuda.device_count():
            raise ValueError(f"{name}: {device!r} does not exist "
                             f"({torch.cuda.device_count()} GPU(s))")
    elif dev.type != "cpu":
        raise ValueError(f"{name}: the engine runs on 'cpu' or 'cuda', got {device!r}")
    return dev


def path_arg(name: str, path: Any) -> str:
    if not isinstance(path, (str, os.PathLike)):
        raise TypeError(f"{name}: expected a path, got {type(path).__name__}")
    return os.fspath(path)


def callable_arg(name: str, fn: Any, allow_none: bool = False) -> Any:
    if fn is None and allow_none:
        return None
    if not callable(fn):
        raise TypeError(f"{name}: expected a callable, got {type(fn).__name__}")
    return fn
