"""Hostile inputs to every public entry point of treeattn.engine (Engine, KVCache, Model,
ModelConfig, Scheduler, workloads, check, make_backend, the treeattn-engine CLI): each must raise
the stated error type with a message that starts with the argument's name, and a refused call on
an engine must leave it exactly as it was (sequences, pages, refcounts, hashes, pending copies,
steps, sampling generator, K/V contents). CPU, tiny model; skipped without torch."""

from __future__ import annotations

import math
import time

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from treeattn.engine import (Engine, KVCache, Model, ModelConfig, Request,  # noqa: E402
                             Scheduler, make_backend, workloads)
from treeattn.engine import cli  # noqa: E402
from treeattn.engine.check import kl_rows, teacher_forced_kl  # noqa: E402

torch.set_num_threads(min(2, torch.get_num_threads()))
W1 = dict(n=2, prompt=5, new=2)


@pytest.fixture(scope="module")
def tiny():
    return Model.random(ModelConfig.preset("tiny"), seed=1)


class Ctx:
    """An engine with room for 11 pages of 4 tokens: sequence `a` (9 tokens after prefill plus
    one decode step: 3 pages) and its fork `b`; `logits` a [2, vocab] tensor."""

    def __init__(self, model):
        self.model = model
        self.cfg = model.config
        self.eng = Engine(model, "treeattn", page_size=4, num_pages=12, seed=3)
        self.kv = self.eng.cache
        self.a, _ = self.eng.prefill(list(range(1, 10)))
        (self.b,) = self.eng.fork(self.a, 1)
        self.logits = self.eng.decode([(self.a, 5), (self.b, 6)])
        self.sched = None


def snapshot(ctx: Ctx):
    """Everything a refused call must leave unchanged."""
    kv, eng = ctx.kv, ctx.eng
    return {
        "seqs": {sid: (list(s.pages), list(s.tokens), list(s.hashes))
                 for sid, s in kv.seqs.items()},
        "ref": list(kv.ref), "free": list(kv.free), "cached": list(kv.cached),
        "page_hash": dict(kv.page_hash), "hash_page": dict(kv.hash_page),
        "pending": list(kv.pending_copies), "copied_from": dict(kv._copied_from),
        "truncated": kv.truncated, "next_id": kv._next_id, "stats": dict(kv.stats),
        "steps": len(eng.steps), "gen": eng.gen.get_state().clone(),
        "k": kv.k.clone(), "v": kv.v.clone(),
        "waiting": None if ctx.sched is None else list(ctx.sched.waiting),
    }


def assert_same(before, after):
    for key, x in before.items():
        y = after[key]
        same = torch.equal(x, y) if torch.is_tensor(x) else x == y
        assert same, f"engine state '{key}' changed by a refused call"


def fill_free_pages(ctx):
    """Forks of `a` that each need a copy of its partial last page on their next step: more
    than the free pages."""
    return ctx.eng.fork(ctx.a, ctx.kv.num_free() + 1)


def exhaust_pages(ctx):
    """Takes every free page (forks of `a` copying its partial page), then returns an append
    that needs one more."""
    forks = ctx.kv.fork(ctx.a, ctx.kv.num_free() + 1)
    for s in forks[:-1]:
        ctx.kv.append(s, 1)
    ctx.kv.take_copies()
    assert ctx.kv.num_free() == 0
    return lambda: ctx.kv.append(forks[-1], 1)


def hf_weights(cfg, **change):
    w = dict(Model.random(cfg, seed=2).weights)
    w.update(change)
    return w


def sched(ctx):
    ctx.sched = Scheduler(ctx.eng)
    return ctx.sched


# (id, setup(ctx) -> the hostile call, error type, the message starts with)
CASES = [
    # ---- Engine()
    ("engine page_size 0", lambda c: lambda: Engine(c.model, page_size=0), ValueError,
     "page_size"),
    ("engine page_size float", lambda c: lambda: Engine(c.model, page_size=16.0), TypeError,
     "page_size"),
    ("engine page_size bool", lambda c: lambda: Engine(c.model, page_size=True), TypeError,
     "page_size"),
    ("engine page_size 512", lambda c: lambda: Engine(c.model, page_size=512), ValueError,
     "page_size"),
    ("engine num_pages 1", lambda c: lambda: Engine(c.model, num_pages=1), ValueError,
     "num_pages"),
    ("engine num_pages huge", lambda c: lambda: Engine(c.model, num_pages=1 << 40), ValueError,
     "num_pages"),
    ("engine max_tokens -5", lambda c: lambda: Engine(c.model, max_tokens=-5), ValueError,
     "max_tokens"),
    ("engine max_tokens huge", lambda c: lambda: Engine(c.model, max_tokens=1 << 40),
     ValueError, "max_tokens"),
    ("engine max_seqs -1", lambda c: lambda: Engine(c.model, max_seqs=-1), ValueError,
     "max_seqs"),
    ("engine backend unknown", lambda c: lambda: Engine(c.model, "bogus"), ValueError,
     "backend"),
    ("engine backend planner unknown", lambda c: lambda: Engine(c.model, "treeattn-nope"),
     ValueError, "backend"),
    ("engine backend None", lambda c: lambda: Engine(c.model, None), TypeError, "backend"),
    ("engine model str", lambda c: lambda: Engine("tiny"), TypeError, "model"),
    ("engine config without dry_run", lambda c: lambda: Engine(c.cfg), ValueError, "model"),
    ("engine seed -1", lambda c: lambda: Engine(c.model, seed=-1), ValueError, "seed"),
    ("engine cuda_graphs str", lambda c: lambda: Engine(c.model, cuda_graphs="yes"), TypeError,
     "cuda_graphs"),
    ("engine time_attention_every -1",
     lambda c: lambda: Engine(c.model, time_attention_every=-1), ValueError,
     "time_attention_every"),
    ("engine dry_run int", lambda c: lambda: Engine(c.cfg, dry_run=1), TypeError, "dry_run"),
    # ---- Engine.prefill
    ("prefill empty", lambda c: lambda: c.eng.prefill([]), ValueError, "prompt"),
    ("prefill token = vocab", lambda c: lambda: c.eng.prefill([1, c.cfg.vocab_size]),
     ValueError, "prompt[1]"),
    ("prefill token -1", lambda c: lambda: c.eng.prefill([3, -1]), ValueError, "prompt[1]"),
    ("prefill float tokens", lambda c: lambda: c.eng.prefill([1.5, 2.0]), TypeError, "prompt"),
    ("prefill str", lambda c: lambda: c.eng.prefill("hello"), TypeError, "prompt"),
    ("prefill nested", lambda c: lambda: c.eng.prefill([[1, 2], [3, 4]]), ValueError, "prompt"),
    ("prefill over the cache", lambda c: lambda: c.eng.prefill(list(range(1, 101))), ValueError,
     "prompt"),
    ("prefill over the free pages", lambda c: lambda: c.eng.prefill([7] * 40), MemoryError,
     "prompt"),
    # ---- Engine.decode
    ("decode no rows", lambda c: lambda: c.eng.decode([]), ValueError, "rows"),
    ("decode unknown sid", lambda c: lambda: c.eng.decode([(99, 1)]), ValueError, "rows[0]"),
    ("decode token = vocab", lambda c: lambda: c.eng.decode([(c.a, c.cfg.vocab_size)]),
     ValueError, "rows[0]"),
    ("decode token float", lambda c: lambda: c.eng.decode([(c.a, 1.0)]), TypeError, "rows[0]"),
    ("decode row not a pair", lambda c: lambda: c.eng.decode([(c.a,)]), TypeError, "rows[0]"),
    ("decode rows str", lambda c: lambda: c.eng.decode("ab"), TypeError, "rows"),
    ("decode second row bad", lambda c: lambda: c.eng.decode([(c.a, 1), (99, 1)]), ValueError,
     "rows[1]"),
    ("decode freed sid", lambda c: (c.eng.free(c.b), lambda: c.eng.decode([(c.b, 1)]))[1],
     ValueError, "rows[0]"),
    ("decode over the free pages",
     lambda c: (lambda f: lambda: c.eng.decode([(s, 1) for s in f]))(fill_free_pages(c)),
     MemoryError, "rows"),
    # ---- fork / truncate / free / length
    ("fork n 0", lambda c: lambda: c.eng.fork(c.a, 0), ValueError, "n"),
    ("fork n -1", lambda c: lambda: c.eng.fork(c.a, -1), ValueError, "n"),
    ("fork n huge", lambda c: lambda: c.eng.fork(c.a, 10**9), ValueError, "n"),
    ("fork n float", lambda c: lambda: c.eng.fork(c.a, 2.0), TypeError, "n"),
    ("fork unknown sid", lambda c: lambda: c.eng.fork(99), ValueError, "sid"),
    ("truncate -1", lambda c: lambda: c.eng.truncate(c.a, -1), ValueError, "length"),
    ("truncate past the end", lambda c: lambda: c.eng.truncate(c.a, c.eng.length(c.a) + 1),
     ValueError, "length"),
    ("truncate None", lambda c: lambda: c.eng.truncate(c.a, None), TypeError, "length"),
    ("truncate unknown sid", lambda c: lambda: c.eng.truncate(99, 0), ValueError, "sid"),
    ("free unknown sid", lambda c: lambda: c.eng.free(99), ValueError, "sid"),
    ("free twice", lambda c: (c.eng.free(c.b), lambda: c.eng.free(c.b))[1], ValueError, "sid"),
    ("free str sid", lambda c: lambda: c.eng.free("a"), TypeError, "sid"),
    ("length unknown sid", lambda c: lambda: c.eng.length(-1), ValueError, "sid"),
    # ---- sample / decide / time_attention
    ("sample temperature -1", lambda c: lambda: c.eng.sample(c.logits, -1.0), ValueError,
     "temperature"),
    ("sample temperature nan", lambda c: lambda: c.eng.sample(c.logits, math.nan), ValueError,
     "temperature"),
    ("sample temperature per row wrong length", lambda c: lambda: c.eng.sample(c.logits, [0.5]),
     ValueError, "temperature"),
    ("sample temperature per row negative",
     lambda c: lambda: c.eng.sample(c.logits, [0.5, -2.0]), ValueError, "temperature[1]"),
    ("sample temperature str", lambda c: lambda: c.eng.sample(c.logits, "hot"), TypeError,
     "temperature"),
    ("sample logits list", lambda c: lambda: c.eng.sample([[1.0, 2.0]], 0), TypeError, "logits"),
    ("sample logits 1-D", lambda c: lambda: c.eng.sample(torch.zeros(3), 0), ValueError,
     "logits"),
    ("decide not callable", lambda c: lambda: c.eng.decide(5), TypeError, "fn"),
    ("time_attention 0 rows", lambda c: lambda: c.eng.time_attention(0), ValueError, "T"),
    # ---- KVCache
    ("kv page_size 0", lambda c: lambda: KVCache(1, 64, 0, 1, 2), ValueError, "page_size"),
    ("kv num_layers 0", lambda c: lambda: KVCache(0, 64, 4, 1, 2), ValueError, "num_layers"),
    ("kv num_pages float", lambda c: lambda: KVCache(1, 64.0, 4, 1, 2), TypeError, "num_pages"),
    ("kv dtype int", lambda c: lambda: KVCache(1, 64, 4, 1, 2, dtype=torch.int32), ValueError,
     "dtype"),
    ("kv device bogus", lambda c: lambda: KVCache(1, 64, 4, 1, 2, device="bogus"), ValueError,
     "device"),
    ("kv append unknown sid", lambda c: lambda: c.kv.append(99, 1), ValueError, "sid"),
    ("kv append token -3", lambda c: lambda: c.kv.append(c.a, -3), ValueError, "token"),
    ("kv append with no page free", lambda c: exhaust_pages(c), MemoryError, "KV cache"),
    ("kv new_seq floats", lambda c: lambda: c.kv.new_seq([1.0]), TypeError, "prompt"),
    ("kv apply_copies slot out of range", lambda c: lambda: c.kv.apply_copies([(0, 10**9)]),
     ValueError, "copies[0][1]"),
    ("kv apply_copies not pairs", lambda c: lambda: c.kv.apply_copies([1, 2]), TypeError,
     "copies[0]"),
    ("kv block_table unknown sid", lambda c: lambda: c.kv.block_table(99), ValueError, "sid"),
    ("kv pages_for_step unknown sid", lambda c: lambda: c.kv.pages_for_step([c.a, 99]),
     ValueError, "rows[1]"),
    # ---- ModelConfig / Model
    ("config heads not a multiple", lambda c: lambda: ModelConfig.preset("tiny", num_heads=3),
     ValueError, "num_kv_heads"),
    ("config odd head_dim", lambda c: lambda: ModelConfig.preset("tiny", head_dim=63),
     ValueError, "head_dim"),
    ("config unknown preset", lambda c: lambda: ModelConfig.preset("nope"), ValueError, "model"),
    ("config unknown override", lambda c: lambda: ModelConfig.preset("tiny", bogus=1),
     ValueError, "bogus"),
    ("config vocab 0", lambda c: lambda: ModelConfig(vocab_size=0), ValueError, "vocab_size"),
    ("config rms_eps 0", lambda c: lambda: ModelConfig(rms_eps=0.0), ValueError, "rms_eps"),
    ("config arch", lambda c: lambda: ModelConfig(arch="gpt2"), ValueError, "arch"),
    ("config from_hf empty", lambda c: lambda: ModelConfig.from_hf({}), ValueError, "config"),
    ("config from_hf not a dict", lambda c: lambda: ModelConfig.from_hf([]), TypeError,
     "config"),
    ("model weights missing", lambda c: lambda: Model(c.cfg, {}), ValueError, "weights["),
    ("model weights not a dict", lambda c: lambda: Model(c.cfg, [1]), TypeError, "weights"),
    ("model weight dtype mismatch",
     lambda c: (lambda w: lambda: Model(c.cfg, w))(hf_weights(c.cfg, **{
         "model.norm.weight": torch.ones(c.cfg.hidden_size, dtype=torch.float16)})),
     ValueError, "weights['model.norm.weight']"),
    ("model weight shape mismatch",
     lambda c: (lambda w: lambda: Model(c.cfg, w))(hf_weights(c.cfg, **{
         "model.layers.1.mlp.up_proj.weight": torch.zeros(3, 3)})),
     ValueError, "weights['model.layers.1.mlp.up_proj.weight']"),
    ("model config not a config", lambda c: lambda: Model.random("tiny"), TypeError, "config"),
    ("model random int dtype", lambda c: lambda: Model.random(c.cfg, dtype=torch.int64),
     ValueError, "dtype"),
    ("model random seed -1", lambda c: lambda: Model.random(c.cfg, seed=-1), ValueError, "seed"),
    ("model load missing dir", lambda c: lambda: Model.load("/nonexistent/model"), ValueError,
     "path"),
    ("model to int dtype", lambda c: lambda: c.model.to(torch.int8), ValueError, "dtype"),
    ("model forward token = vocab",
     lambda c: lambda: c.model.forward(torch.tensor([c.cfg.vocab_size]), torch.tensor([0]),
                                       lambda i, q, k, v: q), ValueError, "tokens"),
    ("model forward float tokens",
     lambda c: lambda: c.model.forward(torch.tensor([1.0]), torch.tensor([0]),
                                       lambda i, q, k, v: q), TypeError, "tokens"),
    ("model forward positions length",
     lambda c: lambda: c.model.forward(torch.tensor([1, 2]), torch.tensor([0]),
                                       lambda i, q, k, v: q), ValueError, "positions"),
    ("model forward negative position",
     lambda c: lambda: c.model.forward(torch.tensor([1]), torch.tensor([-4]),
                                       lambda i, q, k, v: q), ValueError, "positions"),
    ("model forward attend None",
     lambda c: lambda: c.model.forward(torch.tensor([1]), torch.tensor([0]), None), TypeError,
     "attend"),
    ("model forward logits_rows out of range",
     lambda c: lambda: c.model.forward(torch.tensor([1]), torch.tensor([0]),
                                       lambda i, q, k, v: q, logits_rows=torch.tensor([3])),
     ValueError, "logits_rows"),
    # ---- Scheduler
    ("scheduler eng str", lambda c: lambda: Scheduler("eng"), TypeError, "eng"),
    ("scheduler max_batch 0", lambda c: lambda: Scheduler(c.eng, 0), ValueError, "max_batch"),
    ("submit not a request", lambda c: (lambda s: lambda: s.submit("x"))(sched(c)), TypeError,
     "req"),
    ("submit empty prompt", lambda c: (lambda s: lambda: s.submit(Request([], 3)))(sched(c)),
     ValueError, "req.prompt"),
    ("submit max_new 0", lambda c: (lambda s: lambda: s.submit(Request([1], 0)))(sched(c)),
     ValueError, "req.max_new"),
    ("submit temperature -1",
     lambda c: (lambda s: lambda: s.submit(Request([1], 3, temperature=-1.0)))(sched(c)),
     ValueError, "req.temperature"),
    ("submit stop out of vocab",
     lambda c: (lambda s: lambda: s.submit(Request([1], 3, stop=999)))(sched(c)), ValueError,
     "req.stop"),
    ("submit arrival -1",
     lambda c: (lambda s: lambda: s.submit(Request([1], 3, arrival=-1)))(sched(c)), ValueError,
     "req.arrival"),
    ("submit over the cache",
     lambda c: (lambda s: lambda: s.submit(Request([1] * 30, 30)))(sched(c)), ValueError, "req"),
    ("submit twice",
     lambda c: (lambda s, r: (s.submit(r), lambda: s.submit(r))[1])(sched(c), Request([1], 2)),
     ValueError, "req"),
    # ---- workloads
    ("workload unknown", lambda c: lambda: workloads.run(c.eng, "W9", {}), ValueError, "name"),
    ("workload n 0", lambda c: lambda: workloads.run(c.eng, "W1", dict(W1, n=0)), ValueError,
     "params['n']"),
    ("workload size missing", lambda c: lambda: workloads.run(c.eng, "W1", dict(n=2, prompt=5)),
     ValueError, "params"),
    ("workload size unknown", lambda c: lambda: workloads.run(c.eng, "W1", dict(W1, dim=3)),
     ValueError, "params"),
    ("workload size str", lambda c: lambda: workloads.max_seqs("W1", dict(W1, n="4")),
     TypeError, "params['n']"),
    ("workload rate 0",
     lambda c: lambda: workloads.max_tokens("W5", dict(workloads.PRESETS["cpu"]["W5"], rate=0)),
     ValueError, "params['rate']"),
    ("workload seed -1", lambda c: lambda: workloads.run(c.eng, "W1", W1, seed=-1), ValueError,
     "seed"),
    ("workload temperature inf",
     lambda c: lambda: workloads.run(c.eng, "W1", W1, temperature=math.inf), ValueError,
     "temperature"),
    ("workload max_steps -1", lambda c: lambda: workloads.run(c.eng, "W1", W1, max_steps=-1),
     ValueError, "max_steps"),
    ("workload progress not callable",
     lambda c: lambda: workloads.run(c.eng, "W1", W1, progress=5), TypeError, "progress"),
    ("workload unknown keyword", lambda c: lambda: workloads.run(c.eng, "W1", W1, stepz=3),
     TypeError, "stepz"),
    ("workload W4 width over vocab",
     lambda c: lambda: workloads.run(c.eng, "W4", dict(prompt=5, width=300, new=2)), ValueError,
     "params['width']"),
    ("workload eng str", lambda c: lambda: workloads.run("eng", "W1", W1), TypeError, "eng"),
    # ---- check, backends
    ("teacher_forced_kl every 0",
     lambda c: lambda: teacher_forced_kl(c.model, "W1", W1, "treeattn", every=0), ValueError,
     "every"),
    ("kl_rows shapes", lambda c: lambda: kl_rows(torch.zeros(2, 4), torch.zeros(2, 5)),
     ValueError, "got"),
    ("make_backend unknown", lambda c: lambda: make_backend("nope", 4, 2, 64, torch.float32,
                                                            "cpu"), ValueError, "backend"),
]

if torch.cuda.is_available():
    CASES.append(("model random on a missing GPU",
                  lambda c: lambda: Model.random(c.cfg, device="cuda:99"), ValueError, "device"))
else:
    CASES.append(("model random on cuda without CUDA",
                  lambda c: lambda: Model.random(c.cfg, device="cuda"), ValueError, "device"))


@pytest.mark.parametrize("setup,exc,arg", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_hostile_engine_input(tiny, setup, exc, arg):
    ctx = Ctx(tiny)
    call = setup(ctx)
    before = snapshot(ctx)
    t = time.perf_counter()
    with pytest.raises(exc) as e:
        call()
    assert str(e.value).startswith(arg), f"message does not start with {arg!r}: {e.value}"
    assert time.perf_counter() - t < 5, "a refused call took seconds"
    assert_same(before, snapshot(ctx))
    ctx.kv.check()


def test_hostile_table_covers_every_entry_point():
    """At least 30 cases, and every public callable of the engine's API appears in one."""
    import inspect

    assert len(CASES) >= 30
    src = inspect.getsource(__import__(__name__))
    names = ["Engine(", ".prefill(", ".decode(", ".fork(", ".truncate(", ".free(", ".length(",
             ".sample(", ".decide(", ".time_attention(", "KVCache(", "kv.append(", ".new_seq(",
             ".apply_copies(", ".block_table(", ".pages_for_step(", "ModelConfig(", ".preset(",
             ".from_hf(", "Model(", "Model.random(", "Model.load(", ".to(", ".forward(",
             "Scheduler(", ".submit(", "workloads.run(", "workloads.max_tokens(",
             "workloads.max_seqs(", "teacher_forced_kl(", "kl_rows(", "make_backend(",
             "cli.main("]
    missing = [n for n in names if n not in src]
    assert not missing, missing


def test_refused_calls_leave_a_working_engine(tiny):
    """After a run of refusals the engine still decodes as one that never saw them."""
    ref, hostile = Ctx(tiny), Ctx(tiny)
    for bad in (lambda: hostile.eng.decode([(hostile.a, 1), (77, 1)]),
                lambda: hostile.eng.truncate(hostile.a, -1),
                lambda: hostile.eng.fork(hostile.a, 0),
                lambda: hostile.eng.prefill([1, 10**6])):
        with pytest.raises((ValueError, TypeError)):
            bad()
    for c in (ref, hostile):
        c.out = c.eng.decode([(c.a, 9), (c.b, 10)])
    assert torch.equal(ref.out, hostile.out)
    assert ref.eng.length(ref.a) == hostile.eng.length(hostile.a) == 11


def test_step_page_count_matches_append(tiny):
    """pages_for_step predicts exactly the pages a step then takes (forks sharing a partial
    page, a sequence on several rows, page boundaries, a hashed page after truncation)."""
    rng = np.random.default_rng(0)
    for trial in range(30):
        eng = Engine(tiny, "sdpa", page_size=int(rng.integers(1, 6)), num_pages=200, seed=trial)
        live = [eng.prefill(rng.integers(1, 200, int(rng.integers(1, 20))).tolist())[0]]
        for _ in range(int(rng.integers(0, 4))):
            live += eng.fork(live[int(rng.integers(len(live)))], int(rng.integers(1, 3)))
        s = live[int(rng.integers(len(live)))]
        eng.truncate(s, int(rng.integers(0, eng.length(s) + 1)))
        rows = [int(x) for x in rng.choice(live, int(rng.integers(1, 3 * len(live))))]
        need = eng.cache.pages_for_step(rows)
        allocs = []
        alloc = eng.cache._alloc
        eng.cache._alloc = lambda: allocs.append(1) or alloc()
        eng.decode([(r, 1) for r in rows])
        assert len(allocs) == need, (trial, rows)
        eng.cache.check()


# ---- treeattn-engine CLI


CLI_CASES = [
    (["bench", "--page-size", "0"], "--page-size"),
    (["bench", "--page-size", " 16"], "--page-size"),
    (["bench", "--seed", " -1"], "--seed"),
    (["bench", "--seed", "18446744073709551616"], "--seed"),
    (["bench", "--layers", "0"], "--layers"),
    (["bench", "--temperature", "nan"], "--temperature"),
    (["bench", "--time-budget", "-1"], "--time-budget"),
    (["bench", "--attn-every", "+8"], "--attn-every"),
    (["bench", "--warmup-steps", "2x"], "--warmup-steps"),
    (["bench", "--sdpa-steps", "1e3"], "--sdpa-steps"),
    (["bench", "--workloads", "W9"], "--workloads"),
    (["bench", "--workloads", "W1@n=1.5"], "--workloads"),
    (["bench", "--workloads", "W1@dim=3"], "--workloads"),
    (["bench", "--set", "W1.n"], "--set"),
    (["bench", "--set", "W1.n=-2"], "--set"),
    (["bench", "--set", "W5.rate=0"], "--set"),
    (["bench", "--backends", "treeattn,nope"], "--backends"),
    (["bench", "--model", "gpt5"], "--model"),
    (["bench", "--model-path", "/nonexistent"], "--model-path"),
    (["bench", "--device", "bogus"], "--device"),
    (["bench", "--json", "/nonexistent/dir/x.json"], "--json"),
    (["bench", "--dry-run", "--model-path", "{hf}"], "--model-path"),
    (["bench", "--json", "{tmp}/same.json", "--png", "{tmp}/same.json"], "--png"),
    (["plot", "{tmp}/missing.json"], "json"),
    (["plot", "{tmp}/bench.json", "{tmp}/bench.json"], "png"),
    (["plot", "{hf}/config.json"], "json"),
]


@pytest.mark.parametrize("argv,flag", CLI_CASES, ids=[" ".join(a) for a, _ in CLI_CASES])
def test_hostile_cli(tmp_path, capsys, argv, flag):
    (tmp_path / "hf").mkdir()
    (tmp_path / "hf" / "config.json").write_text("{}")
    (tmp_path / "bench.json").write_text('{"records": []}')
    before = {p: p.read_bytes() for p in tmp_path.rglob("*") if p.is_file()}
    argv = [a.format(tmp=tmp_path, hf=tmp_path / "hf") for a in argv]
    with pytest.raises(SystemExit) as e:
        cli.main(argv)
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert f"argument {flag}" in err, err
    assert {p: p.read_bytes() for p in tmp_path.rglob("*") if p.is_file()} == before
