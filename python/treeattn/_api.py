"""treeattn's Python API: plan() (host planning), the Plan object (plan once, run per layer;
lazily allocated device workspace), decode() (CUDA kernels or the CPU executor, through DLPack)
and reference() (the float64 oracle)."""

from __future__ import annotations

import itertools
import math
import weakref
from typing import Any, Optional, Sequence, Tuple, Union

import numpy as np

from . import _frameworks as fw
from . import _treeattn as _ext
from ._treeattn import DeviceInfo, PrefixTree

_handles = itertools.count(1)
#: Live plans by handle (torch custom ops take the int handle, not the object).
_PLANS: "weakref.WeakValueDictionary[int, Plan]" = weakref.WeakValueDictionary()


def scale_arg(sm_scale: Any) -> Optional[float]:
    """sm_scale as the extension takes it: None (1/sqrt(head_dim)) or a float; the extension
    checks that a given value is finite and > 0."""
    if sm_scale is None:
        return None
    if isinstance(sm_scale, bool) or not isinstance(sm_scale, (int, float, np.integer,
                                                               np.floating)):
        raise TypeError(f"sm_scale: expected a float or None, got {type(sm_scale).__name__}")
    return float(sm_scale)


#: kv_dtype spellings accepted by plan(): None / 'same' (or q's 2-byte dtypes), the fp8 names and
#: the frameworks' fp8 dtype names.
_KV_DTYPE_NAMES = {"same": 0, "float16": 0, "bfloat16": 0, "fp8_e4m3": 1, "fp8_e5m2": 1,
                   "float8_e4m3fn": 1, "float8_e5m2": 1}


def kv_dtype_bytes_arg(kv_dtype: Any) -> int:
    """PlanOptions::kv_dtype_bytes of plan()'s kv_dtype: 1 for an fp8 cache ('fp8_e4m3',
    'fp8_e5m2', torch.float8_e4m3fn, torch.float8_e5m2), 0 (= the dtype's) for None / 'same'."""
    if kv_dtype is None:
        return 0
    name = kv_dtype if isinstance(kv_dtype, str) else str(kv_dtype).replace("torch.", "")
    if name not in _KV_DTYPE_NAMES:
        raise ValueError(f"kv_dtype: expected None, 'same', 'fp8_e4m3', 'fp8_e5m2', "
                         f"torch.float8_e4m3fn or torch.float8_e5m2, got {kv_dtype!r}")
    return _KV_DTYPE_NAMES[name]


def kv_scale_arg(name: str, scale: Any, kv_like: Any,
                 stream: int = 0) -> Tuple[Optional[float], Any]:
    """An fp8 cache's k_scale / v_scale as the extension takes it: (float, None) for a Python
    number (finite and > 0, else ValueError naming it), (None, array) for a 1-element float32
    array (checked by the extension; on a GPU read at run time, so a captured CUDA graph replays
    with the value it holds then). A float != 1 for a CUDA cache becomes a device tensor here
    (torch.full: a fill kernel, allowed during graph capture, with the value baked in)."""
    if scale is None:
        return None, None
    if hasattr(scale, "__dlpack__") or isinstance(scale, np.ndarray):
        return None, fw.detach(scale)
    if isinstance(scale, bool) or not isinstance(scale, (int, float, np.integer, np.floating)):
        raise TypeError(f"{name}: expected a float, a 1-element float32 tensor or None, got "
                        f"{type(scale).__name__}")
    value = float(scale)
    f32 = np.finfo(np.float32)
    if not (math.isfinite(value) and float(f32.tiny) <= value <= float(f32.max)):
        raise ValueError(f"{name}: must be finite and > 0 in float32, got {scale!r}")
    if fw.dlpack_device(kv_like)[0] != fw.DL_CUDA or value == 1.0:
        return value, None
    if fw.framework(kv_like) != "torch":
        raise TypeError(f"{name}: with a non-torch CUDA cache pass the scale as a 1-element "
                        f"float32 array on its device")
    import torch

    def full():
        return torch.full((1,), value, dtype=torch.float32, device=kv_like.device)

    if stream in (0, torch.cuda.current_stream(kv_like.device).cuda_stream):
        return None, full()
    # made on the launch stream, so that the fill runs before the kernels and the allocator reuses
    # its memory only after them
    with torch.cuda.stream(torch.cuda.ExternalStream(stream, device=kv_like.device)):
        return None, full()


def _kv_caches(k_cache: Any, v_cache: Any) -> Tuple[Any, Any, int]:
    """(k_cache, v_cache, kv_dtype code): fp8 caches as their uint8 views with code 1 (e4m3) or 2
    (e5m2), others unchanged with 0. TypeError naming v_cache when its dtype is not k_cache's,
    naming k_cache for another float8 type."""
    kname = fw.dtype_name(k_cache)
    if v_cache is not None and fw.dtype_name(v_cache) != kname and (
            kname in fw.FP8_KV_DTYPES or fw.dtype_name(v_cache) in fw.FP8_KV_DTYPES):
        raise TypeError(f"v_cache: expected the dtype of k_cache ({kname}), got "
                        f"{fw.dtype_name(v_cache)}")
    if kname.startswith("float8") and kname not in fw.FP8_KV_DTYPES:
        raise TypeError(f"k_cache: unsupported KV dtype {kname} (fp8 caches: float8_e4m3fn or "
                        f"float8_e5m2)")
    if kname not in fw.FP8_KV_DTYPES:
        return k_cache, v_cache, 0
    code = fw.FP8_KV_DTYPES[kname][1]
    k8 = fw.fp8_bytes_view("k_cache", k_cache)
    v8 = None if v_cache is None else fw.fp8_bytes_view("v_cache", v_cache)
    return k8, v8, code


def _check_fresh(p: "Plan", what: str = "plan") -> None:
    """Refuses a plan whose tree changed since planning (decode would attend the old context)."""
    ref, version = getattr(p, "_made_from", (None, None))
    tree = ref() if ref is not None else None
    if tree is not None and tree.version != version:
        raise ValueError(
            f"{what}: stale: made from version {version} of its tree, which is now at "
            f"version {tree.version} (append_tokens / add_query / remove_query / fork_query "
            f"since); plan again: treeattn.plan(tree, ..., reuse={what})")


def plan_from_handle(handle: int) -> "Plan":
    """The live Plan with this handle (used by treeattn.torch_ops)."""
    try:
        return _PLANS[handle]
    except KeyError:
        raise ValueError(f"plan: no live treeattn.Plan with handle {handle}") from None


class Plan(_ext.Plan):
    """A plan for one decode step: work items over the tree's KV, reused by every layer.

    Made by :func:`treeattn.plan`. The host plan is computed once; the first GPU
    :func:`treeattn.decode` (or :meth:`to_device`) allocates the device workspace on the tensor's
    device and uploads the metadata on the stream; later calls only launch kernels, so they can
    be captured in a CUDA graph once the workspace exists. ``stats()`` gives the plan statistics,
    ``update(new_plan)`` refreshes the metadata in place (see its docstring). ``planner`` is the
    planner asked for, ``chosen_planner`` the one whose plan this is (for 'auto': 'auto' or the
    candidate it picked, e.g. 'fasttree').

    Threads: every decode runs one immutable snapshot of the plan, so any number of threads may
    decode it while another calls update() (docs/python.md, "Thread safety").
    """

    handle: int

    def __init__(self, tree: PrefixTree, planner: str, num_qo_heads: int, num_kv_heads: int,
                 head_dim: int, dtype_bytes: int, device_info: DeviceInfo,
                 headroom: float, kv_dtype_bytes: int = 0, paths_group: int = 0) -> None:
        super().__init__(tree, planner, num_qo_heads, num_kv_heads, head_dim, dtype_bytes,
                         device_info, headroom, kv_dtype_bytes, paths_group)
        #: The tree planned (weak) and its version then, as one attribute so that a thread
        #: reading it while another update()s the plan sees a matching pair: decode() and
        #: update() refuse the plan once the tree changed.
        self._made_from = (weakref.ref(tree), self.tree_version)
        self.handle = next(_handles)
        _PLANS[self.handle] = self

    def to_device(self, device: Any = None, stream: Any = None) -> "Plan":
        """Allocates the device workspace and uploads the metadata now (before CUDA-graph capture).

        device: int, 'cuda', 'cuda:N', torch.device or a tensor (default: the current device).
        stream: int handle or stream object (default: torch's current stream on that device when
        torch is installed, else 0). Returns self."""
        idx = fw.device_index(device if device is not None else "cuda")
        self._to_device(idx, _default_stream(stream, idx))
        return self

    def reserve(self, rows: int, pages_per_row: int,
                device: Union[str, DeviceInfo] = "h200") -> "Plan":
        """Sizes the device layout for CUDA-graph steps (before the first GPU use).

        Afterwards every plan of the ``query`` planner (made with the same heads and `device`
        preset) over at most `rows` queries whose root paths hold at most `pages_per_row` pages
        each, every node starting on a page boundary (as the trees of block tables and
        TreeSync's do), fits this plan's layout, so update() always takes it; tree plans fit within a budget
        of 8 rows and merge slots per query and two waves of grouped CTAs (fits() says). The
        workspace grows by about rows x pages_per_row x 20 bytes of metadata (a range and a page
        id per page entry) plus 8 x rows partial slots (num_qo_heads x head_dim floats each). TypeError / ValueError naming
        'rows' / 'pages_per_row' (ints >= 1) or 'device'; ValueError naming 'plan' once the
        workspace exists. Returns self."""
        self._reserve(rows, pages_per_row, device)
        return self

    def graph_caps(self, rows: int, pages_per_row: int,
                   device: Union[str, DeviceInfo] = "h200") -> tuple:
        """The launch grids reserve(rows, pages_per_row, device) keeps for a step of `rows` rows:
        (items per tile class [M16, M64, M128], queries). Every ``query``-planner plan of such a
        step is within them (see reserve()). Same errors as reserve()."""
        items, queries = self._graph_caps(rows, pages_per_row, device)
        return list(items), int(queries)

    def set_launch_caps(self, class_items: Optional[Sequence[int]] = None,
                        queries: Optional[int] = None) -> "Plan":
        """Launch the next decodes of this plan with CTAs for at most class_items[c] items of tile
        class c and merge CTAs for at most `queries` queries (e.g. graph_caps(n, ...) for a CUDA
        graph of n rows, so it does not launch the whole workspace's grids); -1 keeps a class at
        the layout's capacity; None (the default) resets every grid. A decode whose plan has more
        items or queries than the caps raises ValueError naming 'args.launch_class_items' /
        'args.launch_queries'; a captured graph keeps the grids of its capture, so keep every plan
        you update() into it within them. The caps are state of this Plan object, read by every
        later decode of it from any thread: set them where that plan's decodes are issued.
        Returns self."""
        self._set_launch_caps(None if class_items is None else list(class_items),
                              None if class_items is None else queries)
        return self

    def update(self, new: "Plan", stream: Any = None) -> "Plan":
        """Makes this plan run `new` (a plan for a later step, same heads/head_dim/page size).

        Before first GPU use it simply adopts `new`. Once on a device it re-uploads the metadata
        into the existing workspace (cudaMemcpyAsync on `stream`, ordered after earlier kernels
        on that stream), so buffers and captured CUDA graphs stay valid. That needs `new` to fit
        the layout: make the first plan with headroom > 1 (e.g. plan(..., headroom=1.5)) and
        check with fits(). Raises ValueError naming 'plan' when it does not fit. Do not call it
        while a graph is being captured (the upload is a host->device copy). A CPU decode running
        on another thread meanwhile finishes on the plan it started with. Returns self."""
        if not isinstance(new, _ext.Plan):
            raise TypeError(f"plan: expected a treeattn.Plan, got {type(new).__name__}")
        _check_fresh(new, "new")
        idx = self.device_index
        self._update(new, _default_stream(stream, idx) if idx is not None else 0)
        self._made_from = getattr(new, "_made_from", (None, None))
        return self

    def resolve_pages(self, label_base: int, key_stride: int, row_of_key: Any, table: Any,
                      num_pages: int, stream: Any = None) -> "Plan":
        """Fills the plan's page labels from an engine's block tables (ServingCore's device
        pages). Every page id >= label_base, label_base + key * key_stride + col, becomes
        table[row_of_key[key], col]: `table` an int32 [rows, cols] array, `row_of_key` ints (-1:
        no row); an id outside [0, num_pages) is read as page 0. With a device workspace: in it,
        on `stream` (default: torch's current stream), by one small kernel ordered after the
        last update's upload, without a host copy of `table` (a CUDA array on the workspace's
        device); a GPU decode then runs the state resolved, and refuses a later state with
        labels until it is resolved too. Without one: in the host plan (`table` on the CPU).
        Errors name 'label_base', 'row_of_key', 'table' or 'num_pages'. Returns self."""
        keys = np.asarray(row_of_key)
        if keys.dtype.kind not in "iu" or keys.ndim != 1:
            raise TypeError(f"row_of_key: expected a 1-D integer array, got {keys.dtype} with "
                            f"shape {keys.shape}")
        if keys.size and (int(keys.min()) < -1 or int(keys.max()) > 2**31 - 1):
            raise ValueError("row_of_key: entries must lie in [-1, 2^31-1]")
        keys = np.ascontiguousarray(keys, dtype=np.int32)
        idx = self.device_index
        self._resolve_pages(int(label_base), int(key_stride), keys, table, int(num_pages),
                            _default_stream(stream, idx) if idx is not None else 0)
        return self

    def __repr__(self) -> str:
        return (f"Plan(planner={self.planner!r}, chosen_planner={self.chosen_planner!r}, "
                f"queries={self.num_queries}, "
                f"items={self.num_items}, heads={self.num_qo_heads}/{self.num_kv_heads}, "
                f"head_dim={self.head_dim}, device_index={self.device_index})")


def _default_stream(stream: Any, device: Optional[int]) -> int:
    if stream is not None:
        return fw.stream_handle(stream, None)
    try:
        import torch

        if device is not None and torch.cuda.is_available():
            return torch.cuda.current_stream(device).cuda_stream
    except ImportError:
        pass
    return 0


def _dtype_bytes(dtype: Any) -> int:
    name = str(dtype).replace("torch.", "")
    if name in ("float16", "fp16", "half", "bfloat16", "bf16"):
        return 2
    if name in ("float32", "fp32", "float"):
        return 4
    raise ValueError(f"dtype: expected float16, bfloat16 or float32, got {dtype!r}")


def plan(tree: PrefixTree, num_qo_heads: Optional[int] = None,
         num_kv_heads: Optional[int] = None, head_dim: Optional[int] = None,
         planner: str = "auto", device: Union[str, DeviceInfo] = "h200", *,
         dtype: Any = "float16", headroom: float = 1.0, reuse: Optional[Plan] = None,
         stream: Any = None, kv_dtype: Any = None, paths_group: int = 0) -> Plan:
    """Plans one decode step over `tree` on the host.

    Heads and head_dim default to the tree's shape (JSON / workload line), else 32/8/128.
    planner: one of treeattn.planners() ('auto' by default). device: a preset name ('a100',
    'h100', 'h200') or a DeviceInfo for the cost model (planning never touches a GPU).
    dtype: q/out element type (cost model only). kv_dtype: None (the default, K/V like dtype),
    'fp8_e4m3' / 'fp8_e5m2' or torch.float8_e4m3fn / torch.float8_e5m2 for an fp8 KV cache (1 byte
    per element: decode() then needs fp8 caches, and refuses them with a plan made without it).
    paths_group: most queries per group of the 'paths' and 'paths-split' planners, also where 'auto'
    scores them (0, the default, lets the cost model choose; 1 to 64 fixes it, lowered to what the
    head group allows: 128 packed rows).
    headroom >= 1 sizes the device layout up so later,
    larger plans can be update()d into the same workspace. reuse: an earlier Plan to refresh in
    place (reuse.update(new plan, stream)); it is returned instead of a new object.
    """
    if not isinstance(tree, PrefixTree):
        raise TypeError(f"tree: expected a treeattn.PrefixTree, got {type(tree).__name__}")
    shape = tree.shape
    qo = num_qo_heads if num_qo_heads is not None else (shape[0] or 32)
    kv = num_kv_heads if num_kv_heads is not None else (shape[1] or 8)
    dim = head_dim if head_dim is not None else (shape[2] or 128)
    if not isinstance(headroom, (int, float, np.floating)) or isinstance(headroom, bool):
        raise TypeError(f"headroom: expected a float, got {type(headroom).__name__}")
    if not isinstance(planner, str):
        raise TypeError(f"planner: expected a str, got {type(planner).__name__}")
    info = DeviceInfo.preset(device) if isinstance(device, str) else device
    if not isinstance(info, DeviceInfo):
        raise TypeError(f"device: expected a preset name or DeviceInfo, got {type(device).__name__}")
    if reuse is not None and not isinstance(reuse, _ext.Plan):
        raise TypeError(f"reuse: expected a treeattn.Plan or None, got {type(reuse).__name__}")
    p = Plan(tree, planner, qo, kv, dim, _dtype_bytes(dtype), info, headroom,
             kv_dtype_bytes_arg(kv_dtype), paths_group)
    if reuse is not None:
        return reuse.update(p, stream)
    return p


def decode(q: Any, k_cache: Any, v_cache: Any, plan: Plan, out: Any = None,
           return_lse: bool = False, *, lse: Any = None, stream: Any = None,
           sm_scale: Optional[float] = None, k_scale: Any = None, v_scale: Any = None) -> Any:
    """Tree attention for one decode step: out[q] = softmax(q K^T * scale) V over the KV on
    query q's root path.

    q: [num_queries, num_qo_heads, head_dim]. k_cache, v_cache: [num_pages, page_size,
    num_kv_heads, head_dim] each, or v_cache=None and k_cache the combined vLLM/FlashInfer layout
    [num_pages, 2, page_size, num_kv_heads, head_dim]. Any DLPack tensor (torch, CuPy, JAX),
    zero-copy. CUDA tensors (float16 / bfloat16, head_dim contiguous, strides multiples of 8) run
    the CUDA kernels on `stream` (default: the caller's current stream, see
    _frameworks.stream_handle); CPU arrays (numpy, torch CPU; any float dtype) run the float32
    CPU executor. out: optional preallocated output (q's shape and dtype). return_lse: also return
    the float32 log-sum-exp [num_queries, num_qo_heads] (natural log of the softmax denominator
    over the scaled logits); lse= passes a preallocated one. sm_scale: None (the default) means
    1/sqrt(head_dim); a given value must be finite and > 0.

    fp8 KV cache: k_cache / v_cache of torch.float8_e4m3fn or torch.float8_e5m2 (numpy: the
    ml_dtypes types), both the same dtype, q float16 / bfloat16, a plan made with
    plan(..., kv_dtype='fp8_e4m3' or 'fp8_e5m2'). K = k_scale x stored value, V = v_scale x stored
    value; each scale None (1), a float (finite, > 0) or a 1-element float32 tensor on the caches'
    device, which the GPU kernels read at run time (a captured CUDA graph replays with the value it
    holds then). The CPU executor dequantizes only the pages the plan reads. docs/fp8.md.

    Returns out, or (out, lse). Raises ValueError / TypeError naming the bad argument.
    """
    if not isinstance(plan, _ext.Plan):
        raise TypeError(f"plan: expected a treeattn.Plan, got {type(plan).__name__}")
    _check_fresh(plan)
    for name, x in (("q", q), ("k_cache", k_cache), ("v_cache", v_cache), ("out", out),
                    ("lse", lse)):
        if ((x is not None or name in ("q", "k_cache")) and not hasattr(x, "__dlpack__")
                and not isinstance(x, np.ndarray)):
            raise TypeError(f"{name}: expected a DLPack array (torch, CuPy, JAX, numpy), got "
                            f"{type(x).__name__}")
        fw.check_array(name, x, writable=name in ("out", "lse"))
    if not isinstance(return_lse, (bool, np.bool_)):
        raise TypeError(f"return_lse: expected a bool, got {type(return_lse).__name__}")
    q, k_cache, v_cache = fw.detach(q), fw.detach(k_cache), fw.detach(v_cache)
    out, lse = fw.detach(out), fw.detach(lse)
    k_cache, v_cache, kv_code = _kv_caches(k_cache, v_cache)
    q_in = q
    if fw.framework(q) == "numpy":
        q, k_cache, v_cache = (fw.as_numpy_input(x) for x in (q, k_cache, v_cache))
    dev_type, _ = fw.dlpack_device(q)
    if out is None:
        out = fw.empty(q_in, tuple(q.shape))
        out_alloc = out
    else:
        out_alloc = None
    want_lse = return_lse or lse is not None
    if want_lse and lse is None:
        lse = fw.empty(q, (int(q.shape[0]), int(q.shape[1])), float32=True)
    # a given stream is checked on the CPU too (where it is not used)
    handle = fw.stream_handle(stream, q) if dev_type == fw.DL_CUDA or stream is not None else 0
    ks_value, ks_array = kv_scale_arg("k_scale", k_scale, k_cache, handle)
    vs_value, vs_array = kv_scale_arg("v_scale", v_scale, k_cache, handle)
    target = out
    if fw.framework(out) == "numpy" and out.dtype.name == "bfloat16":
        target = np.empty(out.shape, np.float32)  # q was widened to float32 above
    _ext.decode(plan, q, k_cache, v_cache, target, lse, handle, scale_arg(sm_scale), kv_code,
                ks_value, vs_value, ks_array, vs_array)
    if target is not out:
        out[...] = target.astype(out.dtype)
    if out_alloc is not None:
        out = fw.finish(q_in, out)
    if want_lse:
        return out, fw.finish(q_in, lse)
    return out


def reference(tree: PrefixTree, q: Any, k_cache: Any, v_cache: Any = None,
              queries: Optional[Sequence[int]] = None,
              sm_scale: Optional[float] = None) -> Tuple[np.ndarray, np.ndarray]:
    """Float64 oracle, independent of any plan: each query's root path expanded into one dense
    KV sequence. CPU arrays only (numpy or anything with __array__ / DLPack on the CPU); the same
    layouts as decode(). queries limits the work to a sample (other rows are NaN). sm_scale as in
    decode().
    Returns (out float64 [num_queries, num_qo_heads, head_dim], lse float64 [num_queries,
    num_qo_heads])."""
    if not isinstance(tree, PrefixTree):
        raise TypeError(f"tree: expected a treeattn.PrefixTree, got {type(tree).__name__}")
    for name, x in (("k_cache", k_cache), ("v_cache", v_cache)):
        if fw.dtype_name(x).startswith("float8"):
            raise TypeError(f"{name}: reference() takes the dequantized values of an fp8 cache "
                            f"(e.g. {name}.float() * scale), got {fw.dtype_name(x)}")
    q, k_cache, v_cache = (fw.as_numpy_input(fw.detach(x)) for x in (q, k_cache, v_cache))
    shape = getattr(q, "shape", None)
    if shape is None or len(shape) != 3:
        raise ValueError(f"q: expected 3 dims [num_queries, num_qo_heads, head_dim], got "
                         f"{tuple(shape) if shape is not None else type(q).__name__}")
    out = np.full((int(shape[0]), int(shape[1]), int(shape[2])), np.nan)
    lse = np.full((int(shape[0]), int(shape[1])), np.nan)
    _ext.reference(tree, q, k_cache, v_cache, [] if queries is None else queries, out, lse,
                   scale_arg(sm_scale))
    return out, lse
