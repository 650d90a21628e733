"""The documented commands stay true: the fenced code blocks of README.md and docs/*.md that carry
a doc-test marker run here, on the CPU (blocks marked gpu on a GPU, where there is one), and must
succeed.

Marker: an HTML comment on the last non-blank line before the fence (invisible when rendered):

    <!-- doc-test -->                 run the block as it is
    <!-- doc-test: setup=NAME -->     a python block that uses inputs it does not define (q,
                                      k_cache, ...): SETUPS[NAME] defines small ones first
    <!-- doc-test: continues ... -->  a python block that goes on from the file's previous
                                      python block: that one (with its setup) runs first
    <!-- doc-test: gpu ... -->        needs a CUDA GPU: skipped, with that reason, without one
    <!-- doc-test: skip REASON -->    not run; the reason shows in pytest's skip list

python blocks run in a fresh interpreter (this one's executable) after their setup. bash blocks
run command by command (continuation lines joined) with `bash -e -o pipefail` and no CUDA device
visible (CPU paths and sizes, as in CI, on any machine), in one scratch folder per block that
links the repository's tests/, data/, docs/, bench/, tools/ and python/ and holds
build/treeattn (the CLI this checkout built: $TREEATTN_CLI, build/treeattn or
build-cpu/treeattn), with this interpreter's bin folder first on PATH (python3,
treeattn-engine); a command whose comment starts with "# GPU" is a GPU command and is skipped
(they take minutes). Blocks without a marker are listed as skipped ("no doc-test marker"), so
what is not checked stays visible."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import List, Optional

import pytest

from conftest import cli_path

ROOT = Path(__file__).resolve().parents[2]
DOCS = [ROOT / "README.md"] + sorted((ROOT / "docs").glob("*.md"))
MARK = re.compile(r"^<!--\s*doc-test(?::\s*(.*?))?\s*-->$")
FENCE = re.compile(r"^```(\w*)\s*$")
LINKED = ["tests", "data", "docs", "bench", "tools", "python"]

# Inputs of python blocks that use what a caller already has (block tables, caches, queries):
# two requests sharing two pages of an 8-page cache whose pages 5-7 are free (so the largest page
# id + 1 is not the cache's page count), the first with its last page full; Llama-shaped heads
# (32/8, head_dim 128).
_PAGED = """
import numpy as np
rng = np.random.default_rng(0)
num_layers = 2
block_tables = np.array([[1, 2, 3], [1, 2, 4]], dtype=np.int32)
seq_lens = np.array([48, 37], dtype=np.int32)
k_cache = rng.standard_normal((num_layers, 8, 16, 8, 128)).astype(np.float32)
v_cache = rng.standard_normal((num_layers, 8, 16, 8, 128)).astype(np.float32)
q = rng.standard_normal((num_layers, 2, 32, 128)).astype(np.float32)
"""
SETUPS = {
    "paged": _PAGED,
    "paged_torch": _PAGED + """
import torch
block_tables, seq_lens = torch.from_numpy(block_tables), torch.from_numpy(seq_lens)
k_cache, v_cache, q = (torch.from_numpy(x).half() for x in (k_cache, v_cache, q))
""",
    # the CUDA-graph snippet of docs/python.md (after the block before it): one layer's caches
    # on the GPU, an output buffer and a page the engine's allocator hands out
    "graph": """
k_cache, v_cache, q = (x[0].cuda() for x in (k_cache, v_cache, q))
out = torch.empty_like(q)
free_page = 6
""",
}


@dataclass
class Block:
    path: Path
    line: int  # of the opening fence, 1-based
    lang: str
    code: str
    marker: Optional[str]  # None: no marker; else the text after "doc-test:" ("" for none)

    @property
    def where(self) -> str:
        return f"{self.path.relative_to(ROOT)}:{self.line}"


def parse(path: Path) -> List[Block]:
    out, lines = [], path.read_text().splitlines()
    i = 0
    while i < len(lines):
        m = FENCE.match(lines[i])
        if not m:
            i += 1
            continue
        j = i - 1
        while j >= 0 and not lines[j].strip():
            j -= 1
        mk = MARK.match(lines[j].strip()) if j >= 0 else None
        end = i + 1
        while end < len(lines) and not lines[end].startswith("```"):
            end += 1
        out.append(Block(path, i + 1, m.group(1), "\n".join(lines[i + 1:end]),
                         None if mk is None else (mk.group(1) or "")))
        i = end + 1
    return out


def commands(code: str) -> List[str]:
    """A bash block's commands: comment-only and blank lines dropped, continuations joined."""
    out, cur = [], ""
    for line in code.splitlines():
        if not cur and (not line.strip() or line.lstrip().startswith("#")):
            continue
        if line.rstrip().endswith("\\"):
            cur += line.rstrip()[:-1] + " "
            continue
        out.append(cur + line)
        cur = ""
    return out


def gpu_available() -> bool:
    try:
        import torch

        return torch.cuda.is_available()
    except ImportError:
        return False


def previous_python(b: Block) -> Block:
    """The marked python block before `b` in its file."""
    before = [x for x in parse(b.path) if x.lang == "python" and x.marker is not None
              and x.line < b.line]
    assert before, f"{b.where}: 'continues' but no marked python block before it"
    return before[-1]


def python_code(b: Block) -> str:
    """The block's program: what it continues, its setups, its code."""
    words = b.marker.split()
    code = python_code(previous_python(b)) if "continues" in words else ""
    code += "".join(SETUPS[w.split("=", 1)[1]] for w in words if w.startswith("setup="))
    return code + "\n" + b.code + "\n"


def cases():
    for path in DOCS:
        for b in parse(path):
            if b.lang not in ("python", "bash"):
                continue
            if b.lang == "bash" and b.marker is not None and not b.marker.startswith("skip"):
                for k, cmd in enumerate(commands(b.code)):
                    yield pytest.param(b, cmd, id=f"{b.where}#{k + 1} {cmd[:60]}")
            else:
                yield pytest.param(b, None, id=f"{b.where} {b.lang}")


def workdir(b: Block, factory) -> Path:
    """The block's scratch folder (shared by its commands, in order)."""
    d = _WORKDIRS.get(b.where)
    if d is None:
        d = _WORKDIRS[b.where] = factory.mktemp("doc")
        for name in LINKED:
            (d / name).symlink_to(ROOT / name)
        cli = cli_path()
        if cli is not None:
            (d / "build").mkdir()
            (d / "build" / "treeattn").symlink_to(cli)
    return d


_WORKDIRS: dict = {}


def env(gpu: bool = True) -> dict:
    """This interpreter's bin folder first on PATH; without `gpu`, no CUDA device visible (the
    documented commands then take their CPU paths and sizes, as in CI, also on a GPU machine)."""
    e = dict(os.environ)
    e["PATH"] = os.path.dirname(sys.executable) + os.pathsep + e.get("PATH", "")
    e.setdefault("OMP_NUM_THREADS", "2")
    if not gpu:
        e["CUDA_VISIBLE_DEVICES"] = ""
    return e


def run(args, cwd: Path, what: str, gpu: bool = True) -> None:
    r = subprocess.run(args, cwd=cwd, env=env(gpu), capture_output=True, text=True, timeout=600)
    if r.returncode != 0:
        pytest.fail(f"{what} failed (exit {r.returncode}):\n{r.stdout[-3000:]}\n"
                    f"{r.stderr[-3000:]}", pytrace=False)


@pytest.mark.parametrize("block,cmd", list(cases()))
def test_documented_block(block: Block, cmd: Optional[str], tmp_path_factory):
    if block.marker is None:
        pytest.skip(f"{block.where}: no doc-test marker")
    words = block.marker.split()
    if words and words[0] == "skip":
        pytest.skip(f"{block.where}: {' '.join(words[1:]) or 'marked skip'}")
    if "gpu" in words and not gpu_available():
        pytest.skip(f"{block.where}: needs a CUDA GPU")
    cwd = workdir(block, tmp_path_factory)
    if block.lang == "python":
        run([sys.executable, "-c", python_code(block)], cwd, f"python block at {block.where}")
        return
    if re.search(r"#\s*GPU", cmd):
        pytest.skip(f"{block.where}: `{cmd.split('#')[0].strip()}` is a GPU command (minutes; "
                    f"not run by this test)")
    if cmd.split()[0].startswith("build/") and cli_path() is None:
        pytest.skip("the treeattn CLI is not built here (cmake --build build --target treeattn)")
    tool = cmd.split()[0]
    if "/" not in tool and shutil.which(tool, path=env()["PATH"]) is None:
        pytest.skip(f"{tool} is not installed here")
    run(["bash", "-e", "-o", "pipefail", "-c", cmd], cwd, f"`{cmd}` ({block.where})", gpu=False)


def test_markers_parse():
    """Every marker in the docs is one this file understands, names a known setup, and sits on
    a python or bash block."""
    seen = 0
    for path in DOCS:
        for b in parse(path):
            if b.marker is None:
                continue
            seen += 1
            assert b.lang in ("python", "bash"), f"{b.where}: marker on a {b.lang!r} block"
            words = b.marker.split()
            for w in words[:1 if words and words[0] == "skip" else None]:
                assert w in ("gpu", "skip", "continues") or (
                    w.startswith("setup=") and w[6:] in SETUPS), f"{b.where}: {w!r}"
            if "continues" in words:
                previous_python(b)
    assert seen >= 5, "the docs lost their doc-test markers"


def test_calibrate_script_from_an_interpreter_without_the_package():
    """docs/cost_model.md's `python3 tools/calibrate_cost_model.py ...` from an interpreter that
    lacks the treeattn package (here: this one without site-packages): the script's own folder
    must not pass tools/treeattn/ (C++ sources) off as the package; it runs with the
    repository's .venv where that has the package, else says how to install it."""
    r = subprocess.run([sys.executable, "-S", str(ROOT / "tools" / "calibrate_cost_model.py"),
                        "bench/results/h100-2026-11-23-allplanners.json", "--skip-fit"],
                       cwd=ROOT, env=env(), capture_output=True, text=True, timeout=600)
    assert "AttributeError" not in r.stderr, r.stderr[-2000:]
    if r.returncode != 0:
        assert "the treeattn Python package is not installed" in r.stderr, r.stderr[-2000:]
    else:
        assert "h100 preset as built: median_abs_log" in r.stdout
