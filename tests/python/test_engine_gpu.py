"""GPU tests of treeattn.engine (marked gpu; skipped without torch + CUDA + a CUDA build): every
workload W0-W6 with the CUDA backends (treeattn, treeattn-query, flashinfer when importable, sdpa)
under CUDA graphs, teacher-forced against the fp32 sdpa path; graphs vs eager; a branch alone vs
inside its tree. fp8 KV caches (issue 24): each backend on an fp8 cache against the sdpa
reference on the same fp8 cache (scales 1 and others), graphs vs eager, and the logits drift
of fp8 against bf16 KV on W1. The model has the Llama-3-8B attention shape (32/8 heads, head_dim
128) with few layers and a small vocabulary so the suite stays short."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

import treeattn  # noqa: E402
from treeattn.engine import Engine, Model, ModelConfig, Recorder, workloads  # noqa: E402
from treeattn.engine.backends import available  # noqa: E402
from treeattn.engine.backends import kv_support  # noqa: E402
from treeattn.engine.check import kl_rows, kv_drift, teacher_forced_kl  # noqa: E402

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device"),
    pytest.mark.skipif(not treeattn.built_with_cuda, reason="treeattn built without CUDA"),
]
KL_MAX = 1e-3
SIZES = workloads.PRESETS["gpu-test"]


@pytest.fixture(scope="module")
def model():
    cfg = ModelConfig.preset("llama3-8b", num_layers=2, vocab_size=4096, hidden_size=1024,
                             intermediate_size=2048)
    return Model.random(cfg, dtype=torch.bfloat16, device="cuda", seed=7)


@pytest.fixture(scope="module")
def ref_model(model):
    return model.to(torch.float32)


@pytest.mark.parametrize("wl", workloads.WORKLOADS)
@pytest.mark.parametrize("backend", ["treeattn", "treeattn-query", "flashinfer", "sdpa"])
def test_workload_kl_cuda_graphs(model, ref_model, wl, backend):
    why = available(backend, torch.device("cuda"))
    if why:
        pytest.skip(why)
    kls = teacher_forced_kl(model, wl, SIZES[wl], backend, ref_model=ref_model, page_size=16,
                            cuda_graphs=True)
    assert max(kls) < KL_MAX, f"{wl} {backend}: {kls}"


@pytest.mark.parametrize("backend,kv", [("treeattn", None), ("sdpa", None),
                                        ("treeattn", "fp8_e4m3")])
def test_graphs_match_eager(model, backend, kv):
    if kv:
        _fp8_skip(backend, kv)
    out = {}
    rec = Recorder()
    for graphs in (False, True):  # the graph run replays the eager run's decisions
        eng = Engine(model, backend, max_tokens=8192, cuda_graphs=graphs, seed=3, kv_dtype=kv)
        eng.recorder = rec if not graphs else rec.replay()
        logs = []
        eng.on_logits = lambda kind, lg: logs.append(lg.float().cpu())
        workloads.run(eng, "W3", SIZES["W3"], temperature=0.0)
        out[graphs] = logs
        if graphs:
            assert any(s.captured for s in eng.steps)
    assert len(out[False]) == len(out[True])
    for a, b in zip(out[False], out[True]):
        assert float(kl_rows(a, b).max()) < KL_MAX


def test_branch_alone_equals_branch_in_tree_gpu(model):
    prompt = list(range(5, 400))
    eng = Engine(model, "treeattn", max_tokens=8192, seed=5)
    sid, lg = eng.prefill(prompt)
    seqs = [sid] + eng.fork(sid, 7)
    toks = eng.sample(lg[None].expand(8, -1), 1.0)
    stream, in_tree = [], []
    for _ in range(12):
        o = eng.decode(list(zip(seqs, toks)))
        stream.append(toks[5])
        in_tree.append(o[5].float().cpu())
        toks = eng.sample(o, 1.0)
    alone = Engine(model, "treeattn", max_tokens=8192)
    s, _ = alone.prefill(prompt)
    for t, want in zip(stream, in_tree):
        got = alone.decode([(s, t)])[0].float().cpu()
        assert float(kl_rows(want[None], got[None])) < KL_MAX


# ---- fp8 KV cache (issue 24)


def _fp8_skip(backend, kv="fp8_e4m3"):
    why = available(backend, torch.device("cuda")) or kv_support(
        backend, {"fp8_e4m3": torch.float8_e4m3fn, "fp8_e5m2": torch.float8_e5m2}[kv])
    if why:
        pytest.skip(why)


@pytest.mark.parametrize("wl,kv", [("W1", "fp8_e4m3"), ("W4", "fp8_e4m3"), ("W6", "fp8_e4m3"),
                                   ("W3", "fp8_e5m2")])
@pytest.mark.parametrize("backend", ["treeattn", "treeattn-query", "flashinfer"])
def test_fp8_backend_matches_sdpa_on_the_same_cache(model, wl, kv, backend):
    """Same fp8 cache (the same quantized values), CUDA graphs: the backend against sdpa's
    attention on the dequantized values."""
    _fp8_skip(backend, kv)
    d = kv_drift(model, wl, SIZES[wl], backend, kv, ref_kv_dtype=kv, ref_backend="sdpa",
                 cuda_graphs=True)
    assert d["kl_max"] < KL_MAX, (wl, backend, kv, d)


@pytest.mark.parametrize("scale", [1 / 64, 4.0])
@pytest.mark.parametrize("backend", ["treeattn", "flashinfer"])
def test_fp8_scales_other_than_one(model, backend, scale):
    """k_scale / v_scale != 1: small ones saturate large K/V values on write (as vLLM's
    quantizer does), large ones lose precision; the backend and sdpa still read the same
    dequantized cache."""
    _fp8_skip(backend)
    d = kv_drift(model, "W2", SIZES["W2"], backend, "fp8_e4m3", ref_kv_dtype="fp8_e4m3",
                 ref_backend="sdpa", cuda_graphs=True, k_scale=scale, v_scale=scale * 2)
    assert d["kl_max"] < KL_MAX, (backend, scale, d)


@pytest.mark.parametrize("backend", ["treeattn", "flashinfer"])
def test_fp8_drift_against_bf16_kv_w1(model, backend):
    """The drift the bench reports (fp8 e4m3 vs bf16 KV, same backend): bounded."""
    _fp8_skip(backend)
    d = kv_drift(model, "W1", SIZES["W1"], backend, "fp8_e4m3", cuda_graphs=True)
    print(f"W1 {backend} fp8_e4m3 vs bf16 KV: {d}")
    assert d["kl_max"] < 0.1 and d["greedy_agreement"] >= 0.5, d
