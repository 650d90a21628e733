"""CPU tests of the engine's fp8 KV cache (issue 24): saturating quantize-on-write with per-layer
scales, bit-exact copy-on-write, the kv_dtype / scale checks (errors naming the argument), every
workload with an fp8 cache on the sdpa reference (eager and emulated CUDA graphs), the FlashInfer
backend's fp8 plan/run arguments (stand-in module), the logits drift against the model-dtype KV
(check.kv_drift) and the bench CLI flags. The treeattn backend in fp8 runs where this treeattn has
the fp8 API and its CPU executor takes fp8 tensors (skipped otherwise). Skipped without torch."""

from __future__ import annotations

import json
import math
import sys
import types

import pytest

torch = pytest.importorskip("torch")

from treeattn.engine import Engine, KVCache, Model, ModelConfig, workloads  # noqa: E402
from treeattn.engine import backends  # noqa: E402
from treeattn.engine._checks import kv_dtype_arg  # noqa: E402
from treeattn.engine.check import kv_drift  # noqa: E402
from treeattn.engine.kv import dequantize, quantize  # noqa: E402

from test_engine import _FakeFlashInferDecode  # noqa: E402

torch.set_num_threads(min(2, torch.get_num_threads()))
E4M3, E5M2 = torch.float8_e4m3fn, torch.float8_e5m2
FP8 = [("fp8_e4m3", E4M3), ("fp8_e5m2", E5M2)]
SIZES = workloads.PRESETS["cpu"]


@pytest.fixture(scope="module")
def tiny():
    return Model.random(ModelConfig.preset("tiny"), seed=1)


# ---- quantize on write


@pytest.mark.parametrize("dtype,top", [(E4M3, 448.0), (E5M2, 57344.0)])
def test_quantize_saturates_and_keeps_nan(dtype, top):
    x = torch.tensor([1e6, -1e6, math.inf, -math.inf, top * 1.01, 0.5, math.nan, -0.0])
    y = quantize(x, dtype, 1.0).float()
    assert y[:5].tolist() == [top, -top, top, -top, top]  # torch's cast alone: NaN / inf
    assert y[5] == 0.5 and math.isnan(y[6]) and y[7] == 0
    # the scale divides on write and multiplies on read
    s = torch.tensor([4.0])
    z = dequantize(quantize(torch.tensor([2.0, 1e9]), dtype, s), torch.float32, s)
    assert z.tolist() == [2.0, top * 4]


@pytest.mark.parametrize("name,dtype", FP8)
def test_kv_cache_fp8_write_gather_copy(name, dtype):
    kv = KVCache(2, 8, 4, 2, 8, dtype=dtype, k_scale=[0.5, 2.0], v_scale=0.25)
    assert kv.k.dtype == dtype and kv.k.element_size() == 1 and kv.fp8
    assert kv.k_scale.dtype == torch.float32 and kv.k_scale.tolist() == [0.5, 2.0]
    g = torch.Generator().manual_seed(0)
    k = torch.randn(3, 2, 8, generator=g) * 3
    v = torch.randn(3, 2, 8, generator=g) * 3
    k[0, 0, 0] = 1e6  # saturates: 448 / 57344 x scale, not NaN
    slots = torch.tensor([5, 6, 9])
    kv.write(1, slots, k, v)
    gk, gv = kv.gather(1, slots, torch.float32)
    want_k = (k / 2.0).clamp(-torch.finfo(dtype).max, torch.finfo(dtype).max).to(dtype).float() * 2
    want_v = (v / 0.25).to(dtype).float() * 0.25
    assert torch.equal(gk, want_k) and torch.equal(gv, want_v)
    assert gk[0, 0, 0] == torch.finfo(dtype).max * 2
    assert kv.gather(0, slots, torch.float32)[0].abs().sum() == 0  # other layer untouched
    # copy-on-write moves bits, on one layer (decode) or on every layer (prefill)
    kv.copy_slots(1, torch.tensor([5, 6]), torch.tensor([12, 13]))
    assert torch.equal(kv.gather(1, torch.tensor([12, 13]), torch.float32)[0], gk[:2])
    kv.apply_copies([(9, 20)])
    assert torch.equal(kv.k[1].view(-1, 2, 8)[20].view(torch.uint8),
                       kv.k[1].view(-1, 2, 8)[9].view(torch.uint8))


def test_kv_dtype_and_scale_errors_name_the_argument(tiny):
    with pytest.raises(ValueError, match=r"kv_dtype: unknown KV dtype 'fp9'.*fp8_e4m3"):
        Engine(tiny, "sdpa", kv_dtype="fp9")
    with pytest.raises(TypeError, match="kv_dtype: expected a KV dtype name"):
        Engine(tiny, "sdpa", kv_dtype=8)
    with pytest.raises(ValueError, match="kv_dtype: expected a floating or fp8 dtype"):
        Engine(tiny, "sdpa", kv_dtype=torch.int8)
    with pytest.raises(ValueError, match="kv_dtype: 'bf16' differs from the model's dtype"):
        Engine(tiny, "sdpa", kv_dtype="bf16")  # (the tiny model is fp32)
    for bad in (0.0, -1.0, math.nan, math.inf):
        with pytest.raises(ValueError, match="k_scale: expected a finite number in"):
            Engine(tiny, "sdpa", kv_dtype="fp8_e4m3", k_scale=bad)
    with pytest.raises(ValueError, match=r"v_scale\[1\]: expected a finite number"):
        Engine(tiny, "sdpa", kv_dtype="fp8_e4m3", v_scale=[1.0, 0.0])
    with pytest.raises(ValueError, match="v_scale: expected one scale per layer"):
        Engine(tiny, "sdpa", kv_dtype="fp8_e4m3", v_scale=[1.0, 1.0, 1.0])
    with pytest.raises(TypeError, match="k_scale: expected a number or one number per layer"):
        Engine(tiny, "sdpa", kv_dtype="fp8_e4m3", k_scale="1")
    with pytest.raises(ValueError, match="k_scale: scales other than 1 need an fp8 KV cache"):
        Engine(tiny, "sdpa", k_scale=2.0)
    assert kv_dtype_arg("kv_dtype", None, torch.bfloat16) == torch.bfloat16
    assert kv_dtype_arg("kv_dtype", "auto", torch.float16) == torch.float16
    assert kv_dtype_arg("kv_dtype", "fp8", torch.float16) == E4M3
    assert kv_dtype_arg("kv_dtype", E5M2, torch.float16) == E5M2


def test_treeattn_backend_fp8_needs_the_fp8_api(tiny, monkeypatch):
    monkeypatch.setattr(backends, "treeattn_has_fp8", lambda: False)
    with pytest.raises(ValueError, match="kv_dtype: fp8_e4m3 KV cache: this treeattn has no fp8"):
        Engine(tiny, "treeattn", kv_dtype="fp8_e4m3")
    Engine(tiny, "treeattn")  # the model's dtype needs nothing new


# ---- workloads with an fp8 cache


@pytest.mark.parametrize("wl", workloads.WORKLOADS)
@pytest.mark.parametrize("name,dtype", FP8)
def test_workloads_run_with_fp8_kv_sdpa(tiny, wl, name, dtype):
    eng = Engine(tiny, "sdpa", page_size=4, max_tokens=workloads.max_tokens(wl, SIZES[wl]),
                 max_seqs=workloads.max_seqs(wl, SIZES[wl]), kv_dtype=name, k_scale=0.5,
                 v_scale=0.25)
    res = workloads.run(eng, wl, SIZES[wl])
    assert res.tokens > 0 and eng.cache.k.dtype == dtype
    eng.cache.check()
    assert eng.cache.k.view(torch.uint8).any()  # something was written


def test_fp8_graphs_emulated_match_eager(tiny):
    """The CUDA-graph bookkeeping (padded rows, static buffers, scratch page) in fp8, on the
    CPU: the same logits as eager decode."""
    from treeattn.engine import Recorder

    out, rec = {}, Recorder()
    for graphs in (False, True):
        eng = Engine(tiny, "sdpa", page_size=4, max_tokens=1024, cuda_graphs=graphs, seed=3,
                     kv_dtype="fp8_e4m3")
        eng.recorder = rec if not graphs else rec.replay()
        logs = []
        eng.on_logits = lambda kind, lg: logs.append(lg.float().clone())
        workloads.run(eng, "W3", SIZES["W3"], temperature=0.0)
        out[graphs] = logs
    assert len(out[False]) == len(out[True])
    for a, b in zip(out[False], out[True]):
        torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("name", ["fp8_e4m3", "fp8_e5m2"])
def test_kv_drift_fp8_against_model_dtype(tiny, name):
    d = kv_drift(tiny, "W1", SIZES["W1"], "sdpa", name, page_size=4)
    assert d["calls"] > 0 and d["rows"] >= d["calls"]
    assert 0 < d["max_abs_diff"] < 2.0 and 0 < d["mean_abs_diff"] < d["max_abs_diff"]
    assert 0.5 <= d["greedy_agreement"] <= 1.0 and d["kl_max"] < 0.1
    same = kv_drift(tiny, "W1", SIZES["W1"], "sdpa", None, page_size=4)  # model dtype twice
    assert same["max_abs_diff"] == 0 and same["greedy_agreement"] == 1.0


# ---- FlashInfer backend (stand-in module: its fp8 contract in torch)


class _FakeFp8Decode(_FakeFlashInferDecode):
    """Checks the fp8 arguments: kv_data_type = the cache's dtype, host float scales, then runs
    the fp16/fp32 stand-in on the dequantized cache."""

    planned = []

    def plan(self, *a, q_data_type=None, kv_data_type=None, **k):
        type(self).planned.append(kv_data_type)
        super().plan(*a, q_data_type=q_data_type, kv_data_type=kv_data_type, **k)

    def run(self, q, kv, k_scale=None, v_scale=None):
        kc, vc = kv
        if kc.element_size() > 1:  # the model-dtype cache: no scales
            assert k_scale is None and v_scale is None
            return super().run(q, kv)
        assert isinstance(k_scale, float) and isinstance(v_scale, float)
        return super().run(q, (kc.float() * k_scale, vc.float() * v_scale))


@pytest.mark.parametrize("graphs", [False, True])
def test_flashinfer_backend_fp8(tiny, monkeypatch, graphs):
    fake = types.ModuleType("flashinfer")
    fake.BatchDecodeWithPagedKVCacheWrapper = _FakeFp8Decode
    monkeypatch.setitem(sys.modules, "flashinfer", fake)
    _FakeFp8Decode.planned = []
    d = kv_drift(tiny, "W4", SIZES["W4"], "flashinfer", "fp8_e4m3", page_size=4,
                 cuda_graphs=graphs, k_scale=0.5, v_scale=2.0)
    assert E4M3 in _FakeFp8Decode.planned and torch.float32 in _FakeFp8Decode.planned
    assert d["kl_max"] < 0.1 and d["greedy_agreement"] >= 0.5
    # against the sdpa reference on the same fp8 cache: the same attention
    same = kv_drift(tiny, "W4", SIZES["W4"], "flashinfer", "fp8_e4m3", ref_kv_dtype="fp8_e4m3",
                    ref_backend="sdpa", page_size=4, cuda_graphs=graphs, k_scale=0.5,
                    v_scale=2.0)
    assert same["kl_max"] < 1e-6 and same["greedy_agreement"] == 1.0


# ---- treeattn backend in fp8 (where the fp8 API and its CPU executor exist)


def _treeattn_cpu_fp8() -> str:
    """'' when treeattn decodes an fp8 cache on the CPU, else why not."""
    import treeattn

    if not backends.treeattn_has_fp8():
        return "treeattn has no fp8 API yet (plan(kv_dtype=), decode(k_scale=, v_scale=))"
    try:
        tree = treeattn.PrefixTree.from_levels("N=1 C=5")
        p = treeattn.plan(tree, 2, 1, 64, kv_dtype="fp8_e4m3")
        k = torch.zeros(tree.num_pages, tree.page_size, 1, 64).to(E4M3)
        treeattn.decode(torch.zeros(1, 2, 64, dtype=torch.bfloat16), k, k.clone(), p,
                        k_scale=1.0, v_scale=1.0)
    except Exception as e:  # noqa: BLE001 - the reason is the skip message
        return f"treeattn CPU decode of an fp8 cache fails: {type(e).__name__}: {e}"
    return ""


@pytest.mark.parametrize("wl", ["W1", "W3", "W6"])
@pytest.mark.parametrize("name", ["fp8_e4m3", "fp8_e5m2"])
def test_treeattn_fp8_cpu_matches_sdpa_fp8(tiny, wl, name):
    """treeattn's CPU executor on the engine's fp8 cache against sdpa on the same cache (a bf16
    model: treeattn's fp8 path takes fp16/bf16 queries), teacher-forced."""
    why = _treeattn_cpu_fp8()
    if why:
        pytest.skip(why)
    d = kv_drift(tiny.to(torch.bfloat16), wl, SIZES[wl], "treeattn", name, ref_kv_dtype=name,
                 ref_backend="sdpa", page_size=4, k_scale=0.5, v_scale=2.0,
                 cuda_graphs=wl == "W3")  # (W3 with the emulated CUDA graphs)
    assert d["kl_max"] < 1e-3 and d["greedy_agreement"] > 0.9, d


def test_treeattn_fp8_needs_a_16_bit_model(tiny, monkeypatch):
    monkeypatch.setattr(backends, "treeattn_has_fp8", lambda: True)  # (with or without it)
    with pytest.raises(ValueError, match="kv_dtype: .*treeattn.*float16 or bfloat16 model"):
        Engine(tiny, "treeattn", kv_dtype="fp8_e4m3")


# ---- CLI


def test_bench_cli_kv_dtype_and_drift(tmp_path, capsys):
    from treeattn.engine.cli import main

    js = tmp_path / "b.json"
    rc = main(["bench", "--device", "cpu", "--workloads", "W1", "--backends", "sdpa,none",
               "--kv-dtype", "auto,fp8_e4m3", "--kv-scale", "0.5", "--drift",
               "--drift-steps", "3", "--json", str(js), "--no-progress"])
    assert rc == 0
    d = json.load(open(js))
    recs = {(r["backend"], r["kv_dtype"]): r for r in d["records"]}
    assert set(recs) == {("sdpa", "auto"), ("none", "auto"), ("sdpa", "fp8_e4m3"),
                         ("none", "fp8_e4m3")}
    assert all(r["decode_tok_s"] > 0 for r in recs.values())
    (dr,) = d["drift"]  # sdpa only ('none' has no attention to drift)
    assert dr["backend"] == "sdpa" and dr["kv_dtype"] == "fp8_e4m3" and dr["steps"] == 3
    assert 0 <= dr["greedy_agreement"] <= 1 and dr["max_abs_diff"] > 0
    assert d["kv_scale"] == 0.5
    assert "greedy agree" in capsys.readouterr().out


@pytest.mark.parametrize("argv,msg", [
    (["--kv-dtype", "fp9"], "argument --kv-dtype: kv_dtype: unknown KV dtype 'fp9'"),
    (["--kv-dtype", "fp8,fp8"], "argument --kv-dtype: kv_dtype: a KV dtype is named twice"),
    (["--kv-scale", "0"], "argument --kv-scale: expected a number > 0"),
    (["--kv-scale", "-1"], "argument --kv-scale: expected a finite decimal number"),
    (["--drift", "--dry-run"], "argument --drift: not used with --dry-run"),
])
def test_bench_cli_kv_flag_errors(argv, msg, capsys):
    from treeattn.engine.cli import main

    with pytest.raises(SystemExit) as e:
        main(["bench", "--device", "cpu", *argv])
    assert e.value.code == 2
    assert msg in capsys.readouterr().err
