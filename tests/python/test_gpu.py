"""GPU tests of the treeattn package (run on the device; skipped with a reason elsewhere): torch
fp16/bf16 decode against a float64 torch reference on workload lines and random block tables,
the combined layout, out= and return_lse, custom streams, CUDA-graph capture and replay (also
after plan.update), CuPy and JAX input through DLPack, and torch.compile of the custom op; fp8
KV caches (e4m3 / e5m2 x head dims x page sizes x GQA x planners, scales 1, other, tiny and
large, as floats and tensors, a CUDA graph replayed with new scale values, NaN / inf codes)."""

from __future__ import annotations

import math
import os

import numpy as np
import pytest

import treeattn

torch = pytest.importorskip("torch", reason="torch is not installed")
if not torch.cuda.is_available():
    pytest.skip("no CUDA device visible to torch", allow_module_level=True)
if not treeattn.built_with_cuda:
    pytest.skip("treeattn was built without CUDA (nvcc not found at build time)",
                allow_module_level=True)

from conftest import cow_fill, random_block_tables  # noqa: E402

pytestmark = pytest.mark.gpu
DEV = torch.device("cuda", 0)
DTYPES = {"fp16": torch.float16, "bf16": torch.bfloat16}
ABS_TOL = {torch.float16: 2e-3, torch.bfloat16: 1e-2}


def make_caches(gen, num_pages, page_size, kv_heads, dim, dtype, tree=None):
    shape = (num_pages, page_size, kv_heads, dim)
    k = (torch.rand(shape, generator=gen, device=DEV) * 2 - 1).to(dtype)
    v = (torch.rand(shape, generator=gen, device=DEV) * 2 - 1).to(dtype)
    if tree is not None:  # copy-on-write slots, so the block-table view matches the tree
        kc, vc = k.cpu(), v.cpu()
        cow_fill(tree, kc, vc)
        k.copy_(kc)
        v.copy_(vc)
    return k, v


def path_kv(k, v, table, n):
    """K and V of the first n tokens of a block table: [n, kv_heads, head_dim] each."""
    P, Hk, D = k.shape[1], k.shape[2], k.shape[3]
    pages = torch.as_tensor(list(table[: (n + P - 1) // P]), device=DEV, dtype=torch.long)
    return k[pages].reshape(-1, Hk, D)[:n], v[pages].reshape(-1, Hk, D)[:n]


def torch_reference(q, k, v, tables, lens, rows, sm_scale=None):
    """float64 attention (and the same-precision naive error bound) for the sampled rows."""
    _, H, D = q.shape
    Hk = k.shape[2]
    g = H // Hk
    scale = 1.0 / math.sqrt(D) if sm_scale is None else sm_scale
    out = torch.empty((len(rows), H, D), dtype=torch.float64, device=DEV)
    lse = torch.empty((len(rows), H), dtype=torch.float64, device=DEV)
    naive = torch.empty((len(rows), H, D), dtype=q.dtype, device=DEV)
    for i, r in enumerate(rows):
        kk, vv = path_kv(k, v, tables[r], int(lens[r]))
        qq = q[r].reshape(Hk, g, D)
        s = torch.einsum("hgd,nhd->hgn", qq.double(), kk.double()) * scale
        lse[i] = torch.logsumexp(s, -1).reshape(H)
        out[i] = torch.einsum("hgn,nhd->hgd", torch.softmax(s, -1), vv.double()).reshape(H, D)
        s16 = torch.einsum("hgd,nhd->hgn", qq, kk) * scale  # same-precision naive attention
        p16 = torch.softmax(s16.float(), -1).to(q.dtype)
        naive[i] = torch.einsum("hgn,nhd->hgd", p16, vv).reshape(H, D)
    return out, lse, (naive.double() - out).abs().max().item()


def check(out, rows, ref, naive_err, dtype):
    got = out[rows].double()
    assert torch.isfinite(got).all(), "NaN/inf in output"
    err = (got - ref).abs().max().item()
    bound = 2 * naive_err + ABS_TOL[dtype]
    assert err <= bound, f"max abs error {err:.3g} > {bound:.3g} (naive {naive_err:.3g})"


def sample_rows(gen, n, k=16):
    if n <= k:
        return list(range(n))
    return sorted(torch.randperm(n, generator=gen, device=gen.device)[:k].tolist())


def shrink_heads(shape):
    """Fewer heads with the same GQA ratio so the workload sweep stays fast."""
    H, Hk, D = shape
    Hk2 = min(Hk, 4)
    return (H // Hk) * Hk2, Hk2, D


def pick(key_list, every):
    return key_list[::every]


WORKLOADS = [w["key"] for w in treeattn.workloads("fasttree", details=True)]
WORKLOADS += pick([w["key"] for w in treeattn.workloads("pat", details=True)], 8)
WORKLOADS += [w["key"] for w in treeattn.workloads("deft", details=True)]
WORKLOADS += [w["key"] for w in treeattn.workloads("forge", details=True)]
WORKLOADS += pick([w["key"] for w in treeattn.workloads("irregular", details=True)], 2)


@pytest.fixture
def gen():
    seed = int(np.random.SeedSequence().entropy % (2**31))
    print(f"seed={seed}")
    g = torch.Generator(device=DEV)
    g.manual_seed(seed)
    return g


def run_tree(gen, tree, heads, dtype, planner="auto", rows=None, layout="separate"):
    H, Hk, D = heads
    p = treeattn.plan(tree, H, Hk, D, planner=planner)
    k, v = make_caches(gen, tree.num_pages, tree.page_size, Hk, D, dtype, tree=tree)
    q = (torch.rand((tree.num_queries, H, D), generator=gen, device=DEV) * 2 - 1).to(dtype)
    out = torch.full_like(q, float("nan"))  # poisoned
    if layout == "combined":
        kv = torch.stack([k, v], dim=1)
        treeattn.decode(q, kv, None, p, out=out)
    else:
        treeattn.decode(q, k, v, p, out=out)
    torch.cuda.synchronize()
    tables, lens = tree.to_block_tables()
    rows = rows if rows is not None else sample_rows(gen, tree.num_queries)
    ref, _, naive = torch_reference(q, k, v, tables, lens, rows)
    check(out, rows, ref, naive, dtype)


@pytest.mark.parametrize("key", WORKLOADS)
def test_workloads_fp16_auto(gen, key):
    tree = treeattn.PrefixTree.from_workload(key, layout="shuffled", seed=1)
    run_tree(gen, tree, shrink_heads(tree.shape), torch.float16)


@pytest.mark.parametrize("planner", treeattn.planners())
@pytest.mark.parametrize("dtype", ["fp16", "bf16"])
@pytest.mark.parametrize("key", ["fasttree:7", "pat:14", "deft:7"])
def test_planners_dtypes(gen, planner, dtype, key):
    tree = treeattn.PrefixTree.from_workload(key, layout="shuffled", seed=2)
    run_tree(gen, tree, tree.shape, DTYPES[dtype], planner=planner)


@pytest.mark.parametrize("heads", [(32, 8, 128), (28, 4, 128), (16, 16, 64), (8, 1, 256)])
@pytest.mark.parametrize("page_size", [1, 16, 32, 64])
def test_random_trees(gen, heads, page_size):
    seed = int(torch.randint(1 << 30, (1,), generator=gen, device=DEV).item())
    tree = treeattn.PrefixTree.random(seed, page_size=page_size, max_queries=24)
    run_tree(gen, tree, heads, torch.bfloat16 if page_size == 32 else torch.float16)


def block_table_tree(gen):
    """Random block tables of requests sharing prompts (page size 16) and their tree."""
    rng = np.random.default_rng(int(torch.randint(1 << 30, (1,), generator=gen, device=DEV)))
    tables, lens, num_pages = random_block_tables(rng, 16, num_prompts=4, max_prompt=700)
    tree = treeattn.PrefixTree.from_block_tables(torch.from_numpy(tables), torch.from_numpy(lens),
                                                 page_size=16, num_pages=num_pages)
    return tree, tables, lens, num_pages


@pytest.mark.parametrize("dtype", ["fp16", "bf16"])
@pytest.mark.parametrize("layout", ["separate", "combined"])
def test_random_block_tables(gen, dtype, layout):
    tree, tables, lens, num_pages = block_table_tree(gen)
    dt = DTYPES[dtype]
    p = treeattn.plan(tree, 32, 8, 128)
    k, v = make_caches(gen, num_pages, 16, 8, 128, dt)
    q = (torch.rand((len(lens), 32, 128), generator=gen, device=DEV) * 2 - 1).to(dt)
    if layout == "combined":
        out, lse = treeattn.decode(q, torch.stack([k, v], 1), None, p, return_lse=True)
    else:
        out, lse = treeattn.decode(q, k, v, p, return_lse=True)
    rows = list(range(len(lens)))
    ref, ref_lse, naive = torch_reference(q, k, v, tables.tolist(), lens.tolist(), rows)
    check(out, rows, ref, naive, dt)
    assert lse.dtype == torch.float32 and lse.shape == (len(lens), 32)
    assert (lse.double() - ref_lse).abs().max().item() < 2e-3


def test_out_lse_and_streams(gen):
    tree = treeattn.PrefixTree.from_levels("N=1,8,32 C=1000,100,33")
    p = treeattn.plan(tree, 32, 8, 128)
    k, v = make_caches(gen, tree.num_pages, 16, 8, 128, torch.float16, tree=tree)
    q = torch.randn((32, 32, 128), generator=gen, device=DEV).half()
    tables, lens = tree.to_block_tables()
    rows = list(range(32))
    ref, ref_lse, naive = torch_reference(q, k, v, tables, lens, rows)
    out = torch.full_like(q, float("nan"))
    lse = torch.full((32, 32), float("nan"), device=DEV)
    r_out, r_lse = treeattn.decode(q, k, v, p, out=out, lse=lse)
    assert r_out is out and r_lse is lse
    check(out, rows, ref, naive, torch.float16)
    assert (lse.double() - ref_lse).abs().max().item() < 2e-3
    # the caller's current stream (torch.cuda.stream context) and an explicit stream=
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        o1 = treeattn.decode(q, k, v, p)
    o2 = treeattn.decode(q, k, v, p, stream=s)
    o3 = torch.empty_like(q)
    treeattn.decode(q, k, v, p, out=o3, stream=s.cuda_stream)
    s.synchronize()
    for o in (o1, o2, o3):
        check(o, rows, ref, naive, torch.float16)


def test_cuda_graph_capture_and_update(gen):
    tree = treeattn.PrefixTree.from_levels("N=1,4,16 C=500,60,40")
    spare = 64
    num_pages = tree.num_pages + spare
    old_num_pages, tree.num_pages = tree.num_pages, num_pages
    tree.free_pages = list(range(old_num_pages, num_pages))
    p = treeattn.plan(tree, 32, 8, 128, headroom=2.0).to_device(DEV)
    k, v = make_caches(gen, num_pages, 16, 8, 128, torch.float16, tree=tree)
    q = torch.randn((16, 32, 128), generator=gen, device=DEV).half()
    out = torch.empty_like(q)
    treeattn.decode(q, k, v, p, out=out)  # warm-up outside capture
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        treeattn.decode(q, k, v, p, out=out)
    # replay with new q values
    q.copy_(torch.randn((16, 32, 128), generator=gen, device=DEV).half())
    out.fill_(float("nan"))
    graph.replay()
    torch.cuda.synchronize()
    tables, lens = tree.to_block_tables()
    ref, _, naive = torch_reference(q, k, v, tables, lens, list(range(16)))
    check(out, list(range(16)), ref, naive, torch.float16)
    # next decode step: every query grows by one token; refresh the plan in place and replay
    for i in range(tree.num_queries):
        tree.append_tokens(i, 1)
    new = treeattn.plan(tree, 32, 8, 128)
    assert p.fits(new)
    assert treeattn.plan(tree, 32, 8, 128, reuse=p) is p
    kc, vc = k.cpu(), v.cpu()
    cow_fill(tree, kc, vc)
    k.copy_(kc)
    v.copy_(vc)
    out.fill_(float("nan"))
    graph.replay()
    torch.cuda.synchronize()
    tables, lens = tree.to_block_tables()
    ref, _, naive = torch_reference(q, k, v, tables, lens, list(range(16)))
    check(out, list(range(16)), ref, naive, torch.float16)


def test_gpu_errors(gen):
    tree = treeattn.PrefixTree.from_levels("N=1,4 C=64,16")
    p = treeattn.plan(tree, 8, 2, 64)
    k, v = make_caches(gen, tree.num_pages, 16, 2, 64, torch.float16)
    q = torch.randn((4, 8, 64), device=DEV).half()
    with pytest.raises(TypeError, match="^q: CUDA decode expects float16 or bfloat16"):
        treeattn.decode(q.float(), k.float(), v.float(), p)
    with pytest.raises(TypeError, match="^k_cache: expected the dtype of q"):
        treeattn.decode(q, k.bfloat16(), v.bfloat16(), p)
    with pytest.raises(TypeError, match="^k_cache: expected the device of q"):
        treeattn.decode(q, k.cpu(), v.cpu(), p)
    qt = torch.randn((4, 64, 8), device=DEV).half().transpose(1, 2)
    with pytest.raises(ValueError, match="^q: head_dim must be contiguous"):
        treeattn.decode(qt, k, v, p)
    qs = torch.randn((4, 8, 68), device=DEV).half()[:, :, :64]
    with pytest.raises(ValueError, match="^q: stride of dim 1"):
        treeattn.decode(qs, k, v, p)
    with pytest.raises(ValueError, match="^k_cache: has 1 pages"):
        treeattn.decode(q, k[:1], v[:1], p)


def test_cupy_dlpack(gen):
    cupy = pytest.importorskip("cupy", reason="CuPy is not installed")
    tree = treeattn.PrefixTree.from_levels("N=1,8 C=300,45")
    p = treeattn.plan(tree, 16, 4, 128)
    k, v = make_caches(gen, tree.num_pages, 16, 4, 128, torch.float16, tree=tree)
    q = torch.randn((8, 16, 128), generator=gen, device=DEV).half()
    torch.cuda.synchronize()
    cq, ck, cv = (cupy.from_dlpack(x) for x in (q, k, v))
    out = treeattn.decode(cq, ck, cv, p)
    assert isinstance(out, cupy.ndarray) and out.dtype == cupy.float16
    cupy.cuda.get_current_stream().synchronize()
    tables, lens = tree.to_block_tables()
    ref, _, naive = torch_reference(q, k, v, tables, lens, list(range(8)))
    check(torch.from_dlpack(out), list(range(8)), ref, naive, torch.float16)


def test_jax_dlpack(gen):
    os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")
    jax = pytest.importorskip("jax", reason="JAX is not installed")
    try:
        gpus = jax.devices("gpu")
    except RuntimeError:
        gpus = []
    if not gpus:
        pytest.skip("JAX sees no GPU")
    import jax.dlpack

    tree = treeattn.PrefixTree.from_levels("N=1,4 C=200,30")
    p = treeattn.plan(tree, 8, 2, 64)
    k, v = make_caches(gen, tree.num_pages, 16, 2, 64, torch.float16, tree=tree)
    q = torch.randn((4, 8, 64), generator=gen, device=DEV).half()
    torch.cuda.synchronize()
    jq, jk, jv = (jax.dlpack.from_dlpack(x) for x in (q, k, v))
    out = treeattn.decode(jq, jk, jv, p)
    torch.cuda.synchronize()
    assert isinstance(out, jax.Array)
    got = torch.from_numpy(np.asarray(out.astype("float32"))).to(DEV)
    tables, lens = tree.to_block_tables()
    ref, _, naive = torch_reference(q, k, v, tables, lens, list(range(4)))
    check(got, list(range(4)), ref, naive, torch.float16)


def test_torch_compile_custom_op(gen):
    import treeattn.torch_ops as tops

    tree = treeattn.PrefixTree.from_levels("N=1,8 C=500,70")
    p = treeattn.plan(tree, 32, 8, 128)
    k, v = make_caches(gen, tree.num_pages, 16, 8, 128, torch.bfloat16, tree=tree)
    q = torch.randn((8, 32, 128), generator=gen, device=DEV).bfloat16()

    @torch.compile(fullgraph=True)
    def layer(x, kc, vc):
        o, lse = tops.decode(x * 1.0, kc, vc, p, return_lse=True)
        return o.float() * 2.0, lse

    o, lse = layer(q, k, v)
    torch.cuda.synchronize()
    tables, lens = tree.to_block_tables()
    ref, ref_lse, naive = torch_reference(q, k, v, tables, lens, list(range(8)))
    check((o / 2).to(torch.bfloat16), list(range(8)), ref, naive, torch.bfloat16)
    assert (lse.double() - ref_lse).abs().max().item() < 2e-3


# ---- fp8 KV caches (torch.float8_e4m3fn / float8_e5m2 with k_scale / v_scale)

FP8 = {"e4m3": torch.float8_e4m3fn, "e5m2": torch.float8_e5m2}


def make_fp8_caches(gen, num_pages, page_size, kv_heads, dim, kind, tree=None):
    """Stored fp8 values in [-1, 1] (fresh random; copy-on-write slots filled like make_caches)."""
    shape = (num_pages, page_size, kv_heads, dim)
    k = (torch.rand(shape, generator=gen, device=DEV) * 2 - 1).to(kind)
    v = (torch.rand(shape, generator=gen, device=DEV) * 2 - 1).to(kind)
    if tree is not None:
        kc, vc = k.view(torch.uint8).cpu(), v.view(torch.uint8).cpu()
        cow_fill(tree, kc, vc)
        k.view(torch.uint8).copy_(kc)
        v.view(torch.uint8).copy_(vc)
    return k, v


def fp8_reference(q, k8, v8, k_scale, v_scale, tables, lens, rows, sm_scale=None):
    """float64 attention over the dequantized caches (k_scale x stored, v_scale x stored) for the
    sampled rows, in units of v_scale, and the error of a same-precision naive implementation
    that does what the kernels do: fp8 -> q's dtype exactly, k_scale folded into the softmax
    scale, v_scale applied to the output."""
    _, H, D = q.shape
    Hk = k8.shape[2]
    g = H // Hk
    scale = 1.0 / math.sqrt(D) if sm_scale is None else sm_scale
    out = torch.empty((len(rows), H, D), dtype=torch.float64, device=DEV)
    naive = torch.empty((len(rows), H, D), dtype=torch.float64, device=DEV)
    for i, r in enumerate(rows):
        kk, vv = path_kv(k8, v8, tables[r], int(lens[r]))
        qq = q[r].reshape(Hk, g, D)
        s = torch.einsum("hgd,nhd->hgn", qq.double(), kk.double() * k_scale) * scale
        out[i] = torch.einsum("hgn,nhd->hgd", torch.softmax(s, -1),
                              vv.double() * v_scale).reshape(H, D)
        s16 = torch.einsum("hgd,nhd->hgn", qq, kk.to(q.dtype)).float() * (scale * k_scale)
        p16 = torch.softmax(s16, -1).to(q.dtype)
        naive[i] = (torch.einsum("hgn,nhd->hgd", p16, vv.to(q.dtype)).double()
                    * v_scale).reshape(H, D)
    return out / v_scale, (naive - out).abs().max().item() / v_scale


def check_fp8(out, rows, ref, naive_err, v_scale, dtype):
    """check() in units of v_scale: the fp16/bf16 bound (2x the naive error plus ABS_TOL)."""
    got = out[rows].double() / v_scale
    assert torch.isfinite(got).all(), "NaN/inf in output"
    err = (got - ref).abs().max().item()
    bound = 2 * naive_err + ABS_TOL[dtype]
    assert err <= bound, f"max abs error {err:.3g} > {bound:.3g} (naive {naive_err:.3g})"


def run_fp8_tree(gen, tree, heads, kind, dtype, k_scale, v_scale, planner="auto",
                 layout="separate", scales_as="float"):
    H, Hk, D = heads
    p = treeattn.plan(tree, H, Hk, D, planner=planner, kv_dtype=kind)
    k8, v8 = make_fp8_caches(gen, tree.num_pages, tree.page_size, Hk, D, kind, tree=tree)
    q = (torch.rand((tree.num_queries, H, D), generator=gen, device=DEV) * 2 - 1).to(dtype)
    out = torch.full_like(q, float("nan"))  # poisoned
    ks, vs = k_scale, v_scale
    if scales_as == "tensor":
        ks = torch.tensor([k_scale], dtype=torch.float32, device=DEV)
        vs = torch.tensor([v_scale], dtype=torch.float32, device=DEV)
    if layout == "combined":
        treeattn.decode(q, torch.stack([k8, v8], dim=1), None, p, out=out, k_scale=ks,
                        v_scale=vs)
    else:
        treeattn.decode(q, k8, v8, p, out=out, k_scale=ks, v_scale=vs)
    torch.cuda.synchronize()
    tables, lens = tree.to_block_tables()
    rows = sample_rows(gen, tree.num_queries)
    ref, naive = fp8_reference(q, k8, v8, float(np.float32(k_scale)), float(np.float32(v_scale)),
                               tables, lens, rows)
    check_fp8(out, rows, ref, naive, float(np.float32(v_scale)), dtype)


@pytest.mark.parametrize("kind", list(FP8))
@pytest.mark.parametrize("dim", [64, 128, 256])
@pytest.mark.parametrize("page_size", [1, 16, 256])
@pytest.mark.parametrize("gqa", [(32, 8), (8, 1), (16, 16)])
@pytest.mark.parametrize("scales", [(1.0, 1.0), (0.37, 1.7)])
def test_fp8_random_trees(gen, kind, dim, page_size, gqa, scales):
    seed = int(torch.randint(1 << 30, (1,), generator=gen, device=DEV).item())
    tree = treeattn.PrefixTree.random(seed, page_size=page_size, max_queries=24)
    dtype = torch.bfloat16 if (dim + page_size) % 3 == 0 else torch.float16
    run_fp8_tree(gen, tree, (*gqa, dim), FP8[kind], dtype, *scales,
                 scales_as="tensor" if page_size == 16 else "float")


@pytest.mark.parametrize("kind", list(FP8))
@pytest.mark.parametrize("scales", [(2.0**-10, 2.0**6), (2.0**6, 2.0**-10), (2.0**-10, 2.0**-10),
                                    (2.0**6, 2.0**6)])
@pytest.mark.parametrize("dtype", ["fp16", "bf16"])
def test_fp8_tiny_and_large_scales(gen, kind, scales, dtype):
    tree = treeattn.PrefixTree.from_levels("N=1,4,24 C=700,90,33")
    run_fp8_tree(gen, tree, (32, 8, 128), FP8[kind], DTYPES[dtype], *scales)


@pytest.mark.parametrize("kind", list(FP8))
@pytest.mark.parametrize("planner", treeattn.planners())
@pytest.mark.parametrize("levels", ["N=1,8 C=900,40", "N=1,16 C=900,40", "N=1,32 C=900,40",
                                    "N=1,4,32 C=1000,129,15"])
def test_fp8_tile_classes_and_planners(gen, kind, planner, levels):
    """8, 16 and 32 queries x a GQA group of 4 on one prefix (32, 64 and 128 packed rows) and a
    three-level tree with 129- and 15-token nodes: with every planner, the node-grouping ones
    reach the wide tile classes (kM64, kM128), the per-query ones kM16."""
    tree = treeattn.PrefixTree.from_levels(levels)
    run_fp8_tree(gen, tree, (32, 8, 128), FP8[kind], torch.float16, 0.5, 2.0, planner=planner)


@pytest.mark.parametrize("kind", list(FP8))
@pytest.mark.parametrize("dtype", ["fp16", "bf16"])
def test_fp8_combined_layout_lse_and_block_tables(gen, kind, dtype):
    tree, tables, lens, num_pages = block_table_tree(gen)
    dt = DTYPES[dtype]
    p = treeattn.plan(tree, 32, 8, 128, kv_dtype=FP8[kind])
    k8, v8 = make_fp8_caches(gen, num_pages, 16, 8, 128, FP8[kind])
    q = (torch.rand((len(lens), 32, 128), generator=gen, device=DEV) * 2 - 1).to(dt)
    ks = torch.tensor([0.25], device=DEV)
    out, lse = treeattn.decode(q, torch.stack([k8, v8], 1), None, p, return_lse=True,
                               k_scale=ks, v_scale=3.0)
    rows = list(range(len(lens)))
    ref, naive = fp8_reference(q, k8, v8, 0.25, 3.0, tables.tolist(), lens.tolist(), rows)
    check_fp8(out, rows, ref, naive, 3.0, dt)
    assert lse.dtype == torch.float32 and torch.isfinite(lse).all()
    # the lse is over the scaled logits: q . (k_scale k) / sqrt(D)
    r = 0
    n = int(lens[r])
    pages = torch.as_tensor(tables[r][: (n + 15) // 16].tolist(), device=DEV, dtype=torch.long)
    kk = k8[pages].reshape(-1, 8, 128)[:n].double() * 0.25
    s = torch.einsum("hgd,nhd->hgn", q[r].double().reshape(8, 4, 128), kk) / math.sqrt(128)
    assert (lse[r].double() - torch.logsumexp(s, -1).reshape(32)).abs().max().item() < 2e-3


@pytest.mark.parametrize("kind", list(FP8))
def test_fp8_cuda_graph_replays_new_scales(gen, kind):
    tree = treeattn.PrefixTree.from_levels("N=1,4,16 C=500,60,40")
    p = treeattn.plan(tree, 32, 8, 128, kv_dtype=FP8[kind]).to_device(DEV)
    k8, v8 = make_fp8_caches(gen, tree.num_pages, 16, 8, 128, FP8[kind], tree=tree)
    q = torch.randn((16, 32, 128), generator=gen, device=DEV).half()
    ks = torch.tensor([1.0], device=DEV)
    vs = torch.tensor([1.0], device=DEV)
    out = torch.empty_like(q)
    treeattn.decode(q, k8, v8, p, out=out, k_scale=ks, v_scale=vs)  # warm-up outside capture
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        treeattn.decode(q, k8, v8, p, out=out, k_scale=ks, v_scale=vs)
    tables, lens = tree.to_block_tables()
    rows = list(range(16))
    for k_scale, v_scale in [(1.0, 1.0), (0.37, 2.0**6), (2.0**-10, 0.5), (2.0**6, 2.0**-10)]:
        ks.fill_(k_scale)
        vs.fill_(v_scale)
        out.fill_(float("nan"))
        graph.replay()
        torch.cuda.synchronize()
        ref, naive = fp8_reference(q, k8, v8, float(np.float32(k_scale)),
                                   float(np.float32(v_scale)), tables, lens, rows)
        check_fp8(out, rows, ref, naive, float(np.float32(v_scale)), torch.float16)


@pytest.mark.parametrize("kind", list(FP8))
def test_fp8_nan_and_inf_reach_only_their_readers(gen, kind):
    """A NaN code in K (e4m3 S.1111.111, e5m2 S.11111.11) and, for e5m2, an infinity in V reach
    the query heads of their KV head on the rows that attend the token, nothing else."""
    tree = treeattn.PrefixTree.from_levels("N=1,4,16 C=300,60,40")
    tables, lens = tree.to_block_tables()
    for what, code in [("k", 0x7F), ("v", 0x7F)] + ([("v", 0x7C)] if kind == "e5m2" else []):
        p = treeattn.plan(tree, 32, 8, 128, kv_dtype=FP8[kind])
        k8, v8 = make_fp8_caches(gen, tree.num_pages, 16, 8, 128, FP8[kind], tree=tree)
        n0 = int(lens[0])
        page = int(tables[0][(n0 - 1) // 16])  # the last page of query 0: its own tokens
        (k8 if what == "k" else v8).view(torch.uint8)[page, (n0 - 1) % 16, 3, 5] = code
        q = torch.randn((16, 32, 128), generator=gen, device=DEV).half()
        out = treeattn.decode(q, k8, v8, p).float().cpu()
        readers = {r for r in range(16) if page in list(tables[r][: (int(lens[r]) + 15) // 16])}
        assert 0 in readers
        for r in range(16):
            bad_heads = out[r, 12:16]  # query heads of KV head 3 (group of 4)
            assert torch.isfinite(out[r, :12]).all() and torch.isfinite(out[r, 16:]).all()
            assert (not torch.isfinite(bad_heads).all()) == (r in readers), (what, code, r)


def test_fp8_torch_compile_and_errors(gen):
    import treeattn.torch_ops as tops

    tree = treeattn.PrefixTree.from_levels("N=1,8 C=500,70")
    p = treeattn.plan(tree, 32, 8, 128, kv_dtype="fp8_e4m3")
    k8, v8 = make_fp8_caches(gen, tree.num_pages, 16, 8, 128, torch.float8_e4m3fn, tree=tree)
    q = torch.randn((8, 32, 128), generator=gen, device=DEV).bfloat16()
    ks = torch.tensor([0.5], device=DEV)
    vs = torch.tensor([4.0], device=DEV)

    @torch.compile(fullgraph=True)
    def layer(x, kc, vc, a, b):
        o, lse = tops.decode(x * 1.0, kc, vc, p, return_lse=True, k_scale=a, v_scale=b)
        return o.float() * 2.0, lse

    o, lse = layer(q, k8, v8, ks, vs)
    torch.cuda.synchronize()
    tables, lens = tree.to_block_tables()
    ref, naive = fp8_reference(q, k8, v8, 0.5, 4.0, tables, lens, list(range(8)))
    check_fp8((o / 2).to(torch.bfloat16), list(range(8)), ref, naive, 4.0, torch.bfloat16)
    # errors
    p16 = treeattn.plan(tree, 32, 8, 128)
    with pytest.raises(ValueError, match="^plan: made for 2-byte K/V"):
        treeattn.decode(q, k8, v8, p16)
    with pytest.raises(ValueError, match="^k_cache: the plan was made for an fp8 KV cache"):
        treeattn.decode(q, k8.bfloat16(), v8.bfloat16(), p)
    with pytest.raises(TypeError, match="^q: an fp8_e4m3 KV cache needs float16 or bfloat16"):
        treeattn.decode(q.float(), k8, v8, p)
    with pytest.raises(TypeError, match="^v_cache: expected the dtype of k_cache"):
        treeattn.decode(q, k8, v8.float().to(torch.float8_e5m2), p)
    with pytest.raises(TypeError, match="^k_scale: expected the device of k_cache"):
        treeattn.decode(q, k8, v8, p, k_scale=torch.tensor([1.0]))
    with pytest.raises(ValueError, match="^v_scale: must be finite and > 0"):
        treeattn.decode(q, k8, v8, p, v_scale=-2.0)
