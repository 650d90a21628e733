"""TreeAttnBackend: vLLM 0.33.0's attention-backend interface over treeattn.serving.

What runs where, per step (vLLM orders the batch decodes first: reorder_batch_threshold = 1):
* decode requests (query length 1): treeattn. The builder hands their block tables and
  sequence lengths to one :class:`~treeattn.serving.ServingCore` per KV-cache group (tree update,
  plan, in-place refresh of the persistent device plan); every layer's forward() runs the plan
  on the layer's cache, K and V read as strided views of vLLM's packed per-layer cache
  ``[num_blocks, num_kv_heads, block_size, 2 * head_size]``.
* prefill, chunked-prefill and speculative-verification requests (query length > 1): vLLM's own
  FlashAttention (FlashAttentionMetadataBuilder / FlashAttentionImpl on the prefill slice of the
  batch). ``TreeAttnImpl.prefill_fn`` replaces it where FlashAttention cannot run (the CPU
  contract tests set a torch reference there).
* the KV-cache write (do_kv_cache_update): vLLM's reshape_and_cache_flash on CUDA, an index copy
  on CPU tensors.

fp8 KV cache (``--kv-cache-dtype fp8`` / ``fp8_e4m3``): vLLM allocates the cache as uint8 and
keeps one float32 scale for K and one for V per layer (``layer._k_scale`` / ``layer._v_scale``,
device tensors: stored value x scale = K / V). Decode reads the cache as its float8 view with
those tensors as treeattn's k_scale / v_scale (read when the kernel runs, so a graph replays with
the values they hold then); the prefill slice goes to FlashAttentionImpl with the query quantized
to fp8 with ``layer._q_scale`` where that impl takes fp8 queries (FA3), as vLLM's attention layer
does for FlashAttention. Refused: ``fp8_e5m2`` (vLLM's FlashAttention has no e5m2 kernels, so
its prefill cannot run; treeattn's decode reads e5m2), fp8 below SM90 or on SM120 (FlashAttention
reads fp8 KV only with FA3 on SM90 / FA4 on SM100), per-head scales
(``use_per_head_quant_scales``: treeattn takes one K and one V scale per layer) and the other
quantized formats (fp8_inc, fp8_per_token_head, int8, nvfp4, ...).

Block tables without a device-to-host synchronization. vLLM gives a builder no host copy of the
block table (its model runner V2 gathers the batch's table on the GPU), but it gives each row's
request slot (``req_idx``) and whether it is still prefilling (``is_prefilling``), both on the
host. The builder keeps a host copy of each slot's row (treeattn.serving.HostRows), taken at the
request's prefill steps by a non-blocking copy whose event is polled, never waited on, at later
steps. A decode row's pages past that copy (the pages its decode opened), and every page of a row
whose copy has not landed yet, go to the core as device pages (ServingCore.prepare's
``device_block_tables``): the tree holds them as labels private to the row, and the core fills
them into the device plan from ``block_table_tensor`` with one small kernel. A page shared
with a row that knows it only on the device is then read once per row (a new request whose
prefix-cache hit reaches into another request's decode-time pages): missed sharing, never a wrong
answer. Sequence lengths come from ``seq_lens_cpu_upper_bound``, exact except under
asynchronous speculative decoding (there the lengths are copied to the host: one synchronizing
copy per step). Without ``req_idx`` / a host ``is_prefilling`` (vLLM's V1 model runner), under
microbatching, or without the cache's block count, build() copies the decode rows' block tables
to the host each step instead, as before.

CUDA graphs: ``_cudagraph_support = UNIFORM_SINGLE_TOKEN_DECODE``: vLLM captures full graphs of
pure-decode batches (and runs this backend's attention eagerly between its piecewise graphs for
mixed ones). The core gets a graph bound (``max_cudagraph_capture_size`` rows of at most
``max_model_len`` tokens) and every decode batch within it is prepared on the core's one graph
plan (ServingCore, laid out for the bound with treeattn.Plan.reserve): a step whose tree plan
does not fit runs the query planner's plan in it, so a graph captured once replays every later
step. Larger decode batches (vLLM runs them eagerly) get the core's eager plan.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, ClassVar, Optional

import numpy as np
import torch

from vllm.v1.attention.backend import (
    AttentionBackend,
    AttentionCGSupport,
    AttentionImpl,
    AttentionMetadataBuilder,
    AttentionType,
    CommonAttentionMetadata,
)
from vllm.v1.attention.backends.utils import split_decodes_and_prefills
from vllm.v1.kv_cache_interface import KVCacheLayout

import treeattn
from treeattn.serving import HostRows, ServingCore, split_packed_kv
from .._common import HEAD_SIZES, preset_for

from . import load_config

__all__ = ["TreeAttnBackend", "TreeAttnImpl", "TreeAttnMetadata", "TreeAttnMetadataBuilder"]


#: vLLM cache dtype strings whose cache treeattn reads as fp8 (vLLM's "fp8" is e4m3 on CUDA), and
#: the torch float8 type of their bytes (vLLM allocates them as uint8)
FP8_KV_DTYPES = {"fp8": torch.float8_e4m3fn, "fp8_e4m3": torch.float8_e4m3fn,
                 "fp8_e5m2": torch.float8_e5m2}
#: treeattn.plan's kv_dtype name of each
_TREEATTN_FP8 = {"fp8": "fp8_e4m3", "fp8_e4m3": "fp8_e4m3", "fp8_e5m2": "fp8_e5m2"}
_KV_DTYPES = ("auto", "float16", "bfloat16", *FP8_KV_DTYPES)


def _fp8_prefill_refusal(kv_cache_dtype) -> Optional[str]:
    """Why vLLM's FlashAttention cannot run the prefill tokens on this fp8 cache type, whatever
    the device (None: it can, given FA3 on SM90 or FA4 on SM100)."""
    if kv_cache_dtype == "fp8_e5m2":
        return ("kv_cache_dtype 'fp8_e5m2' (prefill tokens run on vLLM's FlashAttention, which "
                "has no e5m2 kernels; treeattn's decode reads e5m2: use fp8 / fp8_e4m3)")
    return None


class TreeAttnBackend(AttentionBackend):
    supported_dtypes: ClassVar[list[torch.dtype]] = [torch.float16, torch.bfloat16]
    supported_kv_cache_dtypes: ClassVar[list] = list(_KV_DTYPES)
    forward_includes_kv_cache_update: bool = False

    @staticmethod
    def get_name() -> str:
        return "CUSTOM"

    @staticmethod
    def get_impl_cls() -> type["TreeAttnImpl"]:
        return TreeAttnImpl

    @staticmethod
    def get_builder_cls() -> type["TreeAttnMetadataBuilder"]:
        return TreeAttnMetadataBuilder

    @classmethod
    def get_supported_head_sizes(cls) -> list[int]:
        return list(HEAD_SIZES)

    @classmethod
    def supports_compute_capability(cls, capability) -> bool:
        return capability.major >= 8  # kernels for sm_80 and sm_90a

    @classmethod
    def supported_kv_cache_layouts(cls) -> tuple[KVCacheLayout, ...]:
        # K/V are read through strides with head_size contiguous; both per-layer layouts work
        return (KVCacheLayout.LBNHC, KVCacheLayout.LBHNC)

    @classmethod
    def validate_configuration(cls, head_size: int, dtype: torch.dtype, kv_cache_dtype,
                               block_size: int | None, use_mla: bool, has_sink: bool,
                               use_sparse: bool, use_mm_prefix: bool,
                               use_per_head_quant_scales: bool, device_capability,
                               attn_type: str, has_sliding_window: bool = False,
                               use_non_causal: bool = False, use_batch_invariant: bool = False,
                               use_kv_connector: bool = False, use_pcp: bool = False,
                               use_adaptive_verification: bool = False, use_dcp: bool = False,
                               use_rswa: bool = False) -> list[str]:
        reasons = super().validate_configuration(
            head_size, dtype, kv_cache_dtype, block_size, use_mla, has_sink, use_sparse,
            use_mm_prefix, use_per_head_quant_scales, device_capability, attn_type,
            has_sliding_window, use_non_causal, use_batch_invariant, use_kv_connector, use_pcp,
            use_adaptive_verification, use_dcp, use_rswa)
        detail = {
            "head_size not supported": f"head_size {head_size} (treeattn kernels: {HEAD_SIZES})",
            "dtype not supported": f"dtype {dtype} (treeattn: float16, bfloat16)",
            "kv_cache_dtype not supported":
                f"kv_cache_dtype {kv_cache_dtype!r} (treeattn: auto, float16, bfloat16, fp8, "
                f"fp8_e4m3)",
            "MLA not supported": "MLA (treeattn runs multi-head / grouped-query attention)",
            "sliding window not supported": "sliding window (treeattn attends the whole prefix)",
            "per-head quant scales not supported":
                "per-head KV quant scales (use_per_head_quant_scales; treeattn takes one K and "
                "one V scale per layer)",
        }
        reasons = [detail.get(r, r) for r in reasons]
        if kv_cache_dtype in FP8_KV_DTYPES:
            why = _fp8_prefill_refusal(kv_cache_dtype)
            if why is not None:
                reasons.append(why)
            elif device_capability is not None and device_capability.major not in (9, 10):
                reasons.append(
                    f"kv_cache_dtype {kv_cache_dtype!r} on compute capability "
                    f"{device_capability.major}.{device_capability.minor} (prefill tokens run on "
                    f"vLLM's FlashAttention, which reads fp8 KV only with FA3 on SM90 or FA4 on "
                    f"SM100)")
        return [f"treeattn: {r}" for r in reasons]


@dataclass
class TreeAttnMetadata:
    num_actual_tokens: int
    num_decodes: int
    num_decode_tokens: int
    num_prefills: int
    num_prefill_tokens: int
    slot_mapping: torch.Tensor
    #: treeattn plan of the decode rows (None without decodes)
    plan: Optional[treeattn.Plan] = None
    #: the prefill requests' slice of the common metadata (None without prefills)
    prefill: Optional[CommonAttentionMetadata] = None
    #: FlashAttention metadata of that slice (CUDA only)
    prefill_fa: Any = None


def _slice_from(cm: CommonAttentionMetadata, reqs: int, tokens: int) -> CommonAttentionMetadata:
    """The requests [reqs, num_reqs) and tokens [tokens, num_actual_tokens) of `cm`."""
    def cut(x, n):
        return x[n:] if x is not None else None

    return CommonAttentionMetadata(
        query_start_loc=cm.query_start_loc[reqs:] - tokens,
        query_start_loc_cpu=cm.query_start_loc_cpu[reqs:] - tokens,
        seq_lens=cm.seq_lens[reqs:],
        num_reqs=cm.num_reqs - reqs,
        num_actual_tokens=cm.num_actual_tokens - tokens,
        max_query_len=cm.max_query_len,
        max_seq_len=cm.max_seq_len,
        block_table_tensor=cm.block_table_tensor[reqs:],
        slot_mapping=cm.slot_mapping[tokens:],
        causal=cm.causal if not isinstance(cm.causal, torch.Tensor) else cm.causal[reqs:],
        seq_lens_cpu_upper_bound=cut(cm.seq_lens_cpu_upper_bound, reqs),
        positions=cut(cm.positions, tokens),
        is_prefilling=cut(cm.is_prefilling, reqs),
    )


def _sync_allowed():
    try:
        from vllm.utils.gpu_sync_debug import gpu_sync_allowed
    except ImportError:  # pragma: no cover - other vLLM versions
        import contextlib

        return contextlib.nullcontext()
    return gpu_sync_allowed()


def _host(x: torch.Tensor) -> np.ndarray:
    if x.device.type == "cpu":
        return x.numpy()
    with _sync_allowed():
        return x.to("cpu").numpy()


#: the ServingCore key of decode batches within the graph bound (one plan for every batch size)
GRAPH_KEY = "graph"


class TreeAttnMetadataBuilder(AttentionMetadataBuilder[TreeAttnMetadata]):
    _cudagraph_support: ClassVar[AttentionCGSupport] = \
        AttentionCGSupport.UNIFORM_SINGLE_TOKEN_DECODE
    reorder_batch_threshold: int | None = 1

    def __init__(self, kv_cache_spec, layer_names: list[str], vllm_config,
                 device: torch.device):
        super().__init__(kv_cache_spec, layer_names, vllm_config, device)
        self._init_reorder_batch_threshold(1)
        cfg = load_config()
        model = vllm_config.model_config
        heads = model.get_num_attention_heads(vllm_config.parallel_config)
        num_pages = getattr(vllm_config.cache_config, "num_gpu_blocks", None) or 0
        self.page_size = kv_cache_spec.block_size
        # seq_lens_cpu_upper_bound is exact but for decode rows under asynchronous speculative
        # decoding (vLLM assumes every draft accepted there)
        sched = getattr(vllm_config, "scheduler_config", None)
        self.exact_seq_lens = (getattr(vllm_config, "speculative_config", None) is None
                               or getattr(sched, "async_scheduling", None) is False)
        self.core = ServingCore(
            heads, kv_cache_spec.num_kv_heads, kv_cache_spec.head_size, self.page_size,
            num_pages=int(num_pages), device=device, planner=cfg["planner"],
            preset=cfg["preset"] or preset_for(device),
            kv_dtype=_plan_kv_dtype(kv_cache_spec, vllm_config), headroom=cfg["headroom"])
        # the graph bound: the largest batch vLLM captures a full graph for (none captured: no
        # bound), of at most max_model_len tokens; every decode batch within it runs on the
        # core's graph plan, which a captured graph keeps for good
        comp = getattr(vllm_config, "compilation_config", None)
        sizes = getattr(comp, "cudagraph_capture_sizes", None) or [0]
        rows = int(getattr(comp, "max_cudagraph_capture_size", None) or max(sizes))
        if rows > 0:
            max_len = getattr(model, "max_model_len", None)
            if not max_len:
                raise NotImplementedError(
                    f"treeattn vLLM backend: CUDA graphs of up to {rows} requests need "
                    "model_config.max_model_len to bound their block tables")
            self.core.set_graph_bound(rows, -(-int(max_len) // self.page_size))
        self._fa_builder = None
        #: host copies of request slots' rows (None: the cache's block count is unknown, so
        #: device pages cannot be labelled above it, or vLLM splits steps into microbatches,
        #: each with its own builder that sees some of a request's steps only; build() then
        #: copies block tables each step)
        ubatching = getattr(getattr(vllm_config, "parallel_config", None), "use_ubatching", False)
        self.host_rows = HostRows() if num_pages > 0 and not ubatching else None
        self._capturing = False
        #: decode steps whose block tables build() copied to the host (the fallback)
        self.table_copies = 0

    def build_for_cudagraph_capture(self, common_attn_metadata: CommonAttentionMetadata):
        """build() of a capture or dummy batch (made-up request slots and tables): its decode
        rows read every page on the device, and the host row copies are left alone."""
        self._capturing = True
        try:
            return self.build(0, common_attn_metadata)
        finally:
            self._capturing = False

    def build(self, common_prefix_len: int, common_attn_metadata: CommonAttentionMetadata,
              fast_build: bool = False) -> TreeAttnMetadata:
        cm = common_attn_metadata
        nd, npf, ndt, npt = split_decodes_and_prefills(cm, decode_threshold=1)
        if not self._capturing:
            self._forget_prefilling(cm, nd, npf)
        md = TreeAttnMetadata(num_actual_tokens=cm.num_actual_tokens, num_decodes=nd,
                              num_decode_tokens=ndt, num_prefills=npf, num_prefill_tokens=npt,
                              slot_mapping=cm.slot_mapping)
        if nd:
            if self.exact_seq_lens and cm.seq_lens_cpu_upper_bound is not None:
                lens = np.asarray(cm.seq_lens_cpu_upper_bound[:nd])
            else:
                lens = _host(cm.seq_lens[:nd])
            cols = max(1, -(-int(lens.max()) // self.page_size))
            rows, pages = self.core.graph_bound
            graph = 0 < nd <= rows and cols <= pages  # within the bound: the graph plan
            key = GRAPH_KEY if graph else None
            slots = self._slots(cm, nd)
            if slots is not None and not self.core.device_pages_fit(
                    int(slots.max()), cm.block_table_tensor.shape[1]):
                slots = None  # too many labels for int32 page ids
            if slots is None:  # no request slots on the host: copy the tables
                self.table_copies += 1
                self.core.prepare(_host(cm.block_table_tensor[:nd, :cols]), lens, key=key)
            else:
                self._prepare_device_pages(cm, nd, lens, cols, slots, key)
            md.plan = self.core.plan
        if npf and not self._capturing:
            self._copy_prefill_rows(cm, nd, npf)
        if npf:
            md.prefill = _slice_from(cm, nd, ndt)
            if torch.device(self.device).type == "cuda":
                md.prefill_fa = self._flash_builder().build(0, md.prefill, fast_build)
        return md

    def _copy_prefill_rows(self, cm: CommonAttentionMetadata, nd: int, npf: int) -> None:
        """Copies (non-blocking) the prefilling rows' pages for their first decode steps; rows
        of decoding requests (speculative verification) need none."""
        end = nd + npf
        if (self.host_rows is None or cm.req_idx is None or len(cm.req_idx) < end
                or cm.seq_lens_cpu_upper_bound is None):
            return
        sel = np.arange(npf)
        flags = _host_flags(cm)
        if flags is not None:
            sel = sel[flags[nd:end]]
        if sel.size:
            need = -(-np.asarray(cm.seq_lens_cpu_upper_bound[nd:end], np.int64)[sel]
                     // self.page_size)
            self.host_rows.request(cm.block_table_tensor[nd:end, :max(1, int(need.max()))], sel,
                                   np.asarray(cm.req_idx[nd:end])[sel], need)

    def _forget_prefilling(self, cm: CommonAttentionMetadata, nd: int, npf: int) -> None:
        """Forgets the host rows of every slot whose request is prefilling in this step (a new
        or resumed request there): decode rows and prefill rows alike, whatever path the step
        takes; without host flags, every prefill row's slot."""
        if self.host_rows is None or cm.req_idx is None:
            return
        idx = np.asarray(cm.req_idx)
        flags = _host_flags(cm)
        if flags is not None:
            n = min(idx.shape[0], flags.shape[0])
            self.host_rows.forget(idx[:n][flags[:n]])
        else:
            self.host_rows.forget(idx[nd:nd + npf])

    def _slots(self, cm: CommonAttentionMetadata, nd: int) -> Optional[np.ndarray]:
        """Each decode row's request slot (padding rows past vLLM's requests get slots of
        their own), or None when vLLM gives no host slots and prefill flags."""
        if self.host_rows is None or cm.req_idx is None or _host_flags(cm) is None:
            return None
        idx = np.asarray(cm.req_idx[:nd], dtype=np.int64)
        if np.unique(idx).size != idx.size:  # rows sharing a request (context parallelism)
            return None
        if idx.shape[0] < nd:  # padded graph rows: keys above every slot
            top = int(idx.max()) + 1 if idx.size else 0
            idx = np.concatenate([idx, top + np.arange(nd - idx.shape[0])])
        return idx

    def _prepare_device_pages(self, cm, nd: int, lens: np.ndarray, cols: int,
                              slots: np.ndarray, key) -> None:
        """prepare() with the host rows known so far and the rest as device pages; then copies
        (non-blocking) the rows that have no host copy yet, for the next steps."""
        hr = self.host_rows
        if self._capturing:  # made-up slots: every page on the device, no host copies
            self.core.prepare(np.full((nd, cols), -1), lens, key=key,
                              device_block_tables=cm.block_table_tensor[:nd], row_keys=slots)
            return
        hr.poll()
        bt = hr.table(slots, cols)
        self.core.prepare(bt, lens, key=key, device_block_tables=cm.block_table_tensor[:nd],
                          row_keys=slots)
        real = min(nd, len(cm.req_idx))
        busy = hr.pending_slots()
        want = np.asarray([i for i in range(real) if lens[i] > 0 and int(slots[i]) not in hr.rows
                           and int(slots[i]) not in busy], dtype=np.int64)
        if want.size:
            lo, hi = int(want[0]), int(want[-1]) + 1
            hr.request(cm.block_table_tensor[lo:hi, :cols], want - lo, slots[want],
                       -(-lens[want] // self.page_size))

    def _flash_builder(self):
        if self._fa_builder is None:
            from vllm.v1.attention.backends.flash_attn import FlashAttentionMetadataBuilder

            self._fa_builder = FlashAttentionMetadataBuilder(
                self.kv_cache_spec, self.layer_names, self.vllm_config, self.device)
        return self._fa_builder


def _host_flags(cm: CommonAttentionMetadata) -> Optional[np.ndarray]:
    """vLLM's is_prefilling as a numpy bool array when it is on the host (model runner V2), else
    None (absent, or a device tensor: reading it would synchronize)."""
    flags = cm.is_prefilling
    if flags is None or getattr(flags, "device", torch.device("cpu")).type != "cpu":
        return None
    return np.asarray(flags, dtype=bool)


def _plan_kv_dtype(kv_cache_spec, vllm_config):
    """treeattn's KV element type for a KV-cache group: the spec's float16 / bfloat16, or for a
    one-byte (fp8) cache the fp8 type named by vLLM's cache dtype (e4m3 and e5m2 plan alike)."""
    dtype = kv_cache_spec.dtype
    if dtype.itemsize != 1:
        return dtype
    cache_dtype = getattr(getattr(vllm_config, "cache_config", None), "cache_dtype", None)
    if cache_dtype not in FP8_KV_DTYPES:
        raise NotImplementedError(f"treeattn vLLM backend: a {dtype} KV cache with "
                                  f"kv_cache_dtype {cache_dtype!r} (fp8: {list(FP8_KV_DTYPES)})")
    return _TREEATTN_FP8[cache_dtype]


class TreeAttnImpl(AttentionImpl[TreeAttnMetadata]):
    #: callable(query, k_cache, v_cache, prefill_metadata, output, scale, k_scale, v_scale) for
    #: the prefill tokens where FlashAttention cannot run (tests on CPU); the caches are float8
    #: views with the layer's scale tensors for an fp8 cache (K = k_scale x k_cache), else
    #: float16 / bfloat16 with scales None. None: FlashAttentionImpl
    prefill_fn: Optional[Callable[..., None]] = None

    def __init__(self, num_heads: int, head_size: int, scale: float,
                 num_kv_heads: int | None = None, alibi_slopes: list[float] | None = None,
                 sliding_window: int | None = None, kv_cache_dtype: str = "auto",
                 logits_soft_cap: float | None = None, attn_type: str = AttentionType.DECODER,
                 kv_sharing_target_layer_name: str | None = None) -> None:
        refuse = []
        if alibi_slopes is not None:
            refuse.append("ALiBi slopes")
        if sliding_window is not None:
            refuse.append(f"sliding window ({sliding_window})")
        if logits_soft_cap:
            refuse.append(f"logits soft-cap ({logits_soft_cap})")
        if attn_type != AttentionType.DECODER:
            refuse.append(f"attention type {attn_type!r} (decoder self-attention only)")
        if kv_cache_dtype not in _KV_DTYPES:
            refuse.append(f"kv_cache_dtype {kv_cache_dtype!r} (float16 / bfloat16, or fp8 / "
                          f"fp8_e4m3 / fp8_e5m2 with per-layer scales)")
        elif kv_cache_dtype in FP8_KV_DTYPES and self.prefill_fn is None and _on_cuda():
            why = _fp8_prefill_refusal(kv_cache_dtype)
            if why is None:
                from vllm.v1.attention.backends.fa_utils import flash_attn_supports_kv_cache_dtype

                if not flash_attn_supports_kv_cache_dtype(
                        kv_cache_dtype, head_size=head_size, head_size_v=head_size,
                        requires_softcap=bool(logits_soft_cap), supports_fa4_hd256=True):
                    why = (f"kv_cache_dtype {kv_cache_dtype!r} on this GPU (prefill tokens run "
                           f"on vLLM's FlashAttention, which reads fp8 KV only with FA3 on SM90 "
                           f"or FA4 on SM100)")
            if why is not None:
                refuse.append(why)
        if head_size not in HEAD_SIZES:
            refuse.append(f"head_size {head_size} (kernels for {HEAD_SIZES})")
        if refuse:
            raise NotImplementedError("treeattn vLLM backend does not support " +
                                      "; ".join(refuse))
        self.num_heads = num_heads
        self.head_size = head_size
        self.scale = float(scale)
        self.num_kv_heads = num_kv_heads or num_heads
        if self.num_heads % self.num_kv_heads:
            raise ValueError(f"num_heads: {num_heads} is not a multiple of num_kv_heads "
                             f"{self.num_kv_heads}")
        self.kv_cache_dtype = kv_cache_dtype
        #: float8 type of the cache's bytes (None: a float16 / bfloat16 cache)
        self.fp8_dtype = FP8_KV_DTYPES.get(kv_cache_dtype)
        self.attn_type = attn_type
        self.kv_sharing_target_layer_name = kv_sharing_target_layer_name
        self._init_args = (num_heads, head_size, scale, self.num_kv_heads, alibi_slopes,
                           sliding_window, kv_cache_dtype, logits_soft_cap, attn_type,
                           kv_sharing_target_layer_name)
        self._fa_impl = None

    def forward(self, layer, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                kv_cache: torch.Tensor, attn_metadata: TreeAttnMetadata, output: torch.Tensor,
                output_scale: torch.Tensor | None = None,
                output_block_scale: torch.Tensor | None = None) -> torch.Tensor:
        if output_scale is not None or output_block_scale is not None:
            raise NotImplementedError("treeattn vLLM backend: fused output quantization is not "
                                      "supported")
        if attn_metadata is None:  # profiling run
            return output.fill_(0)
        md = attn_metadata
        k_cache, v_cache = split_packed_kv(kv_cache, self.head_size)
        k_scale = v_scale = None
        if self.fp8_dtype is not None:  # vLLM's uint8 cache read as float8, scaled per layer
            k_cache, v_cache = k_cache.view(self.fp8_dtype), v_cache.view(self.fp8_dtype)
            k_scale, v_scale = layer._k_scale, layer._v_scale
        nd = md.num_decode_tokens
        if nd:
            treeattn.decode(query[:nd], k_cache, v_cache, md.plan, out=output[:nd],
                            sm_scale=self.scale, k_scale=k_scale, v_scale=v_scale)
        if md.num_prefills:
            q = query[nd:md.num_actual_tokens]
            out = output[nd:md.num_actual_tokens]
            if self.prefill_fn is not None:
                self.prefill_fn(q, k_cache, v_cache, md.prefill, out, self.scale, k_scale,
                                v_scale)
            elif query.device.type != "cuda":
                raise NotImplementedError(
                    "treeattn vLLM backend: prefill tokens run on vLLM's FlashAttention, which "
                    "needs CUDA tensors; set TreeAttnImpl.prefill_fn to run them elsewhere")
            else:
                self._flash_prefill(layer, q, key[nd:md.num_actual_tokens],
                                    value[nd:md.num_actual_tokens], kv_cache, md.prefill_fa, out)
        return output

    def _flash_prefill(self, layer, q, key, value, kv_cache, fa_metadata, out) -> None:
        """The prefill tokens on FlashAttentionImpl (vLLM's packed cache as it is, uint8 for
        fp8: FlashAttentionImpl views it as fp8 and descales with the layer's scales)."""
        fa = self._flash_impl()
        if self.fp8_dtype is not None and fa.supports_quant_query_input:
            # FA3 reads an fp8 cache with an fp8 query (q_descale = layer._q_scale); vLLM's
            # attention layer quantizes the query only for an impl that says it takes one, and
            # this one does not (treeattn's decode takes float16 / bfloat16 queries)
            q = _quantize_query(q, layer._q_scale)
        fa.forward(layer, q, key, value, kv_cache, fa_metadata, out)

    def do_kv_cache_update(self, layer, key: torch.Tensor, value: torch.Tensor,
                           kv_cache: torch.Tensor, slot_mapping: torch.Tensor) -> None:
        k_cache, v_cache = split_packed_kv(kv_cache, self.head_size)
        if kv_cache.device.type == "cuda":
            from vllm.v1.attention.backends.fa_utils import reshape_and_cache_flash

            reshape_and_cache_flash(key, value, k_cache, v_cache, slot_mapping,
                                    self.kv_cache_dtype, layer._k_scale, layer._v_scale)
            return
        n = slot_mapping.shape[0]
        P = k_cache.shape[1]
        slots = slot_mapping.long()
        keep = slots >= 0  # negative slots: padding tokens, not written
        pages, offs = slots[keep] // P, slots[keep] % P
        if self.fp8_dtype is None:
            k_cache[pages, offs] = key[:n][keep].to(k_cache.dtype)
            v_cache[pages, offs] = value[:n][keep].to(v_cache.dtype)
            return
        # vLLM's fp8 write: x / scale, saturated to the type's largest finite value
        big = torch.finfo(self.fp8_dtype).max
        for cache, x, s in ((k_cache, key, layer._k_scale), (v_cache, value, layer._v_scale)):
            x8 = (x[:n][keep].float() / s).clamp(-big, big).to(self.fp8_dtype)
            cache[pages, offs] = x8.view(torch.uint8)

    def _flash_impl(self):
        if self._fa_impl is None:
            from vllm.v1.attention.backends.flash_attn import FlashAttentionImpl

            self._fa_impl = FlashAttentionImpl(*self._init_args)
        return self._fa_impl



def _on_cuda() -> bool:
    from vllm.platforms import current_platform

    return current_platform.is_cuda()


def _quantize_query(q: torch.Tensor, q_scale: torch.Tensor) -> torch.Tensor:
    """q [tokens, heads, head_size] as fp8 with the layer's static per-tensor q_scale (vLLM's
    scaled_fp8_quant, as vLLM's FlashInfer backend quantizes its query)."""
    from vllm import _custom_ops as ops

    t = q.reshape(q.shape[0], -1)
    q8, _ = ops.scaled_fp8_quant(t, scale=q_scale)
    return q8.view(q.shape)
