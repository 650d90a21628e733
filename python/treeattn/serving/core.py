"""ServingCore: treeattn decode for a serving engine, one step at a time.

Per step, on the host: :meth:`ServingCore.prepare` takes the engine's host copies of the block
tables and sequence lengths of the decode rows, brings the prefix tree up to date
(:class:`~treeattn.serving.TreeSync`), plans it, and refreshes the persistent device plan of the
step's graph key in place (``Plan.update``: one host->device copy of the metadata on the
current stream, no synchronization). Per layer: :meth:`ServingCore.decode` runs the plan on the
engine's KV cache into the caller's output buffer, so a step can be captured in a CUDA graph
once and replayed with new metadata. :meth:`ServingCore.prefetch` plans the predictable next
step (every row appends one token into its current page) while the GPU runs this one.

CUDA graphs whose steps' trees cannot be known at capture (a serving engine's): with a graph bound
(``graph_rows`` / ``graph_pages``, or :meth:`ServingCore.set_graph_bound`), every graph step
(``prepare(key=...)``) runs on one device plan shared by all keys and laid out for the bound
(:meth:`treeattn.Plan.reserve`), launched with the grids that bound reserves for the step's row
count (a graph per padded batch size launches only those); a step whose tree plan does not fit
them runs the ``query`` planner's plan, which always fits (``counts["graph_fallback"]``), so a
graph captured once replays every later step of its size within the bound.

Device pages: an engine whose block tables live on the device (vLLM's model runner keeps them
there) hands prepare() host tables in which it marks the pages it has no host copy of (entry -1;
a row's pages from its first -1 on are all read on the device),
with the device tables themselves (``device_block_tables``) and a stable key per row
(``row_keys``, e.g. the engine's request slot). The tree holds each marked page as a label (above
the cache's page ids, one per (key, column)), so it is never shared with another row; after the
plan is installed, the labels' entries of the device plan are filled from the device tables on
the current stream (:meth:`treeattn.Plan`'s resolve, one small kernel: no device-to-host copy).
A page that two rows share physically but one of them knows only on the device is then read once
per row instead of once (missed sharing, never a wrong answer).

KV layouts: separate K and V caches ``[num_pages, page_size, num_kv_heads, head_dim]`` (any
strides with head_dim contiguous), the combined ``[num_pages, 2, page_size, num_kv_heads,
head_dim]`` (v_cache=None), and vLLM's packed per-layer cache ``[num_blocks, num_kv_heads,
block_size, 2 * head_size]`` (K in the first head_size entries of the last dim, V in the rest;
any of vLLM's stride orders) through :func:`split_packed_kv`, which returns strided K/V views
without copying.
"""

from __future__ import annotations

import math
from typing import Any, Dict, Hashable, Optional, Tuple

import numpy as np

import treeattn
from treeattn import Plan, PrefixTree, check_int

from .tree_sync import TreeSync, host_int_array

__all__ = ["ServingCore", "split_packed_kv"]


def split_packed_kv(kv_cache: Any, head_size: int) -> Tuple[Any, Any]:
    """(k_cache, v_cache) views ``[num_blocks, block_size, num_kv_heads, head_size]`` of vLLM's
    packed per-layer cache ``[num_blocks, num_kv_heads, block_size, 2 * head_size]`` (a torch
    tensor; no copy). Raises ValueError naming 'kv_cache' on another shape (TypeError /
    ValueError naming 'head_size' unless it is an int >= 1)."""
    head_size = check_int("head_size", head_size, 1)
    shape = tuple(getattr(kv_cache, "shape", ()))
    if len(shape) != 4 or shape[3] != 2 * head_size:
        raise ValueError(f"kv_cache: expected [num_blocks, num_kv_heads, block_size, "
                         f"2*head_size={2 * head_size}], got shape {shape}")
    kv = kv_cache.transpose(1, 2)
    return kv[..., :head_size], kv[..., head_size:]


class ServingCore:
    """Decode attention of one model (one head configuration) for a serving engine.

    num_qo_heads / num_kv_heads / head_dim: the attention shape; page_size: tokens per KV page;
    num_pages: pages in the cache (0: unknown). device: where decode runs (a torch device or
    'cpu' / 'cuda:N'); on CUDA every graph key keeps a device plan allocated with `headroom`
    and refreshed in place. planner / preset / kv_dtype: treeattn.plan's planner, cost-model
    preset and KV element type (float16 / bfloat16, or an fp8 KV cache: 'fp8_e4m3', 'fp8_e5m2'
    or torch.float8_e4m3fn / float8_e5m2, planned with treeattn.plan(kv_dtype=...); decode()
    then takes the k_scale / v_scale of the layer). pad_page: page read by padding rows
    (length 0). graph_rows / graph_pages: the graph bound (module docstring; 0: none): the most
    rows of a graph step and the most pages of one of its rows.

    Thread safety: not thread-safe. A core is one engine's per-step state (its tree, its plans,
    the graph plan's launch grids): call prepare() and decode() from one thread at a time, as an
    engine's step loop does; use one core per model and attention shape.
    """

    def __init__(self, num_qo_heads: int, num_kv_heads: int, head_dim: int, page_size: int, *,
                 num_pages: int = 0, device: Any = "cpu", planner: str = "auto",
                 preset: str = "h100", kv_dtype: Any = "float16", headroom: float = 2.0,
                 pad_page: int = 0, verify: bool = False, graph_rows: int = 0,
                 graph_pages: int = 0) -> None:
        for name, v in (("num_qo_heads", num_qo_heads), ("num_kv_heads", num_kv_heads),
                        ("head_dim", head_dim)):
            check_int(name, v, 1)
        if num_qo_heads % num_kv_heads:
            raise ValueError(f"num_qo_heads: {num_qo_heads} is not a multiple of num_kv_heads "
                             f"{num_kv_heads}")
        if (isinstance(headroom, bool) or not isinstance(headroom, (int, float))
                or not math.isfinite(headroom) or headroom < 1):
            raise ValueError(f"headroom: expected a finite number >= 1, got {headroom!r}")
        self.shape = (int(num_qo_heads), int(num_kv_heads), int(head_dim))
        self.planner, self.preset, self.kv_dtype = planner, preset, kv_dtype
        # a one-byte KV cache plans with kv_dtype=, a 16-bit one with dtype=
        self._plan_kv = {"kv_dtype" if _is_fp8_name(kv_dtype) else "dtype": kv_dtype}
        # planner, preset and kv_dtype are checked now by planning a one-token tree with them
        # (treeattn.plan's checks and messages), not at the first step
        self._plan(PrefixTree.from_levels("N=1 C=1"))
        self.headroom = float(headroom)
        self.device = _device_of(device)
        self.sync = TreeSync(page_size, num_pages, pad_page=pad_page, verify=verify)
        #: device plan per graph key (CUDA), refreshed in place by prepare()
        self.plans: Dict[Optional[Hashable], Plan] = {}
        #: the plan decode() runs (set by prepare())
        self.plan: Optional[Plan] = None
        self.num_pages = int(num_pages)
        self._ahead = None  # (bt, lens, TreeSync state, plan) of the predicted next step
        self._labeled = False  # the last step had device pages
        self.counts = {"planned_ahead": 0, "graph_fallback": 0, "device_page_steps": 0}
        self._graph_bound = (0, 0)
        #: the device plan every graph step runs when a graph bound is set (made at the first)
        self.graph_plan: Optional[Plan] = None
        self._caps: Dict[int, Any] = {}  # rows of a graph step -> its launch grids
        if graph_rows or graph_pages:
            self.set_graph_bound(graph_rows, graph_pages)

    @property
    def tree(self):
        return self.sync.tree

    @property
    def graph_bound(self) -> Tuple[int, int]:
        """(rows, pages) of the graph bound; (0, 0) when none is set."""
        return self._graph_bound

    def set_graph_bound(self, rows: int, pages: int) -> None:
        """Sets the graph bound: graph steps have at most `rows` rows of at most `pages` pages
        each (ints >= 1). Only before the first graph step (after it, ValueError naming
        'graph_rows' or 'graph_pages', whichever changed; the same bound is accepted)."""
        bound = (check_int("graph_rows", rows, 1), check_int("graph_pages", pages, 1))
        if self.graph_plan is not None and bound != self._graph_bound:
            name = "graph_rows" if bound[0] != self._graph_bound[0] else "graph_pages"
            raise ValueError(f"{name}: the graph plan was laid out for {self._graph_bound} "
                             f"(rows, pages) at the first graph step; got {bound}")
        self._graph_bound = bound

    def _plan(self, tree, headroom: float = 1.0, planner: Optional[str] = None) -> Plan:
        H, Hk, D = self.shape
        return treeattn.plan(tree, H, Hk, D, planner=planner or self.planner, device=self.preset,
                             headroom=headroom, **self._plan_kv)

    def prepare(self, block_tables: Any, seq_lens: Any, key: Optional[Hashable] = None, *,
                device_block_tables: Any = None, row_keys: Any = None) -> bool:
        """Host work of one step: tree update, plan, device metadata refresh.

        block_tables [rows, max_pages] and seq_lens [rows]: host integer arrays (numpy or CPU
        tensors), one row per decode query, in the order of decode()'s q rows; length 0 marks a
        padding row. key: the CUDA-graph key of the step (e.g. its padded row count), or None for
        an eager step. Returns False when the key's device plan had to be (re)allocated (a graph
        captured for that key must be captured again), True otherwise.

        Device pages (module docstring): with ``device_block_tables`` (an int32 tensor [>= rows,
        cols] on the core's device; row r is this step's row r), a row's pages from its first -1
        in block_tables on are read from it at [r, column]; ``row_keys`` ([rows] distinct ints >= 0,
        default the row index) names each row's request across steps. Needs the core's num_pages.
        Errors name 'device_block_tables', 'row_keys' or 'block_tables'."""
        labels = None
        if device_block_tables is not None or row_keys is not None:
            block_tables, labels = self._label(block_tables, seq_lens, device_block_tables,
                                               row_keys)
        elif self.sync.labels_allowed:  # TreeSync takes labels now: check the real ids here
            bt = host_int_array("block_tables", block_tables, 2)
            lens = host_int_array("seq_lens", seq_lens, 1).astype(np.int64)
            if bt.shape[0] == lens.shape[0]:  # else TreeSync names the mismatch
                _pages_inside(bt, lens, self.sync.page_size, self.num_pages)
        if key is not None and self._graph_bound[0]:  # before the tree changes
            self._check_graph_bound(host_int_array("seq_lens", seq_lens, 1))
        new = self._take_ahead(block_tables, seq_lens)
        if new is None:
            new = self._plan(self.sync.update(block_tables, seq_lens))
        fresh = self._install(new, key)
        self._labeled = labels is not None
        if labels is not None:  # on CUDA on torch's current stream, after the plan's upload
            stride, row_of_key, table = labels  # labels start at num_pages, the cache's end
            self.plan.resolve_pages(self.num_pages, stride, row_of_key, table, self.num_pages)
            self.counts["device_page_steps"] += 1
        return fresh

    def device_pages_fit(self, max_key: int, columns: int) -> bool:
        """Whether rows keyed up to `max_key` in device tables of `columns` columns can be
        labelled: every label, num_pages + key x columns + column, below 2^31."""
        return self.num_pages + (int(max_key) + 1) * int(columns) <= 2**31 - 1

    def _label(self, block_tables: Any, seq_lens: Any, table: Any,
               row_keys: Any) -> Tuple[np.ndarray, Optional[tuple]]:
        """block_tables with its device pages replaced by labels, and what resolving them
        needs besides the label base num_pages (key stride, row of each key, the device table);
        None when the step has no -1 entry."""
        if table is None:
            raise ValueError("device_block_tables: row_keys name the rows of device block "
                             "tables; pass those too")
        if self.num_pages <= 0:
            raise ValueError("device_block_tables: device pages are labelled above the cache's "
                             "page ids: make the core with num_pages")
        bt = host_int_array("block_tables", block_tables, 2)
        lens = host_int_array("seq_lens", seq_lens, 1).astype(np.int64)
        rows = lens.shape[0]
        if bt.shape[0] != rows:
            raise ValueError(f"block_tables: {bt.shape[0]} rows, seq_lens has {rows} entries")
        shape = tuple(getattr(table, "shape", ()))
        if len(shape) != 2:
            raise ValueError(f"device_block_tables: expected 2 dims [rows, pages], got shape "
                             f"{shape}")
        if "int32" not in str(getattr(table, "dtype", "")):
            raise TypeError(f"device_block_tables: expected int32, got "
                            f"{getattr(table, 'dtype', type(table).__name__)}")
        dev = getattr(table, "device", None)
        here = self.device
        if self.device.type == "cuda" and self.device.index is None:
            import torch

            here = torch.device("cuda", torch.cuda.current_device())
        if str(dev if dev is not None else "cpu") != str(here):
            raise ValueError(f"device_block_tables: on {dev}, the core decodes on {here}")
        if shape[0] < rows:
            raise ValueError(f"device_block_tables: {shape[0]} rows, the step has {rows}")
        if row_keys is None:
            keys = np.arange(rows, dtype=np.int64)
        else:
            keys = host_int_array("row_keys", row_keys, 1).astype(np.int64)
            if keys.shape[0] != rows:
                raise ValueError(f"row_keys: {keys.shape[0]} entries, the step has {rows} rows")
            if rows and int(keys.min()) < 0:
                raise ValueError(f"row_keys: entry {int(np.argmin(keys))} is negative")
            if np.unique(keys).size != rows:
                raise ValueError("row_keys: two rows have one key")
        base, stride = self.num_pages, int(shape[1])
        if rows and not self.device_pages_fit(int(keys.max()), stride):
            raise ValueError(f"row_keys: labels of key {int(keys.max())} x {stride} columns "
                             f"above num_pages {base} pass 2^31-1")
        out, inside = _pages_inside(bt, lens, self.sync.page_size, base)
        # a row's pages from its first -1 on: the tree needs each row's known pages as a prefix
        unknown = inside & (np.cumsum(out < 0, axis=1) > 0)
        self.sync.allow_labels()
        if not unknown.any():
            return out, None
        r, c = np.nonzero(unknown)
        if int(c.max()) >= stride:
            raise ValueError(f"device_block_tables: {stride} columns, row {int(r[np.argmax(c)])} "
                             f"needs page column {int(c.max())}")
        out[r, c] = base + keys[r] * stride + c
        row_of_key = np.full(int(keys.max()) + 1, -1, dtype=np.int32)
        row_of_key[keys] = np.arange(rows, dtype=np.int32)
        return out, (stride, row_of_key, table)

    def prepare_predicted(self, key: Optional[Hashable] = None) -> Optional[bool]:
        """prepare() for a step the caller knows is exactly the one prefetch() predicted (the same
        rows and block tables as the last step, every row prefetch() grew one token longer, no
        page opened), without handing over or comparing the block tables: the engine's own
        bookkeeping tells it so in O(rows), where building and comparing the tables costs
        O(rows x pages) on the step's critical path. Returns None when no prediction is pending
        (call prepare() with the tables), else what prepare() returns. With sync.verify set the
        prediction is still checked against the tree's own tables."""
        ahead, self._ahead = self._ahead, None
        if ahead is None:
            return None
        if self._labeled:
            raise ValueError("device_block_tables: the last step had device pages, which "
                             "prepare_predicted() cannot read: call prepare() with the tables")
        if key is not None and self._graph_bound[0]:  # before the tree changes
            self._check_graph_bound(np.where(ahead[2][3], 0, ahead[1]))
        return self._install(self._adopt(ahead, ahead[0], ahead[1]), key)

    @property
    def predicted_lens(self) -> Optional[np.ndarray]:
        """The sequence lengths of the pending prediction (prefetch()), or None."""
        if self._ahead is None:
            return None
        return np.where(self._ahead[2][3], 0, self._ahead[1])  # padding rows: 0, as given

    def _install(self, new: Plan, key: Optional[Hashable]) -> bool:
        """Makes `new` the step's plan: on CUDA into the key's device plan, refreshed in place
        when it fits, else allocated with the headroom (then False: a graph captured for the key
        must be captured again)."""
        if key is not None and self._graph_bound[0]:
            return self._install_graph(new)
        if self.device.type != "cuda":
            self.plan = new
            return True
        old = self.plans.get(key)
        if old is not None and old.fits(new):
            self.plan = old.update(new)
            return True
        p = self._plan(self.sync.tree, self.headroom)  # the tree `new` was planned from
        p.to_device(self.device)
        self.plans[key] = self.plan = p
        return old is None and key is None

    def _check_graph_bound(self, lens: np.ndarray) -> None:
        rows, pages = self._graph_bound
        need = int(-(-int(lens.max()) // self.sync.page_size)) if lens.size else 0
        if lens.shape[0] > rows or need > pages:
            raise ValueError(f"block_tables: a graph step of {lens.shape[0]} rows of up to {need} "
                             f"pages is outside the graph bound ({rows} rows, {pages} pages)")

    def _install_graph(self, new: Plan) -> bool:
        """_install() for a graph step: into the shared graph plan (made with the bound at the
        first graph step: then False), or the query planner's plan when `new` does not fit. The
        callers checked the step against the bound (_check_graph_bound)."""
        rows, pages = self._graph_bound
        s = self.sync
        g, fresh = self.graph_plan, self.graph_plan is None
        if fresh:
            g = self._plan(s.tree, self.headroom).reserve(rows, pages, self.preset)
            if self.device.type == "cuda":
                g.to_device(self.device)
            self.graph_plan = g
        # launch grids of a step of n rows: what graph_reserve(n, pages) reserves (every replay
        # of the graph captured for n rows launches them)
        n = int(s._lens.shape[0])
        caps = self._caps.get(n)
        if caps is None:
            caps = self._caps[n] = g.graph_caps(n, pages, self.preset)

        def fits(p: Plan) -> bool:
            return (g.fits(p) and p.num_queries <= caps[1] and
                    all(a <= b for a, b in zip(p.class_items, caps[0])))

        if not fits(new):
            new = self._plan(s.tree, planner="query")
            self.counts["graph_fallback"] += 1
            if not fits(new):  # graph_reserve() bounds the query planner: never expected
                raise RuntimeError("treeattn ServingCore: the query plan of a graph step does "
                                   "not fit the graph layout reserved for it")
        g.set_launch_caps(*caps)
        # on CUDA the shared workspace runs it; on the CPU the graph plan is only the layout
        self.plan = g.update(new) if self.device.type == "cuda" else new
        return not fresh

    def prefetch(self, grow: Any = None) -> bool:
        """Plans the predictable next step now (call it while the GPU runs this one): every row
        (or those where the boolean mask `grow` is set; default: every row that is not padding)
        appends one token into its current page. prepare() then uses this plan when the block
        tables and lengths it gets are exactly the predicted ones. Returns whether a plan was
        made (none when some growing row would open a page)."""
        self._ahead = None
        s = self.sync
        if s.tree is None:
            return False
        bt, lens = s._bt, s._lens
        g = ~s._pad if grow is None else np.asarray(grow)
        if g.dtype != bool:
            raise TypeError(f"grow: expected a boolean mask, got dtype {g.dtype}")
        if g.shape != lens.shape:
            raise ValueError(f"grow: expected {lens.shape[0]} entries, got shape {g.shape}")
        if (lens[g] % s.page_size == 0).any():
            return False
        nxt = lens + g.astype(np.int64)
        state = s.state()
        s.tree = s.tree.copy()
        try:
            tree = s.update(bt, np.where(s._pad, 0, nxt))
            self._ahead = (bt, nxt, s.state(), self._plan(tree))
        finally:
            s.restore(state)
        return True

    def _take_ahead(self, block_tables: Any, seq_lens: Any) -> Optional[Plan]:
        ahead, self._ahead = self._ahead, None
        if ahead is None:
            return None
        bt, lens, _ = self.sync._normalize(block_tables, seq_lens)
        if not (np.array_equal(lens, ahead[1]) and bt.shape == ahead[0].shape
                and np.array_equal(bt, ahead[0])):
            return None
        return self._adopt(ahead, bt, lens)

    def _adopt(self, ahead: tuple, bt: np.ndarray, lens: np.ndarray) -> Plan:
        """Makes the prefetched step current: the tree state it left, checked against (bt, lens)
        under sync.verify; returns its plan."""
        self.sync.restore(ahead[2])
        self.counts["planned_ahead"] += 1
        if self.sync.verify:
            self.sync.check(bt, lens)
        return ahead[3]

    def decode(self, q: Any, k_cache: Any, v_cache: Any = None, out: Any = None,
               sm_scale: Optional[float] = None, k_scale: Any = None,
               v_scale: Any = None) -> Any:
        """Decode attention of this step's plan: q [rows, num_qo_heads, head_dim] -> out (the
        caller's persistent buffer when given). k_scale / v_scale: an fp8 cache's scales (a
        float or a one-element float32 device tensor, as treeattn.decode takes them). Same
        layouts and errors as treeattn.decode."""
        if self.plan is None:
            raise ValueError("plan: no step prepared yet: call prepare() first")
        return treeattn.decode(q, k_cache, v_cache, self.plan, out=out, sm_scale=sm_scale,
                               k_scale=k_scale, v_scale=v_scale)


def _pages_inside(bt: np.ndarray, lens: np.ndarray, page_size: int,
                  num_pages: int) -> Tuple[np.ndarray, np.ndarray]:
    """(bt's columns that some row's pages reach, as int64; the mask of each row's pages in
    them: ceil(len / page_size), none for a padding row); ValueError naming 'block_tables' when
    one of those pages is >= num_pages."""
    need = np.where(lens > 0, (np.maximum(lens, 1) + page_size - 1) // page_size, 0)
    cols = min(int(need.max(initial=0)), bt.shape[1])
    bt = bt[:, :max(cols, 1)].astype(np.int64)
    inside = np.arange(bt.shape[1])[None, :] < need[:, None]
    if (bt[inside] >= num_pages).any():
        r, c = np.argwhere(inside & (bt >= num_pages))[0]
        raise ValueError(f"block_tables: page id {int(bt[r, c])} at [{r}, {c}] out of range "
                         f"[0, {num_pages})")
    return bt, inside


def _is_fp8_name(kv_dtype: Any) -> bool:
    """Whether kv_dtype names an fp8 KV type ('fp8_e4m3', 'fp8_e5m2', 'fp8', or the torch
    dtypes float8_e4m3fn / float8_e5m2)."""
    name = str(kv_dtype).replace("torch.", "")
    return name in ("fp8", "fp8_e4m3", "fp8_e5m2", "float8_e4m3fn", "float8_e5m2")


def _device_of(device: Any):
    import torch

    if isinstance(device, torch.device):
        return device
    if isinstance(device, str):
        try:
            return torch.device(device)
        except RuntimeError as e:
            raise ValueError(f"device: {e}") from None
    if device is None:
        return torch.device("cpu")
    raise TypeError(f"device: expected a torch.device or a string, got {type(device).__name__}")
