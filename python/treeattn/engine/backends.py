"""Decode attention backends over the engine's paged KV cache.

Each step the engine hands a backend a :class:`StepMeta` (per query row: its block table and
sequence length, vLLM style) through :meth:`Backend.prepare`, then calls
:meth:`Backend.attend` once per layer. With CUDA graphs, ``prepare(meta, key)`` must refresh
static device state in place for the graph captured under ``key`` (the padded row count) and
return False when that state had to be rebuilt (capacity exceeded: the engine re-captures).

* ``treeattn``        treeattn.serving.ServingCore (incremental tree from the block tables,
                      treeattn.plan(planner="auto"), decode); graphs through its persistent
                      device plans (plan.to_device() / plan.update()).
* ``treeattn-query``  the same with the query planner (query-centric, same kernels).
* ``flashinfer``      BatchDecodeWithPagedKVCacheWrapper over the same pages (GPU only).
* ``sdpa``            K/V gathered per row into a dense padded tensor + torch SDPA (reference).
* ``none``            no attention (returns q): the upper bound of what attention can cost.

fp8 KV caches (the engine's ``kv_dtype`` 'fp8_e4m3' / 'fp8_e5m2'): every backend runs them.
treeattn plans with ``treeattn.plan(..., kv_dtype=...)`` and passes the layer's device scales
(one-element float32 views) to decode; FlashInfer plans with ``kv_data_type`` = the cache dtype
and takes the layer's scales as host floats in ``run()`` (it folds k_scale into the softmax
scale on the host and multiplies the output by v_scale): the engine's scales are fixed per layer,
so its CUDA graphs stay valid; sdpa dequantizes what it gathers (scale x value in the model's
dtype).
"""

from __future__ import annotations

import inspect
import itertools
import math
from dataclasses import dataclass
from typing import Dict, List, Optional

import numpy as np
import torch
import torch.nn.functional as F

import treeattn
from treeattn.serving import ServingCore

from ._checks import fp8_name, is_fp8
from .kv import dequantize


@dataclass
class StepMeta:
    block_tables: List[List[int]]  # per row: page ids (at least ceil(len / page_size))
    seq_lens: List[int]  # per row: tokens the row attends (its own included)
    page_size: int
    num_pages: int
    row_seqs: Optional[List[int]] = None  # per row: sequence id (-1: padding row)
    new_pages: Optional[List[int]] = None  # per row: page allocated this step for it, or -1
    cow: bool = False  # a copy-on-write (fork) happened this step

    @property
    def rows(self) -> int:
        return len(self.seq_lens)


class Backend:
    name = "?"

    def __init__(self, num_qo_heads: int, num_kv_heads: int, head_dim: int, dtype,
                 device: torch.device, kv_dtype=None):
        self.H, self.Hk, self.D = num_qo_heads, num_kv_heads, head_dim
        self.dtype, self.device = dtype, device
        self.kv_dtype = dtype if kv_dtype is None else kv_dtype
        self.fp8 = is_fp8(self.kv_dtype)
        self.scale = 1.0 / math.sqrt(head_dim)
        # fp8: per-layer scales (device tensors [layers], host floats), from use_scales()
        self.k_scale = self.v_scale = None
        self.k_scale_host: List[float] = []
        self.v_scale_host: List[float] = []

    def use_scales(self, cache) -> None:
        """Takes the KV cache's per-layer fp8 scales (kv.KVCache.k_scale / v_scale and their
        host copies); called by the engine once the cache exists."""
        self.k_scale, self.v_scale = cache.k_scale, cache.v_scale
        self.k_scale_host, self.v_scale_host = cache.k_scale_host, cache.v_scale_host

    def prepare(self, meta: StepMeta, key: Optional[int] = None) -> bool:
        raise NotImplementedError

    def prefetch(self, meta: StepMeta) -> None:
        """Host work for the next step while the GPU runs this one (optional)."""

    def attend(self, layer: int, q: torch.Tensor, kc: torch.Tensor, vc: torch.Tensor):
        raise NotImplementedError


def _cuda_preset(device: torch.device) -> str:
    if device.type != "cuda":
        return "h100"
    name = torch.cuda.get_device_name(device).lower()
    for p in ("h200", "h100", "a100"):
        if p in name:
            return p
    return "h100"


#: Tests set this: after each incremental tree update, compare it with the block tables.
VERIFY_TREE = False


class TreeAttnBackend(Backend):
    """Runs on treeattn.serving.ServingCore, the path the vLLM plugin uses: the core keeps the
    tree in step with the block tables incrementally (TreeSync), plans, and refreshes one device
    plan per graph key in place; prefetch() plans the predictable next step (same rows, one
    token each, no row opening a page) while the GPU runs this one."""

    headroom = 2.0

    def __init__(self, *a, planner: str = "auto", **k):
        super().__init__(*a, **k)
        self.planner = planner
        self.name = "treeattn" if planner == "auto" else f"treeattn-{planner}"
        self.core: Optional[ServingCore] = None
        self.changes, self._prev_rows = 0, None  # consecutive steps that reshaped the batch

    @property
    def tree_updates(self) -> Dict[str, int]:
        c = self.core.sync.counts if self.core is not None else {}
        return {"rebuild": c.get("rebuild", 0),
                "incremental": c.get("incremental", 0) + c.get("unchanged", 0),
                "planned_ahead": self.core.counts["planned_ahead"] if self.core else 0}

    def prepare(self, meta: StepMeta, key: Optional[int] = None) -> bool:
        if self.core is None:
            if self.fp8:
                kv = fp8_name(self.kv_dtype)
            else:
                kv = "float16" if self.kv_dtype == torch.float32 else str(self.kv_dtype)
            self.core = ServingCore(
                self.H, self.Hk, self.D, meta.page_size, num_pages=meta.num_pages,
                device=self.device, planner=self.planner, preset=_cuda_preset(self.device),
                kv_dtype=kv, headroom=self.headroom)
        self.core.sync.verify = VERIFY_TREE
        if self._predicted(meta):
            done = self.core.prepare_predicted(key)
            if done is not None:
                if VERIFY_TREE:  # the tests: the predicted tree against the engine's tables
                    self.core.sync.check_tables(*self._tables(meta))
                return done
        return self.core.prepare(*self._tables(meta), key)

    @staticmethod
    def _tables(meta: StepMeta):
        """The step's block tables [rows, pages] (0 past each row's pages) and lengths (0 for
        padding rows) as arrays. Rows of one sequence hold the same list (a draft chain's rows,
        padding rows): each distinct list is read once, up to the most pages a row of it needs,
        and the rows are gathered from those (W6: 32 lists for 288 rows)."""
        P = meta.page_size
        seq = np.asarray(meta.seq_lens, np.int64)
        counts = (seq + P - 1) // P
        tabs = meta.block_tables
        if len({id(t) for t in tabs}) == meta.rows:  # every row its own list: read as they are
            firsts, need, which = np.arange(meta.rows), counts, None
        else:
            ids = np.fromiter(map(id, tabs), np.uint64, count=meta.rows)
            _, firsts, which = np.unique(ids, return_index=True, return_inverse=True)
            need = np.zeros(firsts.size, np.int64)  # per distinct list: the most pages read
            np.maximum.at(need, which, counts)
        total = int(need.sum())
        flat = np.fromiter(itertools.chain.from_iterable(
            tabs[i][:c] for i, c in zip(firsts.tolist(), need.tolist())), np.int64, count=total)
        cols = int(counts.max())
        bt = np.zeros((firsts.size, cols), np.int64)
        row = np.repeat(np.arange(firsts.size), need)
        col = np.arange(total) - np.repeat(np.cumsum(need) - need, need)
        bt[row, col] = flat
        if which is not None:  # rows of a shared list: 0 past their own pages
            bt = bt[which]
            bt[np.arange(cols)[None, :] >= counts[:, None]] = 0
        rows = meta.row_seqs
        lens = seq if rows is None else np.where(np.asarray(rows) >= 0, seq, 0)
        return bt, lens

    def _predicted(self, meta: StepMeta) -> bool:
        """True when this step is the one the last prefetch() predicted: the same rows (same
        sequences, so the same block tables, no copy-on-write, no page allocated) with the
        lengths prefetch() planned for. O(rows), no block-table work."""
        ahead = self.core.predicted_lens
        if (ahead is None or meta.cow or meta.row_seqs is None or meta.row_seqs != self._prev_rows
                or any(p >= 0 for p in meta.new_pages) or len(meta.seq_lens) != len(ahead)):
            return False
        return all(n == int(a) or (s < 0 and a == 0)
                   for n, a, s in zip(meta.seq_lens, ahead, meta.row_seqs))

    def prefetch(self, meta: StepMeta) -> None:
        rows = meta.row_seqs
        self.changes = (self.changes + 1) if meta.cow or rows != self._prev_rows else 0
        self._prev_rows = rows
        if self.core is not None and rows is not None and self.changes < 2:
            self.core.prefetch()  # (every step reshapes the batch, e.g. beams: no use trying)

    def attend(self, layer, q, kc, vc):
        if self.fp8:
            return self.core.decode(q, kc, vc, k_scale=self.k_scale[layer:layer + 1],
                                    v_scale=self.v_scale[layer:layer + 1])
        return self.core.decode(q, kc, vc)


class SdpaBackend(Backend):
    """Gathers each row's K/V into [rows, L, kv_heads, D] (L = longest row, or a fixed capacity
    under CUDA graphs) and runs torch SDPA with a padding mask. Slow by design: the reference."""

    name = "sdpa"

    def __init__(self, *a, **k):
        super().__init__(*a, **k)
        self.bufs: Dict[Optional[int], dict] = {}
        self.cur = None

    def prepare(self, meta: StepMeta, key: Optional[int] = None) -> bool:
        P = meta.page_size
        npages = max((n + P - 1) // P for n in meta.seq_lens)
        bt = np.zeros((meta.rows, npages), dtype=np.int64)
        for r, (t, n) in enumerate(zip(meta.block_tables, meta.seq_lens)):
            m = (n + P - 1) // P
            bt[r, :m] = t[:m]
        lens = torch.tensor(meta.seq_lens, dtype=torch.int64)
        ok = True
        b = self.bufs.get(key)
        if key is None or b is None or b["bt"].shape[1] < npages or b["bt"].shape[0] != meta.rows:
            cap = npages if key is None else (npages + 63) // 64 * 64
            b = {"bt": torch.zeros((meta.rows, cap), dtype=torch.int64, device=self.device),
                 "lens": torch.zeros(meta.rows, dtype=torch.int64, device=self.device)}
            self.bufs[key] = b
            ok = key is None
        b["bt"].zero_()
        b["bt"][:, :npages].copy_(torch.from_numpy(bt))
        b["lens"].copy_(lens)
        self.cur = b
        return ok

    def attend(self, layer, q, kc, vc):
        b = self.cur
        P = kc.shape[1]
        cap = b["bt"].shape[1] * P
        pos = torch.arange(cap, device=q.device)
        idx = b["bt"][:, pos // P] * P + pos % P  # [T, L] flat slots
        mask = pos[None, :] < b["lens"][:, None]  # [T, L]
        kf = kc.reshape(-1, self.Hk, self.D)
        vf = vc.reshape(-1, self.Hk, self.D)
        if self.fp8:  # gather the bytes, dequantize: scale x value in q's dtype
            k = dequantize(kf.view(torch.uint8)[idx].view(kc.dtype), q.dtype, self.k_scale[layer])
            v = dequantize(vf.view(torch.uint8)[idx].view(vc.dtype), q.dtype, self.v_scale[layer])
        else:
            k, v = kf[idx], vf[idx]
        k = k.transpose(1, 2)  # [T, Hk, L, D]
        v = v.transpose(1, 2)
        g = self.H // self.Hk
        k = k.repeat_interleave(g, dim=1) if g > 1 else k
        v = v.repeat_interleave(g, dim=1) if g > 1 else v
        o = F.scaled_dot_product_attention(q[:, :, None, :], k, v,
                                           attn_mask=mask[:, None, None, :], scale=self.scale)
        return o[:, :, 0, :]


class FlashInferBackend(Backend):
    """FlashInfer's paged decode over the same pages (NHD). CUDA graphs: one wrapper per key
    with fixed index buffers (use_cuda_graph=True); plan() refreshes them before replay."""

    name = "flashinfer"

    def __init__(self, *a, **k):
        super().__init__(*a, **k)
        import flashinfer  # noqa: F401  (ImportError -> backend unavailable)

        self.fi = flashinfer
        self.ws = torch.zeros(256 << 20, dtype=torch.uint8, device=self.device)
        self.wrappers: Dict[Optional[int], tuple] = {}
        self.cur = None

    def prepare(self, meta: StepMeta, key: Optional[int] = None) -> bool:
        P = meta.page_size
        counts = [(n + P - 1) // P for n in meta.seq_lens]
        indptr = np.zeros(meta.rows + 1, dtype=np.int32)
        np.cumsum(counts, out=indptr[1:])
        indices = np.fromiter(itertools.chain.from_iterable(
            t[:c] for t, c in zip(meta.block_tables, counts)), dtype=np.int32,
            count=int(indptr[-1]))
        last = np.array([n - (c - 1) * P for n, c in zip(meta.seq_lens, counts)], np.int32)
        dev = self.device
        ok = True
        w = self.wrappers.get(key)
        if key is None:
            if w is None:
                w = (self.fi.BatchDecodeWithPagedKVCacheWrapper(self.ws, "NHD",
                                                                use_tensor_cores=True), 0)
                self.wrappers[key] = w
        elif w is None or w[1] < len(indices):
            cap = max(1024, 1 << (len(indices) - 1).bit_length())
            w = (self.fi.BatchDecodeWithPagedKVCacheWrapper(
                self.ws, "NHD", use_cuda_graph=True, use_tensor_cores=True,
                paged_kv_indptr_buffer=torch.empty(meta.rows + 1, dtype=torch.int32, device=dev),
                paged_kv_indices_buffer=torch.empty(cap, dtype=torch.int32, device=dev),
                paged_kv_last_page_len_buffer=torch.empty(meta.rows, dtype=torch.int32,
                                                          device=dev)), cap)
            self.wrappers[key] = w
            ok = False
        w[0].plan(torch.from_numpy(indptr).to(dev), torch.from_numpy(indices).to(dev),
                  torch.from_numpy(last).to(dev), self.H, self.Hk, self.D, P,
                  pos_encoding_mode="NONE", q_data_type=self.dtype, kv_data_type=self.kv_dtype)
        self.cur = w[0]
        return ok

    def attend(self, layer, q, kc, vc):
        if self.fp8:  # host scales (FlashInfer's run() takes floats; fixed per layer here)
            return self.cur.run(q, (kc, vc), k_scale=self.k_scale_host[layer],
                                v_scale=self.v_scale_host[layer])
        return self.cur.run(q, (kc, vc))


class NoAttnBackend(Backend):
    """Skips attention (returns q): decode time without attention, the upper bound."""

    name = "none"

    def prepare(self, meta, key=None):
        return True

    def attend(self, layer, q, kc, vc):
        return q


BACKENDS = ["treeattn", "treeattn-query", "flashinfer", "sdpa", "none"]


def available(name: str, device: torch.device) -> Optional[str]:
    """None when the backend can run here, else why not."""
    if name == "flashinfer":
        if device.type != "cuda":
            return "flashinfer needs a CUDA device"
        try:
            import flashinfer  # noqa: F401
        except Exception as e:  # noqa: BLE001
            return f"flashinfer not importable ({type(e).__name__}: {e})"
    if name.startswith("treeattn") and device.type == "cuda" and not treeattn.built_with_cuda:
        return "treeattn was built without CUDA"
    return None


def treeattn_has_fp8() -> bool:
    """Whether this treeattn's Python API takes fp8 KV caches (plan(kv_dtype=...) and decode's
    k_scale / v_scale)."""
    try:
        return ("kv_dtype" in inspect.signature(treeattn.plan).parameters
                and "k_scale" in inspect.signature(treeattn.decode).parameters)
    except (TypeError, ValueError):
        return False


def kv_support(name: str, kv_dtype, dtype=None) -> Optional[str]:
    """None when backend `name` can run a KV cache of `kv_dtype` for a model in `dtype`, else
    why not (fp8 on a treeattn without the fp8 API, or with float32 queries: treeattn's fp8 path
    takes float16 / bfloat16 ones)."""
    if not is_fp8(kv_dtype) or not name.startswith("treeattn"):
        return None
    if not treeattn_has_fp8():
        return (f"{fp8_name(kv_dtype)} KV cache: this treeattn has no fp8 API "
                f"(treeattn.plan(kv_dtype=...), decode(k_scale=, v_scale=)); backend {name!r}")
    if dtype is not None and dtype not in (torch.float16, torch.bfloat16):
        return (f"{fp8_name(kv_dtype)} KV cache with backend {name!r} needs a float16 or "
                f"bfloat16 model (queries), got {dtype}")
    return None


def check_name(name: str) -> str:
    """A backend name: one of BACKENDS, or 'treeattn-<planner>' for any treeattn planner."""
    if not isinstance(name, str):
        raise TypeError(f"backend: expected a backend name, got {type(name).__name__}")
    if name not in BACKENDS and not (name.startswith("treeattn-")
                                     and name[len("treeattn-"):] in treeattn.planners()):
        raise ValueError(f"backend: unknown {name!r}, expected one of {BACKENDS} or "
                         f"treeattn-<planner> (planners: {treeattn.planners()})")
    return name


def make_backend(name: str, num_qo_heads: int, num_kv_heads: int, head_dim: int, dtype,
                 device, kv_dtype=None) -> Backend:
    """The backend `name` (see check_name); kv_dtype: the KV cache's dtype (default dtype)."""
    check_name(name)
    device = torch.device(device)
    args = (num_qo_heads, num_kv_heads, head_dim)
    kw = {"dtype": dtype, "device": device, "kv_dtype": kv_dtype}
    if name == "treeattn":
        return TreeAttnBackend(*args, planner="auto", **kw)
    if name.startswith("treeattn-"):
        return TreeAttnBackend(*args, planner=name[len("treeattn-"):], **kw)
    if name == "sdpa":
        return SdpaBackend(*args, **kw)
    if name == "flashinfer":
        return FlashInferBackend(*args, **kw)
    return NoAttnBackend(*args, **kw)
