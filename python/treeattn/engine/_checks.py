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


#: fp8 KV cache types by name (``--kv-dtype``): one byte per element, dequantized as scale x
#: value with a float32 scale per layer for K and one for V (the vLLM convention). "fp8" is e4m3,
#: as in vLLM's ``--kv-cache-dtype fp8``.
FP8_KV_DTYPES = {"fp8_e4m3": torch.float8_e4m3fn, "fp8_e5m2": torch.float8_e5m2,
                 "fp8": torch.float8_e4m3fn}
#: KV dtype names that mean "the model's dtype".
SAME_KV_DTYPES = ("auto", "model")
_KV_NAMES = {"bf16": torch.bfloat16, "bfloat16": torch.bfloat16, "fp16": torch.float16,
             "float16": torch.float16, "fp32": torch.float32, "float32": torch.float32}


def is_fp8(dtype: Any) -> bool:
    """Whether `dtype` (a torch dtype) is one of the fp8 KV types."""
    return dtype in (torch.float8_e4m3fn, torch.float8_e5m2)


def fp8_name(dtype: torch.dtype) -> str:
    """'fp8_e4m3' or 'fp8_e5m2' (treeattn's names) for an fp8 torch dtype."""
    return "fp8_e4m3" if dtype == torch.float8_e4m3fn else "fp8_e5m2"


def kv_dtype_arg(name: str, value: Any, model_dtype: torch.dtype) -> torch.dtype:
    """The KV cache's element type: None, 'auto' or 'model' = the model's dtype; 'fp8_e4m3'
    ('fp8'), 'fp8_e5m2'; 'bf16' / 'fp16' / 'fp32' (or their torch names); or a torch dtype
    (a floating one, fp8 included)."""
    if value is None or (isinstance(value, str) and value in SAME_KV_DTYPES):
        return model_dtype
    if isinstance(value, torch.dtype):
        if is_fp8(value) or value.is_floating_point:
            return value
        raise ValueError(f"{name}: expected a floating or fp8 dtype, got {value}")
    if not isinstance(value, str):
        raise TypeError(f"{name}: expected a KV dtype name such as 'fp8_e4m3' or a torch dtype, "
                        f"got {type(value).__name__}")
    dt = FP8_KV_DTYPES.get(value, _KV_NAMES.get(value))
    if dt is None:
        names = sorted(FP8_KV_DTYPES) + list(SAME_KV_DTYPES) + sorted(_KV_NAMES)
        raise ValueError(f"{name}: unknown KV dtype {value!r}, expected one of {names}")
    return dt


def kv_scale_arg(name: str, value: Any, num_layers: int) -> List[float]:
    """Per-layer fp8 scales: one number for every layer, or a sequence of num_layers numbers;
    each finite and > 0."""
    if isinstance(value, (int, float, np.integer, np.floating)) and not isinstance(value, bool):
        return [real_arg(name, value, 0.0, lo_open=True)] * num_layers
    if isinstance(value, (str, bytes)) or not hasattr(value, "__len__"):
        raise TypeError(f"{name}: expected a number or one number per layer, got "
                        f"{type(value).__name__}")
    if torch.is_tensor(value):
        value = value.detach().cpu().tolist()
    if len(value) != num_layers:
        raise ValueError(f"{name}: expected one scale per layer ({num_layers}), got "
                         f"{len(value)}")
    return [real_arg(f"{name}[{i}]", v, 0.0, lo_open=True) for i, v in enumerate(value)]


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
