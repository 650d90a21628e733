"""CPU tests of fp8 KV caches (run in CI): the library's fp8 encoder against torch's conversions,
decode() with torch.float8_e4m3fn / float8_e5m2 caches on the CPU executor against a float64
reference computed here from the dequantized values (fresh random inputs, every element, outputs
poisoned first, NaN never passes), scales as floats and as tensors, NaN codes propagating to the
rows that attend them, plans for 1-byte KV, the torch custom op and torch.compile, and the errors
for bad fp8 inputs, which must name the argument."""

from __future__ import annotations

import math

import numpy as np
import pytest

import treeattn
from treeattn import _treeattn as ext
from conftest import numpy_oracle, random_block_tables

torch = pytest.importorskip("torch", reason="fp8 caches come in as torch float8 tensors")

FP8 = {"fp8_e4m3": (torch.float8_e4m3fn, 1, 448.0), "fp8_e5m2": (torch.float8_e5m2, 2, 57344.0)}
SCALES = [1.0, 0.37, 2.0**-10, 2.0**6]


def encode(x: np.ndarray, code: int, scale: float = 1.0) -> np.ndarray:
    src = np.ascontiguousarray(x, dtype=np.float32).reshape(-1)
    dst = np.empty(src.shape, np.uint8)
    ext.fp8_encode(src, dst, code, scale)
    return dst.reshape(x.shape)


@pytest.mark.parametrize("name", list(FP8))
def test_encoder_matches_torch_bits(rng, name):
    tdtype, code, top = FP8[name]
    smallest = 2.0**-9 if code == 1 else 2.0**-16
    # in range: normal values of every binade, subnormals, exact codes and midpoints between them
    x = np.concatenate([
        rng.uniform(-top, top, 20000),
        rng.uniform(-1, 1, 20000) * 2.0 ** rng.integers(-20, 9, 20000),
        rng.uniform(-8, 8, 5000) * smallest,
        [0.0, -0.0, smallest, -smallest, smallest / 2, 1.5 * smallest, top, -top],
    ]).astype(np.float32)
    x = x[np.abs(x) <= top]
    codes = torch.arange(256, dtype=torch.uint8).view(tdtype).float().numpy()
    codes = np.sort(codes[np.isfinite(codes) & (np.abs(codes) <= top)])
    mids = ((codes[1:].astype(np.float64) + codes[:-1]) / 2).astype(np.float32)
    x = np.concatenate([x, codes, mids])
    want = torch.from_numpy(x).to(tdtype).view(torch.uint8).numpy()
    got = encode(x, code)
    bad = np.nonzero(got != want)[0]
    assert bad.size == 0, f"{name}: {bad.size} mismatches, e.g. {x[bad[:5]]}: {got[bad[:5]]} vs " \
                          f"{want[bad[:5]]}"
    # decoding every code: the CPU decode path reads what torch writes (checked below end to end)
    assert encode(np.array([np.nan], np.float32), code)[0] == 0x7F
    assert encode(np.array([np.inf, -np.inf, 1e30], np.float32), code).tolist() == \
        [0x7E if code == 1 else 0x7B, 0xFE if code == 1 else 0xFB, 0x7E if code == 1 else 0x7B]
    # the scale divides first
    assert (encode(x, code, 0.5) == encode(x * 2, code)).all()


def quantize(rng, shape, name, scale):
    """(fp8 tensor, float64 dequantized values): values spread over the fp8 range / 16, stored
    as fp8(value / scale) by torch, standing for scale x stored."""
    tdtype, _, top = FP8[name]
    x = rng.uniform(-1, 1, shape) * min(top / 16, 8.0) * scale
    t = torch.from_numpy((x / scale).astype(np.float32)).to(tdtype)
    return t, t.to(torch.float64).numpy() * np.float64(np.float32(scale))


def fp8_problem(rng, name, k_scale, v_scale, page_size=16, heads=(8, 2), dim=64):
    tables, lens, num_pages = random_block_tables(rng, page_size, max_prompt=120, max_suffix=40)
    tree = treeattn.PrefixTree.from_block_tables(tables, lens, page_size=page_size,
                                                 num_pages=num_pages)
    H, Hk = heads
    shape = (num_pages, page_size, Hk, dim)
    k8, k = quantize(rng, shape, name, k_scale)
    v8, v = quantize(rng, shape, name, v_scale)
    q = rng.uniform(-1, 1, (len(lens), H, dim)).astype(np.float16)
    return tree, tables, lens, q, k8, v8, k, v


def check(got, want, rel):
    got = np.asarray(got.float().numpy() if isinstance(got, torch.Tensor) else got, np.float64)
    assert got.shape == want.shape
    assert np.isfinite(got).all(), "NaN/inf in output"
    err = np.abs(got - want).max() / max(np.abs(want).max(), 1e-30)
    assert err <= rel, f"max error {err:.3g} of max |ref| > {rel}"


@pytest.mark.parametrize("name", list(FP8))
@pytest.mark.parametrize("k_scale", SCALES)
def test_cpu_decode_fp8_against_float64(rng, name, k_scale):
    v_scale = k_scale * 0.75
    tree, tables, lens, q, k8, v8, k, v = fp8_problem(rng, name, k_scale, v_scale)
    want, want_lse = numpy_oracle(q.astype(np.float64), k, v, tables, lens)
    p = treeattn.plan(tree, 8, 2, 64, kv_dtype=name)
    assert p.kv_dtype_bytes == 1
    tq = torch.from_numpy(q)
    out = torch.full(tq.shape, float("nan"), dtype=torch.float16)
    lse = torch.full(tq.shape[:2], float("nan"), dtype=torch.float32)
    got, got_lse = treeattn.decode(tq, k8, v8, p, out=out, lse=lse, k_scale=k_scale,
                                   v_scale=v_scale)
    assert got is out
    check(out, want, 2e-3)  # fp16 output rounding (2^-11) plus float32 accumulation
    assert np.isfinite(lse.numpy()).all()
    assert np.abs(lse.numpy() - want_lse).max() <= 1e-4 * max(1.0, np.abs(want_lse).max())
    # scales as 1-element float32 tensors, the combined layout, bf16 q
    ks = torch.tensor([k_scale], dtype=torch.float32)
    vs = torch.tensor([v_scale], dtype=torch.float32)
    kv8 = torch.stack([k8, v8], dim=1)
    check(treeattn.decode(tq, kv8, None, p, k_scale=ks, v_scale=vs), want, 2e-3)
    want_b, _ = numpy_oracle(tq.bfloat16().double().numpy(), k, v, tables, lens)
    got_b = treeattn.decode(tq.bfloat16(), k8, v8, p, k_scale=k_scale, v_scale=vs)
    assert got_b.dtype == torch.bfloat16
    check(got_b, want_b, 1e-2)  # bf16 output rounding (2^-8)


def test_cpu_decode_fp8_default_scales_and_sm_scale(rng):
    tree, tables, lens, q, k8, v8, k, v = fp8_problem(rng, "fp8_e4m3", 1.0, 1.0, page_size=1,
                                                      heads=(16, 2), dim=128)
    p = treeattn.plan(tree, 16, 2, 128, kv_dtype=torch.float8_e4m3fn)
    want, _ = numpy_oracle(q.astype(np.float64), k, v, tables, lens, sm_scale=0.05)
    check(treeattn.decode(torch.from_numpy(q), k8, v8, p, sm_scale=0.05), want, 2e-3)


def test_fp8_nan_codes_reach_only_the_rows_that_attend_them(rng):
    tree, tables, lens, q, k8, v8, k, v = fp8_problem(rng, "fp8_e4m3", 0.5, 0.5)
    p = treeattn.plan(tree, 8, 2, 64, kv_dtype="fp8_e4m3")
    # a NaN code (S.1111.111) in K of KV head 1, in the last page of request 0's own tokens
    n0 = int(lens[0])
    page = int(tables[0][(n0 - 1) // 16])
    kb = k8.view(torch.uint8).clone()
    kb[page, (n0 - 1) % 16, 1, 3] = 0x7F
    out = treeattn.decode(torch.from_numpy(q), kb.view(torch.float8_e4m3fn), v8, p).float()
    readers = [r for r in range(len(lens))
               if page in tables[r][: (int(lens[r]) + 15) // 16].tolist()]
    for r in range(len(lens)):
        row = out[r].numpy()
        assert np.isfinite(row[:4]).all(), "KV head 0's query heads never see the NaN"
        assert np.isnan(row[4:]).all() == (r in readers), r
    # e5m2 infinity in V: the rows attending it are not finite
    tree, tables, lens, q, k8, v8, k, v = fp8_problem(rng, "fp8_e5m2", 1.0, 1.0)
    p = treeattn.plan(tree, 8, 2, 64, kv_dtype="fp8_e5m2")
    vb = v8.view(torch.uint8).clone()
    page = int(tables[0][0])
    vb[page, 0, 0, 0] = 0x7C  # +inf
    out = treeattn.decode(torch.from_numpy(q), k8, vb.view(torch.float8_e5m2), p).float().numpy()
    assert not np.isfinite(out[0, :4, 0]).any()
    assert np.isfinite(out[0, 4:]).all()


def test_plan_kv_dtype_counts_one_byte():
    tree = treeattn.PrefixTree.from_levels("N=256 C=1024 heads=32/8")
    p16 = treeattn.plan(tree, planner="node")
    p8 = treeattn.plan(tree, planner="node", kv_dtype="fp8_e5m2")
    assert p16.kv_dtype_bytes == 2 and p8.kv_dtype_bytes == 1
    s16, s8 = p16.stats(), p8.stats()
    assert s8["kv_bytes_read"] * 2 == s16["kv_bytes_read"]
    assert s8["qo_bytes"] == s16["qo_bytes"]
    assert s8["est_time_us"] < s16["est_time_us"]
    for ok in (None, "same", "float16", torch.float8_e5m2, "float8_e4m3fn"):
        treeattn.plan(tree, planner="node", kv_dtype=ok)
    for bad in ("fp8", "int8", torch.float8_e4m3fnuz, torch.int8, 1):
        with pytest.raises(ValueError, match="^kv_dtype: "):
            treeattn.plan(tree, planner="node", kv_dtype=bad)
    with pytest.raises(ValueError, match="^kv_dtype_bytes: "):
        treeattn.Plan(tree, "node", 32, 8, 128, 2, treeattn.DeviceInfo.preset("h100"), 1.0, 3)
    # update() keeps the KV element size
    with pytest.raises(ValueError, match="^plan: the new plan is for heads"):
        p16.update(p8)


@pytest.fixture
def fp8_small(rng):
    tree, tables, lens, q, k8, v8, k, v = fp8_problem(rng, "fp8_e4m3", 1.0, 1.0)
    p = treeattn.plan(tree, 8, 2, 64, kv_dtype="fp8_e4m3")
    return tree, p, torch.from_numpy(q), k8, v8


def test_fp8_errors_name_the_argument(fp8_small):
    tree, p, q, k8, v8 = fp8_small
    p16 = treeattn.plan(tree, 8, 2, 64)
    with pytest.raises(TypeError, match="^v_cache: expected the dtype of k_cache"):
        treeattn.decode(q, k8, v8.view(torch.uint8).view(torch.float8_e5m2), p)
    with pytest.raises(TypeError, match="^v_cache: expected the dtype of k_cache"):
        treeattn.decode(q, k8, v8.float().half(), p)
    with pytest.raises(TypeError, match="^v_cache: expected the dtype of k_cache"):
        treeattn.decode(q, k8.float().half(), v8, p16)
    with pytest.raises(ValueError, match="^plan: made for 2-byte K/V"):
        treeattn.decode(q, k8, v8, p16)
    with pytest.raises(ValueError, match="^k_cache: the plan was made for an fp8 KV cache"):
        treeattn.decode(q, k8.float().half(), v8.float().half(), p)
    fnuz = k8.view(torch.uint8).view(torch.float8_e4m3fnuz)
    with pytest.raises(TypeError, match="^k_cache: unsupported KV dtype float8_e4m3fnuz"):
        treeattn.decode(q, fnuz, fnuz, p)
    with pytest.raises(TypeError, match="^q: an fp8_e4m3 KV cache needs float16 or bfloat16"):
        treeattn.decode(q.float(), k8, v8, p)
    with pytest.raises(TypeError, match="^k_cache: an fp8_e4m3 cache arrives as its uint8 view"):
        ext.decode(p, q, k8.view(torch.int8), v8.view(torch.int8), q.clone(), None, 0, None, 1)
    with pytest.raises(TypeError, match="^k_cache: reference\\(\\) takes the dequantized"):
        treeattn.reference(tree, q, k8, v8)
    with pytest.raises(ValueError, match="^kv_dtype: "):
        ext.decode(p, q, k8.view(torch.uint8), v8.view(torch.uint8), q.clone(), None, 0, None, 3)
    for name in ("k_scale", "v_scale"):
        for bad in (0.0, -1.0, float("nan"), float("inf"), 1e-50, 1e39):
            with pytest.raises(ValueError, match=f"^{name}: must be finite and > 0"):
                treeattn.decode(q, k8, v8, p, **{name: bad})
        for bad in (True, "1", [1.0]):
            with pytest.raises(TypeError, match=f"^{name}: "):
                treeattn.decode(q, k8, v8, p, **{name: bad})
        with pytest.raises(ValueError, match=f"^{name}: expected 1 element"):
            treeattn.decode(q, k8, v8, p, **{name: torch.ones(2)})
        with pytest.raises(TypeError, match=f"^{name}: expected a float32 scalar array"):
            treeattn.decode(q, k8, v8, p, **{name: torch.ones(1, dtype=torch.float64)})
        for bad in (0.0, -2.0, float("nan"), float("inf")):
            with pytest.raises(ValueError, match=f"^{name}: must be finite and > 0"):
                treeattn.decode(q, k8, v8, p, **{name: torch.tensor([bad])})
        with pytest.raises(ValueError, match=f"^{name}: only for an fp8 KV cache"):
            treeattn.decode(q, k8.float().half(), v8.float().half(), p16, **{name: 2.0})


def test_fp8_custom_op_and_compile(rng):
    import treeattn.torch_ops as tops

    tree, tables, lens, q, k8, v8, k, v = fp8_problem(rng, "fp8_e5m2", 0.37, 2.0**6)
    p = treeattn.plan(tree, 8, 2, 64, kv_dtype="fp8_e5m2")
    want, _ = numpy_oracle(q.astype(np.float64), k, v, tables, lens)
    tq = torch.from_numpy(q)
    check(tops.decode(tq, k8, v8, p, k_scale=0.37, v_scale=2.0**6), want, 2e-3)
    ks = torch.tensor([0.37], dtype=torch.float32)
    vs = torch.tensor([2.0**6], dtype=torch.float32)

    @torch.compile(fullgraph=True, backend="eager")
    def layer(x, kc, vc, a, b):
        o, lse = tops.decode(x * 1.0, kc, vc, p, return_lse=True, k_scale=a, v_scale=b)
        return o * 2, lse

    o, lse = layer(tq, k8, v8, ks, vs)
    check(o / 2, want, 2e-3)
    assert lse.dtype == torch.float32 and lse.shape == tq.shape[:2]
    # a new scale value in the same tensor is read on the next call
    vs.fill_(2.0**5)
    check(layer(tq, k8, v8, ks, vs)[0] / 2, want / 2, 2e-3)
    with pytest.raises(ValueError, match="^k_scale: must be finite and > 0"):
        tops.decode(tq, k8, v8, p, k_scale=-1.0)
    with pytest.raises(TypeError, match="^v_scale: "):
        tops.decode(tq, k8, v8, p, v_scale="x")
    assert math.isfinite(float(lse.float().mean()))
