"""Contract tests of treeattn's SGLang plugin against the pinned sglang==0.5.23, on the CPU (run by
.venv-sglang's pytest: bash tools/setup_sglang.sh && .venv-sglang/bin/python -m pytest
tests/integrations/test_sglang_contract.py -q).

* the plugin loads through SGLang's own loader (sglang.srt.plugins.load_plugins, entry-point
  group sglang.srt.plugins, filtered by SGLANG_PLUGINS): the registry maps ``treeattn`` to the
  factory, SGLang's command line accepts ``--attention-backend treeattn``; register() is
  idempotent;
* every method the backend implements has the signature of the pinned AttentionBackend, so an
  API drift fails here;
* the backend refuses what treeattn cannot do, naming it (model / server configuration at
  construction, per layer at first use, decode CUDA graphs);
* forward_decode / forward_extend on SGLang's own CPU pools (ReqToTokenPool, MHATokenToKVPool,
  TokenToKVPoolAllocator / PagedTokenToKVPoolAllocator) match a float64 reference over steps of
  a batch driven like SGLang's scheduler drives it (multi-level shared prefixes from a prefix
  cache, forks, finished requests, extend and mixed batches), at page size 1 and 8. Decode runs
  treeattn's CPU executor through the serving core; extend and mixed batches run SGLang's
  torch_native backend (the plugin's prefill delegate on the CPU). The model runner is a
  stand-in holding the attributes a backend reads (no model is loaded);
* fp8 KV (--kv-cache-dtype fp8_e4m3 / fp8_e5m2: SGLang's pool in float8, stored as uint8): the
  configuration is accepted and planned for 1-byte KV; decode reads the layer's k_scale /
  v_scale (its parameters in place, None = 1) and matches the float64 reference on the
  dequantized cache with scales != 1 (changed midway), with a scale-applying prefill stand-in;
  at scale 1 the real torch_native delegate runs extend on the fp8 pool; a layer with scales
  != 1 and the scale-blind torch_native delegate is refused.
"""

from __future__ import annotations

import inspect
import json
import os
from collections import Counter
from types import SimpleNamespace

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import numpy as np  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402

import sglang.srt.plugins as sgl_plugins  # noqa: E402
from sglang.srt.arg_groups.choices import ATTENTION_BACKEND_CHOICES  # noqa: E402
from sglang.srt.layers.attention.attention_registry import ATTENTION_BACKENDS  # noqa: E402
from sglang.srt.layers.attention.base_attn_backend import AttentionBackend  # noqa: E402
from sglang.srt.layers.radix_attention import AttentionType, RadixAttention  # noqa: E402
from sglang.srt.mem_cache.allocator.paged import PagedTokenToKVPoolAllocator  # noqa: E402
from sglang.srt.mem_cache.allocator.token import TokenToKVPoolAllocator  # noqa: E402
from sglang.srt.mem_cache.memory_pool import (  # noqa: E402
    KVWriteLoc, MHATokenToKVPool, ReqToTokenPool)
from sglang.srt.model_executor.forward_batch_info import ForwardBatch, ForwardMode  # noqa: E402
from sglang.srt.speculative.spec_info import SpeculativeAlgorithm  # noqa: E402

import treeattn.integrations.sglang as plugin  # noqa: E402

H, HK, D, LAYERS = 4, 2, 64, 2
SCALE = 0.1  # not the default 1/sqrt(head_dim), so a dropped scale fails
#: SGLang's --kv-cache-dtype fp8 names -> its pool dtypes
FP8 = {"fp8_e4m3": torch.float8_e4m3fn, "fp8_e5m2": torch.float8_e5m2}


@pytest.fixture(scope="module")
def backend_cls(monkeypatch_module):
    monkeypatch_module.setenv("SGLANG_PLUGINS", "treeattn")
    sgl_plugins.load_plugins()
    from treeattn.integrations.sglang.backend import TreeAttnBackend

    return TreeAttnBackend


@pytest.fixture(scope="module")
def monkeypatch_module():
    mp = pytest.MonkeyPatch()
    yield mp
    mp.undo()


def test_plugin_loads_through_sglang(backend_cls, monkeypatch):
    from importlib.metadata import entry_points

    eps = [e for e in entry_points(group=sgl_plugins.GENERAL_PLUGINS_GROUP)
           if e.name == "treeattn"]
    assert sgl_plugins.GENERAL_PLUGINS_GROUP == "sglang.srt.plugins"
    assert [e.value for e in eps] == ["treeattn.integrations.sglang:register"]
    assert ATTENTION_BACKENDS["treeattn"] is plugin.create_backend
    assert ATTENTION_BACKEND_CHOICES.count("treeattn") == 1
    plugin.register()
    plugin.register()
    assert ATTENTION_BACKENDS["treeattn"] is plugin.create_backend
    assert ATTENTION_BACKEND_CHOICES.count("treeattn") == 1
    # SGLANG_PLUGINS filters by entry-point name
    monkeypatch.setenv("SGLANG_PLUGINS", "someone-else")
    assert "treeattn" not in sgl_plugins.load_plugins_by_group("sglang.srt.plugins")
    monkeypatch.setenv("SGLANG_PLUGINS", "treeattn")
    assert set(sgl_plugins.load_plugins_by_group("sglang.srt.plugins")) == {"treeattn"}


def write_model_config(folder):
    """A model folder's config.json (a small Llama) for SGLang's command-line parser."""
    (folder / "config.json").write_text(json.dumps({
        "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": H * D,
        "num_attention_heads": H, "num_key_value_heads": HK, "head_dim": D,
        "intermediate_size": 512, "num_hidden_layers": LAYERS, "vocab_size": 1000,
        "max_position_embeddings": 4096, "rms_norm_eps": 1e-5, "torch_dtype": "float16"}))


def test_cli_accepts_the_backend(backend_cls, tmp_path):
    from sglang.srt.server_args import prepare_server_args

    write_model_config(tmp_path)
    args = prepare_server_args(["--model-path", str(tmp_path), "--attention-backend",
                                "treeattn"])
    assert args.attention_backend == "treeattn"
    args = prepare_server_args(["--model-path", str(tmp_path), "--decode-attention-backend",
                                "treeattn", "--prefill-attention-backend", "flashinfer"])
    assert args.decode_attention_backend == "treeattn"
    with pytest.raises(SystemExit):
        prepare_server_args(["--model-path", str(tmp_path), "--attention-backend", "nope"])


def _params(fn):
    return [(p.name, p.kind, p.default) for p in inspect.signature(fn).parameters.values()]


def test_signatures_match_pinned_base_class(backend_cls):
    ours = sorted(n for n, f in vars(backend_cls).items()
                  if callable(f) and not n.startswith("_"))
    assert ours == sorted([
        "forward_decode", "forward_extend", "get_cuda_graph_seq_len_fill_value",
        "init_cuda_graph_state", "init_forward_metadata", "init_forward_metadata_in_graph",
        "init_forward_metadata_out_graph"])
    for name in ours:
        assert _params(getattr(backend_cls, name)) == _params(getattr(AttentionBackend, name)), \
            f"{name} drifted from the pinned AttentionBackend.{name}"
    assert issubclass(backend_cls, AttentionBackend)
    # SGLang calls factories as fn(model_runner)
    assert [p.name for p in inspect.signature(plugin.create_backend).parameters.values()] == \
        ["model_runner"]


# ---- a model runner stand-in over SGLang's own CPU pools


def make_runner(page_size, size=4096, max_reqs=64, max_ctx=512, head_dim=D,
                kv_dtype=torch.float16, **over):
    """kv_dtype: the pool's dtype, as SGLang makes it from --kv-cache-dtype (fp8_e4m3 ->
    torch.float8_e4m3fn, fp8_e5m2 -> torch.float8_e5m2; stored as uint8)."""
    pool = MHATokenToKVPool(size, page_size, kv_dtype, HK, head_dim, LAYERS, "cpu", False)
    runner = SimpleNamespace(
        model_config=SimpleNamespace(is_encoder_decoder=False), use_mla_backend=False,
        sliding_window_size=None, is_hybrid_swa=False, attention_chunk_size=None,
        spec_algorithm=SpeculativeAlgorithm.from_string(None), is_draft_worker=False,
        dtype=torch.float16, kv_cache_dtype=kv_dtype, token_to_kv_pool=pool,
        req_to_token_pool=ReqToTokenPool(max_reqs, max_ctx, "cpu", False),
        page_size=page_size, device="cpu", prefill_attention_backend_str="treeattn",
        decode_attention_backend_str="treeattn", init_new_workspace=False)
    for k, v in over.items():
        setattr(runner, k, v)
    return runner


def layers(scales=None):
    """The model's attention layers; scales: per layer None (no fp8 scales, as a model without
    a quantization config has) or (k_scale, v_scale), set as SGLang's BaseKVCacheMethod does
    (float32 parameters k_scale / v_scale, floats k_scale_float / v_scale_float)."""
    out = []
    for i in range(LAYERS):
        layer = RadixAttention(H, D, SCALE, HK, i)
        if scales is not None and scales[i] is not None:
            ks, vs = scales[i]
            layer.k_scale = torch.nn.Parameter(torch.tensor(ks, dtype=torch.float32),
                                               requires_grad=False)
            layer.v_scale = torch.nn.Parameter(torch.tensor(vs, dtype=torch.float32),
                                               requires_grad=False)
            layer.k_scale_float, layer.v_scale_float = float(ks), float(vs)
        out.append(layer)
    return out


def scale_of(layer, which):
    """The scale the cache of the layer is dequantized with now (its tensor's value; 1 when
    it has none)."""
    t = getattr(layer, f"{which}_scale")
    return 1.0 if t is None else float(t)


@pytest.mark.parametrize("over,word", [
    ({"use_mla_backend": True}, "MLA"),
    ({"sliding_window_size": 4096}, "sliding window"),
    ({"model_config": SimpleNamespace(is_encoder_decoder=True)}, "encoder-decoder"),
    ({"kv_cache_dtype": torch.float8_e4m3fnuz, "kv_dtype": torch.float8_e4m3fnuz},
     "kv cache dtype torch.float8_e4m3fnuz"),
    ({"kv_cache_dtype": torch.float8_e4m3fn}, "KV pool dtype torch.float16 != "),
    ({"kv_cache_dtype": torch.float32}, "kv cache dtype torch.float32"),
    ({"dtype": torch.float32}, "dtype torch.float32"),
    ({"spec_algorithm": SpeculativeAlgorithm.from_string("EAGLE")}, "speculative decoding"),
    ({"attention_chunk_size": 8192}, "chunked local attention"),
    ({"token_to_kv_pool": SimpleNamespace()}, "KV pool SimpleNamespace"),
    ({"head_dim": 96}, "head_dim 96"),
])
def test_construction_refuses(backend_cls, over, word):
    over = dict(over)
    kv_dtype = over.pop("kv_dtype", torch.float16)
    with pytest.raises(NotImplementedError, match=word):
        ATTENTION_BACKENDS["treeattn"](make_runner(1, size=256, kv_dtype=kv_dtype, **over))


@pytest.mark.parametrize("kw,word", [
    ({"logit_cap": 30.0}, "logit cap"),
    ({"sliding_window_size": 128}, "sliding window"),
    ({"is_cross_attention": True}, "cross attention"),
    ({"attn_type": AttentionType.ENCODER_ONLY}, "encoder_only"),
    ({"v_head_dim": 128}, "v_head_dim 128"),
])
def test_layer_refuses(backend_cls, kw, word):
    backend = ATTENTION_BACKENDS["treeattn"](make_runner(1, size=256))
    layer = RadixAttention(H, D, SCALE, HK, 0, **kw)
    q = torch.zeros(1, H * D, dtype=torch.float16)
    with pytest.raises(NotImplementedError, match=word):
        backend.forward_decode(q, None, None, layer, None)
    with pytest.raises(NotImplementedError, match=word):
        backend.forward_extend(q, None, None, layer, None)


def test_extra_arguments_refused(backend_cls, monkeypatch):
    runner = make_runner(1, size=256)
    backend = ATTENTION_BACKENDS["treeattn"](runner)
    fb = decode_batch([1], [1], [5])
    runner.req_to_token_pool.write((1, slice(0, 1)), torch.tensor([5], dtype=torch.int32))
    assert backend.get_cuda_graph_seq_len_fill_value() == 1
    backend.init_forward_metadata(fb)
    q = torch.zeros(1, H * D, dtype=torch.float16)
    with pytest.raises(NotImplementedError, match="sinks"):
        backend.forward_decode(q, None, None, layers()[0], fb, sinks=torch.zeros(H))
    # SGLang routes extend elsewhere (--prefill-attention-backend): no delegate is built
    runner.prefill_attention_backend_str = "flashinfer"
    hybrid = ATTENTION_BACKENDS["treeattn"](runner)
    assert hybrid.prefill_backend is None
    with pytest.raises(NotImplementedError, match="no prefill backend"):
        hybrid.forward_extend(q, None, None, layers()[0], fb)
    runner.prefill_attention_backend_str = "treeattn"
    monkeypatch.setenv("TREEATTN_SGLANG_PREFILL", "nope")
    with pytest.raises(ValueError, match="TREEATTN_SGLANG_PREFILL: unknown .*torch_native"):
        ATTENTION_BACKENDS["treeattn"](runner)
    monkeypatch.setenv("TREEATTN_SGLANG_PREFILL", "treeattn")
    with pytest.raises(ValueError, match="TREEATTN_SGLANG_PREFILL: 'treeattn' is this"):
        ATTENTION_BACKENDS["treeattn"](runner)


def test_config_prefill_key(tmp_path):
    """The SGLang plugin's settings: the shared reader (treeattn.integrations._common) under the
    TREEATTN_SGLANG prefix, plus the 'prefill' backend name from the file or the variable."""
    assert plugin.load_config({}) == {"planner": "auto", "preset": None, "headroom": 2.0,
                                      "prefill": None}
    f = tmp_path / "treeattn.json"
    f.write_text(json.dumps({"prefill": "triton", "preset": "a100"}))
    env = {"TREEATTN_SGLANG_CONFIG": str(f), "TREEATTN_SGLANG_PLANNER": "query"}
    assert plugin.load_config(env) == {"planner": "query", "preset": "a100", "headroom": 2.0,
                                       "prefill": "triton"}
    env["TREEATTN_SGLANG_PREFILL"] = "fa3"
    assert plugin.load_config(env)["prefill"] == "fa3"
    with pytest.raises(ValueError, match="TREEATTN_SGLANG_HEADROOM"):
        plugin.load_config({"TREEATTN_SGLANG_HEADROOM": "0.5"})
    f.write_text(json.dumps({"prefil": "triton"}))
    with pytest.raises(ValueError, match=r"TREEATTN_SGLANG_CONFIG: unknown keys \['prefil'\]"):
        plugin.load_config({"TREEATTN_SGLANG_CONFIG": str(f)})


# ---- forward against a float64 reference


def decode_batch(idx, lens, slots):
    t = lambda x: torch.tensor(x, dtype=torch.int64)  # noqa: E731
    return ForwardBatch(forward_mode=ForwardMode.DECODE, batch_size=len(idx),
                        input_ids=torch.zeros(len(idx), dtype=torch.int64),
                        req_pool_indices=t(idx), seq_lens=t(lens), out_cache_loc=t(slots),
                        seq_lens_sum=sum(lens), seq_lens_cpu=t(lens))


def extend_batch(mode, idx, prefix, lens, slots):
    t = lambda x: torch.tensor(x, dtype=torch.int64)  # noqa: E731
    ext = [n - p for n, p in zip(lens, prefix)]
    return ForwardBatch(forward_mode=mode, batch_size=len(idx),
                        input_ids=torch.zeros(sum(ext), dtype=torch.int64),
                        req_pool_indices=t(idx), seq_lens=t(lens), out_cache_loc=t(slots),
                        seq_lens_sum=sum(lens), seq_lens_cpu=t(lens),
                        extend_prefix_lens=t(prefix), extend_seq_lens=t(ext),
                        extend_prefix_lens_cpu=list(prefix), extend_seq_lens_cpu=ext,
                        extend_num_tokens=sum(ext))


def reference(pool, layer_id, req_to_token, idx, prefix, lens, q, k_scale=1.0, v_scale=1.0):
    """Float64: query token j of request i (position prefix[i] + j) attends the KV of the slots
    req_to_token[idx[i], :position + 1]. An fp8 pool is dequantized: K = k_scale x the stored
    value (SGLang's set_kv_buffer stores k / k_scale), V likewise."""
    k = pool.get_key_buffer(layer_id).double().numpy() * k_scale
    v = pool.get_value_buffer(layer_id).double().numpy() * v_scale
    q = q.double().numpy().reshape(-1, H, D)
    out = np.empty_like(q)
    t = 0
    for i, p, n in zip(idx, prefix, lens):
        slots = req_to_token[i, :n].long().numpy()
        for pos in range(p, n):
            for h in range(H):
                kk, vv = k[slots[: pos + 1], h // (H // HK)], v[slots[: pos + 1], h // (H // HK)]
                s = kk @ q[t, h] * SCALE
                w = np.exp(s - s.max())
                out[t, h] = (w / w.sum()) @ vv
            t += 1
    return out.reshape(t, H * D)


class Scheduler:
    """Drives SGLang's pools as its scheduler does with a prefix cache: a system prompt shared by
    everyone, two group prompts under it, forks of running requests (the parallel samples of a
    prompt); a new request prefills its uncached tokens in an EXTEND batch (or in a MIXED batch
    with the running requests' decode tokens), running requests decode one token per step,
    finished ones give back their row and the pages nobody else holds."""

    def __init__(self, runner, seed):
        self.rng = np.random.default_rng(seed)
        self.P = P = runner.page_size
        self.rtp, self.pool = runner.req_to_token_pool, runner.token_to_kv_pool
        if P == 1:
            self.alloc = TokenToKVPoolAllocator(self.pool.size, self.pool.dtype, "cpu",
                                                self.pool, need_sort=False)
        else:
            self.alloc = PagedTokenToKVPoolAllocator(self.pool.size, P, self.pool.dtype, "cpu",
                                                     self.pool, need_sort=False)
        self.running: dict = {}  # pool index -> length
        self.pages: dict = {}  # pool index -> pages it holds
        self.cached: list = []  # slots of the prompts the prefix cache holds (whole pages)
        self.holders = Counter()  # page -> requests and cache entries holding it
        self.stats = Counter()

    def slots(self, idx, n):
        return self.rtp.req_to_token[idx, :n].tolist()

    def hold(self, pages, d):
        for page in pages:
            self.holders[page] += d
            if self.holders[page] == 0:
                del self.holders[page]
                self.alloc.free(torch.tensor([page * self.P]))

    def new_request(self):
        """(pool index, prefix length) of a new request, its cached prefix in req_to_token."""
        P = self.P
        if self.running and self.rng.random() < 0.3:  # fork: the full pages of a running one
            src = list(self.running)[int(self.rng.integers(0, len(self.running)))]
            prefix = self.slots(src, (self.running[src] - 1) // P * P)
            self.stats["fork"] += 1
        elif self.cached:
            prefix = self.cached[int(self.rng.integers(0, len(self.cached)))]
        else:
            prefix = []
        idx = self.rtp.alloc_rows(1)[0]
        self.pages[idx] = {s // P for s in prefix}
        self.hold(self.pages[idx], +1)
        if prefix:
            self.rtp.write((idx, slice(0, len(prefix))), torch.tensor(prefix, dtype=torch.int32))
        return idx, len(prefix)

    def step(self, backend, lays, graph=0):
        """graph: decode batches of at most that many rows go through the graph path
        (init_forward_metadata_out_graph, as SGLang's decode graph runner calls it before capture
        and before every replay; larger ones run eagerly, as SGLang runs them)."""
        P = self.P
        r = self.rng.random()
        if self.running and r < 0.15:  # a request finishes
            idx = list(self.running)[int(self.rng.integers(0, len(self.running)))]
            del self.running[idx]
            self.hold(self.pages.pop(idx), -1)
            self.rtp.free_rows([idx])
            self.stats["finish"] += 1
        decoding = [(i, n, n + 1) for i, n in self.running.items()]
        if not self.running or r > 0.6:
            idx, p = self.new_request()
            prefill = [(idx, p, p + int(self.rng.integers(P + 1, 4 * P + 5)))]
            mode = ForwardMode.MIXED if decoding and self.rng.random() < 0.4 else \
                ForwardMode.EXTEND
            rows = decoding + prefill if mode == ForwardMode.MIXED else prefill
        else:
            mode, rows = ForwardMode.DECODE, decoding
        new = self._allocate(rows)
        idx, prefix, lens = zip(*rows)
        pad = 0
        if mode == ForwardMode.DECODE and len(rows) <= graph:
            # a graph replay: padded to the captured size like SGLang's runner (the padded rows
            # hold the fill value 1 and a stale request index, their KV goes to slot 0)
            size = next(b for b in (1, 2, 4, 8, 16, 32, 64) if b >= len(rows))
            pad = size - len(rows)
            stale = [int(self.rng.integers(0, self.rtp.req_to_token.shape[0])) for _ in range(pad)]
            fb = decode_batch(list(idx) + stale, list(lens) + [1] * pad, list(new) + [0] * pad)
            fb.num_padding = pad
        elif mode == ForwardMode.DECODE:
            fb = decode_batch(idx, lens, new)
        else:
            fb = extend_batch(mode, idx, prefix, lens, new)
        self.stats[mode.name] += 1
        if mode == ForwardMode.DECODE and len(rows) <= graph:
            backend.init_forward_metadata_out_graph(fb, in_capture=self.stats["graph"] == 0)
            self.stats["graph"] += 1
            self.stats["padded"] += pad > 0
        else:
            backend.init_forward_metadata(fb)
        T = len(new)
        for layer in lays:
            q = torch.from_numpy(self.rng.uniform(-1, 1, (T + pad, H * D))).half()
            k = torch.from_numpy(self.rng.uniform(-1, 1, (T + pad, HK, D))).half()
            v = torch.from_numpy(self.rng.uniform(-1, 1, (T + pad, HK, D))).half()
            out = backend.forward(q, k, v, layer, fb)
            assert out.shape[0] == T + pad
            ref = reference(self.pool, layer.layer_id, self.rtp.req_to_token, idx, prefix, lens,
                            q[:T], scale_of(layer, "k"), scale_of(layer, "v"))
            np.testing.assert_allclose(out[:T].float().numpy(), ref, atol=4e-3)
        for i, p, n in rows:
            if i not in self.running and len(self.cached) < 3 and n >= 2 * P:
                c = self.slots(i, n // P * P)  # its prompt enters the prefix cache
                self.cached.append(c)
                self.hold({s // P for s in c}, +1)
            self.running[i] = n

    def _allocate(self, rows):
        """Slots of every new token, in batch order, written into req_to_token (SGLang's
        allocators: by slot at page size 1, else continuing each request's last page)."""
        P = self.P
        prefix = torch.tensor([p for _, p, _ in rows])
        lens = torch.tensor([n for _, _, n in rows])
        if P == 1:
            out = self.alloc.alloc(int((lens - prefix).sum()))
        else:
            last = torch.tensor([int(self.rtp.req_to_token[i, p - 1]) if p else -1
                                 for i, p, _ in rows])
            if bool((lens == prefix + 1).all()):
                out = self.alloc.alloc_decode(lens, lens, last)
            else:
                out = self.alloc.alloc_extend(prefix, prefix, lens, lens, last,
                                              int((lens - prefix).sum()))
        assert out is not None, "pool exhausted"
        t = 0
        for i, p, n in rows:
            self.rtp.write((i, slice(p, n)), out[t:t + n - p].to(torch.int32))
            pages = {int(s) // P for s in out[t:t + n - p]} - self.pages[i]
            self.pages[i] |= pages
            self.hold(pages, +1)
            t += n - p
        return out.tolist()


@pytest.mark.parametrize("kv,page_size", [("float16", 1), ("float16", 8), ("fp8_e4m3", 1),
                                           ("fp8_e5m2", 8)])
def test_forward_matches_reference(backend_cls, kv, page_size):
    """fp8: a pool without scales (1.0, what SGLang uses when the checkpoint has none) with the
    plugin's own prefill delegate on the CPU, SGLang's torch_native, which then runs the extend
    and mixed batches on the fp8 pool; the reference reads the dequantized cache."""
    runner = make_runner(page_size, kv_dtype=FP8.get(kv, torch.float16))
    backend = ATTENTION_BACKENDS["treeattn"](runner)
    assert isinstance(backend, backend_cls)
    assert type(backend.prefill_backend).__name__ == "TorchNativeAttnBackend"
    sched = Scheduler(runner, seed=7 + page_size)
    lays = layers()
    for _ in range(60):
        sched.step(backend, lays)
    s = sched.stats
    assert s["DECODE"] >= 20 and s["EXTEND"] >= 5 and s["MIXED"] >= 3, s
    assert s["fork"] >= 3 and s["finish"] >= 3, s
    core = backend.cores[(H, HK, D)]
    assert core.sync.counts["incremental"] > 0, core.sync.counts
    # shared prefixes reached the tree: its nodes hold fewer tokens than its rows attend
    tree = core.tree
    _, lens = tree.to_block_tables()
    assert sum(tree.node(v)["tokens"] for v in range(tree.num_nodes)) < sum(lens)


@pytest.mark.parametrize("page_size", [1, 8])
def test_decode_graph_steps_match_reference(backend_cls, page_size):
    """Decode CUDA graphs: init_cuda_graph_state gives the cores the graph bound (max_bs rows of
    req_to_token's width in pages); decode batches prepared through init_forward_metadata_out_graph
    (capture, then every replay, padded to the captured size with stale request indices in the
    padded rows) run on the core's one graph plan and match the reference (on
    the CPU the graph plan is the layout the steps are checked against; the GPU side of the core
    is tests/python/test_serving_gpu.py)."""
    runner = make_runner(page_size)
    backend = ATTENTION_BACKENDS["treeattn"](runner)
    width = runner.req_to_token_pool.req_to_token.shape[1]
    backend.init_cuda_graph_state(16, 16)
    sched = Scheduler(runner, seed=21 + page_size)
    lays = layers()
    for _ in range(50):
        sched.step(backend, lays, graph=16)
    assert sched.stats["graph"] >= 15 and sched.stats["padded"] >= 5, sched.stats
    core = backend.cores[(H, HK, D)]
    assert core.graph_bound == (16, -(-width // page_size))
    assert core.graph_plan is not None and core.plans.get("graph") is None
    assert core.plan.num_queries == len(sched.running) or sched.stats["EXTEND"]


# ---- fp8 KV cache (--kv-cache-dtype fp8_e4m3 / fp8_e5m2)


@pytest.mark.parametrize("name", sorted(FP8))
def test_fp8_configuration_accepted(backend_cls, tmp_path, name):
    """SGLang's fp8 pool (float8 dtype, uint8 storage) is accepted: the serving core plans for
    1-byte KV of that kind and decode reads the pool's buffers as the float8 dtype."""
    from sglang.srt.mem_cache.kv_cache_dtype import configure_kv_cache_dtype

    if name == "fp8_e4m3":  # SGLang's own mapping (it refuses fp8_e5m2 on a CPU platform)
        _, dtype = configure_kv_cache_dtype(
            server_args_kv_cache_dtype=name, model=None, model_dtype=torch.float16,
            is_draft_worker=False, is_dflash=False, speculative_draft_attention_backend=None)
        assert dtype is torch.float8_e4m3fn
    dtype = FP8[name]
    runner = make_runner(1, size=256, kv_dtype=dtype)
    pool = runner.token_to_kv_pool
    assert pool.store_dtype == torch.uint8 and pool.k_buffer[0].dtype == torch.uint8
    backend = ATTENTION_BACKENDS["treeattn"](runner)
    assert backend.fp8 and backend._core_args["kv_dtype"] == name
    fb = decode_batch([1], [1], [5])
    runner.req_to_token_pool.write((1, slice(0, 1)), torch.tensor([5], dtype=torch.int32))
    backend.init_forward_metadata(fb)
    q = torch.zeros(1, H * D, dtype=torch.float16)
    kv = torch.full((1, HK, D), 0.5, dtype=torch.float16)
    out = backend.forward_decode(q, kv.clone(), kv.clone(), layers()[0], fb)
    assert backend.cores[(H, HK, D)].plan.kv_dtype_bytes == 1
    assert pool.get_key_buffer(0).dtype == dtype and pool.k_buffer[0][5].float().mean() > 0
    torch.testing.assert_close(out.float(), torch.full((1, H * D), 0.5))
    k_cache, _ = backend._kv_views(0)
    assert k_cache.dtype == dtype and k_cache.data_ptr() == pool.k_buffer[0].data_ptr()
    # the command line takes it with the backend
    write_model_config(tmp_path)
    from sglang.srt.server_args import prepare_server_args

    args = prepare_server_args(["--model-path", str(tmp_path), "--attention-backend",
                                "treeattn", "--kv-cache-dtype",
                                name])
    assert args.attention_backend == "treeattn" and args.kv_cache_dtype == name


def test_fp8_scales_reach_decode(backend_cls):
    """Decode reads the layer's k_scale / v_scale parameters in place (a 1-element view of
    the same memory, so a captured graph would replay with the value they hold then), falls
    back to the floats, and takes None as 1."""
    runner = make_runner(1, size=256, kv_dtype=torch.float8_e4m3fn)
    backend = ATTENTION_BACKENDS["treeattn"](runner)
    scaled, plain = layers([(0.37, 1.7), None])
    cache = backend._kv_views(0)[0]
    ks = backend._scale(scaled, "k", cache)
    assert ks.shape == (1,) and ks.data_ptr() == scaled.k_scale.data_ptr()
    scaled.k_scale.data.fill_(0.5)
    assert float(ks) == 0.5
    assert backend._scale(plain, "k", cache) is None and backend._scale(plain, "v", cache) is None
    scaled.v_scale = torch.nn.Parameter(torch.tensor(2.0, dtype=torch.float64))  # not float32
    assert backend._scale(scaled, "v", cache) == 1.7  # the float


@pytest.mark.parametrize("name", sorted(FP8))
def test_fp8_decode_writes_with_the_scales(backend_cls, name):
    """forward_decode stores the token's k / k_scale and v / v_scale (SGLang's convention), so
    scale x stored value gives back K and V up to the fp8 rounding."""
    runner = make_runner(1, size=256, kv_dtype=FP8[name])
    backend = backend_cls(runner, prefill_backend=ScaledPrefill(runner))
    layer = layers([(0.37, 1.7), None])[0]
    fb = decode_batch([1], [1], [5])
    runner.req_to_token_pool.write((1, slice(0, 1)), torch.tensor([5], dtype=torch.int32))
    backend.init_forward_metadata(fb)
    g = torch.Generator().manual_seed(0)
    k = (torch.rand(1, HK, D, generator=g) * 2 - 1).half()
    v = (torch.rand(1, HK, D, generator=g) * 2 - 1).half()
    q = torch.zeros(1, H * D, dtype=torch.float16)
    backend.forward_decode(q, k.clone(), v.clone(), layer, fb)
    pool = runner.token_to_kv_pool
    rel = 2.0 ** -4 if name == "fp8_e4m3" else 2.0 ** -3
    for buf, x, sc in ((pool.get_key_buffer(0), k, 0.37), (pool.get_value_buffer(0), v, 1.7)):
        got = buf[5].double() * sc
        assert torch.all((got - x.double()).abs() <= rel * x.double().abs() + 1e-3 * sc)
        assert not torch.allclose(buf[5].double(), x.double(), atol=1e-2)  # scaled, not raw


def test_fp8_scales_with_a_scale_blind_prefill_refused(backend_cls):
    """torch_native writes and reads the fp8 cache without the layer's scales: a layer whose
    scales are not 1 is refused (its prefill KV would be stored unscaled), scale 1 is not."""
    backend = ATTENTION_BACKENDS["treeattn"](make_runner(1, size=256,
                                                         kv_dtype=torch.float8_e5m2))
    assert type(backend.prefill_backend).__name__ == "TorchNativeAttnBackend"
    scaled, ones = layers([(0.37, 1.0), (1.0, 1.0)])
    q = torch.zeros(1, H * D, dtype=torch.float16)
    for fwd in (backend.forward_decode, backend.forward_extend):
        with pytest.raises(NotImplementedError,
                           match=r"fp8 KV scales \[0.37.*TorchNativeAttnBackend.*"
                                 r"TREEATTN_SGLANG_PREFILL"):
            fwd(q, None, None, scaled, None)
    backend._check_layer(ones)  # scale 1: accepted


class ScaledPrefill(AttentionBackend):
    """Stand-in for a prefill backend that applies the fp8 scales (flashinfer, fa3, triton:
    GPU only): writes the batch's K/V as SGLang's flashinfer backend does
    (set_kv_buffer(..., layer.k_scale, layer.v_scale), which stores k / k_scale) and answers
    the float64 attention on the dequantized cache."""

    def __init__(self, runner):
        super().__init__()
        self.pool, self.rtp = runner.token_to_kv_pool, runner.req_to_token_pool

    def init_forward_metadata(self, forward_batch):
        self.fb = forward_batch

    def forward_extend(self, q, k, v, layer, forward_batch, save_kv_cache=True, **kwargs):
        fb = forward_batch
        if save_kv_cache:
            self.pool.set_kv_buffer(layer, KVWriteLoc.for_batch(fb), k.clone(), v.clone(),
                                    layer.k_scale, layer.v_scale)
        idx = fb.req_pool_indices.tolist()
        out = reference(self.pool, layer.layer_id, self.rtp.req_to_token, idx,
                        fb.extend_prefix_lens_cpu, fb.seq_lens_cpu.tolist(), q,
                        scale_of(layer, "k"), scale_of(layer, "v"))
        return torch.from_numpy(out).to(q.dtype)


@pytest.mark.parametrize("name,page_size", [("fp8_e4m3", 8), ("fp8_e5m2", 1)])
def test_fp8_forward_matches_reference(backend_cls, name, page_size):
    """The scheduler run on an fp8 pool with scales != 1 (layer 0: parameters and floats;
    layer 1: none, i.e. 1): decode matches the float64 reference on the dequantized cache
    (scale x stored value). Midway layer 0's scale parameters change in place (the floats go
    stale): decode follows the parameters, as a captured graph would."""
    runner = make_runner(page_size, kv_dtype=FP8[name])
    backend = backend_cls(runner, prefill_backend=ScaledPrefill(runner))
    sched = Scheduler(runner, seed=3 + page_size)
    lays = layers([(0.37, 1.7), None])
    for step in range(50):
        if step == 25:
            lays[0].k_scale.data.fill_(0.61)
            lays[0].v_scale.data.fill_(2.5)
        sched.step(backend, lays)
    s = sched.stats
    assert s["DECODE"] >= 15 and s["EXTEND"] >= 4, s
    core = backend.cores[(H, HK, D)]
    assert core.plan.kv_dtype_bytes == 1 and core.sync.counts["incremental"] > 0
