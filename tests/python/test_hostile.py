"""The adversarial suite of tests/hostile under pytest: every hostile and valid input of every
interface (the treeattn CLI, the Python API, treeattn.engine, the serving core and the vLLM
plugin's config) run isolated by tests/hostile/harness.py must come out `clear` (refused, the
message naming the argument) or `valid` (accepted, answer checked), without a crash, a hang or a
memory blow-up; every size-driven probe must stay linear. A case marked `known` (an open
finding) is a strict xfail. tests/hostile/report.py prints the counts per interface."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "hostile"))
import harness  # noqa: E402

PY_SUITES = ["api", "engine", "serving"]


def _params(suites, kind):
    out = []
    for suite in suites:
        for name, item in harness.load_suite(suite)[kind].items():
            marks = [pytest.mark.xfail(strict=True, reason=item.known)] if item.known else []
            out.append(pytest.param(suite, name, id=f"{suite}: {name}", marks=marks))
    return out


@pytest.fixture(scope="module")
def zygote():
    z = harness.Zygote()
    yield z
    z.close()


@pytest.fixture(scope="module")
def cli():
    path = harness.cli_path()
    if path is None:
        pytest.skip("the treeattn CLI is not built here (cmake --build build --target treeattn)")
    return path


def _ok(res) -> None:
    assert res["outcome"] in harness.GOOD + ("linear",), f"{res['outcome']}: {res.get('detail')}"


@pytest.mark.parametrize("suite,name", _params(PY_SUITES, "cases"))
def test_python_case(zygote, suite, name):
    _ok(zygote.run(suite, name))


@pytest.mark.parametrize("suite,name", _params(["cli"], "cases"))
def test_cli_case(cli, suite, name):
    _ok(harness.run_cli_case(cli, harness.load_suite(suite)["cases"][name]))


@pytest.mark.parametrize("suite,name", _params(PY_SUITES, "probes"))
def test_python_probe(zygote, suite, name):
    _ok(zygote.run(suite, name, "probe"))


@pytest.mark.parametrize("suite,name", _params(["cli"], "probes"))
def test_cli_probe(cli, suite, name):
    _ok(harness.run_cli_probe(cli, harness.load_suite(suite)["probes"][name]))


def test_tables_cover_each_interface():
    """The tables stay as large as the adversarial pass they replay: >= 120 CLI and >= 120 Python
    API inputs, the engine's whole table (its entry points and CLI), the serving core's."""
    import test_engine_hostile as eh

    n = {s: len(harness.load_suite(s)["cases"]) for s in harness.suite_modules()}
    assert n["cli"] >= 120 and n["api"] >= 120, n
    assert n["engine"] == len(eh.CASES) + len(eh.CLI_CASES), n
    assert n["serving"] >= 30, n
    assert all(harness.load_suite(s)["probes"] for s in harness.suite_modules())


def _fake_case(**kw):
    return harness.Case("t", lambda: None, **kw)


@pytest.mark.parametrize("case,error,outcome", [
    (dict(arg="x"), ValueError("x: bad"), "clear"),
    (dict(arg="x"), ValueError("y: bad"), "unclear"),
    (dict(arg="x"), RuntimeError("x: bad"), "unclear"),
    (dict(arg="x", needle="nodes[1]"), ValueError("x: bad (in nodes[2])"), "unclear"),
    (dict(arg="x"), None, "silent"),
    (dict(arg="x"), MemoryError(), "memory"),
    (dict(arg="x"), MemoryError("x: 9 pages, 2 free"), "clear"),
    (dict(), None, "valid"),
    (dict(), AssertionError("max error 1"), "wrong"),
    (dict(arg="x"), harness.Wrong("state changed"), "wrong"),
])
def test_harness_classifies(case, error, outcome):
    """The classification the counts rest on (harness.classify)."""
    assert harness.classify(_fake_case(**case), error)[0] == outcome


SELFTEST = """
import json, sys, time
import harness

def segfault():
    import ctypes
    ctypes.string_at(0)

def allocate():
    blocks = []
    while True:
        blocks.append(bytearray(64 << 20))

cases = [harness.Case("crash", segfault, "x"),
         harness.Case("hang", lambda: time.sleep(60), "x", seconds=0.5),
         harness.Case("memory", allocate, "x", mem_mb=64),
         harness.Case("after them", lambda: None)]
harness._SUITES["self"] = {"cases": {c.name: c for c in cases}, "probes": {}}
print(json.dumps({c.name: harness._fork_one("self", c.name, "case")["outcome"] for c in cases}))
"""


def test_harness_isolates_crashes_hangs_and_memory():
    """A case that kills its process, one that never returns and one that allocates without
    bound are counted as such by the fork-and-judge path, and the case after them still runs."""
    import json
    import subprocess

    r = subprocess.run([sys.executable, "-c", SELFTEST], capture_output=True, text=True,
                       timeout=120, cwd=Path(harness.__file__).parent)
    assert r.returncode == 0, r.stderr[-2000:]
    assert json.loads(r.stdout) == {"crash": "crash", "hang": "hang", "memory": "memory",
                                    "after them": "valid"}
