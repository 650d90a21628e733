"""CPU tests of the treeattn package (run in CI): tree builders and updates, planners and plan
statistics, decode() on numpy arrays (the float32 CPU executor) against an independent float64
oracle, and the errors for bad inputs, which must name the argument."""

from __future__ import annotations

import copy
import os
import re

import numpy as np
import pytest

import treeattn
from conftest import cow_fill, numpy_oracle, random_block_tables, random_qkv, tree_qkv

PLANNERS = [
    "query", "node", "node-chunk", "flatten", "fasttree", "pat", "forge", "paths", "paths-split", "auto"
]
TOL = 2e-5  # float32 executor vs float64 oracle; outputs are averages of values in [-1, 1)


def assert_close(got, want, tol=TOL):
    got = np.asarray(got, dtype=np.float64)
    assert got.shape == want.shape
    assert np.isfinite(got).all(), "NaN/inf in output"
    err = np.abs(got - want).max()
    assert err <= tol, f"max abs error {err} > {tol}"


def oracle_for_tree(tree, q, k, v):
    tables, lens = tree.to_block_tables()
    return numpy_oracle(q, k, v, tables, lens)


# ---- registry, workloads


def test_planners_and_workloads():
    assert treeattn.planners() == PLANNERS
    assert treeattn.workload_sets() == ["fasttree", "pat", "deft", "forge", "irregular"]
    ft = treeattn.workloads("fasttree")
    assert len(ft) == 45 and all(isinstance(n, str) for n in ft)
    details = treeattn.workloads("all", details=True)
    assert len(details) == len(treeattn.workloads())
    d = details[0]
    assert {"key", "set", "name", "num_qo_heads", "num_kv_heads", "head_dim", "page_size",
            "dtype", "generated"} <= set(d)
    tree = treeattn.PrefixTree.from_workload(d["key"])
    assert tree.num_queries > 0 and tree.shape[0] == d["num_qo_heads"]
    with pytest.raises(ValueError, match="workload"):
        treeattn.workloads("nope")


# ---- trees


def test_from_levels_and_shape():
    tree = treeattn.PrefixTree.from_levels("N=1,4 C=100,20 heads=16/4 dim=64")
    assert tree.num_queries == 4
    assert tree.shape == (16, 4, 64)
    assert tree.query_context(0) == 120
    assert tree.unique_tokens() == 100 + 4 * 20
    path = tree.query_path(3)
    assert len(path) == 2 and tree.node(path[0])["parent"] is None
    shuffled = treeattn.PrefixTree.from_levels("N=1,4 C=100,20", layout="shuffled", seed=3)
    assert shuffled.num_queries == 4
    with pytest.raises(ValueError, match="levels|N"):
        treeattn.PrefixTree.from_levels("N=1,4 C=100")
    with pytest.raises(ValueError, match="layout"):
        treeattn.PrefixTree.from_levels("N=1 C=10", layout="diagonal")


def test_block_tables_array_list_and_roundtrip(rng):
    tables, lens, num_pages = random_block_tables(rng, 16)
    t_arr = treeattn.PrefixTree.from_block_tables(tables, lens, page_size=16, num_pages=num_pages)
    rows = [list(r[: (n + 15) // 16]) for r, n in zip(tables.tolist(), lens.tolist())]
    t_list = treeattn.PrefixTree.from_block_tables(rows, lens.tolist(), page_size=16,
                                                   num_pages=num_pages)
    assert t_arr.to_json() == t_list.to_json()
    assert t_arr.num_pages == num_pages and t_arr.num_queries == len(lens)
    bt, sl = t_arr.to_block_tables()
    assert sl == lens.tolist()
    assert [list(r) for r in bt] == rows
    again = treeattn.PrefixTree.from_block_tables(bt, sl, page_size=16, num_pages=num_pages)
    assert again.to_block_tables() == (bt, sl)
    # shared prompts became shared nodes
    assert t_arr.unique_tokens() < sum(sl)


def test_block_tables_errors():
    with pytest.raises(ValueError, match="seq_lens"):
        treeattn.PrefixTree.from_block_tables(np.zeros((2, 3), np.int32), np.array([16], np.int64))
    with pytest.raises(ValueError, match="block_tables"):
        treeattn.PrefixTree.from_block_tables(np.zeros((1, 1), np.int32),
                                              np.array([40], np.int64), page_size=16)
    with pytest.raises(TypeError, match="block_tables"):
        treeattn.PrefixTree.from_block_tables(np.zeros((1, 1), np.float32),
                                              np.array([4], np.int64))


def test_json_roundtrip(tmp_path):
    tree = treeattn.PrefixTree.random(7, page_size=16)
    text = tree.to_json()
    p = tmp_path / "tree.json"
    p.write_text(text)
    assert treeattn.PrefixTree.from_json(str(p)).to_json() == text
    assert treeattn.PrefixTree.from_json_str(text).to_json() == text
    doc = ('{"page_size": 16, "heads": [32, 8], "head_dim": 128, "nodes": [{"id": 0, "parent": '
           'null, "tokens": 40}, {"id": 1, "parent": 0, "tokens": 9}], "queries": [{"node": 1}, '
           '{"node": 1}]}')
    t = treeattn.PrefixTree.from_json_str(doc)
    assert t.num_queries == 2 and t.shape == (32, 8, 128) and t.query_context(1) == 49
    with pytest.raises(ValueError, match=r"nodes\[1\]\.parent"):
        treeattn.PrefixTree.from_json_str(doc.replace('"parent": 0', '"parent": 5'))
    with pytest.raises((ValueError, RuntimeError)):
        treeattn.PrefixTree.from_json(str(tmp_path / "missing.json"))


def test_updates_match_rebuild(rng):
    tables, lens, num_pages = random_block_tables(rng, 16, spare_pages=40)
    tree = treeattn.PrefixTree.from_block_tables(tables, lens, page_size=16, num_pages=num_pages)
    used = {p for r in tree.to_block_tables()[0] for p in r}
    tree.free_pages = [p for p in range(num_pages) if p not in used]
    n0 = tree.num_queries
    ctx0 = tree.query_context(0)
    tree.append_tokens(0, 5)
    assert tree.query_context(0) == ctx0 + 5
    first_new = tree.fork_query(1, 3)
    assert first_new == n0 and tree.num_queries == n0 + 2
    assert tree.query_context(first_new) == tree.query_context(1)
    tree.append_tokens(first_new, 17)
    tree.remove_query(2)
    assert tree.num_queries == n0 + 1
    added = tree.add_query(tree.query_node[0])
    assert added == tree.num_queries - 1
    tree.validate()
    # The updated tree computes the same attention as a rebuild from its block tables.
    bt, sl = tree.to_block_tables()
    rebuilt = treeattn.PrefixTree.from_block_tables(bt, sl, page_size=16, num_pages=num_pages)
    q, k, v = random_qkv(rng, tree.num_queries, 4, 2, 64, num_pages, 16)
    cow_fill(tree, k, v)
    want = numpy_oracle(q, k, v, bt, sl)[0]
    for t in (tree, rebuilt):
        p = treeattn.plan(t, 4, 2, 64, planner="auto")
        p.check()
        assert_close(treeattn.decode(q, k, v, p), want)
    c = copy.deepcopy(tree)
    c.remove_query(0)
    assert c.num_queries == tree.num_queries - 1
    with pytest.raises(ValueError, match="q|query"):
        tree.remove_query(10_000)
    with pytest.raises(ValueError, match="k"):
        tree.append_tokens(0, 0)


# ---- plans


@pytest.mark.parametrize("planner", PLANNERS)
def test_plan_stats_and_coverage(planner):
    tree = treeattn.PrefixTree.from_levels("N=1,4,16 C=300,70,17")
    p = treeattn.plan(tree, 32, 8, 128, planner=planner)
    assert p.planner == planner and p.version >= 1
    assert (p.num_queries, p.num_qo_heads, p.num_kv_heads, p.head_dim, p.page_size) == (
        16, 32, 8, 128, 16)
    assert p.num_items == sum(p.class_items) > 0
    p.check()
    s = p.stats()
    assert s["redundant_kv_bytes"] == s["kv_bytes_read"] - s["unique_kv_bytes"]
    assert s["unique_kv_bytes"] == tree.unique_tokens() * 8 * 128 * 2 * 2
    assert s["est_time_us"] > 0 and 0 <= s["padding_fraction"] < 1
    slow = treeattn.DeviceInfo.preset("h200")
    slow.hbm_read_GBps /= 10
    assert p.stats(slow)["est_time_us"] > s["est_time_us"]
    assert p.stats("a100")["est_time_us"] != s["est_time_us"]
    assert p.workspace_bytes >= p.layout()["metadata_bytes"] > 0
    assert p.device_index is None and p.max_page_id == tree.num_pages - 1


# Every field of the C++ DeviceInfo (include/treeattn/plan/cost/device_info.h), in declaration order.
DEVICE_FIELDS = [
    "name", "num_sms", "smem_per_sm_bytes", "hbm_read_GBps", "tc_TFLOPs", "mma_efficiency",
    "launch_overhead_us", "item_overhead_us", "ctas_per_sm", "merge_launch_us", "tile_latency_us",
    "tile_latency_m128_us", "tile_latency_ws_m128_us", "tile_latency_ws_m64_us",
    "mma_efficiency_ws_m128", "l2_read_GBps",
    "tile_latency_wide_us", "merge_slot_us", "wide_ctas_per_sm",
    "wide_m16_ctas_per_sm", "m128_ctas_per_sm", "mask_penalty", "mask_penalty_m16",
    "path_mask_penalty", "path_mask_penalty_m16", "cta_bw_factor",
    "warpgroup_mma", "latency_terms", "first_launch_us", "pdl_launch_us", "round_trip_us",
    "cta_fixed_us", "prologue_round_trips", "merge_release_us", "merge_round_trips", "kv_pairs",
    "pair_exchange_us",
]


def test_device_info_binds_every_field():
    header = open(os.path.join(os.path.dirname(__file__), "..", "..", "include", "treeattn",
                               "plan", "cost", "device_info.h")).read()
    body = header[header.index("struct DeviceInfo {"):header.index("};", header.index(
        "struct DeviceInfo {"))]
    declared = re.findall(r"^\s+(?:std::string|int32_t|double|bool)\s+(\w+)\s*=", body, re.M)
    assert declared == DEVICE_FIELDS
    d = treeattn.DeviceInfo.preset("h100")
    for f in DEVICE_FIELDS:
        getattr(d, f)
    # the preset carries the fit (src/plan/cost/device_info.cc), not the uncalibrated defaults
    assert d.tile_latency_us > 0 and d.tile_latency_us != treeattn.DeviceInfo().tile_latency_us
    assert d.wide_m16_ctas_per_sm == 3 and d.warpgroup_mma
    assert not treeattn.DeviceInfo.preset("a100").warpgroup_mma
    # The calibrated terms reach the cost model: plan.stats(device) follows them.
    tree = treeattn.PrefixTree.from_levels("N=1,4,16 C=300,70,17")
    p = treeattn.plan(tree, 32, 8, 128, planner="node", device="h100")
    base = p.stats(d)["est_time_us"]
    d.round_trip_us += 1  # the latency terms (on in the presets): a CTA's prologue round trips
    assert p.stats(d)["est_time_us"] > base
    d.round_trip_us -= 1
    d.latency_terms = False  # without them a CTA pays item_overhead_us
    base_off = p.stats(d)["est_time_us"]
    d.item_overhead_us += 10
    assert p.stats(d)["est_time_us"] > base_off
    d.item_overhead_us -= 10
    d.latency_terms = True
    d.merge_slot_us += 5
    assert p.stats(d)["est_time_us"] > base


def test_paths_group_caps_the_paths_planners_groups(rng):
    """plan(..., paths_group=k): paths items of at most k queries, k lowered to the head group's
    cap (128 packed rows, 64 masked): the plain cut (ceil(queries / k) items) or the aligned one
    (each of the 3 subtrees of 7 queries larger than k starts a group: 3 x ceil(7 / k)); every
    query once; decode on the CPU matches the oracle."""
    tree = treeattn.PrefixTree.from_levels("N=1,3,21 C=40,24,9")
    for heads, cap in (((16, 1), 8), ((32, 8), 32), ((8, 8), 64)):
        q, k, v = tree_qkv(rng, tree, heads[0], heads[1], 64)
        want = oracle_for_tree(tree, q, k, v)[0]
        for group in (1, 2, 5, 64):
            p = treeattn.plan(tree, heads[0], heads[1], 64, planner="paths", paths_group=group)
            kk = min(group, cap)
            cuts = {-(-21 // kk), 3 * -(-7 // kk) if kk < 7 else -(-21 // kk)}
            assert p.num_items in cuts, (heads, group, p.num_items, cuts)
            assert (p.num_rows, p.num_slots) == (21, 0), (heads, group)
            assert_close(treeattn.decode(q, k, v, p), want)


def test_plan_defaults_errors_and_update():
    tree = treeattn.PrefixTree.from_levels("N=1,4 C=64,16 heads=16/4 dim=64")
    p = treeattn.plan(tree)
    assert (p.num_qo_heads, p.num_kv_heads, p.head_dim) == (16, 4, 64)
    with pytest.raises(ValueError, match="planner"):
        treeattn.plan(tree, planner="magic")
    with pytest.raises(ValueError, match="num_kv_heads|num_qo_heads"):
        treeattn.plan(tree, 16, 3, 64)
    with pytest.raises(ValueError, match="head_dim"):
        treeattn.plan(tree, 16, 4, 96)
    with pytest.raises(ValueError, match="device"):
        treeattn.plan(tree, device="tpu")
    with pytest.raises(ValueError, match="headroom"):
        treeattn.plan(tree, headroom=0.5)
    with pytest.raises(TypeError, match="tree"):
        treeattn.plan("N=1 C=4")
    for bad in (-1, 65, 2**40):
        with pytest.raises(ValueError, match="^paths_group"):
            treeattn.plan(tree, planner="paths", paths_group=bad)
    with pytest.raises(TypeError, match="paths_group"):
        treeattn.plan(tree, planner="paths", paths_group=2.5)
    big = treeattn.plan(tree, headroom=2.0)
    assert big.layout()["items"] == 2 * p.layout()["items"]
    assert big.workspace_bytes >= p.workspace_bytes
    assert big.fits(p) and p.fits(p)
    tree2 = tree.copy()
    tree2.fork_query(0, 2)
    p2 = treeattn.plan(tree2)
    assert big.fits(p2) and not p.fits(treeattn.plan(tree2, planner="query", head_dim=128))
    same = treeattn.plan(tree2, reuse=big)
    assert same is big and big.num_queries == 5
    assert big.tree.num_queries == 5
    assert treeattn._api.plan_from_handle(big.handle) is big


# ---- decode on the CPU executor


@pytest.mark.parametrize("planner", PLANNERS)
@pytest.mark.parametrize("heads", [(8, 2, 64), (28, 4, 128), (4, 4, 64), (8, 1, 256)])
def test_decode_random_trees(rng, planner, heads):
    H, Hk, D = heads
    tree = treeattn.PrefixTree.random(int(rng.integers(1 << 30)), max_nodes=24, max_queries=12,
                                      max_tokens_per_node=80)
    p = treeattn.plan(tree, H, Hk, D, planner=planner)
    q, k, v = tree_qkv(rng, tree, H, Hk, D)
    out, lse = treeattn.decode(q, k, v, p, return_lse=True)
    want, want_lse = oracle_for_tree(tree, q, k, v)
    assert out.dtype == np.float32 and lse.dtype == np.float32
    assert_close(out, want)
    assert_close(lse, want_lse, tol=1e-4)
    ref, ref_lse = treeattn.reference(tree, q, k, v)
    assert_close(ref, want, tol=1e-9)
    assert_close(ref_lse, want_lse, tol=1e-9)


@pytest.mark.parametrize("key", ["fasttree:0", "pat:3", "deft:7", "forge:7", "irregular:5", "irregular:16",
                                 "irregular:20", "irregular:23", "irregular:25"])
def test_decode_workloads_sampled(rng, key):
    tree = treeattn.PrefixTree.from_workload(key, layout="shuffled", seed=5)
    H, Hk, _ = tree.shape
    Hk2 = min(Hk, 2)  # fewer heads, same GQA ratio, head_dim 64: keeps the oracle fast
    H = (H // Hk) * Hk2
    Hk = Hk2
    p = treeattn.plan(tree, H, Hk, 64)
    q, k, v = tree_qkv(rng, tree, H, Hk, 64)
    out = treeattn.decode(q, k, v, p)
    sample = sorted(set(rng.integers(0, tree.num_queries, 6).tolist()))
    want, _ = treeattn.reference(tree, q, k, v, queries=sample)
    assert np.isnan(want).any() == (len(sample) < tree.num_queries)
    assert_close(out[sample], want[sample])


def test_decode_block_tables_layouts_and_dtypes(rng):
    tables, lens, num_pages = random_block_tables(rng, 16)
    tree = treeattn.PrefixTree.from_block_tables(tables, lens, page_size=16, num_pages=num_pages)
    p = treeattn.plan(tree, 8, 2, 64)
    q, k, v = random_qkv(rng, len(lens), 8, 2, 64, num_pages, 16)
    want, want_lse = numpy_oracle(q, k, v, tables, lens)
    assert_close(treeattn.decode(q, k, v, p), want)
    # combined vLLM layout [num_pages, 2, page_size, kv_heads, head_dim]
    kv = np.stack([k, v], axis=1)
    assert_close(treeattn.decode(q, kv, None, p), want)
    # out= and lse= are written in place and returned
    out = np.full_like(q, np.nan)
    lse = np.full(q.shape[:2], np.nan, np.float32)
    got, got_lse = treeattn.decode(q, k, v, p, out=out, lse=lse)
    assert got is out and got_lse is lse
    assert_close(out, want)
    assert_close(lse, want_lse, tol=1e-4)
    # strided views are read through their strides
    big = np.zeros((q.shape[0], q.shape[1], 2 * q.shape[2]), np.float32)
    big[:, :, ::2] = q
    assert_close(treeattn.decode(big[:, :, ::2], k, v, p), want)
    # float16 in, float16 out; float64 in, float64 out
    out16 = treeattn.decode(q.astype(np.float16), k.astype(np.float16), v.astype(np.float16), p)
    assert out16.dtype == np.float16
    assert_close(out16, want, tol=2e-3)
    out64 = treeattn.decode(q.astype(np.float64), k, v, p)
    assert out64.dtype == np.float64
    assert_close(out64, want)
    # sm_scale
    want2, _ = numpy_oracle(q, k, v, tables, lens, sm_scale=0.05)
    assert_close(treeattn.decode(q, k, v, p, sm_scale=0.05), want2)


def test_decode_is_plan_once_run_per_layer(rng):
    tree = treeattn.PrefixTree.from_levels("N=2,6 C=50,33")
    p = treeattn.plan(tree, 8, 2, 64)
    for _ in range(3):
        q, k, v = tree_qkv(rng, tree, 8, 2, 64)
        assert_close(treeattn.decode(q, k, v, p), oracle_for_tree(tree, q, k, v)[0])


# ---- errors name the argument


@pytest.fixture
def small():
    tree = treeattn.PrefixTree.from_levels("N=1,3 C=40,9")
    p = treeattn.plan(tree, 8, 2, 64)
    q = np.zeros((3, 8, 64), np.float32)
    k = np.zeros((tree.num_pages, 16, 2, 64), np.float32)
    return tree, p, q, k


def test_decode_shape_errors(small):
    tree, p, q, k = small
    v = k.copy()
    with pytest.raises(ValueError, match=r"^k_cache: expected 4 dims \[num_pages, page_size, "
                                         r"num_kv_heads, head_dim\], got \(3, 16, 8\)$"):
        treeattn.decode(q, np.zeros((3, 16, 8), np.float32), v, p)
    with pytest.raises(ValueError, match="^q: dim 1 \\(num_qo_heads\\)"):
        treeattn.decode(np.zeros((3, 4, 64), np.float32), k, v, p)
    with pytest.raises(ValueError, match="^q: dim 0"):
        treeattn.decode(np.zeros((2, 8, 64), np.float32), k, v, p)
    with pytest.raises(ValueError, match="^q: expected 3 dims"):
        treeattn.decode(np.zeros((3, 8 * 64), np.float32), k, v, p)
    with pytest.raises(ValueError, match="^k_cache: dim 1 \\(page_size\\)"):
        treeattn.decode(q, k[:, :8], v[:, :8], p)
    with pytest.raises(ValueError, match="^k_cache: dim 2 \\(num_kv_heads\\)"):
        treeattn.decode(q, np.zeros((k.shape[0], 16, 4, 64), np.float32), v, p)
    with pytest.raises(ValueError, match="^k_cache: has 1 pages but the tree reads page id"):
        treeattn.decode(q, k[:1], v[:1], p)
    with pytest.raises(ValueError, match="^v_cache: shape"):
        treeattn.decode(q, k, np.zeros((k.shape[0] + 1, 16, 2, 64), np.float32), p)
    with pytest.raises(ValueError, match="^k_cache: with v_cache=None expected the combined"):
        treeattn.decode(q, k, None, p)
    with pytest.raises(ValueError, match="^k_cache: dim 1 \\(K/V\\)"):
        treeattn.decode(q, np.zeros((k.shape[0], 3, 16, 2, 64), np.float32), None, p)
    with pytest.raises(ValueError, match="^out: dim 0"):
        treeattn.decode(q, k, v, p, out=np.zeros((4, 8, 64), np.float32))
    with pytest.raises(ValueError, match="^lse: dim 1"):
        treeattn.decode(q, k, v, p, lse=np.zeros((3, 4), np.float32))
    with pytest.raises(ValueError, match="^sm_scale"):
        treeattn.decode(q, k, v, p, sm_scale=-1.0)


def test_decode_type_errors(small):
    tree, p, q, k = small
    with pytest.raises(TypeError, match="^q: expected float16, bfloat16, float32 or float64, got "
                                        "int32"):
        treeattn.decode(q.astype(np.int32), k, k, p)
    with pytest.raises(TypeError, match="^v_cache: expected the dtype of k_cache"):
        treeattn.decode(q, k, k.astype(np.float16), p)
    with pytest.raises(TypeError, match="^out: expected the dtype of q"):
        treeattn.decode(q, k, k, p, out=np.zeros(q.shape, np.float16))
    with pytest.raises(TypeError, match="^lse: expected float32"):
        treeattn.decode(q, k, k, p, lse=np.zeros(q.shape[:2], np.float64))
    with pytest.raises(TypeError, match="^plan"):
        treeattn.decode(q, k, k, "plan")
    with pytest.raises(TypeError, match="^q: expected a DLPack array"):
        treeattn.decode([[[0.0]]], k, k, p)
    with pytest.raises(TypeError, match="^stream"):
        treeattn._frameworks.stream_handle(object(), q)


def test_reference_errors(small):
    tree, p, q, k = small
    with pytest.raises(ValueError, match="^k_cache: has 1 pages"):
        treeattn.reference(tree, q, k[:1], k[:1])
    with pytest.raises(ValueError, match="^q: dim 0"):
        treeattn.reference(tree, q[:2], k, k)
    with pytest.raises(ValueError, match="^queries"):
        treeattn.reference(tree, q, k, k, queries=[7])
    with pytest.raises(ValueError, match="^k_cache: num_qo_heads"):
        treeattn.reference(tree, q, np.zeros((k.shape[0], 16, 3, 64), np.float32),
                           np.zeros((k.shape[0], 16, 3, 64), np.float32))


@pytest.mark.skipif(treeattn.built_with_cuda, reason="CPU-only build behaviour")
def test_cpu_only_build_refuses_gpu(small):
    tree, p, q, k = small
    with pytest.raises(RuntimeError, match="without CUDA"):
        p.to_device(0)


def test_torch_cpu_tensors_and_custom_op(rng):
    torch = pytest.importorskip("torch", reason="torch not installed")
    import treeattn.torch_ops as tops

    tree = treeattn.PrefixTree.from_levels("N=1,4 C=70,21")
    p = treeattn.plan(tree, 8, 2, 64)
    q, k, v = tree_qkv(rng, tree, 8, 2, 64)
    want = oracle_for_tree(tree, q, k, v)[0]
    tq, tk, tv = (torch.from_numpy(x) for x in (q, k, v))
    out = treeattn.decode(tq.requires_grad_(), tk, tv, p)
    assert isinstance(out, torch.Tensor) and out.dtype == torch.float32
    assert_close(out.numpy(), want)
    assert_close(tops.decode(tq.detach(), tk, tv, p).numpy(), want)

    @torch.compile(fullgraph=True, backend="eager")
    def layer(x, kc, vc):
        o, lse = tops.decode(x * 1.0, kc, vc, p, return_lse=True)
        return o * 2, lse

    o, lse = layer(tq.detach(), tk, tv)
    assert_close(o.numpy() / 2, want)
    assert lse.shape == (4, 8) and lse.dtype == torch.float32
