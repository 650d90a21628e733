"""CPU tests of treeattn.engine (tiny model, fp32): KV cache manager invariants, model load/save,
teacher-forced logits of every workload W0-W6 with the treeattn CPU executor against the sdpa
reference, a branch alone vs inside its tree, prefix reuse, and the bench CLI. Skipped without
torch."""

from __future__ import annotations

import json
import os
import random

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from treeattn.engine import Engine, KVCache, Model, ModelConfig, workloads  # noqa: E402
from treeattn.engine import backends  # noqa: E402
from treeattn.engine.check import kl_rows, teacher_forced_kl  # noqa: E402

backends.VERIFY_TREE = True  # incremental trees checked against the block tables every step

torch.set_num_threads(min(2, torch.get_num_threads()))
KL_MAX = 1e-3


@pytest.fixture(scope="module")
def tiny():
    return Model.random(ModelConfig.preset("tiny"), seed=1)


# ---- KV cache manager


def test_kv_prefix_sharing_fork_cow_free():
    kv = KVCache(1, 64, 4, 1, 2, allocate=False)
    a, hit = kv.new_seq(list(range(10)))
    assert hit == 0
    for t in range(10):
        kv.append(a, t)
    assert len(kv.block_table(a)) == 3  # 4 + 4 + 2
    # same first 8 tokens: two full pages shared, the rest computed
    b, hit = kv.new_seq(list(range(8)) + [50, 51, 52])
    assert hit == 8 and kv.block_table(b)[:2] == kv.block_table(a)[:2]
    for t in [50, 51, 52]:
        kv.append(b, t)
    assert kv.ref[kv.block_table(a)[0]] == 2
    # a prompt that is exactly cached still computes its last token (hit only 4)
    c, hit = kv.new_seq(list(range(8)))
    assert hit == 4
    kv.free_seq(c)
    # fork shares the partial page; the first append copies it (deferred copy of 2 slots)
    (f,) = kv.fork(a, 1)
    last = kv.block_table(a)[-1]
    assert kv.ref[last] == 2
    kv.append(f, 99)
    copies = kv.take_copies()
    newp = kv.block_table(f)[-1]
    assert newp != last and copies == [(last * 4 + 0, newp * 4 + 0), (last * 4 + 1, newp * 4 + 1)]
    assert kv.ref[last] == 1
    kv.append(a, 98)  # a owns its page again: written in place
    assert kv.take_copies() == [] and kv.block_table(a)[-1] == last
    kv.check()
    for s in (a, b, f):
        kv.free_seq(s)
    kv.check()
    assert kv.pages_in_use == 0
    # full pages stay cached after free and are hit again
    d, hit = kv.new_seq(list(range(10)))
    assert hit == 8
    kv.free_seq(d)
    kv.check()


def test_kv_copy_source_not_reused_in_the_same_step(tiny):
    """A page whose last holder copies it away (copy-on-write of a hashed partial page, after a
    truncation) stays out of the pool until the step's copies ran: another row of the same step
    must not be handed it, or its new K/V overwrite what the copy reads. With one page free such
    a step needs two and is refused, nothing changed; with two it matches an engine with room."""

    def setup(num_pages, free_left):
        eng = Engine(tiny, "sdpa", page_size=4, num_pages=num_pages)
        a, _ = eng.prefill([5, 6, 7, 8, 9, 10, 11, 12])  # two full pages, both hashed
        eng.truncate(a, 6)  # a's last page: hashed, partial, a its only holder
        b, _ = eng.prefill([20, 21, 22, 23])  # b's next token opens a page
        while eng.cache.num_free() > free_left:
            eng.prefill([30 + eng.cache._next_id, 1, 2, 3])
        return eng, a, b

    ref, a, b = setup(64, 40)
    want = ref.decode([(a, 13), (b, 24)])
    eng, a, b = setup(9, 1)
    source = eng.cache.block_table(a)[-1]
    with pytest.raises(MemoryError, match="rows"):
        eng.decode([(a, 13), (b, 24)])
    assert eng.length(a) == 6 and eng.length(b) == 4
    eng.cache.check()
    eng, a, b = setup(10, 2)
    source = eng.cache.block_table(a)[-1]
    got = eng.decode([(a, 13), (b, 24)])
    assert source not in eng.cache.block_table(b)
    assert torch.allclose(got, want, rtol=0, atol=1e-5), (got - want).abs().max()
    eng.cache.check()
    assert source in eng.cache.cached  # back in the pool once the copies ran


def test_kv_cow_chain_resolved_to_original_source():
    kv = KVCache(1, 32, 4, 1, 2, allocate=False)
    a, _ = kv.new_seq([1, 2, 3, 4, 5, 6])
    for t in [1, 2, 3, 4, 5, 6]:
        kv.append(a, t)
    kv.take_copies()
    (b,) = kv.fork(a, 1)
    kv.append(b, 7)  # b copies a's partial page
    (c,) = kv.fork(b, 1)
    kv.append(c, 8)  # c copies b's page, whose slots come from a's page this step
    pa = kv.block_table(a)[-1]
    cps = kv.take_copies()
    srcs = {s for s, _ in cps}
    assert all(s // 4 == pa or s // 4 == kv.block_table(b)[-1] for s in srcs)
    dsts = {d for _, d in cps}
    assert not (srcs & dsts), "a copy reads a slot another copy of the same step writes"


def _kv_random_op(kv, rng, live, prompts, cuts) -> bool:
    """One random change of kv's sequences (`live`, updated): r = rng.random() below cuts[0] (or
    nothing live) a new sequence from a shared prompt, below cuts[1] a fork, below cuts[2] a
    finished sequence, below cuts[3] a truncation; False (nothing done) above them."""
    r = rng.random()
    if r < cuts[0] or not live:
        pr = rng.choice(prompts) + [rng.randrange(50) for _ in range(rng.randrange(3))]
        s, hit = kv.new_seq(pr)
        for t in pr[hit:]:
            kv.append(s, t)
        live.append(s)
    elif r < cuts[1]:
        live += kv.fork(rng.choice(live), rng.randrange(1, 3))
    elif r < cuts[2]:
        kv.free_seq(live.pop(rng.randrange(len(live))))
    elif r < cuts[3]:
        s = rng.choice(live)
        kv.truncate(s, rng.randrange(1, kv.length(s) + 1))
    else:
        return False
    return True


def test_kv_random_ops_no_leak_no_page_twice():
    rng = random.Random(12345)
    for P in (1, 3, 16):
        kv = KVCache(1, 4000, P, 1, 2, allocate=False)
        live = []
        prompts = [[rng.randrange(50) for _ in range(rng.randrange(1, 40))] for _ in range(6)]
        for op in range(1000):
            if not _kv_random_op(kv, rng, live, prompts, (0.25, 0.45, 0.6, 0.7)):
                for s in rng.sample(live, min(len(live), 4)):
                    kv.append(s, rng.randrange(50))
            kv.take_copies()
            if op % 10 == 0 or op > 990:
                kv.check()
        for s in live:
            kv.free_seq(s)
        kv.check()
        assert kv.pages_in_use == 0
        assert kv.num_free() == kv.num_pages - 1


def test_kv_append_rows_equals_append_per_row():
    """append_rows (the engine's step: its fast path appends into a private partial page) leaves
    the cache exactly as append() row by row, with the same positions, slots and tables, on
    random steps of forks (copy-on-write), shared prompts (hashed pages), truncation, a
    sequence on several rows (draft chains) and pages filling up, at page sizes 1 to 16."""
    import copy

    rng = random.Random(99)
    for P in (1, 2, 5, 16):
        a = KVCache(1, 3000, P, 1, 2, allocate=False)
        prompts = [[rng.randrange(50) for _ in range(rng.randrange(1, 40))] for _ in range(4)]
        live = []
        for op in range(300):
            if not _kv_random_op(a, rng, live, prompts, (0.2, 0.35, 0.45, 0.55)):
                # a step: some sequences on several rows, in random order
                sids = [s for s in rng.sample(live, min(len(live), 6))
                        for _ in range(rng.choice((1, 1, 3)))]
                rng.shuffle(sids)
                toks = [rng.randrange(50) for _ in sids]
                b = copy.deepcopy(a)
                want = [(b.length(s), b.append(s, t)) for s, t in zip(sids, toks)]
                pos, slots, tables = a.append_rows(sids, toks)
                assert list(zip(pos, slots)) == want
                assert [t is a.block_table(s) for s, t in zip(sids, tables)] == [True] * len(sids)
                for k in ("ref", "free", "cached", "page_hash", "hash_page", "pending_copies",
                          "held", "_copied_from", "stats"):
                    assert getattr(a, k) == getattr(b, k), (P, op, k)
                assert {i: vars(q) for i, q in a.seqs.items()} == {
                    i: vars(q) for i, q in b.seqs.items()}
            a.take_copies()
        a.check()


def test_kv_page_size_bounds():
    with pytest.raises(ValueError, match="page_size"):
        KVCache(1, 8, 0, 1, 2, allocate=False)
    with pytest.raises(ValueError, match="page_size"):
        KVCache(1, 8, 257, 1, 2, allocate=False)
    KVCache(1, 8, 256, 1, 2, allocate=False)


# ---- model


@pytest.mark.parametrize("preset", ["tiny", "tiny-qwen2"])
def test_safetensors_roundtrip(tmp_path, preset):
    m = Model.random(ModelConfig.preset(preset), seed=3)
    m.save(str(tmp_path))
    cfg = json.load(open(tmp_path / "config.json"))
    assert cfg["model_type"] == ("qwen2" if "qwen" in preset else "llama")
    m2 = Model.load(str(tmp_path))
    assert m2.config == m.config
    # The round trip's contract is the bits of every weight.
    assert sorted(m2.weights) == sorted(m.weights)
    for k, v in m.weights.items():
        assert m2.weights[k].dtype == v.dtype and torch.equal(m2.weights[k], v), k
    # The logits are not bitwise: safetensors returns memory-mapped tensors whose alignment can
    # send torch's CPU GEMM down another (equally correct) reduction order. fp32 rounding over
    # this model's depth stays far below 1e-5 relative to the logits' scale.
    prompt = list(range(1, 30))
    e1, e2 = Engine(m, "sdpa", max_tokens=256), Engine(m2, "sdpa", max_tokens=256)
    _, l1 = e1.prefill(prompt)
    _, l2 = e2.prefill(prompt)
    assert torch.isfinite(l1).all() and torch.isfinite(l2).all()
    scale = l1.abs().max().item()
    assert (l1 - l2).abs().max().item() <= 1e-5 * max(scale, 1.0)


def test_decode_matches_prefill_and_prefix_reuse(tiny):
    """Token-by-token decode, a prefill with a cached prefix and a plain prefill agree."""
    prompt = list(range(3, 40))
    full = Engine(tiny, "sdpa", page_size=8, max_tokens=512)
    _, ref = full.prefill(prompt)
    for backend in ("sdpa", "treeattn"):
        eng = Engine(tiny, backend, page_size=8, max_tokens=512)
        sid, _ = eng.prefill(prompt[:5])
        for t in prompt[5:-1]:
            eng.decode([(sid, t)])
        got = eng.decode([(sid, prompt[-1])])[0]
        assert torch.allclose(got, ref, atol=1e-4), backend
        # second prompt sharing 32 tokens: 4 full pages reused, same logits
        s2, l2 = eng.prefill(prompt)
        assert eng.cache.stats["hit_tokens"] >= 32
        assert torch.allclose(l2, ref, atol=1e-4)


@pytest.mark.parametrize("preset", ["tiny", "tiny-qwen2", "tiny-llama3.1"])
def test_hf_transformers_logits(tmp_path, preset):
    """Same weights in HF transformers (LlamaForCausalLM / Qwen2ForCausalLM): same logits."""
    transformers = pytest.importorskip("transformers")
    if preset == "tiny-llama3.1":  # llama3 RoPE scaling, wavelengths on both sides of the band
        cfg = ModelConfig.preset("tiny", rope_theta=500000.0, rope_scaling=(8.0, 1.0, 4.0, 64))
    else:
        cfg = ModelConfig.preset(preset)
    tiny = Model.random(cfg, seed=4)
    tiny.save(str(tmp_path))
    hf = transformers.AutoModelForCausalLM.from_pretrained(str(tmp_path)).float().eval()
    prompt = list(range(5, 45))
    with torch.no_grad():
        want = hf(torch.tensor([prompt])).logits[0].float()
    eng = Engine(tiny, "treeattn", max_tokens=256)
    sid, last = eng.prefill(prompt[:20])
    assert torch.allclose(last, want[19], atol=2e-3, rtol=1e-3)
    got = [eng.decode([(sid, t)])[0] for t in prompt[20:]]
    assert torch.allclose(torch.stack(got), want[20:], atol=2e-3, rtol=1e-3)


# ---- workloads, teacher forced


@pytest.mark.parametrize("scale", sorted(workloads.PRESETS))
def test_workload_presets_are_valid_sizes(scale):
    """Every scale's sizes are what the workloads take ('gpu-test', which tests/python/
    test_engine_gpu.py runs, is checked here too, on any machine)."""
    table = workloads.PRESETS[scale]
    assert list(table) == workloads.WORKLOADS
    for wl, sizes in table.items():
        assert workloads.check_params(wl, sizes) == sizes


@pytest.mark.parametrize("wl,backend", [(w, "treeattn") for w in workloads.WORKLOADS] +
                         [(w, "treeattn-query") for w in ("W1", "W3", "W6")])
def test_workload_teacher_forced_kl(tiny, wl, backend):
    params = workloads.PRESETS["cpu"][wl]
    kls = teacher_forced_kl(tiny, wl, params, backend, page_size=4)
    assert len(kls) >= 3
    assert max(kls) < KL_MAX, f"{wl} {backend}: KL per step {kls}"


@pytest.mark.parametrize("wl,backend", [("W1", "treeattn"), ("W4", "treeattn"),
                                        ("W5", "sdpa"), ("W6", "treeattn")])
def test_workload_emulated_graphs(tiny, wl, backend):
    """cuda_graphs=True on the CPU: padded rows on the scratch page, static buffers, plans
    refreshed with plan.update(), re-planned when they no longer fit."""
    kls = teacher_forced_kl(tiny, wl, workloads.PRESETS["cpu"][wl], backend, page_size=4,
                            cuda_graphs=True)
    assert max(kls) < KL_MAX, kls


@pytest.mark.parametrize("page_size", [1, 7, 256])
def test_workload_page_sizes(tiny, page_size):
    kls = teacher_forced_kl(tiny, "W3", workloads.PRESETS["cpu"]["W3"], "treeattn",
                            page_size=page_size)
    assert max(kls) < KL_MAX


def test_sdpa_engine_matches_reference_exactly(tiny):
    kls = teacher_forced_kl(tiny, "W4", workloads.PRESETS["cpu"]["W4"], "sdpa", page_size=4)
    assert max(kls) < 1e-9


def test_branch_alone_equals_branch_in_tree(tiny):
    """W1-style: 4 branches from one prompt; branch 2 decoded alone gives the same logits."""
    prompt = list(range(7, 40))
    for backend in ("sdpa", "treeattn"):
        eng = Engine(tiny, backend, page_size=4, max_tokens=1024, seed=5)
        sid, lg = eng.prefill(prompt)
        seqs = [sid] + eng.fork(sid, 3)
        toks = eng.sample(lg[None].expand(4, -1), 1.0)
        stream, tree_logits = [], []
        for _ in range(10):
            out = eng.decode(list(zip(seqs, toks)))
            stream.append(toks[2])
            tree_logits.append(out[2])
            toks = eng.sample(out, 1.0)
        alone = Engine(tiny, backend, page_size=4, max_tokens=1024)
        s, _ = alone.prefill(prompt)
        for t, want in zip(stream, tree_logits):
            got = alone.decode([(s, t)])[0]
            assert torch.allclose(got, want, atol=1e-5), backend
        eng.cache.check()


def test_speculative_rows_attend_their_own_prefix(tiny):
    """W6 rows: a draft chain decoded as one step equals the same tokens decoded one by one."""
    prompt = list(range(11, 30))
    eng = Engine(tiny, "treeattn", page_size=4, max_tokens=1024)
    sid, _ = eng.prefill(prompt)
    a, b = eng.fork(sid, 2)
    chain_a, chain_b = [5, 6, 7, 8], [9, 10, 11]
    out = eng.decode([(a, x) for x in chain_a] + [(b, x) for x in chain_b])
    for chain, rows in ((chain_a, out[:4]), (chain_b, out[4:])):
        ref = Engine(tiny, "sdpa", page_size=4, max_tokens=1024)
        s, _ = ref.prefill(prompt)
        for x, want in zip(chain, rows):
            assert torch.allclose(ref.decode([(s, x)])[0], want, atol=1e-5)


def test_kl_rows():
    a = torch.randn(3, 10)
    assert float(kl_rows(a, a).abs().max()) < 1e-12
    assert float(kl_rows(a, a + torch.randn(3, 10)).min()) > 0


# ---- CLI


def test_bench_cli_cpu(tmp_path, capsys):
    from treeattn.engine.cli import main

    js, png = tmp_path / "b.json", tmp_path / "b.png"
    rc = main(["bench", "--device", "cpu", "--workloads", "W6",
               "--backends", "treeattn,sdpa,none,flashinfer", "--set", "W6.new=4",
               "--json", str(js), "--png", str(png), "--no-progress"])
    assert rc == 0
    d = json.load(open(js))
    # timings from a CPU say so: on stderr (before and after the table) and in the JSON
    err = capsys.readouterr().err
    assert d["timing_device"] == "cpu" and "not a GPU" in d["warning"]
    assert err.count("WARNING: " + d["warning"]) == 2, err
    main(["plot", str(js)])
    assert "WARNING: " + d["warning"] in capsys.readouterr().err
    recs = {(r["workload"], r["backend"]): r for r in d["records"]}
    assert recs[("W6", "treeattn")]["decode_tok_s"] > 0
    assert recs[("W6", "none")]["plan_ms_per_step"] < 0.1
    assert "error" in recs[("W6", "flashinfer")]  # no CUDA here
    assert d["tree_update_probe"]["from_block_tables_ms"] > 0
    assert os.path.getsize(png) > 1000


def test_incremental_tree_updates_used_and_exact(tiny):
    """Steady-state steps update the previous tree (append_tokens) instead of rebuilding it;
    VERIFY_TREE compares every incremental tree with the block tables."""
    eng = Engine(tiny, "treeattn", page_size=4, max_tokens=2048, max_seqs=8)
    workloads.run(eng, "W1", dict(n=4, prompt=37, new=12))
    workloads.run(eng, "W5", workloads.PRESETS["cpu"]["W5"])
    up = eng.backend.tree_updates
    assert up["incremental"] > 0 and up["planned_ahead"] > 0, up
    assert up["incremental"] + up["planned_ahead"] > up["rebuild"] > 0, up
    eng.cache.check()


def test_treeattn_backend_tables_read_shared_lists_once():
    """TreeAttnBackend._tables reads each distinct block-table list once (rows of one sequence
    hold the same list): on random steps (draft chains, forks, padding rows, lists longer than
    a row needs) it equals the tables built row by row, 0 past each row's pages."""
    rng = random.Random(7)
    for _ in range(200):
        P = rng.randint(1, 9)
        lists = [[rng.randint(0, 500) for _ in range(rng.randint(1, 12))]
                 for _ in range(rng.randint(1, 6))]
        pad = [0]
        bts, lens, seqs = [], [], []
        share = rng.choice((0.0, 0.8))  # 0: every row its own list
        for _ in range(rng.randint(1, 40)):
            if rng.random() < 0.15:
                bts.append(pad if share else [0])
                lens.append(1)
                seqs.append(-1)
                continue
            k = rng.randrange(len(lists))
            t = lists[k] if rng.random() < share else list(lists[k])  # same list or a copy
            bts.append(t)
            lens.append(rng.randint(1, len(t) * P))
            seqs.append(k)
        meta = backends.StepMeta(bts, lens, P, 600, seqs if rng.random() < 0.8 else None)
        bt, got_lens = backends.TreeAttnBackend._tables(meta)
        want = np.zeros((len(bts), max(-(-n // P) for n in lens)), np.int64)
        for r, (t, n) in enumerate(zip(bts, lens)):
            want[r, :-(-n // P)] = t[:-(-n // P)]
        assert bt.dtype == np.int64 and np.array_equal(bt, want)
        want_lens = [0 if meta.row_seqs is not None and s < 0 else n for n, s in zip(lens, seqs)]
        assert got_lens.tolist() == want_lens


def test_scheduler_continuous_batching_matches_requests_alone(tiny):
    """Requests joining and leaving a running batch (greedy) produce what each produces alone;
    every page comes back."""
    from treeattn.engine import Request, Scheduler

    rng = np.random.default_rng(2)
    system = rng.integers(1, 256, 24).tolist()
    reqs = [Request(system + rng.integers(1, 256, 3 + i).tolist(), max_new=4 + i % 3,
                    arrival=(0, 0, 2, 3, 9)[i]) for i in range(5)]
    eng = Engine(tiny, "treeattn", page_size=4, max_tokens=1024)
    sched = Scheduler(eng, max_batch=3)
    for r in reqs:
        sched.submit(r)
    done = sched.run()
    assert len(done) == 5 and all(len(r.output) == r.max_new for r in reqs)
    assert eng.cache.stats["hit_tokens"] >= 4 * 24 // 4 * 4
    eng.cache.check()
    assert eng.cache.pages_in_use == 0
    for r in reqs:
        alone = Engine(tiny, "sdpa", page_size=4, max_tokens=1024)
        s = Scheduler(alone)
        s.submit(Request(r.prompt, r.max_new))
        (got,) = s.run()
        assert got.output == r.output


def test_bench_dry_run_full_size_host_side(tmp_path):
    """--dry-run: the Llama-3-8B config without weights, host side only (trees, plans)."""
    from treeattn.engine.cli import main

    js = tmp_path / "d.json"
    rc = main(["bench", "--dry-run", "--workloads", "W1", "--backends", "treeattn",
               "--set", "W1.n=16", "--set", "W1.prompt=1024", "--set", "W1.new=12",
               "--json", str(js), "--no-progress"])
    assert rc == 0
    d = json.load(open(js))
    (rec,) = d["records"]
    assert rec["rows_mean"] == 16 and rec["plan_ms_per_step"] > 0
    assert d["timing_device"] == "cpu" and "no model ran" in d["warning"]


class _FakeFlashInferDecode:
    """BatchDecodeWithPagedKVCacheWrapper's contract (NHD, CSR page table, last_page_len) in
    torch, to check the engine's index building on the CPU (the real one runs on the GPU)."""

    def __init__(self, ws, layout, use_cuda_graph=False, use_tensor_cores=False,
                 paged_kv_indptr_buffer=None, paged_kv_indices_buffer=None,
                 paged_kv_last_page_len_buffer=None):
        assert layout == "NHD"
        self.graph = use_cuda_graph
        self.bufs = (paged_kv_indptr_buffer, paged_kv_indices_buffer,
                     paged_kv_last_page_len_buffer)

    def plan(self, indptr, indices, last_page_len, num_qo_heads, num_kv_heads, head_dim,
             page_size, pos_encoding_mode="NONE", q_data_type=None, kv_data_type=None):
        assert pos_encoding_mode == "NONE" and indptr.dtype == torch.int32
        if self.graph:  # fixed buffers: same batch size, indices within capacity
            assert indptr.shape == self.bufs[0].shape and indices.numel() <= self.bufs[1].numel()
        self.meta = (indptr.tolist(), indices.tolist(), last_page_len.tolist(), page_size)

    def run(self, q, kv):
        kc, vc = kv
        indptr, indices, last, P = self.meta
        out = torch.empty_like(q)
        g = q.shape[1] // kc.shape[2]
        for r in range(q.shape[0]):
            pages = indices[indptr[r]:indptr[r + 1]]
            n = (len(pages) - 1) * P + last[r]
            k = kc[pages].reshape(-1, kc.shape[2], kc.shape[3])[:n].repeat_interleave(g, 1)
            v = vc[pages].reshape(-1, vc.shape[2], vc.shape[3])[:n].repeat_interleave(g, 1)
            s = torch.einsum("hd,nhd->hn", q[r].float(), k.float()) / q.shape[-1] ** 0.5
            out[r] = torch.einsum("hn,nhd->hd", s.softmax(-1), v.float()).to(q.dtype)
        return out


@pytest.mark.parametrize("wl,graphs", [("W1", False), ("W4", True), ("W6", False)])
def test_flashinfer_backend_page_tables(tiny, monkeypatch, wl, graphs):
    import sys
    import types

    fake = types.ModuleType("flashinfer")
    fake.BatchDecodeWithPagedKVCacheWrapper = _FakeFlashInferDecode
    monkeypatch.setitem(sys.modules, "flashinfer", fake)
    kls = teacher_forced_kl(tiny, wl, workloads.PRESETS["cpu"][wl], "flashinfer", page_size=4,
                            cuda_graphs=graphs)
    assert max(kls) < KL_MAX, kls


def test_scheduler_request_too_large_for_the_cache(tiny):
    from treeattn.engine import Request, Scheduler

    eng = Engine(tiny, "sdpa", page_size=4, num_pages=6)
    sched = Scheduler(eng)
    with pytest.raises(ValueError, match="req: 39 prompt \\+ 4 new tokens need 12 KV pages"):
        sched.submit(Request(list(range(1, 40)), max_new=4))
    assert not sched.waiting
    # one that fits the cache but not beside pages held outside the scheduler
    held, _ = eng.prefill(list(range(1, 12)))
    sched.submit(Request(list(range(1, 10)), max_new=4))
    with pytest.raises(MemoryError, match="KV cache"):
        sched.run()
    eng.free(held)
