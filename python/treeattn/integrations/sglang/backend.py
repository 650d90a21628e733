"""TreeAttnBackend: SGLang 0.5.23's attention-backend interface over treeattn.serving.

What runs where, per forward batch:
* DECODE batches (one new token per request): treeattn. init_forward_metadata reads the batch's
  rows of SGLang's ``req_to_token`` table (token slots; requests that share a cached prefix hold
  the same slots) and hands them to the serving core: page p of a row is ``slot // page_size`` of
  its tokens p*page_size (with page size 1 a page is one token slot), so shared slots become
  shared tree nodes, kept up to date incrementally across steps
  (:class:`~treeattn.serving.TreeSync`), planned once per step for every layer. forward_decode
  writes the token's K/V into SGLang's pool (``set_kv_buffer``) and runs the plan on the layer's
  K/V buffers, read in place as ``[num_pages, page_size, num_kv_heads, head_dim]`` views.
* every other batch (EXTEND: prefill and chunked prefill; MIXED: prefill chunks with decode
  tokens, ``--enable-mixed-chunk``): the SGLang backend named by TREEATTN_SGLANG_PREFILL
  (default ``flashinfer`` on CUDA, ``torch_native`` on the CPU), built through SGLang's own
  registry and called for the metadata and the forward.

fp8 KV (``--kv-cache-dtype fp8_e4m3`` / ``fp8_e5m2``): SGLang's MHATokenToKVPool keeps the
cache as uint8 (``store_dtype``) and hands it out as float8_e4m3fn / float8_e5m2; the serving core
plans for that kv_dtype, forward_decode writes the token with the layer's scales
(``set_kv_buffer(..., layer.k_scale, layer.v_scale)``: the pool stores k / k_scale) and decodes
with them (the layer's float32 ``k_scale`` / ``v_scale`` device tensors when present, else
``k_scale_float`` / ``v_scale_float``, else 1.0). Prefill delegates that ignore the scales
(torch_native, flex_attention, wave) are refused for a layer whose scales are not 1.

Host cost: one device-to-host copy per decode step (the first slot of each page of the batch's
``req_to_token`` rows, :func:`treeattn.serving.token_table.page_table`), since SGLang keeps that
table on the device only; sequence lengths come from ``forward_batch.seq_lens_cpu``.

Decode CUDA graphs: init_cuda_graph_state(max_bs, ...) gives the serving cores a graph bound
(max_bs rows of at most req_to_token's width in pages); init_forward_metadata_out_graph, before
capture and before every replay, prepares the step as a graph step: every batch size runs on one
device plan laid out for the bound (treeattn.Plan.reserve), and a step whose tree plan does not
fit it runs the query planner's plan, which always fits (ServingCore, "graph_fallback"). The
cores are made, and their device plans allocated, by the first decode forward of a batch size,
which SGLang runs eagerly (warm-up) before it captures. Prefill graphs (SGLang's breakable
graphs run attention eagerly) go to the prefill backend.
"""

from __future__ import annotations

from typing import Any, Dict, Optional, Tuple

import numpy as np
import torch

from sglang.srt.layers.attention.attention_registry import ATTENTION_BACKENDS
from sglang.srt.layers.attention.base_attn_backend import AttentionBackend
from sglang.srt.layers.radix_attention import AttentionType, RadixAttention
from sglang.srt.mem_cache.memory_pool import KVWriteLoc, MHATokenToKVPool
from sglang.srt.model_executor.forward_batch_info import ForwardBatch

from ...serving import ServingCore
from ...serving.token_table import page_table
from .._common import HEAD_SIZES, preset_for
from . import BACKEND_NAME, load_config

__all__ = ["TreeAttnBackend"]

#: model (q / output) element types treeattn's kernels take
KV_DTYPES = (torch.float16, torch.bfloat16)
#: SGLang's fp8 KV pool dtypes (--kv-cache-dtype fp8_e4m3 / fp8_e5m2) -> treeattn's kv_dtype
FP8_KV_DTYPES = {torch.float8_e4m3fn: "fp8_e4m3", torch.float8_e5m2: "fp8_e5m2"}
#: SGLang prefill backends that neither write the fp8 cache with the layer's k_scale / v_scale
#: nor read it with them (they store and attend x instead of x / scale): with an fp8 pool and a
#: scale other than 1 the decode side would read their KV wrong, so that combination is refused
SCALE_BLIND_PREFILL = ("TorchNativeAttnBackend", "TorchFlexAttnBackend", "WaveAttnBackend")
#: SGLang KV pool layouts read in place: token-major NHD ([slots, heads, dim]) and page-major
#: HND ([pages, heads, page_size, dim], SGLANG_USE_HND_KVCACHE)
KV_LAYOUTS = ("nhd", "hnd")

#: the ServingCore key of graph steps (every batch size shares the one graph plan)
GRAPH_KEY = "graph"


def _refusals(model_runner: Any) -> list:
    """What the model / server configuration asks that treeattn cannot do."""
    mc = model_runner.model_config
    out = []
    if getattr(model_runner, "use_mla_backend", False):
        out.append("MLA (treeattn runs multi-head / grouped-query attention)")
    if getattr(mc, "is_encoder_decoder", False):
        out.append("encoder-decoder models (cross attention)")
    if getattr(model_runner, "sliding_window_size", None) is not None or \
            getattr(model_runner, "is_hybrid_swa", False):
        out.append("sliding window attention (treeattn attends the whole prefix)")
    if getattr(model_runner, "attention_chunk_size", None) is not None:
        out.append("chunked local attention")
    spec = getattr(model_runner, "spec_algorithm", None)
    if getattr(model_runner, "is_draft_worker", False) or (spec is not None and
                                                          not spec.is_none()):
        out.append("speculative decoding")
    if model_runner.dtype not in KV_DTYPES:
        out.append(f"dtype {model_runner.dtype} (float16 / bfloat16 only)")
    kv = getattr(model_runner, "kv_cache_dtype", model_runner.dtype)
    if kv not in KV_DTYPES and kv not in FP8_KV_DTYPES:
        out.append(f"kv cache dtype {kv} (float16 / bfloat16, or fp8_e4m3 / fp8_e5m2 as "
                   f"float8_e4m3fn / float8_e5m2; no float8_e4m3fnuz, mxfp8 or fp4)")
    pool = model_runner.token_to_kv_pool
    if type(pool) is not MHATokenToKVPool:
        out.append(f"KV pool {type(pool).__name__} (MHATokenToKVPool only: no hybrid, "
                   f"quantized or unified pools)")
    else:
        if pool.dtype != kv:
            out.append(f"KV pool dtype {pool.dtype} != the model runner's kv cache dtype {kv}")
        if getattr(pool, "is_quantized_kv_cache", False):
            out.append(f"quantized KV cache method "
                       f"{getattr(pool.quant_method, 'name', type(pool.quant_method).__name__)!r}"
                       f" (block-scaled / fp4 caches; plain fp8 with per-layer scales only)")
        if pool.kv_cache_layout not in KV_LAYOUTS:
            out.append(f"KV cache layout {pool.kv_cache_layout!r} (nhd / hnd only)")
        if pool.head_dim not in HEAD_SIZES:
            out.append(f"head_dim {pool.head_dim} (kernels for {HEAD_SIZES})")
        if pool.v_head_dim != pool.head_dim:
            out.append(f"v_head_dim {pool.v_head_dim} != head_dim {pool.head_dim}")
    if str(model_runner.device) not in ("cuda", "cpu"):
        out.append(f"device {model_runner.device!r} (cuda, or cpu for tests)")
    return out


class TreeAttnBackend(AttentionBackend):
    """Decode on treeattn's serving core, every other batch on an SGLang prefill backend.

    prefill_backend: the backend for non-decode batches; None builds the one named by the
    configuration through SGLang's registry (none at all when SGLang routes prefill elsewhere,
    i.e. ``--prefill-attention-backend`` names another backend)."""

    def __init__(self, model_runner: Any, prefill_backend: Optional[AttentionBackend] = None):
        super().__init__()
        refuse = _refusals(model_runner)
        if refuse:
            raise NotImplementedError("treeattn SGLang backend does not support " +
                                      "; ".join(refuse))
        cfg = load_config()
        self.device = torch.device(model_runner.device)
        if self.device.type == "cuda":
            self.device = torch.device("cuda", torch.cuda.current_device())
        self.req_to_token_pool = model_runner.req_to_token_pool
        self.token_to_kv_pool = model_runner.token_to_kv_pool
        self.page_size = int(model_runner.page_size)
        pool = self.token_to_kv_pool
        if pool.page_size != self.page_size:
            raise ValueError(f"page_size: model runner has {self.page_size}, KV pool "
                             f"{pool.page_size}")
        self.hnd = pool.kv_cache_layout == "hnd"
        #: pages of the pool, page 0 (slots [0, page_size)) the padding page
        self.num_pages = (pool.size + self.page_size) // self.page_size
        self.data_type = model_runner.dtype
        self.kv_cache_dtype = pool.dtype
        #: fp8 pool: SGLang stores it as uint8 (store_dtype); decode reads it as this float8
        #: dtype with the layer's k_scale / v_scale (cache value x stands for scale * x)
        self.fp8 = pool.dtype in FP8_KV_DTYPES
        self._core_args = dict(
            num_pages=self.num_pages, device=self.device, planner=cfg["planner"],
            preset=cfg["preset"] or preset_for(self.device),
            kv_dtype=FP8_KV_DTYPES.get(pool.dtype, pool.dtype), headroom=cfg["headroom"])
        #: one serving core per attention shape (num_qo_heads, num_kv_heads, head_dim)
        self.cores: Dict[Tuple[int, int, int], ServingCore] = {}
        self._prepared: Dict[Tuple[int, int, int], int] = {}  # shape -> step it was prepared
        self._step = 0
        self._tables: Optional[Tuple[np.ndarray, np.ndarray]] = None
        self._key: Optional[str] = None  # GRAPH_KEY for graph steps, None for eager ones
        self._graph_bound: Optional[Tuple[int, int]] = None
        self._checked_layers: set = set()
        if prefill_backend is None and getattr(
                model_runner, "prefill_attention_backend_str", BACKEND_NAME) == BACKEND_NAME:
            prefill_backend = _build_prefill(model_runner, cfg["prefill"], self.device)
        self.prefill_backend = prefill_backend
        if prefill_backend is not None:
            self.extend_dummy_seqs_capped_by_req_pool = \
                prefill_backend.extend_dummy_seqs_capped_by_req_pool

    # ---- metadata

    def init_forward_metadata(self, forward_batch: ForwardBatch):
        mode = forward_batch.forward_mode
        if mode.is_decode():
            self._prepare_decode(forward_batch)
        elif not mode.is_idle():
            self._prefill().init_forward_metadata(forward_batch)

    def init_forward_metadata_out_graph(self, forward_batch: ForwardBatch,
                                        in_capture: bool = False):
        mode = forward_batch.forward_mode
        if mode.is_decode():
            self._prepare_decode(forward_batch, GRAPH_KEY)
        elif not mode.is_idle():
            self._prefill().init_forward_metadata_out_graph(forward_batch, in_capture)

    def init_forward_metadata_in_graph(self, forward_batch: ForwardBatch):
        mode = forward_batch.forward_mode
        if not (mode.is_decode() or mode.is_idle()):
            self._prefill().init_forward_metadata_in_graph(forward_batch)

    def init_cuda_graph_state(self, max_bs: int, max_num_tokens: int):
        width = int(self.req_to_token_pool.req_to_token.shape[1])
        self._graph_bound = (int(max_bs), -(-width // self.page_size))
        for core in self.cores.values():
            core.set_graph_bound(*self._graph_bound)
        if self.prefill_backend is not None:  # its own graphs (prefill, if captured) need state
            try:
                self.prefill_backend.init_cuda_graph_state(max_bs, max_num_tokens)
            except NotImplementedError:  # e.g. torch_native, which captures no graphs
                pass

    def get_cuda_graph_seq_len_fill_value(self):
        # length of the padded rows of dummy and prefill-graph batches: the prefill backend's,
        # else one token (decode takes any length >= 1)
        if self.prefill_backend is not None:
            try:
                return self.prefill_backend.get_cuda_graph_seq_len_fill_value()
            except NotImplementedError:  # e.g. torch_native, which captures no graphs
                pass
        return 1

    def _prepare_decode(self, fb: ForwardBatch, key: Optional[str] = None) -> None:
        """Host copy of the batch's page table and lengths; prepares the cores made so far (key:
        GRAPH_KEY for a graph step's capture or replay, None for an eager step)."""
        lens = fb.seq_lens_cpu if fb.seq_lens_cpu is not None else fb.seq_lens.cpu()
        # a graph replay's padded rows (the last num_padding) become padding rows (length 0):
        # their req_pool_indices may name any request
        pad = int(getattr(fb, "num_padding", 0) or 0)
        n = int(lens.shape[0]) - pad
        bt, lens = page_table(self.req_to_token_pool.req_to_token, fb.req_pool_indices[:n],
                              lens[:n], self.page_size)
        if pad:
            bt = np.concatenate([bt, np.zeros((pad, bt.shape[1]), bt.dtype)])
            lens = np.concatenate([lens, np.zeros(pad, lens.dtype)])
        self._tables = (bt, lens)
        self._key = key
        self._step += 1
        for shape, core in self.cores.items():
            core.prepare(*self._tables, key=key)
            self._prepared[shape] = self._step

    # ---- forward

    def forward_decode(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                       layer: RadixAttention, forward_batch: ForwardBatch,
                       save_kv_cache: bool = True, **kwargs):
        self._check_layer(layer)
        _refuse_kwargs("forward_decode", kwargs)
        if save_kv_cache and k is not None and v is not None:
            # fp8 pool: set_kv_buffer stores k / k_scale (v / v_scale) rounded to fp8, in place
            # in k and v as SGLang's flashinfer backend lets it; None scales mean 1
            scales = (layer.k_scale, layer.v_scale) if self.fp8 else ()
            self.token_to_kv_pool.set_kv_buffer(layer, KVWriteLoc.for_batch(forward_batch),
                                                k, v, *scales)
        shape = (layer.tp_q_head_num, layer.tp_k_head_num, layer.qk_head_dim)
        core = self._core(shape)
        H, _, D = shape
        q3 = q.reshape(-1, H, D)
        rows = core.plan.num_queries
        if q3.shape[0] != rows:
            raise ValueError(f"q: {q3.shape[0]} decode tokens, the batch prepared by "
                             f"init_forward_metadata has {rows} rows")
        k_cache, v_cache = self._kv_views(layer.layer_id)
        out = q3.new_empty(q3.shape)
        k_scale = self._scale(layer, "k", k_cache) if self.fp8 else None
        v_scale = self._scale(layer, "v", k_cache) if self.fp8 else None
        core.decode(q3, k_cache, v_cache, out=out, sm_scale=layer.scaling, k_scale=k_scale,
                    v_scale=v_scale)
        return out.view(-1, H * D)

    def forward_extend(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                       layer: RadixAttention, forward_batch: ForwardBatch,
                       save_kv_cache: bool = True, **kwargs):
        self._check_layer(layer)
        return self._prefill().forward_extend(q, k, v, layer, forward_batch, save_kv_cache,
                                              **kwargs)

    # ---- helpers

    def _prefill(self) -> AttentionBackend:
        if self.prefill_backend is None:
            raise NotImplementedError(
                "treeattn SGLang backend: no prefill backend (SGLang routes extend batches to "
                "--prefill-attention-backend, yet one reached treeattn)")
        return self.prefill_backend

    def _core(self, shape: Tuple[int, int, int]) -> ServingCore:
        core = self.cores.get(shape)
        if core is None:
            core = self.cores[shape] = ServingCore(*shape, self.page_size, **self._core_args)
            if self._graph_bound is not None:
                core.set_graph_bound(*self._graph_bound)
        if self._prepared.get(shape) != self._step:
            if self._tables is None:
                raise ValueError("forward_batch: decode before init_forward_metadata")
            core.prepare(*self._tables, key=self._key)
            self._prepared[shape] = self._step
        return core

    @staticmethod
    def _scale(layer: RadixAttention, which: str, cache: torch.Tensor) -> Any:
        """The layer's fp8 dequantization scale for decode: its device tensor (``k_scale`` /
        ``v_scale``, a float32 parameter that SGLang updates in place) as a 1-element view when
        it lives on the cache's device, so a captured graph would replay with the value it holds
        then; else the float (``k_scale_float``); None (1.0) when the layer has neither."""
        t = getattr(layer, f"{which}_scale", None)
        f = getattr(layer, f"{which}_scale_float", None)
        if isinstance(t, torch.Tensor):
            if t.numel() == 1 and t.dtype == torch.float32 and t.device == cache.device:
                return t.detach().view(1)
            if f is None:
                f = float(t)
        return None if f is None else float(f)

    def _kv_views(self, layer_id: int) -> Tuple[torch.Tensor, torch.Tensor]:
        """The layer's K and V as [num_pages, page_size, num_kv_heads, head_dim] views (an fp8
        pool's uint8 storage viewed as its float8 dtype)."""
        P, n = self.page_size, self.num_pages
        k = self.token_to_kv_pool.get_key_buffer(layer_id)
        v = self.token_to_kv_pool.get_value_buffer(layer_id)
        if k.dtype != self.kv_cache_dtype:  # e.g. the uint8 store_dtype of an fp8 pool
            k, v = k.view(self.kv_cache_dtype), v.view(self.kv_cache_dtype)
        if self.hnd:  # [pages, heads, page_size, dim]
            return k.transpose(1, 2), v.transpose(1, 2)
        return (k[: n * P].view(n, P, *k.shape[1:]), v[: n * P].view(n, P, *v.shape[1:]))

    def _check_layer(self, layer: RadixAttention) -> None:
        if layer.layer_id in self._checked_layers:
            return
        refuse = []
        if layer.logit_cap and layer.logit_cap > 0:
            refuse.append(f"logit cap ({layer.logit_cap})")
        if layer.sliding_window_size is not None and layer.sliding_window_size > -1:
            refuse.append(f"sliding window ({layer.sliding_window_size})")
        if layer.is_cross_attention:
            refuse.append("cross attention")
        if layer.attn_type != AttentionType.DECODER:
            refuse.append(f"attention type {layer.attn_type.value!r} (decoder only)")
        if layer.qk_head_dim != layer.v_head_dim:
            refuse.append(f"v_head_dim {layer.v_head_dim} != head_dim {layer.qk_head_dim}")
        if layer.qk_head_dim not in HEAD_SIZES:
            refuse.append(f"head_dim {layer.qk_head_dim} (kernels for {HEAD_SIZES})")
        if layer.tp_q_head_num % layer.tp_k_head_num:
            refuse.append(f"{layer.tp_q_head_num} query heads over {layer.tp_k_head_num} KV "
                          f"heads")
        if self.fp8 and self.prefill_backend is not None and \
                type(self.prefill_backend).__name__ in SCALE_BLIND_PREFILL:
            scales = [s for s in (_scale_value(layer, "k"), _scale_value(layer, "v"))
                      if s != 1.0]
            if scales:
                refuse.append(
                    f"fp8 KV scales {scales} with the prefill backend "
                    f"{type(self.prefill_backend).__name__}, which writes and reads the fp8 "
                    f"cache without them (set TREEATTN_SGLANG_PREFILL to a backend that applies "
                    f"k_scale / v_scale: flashinfer, fa3, triton, trtllm_mha)")
        if refuse:
            raise NotImplementedError(f"treeattn SGLang backend: layer {layer.layer_id}: " +
                                      "; ".join(refuse))
        self._checked_layers.add(layer.layer_id)


def _scale_value(layer: RadixAttention, which: str) -> float:
    """The layer's k / v fp8 scale as a float (1.0 when it has none)."""
    f = getattr(layer, f"{which}_scale_float", None)
    if f is None:
        t = getattr(layer, f"{which}_scale", None)
        f = 1.0 if t is None else float(t)
    return float(f)


def _refuse_kwargs(where: str, kwargs: Dict[str, Any]) -> None:
    given = sorted(k for k, v in kwargs.items() if v is not None and v is not False)
    if given:
        raise NotImplementedError(f"treeattn SGLang backend: {where} arguments {given} (e.g. "
                                  f"attention sinks, split rope) are not supported")


def _build_prefill(model_runner: Any, name: Optional[str],
                   device: torch.device) -> AttentionBackend:
    """The SGLang backend for extend batches, built by its registered factory."""
    name = name or ("flashinfer" if device.type == "cuda" else "torch_native")
    if name == BACKEND_NAME:
        raise ValueError(f"TREEATTN_SGLANG_PREFILL: {name!r} is this backend; name the SGLang "
                         f"backend that runs prefill (e.g. flashinfer, fa3, triton)")
    factory = ATTENTION_BACKENDS.get(name)
    if factory is None:
        raise ValueError(f"TREEATTN_SGLANG_PREFILL: unknown SGLang attention backend {name!r}, "
                         f"expected one of {sorted(n for n in ATTENTION_BACKENDS if n != BACKEND_NAME)}")
    return factory(model_runner)
