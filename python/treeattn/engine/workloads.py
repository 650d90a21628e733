"""Tree workloads W0-W6: branch controllers that drive the engine (prefill, fork, decode rows,
finish) and count what they emit.

  W0 no sharing (control)             W4 beam search (width w)
  W1 parallel sampling (n from 1)     W5 online Poisson arrivals sharing a few system prompts
  W2 shared few-shot / system prompt  W6 speculative decoding: a draft token tree per request,
  W3 tree of thought (branch, prune)     every draft token a query (internal tree nodes)

Every decision taken from logits goes through ``engine.sample`` or ``engine.decide`` so that a
run can be recorded and replayed (teacher forcing) by another engine.

A workload's sizes are a dict of exactly the keys of its ``PARAMS`` entry (integers, W5's rate a
positive number); :func:`run`, :func:`max_tokens` and :func:`max_seqs` check the name and the
sizes first (ValueError / TypeError naming them)."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Callable, Dict, List, Optional

import numpy as np
import torch

from ._checks import callable_arg, int_arg, real_arg
from .engine import Engine, Request, Scheduler

# Sizes per scale: 'gpu' follows the issue (W1: n=64, 4k prompt, 256 new tokens); 'cpu' is
# for the tiny model in tests; 'gpu-test' for the GPU tests (tests/python/test_engine_gpu.py): a
# bit larger than 'cpu', several pages per request and real sharing, yet short.
PRESETS: Dict[str, Dict[str, dict]] = {
    "gpu": {
        "W0": dict(n=32, prompt=1024, new=128),
        "W1": dict(n=64, prompt=4096, new=256),
        "W2": dict(n=32, system=2048, suffix=64, new=128),
        "W3": dict(prompt=2048, branch=4, every=32, keep=4, new=128),
        "W4": dict(prompt=2048, width=16, new=64),
        "W5": dict(requests=64, systems=4, system=1024, suffix=32, rate=0.5, new=64),
        "W6": dict(requests=8, prompt=1024, branches=4, depth=8, new=64),
    },
    "cpu": {
        "W0": dict(n=3, prompt=21, new=6),
        "W1": dict(n=4, prompt=37, new=6),
        "W2": dict(n=4, system=40, suffix=5, new=5),
        "W3": dict(prompt=30, branch=2, every=3, keep=2, new=8),
        "W4": dict(prompt=25, width=3, new=5),
        "W5": dict(requests=6, systems=2, system=33, suffix=4, rate=0.7, new=5),
        "W6": dict(requests=2, prompt=29, branches=2, depth=3, new=8),
    },
    "gpu-test": {
        "W0": dict(n=6, prompt=100, new=12),
        "W1": dict(n=16, prompt=300, new=20),
        "W2": dict(n=8, system=200, suffix=9, new=10),
        "W3": dict(prompt=150, branch=3, every=4, keep=3, new=14),
        "W4": dict(prompt=120, width=6, new=10),
        "W5": dict(requests=12, systems=2, system=130, suffix=7, rate=0.8, new=8),
        "W6": dict(requests=3, prompt=90, branches=3, depth=5, new=16),
    },
}
WORKLOADS = ["W0", "W1", "W2", "W3", "W4", "W5", "W6"]

# The sizes each workload takes (the keys of its presets) -> smallest value: 1, but 0 for an
# optional suffix or draft depth; W5's "rate" is a real > 0. Upper bound of every integer size:
# _MAX_SIZE (the KV cache's page limit bounds what actually runs).
_MIN_SIZE = {"suffix": 0, "depth": 0, "rate": 0}
PARAMS: Dict[str, Dict[str, int]] = {w: {k: _MIN_SIZE.get(k, 1) for k in PRESETS["gpu"][w]}
                                     for w in WORKLOADS}
_MAX_SIZE = 1 << 30


def check_name(name: str) -> str:
    if not isinstance(name, str) or name not in PARAMS:
        raise ValueError(f"name: unknown workload {name!r}, expected one of {WORKLOADS}")
    return name


def check_size(name: str, key: str, value, label: Optional[str] = None):
    """One size of workload `name`: a key of PARAMS[name] and a value at or above its minimum
    (an int; W5's rate a finite number > 0). Errors start with `label` (default params['key'])."""
    spec = PARAMS[check_name(name)]
    label = label or f"params['{key}']"
    if key not in spec:
        raise ValueError(f"{label}: {name} has no size {key!r} (its sizes: {sorted(spec)})")
    if key == "rate":
        return real_arg(label, value, 0.0, lo_open=True)
    return int_arg(label, value, spec[key], _MAX_SIZE)


def check_params(name: str, p: dict) -> dict:
    """The workload name and its sizes checked: exactly the keys of PARAMS[name], each as
    check_size says. Returns a normalised copy."""
    spec = PARAMS[check_name(name)]
    if not isinstance(p, dict):
        raise TypeError(f"params: expected a dict of sizes, got {type(p).__name__}")
    for k in p:
        if k not in spec:
            raise ValueError(f"params: {name} has no size {k!r} (its sizes: {sorted(spec)})")
    for k in spec:
        if k not in p:
            raise ValueError(f"params: {name} needs {k!r} (its sizes: {sorted(spec)})")
    return {k: check_size(name, k, p[k]) for k in spec}


def max_tokens(name: str, p: dict) -> int:
    """KV tokens a workload needs at most (sizes the cache), with slack for partial pages."""
    p = check_params(name, p)
    slack = 64
    if name == "W0":
        return p["n"] * (p["prompt"] + p["new"] + slack)
    if name == "W1":
        return p["prompt"] + p["n"] * (p["new"] + slack)
    if name == "W2":
        return p["system"] + p["n"] * (p["suffix"] + p["new"] + slack)
    if name == "W3":
        w = p["keep"] * p["branch"]
        return p["prompt"] + 2 * w * (p["new"] + slack)
    if name == "W4":
        return p["prompt"] + 2 * p["width"] * (p["new"] + slack)
    if name == "W5":
        return p["systems"] * p["system"] + p["requests"] * (p["suffix"] + p["new"] + slack)
    if name == "W6":
        rows = p["branches"] * (p["depth"] + 1)
        return p["requests"] * (p["prompt"] + p["new"] + p["depth"] + rows * slack)
    raise ValueError(f"workload: unknown {name!r}, expected one of {WORKLOADS}")


def max_seqs(name: str, p: dict) -> int:
    """Live sequences a workload holds at most (each may own one partial page)."""
    p = check_params(name, p)
    return {"W0": lambda: p["n"], "W1": lambda: p["n"], "W2": lambda: p["n"],
            "W3": lambda: 2 * p["keep"] * p["branch"], "W4": lambda: 2 * p["width"],
            "W5": lambda: p["requests"],
            "W6": lambda: p["requests"] * (p["branches"] + 1)}[name]() + 2


@dataclass
class Result:
    name: str
    tokens: int = 0  # decode tokens emitted
    stream_steps: int = 0  # sum over steps of streams that advanced
    step_ms: List[float] = field(default_factory=list)
    tpot_ms: List[float] = field(default_factory=list)
    step_tokens: List[int] = field(default_factory=list)
    prefill_ms: float = 0.0
    info: dict = field(default_factory=dict)


class Controller:
    """Base: random prompts, a step loop with progress, result bookkeeping."""

    workload = ""  # its key in PARAMS

    def __init__(self, eng: Engine, seed: int = 0, temperature: float = 0.8,
                 progress: Optional[Callable[[int, int], None]] = None, max_steps: int = 0,
                 **params):
        if not isinstance(eng, Engine):
            raise TypeError(f"eng: expected an Engine, got {type(eng).__name__}")
        self.eng, self.p = eng, check_params(self.workload, params)
        self.rng = np.random.default_rng(int_arg("seed", seed))
        self.temperature = real_arg("temperature", temperature)
        self.progress = callable_arg("progress", progress, allow_none=True)
        self.max_steps = int_arg("max_steps", max_steps, 0, _MAX_SIZE)
        self.res = Result(type(self).__name__)

    def prompt(self, n: int) -> List[int]:
        return self.rng.integers(1, self.eng.config.vocab_size, n).tolist()

    def with_copies(self, sid: int, k: int) -> List[int]:
        """[sid] and k forks of it (k may be 0)."""
        return [sid] + (self.eng.fork(sid, k) if k > 0 else [])

    def prefill(self, prompt):
        t = time.perf_counter()
        sid, logits = self.eng.prefill(prompt)
        self.res.prefill_ms += (time.perf_counter() - t) * 1e3
        return sid, logits

    def step(self, rows, streams: int, tokens: int):
        """Decodes rows; streams = requests that advance, tokens = tokens they emit."""
        logits = self.eng.decode(rows)
        self._account(streams, tokens)
        return logits

    def _account(self, streams: int, tokens: int):
        ms = self.eng.steps[-1].step_ms
        self.res.step_ms.append(ms)
        self.res.tpot_ms.append(ms * streams / max(tokens, 1))
        self.res.step_tokens.append(tokens)
        self.res.tokens += tokens
        self.res.stream_steps += streams
        if self.progress:
            self.progress(len(self.res.step_ms), self.total_steps())

    def total_steps(self) -> int:
        return self.p.get("new", 0)

    def steps(self) -> int:
        n = self.p["new"]
        return min(n, self.max_steps) if self.max_steps else n

    def decode_and_free(self, seqs, toks) -> Result:
        """Decodes every sequence one token per step for steps() steps, then frees them."""
        for _ in range(self.steps()):
            lg = self.step(list(zip(seqs, toks)), len(seqs), len(seqs))
            toks = self.eng.sample(lg, self.temperature)
        for s in seqs:
            self.eng.free(s)
        return self.res

    def logprobs(self, logits, tokens):
        lp = torch.log_softmax(logits.float(), -1)
        return lp[torch.arange(len(tokens)), torch.tensor(tokens, device=lp.device)].tolist()


class NoSharing(Controller):  # W0
    workload = "W0"

    def run(self) -> Result:
        p, eng = self.p, self.eng
        seqs, toks = [], []
        for _ in range(p["n"]):
            sid, lg = self.prefill(self.prompt(p["prompt"]))
            seqs.append(sid)
            toks += eng.sample(lg[None], self.temperature)
        return self.decode_and_free(seqs, toks)


class ParallelSampling(Controller):  # W1
    workload = "W1"

    def run(self) -> Result:
        p, eng = self.p, self.eng
        sid, lg = self.prefill(self.prompt(p["prompt"]))
        seqs = self.with_copies(sid, p["n"] - 1)
        toks = eng.sample(lg[None].expand(p["n"], -1), self.temperature)
        return self.decode_and_free(seqs, toks)


class SharedPrompt(Controller):  # W2
    workload = "W2"

    def run(self) -> Result:
        p, eng = self.p, self.eng
        system = self.prompt(p["system"])
        seqs, toks = [], []
        for _ in range(p["n"]):
            sid, lg = self.prefill(system + self.prompt(p["suffix"]))
            seqs.append(sid)
            toks += eng.sample(lg[None], self.temperature)
        self.res.info["prefix_hit_tokens"] = eng.cache.stats["hit_tokens"]
        return self.decode_and_free(seqs, toks)


class TreeOfThought(Controller):  # W3
    """Branches into `branch` children every `every` tokens, keeps the `keep` best branches by
    cumulative log-probability (the others finish), so the live width is keep * branch."""
    workload = "W3"


    def run(self) -> Result:
        p, eng = self.p, self.eng
        sid, lg = self.prefill(self.prompt(p["prompt"]))
        seqs = self.with_copies(sid, p["branch"] - 1)
        toks = eng.sample(lg[None].expand(len(seqs), -1), self.temperature)
        score = self.logprobs(lg[None].expand(len(seqs), -1), toks)
        for i in range(self.steps()):
            lg = self.step(list(zip(seqs, toks)), len(seqs), len(seqs))
            toks = eng.sample(lg, self.temperature)
            score = [s + x for s, x in zip(score, self.logprobs(lg, toks))]
            if (i + 1) % p["every"] == 0:
                keep = eng.decide(lambda: sorted(
                    sorted(range(len(seqs)), key=lambda j: -score[j])[:p["keep"]]))
                for j in range(len(seqs)):
                    if j not in keep:
                        eng.free(seqs[j])
                nseqs, ntoks, nscore = [], [], []
                for j in keep:
                    kids = self.with_copies(seqs[j], p["branch"] - 1)
                    nseqs += kids
                    ntoks += [toks[j]] * len(kids)
                    nscore += [score[j]] * len(kids)
                seqs, toks, score = nseqs, ntoks, nscore
        self.res.info["final_width"] = len(seqs)
        for s in seqs:
            eng.free(s)
        return self.res


class BeamSearch(Controller):  # W4
    workload = "W4"

    def run(self) -> Result:
        p, eng = self.p, self.eng
        w = p["width"]
        if w > eng.config.vocab_size:
            raise ValueError(f"params['width']: {w} beams exceed the model's vocab_size "
                             f"{eng.config.vocab_size}")
        sid, lg = self.prefill(self.prompt(p["prompt"]))
        lp = torch.log_softmax(lg.float(), -1)
        first = eng.decide(lambda: torch.topk(lp, w).indices.tolist())
        seqs = self.with_copies(sid, w - 1)
        toks = list(first)
        scores = lp[torch.tensor(first, device=lp.device)].tolist()
        for _ in range(self.steps()):
            lg = self.step(list(zip(seqs, toks)), len(seqs), len(seqs))
            lp = torch.log_softmax(lg.float(), -1)
            tot = lp + torch.tensor(scores, device=lp.device)[:, None]

            def pick():
                v, i = torch.topk(tot.flatten(), w)
                V = lp.shape[1]
                return [(int(j) // V, int(j) % V, float(s)) for j, s in zip(i, v)]

            chosen = eng.decide(pick)
            used = set()
            nseqs, ntoks, nscores = [], [], []
            for parent, tok, s in chosen:
                if parent in used:
                    nseqs.append(eng.fork(seqs[parent], 1)[0])
                else:
                    nseqs.append(seqs[parent])
                    used.add(parent)
                ntoks.append(tok)
                nscores.append(s)
            for j in range(len(seqs)):
                if j not in used:
                    eng.free(seqs[j])
            seqs, toks, scores = nseqs, ntoks, nscores
        for s in seqs:
            eng.free(s)
        return self.res


class OnlineArrivals(Controller):  # W5
    """Continuous batching (engine.Scheduler): Poisson arrivals (rate per decode step), each
    request = one of a few system prompts + its own suffix; it joins the running batch after its
    prefill and leaves after `new` tokens."""
    workload = "W5"


    def run(self) -> Result:
        p, eng = self.p, self.eng
        systems = [self.prompt(p["system"]) for _ in range(p["systems"])]
        gaps = self.rng.exponential(1.0 / p["rate"], p["requests"])
        arrive = np.floor(np.cumsum(gaps)).astype(int).tolist()
        which = self.rng.integers(0, p["systems"], p["requests"]).tolist()
        sched = Scheduler(eng)
        for t, w in zip(arrive, which):
            sched.submit(Request(systems[w] + self.prompt(p["suffix"]), p["new"] + 1,
                                 self.temperature, arrival=t))
        limit = self.max_steps or 1 << 30
        while (sched.waiting or sched.running) and len(self.res.step_ms) < limit:
            t = time.perf_counter()
            n_pre = len(eng.steps)
            sched.admit()
            self.res.prefill_ms += (time.perf_counter() - t) * 1e3
            rows = sched.step()
            if rows and len(eng.steps) > n_pre:
                self._account(rows, rows)
        for r in sched.running:
            eng.free(r.sid)
        self.res.info["prefix_hit_tokens"] = eng.cache.stats["hit_tokens"]
        return self.res

    def total_steps(self):
        return 0


class Speculative(Controller):  # W6
    """Per request and step: `branches` draft chains of `depth` tokens from the last committed
    token (prompt lookup in the request's own history, random tokens where it has none). Each
    chain is a fork of the request's sequence and re-feeds the pending token first, so its rows
    are the pending token then its drafts: branches * (depth + 1) queries per request, most on
    internal nodes of the tree. Greedy verification keeps the longest accepted chain prefix plus
    the target's next token; the other chains are freed, the kept one truncated."""
    workload = "W6"


    def drafts(self, hist: List[int], B: int, d: int) -> List[List[int]]:
        """Chain b continues the b-th latest earlier occurrence of the last token (searched in
        the last 1024 tokens), padded with random tokens."""
        last, lo = hist[-1], max(0, len(hist) - 1025)
        occ = []
        for i in range(len(hist) - 2, lo - 1, -1):
            if hist[i] == last:
                occ.append(i)
                if len(occ) == B:
                    break
        out = []
        for b in range(B):
            ch = hist[occ[b] + 1:occ[b] + 1 + d] if b < len(occ) else []
            out.append(ch + self.rng.integers(1, self.eng.config.vocab_size,
                                              d - len(ch)).tolist())
        return out

    def run(self) -> Result:
        p, eng = self.p, self.eng
        B, d = p["branches"], p["depth"]
        reqs = []  # [sid, pending, emitted, history]
        for _ in range(p["requests"]):
            pr = self.prompt(p["prompt"])
            sid, lg = self.prefill(pr)
            t = eng.sample(lg[None], 0.0)[0]
            reqs.append([sid, t, 0, pr + [t]])
        accepted_total = 0
        for _ in range(self.steps()):
            live = [r for r in reqs if r[2] < p["new"]]
            if not live:
                break
            rows, chains = [], []
            for r in live:
                kids = eng.fork(r[0], B)
                drafts = self.drafts(r[3], B, d)
                for sid, dr in zip(kids, drafts):
                    rows += [(sid, r[1])] + [(sid, x) for x in dr]
                chains.append((kids, drafts))
            base = 0
            lg = eng.decode(rows)  # tokens emitted are known after verification
            preds = eng.sample(lg, 0.0)
            n_tok = 0
            for k, (r, (kids, drafts)) in enumerate(zip(live, chains)):
                best_b, best_a = 0, -1
                for b in range(B):
                    off = base + b * (d + 1)
                    a = 0
                    while a < d and drafts[b][a] == preds[off + a]:
                        a += 1
                    if a > best_a:
                        best_b, best_a = b, a
                new = drafts[best_b][:best_a] + [preds[base + best_b * (d + 1) + best_a]]
                eng.free(r[0])
                for b, sid in enumerate(kids):
                    if b != best_b:
                        eng.free(sid)
                r[0] = kids[best_b]
                eng.truncate(r[0], len(r[3]) + best_a)
                new = new[:p["new"] - r[2]]
                r[1] = new[-1]
                r[2] += len(new)
                r[3] += new
                n_tok += len(new)
                accepted_total += best_a
                base += B * (d + 1)
            ms = eng.steps[-1].step_ms
            self.res.step_ms.append(ms)
            self.res.tpot_ms.append(ms * len(live) / max(n_tok, 1))
            self.res.step_tokens.append(n_tok)
            self.res.tokens += n_tok
            self.res.stream_steps += len(live)
            if self.progress:
                self.progress(len(self.res.step_ms), self.total_steps())
        self.res.info["accepted_drafts"] = accepted_total
        self.res.info["rows_per_step"] = p["requests"] * B * (d + 1)
        for r in reqs:
            eng.free(r[0])
        return self.res


CONTROLLERS = {"W0": NoSharing, "W1": ParallelSampling, "W2": SharedPrompt, "W3": TreeOfThought,
               "W4": BeamSearch, "W5": OnlineArrivals, "W6": Speculative}


def run(eng: Engine, name: str, params: dict, seed: int = 0, **kw) -> Result:
    """Runs workload `name` (W0-W6) with sizes `params` on `eng`; kw: temperature, progress,
    max_steps (Controller)."""
    check_params(name, params)
    for k in kw:
        if k not in ("temperature", "progress", "max_steps"):
            raise TypeError(f"{k}: not an argument of workloads.run (temperature, progress, "
                            f"max_steps)")
    ctl = CONTROLLERS[name](eng, seed=seed, **kw, **params)
    res = ctl.run()
    res.name = name
    return res
