"""Contract tests of treeattn's vLLM plugin against the pinned vllm==0.33.0, on the CPU (run by
.venv-vllm's pytest: bash tools/setup_vllm.sh && .venv-vllm/bin/python -m pytest
tests/integrations -q).

* the plugin loads through vLLM's own loader (vllm.plugins.load_general_plugins, entry point
  vllm.general_plugins) and AttentionBackendEnum.CUSTOM resolves to TreeAttnBackend;
  register() is idempotent;
* every method the plugin implements has the signature of the pinned base class (or of
  FlashAttention's, for do_kv_cache_update), so an API drift fails here;
* validate_configuration and the impl refuse what treeattn cannot do, naming it;
* builder.build + impl.forward + impl.do_kv_cache_update on CPU tensors match a float64
  reference over several steps of a batch from a paged KV manager (multi-level shared prompts,
  forks with copy-on-write, finished requests, chunked prefill mixed with decode), in both KV
  layouts the backend declares, with a float16 cache and with vLLM's fp8 caches (uint8 tensors,
  e4m3 and e5m2, per-layer scale tensors != 1 changed in place between steps; the reference runs
  on the dequantized cache). Decode tokens run treeattn's CPU executor through the serving
  core; vLLM's FlashAttention has no CPU kernels, so the prefill tokens run a torch reference
  (sdpa_prefill below, set as TreeAttnImpl.prefill_fn) in this test only.
"""

from __future__ import annotations

import inspect
import json
import math
import os
from types import SimpleNamespace

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("VLLM_TARGET_DEVICE", "cpu")

import numpy as np  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402

import vllm.plugins  # noqa: E402
from vllm.v1.attention import backend as vbase  # noqa: E402
from vllm.v1.attention.backends.registry import AttentionBackendEnum  # noqa: E402

import treeattn.integrations.vllm as plugin  # noqa: E402
from treeattn.engine.kv import KVCache  # noqa: E402

P, H, HK, D = 16, 4, 2, 64


@pytest.fixture(scope="module")
def backend():
    vllm.plugins.load_general_plugins()
    return AttentionBackendEnum.CUSTOM.get_class()


@pytest.fixture(scope="module")
def vllm_config(tmp_path_factory):
    from vllm.config import DeviceConfig, ModelConfig, VllmConfig

    d = tmp_path_factory.mktemp("model")
    (d / "config.json").write_text(json.dumps({
        "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": H * D,
        "num_attention_heads": H, "num_key_value_heads": HK, "head_dim": D,
        "intermediate_size": 512, "num_hidden_layers": 2, "vocab_size": 1000,
        "max_position_embeddings": 4096, "rms_norm_eps": 1e-5, "torch_dtype": "float16"}))
    mc = ModelConfig(model=str(d), skip_tokenizer_init=True, dtype="float16")
    return VllmConfig(model_config=mc, device_config=DeviceConfig(device="cpu"))


def test_plugin_loads_through_vllm(backend):
    from importlib.metadata import entry_points

    from treeattn.integrations.vllm.backend import TreeAttnBackend

    eps = [e for e in entry_points(group="vllm.general_plugins") if e.name == "treeattn"]
    assert [e.value for e in eps] == ["treeattn.integrations.vllm:register"]
    assert backend is TreeAttnBackend
    assert AttentionBackendEnum.CUSTOM.get_path() == plugin.BACKEND_PATH
    assert AttentionBackendEnum["CUSTOM"] is AttentionBackendEnum.CUSTOM  # --attention-backend
    plugin.register()
    plugin.register()
    assert AttentionBackendEnum.CUSTOM.get_class() is TreeAttnBackend
    assert issubclass(backend, vbase.AttentionBackend)
    assert issubclass(backend.get_builder_cls(), vbase.AttentionMetadataBuilder)
    assert issubclass(backend.get_impl_cls(), vbase.AttentionImpl)


def _params(fn):
    return [(p.name, p.kind, p.default) for p in inspect.signature(fn).parameters.values()]


def test_signatures_match_pinned_base_classes(backend):
    from vllm.v1.attention.backends.flash_attn import FlashAttentionImpl

    builder, impl = backend.get_builder_cls(), backend.get_impl_cls()
    pairs = [(getattr(backend, m), getattr(vbase.AttentionBackend, m))
             for m in ("get_name", "get_impl_cls", "get_builder_cls", "get_supported_head_sizes",
                       "supports_compute_capability", "supported_kv_cache_layouts",
                       "validate_configuration")]
    pairs += [(builder.__init__, vbase.AttentionMetadataBuilder.__init__),
              (builder.build, vbase.AttentionMetadataBuilder.build),
              (impl.__init__, vbase.AttentionImpl.__init__),
              (impl.forward, vbase.AttentionImpl.forward),
              (impl.do_kv_cache_update, FlashAttentionImpl.do_kv_cache_update)]
    for ours, base in pairs:
        assert _params(ours) == _params(base), f"{ours.__qualname__} drifted from " \
                                               f"{base.__qualname__}"
    # full graphs of pure-decode batches (every decode batch within the graph bound runs on the
    # core's one graph plan; tests/python/test_serving_gpu.py replays it on a GPU)
    assert builder._cudagraph_support is vbase.AttentionCGSupport.UNIFORM_SINGLE_TOKEN_DECODE
    assert builder.get_cudagraph_support.__func__ is \
        vbase.AttentionMetadataBuilder.get_cudagraph_support.__func__
    assert builder.reorder_batch_threshold == 1
    assert backend.forward_includes_kv_cache_update is False


def test_validate_configuration_refuses_with_reasons(backend):
    from vllm.platforms.interface import DeviceCapability

    def reasons(**kw):
        args = dict(head_size=128, dtype=torch.float16, kv_cache_dtype="auto", block_size=16,
                    use_mla=False, has_sink=False, use_sparse=False, use_mm_prefix=False,
                    use_per_head_quant_scales=False, device_capability=DeviceCapability(9, 0),
                    attn_type="decoder")
        args.update(kw)
        return " | ".join(backend.validate_configuration(**args))

    assert reasons() == ""
    assert reasons(dtype=torch.bfloat16, head_size=64) == ""
    assert "MLA" in reasons(use_mla=True)
    assert "sliding window" in reasons(has_sliding_window=True)
    assert "head_size 80" in reasons(head_size=80)
    for fp8 in ("fp8", "fp8_e4m3"):  # vLLM's "fp8" is e4m3
        assert reasons(kv_cache_dtype=fp8) == ""
        assert reasons(kv_cache_dtype=fp8, device_capability=DeviceCapability(10, 0)) == ""
        assert reasons(kv_cache_dtype=fp8, dtype=torch.bfloat16, head_size=256) == ""
        # the prefill tokens run on FlashAttention: fp8 KV there needs FA3 on SM90 / FA4 on SM100
        assert "FA3 on SM90" in reasons(kv_cache_dtype=fp8,
                                        device_capability=DeviceCapability(8, 0))
        assert "FA3 on SM90" in reasons(kv_cache_dtype=fp8,
                                        device_capability=DeviceCapability(12, 0))
        assert "per-head KV quant scales" in reasons(kv_cache_dtype=fp8,
                                                     use_per_head_quant_scales=True)
    assert "no e5m2 kernels" in reasons(kv_cache_dtype="fp8_e5m2")
    for other in ("fp8_inc", "fp8_per_token_head", "int8_per_token_head", "nvfp4"):
        assert f"kv_cache_dtype {other!r}" in reasons(kv_cache_dtype=other)
    assert "dtype torch.float32" in reasons(dtype=torch.float32)
    assert "encoder" in reasons(attn_type="encoder")
    assert "compute capability" in reasons(device_capability=DeviceCapability(7, 5))
    assert all(r.startswith("treeattn: ") for r in backend.validate_configuration(
        80, torch.float32, "fp8", 16, True, False, False, False, False,
        DeviceCapability(9, 0), "decoder"))


@pytest.mark.parametrize("kw,word", [({"alibi_slopes": [1.0] * H}, "ALiBi"),
                                     ({"sliding_window": 128}, "sliding window"),
                                     ({"logits_soft_cap": 30.0}, "soft-cap"),
                                     ({"attn_type": "encoder"}, "encoder"),
                                     ({"kv_cache_dtype": "fp8_inc"}, "fp8_inc"),
                                     ({"kv_cache_dtype": "fp8_per_token_head"},
                                      "fp8_per_token_head"),
                                     ({"head_size": 96}, "head_size 96")])
def test_impl_refuses(backend, kw, word):
    args = dict(num_heads=H, head_size=D, scale=D ** -0.5, num_kv_heads=HK)
    args.update(kw)
    with pytest.raises(NotImplementedError, match=word):
        backend.get_impl_cls()(**args)


@pytest.mark.parametrize("kv", ["fp8", "fp8_e4m3", "fp8_e5m2"])
def test_impl_takes_fp8_and_refuses_what_flash_attention_cannot_prefill(backend, kv,
                                                                         monkeypatch):
    from vllm.platforms import current_platform
    from vllm.v1.attention.backends import fa_utils

    impl = backend.get_impl_cls()(H, D, D ** -0.5, HK, kv_cache_dtype=kv)
    want = torch.float8_e5m2 if kv == "fp8_e5m2" else torch.float8_e4m3fn
    assert impl.fp8_dtype is want and impl.kv_cache_dtype == kv
    # on CUDA the prefill tokens go to FlashAttentionImpl: refused where it cannot read the cache
    # (its own check: no e5m2 anywhere, e4m3 only with FA3 on SM90 / FA4 on SM100)
    monkeypatch.setattr(type(current_platform), "is_cuda", lambda self: True)
    monkeypatch.setattr(fa_utils, "flash_attn_supports_kv_cache_dtype",
                        lambda dt, **kw: dt != "fp8_e5m2")
    if kv == "fp8_e5m2":
        with pytest.raises(NotImplementedError, match="no e5m2 kernels"):
            backend.get_impl_cls()(H, D, D ** -0.5, HK, kv_cache_dtype=kv)
    else:
        backend.get_impl_cls()(H, D, D ** -0.5, HK, kv_cache_dtype=kv)
        monkeypatch.setattr(fa_utils, "flash_attn_supports_kv_cache_dtype", lambda dt, **kw: False)
        with pytest.raises(NotImplementedError, match="FA3 on SM90"):
            backend.get_impl_cls()(H, D, D ** -0.5, HK, kv_cache_dtype=kv)


@pytest.mark.parametrize("kv,fa_takes_fp8_q", [("auto", True), ("fp8", True), ("fp8", False)])
def test_prefill_delegation_to_flash_attention(backend, kv, fa_takes_fp8_q, monkeypatch):
    """What FlashAttentionImpl gets for the prefill tokens (it has no CPU kernels: a stand-in
    records its arguments): the layer, vLLM's packed cache as it is, and for an fp8 cache a query
    quantized with layer._q_scale where it takes fp8 queries (FA3), as vLLM's attention layer
    does for it."""
    from treeattn.integrations.vllm import backend as mod

    impl = backend.get_impl_cls()(H, D, D ** -0.5, HK, kv_cache_dtype=kv)
    calls = []
    impl._fa_impl = SimpleNamespace(supports_quant_query_input=fa_takes_fp8_q,
                                    forward=lambda *a: calls.append(a))
    monkeypatch.setattr(mod, "_quantize_query",
                        lambda q, s: (q.float() / s).to(torch.float8_e4m3fn))
    layer = SimpleNamespace(_q_scale=torch.tensor(0.5))
    q = torch.randn(5, H, D).half()
    kv_cache = torch.zeros(4, HK, P, 2 * D, dtype=torch.float16 if kv == "auto" else torch.uint8)
    out = torch.empty(5, H, D, dtype=torch.float16)
    impl._flash_prefill(layer, q, q[:, :HK], q[:, :HK], kv_cache, "fa-md", out)
    (got_layer, got_q, _, _, got_cache, got_md, got_out), = calls
    assert got_layer is layer and got_cache is kv_cache and got_md == "fa-md" and got_out is out
    if kv == "fp8" and fa_takes_fp8_q:
        assert got_q.dtype == torch.float8_e4m3fn
        torch.testing.assert_close(got_q.float() * 0.5, q.float(), rtol=2.0 ** -4, atol=1e-3)
    else:
        assert got_q is q


def test_microbatching_keeps_no_host_rows(backend, vllm_config, monkeypatch):
    """With microbatching vLLM makes one builder per microbatch and a request's steps may pass
    through either, so no builder can keep host copies of its rows: the per-step copy."""
    from vllm.v1.kv_cache_interface import FullAttentionSpec

    spec = FullAttentionSpec(block_size=P, num_kv_heads=HK, head_size=D, dtype=torch.float16)
    monkeypatch.setattr(vllm_config.cache_config, "num_gpu_blocks", 64)
    cls = backend.get_builder_cls()
    assert cls(spec, ["l"], vllm_config, torch.device("cpu")).host_rows is not None
    monkeypatch.setattr(type(vllm_config.parallel_config), "use_ubatching", property(lambda s: True))
    assert cls(spec, ["l"], vllm_config, torch.device("cpu")).host_rows is None


def test_lengths_copied_only_under_async_speculative_decoding(backend, vllm_config,
                                                              monkeypatch):
    """seq_lens_cpu_upper_bound is exact but for decode rows under asynchronous speculative
    decoding: only there does the builder copy the decode rows' lengths to the host."""
    from vllm.v1.kv_cache_interface import FullAttentionSpec

    spec = FullAttentionSpec(block_size=P, num_kv_heads=HK, head_size=D, dtype=torch.float16)
    cls = backend.get_builder_cls()

    def exact():
        return cls(spec, ["l"], vllm_config, torch.device("cpu")).exact_seq_lens

    assert exact()
    monkeypatch.setattr(vllm_config, "speculative_config", SimpleNamespace(
        num_speculative_tokens=3))
    monkeypatch.setattr(vllm_config.scheduler_config, "async_scheduling", True)
    assert not exact()
    monkeypatch.setattr(vllm_config.scheduler_config, "async_scheduling", False)
    assert exact()


def test_config_from_env_and_file(tmp_path):
    f = tmp_path / "treeattn.json"
    f.write_text(json.dumps({"planner": "query", "headroom": 3}))
    cfg = plugin.load_config({"TREEATTN_VLLM_CONFIG": str(f), "TREEATTN_VLLM_PRESET": "h200"})
    assert cfg == {"planner": "query", "preset": "h200", "headroom": 3.0}
    assert plugin.load_config({"TREEATTN_VLLM_PLANNER": "auto"})["planner"] == "auto"
    with pytest.raises(ValueError, match="TREEATTN_VLLM_PLANNER"):
        plugin.load_config({"TREEATTN_VLLM_PLANNER": "nope"})
    with pytest.raises(ValueError, match="TREEATTN_VLLM_HEADROOM"):
        plugin.load_config({"TREEATTN_VLLM_HEADROOM": "0.5"})
    f.write_text(json.dumps({"planer": "auto"}))
    with pytest.raises(ValueError, match="unknown keys"):
        plugin.load_config({"TREEATTN_VLLM_CONFIG": str(f)})


# ---- build + forward against a float64 reference


def sdpa_prefill(q, k_cache, v_cache, cm, out, scale, k_scale, v_scale):
    """Test-only prefill path: causal attention of each request's query tokens over its paged
    context (dequantized: an fp8 cache's value times the layer's scale) with torch SDPA in float32
    (vLLM's FlashAttention has no CPU kernels)."""
    ks = 1.0 if k_scale is None else float(k_scale)
    vs = 1.0 if v_scale is None else float(v_scale)
    qs = cm.query_start_loc_cpu
    lens = cm.seq_lens_cpu_upper_bound
    for i in range(cm.num_reqs):
        a, b, n = int(qs[i]), int(qs[i + 1]), int(lens[i])
        if b == a:
            continue
        pages = cm.block_table_tensor[i, :(n + P - 1) // P].long()
        kk = k_cache[pages].reshape(-1, HK, D)[:n].float().transpose(0, 1) * ks
        vv = v_cache[pages].reshape(-1, HK, D)[:n].float().transpose(0, 1) * vs
        kk, vv = kk.repeat_interleave(H // HK, 0), vv.repeat_interleave(H // HK, 0)
        pos = torch.arange(n - (b - a), n)
        mask = torch.arange(n)[None, :] <= pos[:, None]
        o = torch.nn.functional.scaled_dot_product_attention(
            q[a:b].float().transpose(0, 1), kk, vv, attn_mask=mask, scale=scale)
        out[a:b] = o.transpose(0, 1).to(out.dtype)


def reference(q, k, v, bt, lens, qlens, scale):
    """Float64: query token j of request i (position lens[i] - qlens[i] + j) attends positions
    [0, its own] of the request's pages."""
    out = np.empty(q.shape)
    t = 0
    for i, (n, m) in enumerate(zip(lens, qlens)):
        pages = np.asarray(bt[i][:(n + P - 1) // P])
        kk = k[pages].reshape(-1, HK, D)[:n].astype(np.float64)
        vv = v[pages].reshape(-1, HK, D)[:n].astype(np.float64)
        for j in range(m):
            pos = n - m + j
            for h in range(H):
                s = kk[: pos + 1, h // (H // HK)] @ q[t, h].astype(np.float64) * scale
                w = np.exp(s - s.max())
                out[t, h] = (w / w.sum()) @ vv[: pos + 1, h // (H // HK)]
            t += 1
    return out


class Server:
    """A paged KV manager driving mixed batches: decode rows first, then prefill chunks."""

    def __init__(self, seed, num_pages):
        self.rng = np.random.default_rng(seed)
        self.kv = KVCache(1, num_pages, P, 1, 8, allocate=False)
        system = list(self.rng.integers(0, 50, 2 * P))  # shared by everyone: 2 pages
        self.prompts = [system + list(self.rng.integers(0, 50, 2 * P + 5)) for _ in range(2)]
        self.decoding: list = []
        self.prefilling: list = []  # (sid, remaining prompt tokens)

    def step(self):
        """Returns rows [(sid, new token count)] (decodes first) and the slots written."""
        r = self.rng.random()
        # a request starts once the previous prefill is done, so its prompt hits the cached
        # pages (two prefills of one prompt at once would register duplicate pages, and a third
        # request could mix them: see docs/vllm.md, "content-deduplicated pages")
        if (r < 0.35 or not self.decoding) and not self.prefilling:
            base = self.prompts[int(self.rng.integers(0, 2))]
            cut = int(self.rng.integers(2 * P + 1, len(base)))
            prompt = base[:cut] + list(self.rng.integers(0, 50, 7))
            sid, cached = self.kv.new_seq(prompt)
            self.prefilling.append((sid, prompt[cached:]))
        elif r < 0.5 and self.decoding:
            i = int(self.rng.integers(0, len(self.decoding)))
            self.kv.free_seq(self.decoding[i])
            self.decoding[i] = self.decoding[-1]
            self.decoding.pop()
        elif r < 0.6 and self.decoding:
            self.decoding += self.kv.fork(self.decoding[int(self.rng.integers(0, len(
                self.decoding)))], 2)
        rows, slots = [], []
        for sid in self.decoding:
            slots.append(self.kv.append(sid, int(self.rng.integers(0, 50))))
            rows.append((sid, 1))
        nxt = []
        for sid, rest in self.prefilling:
            chunk = rest[: int(self.rng.integers(3, 20))]
            slots += [self.kv.append(sid, int(t)) for t in chunk]
            rows.append((sid, len(chunk)))
            if len(chunk) < len(rest):
                nxt.append((sid, rest[len(chunk):]))
            else:
                self.decoding.append(sid)
        self.prefilling = nxt
        return rows, slots, self.kv.take_copies()


@pytest.mark.parametrize("kv", ["auto", "fp8", "fp8_e5m2"])
@pytest.mark.parametrize("layout", ["LBNHC", "LBHNC"])
def test_build_and_forward_match_reference(backend, vllm_config, layout, kv, monkeypatch):
    from vllm.utils.torch_utils import kv_cache_dtype_str_to_dtype
    from vllm.v1.kv_cache_interface import FullAttentionSpec, get_kv_quant_mode

    num_pages = 512
    # vLLM's cache tensor and spec: float16 for "auto" here, uint8 for the fp8 types
    cache_dtype = kv_cache_dtype_str_to_dtype(kv, vllm_config.model_config)
    assert cache_dtype == (torch.float16 if kv == "auto" else torch.uint8)
    monkeypatch.setattr(vllm_config.cache_config, "cache_dtype", kv)
    spec = FullAttentionSpec(block_size=P, num_kv_heads=HK, head_size=D, dtype=cache_dtype,
                             kv_quant_mode=get_kv_quant_mode(kv))
    # full decode graphs up to 64 rows (vLLM's CPU platform captures none: set as on CUDA)
    monkeypatch.setattr(vllm_config.compilation_config, "max_cudagraph_capture_size", 64)
    # the cache's block count, as vLLM's worker sets it before the builders are made
    monkeypatch.setattr(vllm_config.cache_config, "num_gpu_blocks", num_pages)
    builder = backend.get_builder_cls()(spec, ["layer.0"], vllm_config, torch.device("cpu"))
    fp8 = {"auto": None, "fp8": torch.float8_e4m3fn, "fp8_e5m2": torch.float8_e5m2}[kv]
    assert builder.core.kv_dtype == {"auto": torch.float16, "fp8": "fp8_e4m3",
                                     "fp8_e5m2": "fp8_e5m2"}[kv]
    scale = D ** -0.5
    impl = backend.get_impl_cls()(H, D, scale, HK, kv_cache_dtype=kv)
    impl.prefill_fn = sdpa_prefill
    # the attention layer's scales, as vLLM keeps them: 0-dim float32 tensors on the device
    layer = SimpleNamespace(_k_scale=torch.tensor(0.37), _v_scale=torch.tensor(1.7),
                            _q_scale=torch.tensor(1.0))
    rng = np.random.default_rng(11)
    if layout == "LBNHC":  # physical [B, N, H, 2D], logical [B, H, N, 2D]
        kv_cache = torch.zeros(num_pages, P, HK, 2 * D, dtype=cache_dtype).transpose(1, 2)
    else:
        kv_cache = torch.zeros(num_pages, HK, P, 2 * D, dtype=cache_dtype)
    server = Server(5, num_pages)
    mixed = decode_steps = 0
    # request slots as vLLM's model runner V2 hands them (req_idx, reused after a request ends)
    # with its host is_prefilling flags; one run leaves them out (vLLM's V1 runner): the builder
    # then copies the decode rows' tables each step
    host_slots = not (kv == "fp8" and layout == "LBNHC")
    slot_of: dict = {}
    seen: set = set()
    for step in range(40):
        if step == 20:  # new values in the same tensors (what a CUDA graph replay would read)
            layer._k_scale.fill_(2.0 ** -3)
            layer._v_scale.fill_(0.61)
        rows, slots, copies = server.step()
        if not rows:
            continue
        # copy-on-write of forked partial pages, before this step's writes (engine order)
        flat = kv_cache.transpose(1, 2).reshape(num_pages * P, HK, 2 * D)
        for src, dst in copies:
            kv_cache.transpose(1, 2)[dst // P, dst % P] = flat[src]
        qlens = [m for _, m in rows]
        lens = [server.kv.length(s) for s, _ in rows]
        T = sum(qlens)
        width = max((n + P - 1) // P for n in lens) + 1
        bt = np.zeros((len(rows), width), np.int32)
        for i, (s, _) in enumerate(rows):
            pages = server.kv.block_table(s)
            bt[i, : len(pages)] = pages
        live = {sid for sid, _ in rows}
        for sid in [x for x in slot_of if x not in live]:  # finished: the slot is free again
            del slot_of[sid]
        for sid, _ in rows:
            if sid not in slot_of:
                slot_of[sid] = min(set(range(len(slot_of) + 1)) - set(slot_of.values()))
        lead = next((i for i, m in enumerate(qlens) if m > 1), len(qlens))
        extra = {}
        if host_slots:
            extra = dict(req_idx=np.array([slot_of[sid] for sid, _ in rows], dtype=np.intp),
                         is_prefilling=torch.tensor([m > 1 for m in qlens]))
        # decode rows the builder has no host copy of: forked children at their first step
        forks = sum(sid not in seen for sid, _ in rows[:lead])
        seen |= live
        copied = builder.host_rows.rows_copied
        qsl = torch.tensor(np.concatenate([[0], np.cumsum(qlens)]), dtype=torch.int32)
        cm = vbase.CommonAttentionMetadata(
            query_start_loc=qsl, query_start_loc_cpu=qsl.clone(),
            seq_lens=torch.tensor(lens, dtype=torch.int32), num_reqs=len(rows),
            num_actual_tokens=T, max_query_len=max(qlens), max_seq_len=max(lens),
            block_table_tensor=torch.from_numpy(bt),
            slot_mapping=torch.tensor(slots, dtype=torch.int64),
            seq_lens_cpu_upper_bound=torch.tensor(lens, dtype=torch.int32), **extra)
        md = builder.build(0, cm)
        assert (md.num_decodes, md.num_prefills) == (lead, len(qlens) - lead)
        if host_slots:
            # rows copied to the host: the prefilling ones, and decode rows only at their first
            # step (on CPU tensors a copy lands at once, so a prefill's copy serves its decode)
            assert builder.host_rows.rows_copied - copied == len(qlens) - lead + forks
        q = torch.from_numpy(rng.uniform(-1, 1, (T, H, D))).half()
        key = torch.from_numpy(rng.uniform(-1, 1, (T, HK, D))).half()
        value = torch.from_numpy(rng.uniform(-1, 1, (T, HK, D))).half()
        impl.do_kv_cache_update(layer, key, value, kv_cache, cm.slot_mapping)
        out = torch.full((T, H, D), float("nan"), dtype=torch.float16)
        assert impl.forward(layer, q, key, value, kv_cache, md, out) is out
        kc, vc = kv_cache[..., :D].transpose(1, 2), kv_cache[..., D:].transpose(1, 2)
        if fp8 is None:
            kc, vc = kc.float(), vc.float()
        else:  # the dequantized cache
            kc = kc.view(fp8).float() * float(layer._k_scale)
            vc = vc.view(fp8).float() * float(layer._v_scale)
            assert md.plan is None or md.plan.kv_dtype_bytes == 1
            # the write quantized with the scale: the cache holds the rounded key / value
            got = kc[cm.slot_mapping // P, cm.slot_mapping % P]
            rel = {torch.float8_e4m3fn: 2.0 ** -4, torch.float8_e5m2: 2.0 ** -3}[fp8]
            assert (got - key.float()).abs().max() <= rel * key.float().abs().max() + 1e-6
        ref = reference(q.numpy(), kc.numpy(), vc.numpy(), bt, lens, qlens, scale)
        np.testing.assert_allclose(out.float().numpy(), ref, atol=4e-3)
        mixed += md.num_decodes > 0 and md.num_prefills > 0
        decode_steps += md.num_decodes > 0
    if host_slots:
        # a capture batch (made-up slots, zeroed tables): every page read on the device, the
        # host rows left as they were
        known, copied = dict(builder.host_rows.rows), builder.host_rows.rows_copied
        n = 4
        z = torch.zeros(n + 1, dtype=torch.int32)
        dummy = vbase.CommonAttentionMetadata(
            query_start_loc=torch.arange(n + 1, dtype=torch.int32),
            query_start_loc_cpu=torch.arange(n + 1, dtype=torch.int32),
            seq_lens=torch.full((n,), 3, dtype=torch.int32), num_reqs=n, num_actual_tokens=n,
            max_query_len=1, max_seq_len=3, block_table_tensor=torch.zeros(n, 8, dtype=torch.int32),
            slot_mapping=torch.zeros(n, dtype=torch.int64), seq_lens_cpu_upper_bound=z[:n] + 3,
            req_idx=np.arange(n), is_prefilling=torch.zeros(n, dtype=torch.bool))
        assert builder.build_for_cudagraph_capture(dummy).num_decodes == n
        assert builder.host_rows.rows_copied == copied and set(builder.host_rows.rows) == set(known)
    assert mixed >= 5 and decode_steps >= 15
    assert builder.core.sync.counts["incremental"] > 0, builder.core.sync.counts
    if host_slots:  # no block-table copy of a whole step; decode-time pages read on the device
        assert builder.table_copies == 0
        assert builder.core.counts["device_page_steps"] >= 10, builder.core.counts
    else:
        assert builder.table_copies == decode_steps
    # the graph bound from the config (max_cudagraph_capture_size rows, max_model_len tokens):
    # the decode batches ran on the core's one graph plan
    assert builder.core.graph_bound == (64, -(-vllm_config.model_config.max_model_len // P))
    assert builder.core.graph_plan is not None and builder.core.plans == {}
    assert math.isfinite(float(out.float().abs().max()))
