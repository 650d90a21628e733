"""Array-framework helpers for treeattn.decode: which framework a tensor comes from, its DLPack
device, output allocation in the caller's framework, and the CUDA stream to launch on.

Only conversions live here; validation is done by the extension, naming the argument."""

from __future__ import annotations

from typing import Any, Optional, Tuple

import numpy as np

DL_CPU = 1
DL_CUDA = 2


def framework(x: Any) -> str:
    """'torch', 'cupy', 'jax', 'numpy' or 'other', from the type's module."""
    mod = type(x).__module__.split(".", 1)[0]
    if mod in ("torch", "cupy", "numpy"):
        return mod
    if mod in ("jax", "jaxlib"):
        return "jax"
    return "other"


def dlpack_device(x: Any) -> Tuple[int, int]:
    """(DLPack device type, device id) of an array, (1, 0) for plain CPU arrays."""
    dev = getattr(x, "__dlpack_device__", None)
    if dev is None:
        return (DL_CPU, 0)
    t, i = dev()
    return (int(t), int(i))


def detach(x: Any) -> Any:
    """torch tensors that require grad cannot be exported through DLPack; decode has no autograd."""
    if x is not None and getattr(x, "requires_grad", False):
        return x.detach()
    return x


def check_array(name: str, x: Any, writable: bool = False) -> None:
    """Clear errors for arrays DLPack or the extension would refuse with a generic message:
    torch sparse / meta tensors, read-only numpy arrays (np.broadcast_to views) where the
    extension needs writable memory, immutable JAX arrays passed as outputs."""
    if x is None:
        return
    fw = framework(x)
    if fw == "torch":
        layout = str(getattr(x, "layout", "torch.strided"))
        if layout != "torch.strided":
            raise TypeError(f"{name}: expected a dense (strided) tensor, got layout {layout}; "
                            f"call .to_dense() first")
        if getattr(x, "is_meta", False) or str(getattr(x, "device", "")) == "meta":
            raise TypeError(f"{name}: a meta tensor has no data; pass a CPU or CUDA tensor")
    elif isinstance(x, np.ndarray):
        if not x.flags.writeable:
            what = "a broadcast view (np.broadcast_to)" if 0 in x.strides else "read-only"
            raise ValueError(f"{name}: the numpy array is {what}; pass a writable array "
                             f"(np.array({name}) copies it)")
    elif fw == "jax" and writable:
        raise TypeError(f"{name}: JAX arrays are immutable; leave {name}=None and use the "
                        f"returned array")


#: The fp8 KV dtypes by the name frameworks give them (torch, ml_dtypes / numpy, JAX, CuPy):
#: treeattn.decode passes such caches to the extension as uint8 views with a kv_dtype code.
FP8_KV_DTYPES = {"float8_e4m3fn": ("fp8_e4m3", 1), "float8_e5m2": ("fp8_e5m2", 2)}


def dtype_name(x: Any) -> str:
    """The element type's bare name: 'float16', 'float8_e4m3fn', ... ('' when x has none)."""
    return str(getattr(x, "dtype", "")).replace("torch.", "")


def fp8_bytes_view(name: str, x: Any) -> Any:
    """The uint8 view of an fp8 array (same memory, same shape and strides): torch and numpy
    (ml_dtypes) only; TypeError naming the argument for other frameworks."""
    fw = framework(x)
    if fw == "torch":
        import torch

        return x.view(torch.uint8)
    if isinstance(x, np.ndarray):
        return x.view(np.uint8)
    raise TypeError(f"{name}: fp8 KV caches are taken as torch tensors or numpy (ml_dtypes) "
                    f"arrays, got a {fw} array of {dtype_name(x)}")


def as_numpy_input(x: Any) -> Any:
    """numpy arrays pass through, except bfloat16 (ml_dtypes), which DLPack cannot export: it is
    widened to float32 exactly. Lists and other array-likes are left to the extension's checks."""
    if isinstance(x, np.ndarray) and x.dtype.name == "bfloat16":
        return x.astype(np.float32)
    return x


def empty(like: Any, shape: Tuple[int, ...], float32: bool = False) -> Any:
    """An uninitialised array of `shape` in `like`'s framework and device, with like's dtype (or
    float32). JAX arrays are immutable: the buffer comes from torch or CuPy and is handed back to
    JAX by jax.dlpack.from_dlpack in finish()."""
    fw = framework(like)
    if fw == "torch":
        import torch

        return torch.empty(shape, dtype=torch.float32 if float32 else like.dtype, device=like.device)
    if fw == "cupy":
        import cupy

        with cupy.cuda.Device(like.device.id):
            return cupy.empty(shape, dtype=cupy.float32 if float32 else like.dtype)
    dev_type, dev_id = dlpack_device(like)
    if dev_type == DL_CPU:
        dtype = np.float32 if float32 else np.dtype(getattr(like, "dtype", np.float32))
        return np.empty(shape, dtype=dtype)
    if dev_type == DL_CUDA:
        name = "float32" if float32 else str(like.dtype)
        try:
            import torch

            return torch.empty(shape, dtype=getattr(torch, name), device=f"cuda:{dev_id}")
        except ImportError:
            pass
        try:
            import cupy
        except ImportError:
            raise TypeError(
                f"out: cannot allocate the output of a {framework(like)} CUDA array without torch "
                f"or CuPy installed; install one of them or pass out= (and lse=)") from None
        with cupy.cuda.Device(dev_id):
            return cupy.empty(shape, dtype=name)
    raise TypeError(f"q: cannot allocate an output for {type(like).__name__}; pass out=")


def finish(like: Any, x: Any) -> Any:
    """Returns x in like's framework (JAX: zero-copy through DLPack; others: unchanged)."""
    if x is None or framework(like) != "jax" or framework(x) == "jax":
        return x
    import jax.dlpack

    return jax.dlpack.from_dlpack(x)


def stream_handle(stream: Any, like: Any) -> int:
    """The cudaStream_t to launch on, as an int.

    None -> the caller's current stream: torch.cuda.current_stream(device) for torch tensors,
    cupy.cuda.get_current_stream() for CuPy, else 0 (the legacy default stream; JAX users should
    pass stream= or synchronise). An int is a raw handle; objects with __cuda_stream__ (the CUDA
    stream protocol), .cuda_stream (torch.cuda.Stream) or .ptr (cupy Stream) are accepted."""
    if stream is None:
        fw = framework(like)
        if fw == "torch":
            import torch

            return torch.cuda.current_stream(like.device).cuda_stream
        if fw == "cupy":
            import cupy

            return cupy.cuda.get_current_stream().ptr
        return 0
    if isinstance(stream, bool):
        raise TypeError("stream: expected an int handle or a stream object, got bool")
    if isinstance(stream, int):
        return stream
    proto = getattr(stream, "__cuda_stream__", None)
    if proto is not None:
        value = proto() if callable(proto) else proto
        if isinstance(value, tuple):  # (version, handle)
            return int(value[1])
        return int(value)
    for attr in ("cuda_stream", "ptr", "handle"):
        h = getattr(stream, attr, None)
        if isinstance(h, int):
            return h
    raise TypeError(
        f"stream: expected an int handle or an object with __cuda_stream__ / .cuda_stream, "
        f"got {type(stream).__name__}"
    )


def device_index(device: Any) -> Optional[int]:
    """CUDA device index from an int, 'cuda', 'cuda:N', a torch.device or a tensor; None if not
    given."""
    if device is None:
        return None
    if isinstance(device, bool):
        raise TypeError("device: expected an int, 'cuda:N' or a torch.device")
    if isinstance(device, int):
        return device
    if isinstance(device, str):
        if device == "cuda":
            return _current_device()
        if device.startswith("cuda:") and device[5:].isascii() and device[5:].isdigit():
            return int(device[5:])
        raise ValueError(f"device: expected 'cuda' or 'cuda:N', got {device!r}")
    if hasattr(device, "__dlpack_device__"):
        t, i = dlpack_device(device)
        if t != DL_CUDA:
            raise ValueError("device: the tensor is not on a CUDA device")
        return i
    if getattr(device, "type", None) == "cuda":  # torch.device
        return device.index if device.index is not None else _current_device()
    raise TypeError(f"device: expected an int, 'cuda:N' or a torch.device, got {device!r}")


def _current_device() -> int:
    try:
        import torch

        return torch.cuda.current_device()
    except Exception:  # noqa: BLE001 - torch missing or no CUDA: device 0
        return 0
