"""The subpackages built on treeattn (treeattn.engine, treeattn.serving, treeattn.integrations)
use the public treeattn API alone: what they import from treeattn is a name that
treeattn/__init__.py exports (``__all__``) or a public module (no path component starting with
an underscore), their own subpackage's modules aside; and they touch no private member of the
exported objects (``Plan._update``, ``plan._made_from``, ``treeattn._api``, ...). Checked on the
source with ``ast``, so modules whose dependencies (torch, vllm) are missing here are checked
too."""

from __future__ import annotations

import ast
from pathlib import Path
from typing import List, Set

import pytest

import treeattn

PKG = Path(__file__).resolve().parents[2] / "python" / "treeattn"
CLIENTS = ["engine", "serving", "integrations"]


def _exports() -> Set[str]:
    """__all__ of treeattn/__init__.py (read from the source) plus its public submodules."""
    tree = ast.parse((PKG / "__init__.py").read_text())
    names: Set[str] = set()
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(
                isinstance(t, ast.Name) and t.id == "__all__" for t in node.targets):
            names = set(ast.literal_eval(node.value))
    assert names, "treeattn/__init__.py has no __all__"
    subs = {p.stem for p in PKG.iterdir()
            if not p.name.startswith("_") and (p.suffix == ".py" or (p / "__init__.py").exists())}
    return names | subs


def _private_members() -> Set[str]:
    """Private (single underscore) attributes of treeattn's exported objects, of a tree and of a
    Plan."""
    tree = treeattn.PrefixTree.from_levels("N=1 C=4")
    objs = [getattr(treeattn, n) for n in treeattn.__all__]
    objs += [tree, treeattn.plan(tree, 4, 1, 64)]
    names = set()
    for o in objs:
        names |= {n for n in dir(o) if n.startswith("_") and not n.startswith("__")}
        names |= {n for n in getattr(o, "__dict__", {}) if n.startswith("_")
                  and not n.startswith("__")}
    return names


def _is_private(dotted: str) -> bool:
    return any(part.startswith("_") and not part.startswith("__") for part in dotted.split("."))


def violations(source: str, module: str, exports: Set[str], private: Set[str]) -> List[str]:
    """What `source` (the module named `module`, e.g. treeattn.engine.kv, or
    treeattn.engine for a package's __init__) uses of treeattn beyond its public API."""
    parts = module.split(".")
    own = ".".join(parts[:2])  # treeattn.engine: its own private modules are its business
    is_pkg = module.endswith(".__init__")
    if is_pkg:
        parts = parts[:-1]
    pkg = parts if is_pkg else parts[:-1]
    bad: List[str] = []
    nodes = list(ast.walk(ast.parse(source)))
    aliases = {a.asname or "treeattn" for n in nodes if isinstance(n, ast.Import)
               for a in n.names  # local names bound to the treeattn module
               if a.name == "treeattn" or (a.asname is None and a.name.startswith("treeattn."))}

    def check_module(name: str, line: int) -> None:
        if name.split(".")[0] != "treeattn" or name == own or name.startswith(own + "."):
            return
        if _is_private(name):
            bad.append(f"{line}: imports {name}")
        elif name.count(".") >= 1 and name.split(".")[1] not in exports:
            bad.append(f"{line}: imports {name} (not exported by treeattn)")

    for node in nodes:
        if isinstance(node, ast.Import):
            for a in node.names:
                check_module(a.name, node.lineno)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = pkg[:len(pkg) - (node.level - 1)]
                name = ".".join(base + ([node.module] if node.module else []))
            else:
                name = node.module or ""
            check_module(name, node.lineno)
            if name == "treeattn":
                for a in node.names:
                    if a.name not in exports:
                        bad.append(f"{node.lineno}: imports treeattn.{a.name} (not exported)")
            elif name.startswith("treeattn.") and not (name == own or name.startswith(own + ".")):
                for a in node.names:
                    if _is_private(a.name):
                        bad.append(f"{node.lineno}: imports {a.name} from {name}")
        elif isinstance(node, ast.Attribute):
            if isinstance(node.value, ast.Name) and node.value.id in aliases:
                if not node.attr.startswith("__") and node.attr not in exports:
                    bad.append(f"{node.lineno}: uses treeattn.{node.attr} (not exported)")
            elif node.attr in private and not (isinstance(node.value, ast.Name)
                                               and node.value.id in ("self", "cls")):
                bad.append(f"{node.lineno}: uses .{node.attr} (private to treeattn)")
    return bad


def _modules():
    for sub in CLIENTS:
        for path in sorted((PKG / sub).rglob("*.py")):
            rel = path.relative_to(PKG.parent).with_suffix("")
            yield pytest.param(path, ".".join(rel.parts), id=str(rel))


@pytest.fixture(scope="module")
def api():
    return _exports(), _private_members()


@pytest.mark.parametrize("path,module", list(_modules()))
def test_client_uses_public_api_only(api, path, module):
    assert violations(path.read_text(), module, *api) == []


def test_every_client_subpackage_is_checked():
    found = {m.values[1].split(".")[1] for m in _modules()}
    assert found == set(CLIENTS)


@pytest.mark.parametrize("source,flagged", [
    ("from .._api import _int_arg", True),
    ("from .. import _api", True),
    ("from treeattn import _treeattn", True),
    ("import treeattn._treeattn", True),
    ("from treeattn._frameworks import device_index", True),
    ("import treeattn\ntreeattn._api.plan", True),
    ("import treeattn as ta\nta._with_cuda", True),
    ("def f():\n    return treeattn._api\nimport treeattn", True),
    ("def f(p):\n    return p._made_from", True),
    ("def f(p, s):\n    p._update(s, 0)", True),
    ("from treeattn.serving.core import _device_of", True),
    # public names, the client's own private modules, other packages
    ("from treeattn import plan, decode, check_int, PrefixTree", False),
    ("from .. import PrefixTree", False),
    ("from ._checks import int_arg", False),
    ("from .backends import _helper", False),
    ("from treeattn.serving import ServingCore", False),
    ("import treeattn\ntreeattn.plan; treeattn.serving.TreeSync; treeattn.__version__", False),
    ("import numpy as np\nnp._NoValue", False),
    ("class A:\n    def f(self):\n        return self._update()", False),
])
def test_violations_catches_private_use(api, source, flagged):
    assert bool(violations(source, "treeattn.engine.kv", *api)) == flagged, source
