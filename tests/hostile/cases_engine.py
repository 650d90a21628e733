"""The engine's hostile inputs for the harness: the tables of tests/python/test_engine_hostile.py
(every public entry point of treeattn.engine, and the treeattn-engine CLI) run one per forked
child, with the same checks (error type, message starting with the argument, a refused call
leaving the engine exactly as it was), plus superlinear probes of its size-driven inputs.
Empty without torch."""

from __future__ import annotations

import contextlib
import io
import tempfile
from pathlib import Path
from typing import List

from harness import Case, Probe, Wrong

try:
    import torch  # noqa: F401
except ImportError:  # the engine needs torch: test_engine_hostile skips, and so does this table
    eh = None
else:
    import test_engine_hostile as eh
    from treeattn.engine import Engine, Model, ModelConfig, cli

_TINY = []


def tiny():
    """The tiny random model (made once per process, so once per forked child)."""
    if not _TINY:
        _TINY.append(Model.random(ModelConfig.preset("tiny"), seed=1))
    return _TINY[0]


def _engine_call(setup):
    def run() -> None:
        ctx = eh.Ctx(tiny())
        call = setup(ctx)
        before = eh.snapshot(ctx)
        try:
            call()
        finally:
            try:
                eh.assert_same(before, eh.snapshot(ctx))
                ctx.kv.check()
            except AssertionError as e:
                raise Wrong(f"the refused call changed the engine: {e}") from None
    return run


def _cli_call(argv):
    def run() -> None:
        with tempfile.TemporaryDirectory() as tmp:
            t = Path(tmp)
            (t / "hf").mkdir()
            (t / "hf" / "config.json").write_text("{}")
            (t / "bench.json").write_text('{"records": []}')
            before = {p: p.read_bytes() for p in t.rglob("*") if p.is_file()}
            err = io.StringIO()
            try:
                with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
                    cli.main([a.format(tmp=t, hf=t / "hf") for a in argv])
            except SystemExit as e:
                if {p: p.read_bytes() for p in t.rglob("*") if p.is_file()} != before:
                    raise Wrong("a refused command changed its files") from None
                last = err.getvalue().strip().splitlines()[-1:] or [""]
                # argparse: "treeattn-engine bench: error: argument --flag: message", exit 2
                msg = last[0].split("error: ", 1)[-1]
                raise (ValueError if e.code == 2 else RuntimeError)(msg) from None
    return run


def cases() -> List[Case]:
    if eh is None:
        return []
    out = [Case(f"engine: {name}", _engine_call(setup), arg, exc=(exc,))
           for name, setup, exc, arg in eh.CASES]
    out += [Case("treeattn-engine " + " ".join(argv), _cli_call(argv), f"argument {flag}",
                 exc=(ValueError,)) for argv, flag in eh.CLI_CASES]
    return out


def _fork_probe(n: int):
    def call():
        eng = Engine(tiny(), "sdpa", page_size=4, num_pages=n + 8, seed=0)
        sid, _ = eng.prefill([1, 2, 3])
        eng.fork(sid, n)
    return call


def _pages_for_step_probe(n: int):
    eng = Engine(tiny(), "sdpa", page_size=4, num_pages=n + 8, seed=0)
    sid, _ = eng.prefill([1, 2, 3])
    rows = [sid] + eng.fork(sid, n - 1)
    return lambda: eng.cache.pages_for_step(rows)


def _new_seq_probe(n: int):
    """A sequence of n prompt tokens: new_seq, one append per token (block hashes), free."""
    kv = Engine(tiny(), "sdpa", page_size=4, num_pages=n // 4 + 8, seed=0).cache
    prompt = [1 + i % 200 for i in range(n)]

    def call():
        sid, cached = kv.new_seq(prompt)
        for tok in prompt[cached:]:
            kv.append(sid, tok)
        kv.free_seq(sid)
    return call


def probes() -> List[Probe]:
    if eh is None:
        return []
    return [
        Probe("engine: fork(sid, n)", _fork_probe, 5_000),
        Probe("engine: pages_for_step of n rows", _pages_for_step_probe, 5_000),
        Probe("engine: KV cache sequence of n prompt tokens", _new_seq_probe, 20_000),
    ]
