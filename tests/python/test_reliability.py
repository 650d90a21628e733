"""Reproductions of issue 11 (reliability) on the CPU build: documented limits, page ownership,
stale plans, argument errors that name their argument, the docs' graph example, and the torch
custom op under torch.compile with the default (inductor) backend."""

from __future__ import annotations

import numpy as np
import pytest

import treeattn
from conftest import tree_qkv


def chain_levels(n):
    ones = ",".join(["1"] * n)
    return f"N={ones} C={ones}"


# ---- limits (issue items 1 and 2)


def test_path_depth_sum_limit():
    t = treeattn.PrefixTree.from_levels(chain_levels(4096))
    v = t.version
    with pytest.raises(ValueError, match="^n: .*kMaxPathDepthSum"):
        t.fork_query(0, 8193)  # 8193 paths of 4096 nodes: the update refuses it
    assert (t.num_queries, t.version) == (1, v)
    t.fork_query(0, 8192)  # exactly the limit
    treeattn.plan(t, 8, 2, 64)


def test_queries_and_nodes_limits():
    t = treeattn.PrefixTree.from_levels("N=1,2 C=4,4")
    with pytest.raises(ValueError, match="n: .*kMaxTreeQueries"):
        t.fork_query(0, 2**31 - 3)
    assert t.num_queries == 2  # unchanged
    with pytest.raises(ValueError, match="max_nodes"):
        treeattn.PrefixTree.random(0, 2**31 - 1)
    with pytest.raises(ValueError, match="max_queries"):
        treeattn.PrefixTree.random(0, 8, 2**31 - 1)


def test_json_file_limits(tmp_path):
    with pytest.raises(ValueError, match="is a directory"):
        treeattn.PrefixTree.from_json(str(tmp_path))


# ---- undefined behaviour in the layout (item 3)


@pytest.mark.parametrize("headroom", [1e17, 1e30, float("inf"), float("nan")])
def test_headroom_overflow(headroom):
    t = treeattn.PrefixTree.from_levels("N=1,4 C=64,16")
    with pytest.raises(ValueError, match="headroom"):
        treeattn.plan(t, 8, 2, 64, headroom=headroom)


def test_headroom_large_but_valid():
    t = treeattn.PrefixTree.from_levels("N=1,4 C=64,16")
    p = treeattn.plan(t, 8, 2, 64, headroom=1000.0)
    assert p.workspace_bytes > 0 and all(v > 0 for v in p.layout()["class_items"] if v)


# ---- page ownership and DeviceInfo (item 4)


def test_page_layouts_refused():
    bad_child = ('{"page_size": 16, "nodes": [{"id": 0, "parent": null, "tokens": 16, "pages": '
                 '[0]}, {"id": 1, "parent": 0, "tokens": 20, "pages": [0, 1]}], '
                 '"queries": [{"node": 1}]}')
    with pytest.raises(ValueError, match=r"nodes\[1\]\.pages\[0\].*nodes\[0\]\.pages\[0\]"):
        treeattn.PrefixTree.from_json_str(bad_child)
    twice = ('{"page_size": 16, "nodes": [{"id": 0, "parent": null, "tokens": 32, '
             '"pages": [1, 1]}], "queries": [{"node": 0}]}')
    with pytest.raises(ValueError, match=r"nodes\[0\]\.pages\[1\]"):
        treeattn.PrefixTree.from_json_str(twice)
    with pytest.raises(ValueError, match="pages"):
        treeattn.PrefixTree.from_block_tables(np.array([[0, 0, 0]], np.int32), np.array([40]),
                                              page_size=16)
    # a child may reuse its parent's last page at later slots (the slots hold new positions)
    ok = ('{"page_size": 16, "nodes": [{"id": 0, "parent": null, "tokens": 10, "pages": [0]}, '
          '{"id": 1, "parent": 0, "tokens": 4, "page_offset": 10, "pages": [0]}], '
          '"queries": [{"node": 1}]}')
    treeattn.PrefixTree.from_json_str(ok).validate()


def test_free_pages_checked():
    t = treeattn.PrefixTree.from_block_tables([[0, 1], [0, 2]], [20, 20], page_size=16,
                                              num_pages=8)
    for free, what in (([5, 5], "is listed twice"), ([1], "is in use"), ([8], "out of range")):
        with pytest.raises(ValueError, match=r"free_pages\[\d\]: page id \d+ " + what):
            t.free_pages = free  # checked when set
        assert t.free_pages == []  # unchanged
    t.free_pages = [3, 4]
    t.validate()
    json_tree = ('{"page_size": 16, "num_pages": 4, "free_pages": [1], "nodes": [{"id": 0, '
                 '"parent": null, "tokens": 16, "pages": [1]}], "queries": [{"node": 0}]}')
    with pytest.raises(ValueError, match=r"free_pages\[0\]: page id 1 is in use"):
        treeattn.PrefixTree.from_json_str(json_tree)


def test_append_tokens_refuses_pages_in_use():
    t = treeattn.PrefixTree.from_block_tables([[0, 1], [0, 2]], [32, 32], page_size=16,
                                              num_pages=8)
    with pytest.raises(ValueError, match=r"new_pages\[0\]: page id 2 is in use"):
        t.append_tokens(0, 1, new_pages=[2])
    v = t.version
    t.append_tokens(0, 1, new_pages=[5])
    assert t.version == v + 1
    t.validate()


@pytest.mark.parametrize("field,value", [("launch_overhead_us", float("nan")),
                                         ("item_overhead_us", -1.0),
                                         ("hbm_read_GBps", 0.0),
                                         ("tc_TFLOPs", float("inf")),
                                         ("smem_per_sm_bytes", 0),
                                         ("num_sms", -3)])
def test_device_info_validated(field, value):
    t = treeattn.PrefixTree.from_levels("N=1,4 C=64,16")
    d = treeattn.DeviceInfo.preset("h100")
    setattr(d, field, value)
    with pytest.raises(ValueError, match=f"device.{field}"):
        treeattn.plan(t, 8, 2, 64, device=d)
    p = treeattn.plan(t, 8, 2, 64)
    with pytest.raises(ValueError, match=f"device.{field}"):
        p.stats(device=d)


# ---- messages that name the argument (item 6)


def test_block_tables_huge_seq_len():
    with pytest.raises(ValueError, match="seq_lens"):
        treeattn.PrefixTree.from_block_tables(np.array([[0, 1]], np.int32),
                                              np.array([2**63 - 1]), page_size=16)


def test_out_of_range_ints_name_the_argument():
    t = treeattn.PrefixTree.from_levels("N=1,4 C=64,16")
    with pytest.raises(ValueError, match="num_qo_heads"):
        treeattn.plan(t, 2**40, 8, 128)
    with pytest.raises(ValueError, match="page_size"):
        treeattn.PrefixTree.from_block_tables([[0]], [4], page_size=2**31)
    with pytest.raises(ValueError, match="n: "):
        t.fork_query(0, 2**31)
    with pytest.raises(TypeError, match="query: expected an int"):
        t.append_tokens("0", 1)
    with pytest.raises(ValueError, match="seed"):
        treeattn.PrefixTree.random(-1)


def test_from_json_str_bytes():
    with pytest.raises(ValueError, match="nodes"):
        treeattn.PrefixTree.from_json_str(b"{}")
    t = treeattn.PrefixTree.from_json_str(treeattn.PrefixTree.from_levels("N=1 C=4").to_json()
                                          .encode())
    assert t.num_queries == 1
    with pytest.raises(TypeError, match="text"):
        treeattn.PrefixTree.from_json_str(3)


def test_bindings_check_their_own_int_and_text_arguments():
    """The extension's methods are its own (nanobind functions, no Python wrapper set over them
    at import) and check their int and text arguments themselves: None, bools, floats and
    strings get a TypeError naming the parameter, numpy integers are taken, out-of-range values
    and bytes that are not UTF-8 a ValueError naming it."""
    PT = treeattn.PrefixTree
    for name in ("append_tokens", "add_query", "remove_query", "fork_query", "node",
                 "query_path", "query_context", "from_block_tables", "random", "from_levels",
                 "from_workload", "from_json_str"):
        assert type(getattr(PT, name)).__module__ == "nanobind", name
    t = PT.from_levels("N=1,4 C=64,16")
    with pytest.raises(TypeError, match="^index: expected an int, got NoneType"):
        t.node(None)
    with pytest.raises(TypeError, match="^node: expected an int, got bool"):
        t.add_query(True)
    with pytest.raises(TypeError, match="^n: expected an int, got float"):
        t.fork_query(0, 1.0)
    with pytest.raises(TypeError, match="^k: expected an int, got str"):
        t.append_tokens(0, k="1")
    with pytest.raises(ValueError, match=r"^num_pages: 2147483648 is out of range "
                                         r"\[-2147483648, 2147483647\]"):
        t.num_pages = 2**31
    with pytest.raises(ValueError, match=r"^seed: 18446744073709551616 is out of range "
                                         r"\[0, 18446744073709551615\]"):
        PT.random(2**64)
    with pytest.raises(TypeError, match="^num_qo_heads: expected an int, got str"):
        treeattn.plan(t, "8", 2, 64)
    assert t.query_path(np.int64(1)) == t.query_path(1)
    t.num_pages = np.int64(t.num_pages + 1)
    v = t.version
    t.append_tokens(np.int32(1), np.uint8(2), new_pages=[t.num_pages - 1])
    assert t.version == v + 1 and t.query_context(1) == 64 + 16 + 2
    assert PT.random(np.uint64(2**64 - 1), max_nodes=np.int16(8)).num_nodes <= 8
    assert treeattn.plan(t, np.int64(8), 2, 64).num_qo_heads == 8
    text = t.to_json()
    assert PT.from_json_str(bytearray(text.encode())).to_json() == text
    with pytest.raises(ValueError, match="^text: not UTF-8"):
        PT.from_json_str(b"\xff{}")
    with pytest.raises(TypeError, match="^text: expected str or bytes, got NoneType"):
        PT.from_json_str(None)


def test_check_int_is_the_bindings_int_check():
    """treeattn.check_int, public for code built on treeattn, gives the bindings' messages."""
    assert treeattn.check_int("x", np.int16(3), 0, 5) == 3
    assert type(treeattn.check_int("x", np.int16(3), 0, 5)) is int
    assert treeattn.check_int("x", 2**70, 0, 2**80) == 2**70
    with pytest.raises(ValueError, match=r"^x: 6 is out of range \[0, 5\]$"):
        treeattn.check_int("x", 6, 0, 5)
    with pytest.raises(ValueError, match=r"^x: 2147483648 is out of range"):
        treeattn.check_int("x", 2**31)
    for bad, kind in ((True, "bool"), (np.bool_(True), "bool"), ("3", "str"), (3.0, "float"),
                      (None, "NoneType")):
        with pytest.raises(TypeError, match=f"^x: expected an int, got {kind}$"):
            treeattn.check_int("x", bad)
    with pytest.raises(TypeError, match="^lo: expected an int"):
        treeattn.check_int("x", 3, lo=0.5)


def test_read_only_and_broadcast_arrays(rng):
    t = treeattn.PrefixTree.from_levels("N=1,4 C=64,16")
    p = treeattn.plan(t, 8, 2, 64)
    q, k, v = tree_qkv(rng, t, 8, 2, 64)
    out = np.empty_like(q)
    out.flags.writeable = False
    with pytest.raises(ValueError, match="out: the numpy array is read-only"):
        treeattn.decode(q, k, v, p, out=out)
    qb = np.broadcast_to(q[:1], q.shape)
    with pytest.raises(ValueError, match=r"q: .*broadcast"):
        treeattn.decode(qb, k, v, p)


def _gpu_usable():
    try:
        import torch
    except ImportError:
        return False
    return treeattn.built_with_cuda and torch.cuda.is_available()


@pytest.mark.skipif(_gpu_usable(), reason="a GPU is present: to_device() succeeds here")
def test_no_gpu_message():
    t = treeattn.PrefixTree.from_levels("N=1,4 C=64,16")
    p = treeattn.plan(t, 8, 2, 64)
    with pytest.raises(RuntimeError, match="no GPU"):
        p.to_device(0)


def test_torch_sparse_and_meta_tensors(rng):
    torch = pytest.importorskip("torch", reason="torch not installed")
    t = treeattn.PrefixTree.from_levels("N=1,4 C=64,16")
    p = treeattn.plan(t, 8, 2, 64)
    q, k, v = (torch.from_numpy(x) for x in tree_qkv(rng, t, 8, 2, 64))
    with pytest.raises(TypeError, match="k_cache: expected a dense"):
        treeattn.decode(q, k.to_sparse(), v, p)
    with pytest.raises(TypeError, match="q: a meta tensor"):
        treeattn.decode(q.to("meta"), k, v, p)


# ---- stale plans (item 7)


def test_stale_plan_refused(rng):
    t = treeattn.PrefixTree.from_block_tables([[0, 1], [0, 2]], [20, 24], page_size=16,
                                              num_pages=8)
    p = treeattn.plan(t, 8, 2, 64)
    assert p.tree_version == t.version == 0
    q, k, v = tree_qkv(rng, t, 8, 2, 64)
    treeattn.decode(q, k, v, p)
    t.append_tokens(0, 1, new_pages=[5])
    assert t.version == 1
    with pytest.raises(ValueError, match="plan: stale"):
        treeattn.decode(q, k, v, p)
    fresh = treeattn.plan(t, 8, 2, 64)
    with pytest.raises(ValueError, match="new: stale"):
        t.fork_query(0, 2)
        p.update(fresh)
    p.update(treeattn.plan(t, 8, 2, 64))
    q2 = np.concatenate([q, q[:1]])
    treeattn.decode(q2, k, v, p)  # the refreshed plan is current


def test_stale_plan_refused_by_torch_op(rng):
    torch = pytest.importorskip("torch", reason="torch not installed")
    import treeattn.torch_ops as tops

    t = treeattn.PrefixTree.from_levels("N=1,4 C=64,16")
    p = treeattn.plan(t, 8, 2, 64)
    q, k, v = (torch.from_numpy(x) for x in tree_qkv(rng, t, 8, 2, 64))
    t.remove_query(3)
    with pytest.raises(ValueError, match="plan: stale"):
        tops.decode(q[:3], k, v, p)


def test_update_before_to_device_checks_shape():
    t = treeattn.PrefixTree.from_levels("N=1,4 C=64,16")
    p = treeattn.plan(t, 8, 2, 64)
    other = treeattn.plan(t, 16, 4, 64)
    assert not p.fits(other)
    with pytest.raises(ValueError, match="plan: the new plan is for heads 16/4"):
        p.update(other)
    assert p.num_qo_heads == 8


# ---- issue 20: CPU decode reads only the plan's pages, sm_scale, the planner auto chose

_CACHE_MEMORY_SCRIPT = r"""
import numpy as np
import treeattn


def peak_kib():  # VmHWM: this process's peak RSS (ru_maxrss would start at the parent's)
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("VmHWM:"))


pages, P = 1 << 16, 16
tree = treeattn.PrefixTree.from_block_tables([[pages - 1]], [P], page_size=P, num_pages=pages)
plan = treeattn.plan(tree, 8, 1, 64)
rng = np.random.default_rng(0)
# np.zeros maps its pages lazily: only pages something touches become resident.
k, v = np.zeros((pages, P, 1, 64), np.float16), np.zeros((pages, P, 1, 64), np.float16)
kv = np.zeros((pages, 2, P, 1, 64), np.float16)
k[-1], v[-1] = rng.uniform(-1, 1, (2, P, 1, 64))
kv[-1] = k[-1], v[-1]
q = rng.uniform(-1, 1, (1, 8, 64)).astype(np.float16)
peak = peak_kib()
out = treeattn.decode(q, k, v, plan)
out_kv = treeattn.decode(q, kv, None, plan)
grew_kib = peak_kib() - peak
want = treeattn.reference(tree, q, k, v)[0]
err = max(np.abs(o.astype(np.float64) - want).max() for o in (out, out_kv))
print(grew_kib, err)
"""


def test_cpu_decode_reads_only_the_plans_pages():
    """A 1-page tree over a 65,536-page fp16 cache (128 MiB for K, V and the combined layout
    each, never touched but for the one page): decode's peak memory must not grow with the
    cache (converting it to float32 would add 256 MiB per tensor)."""
    import os
    import subprocess
    import sys

    if not os.path.exists("/proc/self/status"):
        pytest.skip("needs Linux's /proc/self/status (VmHWM)")
    r = subprocess.run([sys.executable, "-c", _CACHE_MEMORY_SCRIPT], capture_output=True,
                       text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    grew_kib, err = r.stdout.split()
    assert int(grew_kib) < 32 * 1024, f"decode grew the peak RSS by {int(grew_kib) // 1024} MiB"
    assert float(err) < 2e-3  # fp16 output


@pytest.mark.parametrize("bad", [0.0, -1.0, float("nan"), float("inf"), -float("inf"), 1e39])
def test_sm_scale_must_be_positive_and_finite(rng, bad):
    t = treeattn.PrefixTree.from_levels("N=1,4 C=64,16")
    p = treeattn.plan(t, 8, 2, 64)
    q, k, v = tree_qkv(rng, t, 8, 2, 64)
    with pytest.raises(ValueError, match="^sm_scale: must be > 0"):
        treeattn.decode(q, k, v, p, sm_scale=bad)
    with pytest.raises(ValueError, match="^sm_scale: must be > 0"):
        treeattn.reference(t, q, k, v, sm_scale=bad)
    for wrong in ("0.1", True, [0.1]):
        with pytest.raises(TypeError, match="^sm_scale: expected a float or None"):
            treeattn.decode(q, k, v, p, sm_scale=wrong)
    # None is the default 1/sqrt(head_dim); a given value is used as it is.
    default = treeattn.reference(t, q, k, v)[0]
    assert np.array_equal(treeattn.reference(t, q, k, v, sm_scale=64 ** -0.5)[0], default)
    assert np.abs(treeattn.decode(q, k, v, p) - default).max() < 1e-4
    small = treeattn.reference(t, q, k, v, sm_scale=1e-30)[0]
    assert np.abs(treeattn.decode(q, k, v, p, sm_scale=1e-30) - small).max() < 1e-4
    try:  # the torch custom op takes sm_scale as Optional[float] and checks it the same way
        import torch
        import treeattn.torch_ops as tops
    except ImportError:
        return
    tq, tk, tv = (torch.from_numpy(x) for x in (q, k, v))
    with pytest.raises(ValueError, match="^sm_scale: must be > 0"):
        tops.decode(tq, tk, tv, p, sm_scale=bad)
    assert np.abs(tops.decode(tq, tk, tv, p, sm_scale=1e-30).numpy() - small).max() < 1e-4


def test_chosen_planner():
    """plan.planner is the planner asked for; plan.chosen_planner the one whose plan it is: for
    auto either 'auto' (its own grouping) or the candidate it returned, that planner's plan."""
    outcomes = set()
    for key in ("fasttree:0", "fasttree:2", "fasttree:3", "fasttree:17", "fasttree:23", "pat:0",
                "pat:5", "deft:0", "irregular:0", "irregular:3", "forge:0"):
        tree = treeattn.PrefixTree.from_workload(key)
        p = treeattn.plan(tree)
        assert p.planner == "auto"
        assert p.chosen_planner in treeattn.planners(), key
        outcomes.add(p.chosen_planner == "auto")
        if p.chosen_planner != "auto":
            same = treeattn.plan(tree, planner=p.chosen_planner)
            assert same.chosen_planner == p.chosen_planner
            assert same.stats() == p.stats(), key
            assert (same.num_items, same.num_rows, same.num_ranges, same.num_slots) == (
                p.num_items, p.num_rows, p.num_ranges, p.num_slots), key
    assert outcomes == {True, False}  # both kinds of choice occur among these lines
    tree = treeattn.PrefixTree.from_levels("N=1,4 C=64,16")
    for name in treeattn.planners():
        assert treeattn.plan(tree, 8, 2, 64, planner=name).chosen_planner == name \
            or name == "auto"


# ---- docs/python.md's graph example (item 8), its tree and plan part on the CPU


def test_docs_graph_example_tree_part(rng):
    block_tables = np.array([[0, 1, 2], [0, 1, 3]], np.int32)
    seq_lens = np.array([48, 37])  # request 0 fills its last page: its next token needs one
    num_pages = 8
    tree = treeattn.PrefixTree.from_block_tables(block_tables, seq_lens, page_size=16)
    plan = treeattn.plan(tree, 8, 2, 64, headroom=1.5)
    free_page = 5  # from the engine's allocator
    tree.num_pages = num_pages
    tree.append_tokens(0, 1, new_pages=[free_page])
    assert treeattn.plan(tree, 8, 2, 64, reuse=plan) is plan
    q, k, v = tree_qkv(rng, tree, 8, 2, 64)
    ref = treeattn.reference(tree, q, k, v)[0]
    assert np.abs(treeattn.decode(q, k, v, plan) - ref).max() < 1e-4


# ---- torch.compile with the default backend (inductor; needs a C++ compiler on CPU)


def test_torch_compile_inductor_cpu(rng):
    torch = pytest.importorskip("torch", reason="torch not installed")
    import treeattn.torch_ops as tops

    tree = treeattn.PrefixTree.from_levels("N=1,4 C=70,21")
    p = treeattn.plan(tree, 8, 2, 64)
    q, k, v = tree_qkv(rng, tree, 8, 2, 64)
    want = treeattn.reference(tree, q, k, v)[0]
    tq, tk, tv = (torch.from_numpy(x) for x in (q, k, v))

    @torch.compile(fullgraph=True)
    def layer(x, kc, vc):
        return tops.decode(x * 1.0, kc, vc, p) * 2

    out = layer(tq, tk, tv)
    assert np.abs(out.numpy() / 2 - want).max() < 1e-4


# ---- issue 20: page_size bounded everywhere, the checked num_pages setter, JSON reader cost


def test_page_size_limit_everywhere(tmp_path):
    with pytest.raises(ValueError, match="^page_size: .*kMaxPageSize=4096"):
        treeattn.PrefixTree.from_block_tables([[0]], [4], page_size=4097)
    with pytest.raises(ValueError, match="^page_size: .*kMaxPageSize"):
        treeattn.PrefixTree.from_block_tables(np.array([[0]], np.int32), np.array([4]),
                                              page_size=1 << 20)
    with pytest.raises(ValueError, match="^page_size: .*kMaxPageSize"):
        treeattn.PrefixTree.random(0, page_size=4097)
    with pytest.raises(ValueError, match="^page: .*kMaxPageSize"):
        treeattn.PrefixTree.from_levels("N=1 C=4 page=4097")
    path = tmp_path / "t.json"
    path.write_text('{"page_size": 1048576, "nodes": [{"id": 0, "tokens": 1}], '
                    '"queries": [{"node": 0}]}')
    with pytest.raises(ValueError, match=r"page_size: .*kMaxPageSize=4096\], got 1048576"):
        treeattn.PrefixTree.from_json(str(path))
    assert treeattn.PrefixTree.from_block_tables([[0]], [4], page_size=4096).page_size == 4096


def test_num_pages_setter_is_a_checked_update():
    t = treeattn.PrefixTree.from_levels("N=1,2 C=4,4")  # pages 0, 1, 2 in use
    v, n = t.version, t.num_pages
    for bad, what in ((-5, "-5"), (2, "page id 2")):
        with pytest.raises(ValueError, match=f"^num_pages: .*{what}"):
            t.num_pages = bad
        assert (t.num_pages, t.version) == (n, v)
    t.num_pages = n + 4
    t.free_pages = [n + 3, n + 2]
    assert (t.num_pages, t.version) == (n + 4, v + 1)
    with pytest.raises(ValueError, match="^num_pages: .*free_pages"):
        t.num_pages = n + 3  # below a pooled page
    assert (t.num_pages, t.version) == (n + 4, v + 1)
    t.validate()
