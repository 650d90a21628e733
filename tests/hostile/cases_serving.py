"""Hostile inputs to the serving core and the integrations' entry points that import without
vLLM / SGLang: treeattn.serving (TreeSync, ServingCore, split_packed_kv) and
treeattn.integrations.vllm.load_config. A refusal must name the argument and leave the
TreeSync / ServingCore as it was (a later valid step still matches the oracle); valid step
sequences are checked against the float64 oracle over the block tables. Plus superlinear probes
of the per-step host work (rows, joins, reordering)."""

from __future__ import annotations

import json
import math
import os
import tempfile
from typing import Any, Callable, List

import numpy as np

from harness import Case, Probe, Wrong

try:
    import torch
    from treeattn.serving import ServingCore, TreeSync, split_packed_kv
except ImportError:  # treeattn.serving needs torch
    torch = None
from treeattn.integrations.vllm import load_config

P, H, HK, D = 4, 4, 2, 64
BT = np.array([[1, 2, 3, 0], [1, 2, 4, 0], [5, 6, 0, 0]], np.int32)
LENS = np.array([10, 9, 7], np.int64)


def oracle(q, k, v, bt, lens):
    """Float64 attention of row r over tokens [0, lens[r]) of bt[r] (numpy, independent of the
    tree and the plan)."""
    out = np.empty(q.shape)
    g = q.shape[1] // k.shape[2]
    for r in range(q.shape[0]):
        n = int(lens[r])
        pages = np.asarray(bt[r][: (n + P - 1) // P], np.int64)
        kk = k[pages].reshape(-1, k.shape[2], D)[:n].astype(np.float64)
        vv = v[pages].reshape(-1, k.shape[2], D)[:n].astype(np.float64)
        qq = q[r].astype(np.float64).reshape(k.shape[2], g, D)
        s = np.einsum("hgd,nhd->hgn", qq, kk) / math.sqrt(D)
        e = np.exp(s - s.max(-1, keepdims=True))
        out[r] = np.einsum("hgn,nhd->hgd", e / e.sum(-1, keepdims=True), vv).reshape(-1, D)
    return out


class Core:
    """A ServingCore over 16 pages that has run one step of BT / LENS."""

    def __init__(self) -> None:
        self.core = ServingCore(H, HK, D, P, num_pages=16, verify=True)
        rng = np.random.default_rng(5)
        self.k = rng.standard_normal((16, P, HK, D), dtype=np.float32)
        self.v = rng.standard_normal((16, P, HK, D), dtype=np.float32)
        self.core.prepare(BT, LENS)

    def step_matches(self, bt, lens) -> None:
        """prepare + decode of one step, against the oracle (padding rows left out)."""
        self.core.prepare(bt, lens)
        bt, lens = np.asarray(bt), np.asarray(lens)
        q = np.random.default_rng(len(lens)).standard_normal((len(lens), H, D), dtype=np.float32)
        out = self.core.decode(torch.from_numpy(q), torch.from_numpy(self.k),
                               torch.from_numpy(self.v)).numpy()
        real = lens > 0
        ref = oracle(q[real], self.k, self.v, bt[real], lens[real])
        err = float(np.abs(out[real] - ref).max())
        assert err < 1e-4, f"max error {err:g} vs the oracle"


def refused(call: Callable[[Core], Any]):
    """call(core) must raise; the core must then still run the next step correctly."""
    def run() -> None:
        c = Core()
        tree = c.core.sync.tree.to_json()
        try:
            call(c)
        finally:
            if c.core.sync.tree.to_json() != tree:
                raise Wrong("the synced tree changed although the step was refused")
            try:
                c.step_matches(BT, LENS + 1)
            except AssertionError as e:
                raise Wrong(f"the next step after the refusal is wrong: {e}") from None
    return run


def _sync_cases() -> List[Case]:
    prep = lambda bt, lens: refused(lambda c: c.core.prepare(bt, lens))  # noqa: E731
    return [
        Case("TreeSync page_size 0", lambda: TreeSync(0), "page_size"),
        Case("TreeSync page_size 4097", lambda: TreeSync(4097), "page_size"),
        Case("TreeSync page_size '4'", lambda: TreeSync("4"), "page_size"),
        Case("TreeSync num_pages -1", lambda: TreeSync(P, -1), "num_pages"),
        Case("TreeSync num_pages 2^31", lambda: TreeSync(P, 2**31), "num_pages"),
        Case("TreeSync pad_page = num_pages", lambda: TreeSync(P, 16, pad_page=16), "pad_page"),
        Case("TreeSync pad_page -1", lambda: TreeSync(P, 16, pad_page=-1), "pad_page"),
        Case("prepare seq_lens negative", prep(BT, [10, -1, 7]), "seq_lens"),
        Case("prepare seq_lens 2^31", prep(BT, [10, 2**31, 7]), "seq_lens"),
        Case("prepare seq_lens float", prep(BT, np.array([10.0, 9.0, 7.0])), "seq_lens"),
        Case("prepare seq_lens 2-D", prep(BT, LENS[None]), "seq_lens"),
        Case("prepare seq_lens empty", prep(BT[:0], LENS[:0]), "seq_lens"),
        Case("prepare seq_lens strings", prep(BT, ["10", "9", "7"]), "seq_lens"),
        Case("prepare seq_lens None", prep(BT, None), "seq_lens"),
        Case("prepare rows differ", prep(BT, LENS[:2]), "block_tables"),
        Case("prepare too few pages", prep(BT[:, :2], LENS), "block_tables"),
        Case("prepare page out of range", prep(np.where(BT == 4, 16, BT), LENS), "block_tables"),
        Case("prepare page negative", prep(np.where(BT == 4, -2, BT), LENS), "block_tables"),
        Case("prepare page 2^40", prep(np.where(BT == 4, np.int64(2**40), BT.astype(np.int64)),
                                       LENS), "block_tables"),
        Case("prepare block_tables float", prep(BT.astype(np.float32), LENS), "block_tables"),
        Case("prepare block_tables 1-D", prep(BT[0], LENS[:1]), "block_tables"),
        Case("prepare block_tables object", prep(np.array([[1, "a"]], object), [4]),
             "block_tables"),
        Case("prepare block_tables ragged lists", prep([[1, 2, 3], [1]], [10, 9]),
             "block_tables"),
        Case("prepare block_tables meta tensor", prep(
            torch.zeros((3, 4), dtype=torch.int32, device="meta"), LENS), "block_tables"),
        Case("prepare page after two prefixes", prep(
            [[1, 2, 8], [3, 4, 8], [5, 6, 0]], [10, 10, 7]), "block_tables"),
        Case("prepare rows sharing a partly filled page (valid)", lambda: Core().step_matches(
            [[1, 2, 3], [1, 2, 3], [5, 6, 0]], [10, 11, 7])),
        Case("prefetch grow wrong length", refused(lambda c: c.core.prefetch([True])), "grow"),
        Case("prefetch grow strings", refused(lambda c: c.core.prefetch(["x", "y", "z"])),
             "grow"),
        Case("prefetch grow 2-D", refused(lambda c: c.core.prefetch(np.ones((3, 1), bool))),
             "grow"),
        Case("steps: joins, finishes, moved rows, padding (valid)", _steps_valid),
        Case("steps: torch CPU int tensors (valid)", lambda: Core().step_matches(
            torch.from_numpy(BT), torch.from_numpy(LENS + 1))),
        Case("prefetch then the predicted step (valid)", _prefetch_valid),
    ]


def _steps_valid() -> None:
    c = Core()
    c.step_matches(BT, LENS + 1)  # appends
    c.step_matches([[5, 6, 7, 0], [1, 2, 3, 0]], [9, 12])  # one finished, moved, a new page
    c.step_matches([[5, 6, 7, 0], [1, 2, 3, 0], [1, 2, 8, 0], [0, 0, 0, 0]],
                   [10, 12, 9, 0])  # a join after the shared pages and a padding row
    c.step_matches([[5, 6, 7, 0], [1, 2, 3, 10]], [11, 13])  # one finished, a new page


def _prefetch_valid() -> None:
    c = Core()
    assert c.core.prefetch()
    c.step_matches(BT, LENS + 1)
    assert c.core.counts["planned_ahead"] == 1, c.core.counts


def _core_cases() -> List[Case]:
    def core(**kw):
        return lambda: ServingCore(**{**dict(num_qo_heads=H, num_kv_heads=HK, head_dim=D,
                                             page_size=P), **kw})

    c = [
        Case("ServingCore num_qo_heads 0", core(num_qo_heads=0), "num_qo_heads"),
        Case("ServingCore num_qo_heads '4'", core(num_qo_heads="4"), "num_qo_heads"),
        Case("ServingCore heads not dividing", core(num_qo_heads=3), "num_qo_heads"),
        Case("ServingCore head_dim 96", core(head_dim=96), "head_dim"),
        Case("ServingCore head_dim 2^40", core(head_dim=2**40), "head_dim"),
        Case("ServingCore page_size 0", core(page_size=0), "page_size"),
        Case("ServingCore num_pages -1", core(num_pages=-1), "num_pages"),
        Case("ServingCore pad_page past num_pages", core(num_pages=16, pad_page=16), "pad_page"),
        Case("ServingCore planner unknown", core(planner="nope"), "planner"),
        Case("ServingCore preset unknown", core(preset="b200"), "device"),
        Case("ServingCore kv_dtype int8", core(kv_dtype="int8"), "dtype"),
        Case("ServingCore headroom 0.5", core(headroom=0.5), "headroom"),
        Case("ServingCore headroom nan", core(headroom=math.nan), "headroom"),
        Case("ServingCore headroom inf", core(headroom=math.inf), "headroom"),
        Case("ServingCore headroom '2'", core(headroom="2"), "headroom"),
        Case("ServingCore device 5", core(device=5), "device"),
        Case("ServingCore device 'gpu'", core(device="gpu"), "device"),
        Case("ServingCore.decode before prepare", lambda: ServingCore(H, HK, D, P).decode(
            torch.zeros(3, H, D), torch.zeros(16, P, HK, D), torch.zeros(16, P, HK, D)), "plan"),
        Case("ServingCore.decode q wrong rows", refused(lambda c: c.core.decode(
            torch.zeros(2, H, D), torch.from_numpy(c.k), torch.from_numpy(c.v))), "q"),
        Case("ServingCore.decode k too few pages", refused(lambda c: c.core.decode(
            torch.zeros(3, H, D), torch.from_numpy(c.k[:4]), torch.from_numpy(c.v[:4]))),
            "k_cache"),
        Case("ServingCore.decode sm_scale -1", refused(lambda c: c.core.decode(
            torch.zeros(3, H, D), torch.from_numpy(c.k), torch.from_numpy(c.v), sm_scale=-1.0)),
            "sm_scale"),
        Case("split_packed_kv 3-D", lambda: split_packed_kv(torch.zeros(4, 2, 8), 4), "kv_cache"),
        Case("split_packed_kv last dim", lambda: split_packed_kv(torch.zeros(4, 2, P, 12), 4),
             "kv_cache"),
        Case("split_packed_kv a list", lambda: split_packed_kv([[1]], 4), "kv_cache"),
        Case("split_packed_kv head_size '4'", lambda: split_packed_kv(torch.zeros(4, 2, P, 8),
                                                                      "4"), "head_size"),
        Case("split_packed_kv views (valid)", _split_valid),
    ]
    return c


def _split_valid() -> None:
    k = torch.randn(6, P, HK, D)
    v = torch.randn(6, P, HK, D)
    kk, vv = split_packed_kv(torch.cat([k, v], -1).transpose(1, 2), D)
    assert torch.equal(kk, k) and torch.equal(vv, v)


def _config(contents: Any, env: dict = None):
    """load_config with TREEATTN_VLLM_CONFIG naming a file holding `contents` (JSON, or raw
    bytes), plus `env`."""
    def run() -> None:
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "cfg.json")
            with open(path, "wb") as f:
                f.write(contents if isinstance(contents, bytes) else json.dumps(contents).encode())
            load_config({"TREEATTN_VLLM_CONFIG": path, **(env or {})})
    return run


def _vllm_cases() -> List[Case]:
    lc = load_config
    c = []
    for value in ("abc", "0.5", "nan", "inf", "-1", "1e400", ""):
        if value:
            c.append(Case(f"vllm TREEATTN_VLLM_HEADROOM={value!r}",
                          lambda value=value: lc({"TREEATTN_VLLM_HEADROOM": value}),
                          "TREEATTN_VLLM_HEADROOM"))
    c += [
        Case("vllm TREEATTN_VLLM_PLANNER unknown", lambda: lc({"TREEATTN_VLLM_PLANNER": "nope"}),
             "TREEATTN_VLLM_PLANNER"),
        Case("vllm TREEATTN_VLLM_PRESET unknown", lambda: lc({"TREEATTN_VLLM_PRESET": "b200"}),
             "TREEATTN_VLLM_PRESET"),
        Case("vllm config file missing", lambda: lc({"TREEATTN_VLLM_CONFIG": "/nonexistent.json"}),
             "TREEATTN_VLLM_CONFIG"),
        Case("vllm config a directory", lambda: lc({"TREEATTN_VLLM_CONFIG": "/tmp"}),
             "TREEATTN_VLLM_CONFIG"),
        Case("vllm config not JSON", _config(b"planner = auto"), "TREEATTN_VLLM_CONFIG"),
        Case("vllm config invalid UTF-8", _config(b'{"planner": "\xff"}'), "TREEATTN_VLLM_CONFIG"),
        Case("vllm config a list", _config([1, 2]), "TREEATTN_VLLM_CONFIG"),
        Case("vllm config unknown key", _config({"planer": "auto"}), "TREEATTN_VLLM_CONFIG"),
        Case("vllm config planner 5", _config({"planner": 5}), "TREEATTN_VLLM_CONFIG"),
        Case("vllm config headroom true", _config({"headroom": True}), "TREEATTN_VLLM_CONFIG"),
        Case("vllm config headroom 0", _config({"headroom": 0}), "TREEATTN_VLLM_CONFIG"),
        Case("vllm config preset null", _config({"preset": None}), "TREEATTN_VLLM_CONFIG"),
        Case("vllm config deep nesting", _config(b"[" * 100000 + b"]" * 100000),
             "TREEATTN_VLLM_CONFIG"),
        Case("vllm environ not a mapping", lambda: lc(["TREEATTN_VLLM_PLANNER"]), "environ"),
        Case("vllm env over file (valid)", lambda: _config_valid()),
    ]
    return c


def _config_valid() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "cfg.json")
        with open(path, "w") as f:
            json.dump({"planner": "node", "headroom": 3}, f)
        cfg = load_config({"TREEATTN_VLLM_CONFIG": path, "TREEATTN_VLLM_PLANNER": "fasttree",
                           "TREEATTN_VLLM_PRESET": "h200"})
    assert cfg == {"planner": "fasttree", "preset": "h200", "headroom": 3.0}, cfg


def cases() -> List[Case]:
    out = _vllm_cases()
    if torch is not None:
        out = _sync_cases() + _core_cases() + out
    return out


# ---------------------------------------------------------------- probes


def _rows(n: int, lens: int = 10, shared: int = 2):
    """n rows sharing `shared` full pages, each with its own last page."""
    bt = np.zeros((n, shared + 1), np.int64)
    bt[:, :shared] = np.arange(shared)
    bt[:, shared] = shared + np.arange(n)
    return bt, np.full(n, lens, np.int64)


def _sync_steps(n: int, step2):
    """A TreeSync that has seen n rows; the timed call applies step2(bt, lens) to a copy."""
    bt, lens = _rows(n)
    base = TreeSync(P, 0)
    base.update(bt, lens)
    nbt, nlens = step2(bt, lens)

    def call():
        s = TreeSync(P, 0)
        s.tree, s._bt, s._lens, s._pad = base.tree.copy(), base._bt, base._lens, base._pad
        s.update(nbt, nlens)
    return call


def _append_step(bt, lens):
    return bt, lens + 1


def _reverse_step(bt, lens):
    return bt[::-1].copy(), lens[::-1] + 1


def _join_step(bt, lens):
    """Every row finished; as many new rows joining after the shared pages."""
    n = len(lens)
    nbt = bt.copy()
    nbt[:, 2] = 2 + n + np.arange(n)
    return nbt, lens


def probes() -> List[Probe]:
    if torch is None:
        return []
    return [
        Probe("TreeSync: first step of n rows", lambda n: (lambda bt, lens: lambda: TreeSync(
            P, 0).update(bt, lens))(*_rows(n)), 20_000),
        Probe("TreeSync: n rows append", lambda n: _sync_steps(n, _append_step), 20_000),
        Probe("TreeSync: n rows reversed", lambda n: _sync_steps(n, _reverse_step), 5_000),
        Probe("TreeSync: n rows finish, n join", lambda n: _sync_steps(n, _join_step), 5_000),
        Probe("ServingCore.prepare: n rows", lambda n: (lambda bt, lens: lambda: ServingCore(
            H, HK, D, P).prepare(bt, lens))(*_rows(n)), 5_000),
    ]
