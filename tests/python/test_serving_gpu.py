"""treeattn.serving on a GPU (marker gpu; skipped without CUDA): the core on vLLM-shaped block
tables and vLLM's packed KV cache (both stride orders), and on SGLang-shaped token tables
(req_to_token, page size 1 and 16, token- and page-major pools), against the float64 oracle,
with CUDA graphs captured once and replayed on later steps whose trees change (appends, a
finished request, a join, forks, padding rows), the metadata refreshed by prepare() in place;
with a graph bound, one graph per batch size on the core's one graph plan, replayed on every later
step of that size, the query planner's plan taking the steps whose tree plan does not fit."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import treeattn
from conftest import numpy_oracle
from test_serving import P, Batch, caterpillar
from treeattn.serving import ServingCore, split_packed_kv
from treeattn.serving.token_table import page_table

pytestmark = pytest.mark.gpu
if not (torch.cuda.is_available() and treeattn.built_with_cuda):
    pytest.skip("needs a CUDA device and a CUDA build of treeattn", allow_module_level=True)


def capture(core, q, k, v, out):
    """A CUDA graph of core.decode(q, k, v, out=out), after one eager run (the warm-up, and the
    first use of the step's workspace, outside the capture)."""
    core.decode(q, k, v, out=out)
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        core.decode(q, k, v, out=out)
    return g


@pytest.mark.parametrize("layout", ["nhd", "hnd"])
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_graph_replay_across_changing_trees(layout, dtype):
    H, Hk, D, pages, rows = 8, 2, 128, 2000, 16
    gen = torch.Generator(device="cuda").manual_seed(0)
    packed = torch.rand(pages, P, Hk, 2 * D, device="cuda", generator=gen, dtype=dtype) - 0.5
    cache = packed.transpose(1, 2) if layout == "nhd" else packed.transpose(1, 2).contiguous()
    k, v = split_packed_kv(cache, D)
    core = ServingCore(H, Hk, D, P, num_pages=pages, device="cuda", headroom=4.0, verify=True)
    b = Batch(1, num_pages=pages)
    q = torch.empty(rows, H, D, device="cuda", dtype=dtype)
    out = torch.empty_like(q)
    graph = None
    replays = 0
    for step in range(40):
        b.step(fork=False)
        bt, lens = b.tables()
        bt, lens = bt[:rows], lens[:rows]
        lens = np.concatenate([lens, np.zeros(rows - len(lens), np.int64)])
        bt = np.concatenate([bt, np.zeros((rows - len(bt), bt.shape[1]), bt.dtype)])
        fresh = not core.prepare(bt, lens, key=rows)
        q.copy_(torch.rand(rows, H, D, device="cuda", generator=gen, dtype=dtype) - 0.5)
        if graph is None or fresh:
            graph = capture(core, q, k, v, out)
        graph.replay()
        replays += 1
        torch.cuda.synchronize()
        real = lens > 0
        ref, _ = numpy_oracle(q.float().cpu().numpy()[real], k.float().cpu().numpy(),
                              v.float().cpu().numpy(), bt[real], lens[real])
        np.testing.assert_allclose(out.float().cpu().numpy()[real], ref, atol=2e-2)
    assert replays == 40 and core.sync.counts["incremental"] > 0


@pytest.mark.parametrize("planner", ["auto", "node"])
def test_graph_bound_one_capture_per_size_replays_every_later_step(planner):
    """As an engine runs graphs: one graph per padded batch size (8, 16), captured at that size's
    first step and never again; every step prepares the core's one graph plan in place. Every
    fifth step is a chain of 16 rows (test_serving.caterpillar), whose node plan outgrows the
    rows the bound keeps, so those steps replay the query plan with the node planner."""
    H, Hk, D, pages, dtype = 8, 2, 128, 2000, torch.float16
    gen = torch.Generator(device="cuda").manual_seed(1)
    k = torch.rand(pages, P, Hk, D, device="cuda", generator=gen, dtype=dtype) - 0.5
    v = torch.rand(pages, P, Hk, D, device="cuda", generator=gen, dtype=dtype) - 0.5
    core = ServingCore(H, Hk, D, P, num_pages=pages, device="cuda", planner=planner,
                       headroom=1.0, graph_rows=16, graph_pages=32, verify=True)
    b = Batch(2, num_pages=pages)
    graphs: dict = {}
    for step in range(40):
        b.step(fork=True)
        bt, lens = caterpillar(16) if step % 5 == 4 else b.tables()
        bt, lens = bt[:16], lens[:16]
        size = 8 if len(lens) <= 8 else 16
        lens = np.concatenate([lens, np.zeros(size - len(lens), np.int64)])
        bt = np.concatenate([bt, np.zeros((size - len(bt), bt.shape[1]), bt.dtype)])
        fresh = not core.prepare(bt, lens, key=size)
        assert fresh == (step == 0)  # the graph plan is allocated once, for every size
        if size not in graphs:
            q = torch.empty(size, H, D, device="cuda", dtype=dtype)
            out = torch.empty_like(q)
            q.copy_(torch.rand(size, H, D, device="cuda", generator=gen, dtype=dtype) - 0.5)
            graphs[size] = (capture(core, q, k, v, out), q, out)
        g, q, out = graphs[size]
        q.copy_(torch.rand(size, H, D, device="cuda", generator=gen, dtype=dtype) - 0.5)
        out.fill_(float("nan"))
        g.replay()
        torch.cuda.synchronize()
        real = lens > 0
        ref, _ = numpy_oracle(q.float().cpu().numpy()[real], k.float().cpu().numpy(),
                              v.float().cpu().numpy(), bt[real], lens[real])
        np.testing.assert_allclose(out.float().cpu().numpy()[real], ref, atol=2e-2)
    assert set(graphs) == {8, 16} and core.plans == {}
    assert core.sync.counts["incremental"] > 0
    if planner == "node":
        assert core.counts["graph_fallback"] > 0, core.counts


@pytest.mark.parametrize("page_size,layout", [(1, "nhd"), (16, "nhd"), (16, "hnd")])
@pytest.mark.parametrize("graph", [False, True])
def test_token_tables_page_size_one_and_paged(page_size, layout, graph):
    """SGLang's shape: req_to_token rows of token slots on the GPU (page_table: one gather, one
    copy), its token-major pool [slots, heads, dim] (nhd; at page size 1 a page is one slot)
    or page-major pool [pages, heads, page_size, dim] (hnd), eager steps or one CUDA graph per
    batch size replayed while the trees change."""
    H, Hk, D, slots, dtype = 8, 2, 128, 16384, torch.float16
    P = page_size
    gen = torch.Generator(device="cuda").manual_seed(1)
    if layout == "nhd":
        pool_k = torch.rand(slots, Hk, D, device="cuda", generator=gen, dtype=dtype) - 0.5
        pool_v = torch.rand(slots, Hk, D, device="cuda", generator=gen, dtype=dtype) - 0.5
        k, v = pool_k.view(slots // P, P, Hk, D), pool_v.view(slots // P, P, Hk, D)
    else:
        pool_k = torch.rand(slots // P, Hk, P, D, device="cuda", generator=gen, dtype=dtype) - .5
        pool_v = torch.rand(slots // P, Hk, P, D, device="cuda", generator=gen, dtype=dtype) - .5
        k, v = pool_k.transpose(1, 2), pool_v.transpose(1, 2)
    core = ServingCore(H, Hk, D, P, num_pages=slots // P, device="cuda", headroom=4.0,
                       verify=True)
    b = Batch(3, num_pages=slots // P, page_size=P)
    graphs: dict = {}
    for _ in range(30):
        b.step(fork=True)
        table, idx, lens = b.token_table()
        bt, lens = page_table(torch.from_numpy(table).cuda(), torch.from_numpy(idx).cuda(),
                              lens, P)
        rows = len(lens)
        q = torch.rand(rows, H, D, device="cuda", generator=gen, dtype=dtype) - 0.5
        out = torch.empty_like(q)
        if not graph:
            core.prepare(bt, lens)
            core.decode(q, k, v, out=out)
        else:
            fresh = not core.prepare(bt, lens, key=rows)
            if rows not in graphs or fresh:
                graphs[rows] = (capture(core, q, k, v, out), q, out)
            g, gq, gout = graphs[rows]
            gq.copy_(q)
            g.replay()
            out = gout
        torch.cuda.synchronize()
        ref, _ = numpy_oracle(q.float().cpu().numpy(), k.float().cpu().numpy(),
                              v.float().cpu().numpy(), bt, lens)
        np.testing.assert_allclose(out.float().cpu().numpy(), ref, atol=2e-2)
    assert core.sync.counts["incremental"] > 0, core.sync.counts


def test_launch_caps_run_the_plan_or_refuse_it():
    """Plan.set_launch_caps (the grids of a graph step): caps at the plan's own counts give the
    bits of the uncapped launch; a cap below the plan's items or queries is refused naming it."""
    tree = treeattn.PrefixTree.from_levels("N=1,4 C=64,8 page=16")
    plan = treeattn.plan(tree, 8, 2, 128, headroom=3.0)
    gen = torch.Generator(device="cuda").manual_seed(3)
    k = torch.rand(tree.num_pages, 16, 2, 128, device="cuda", generator=gen,
                   dtype=torch.float16) - 0.5
    v = torch.rand_like(k) - 0.5
    q = torch.rand(4, 8, 128, device="cuda", generator=gen, dtype=torch.float16) - 0.5
    ref = treeattn.decode(q, k, v, plan)
    plan.set_launch_caps(plan.class_items, plan.num_queries)
    assert torch.equal(treeattn.decode(q, k, v, plan), ref)
    for items, queries, name in (([0, 0, 0], 4, "launch_class_items"),
                                 (plan.class_items, 3, "launch_queries")):
        plan.set_launch_caps(items, queries)
        with pytest.raises(ValueError, match=name):
            treeattn.decode(q, k, v, plan)
    plan.set_launch_caps(None, None)
    assert torch.equal(treeattn.decode(q, k, v, plan), ref)
