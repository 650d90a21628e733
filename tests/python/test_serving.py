"""treeattn.serving on the CPU: TreeSync keeps its tree equal to block tables made by a real paged
KV manager (prefix sharing, forks with copy-on-write, finished requests, moved rows, padding)
while taking the incremental path on most steps; ServingCore.decode matches the float64 oracle
over the block tables on every KV layout (separate, combined, vLLM's packed cache in both of its
stride orders); prefetch; argument errors."""

from __future__ import annotations


import numpy as np
import pytest
import torch

import treeattn
from conftest import numpy_oracle
from treeattn.engine.kv import KVCache
from treeattn import PrefixTree
from treeattn.serving import ServingCore, TreeSync, split_packed_kv

P = 4


class Batch:
    """Requests over a KVCache (no tensors): shared prompts, forks, finishes; rows as an engine's
    persistent batch keeps them (a finished row is filled by the last one, vLLM's condense)."""

    def __init__(self, seed: int, num_pages: int = 4000, page_size: int = P):
        self.rng = np.random.default_rng(seed)
        self.P = page_size
        self.kv = KVCache(1, num_pages, page_size, 1, 8, allocate=False)
        self.rows: list = []
        self.prompts = [list(self.rng.integers(0, 50, 23)) for _ in range(3)]
        self.pool_index: dict = {}  # sid -> row of token_table()
        self.free_index = list(range(1, 129))

    def join(self):
        base = self.prompts[int(self.rng.integers(0, 3))]
        prompt = base[: int(self.rng.integers(5, len(base)))] + list(self.rng.integers(0, 50, 3))
        sid, cached = self.kv.new_seq(prompt)
        for t in prompt[cached:]:
            self.kv.append(sid, int(t))
        self.rows.append(sid)

    def step(self, fork: bool = False):
        r = self.rng.random()
        if len(self.rows) < 3 or r < 0.2:
            self.join()
        elif r < 0.3:
            i = int(self.rng.integers(0, len(self.rows)))
            self.kv.free_seq(self.rows[i])
            self.rows[i] = self.rows[-1]
            self.rows.pop()
        elif fork and r < 0.35:
            self.rows += self.kv.fork(self.rows[int(self.rng.integers(0, len(self.rows)))], 2)
        for sid in self.rows:
            self.kv.append(sid, int(self.rng.integers(0, 50)))
        self.kv.take_copies()

    def tables(self, pad: int = 0):
        lens = [self.kv.length(s) for s in self.rows] + [0] * pad
        width = max((n + self.P - 1) // self.P for n in lens) + 2
        bt = np.zeros((len(lens), width), np.int32)
        for r, s in enumerate(self.rows):
            pages = self.kv.block_table(s)
            bt[r, : len(pages)] = pages
        return bt, np.array(lens, np.int64)

    def token_table(self):
        """The same rows as SGLang holds them: req_to_token [129, width] int32 with the slot
        (page * page_size + offset) of every token of a request at its pool index (kept while
        it runs, taken at random; row 0 is SGLang's padding row), stale slots past each length;
        returns (req_to_token, req_pool_indices, seq_lens)."""
        live = set(self.rows)
        for sid in [s for s in self.pool_index if s not in live]:
            self.free_index.append(self.pool_index.pop(sid))
        for sid in self.rows:
            if sid not in self.pool_index:
                i = int(self.rng.integers(0, len(self.free_index)))
                self.pool_index[sid] = self.free_index.pop(i)
        lens = np.array([self.kv.length(s) for s in self.rows], np.int64)
        P, width = self.P, int(lens.max()) + 3
        table = self.rng.integers(0, self.kv.num_pages * P, (129, width)).astype(np.int32)
        for s, n in zip(self.rows, lens):
            t = np.arange(n)
            table[self.pool_index[s], :n] = np.asarray(self.kv.block_table(s))[t // P] * P + t % P
        idx = np.array([self.pool_index[s] for s in self.rows], np.int64)
        return table, idx, lens


@pytest.mark.parametrize("seed", range(6))
def test_tree_sync_equals_block_tables_and_is_incremental(seed):
    b = Batch(seed)
    sync = TreeSync(P, b.kv.num_pages, verify=True)  # verify: tree == block tables every step
    for i in range(120):
        b.step(fork=seed % 2 == 1)
        bt, lens = b.tables(pad=int(i % 7 == 0))
        sync.update(bt, lens)
    c = sync.counts
    assert c["incremental"] > c["rebuild"] > 0, c


@pytest.mark.parametrize("seed", range(8))
def test_tree_sync_random_steps_match_a_rebuild(seed):
    """Random steps over a few dozen requests (appends, page openings, joins, finished requests,
    forks with copy-on-write, rows moved by a condense or a reorder, padding rows): after every
    update the tree is valid and every row reads exactly the KV that a tree rebuilt from the
    block tables reads, holding no token that no row reads."""
    b = Batch(seed, num_pages=20000)
    rng = np.random.default_rng(seed + 100)
    sync = TreeSync(P, b.kv.num_pages)
    for _ in range(24):
        b.join()
    for i in range(150):
        b.step(fork=seed % 2 == 0)
        if rng.random() < 0.1:
            b.rows = [b.rows[j] for j in rng.permutation(len(b.rows))]
        bt, lens = b.tables(pad=int(rng.integers(0, 3)) if i % 5 == 0 else 0)
        tree = sync.update(bt, lens)
        tree.validate()
        real = np.where(lens > 0, lens, 1)
        bt_real = bt.copy()
        bt_real[lens == 0, 0] = 0  # padding rows read pad_page
        ref = PrefixTree.from_block_tables(bt_real, real, page_size=P, num_pages=b.kv.num_pages)
        got_bt, got_lens = tree.to_block_tables()
        ref_bt, ref_lens = ref.to_block_tables()
        assert got_lens == ref_lens, i
        for r, n in enumerate(ref_lens):
            m = (n + P - 1) // P
            assert got_bt[r][:m] == ref_bt[r][:m], (i, r)
        assert tree.unique_tokens() == ref.unique_tokens(), i
    c = sync.counts
    assert c["incremental"] > 3 * c["rebuild"] > 0, c


def test_tree_sync_new_batch_rebuilds_without_a_search_per_row(monkeypatch):
    """A step whose rows are all new requests (W6's draft rows, every step) rebuilds the tree
    right away: a join point is searched for a bounded number of rows only (a search per row
    made such a step of 286 rows cost ~70 ms). A few joins stay incremental."""
    R = 256
    sync = TreeSync(P, 10 * R + 10, verify=True)
    searched = []
    real_join_point = sync._join_point
    monkeypatch.setattr(sync, "_join_point",
                        lambda *a: searched.append(1) or real_join_point(*a))
    shared = [1, 2]  # two full pages under every row, then its own page
    bt = np.array([shared + [3 + r] for r in range(R)])
    sync.update(bt, np.full(R, 10))
    bt2 = np.array([shared + [3 + R + r] for r in range(R)])  # all new requests, same prefix
    sync.update(bt2, np.full(R, 10))
    assert sync.last_path == "rebuild" and not searched
    bt3 = bt2.copy()
    bt3[:4, 2] = 3 + 2 * R + np.arange(4)  # four rows finish, four new ones join in their place
    sync.update(bt3, np.full(R, 11))
    assert sync.last_path == "incremental" and len(searched) == 4


def _draft_step(b: Batch, rng, branches: int, depth: int):
    """W6's rows over b's requests: each request forks `branches` chains, each appends its
    pending token and `depth` drafts; rows are every chain at every length (one block-table
    list per chain). Returns (tables, lens, cleanup) where cleanup() keeps one chain per request
    (truncated to an accepted prefix) as the request and frees the others."""
    chains, bts, lens = [], [], []
    for i, sid in enumerate(b.rows):
        kids = b.kv.fork(sid, branches)
        n0 = b.kv.length(sid)
        for k in kids:
            for j in range(depth + 1):
                b.kv.append(k, int(rng.integers(0, 50)))
                bts.append(b.kv.block_table(k))
                lens.append(n0 + j + 1)
        chains.append((i, sid, kids, n0))
    b.kv.take_copies()
    width = max((n + b.P - 1) // b.P for n in lens) + 1
    bt = np.zeros((len(lens), width), np.int64)
    for r, (t, n) in enumerate(zip(bts, lens)):
        bt[r, :(n + b.P - 1) // b.P] = t[:(n + b.P - 1) // b.P]

    def cleanup():
        for i, sid, kids, n0 in chains:
            keep = kids[int(rng.integers(0, len(kids)))]
            for k in kids:
                if k != keep:
                    b.kv.free_seq(k)
            b.kv.free_seq(sid)
            b.kv.truncate(keep, n0 + int(rng.integers(0, depth + 1)))
            b.rows[i] = keep
    return bt, np.array(lens, np.int64), cleanup


@pytest.mark.parametrize("seed", range(6))
def test_tree_sync_join_bound_takes_the_path_the_search_takes(seed, monkeypatch):
    """TreeSync._surely_too_many_joins skips the search for moved rows only when the step would
    rebuild after it anyway: on random steps (draft trees whose rows are all new, rows
    permuted, a few or many requests replaced, forks, few or many padding rows) a TreeSync with the bound
    and one without it take the same path every step, and the bound does fire, with trees
    equal node for node."""
    b = Batch(seed, num_pages=40000)
    rng = np.random.default_rng(seed + 200)
    fast, plain = TreeSync(P, b.kv.num_pages), TreeSync(P, b.kv.num_pages)
    monkeypatch.setattr(plain, "_surely_too_many_joins", lambda *a: False)
    fired = []
    real = fast._surely_too_many_joins
    monkeypatch.setattr(fast, "_surely_too_many_joins",
                        lambda *a: fired.append(real(*a)) or fired[-1])
    for _ in range(12):
        b.join()
    for i in range(120):
        kind = rng.integers(0, 4)
        cleanup = None
        if kind == 0:  # a draft tree: every row new
            bt, lens, cleanup = _draft_step(b, rng, int(rng.integers(1, 4)), int(rng.integers(0, 6)))
        else:
            b.step(fork=kind == 1)
            if kind == 2:  # rows reordered, some replaced by new requests
                b.rows = [b.rows[j] for j in rng.permutation(len(b.rows))]
                for j in rng.choice(len(b.rows), int(rng.integers(0, len(b.rows))), replace=False):
                    b.kv.free_seq(b.rows[j])
                    b.join()
                    b.rows[j] = b.rows.pop()
            # padding rows: a few now and then, or many for a while (a graph's padded batch:
            # rows that share one last page and continue in place)
            pad = 40 if (i // 15) % 2 else int(rng.integers(0, 3)) if i % 4 == 0 else 0
            bt, lens = b.tables(pad=pad)
        a, c = fast.update(bt, lens), plain.update(bt, lens)
        assert fast.last_path == plain.last_path, (i, fast.last_path, plain.last_path)
        assert a.to_json() == c.to_json(), i
        if cleanup is not None:
            cleanup()
    assert any(fired) and not all(fired), fired
    assert fast.counts["incremental"] > 0 and fast.counts["rebuild"] > 0, fast.counts


class _CountingTree:
    """Forwards to a PrefixTree and counts how often a TreeSync step touches it: every call of one
    of its methods (a method looked up once and called per row counts per call) and every read of
    a property."""

    def __init__(self, tree):
        object.__setattr__(self, "_tree", tree)
        object.__setattr__(self, "reads", 0)

    def _count(self):
        object.__setattr__(self, "reads", self.reads + 1)

    def __getattr__(self, name):
        value = getattr(self._tree, name)
        if not callable(value):
            self._count()
            return value

        def counted(*args, **kwargs):
            self._count()
            return value(*args, **kwargs)

        return counted


def _sync_step_tree_reads(rows: int) -> list:
    """Tree reads of each of 7 incremental steps over `rows` rows that share a 16-token prompt
    and append one token per step (opening pages on some steps)."""
    P4 = 4
    bt = np.zeros((rows, 19), np.int64)
    bt[:, :4] = np.arange(1, 5)
    bt[:, 4:] = 5 + np.arange(rows * 15).reshape(rows, 15)
    lens = np.full(rows, 62, np.int64)
    sync = TreeSync(P4, int(bt.max()) + 1)
    sync.update(bt, lens)
    reads = []
    for s in range(1, 8):
        counting = _CountingTree(sync.tree)
        sync.tree = counting
        sync.update(bt, lens + s)
        assert sync.last_path == "incremental", (rows, s, sync.last_path)
        reads.append(counting.reads)
        sync.tree = counting._tree
        sync.check(*sync._normalize(bt, lens + s)[:2])
    return reads


def test_tree_sync_step_linear_in_rows():
    """An incremental step touches the C++ tree a fixed number of times, whatever the batch: a
    few whole-tree calls (each one pass), never one call per row (one update call per row scanned
    the whole tree: ~10x a rebuild at 2048 rows). Counted, not timed, so a loaded machine cannot
    fail it; the calls' own linearity is tested in C++ (TreeUpdatesBulk), the whole step's (numpy
    included) by the adversarial suite's probe "TreeSync: n rows append" (test_hostile.py)."""
    small, large = _sync_step_tree_reads(16), _sync_step_tree_reads(2048)
    assert small == large, (small, large)
    assert max(large) <= 8, large


def test_tree_sync_paths():
    sync = TreeSync(P, 64, verify=True)
    bt = np.array([[1, 2, 3, 0], [1, 2, 4, 0], [5, 6, 0, 0]])
    sync.update(bt, [10, 9, 7])
    assert sync.last_path == "rebuild"
    sync.update(bt, [10, 9, 7])
    assert sync.last_path == "unchanged"
    bt[0, 3] = 7
    sync.update(bt, [13, 10, 8])  # appends, one into a new page
    assert sync.last_path == "incremental"
    sync.update(bt[[0, 2]], [13, 8])  # row 1 finished, row 2 moved up
    assert sync.last_path == "incremental"
    sync.update([[1, 2, 3, 7], [5, 6, 0, 0], [1, 2, 9, 0]], [13, 8, 9])  # joins at a boundary
    assert sync.last_path == "incremental"
    sync.update([[1, 2, 3, 7], [5, 6, 0, 0], [1, 2, 9, 0], [8, 0, 0, 0]], [13, 8, 9, 2])
    assert sync.last_path == "rebuild"  # a new root


def test_tree_sync_partial_page_not_alone_falls_back():
    """Two rows share a partly filled page (a fork before copy-on-write); when one keeps filling
    it in place, the tree cannot grow that shared node: the step must rebuild, not put the new
    token on another page."""
    sync = TreeSync(P, 64, verify=True)
    sync.update([[1, 2], [1, 2]], [6, 6])
    sync.update([[1, 2], [1, 3]], [7, 7])  # row 1 copied page 2 into 3, row 0 kept 2
    assert sync.last_path == "rebuild"


def _caches(rng, num_pages, H, Hk, D, layout):
    """(k, v, kv_args) in `layout`: 'split', 'combined', 'packed-nhd' (vLLM LBNHC: physical
    [B, N, H, 2D]) or 'packed-hnd' (LBHNC: physical [B, H, N, 2D])."""
    k = torch.from_numpy(rng.uniform(-1, 1, (num_pages, P, Hk, D)).astype(np.float32))
    v = torch.from_numpy(rng.uniform(-1, 1, (num_pages, P, Hk, D)).astype(np.float32))
    if layout == "split":
        return k, v, (k, v)
    if layout == "combined":
        return k, v, (torch.stack([k, v], 1), None)
    packed = torch.cat([k, v], -1)  # [B, N, H, 2D]
    if layout == "packed-nhd":
        cache = packed.transpose(1, 2)  # logical [B, H, N, 2D] over physical [B, N, H, 2D]
    else:
        cache = packed.transpose(1, 2).contiguous()
    kk, vv = split_packed_kv(cache, D)
    assert torch.equal(kk, k) and torch.equal(vv, v)
    return k, v, (kk, vv)


@pytest.mark.parametrize("layout", ["split", "combined", "packed-nhd", "packed-hnd"])
def test_core_decode_matches_oracle(layout):
    rng = np.random.default_rng(3)
    H, Hk, D = 4, 2, 64
    b = Batch(7, num_pages=400)
    core = ServingCore(H, Hk, D, P, num_pages=400, verify=True)
    k, v, (kc, vc) = _caches(rng, 400, H, Hk, D, layout)
    for i in range(25):
        b.step(fork=True)
        bt, lens = b.tables(pad=int(i % 5 == 0))
        assert core.prepare(bt, lens)
        q = torch.from_numpy(rng.uniform(-1, 1, (len(lens), H, D)).astype(np.float32))
        out = torch.full_like(q, float("nan"))
        res = core.decode(q, kc, vc, out=out)
        assert res is out
        real = lens > 0
        ref, _ = numpy_oracle(q.numpy()[real], k.numpy(), v.numpy(), bt[real], lens[real])
        np.testing.assert_allclose(out.numpy()[real], ref, atol=2e-5)
        assert torch.isfinite(out).all()  # padding rows too
    assert core.sync.counts["incremental"] > 0


def hide_pages(rng, sids, bt, lens, known):
    """The host tables of an engine that keeps block tables on the device: the request of row r
    (sids[r]; rows past them are padding) shows its pages up to the count it copied when it
    joined (`known`, by sid; a request seen for the first time copies its pages now, or a fifth
    of the time never), -1 past them (pages opened since). Returns (host tables, row keys: each
    request's sid, stable across steps)."""
    host = np.full_like(bt, -1)
    for r, sid in enumerate(sids):
        if sid not in known:
            known[sid] = 0 if rng.random() < 0.2 else (int(lens[r]) + P - 1) // P
        host[r, :known[sid]] = bt[r, :known[sid]]
    keys = np.array(list(sids) + [10**6 + i for i in range(len(lens) - len(sids))], np.int64)
    return host, keys


@pytest.mark.parametrize("graph", [False, True])
def test_core_device_pages_match_oracle(graph):
    """prepare() with the pages opened since a request joined left to the device tables (-1 in
    the host tables; rows moved by condenses keep their keys): the decode reads the device
    tables' pages and matches the oracle over them; the known pages still share."""
    rng = np.random.default_rng(9)
    H, Hk, D = 4, 2, 64
    b = Batch(11, num_pages=600)
    core = ServingCore(H, Hk, D, P, num_pages=600, verify=True,
                       graph_rows=32 if graph else 0, graph_pages=64 if graph else 0)
    k, v, (kc, vc) = _caches(rng, 600, H, Hk, D, "split")
    known: dict = {}
    shared = 0
    for i in range(30):
        b.step(fork=True)
        bt, lens = b.tables(pad=int(i % 6 == 0))
        host, keys = hide_pages(rng, b.rows, bt, lens, known)
        # the device tables: this step's rows first, stale rows after them
        dev = torch.from_numpy(np.concatenate([bt, rng.integers(0, 600, (3, bt.shape[1]))])
                               .astype(np.int32))
        core.prepare(host, lens, key=len(lens) if graph else None, device_block_tables=dev,
                     row_keys=keys)
        q = torch.from_numpy(rng.uniform(-1, 1, (len(lens), H, D)).astype(np.float32))
        out = torch.full_like(q, float("nan"))
        core.decode(q, kc, vc, out=out)
        real = lens > 0
        ref, _ = numpy_oracle(q.numpy()[real], k.numpy(), v.numpy(), bt[real], lens[real])
        np.testing.assert_allclose(out.numpy()[real], ref, atol=2e-5)
        unique_tokens = core.plan.stats()["unique_kv_bytes"] // (2 * Hk * D * 2)
        shared += unique_tokens < int(lens.sum())
    assert core.counts["device_page_steps"] >= 25 and core.sync.counts["incremental"] > 0
    assert shared >= 10  # the known pages of requests under a common prompt are read once


def test_core_device_pages_errors_and_clamp():
    H, Hk, D = 4, 1, 64
    core = ServingCore(H, Hk, D, P, num_pages=64)
    bt = np.array([[1, 2, -1], [1, 3, -1]])
    lens = np.array([10, 9])
    dev = torch.tensor([[1, 2, 5], [1, 3, 6]], dtype=torch.int32)
    with pytest.raises(ValueError, match="block_tables: page id -1"):
        core.prepare(bt, lens)
    cases = [
        (dict(row_keys=[0, 1]), ValueError, "device_block_tables: row_keys name"),
        (dict(device_block_tables=dev.long()), TypeError, "device_block_tables: expected int32"),
        (dict(device_block_tables=dev[0]), ValueError, "device_block_tables: expected 2 dims"),
        (dict(device_block_tables=dev[:1]), ValueError, "device_block_tables: 1 rows"),
        (dict(device_block_tables=dev[:, :2]), ValueError, "device_block_tables: 2 columns"),
        (dict(device_block_tables=dev, row_keys=[3, 3]), ValueError, "row_keys: two rows"),
        (dict(device_block_tables=dev, row_keys=[0, -2]), ValueError, "row_keys: entry 1"),
        (dict(device_block_tables=dev, row_keys=[0]), ValueError, "row_keys: 1 entries"),
        (dict(device_block_tables=dev, row_keys=[0, 2**30]), ValueError, "row_keys: labels"),
    ]
    for kw, err, msg in cases:
        with pytest.raises(err, match=msg):
            core.prepare(bt, lens, **kw)
    with pytest.raises(ValueError, match=r"block_tables: page id 64 at \[1, 1\]"):
        core.prepare(np.array([[1, 2, -1], [1, 64, -1]]), lens, device_block_tables=dev)
    with pytest.raises(ValueError, match="device_block_tables: device pages .* num_pages"):
        ServingCore(H, Hk, D, P).prepare(bt, lens, device_block_tables=dev)
    # an id outside the cache in the device tables is read as page 0, never outside the cache
    core.prepare(bt, lens, device_block_tables=torch.tensor([[1, 2, 5], [1, 3, 640]],
                                                            dtype=torch.int32))
    assert core.plan.max_page_id < 64
    rng = np.random.default_rng(0)
    k = torch.from_numpy(rng.uniform(-1, 1, (64, P, Hk, D)).astype(np.float32))
    q = torch.from_numpy(rng.uniform(-1, 1, (2, H, D)).astype(np.float32))
    ref, _ = numpy_oracle(q.numpy(), k.numpy(), k.numpy(), np.array([[1, 2, 5], [1, 3, 0]]),
                          lens)
    np.testing.assert_allclose(core.decode(q, k, k).numpy(), ref, atol=2e-5)
    core.prefetch()
    with pytest.raises(ValueError, match="device_block_tables: the last step"):
        core.prepare_predicted()
    # Plan.resolve_pages itself: label 100 above label_base 64 (key 0, column 36 with stride 64)
    tree = PrefixTree.from_block_tables([[1, 100]], [8], page_size=P, num_pages=200)
    plan = treeattn.plan(tree, H, Hk, D)
    t = torch.tensor([[3, 4, 5]], dtype=torch.int32)
    with pytest.raises(ValueError, match="k_cache: has 64 pages but the tree reads page id 100"):
        treeattn.decode(q[:1], k, k, plan)  # no resolve yet: the cache check stops the label
    for args, err, msg in (((-1, 64, [0], t, 64), ValueError, "label_base"),
                           ((64, 64, [-1], t, 64), ValueError, "row_of_key"),
                           ((64, 64, [0], t, 64), ValueError, "table: shape"),
                           ((64, 64, [0], t.long(), 64), TypeError, "table: expected int32"),
                           ((64, 64, [0], t[0], 64), ValueError, "table: expected 2 dims"),
                           ((64, 18, [0, 0, 0], t, 0), ValueError, "num_pages")):
        with pytest.raises(err, match=msg):
            plan.resolve_pages(*args)
    # after device pages, a step without them still gets its page ids checked against num_pages
    with pytest.raises(ValueError, match=r"block_tables: page id 70 at \[0, 1\]"):
        core.prepare(np.array([[1, 70, 4], [1, 3, 6]]), lens)
    # a -1 before a known page: the row's pages from its first -1 on are device pages
    core.prepare(np.array([[1, -1, 5], [1, 3, -1]]), lens, device_block_tables=dev)
    ref, _ = numpy_oracle(q.numpy(), k.numpy(), k.numpy(), dev.numpy(), lens)
    np.testing.assert_allclose(core.decode(q, k, k).numpy(), ref, atol=2e-5)
    with pytest.raises(ValueError, match="key_stride"):
        plan.resolve_pages(64, 0, [0], t, 64)
    with pytest.raises(ValueError, match="row_of_key: key 2 names row 5"):
        plan.resolve_pages(64, 18, [-1, -1, 5], t, 64)
    with pytest.raises(ValueError, match="plan: its page ids from 64 on are device-page labels"):
        treeattn.decode(q[:1], k, k, plan)  # refused once a resolve named the labels
    assert plan.resolve_pages(64, 18, [-1, -1, 0], t, 64) is plan  # key 2, column 0: page 3
    assert plan.max_page_id == 3
    plan.check()  # checks the labelled state the resolve came from
    ref, _ = numpy_oracle(q[:1].numpy(), k.numpy(), k.numpy(), np.array([[1, 3]]), [8])
    np.testing.assert_allclose(treeattn.decode(q[:1], k, k, plan).numpy(), ref, atol=2e-5)


def test_host_rows_copies_poll_and_forget():
    """HostRows on CPU tensors: a copy is the table's rows at request() time (never its storage:
    later writes to the table do not reach it), lands at the next poll(), and a forget() after
    the request drops it (the slot's new request must not read the old row)."""
    from treeattn.serving import HostRows

    hr = HostRows()
    table = torch.tensor([[1, 2, 3, 0], [4, 5, 6, 7], [8, 9, 0, 0]], dtype=torch.int32)
    hr.request(table, np.array([0, 1]), np.array([5, 9]), np.array([3, 4]))
    assert hr.pending_slots() == {5, 9} and hr.rows_copied == 2
    table.fill_(-3)  # the engine's next step rewrites its table
    hr.forget([9])
    hr.poll()
    assert list(hr.rows) == [5] and hr.rows[5].tolist() == [1, 2, 3]
    got = hr.table(np.array([5, 9, 2]), 4)
    assert got.tolist() == [[1, 2, 3, -1], [-1] * 4, [-1] * 4]


def test_core_prefetch_used_and_exact():
    rng = np.random.default_rng(5)
    H, Hk, D = 4, 1, 64
    core = ServingCore(H, Hk, D, P, num_pages=64, verify=True)
    k, v, (kc, vc) = _caches(rng, 64, H, Hk, D, "split")
    bt = np.array([[1, 2, 3, 0], [1, 2, 4, 0], [5, 6, 7, 0], [0, 0, 0, 0]])
    lens = np.array([9, 9, 9, 0])
    core.prepare(bt, lens)
    assert core.prefetch()  # every real row stays in its page
    lens2 = np.array([10, 10, 10, 0])
    core.prepare(bt, lens2)
    assert core.counts["planned_ahead"] == 1
    q = torch.from_numpy(rng.uniform(-1, 1, (4, H, D)).astype(np.float32))
    out = core.decode(q, kc, vc)
    ref, _ = numpy_oracle(q.numpy()[:3], k.numpy(), v.numpy(), bt[:3], lens2[:3])
    np.testing.assert_allclose(out.numpy()[:3], ref, atol=2e-5)
    core.prefetch()
    core.prepare(bt, np.array([11, 10, 10, 0]))  # not the prediction: planned normally
    assert core.counts["planned_ahead"] == 1
    assert core.sync.last_path == "incremental"


def test_core_prepare_predicted_takes_the_prediction_without_tables():
    """prepare_predicted() installs prefetch()'s plan without the block tables (the engine's fast
    path); the result decodes like prepare() with the predicted tables, and it refuses (None)
    when nothing is predicted."""
    rng = np.random.default_rng(6)
    H, Hk, D = 4, 1, 64
    core = ServingCore(H, Hk, D, P, num_pages=64, verify=True)
    k, v, (kc, vc) = _caches(rng, 64, H, Hk, D, "split")
    bt = np.array([[1, 2, 3, 0], [1, 2, 4, 0], [5, 6, 7, 0], [0, 0, 0, 0]])
    lens = np.array([9, 9, 9, 0])
    assert core.prepare_predicted() is None  # no step yet, nothing predicted
    core.prepare(bt, lens)
    assert core.predicted_lens is None
    assert core.prefetch()
    np.testing.assert_array_equal(core.predicted_lens, [10, 10, 10, 0])
    assert core.prepare_predicted() is True
    assert core.counts["planned_ahead"] == 1 and core.predicted_lens is None
    assert core.prepare_predicted() is None  # the prediction is used once
    core.sync.check_tables(bt, np.array([10, 10, 10, 0]))
    q = torch.from_numpy(rng.uniform(-1, 1, (4, H, D)).astype(np.float32))
    out = core.decode(q, kc, vc)
    ref, _ = numpy_oracle(q.numpy()[:3], k.numpy(), v.numpy(), bt[:3], np.array([10, 10, 10]))
    np.testing.assert_allclose(out.numpy()[:3], ref, atol=2e-5)
    # the next step goes on from the predicted state as if prepare() had been given the tables
    core.prepare(bt, np.array([11, 11, 11, 0]))
    assert core.sync.last_path == "incremental"


def test_graph_key_plan_follows_the_synced_tree(monkeypatch):
    """prepare()'s CUDA path (one persistent plan per graph key, allocated once, then updated in
    place) run on the CPU with the device upload stubbed out: the key's plan is tied to the synced
    tree, so decode refuses it once that tree changes, and it decodes like the oracle after every
    prepare (the plan of a new key, too, is made from the synced tree, not from a copy)."""
    monkeypatch.setattr(treeattn.Plan, "to_device", lambda self, device=None, stream=None: self)
    rng = np.random.default_rng(11)
    H, Hk, D = 4, 2, 64
    core = ServingCore(H, Hk, D, P, num_pages=16, device="cuda")
    k, v, (kc, vc) = _caches(rng, 16, H, Hk, D, "split")
    bt = np.array([[1, 2, 3], [1, 2, 4]])
    plans = []
    for lens in ([6, 5], [7, 6], [9, 7]):
        lens = np.array(lens)
        fresh = not core.prepare(bt, lens, key=2)
        assert fresh == (not plans)  # allocated on the first step, updated in place after
        plans.append(core.plan)
        q = torch.from_numpy(rng.uniform(-1, 1, (2, H, D)).astype(np.float32))
        ref, _ = numpy_oracle(q.numpy(), k.numpy(), v.numpy(), bt, lens)
        np.testing.assert_allclose(core.decode(q, kc, vc).numpy(), ref, atol=2e-5)
    assert all(p is plans[0] for p in plans)
    for steps in (1, 2):  # the key's plan as allocated, and as updated in place
        core = ServingCore(H, Hk, D, P, num_pages=16, device="cuda")
        for lens in ([6, 5], [7, 6])[:steps]:
            core.prepare(bt, np.array(lens), key=2)
        core.sync.tree.append_tokens(0, 1)
        with pytest.raises(ValueError, match="plan: stale"):
            core.decode(q, kc, vc)


def test_errors_name_the_argument():
    sync = TreeSync(P, 16)
    with pytest.raises(ValueError, match="seq_lens"):
        sync.update([[1, 2]], [-1])
    with pytest.raises(ValueError, match="block_tables"):
        sync.update([[1, 2]], [9])  # needs 3 pages
    with pytest.raises(ValueError, match="block_tables"):
        sync.update([[1, 20]], [8])  # page out of range
    with pytest.raises(ValueError, match="block_tables"):
        sync.update([[1, -2]], [8])
    with pytest.raises(ValueError, match="block_tables"):
        sync.update([[1, 2], [3, 4]], [8])
    with pytest.raises(TypeError, match="block_tables"):
        sync.update(np.zeros((1, 2), np.float32), [1])
    with pytest.raises(TypeError, match="block_tables"):
        sync.update(torch.zeros((1, 2), dtype=torch.int32, device="meta"), [1])
    with pytest.raises(ValueError, match="page_size"):
        TreeSync(0)
    with pytest.raises(ValueError, match="planner"):
        ServingCore(4, 2, 64, P, planner="nope")
    with pytest.raises(ValueError, match="num_qo_heads"):
        ServingCore(3, 2, 64, P)
    core = ServingCore(4, 2, 64, P, num_pages=16)
    with pytest.raises(ValueError, match="plan"):
        core.decode(torch.zeros(1, 4, 64), torch.zeros(16, P, 2, 64), torch.zeros(16, P, 2, 64))
    with pytest.raises(ValueError, match="kv_cache"):
        split_packed_kv(torch.zeros(4, 2, P, 16), 16)


def test_page_after_two_prefixes_is_refused_naming_block_tables():
    """A content-deduplicating prefix cache can list one page after two different prefixes; the
    tree cannot represent that, and the error names the block tables."""
    sync = TreeSync(P, 16)
    with pytest.raises(ValueError, match="block_tables: no prefix tree"):
        sync.update([[1, 2, 8], [3, 4, 8]], [10, 10])


def caterpillar(rows: int):
    """Block tables whose row k shares the first k pages of the next rows and owns one more: a
    chain of one-page nodes, row k at depth k + 1 (node plans of many rows per query)."""
    bt = np.zeros((rows, rows), np.int64)
    for r in range(rows):
        bt[r, :r] = np.arange(1, r + 1)
        bt[r, r] = 100 + r
    return bt, np.array([P * r + 3 for r in range(rows)], np.int64)


def test_graph_bound_shares_one_plan_and_falls_back_to_the_query_plan(monkeypatch):
    """With a graph bound every graph key runs one plan laid out for the bound (CUDA path on the
    CPU, the upload stubbed out): allocated at the first graph step only, launched with the grids
    the bound reserves for the step's rows; a step whose tree plan exceeds them (the node planner
    on 16 rows of a chain: 136 rows against the 8 a query the bound keeps) runs the query
    planner's plan in it and decodes like the oracle; steps outside the bound and a changed bound
    are refused naming the argument; eager steps (key None) keep their own plan."""
    monkeypatch.setattr(treeattn.Plan, "to_device", lambda self, device=None, stream=None: self)
    rng = np.random.default_rng(12)
    H, Hk, D = 4, 2, 64
    core = ServingCore(H, Hk, D, P, num_pages=128, device="cuda", planner="node", headroom=1.0,
                       graph_rows=16, graph_pages=16)
    k, v, (kc, vc) = _caches(rng, 128, H, Hk, D, "split")
    steps = [(np.array([[1, 2, 3], [1, 2, 4]]), np.array([10, 9]), 2, False),
             caterpillar(16) + (16, True),
             (np.array([[1, 2, 3], [1, 2, 4]]), np.array([11, 10]), 2, False)]
    for i, (bt, lens, key, fallback) in enumerate(steps):
        before = core.counts["graph_fallback"]
        assert core.prepare(bt, lens, key=key) == (i > 0)  # allocated at the first graph step
        assert core.plan is core.graph_plan
        assert core.counts["graph_fallback"] - before == int(fallback)
        assert (core.plan.chosen_planner == "query") == fallback, core.plan.chosen_planner
        q = torch.from_numpy(rng.uniform(-1, 1, (len(lens), H, D)).astype(np.float32))
        ref, _ = numpy_oracle(q.numpy(), k.numpy(), v.numpy(), bt, lens)
        np.testing.assert_allclose(core.decode(q, kc, vc).numpy(), ref, atol=2e-5)
    assert core.plans == {}  # no per-key plans
    layout = core.graph_plan.layout()
    assert layout["queries"] == 16 and layout["rows"] == 8 * 16, layout
    version = core.tree.version
    with pytest.raises(ValueError, match="block_tables: a graph step of 17 rows"):
        core.prepare(np.arange(1, 35).reshape(17, 2), np.full(17, 8), key=17)
    assert core.tree.version == version  # refused before the tree changed
    with pytest.raises(ValueError, match="outside the graph bound"):
        core.prepare(np.arange(1, 18)[None], np.array([4 * 17]), key=1)
    with pytest.raises(ValueError, match="graph_rows"):
        core.set_graph_bound(8, 16)
    core.set_graph_bound(16, 16)  # the same bound: fine
    eager = core.prepare(np.array([[1, 2, 3], [1, 2, 4]]), np.array([12, 11]))
    assert eager and core.plan is core.plans[None] and core.plan is not core.graph_plan
    for bad, name in (((0, 3), "graph_rows"), ((4, 0), "graph_pages"), ((4.0, 3), "graph_rows")):
        with pytest.raises((TypeError, ValueError), match=name):
            ServingCore(H, Hk, D, P, graph_rows=bad[0], graph_pages=bad[1])
    small = treeattn.plan(PrefixTree.from_levels("N=1 C=4"), 4, 2, 64)
    with pytest.raises(ValueError, match="rows"):
        small.reserve(0, 3)
    items, queries = small.graph_caps(4, 3, "h100")  # 4 rows x 2 packed: no grouped items
    assert queries == 4 and items[0] >= 8 and items[1:] == [0, 0], items
    with pytest.raises(ValueError, match="class_items"):
        small.set_launch_caps([1, 2], 3)
    with pytest.raises((TypeError, ValueError), match="queries"):
        small.set_launch_caps([1, 0, 0], "x")
    assert small.set_launch_caps() is small  # reset
