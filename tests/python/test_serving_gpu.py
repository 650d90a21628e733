"""treeattn.serving on a GPU (marker gpu; skipped without CUDA): the core on vLLM-shaped block
tables and vLLM's packed KV cache (both stride orders), and on SGLang-shaped token tables
(req_to_token, page size 1 and 16, token- and page-major pools), against the float64 oracle,
with CUDA graphs captured once and replayed on later steps whose trees change (appends, a
finished request, a join, forks, padding rows), the metadata refreshed by prepare() in place;
with a graph bound, one graph per batch size on the core's one graph plan, replayed on every later
step of that size, the query planner's plan taking the steps whose tree plan does not fit; device
pages (block tables on the GPU, vLLM's way) filled into the graph plan before each replay."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import treeattn
from conftest import numpy_oracle
from test_serving import P, Batch, caterpillar, hide_pages
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


def replay_checked(core, graphs, bufs, gen, k, v, bt, lens):
    """One step of a graph engine of padded size n = len(lens): new random q in the size's
    persistent buffers, its graph captured at its first step (graphs / bufs: dicts by size),
    the output poisoned, the graph replayed, the rows with a length checked against the oracle
    over (bt, lens)."""
    n, H, D, dtype = len(lens), core.shape[0], core.shape[2], k.dtype
    if n not in bufs:
        bufs[n] = (torch.empty(n, H, D, device="cuda", dtype=dtype),
                   torch.empty(n, H, D, device="cuda", dtype=dtype))
    q, out = bufs[n]
    q.copy_(torch.rand(n, H, D, device="cuda", generator=gen, dtype=dtype) - 0.5)
    if n not in graphs:
        graphs[n] = capture(core, q, k, v, out)
    out.fill_(float("nan"))
    graphs[n].replay()
    torch.cuda.synchronize()
    real = lens > 0
    ref, _ = numpy_oracle(q.float().cpu().numpy()[real], k.float().cpu().numpy(),
                          v.float().cpu().numpy(), bt[real], lens[real])
    np.testing.assert_allclose(out.float().cpu().numpy()[real], ref, atol=2e-2)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_device_pages_filled_before_each_replay(dtype):
    """vLLM's way: the block tables live on the GPU (one persistent int32 tensor), the host
    knows each request's pages up to its join and -1 past them (test_serving.hide_pages); the
    core labels those, and fills them into the graph plan from the device tables after each
    prepare(). One graph per padded size (2, 4, 8, 16, 32) on vLLM's packed cache, captured once and
    replayed on every later step; outputs poisoned before every replay."""
    H, Hk, D, pages = 8, 2, 128, 2000
    gen = torch.Generator(device="cuda").manual_seed(2)
    packed = torch.rand(pages, P, Hk, 2 * D, device="cuda", generator=gen, dtype=dtype) - 0.5
    k, v = split_packed_kv(packed.transpose(1, 2), D)
    core = ServingCore(H, Hk, D, P, num_pages=pages, device="cuda", verify=True,
                       graph_rows=32, graph_pages=64)
    b = Batch(3, num_pages=pages)
    rng = np.random.default_rng(4)
    table = torch.full((40, 96), -7, dtype=torch.int32, device="cuda")  # the engine's tensor
    known: dict = {}
    graphs: dict = {}
    bufs: dict = {}
    for step in range(40):
        b.step(fork=True)
        bt, lens = b.tables()
        bt, lens, sids = bt[:32], lens[:32], b.rows[:32]
        n = next(x for x in (2, 4, 8, 16, 32) if x >= len(lens))
        lens = np.concatenate([lens, np.zeros(n - len(lens), np.int64)])
        bt = np.concatenate([bt, np.zeros((n - len(bt), bt.shape[1]), bt.dtype)])
        host, keys = hide_pages(rng, sids, bt, lens, known)
        table[:n, :bt.shape[1]].copy_(torch.from_numpy(bt.astype(np.int32)))
        core.prepare(host, lens, key=n, device_block_tables=table[:n], row_keys=keys)
        replay_checked(core, graphs, bufs, gen, k, v, bt, lens)
    assert core.counts["device_page_steps"] >= 30, core.counts
    assert len(graphs) >= 2 and core.sync.counts["incremental"] > 0
    # the last step had labels: a fresh workspace holds them again, so a decode refuses the
    # plan until the next resolve
    assert core.plan.max_page_id >= pages
    core.plan.release_device()
    with pytest.raises(ValueError, match="plan: its page ids from 2000 on"):
        core.decode(bufs[n][0], k, v)


def test_engine_steps_without_a_synchronization():
    """An engine that keeps its block tables on the GPU, as vLLM's model runner V2 does: a
    request joins with a prefill step, whose rows HostRows copies (non-blocking, polled later),
    then decodes; pages opened during decode, and every page of a row whose copy has not landed,
    are device pages; requests end and their slots are reused. Every step's host work (poll,
    tables, prepare with the resolve, the copies of joining rows) runs under torch's sync debug
    mode 'error' (a synchronizing torch call raises); each step's graph replay (one graph per
    padded size) matches the oracle, outputs poisoned before."""
    from treeattn.engine.kv import KVCache
    from treeattn.serving import HostRows

    H, Hk, D, pages, dtype = 8, 2, 128, 3000, torch.float16
    gen = torch.Generator(device="cuda").manual_seed(5)
    k = torch.rand(pages, P, Hk, D, device="cuda", generator=gen, dtype=dtype) - 0.5
    v = torch.rand(pages, P, Hk, D, device="cuda", generator=gen, dtype=dtype) - 0.5
    rng = np.random.default_rng(6)
    kvm = KVCache(1, pages, P, 1, 8, allocate=False)
    prompts = [list(rng.integers(0, 50, 30)) for _ in range(2)]
    core = ServingCore(H, Hk, D, P, num_pages=pages, device="cuda", verify=True,
                       graph_rows=16, graph_pages=64)
    hr = HostRows()
    table = torch.zeros(24, 64, dtype=torch.int32, device="cuda")  # the batch's table
    slot_of: dict = {}
    decoding: list = []
    graphs: dict = {}
    bufs: dict = {}
    for step in range(40):
        joining = []
        if len(decoding) < 3 or (len(decoding) < 15 and rng.random() < 0.3):
            base = prompts[int(rng.integers(0, 2))]
            prompt = base[:int(rng.integers(10, 30))] + list(rng.integers(0, 50, 3))
            sid, cached = kvm.new_seq(prompt)
            for t in prompt[cached:]:
                kvm.append(sid, int(t))
            joining.append(sid)
        elif rng.random() < 0.3 and len(decoding) > 3:
            sid = decoding.pop(int(rng.integers(0, len(decoding))))
            kvm.free_seq(sid)
            del slot_of[sid]
        for sid in decoding:
            kvm.append(sid, int(rng.integers(0, 50)))
        for sid in joining:
            slot_of[sid] = min(set(range(len(slot_of) + 1)) - set(slot_of.values()))
        batch = decoding + joining  # decode rows first
        nd, n = len(decoding), next(x for x in (4, 8, 16) if x >= len(decoding))
        bt = np.zeros((len(batch), 64), np.int32)
        for r, sid in enumerate(batch):
            bt[r, :len(kvm.block_table(sid))] = kvm.block_table(sid)
        lens = np.array([kvm.length(s) for s in decoding] + [0] * (n - nd), np.int64)
        slots = np.array([slot_of[s] for s in decoding] + [100 + i for i in range(n - nd)])
        # the engine's own table update: asynchronous, from pinned memory
        table[:len(batch)].copy_(torch.from_numpy(bt).pin_memory(), non_blocking=True)
        torch.cuda.set_sync_debug_mode("error")
        try:
            hr.poll()
            host = hr.table(slots, int(-(-max(lens.max(), 1) // P)))
            if nd:
                core.prepare(host, lens, key=n, device_block_tables=table[:n], row_keys=slots)
            want = [r for r in range(nd) if int(slots[r]) not in hr.rows
                    and int(slots[r]) not in hr.pending_slots()]
            if want:
                hr.request(table[:nd], np.array(want), slots[want], -(-lens[want] // P))
            if joining:
                plens = np.array([kvm.length(s) for s in joining])
                hr.request(table[nd:len(batch)], np.arange(len(joining)),
                           np.array([slot_of[s] for s in joining]), -(-plens // P))
        finally:
            torch.cuda.set_sync_debug_mode("default")
        decoding += joining
        if not nd:
            continue
        replay_checked(core, graphs, bufs, gen, k, v,
                       np.concatenate([bt[:nd], np.zeros((n - nd, bt.shape[1]), bt.dtype)]), lens)
    assert core.counts["device_page_steps"] >= 20, core.counts
    assert len(hr.rows) >= 3 and len(graphs) >= 2
