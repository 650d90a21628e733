"""Hostile inputs to treeattn's Python API: PrefixTree constructors, views and updates, plan(),
the Plan object, decode() and reference() (shapes, dtypes, devices, strides, aliasing, NaN
scales, stale plans, huge sizes; numpy and torch CPU tensors through DLPack), the torch custom
op, DeviceInfo, check_int and the workload lists. A refusal must name the argument and, for the
updates and Plan.update, leave the object as it was; valid inputs are checked against the
float64 oracle (treeattn.reference). Plus the superlinear probes of the size-driven inputs."""

from __future__ import annotations

import math
import pathlib
from typing import Any, Callable, List

import numpy as np

import hostile_json
import treeattn
from harness import Case, Probe, Wrong

try:
    import torch
except ImportError:  # the torch cases are left out
    torch = None

PT = treeattn.PrefixTree
H, HK, D, P = 4, 1, 64, 16
BT = np.array([[0, 1], [0, 2]], np.int32)  # two requests sharing page 0
LENS = np.array([20, 30], np.int64)


class Small:
    """A two-query tree over 8 pages (pages 3.. free), its plan and float32 q / k / v."""

    def __init__(self) -> None:
        self.tree = PT.from_block_tables(BT, LENS, page_size=P, num_pages=8)
        self.tree.free_pages = list(range(3, 8))
        self.plan = treeattn.plan(self.tree, H, HK, D)
        rng = np.random.default_rng(7)
        self.q = rng.standard_normal((2, H, D), dtype=np.float32)
        self.k = rng.standard_normal((8, P, HK, D), dtype=np.float32)
        self.v = rng.standard_normal((8, P, HK, D), dtype=np.float32)

    def ref(self, q=None):
        return treeattn.reference(self.tree, self.q if q is None else q, self.k, self.v)

    def t(self):
        """The torch CPU views of q, k, v."""
        return torch.from_numpy(self.q), torch.from_numpy(self.k), torch.from_numpy(self.v)


def close(out, ref, tol: float = 1e-4) -> None:
    out = np.asarray(out.float() if torch is not None and torch.is_tensor(out) else out,
                     dtype=np.float64)
    err = float(np.max(np.abs(out - ref)))
    assert err <= tol * max(1.0, float(np.max(np.abs(ref)))), f"max error {err:g} vs the oracle"


def tree_state(t: PT):
    return (t.version, t.to_json(), t.free_pages, t.num_pages, t.num_queries)


def unchanged(make: Callable[[Small], Any], call: Callable[[Small], Any]):
    """A refused update: call(s) must raise, and leave s.tree exactly as it was."""
    def run() -> None:
        s = Small()
        make(s)
        before = tree_state(s.tree)
        try:
            call(s)
        finally:
            if tree_state(s.tree) != before:
                raise Wrong("the tree changed although the update was refused")
    return run


def on(call: Callable[[Small], Any], setup: Callable[[Small], Any] = lambda s: None):
    """A case calling call(s) on a fresh Small (setup(s) first, not timed apart)."""
    def run() -> None:
        s = Small()
        setup(s)
        call(s)
    return run


# ---------------------------------------------------------------- tables


def _block_table_cases() -> List[Case]:
    fbt = PT.from_block_tables
    same = PT.from_block_tables(BT, LENS).to_json()

    def equal(t) -> None:
        assert t.to_json() == same, "a different tree than from the contiguous int32 table"

    c = [
        Case("from_block_tables 3-D", lambda: fbt(BT[None], LENS), "block_tables"),
        Case("from_block_tables float", lambda: fbt(BT.astype(np.float32), LENS), "block_tables"),
        Case("from_block_tables bool", lambda: fbt(BT.astype(bool), LENS), "block_tables"),
        Case("from_block_tables uint64", lambda: fbt(BT.astype(np.uint64), LENS), "block_tables"),
        Case("from_block_tables page 2^31", lambda: fbt(np.array([[2**31]], np.int64), np.array([4])),
             "block_tables"),
        Case("from_block_tables page -1", lambda: fbt(np.array([[-1]], np.int32), [4]),
             "block_tables"),
        Case("from_block_tables row too short", lambda: fbt(BT, np.array([20, 40])),
             "block_tables"),
        Case("from_block_tables no rows", lambda: fbt(np.zeros((0, 2), np.int32),
                                                      np.zeros(0, np.int64)), "block_tables"),
        Case("from_block_tables page repeated in a row",
             lambda: fbt(np.array([[0, 0]], np.int32), [20]), "nodes[0].pages[1]"),
        Case("from_block_tables page aliased across rows",
             lambda: fbt(np.array([[0, 1], [2, 1]], np.int32), [20, 20]), "nodes[1].pages[1]"),
        Case("from_block_tables seq_lens negative", lambda: fbt(BT, np.array([-1, 30])),
             "seq_lens"),
        Case("from_block_tables seq_lens 0", lambda: fbt(BT, np.array([0, 30])), "seq_lens"),
        Case("from_block_tables seq_lens 2^63-1", lambda: fbt(BT, np.array([2**63 - 1, 3])),
             "seq_lens"),
        Case("from_block_tables seq_lens length", lambda: fbt(BT, LENS[:1]), "seq_lens"),
        Case("from_block_tables seq_lens 2-D", lambda: fbt(BT, LENS[None]), "seq_lens"),
        Case("from_block_tables seq_lens float", lambda: fbt(BT, LENS.astype(float)), "seq_lens"),
        Case("from_block_tables num_pages -1", lambda: fbt(BT, LENS, num_pages=-1), "num_pages"),
        Case("from_block_tables num_pages below the pages", lambda: fbt(BT, LENS, num_pages=2),
             "block_tables[1][1]"),
        Case("from_block_tables lists with a str", lambda: fbt([["a"]], [4]), "block_tables"),
        Case("from_block_tables lists with a float", lambda: fbt([[0.0]], [4]), "block_tables"),
        Case("from_block_tables lists page 2^40", lambda: fbt([[2**40]], [4]), "block_tables"),
        Case("from_block_tables lists row too short", lambda: fbt([[0]], [40]),
             "block_tables[0]"),
        Case("from_block_tables lists seq_lens str", lambda: fbt([[0]], ["4"]), "seq_lens"),
        Case("from_block_tables a str", lambda: fbt("abc", [4]), "block_tables"),
        Case("from_block_tables None", lambda: fbt(None, [4]), "block_tables"),
        Case("from_block_tables non-contiguous (valid)",
             lambda: equal(fbt(np.array([[0, 9, 1, 9], [0, 9, 2, 9]], np.int32)[:, ::2], LENS))),
        Case("from_block_tables Fortran order (valid)",
             lambda: equal(fbt(np.asfortranarray(BT), LENS))),
        Case("from_block_tables int64 and padding (valid)",
             lambda: equal(fbt(np.array([[0, 1, -1, -1], [0, 2, 7, -1]], np.int64), LENS))),
        Case("from_block_tables lists (valid)", lambda: equal(fbt(BT.tolist(), LENS.tolist()))),
        Case("from_block_tables 2^31-1 tokens, one page short", lambda: fbt(
            np.zeros((1, 1), np.int32), np.array([2**31 - 1]), page_size=4096), "block_tables"),
    ]
    for v, what in ((0, "0"), (-1, "-1"), (4097, "4097"), (2**31, "2^31"), (16.0, "16.0"),
                    (True, "True"), (None, "None"), ("16", "'16'")):
        c.append(Case(f"from_block_tables page_size {what}",
                      lambda v=v: fbt(BT, LENS, page_size=v), "page_size"))
    if torch is not None:
        c.append(Case("from_block_tables torch CPU tensors (valid)",
                      lambda: equal(fbt(torch.from_numpy(BT), torch.from_numpy(LENS)))))
    return c


def _json_cases() -> List[Case]:
    c = []
    for name, text, where in hostile_json.texts():
        if where is None:
            c.append(Case(f"from_json_str: {name}", lambda text=text: PT.from_json_str(text)))
        elif b"\xff" in text or b"\xc0" in text or b"\xc3" in text:
            c.append(Case(f"from_json_str: {name}", lambda text=text: PT.from_json_str(text),
                          "text", needle="UTF-8"))
        else:  # the message names the place in the text: "json: ... (in nodes[0])", "nodes[1].id"
            c.append(Case(f"from_json_str: {name}", lambda text=text: PT.from_json_str(text), "",
                          needle=where))
    good = str(pathlib.Path(__file__).resolve().parents[1] / "data" / "issue_example.json")
    c += [
        Case("from_json_str None", lambda: PT.from_json_str(None), "text"),
        Case("from_json_str an int", lambda: PT.from_json_str(16), "text"),
        Case("from_json nonexistent", lambda: PT.from_json("/nonexistent/tree.json"), "path"),
        Case("from_json a directory", lambda: PT.from_json("/tmp"), "path"),
        Case("from_json /dev/zero", lambda: PT.from_json("/dev/zero"), "path", seconds=10,
             mem_mb=300),
        Case("from_json a NUL in the path", lambda: PT.from_json(good + "\0.json"), "path"),
        Case("from_json an int", lambda: PT.from_json(5), "path"),
        Case("from_json None", lambda: PT.from_json(None), "path"),
        Case("from_json pathlib.Path (valid)",
             lambda: assert_eq(PT.from_json(pathlib.Path(good)).to_json(),
                               PT.from_json(good).to_json())),
    ]
    return c


def assert_eq(a, b) -> None:
    assert a == b, f"{a!r} != {b!r}"


def _builder_cases() -> List[Case]:
    return [
        Case("from_levels None", lambda: PT.from_levels(None), "levels"),
        Case("from_levels C=0", lambda: PT.from_levels("N=1 C=0"), "C"),
        Case("from_levels 10^8 nodes", lambda: PT.from_levels("N=1,100000000 C=1,1"), "N"),
        Case("from_levels 3.75e8 pages", lambda: PT.from_levels("N=1,2 C=2000000000,2000000000"),
             "pages"),
        Case("from_levels fewer nodes deeper", lambda: PT.from_levels("N=4,2 C=8,8"), "N"),
        Case("from_levels layout", lambda: PT.from_levels("N=1 C=4", layout="random"), "layout"),
        Case("from_levels seed -1", lambda: PT.from_levels("N=1 C=4", seed=-1), "seed"),
        Case("from_levels seed 2^64", lambda: PT.from_levels("N=1 C=4", seed=2**64), "seed"),
        Case("from_workload past the end", lambda: PT.from_workload("fasttree:999"), "workload"),
        Case("from_workload None", lambda: PT.from_workload(None), "key"),
        Case("from_workload layout", lambda: PT.from_workload("fasttree:1", layout=3), "layout"),
        Case("random seed -1", lambda: PT.random(-1), "seed"),
        Case("random max_nodes 2^31-1", lambda: PT.random(0, 2**31 - 1), "max_nodes"),
        Case("random max_tokens_per_node 0", lambda: PT.random(0, max_tokens_per_node=0),
             "max_tokens_per_node"),
        Case("random page_size 0", lambda: PT.random(0, page_size=0), "page_size"),
        Case("random shuffle_pages str", lambda: PT.random(0, shuffle_pages="yes"),
             "shuffle_pages"),
        Case("random then reference (valid)", _random_matches_oracle),
    ]


def _random_matches_oracle() -> None:
    t = PT.random(11, max_nodes=20, max_queries=12)
    p = treeattn.plan(t, 8, 2, 64, planner="auto")
    rng = np.random.default_rng(3)
    q = rng.standard_normal((t.num_queries, 8, 64), dtype=np.float32)
    k = rng.standard_normal((t.num_pages, t.page_size, 2, 64), dtype=np.float32)
    v = rng.standard_normal(k.shape, dtype=np.float32)
    close(treeattn.decode(q, k, v, p), treeattn.reference(t, q, k, v)[0])


def _update_cases() -> List[Case]:
    nop = lambda s: None  # noqa: E731
    kill = lambda s: s.tree.remove_query(1)  # noqa: E731  node index 2 (query 1's leaf) dies
    c = [
        Case("node -1", on(lambda s: s.tree.node(-1)), "node"),
        Case("node None", on(lambda s: s.tree.node(None)), "index"),
        Case("node 2^31", on(lambda s: s.tree.node(2**31)), "index"),
        Case("query_path 99", on(lambda s: s.tree.query_path(99)), "query"),
        Case("query_context -1", on(lambda s: s.tree.query_context(-1)), "query"),
        Case("append_tokens query 99", unchanged(nop, lambda s: s.tree.append_tokens(99, 1)),
             "query"),
        Case("append_tokens k 0", unchanged(nop, lambda s: s.tree.append_tokens(0, 0)), "k"),
        Case("append_tokens k -1", unchanged(nop, lambda s: s.tree.append_tokens(0, -1)), "k"),
        Case("append_tokens k 2^31-1", unchanged(nop, lambda s: s.tree.append_tokens(
            0, 2**31 - 1)), "k"),
        Case("append_tokens k float", unchanged(nop, lambda s: s.tree.append_tokens(0, 1.0)), "k"),
        Case("append_tokens past the free pages", unchanged(
            nop, lambda s: s.tree.append_tokens(0, 200)), "new_pages"),
        Case("append_tokens new_pages -1", unchanged(
            nop, lambda s: s.tree.append_tokens(0, 20, new_pages=[-1, 5])), "new_pages[0]"),
        Case("append_tokens new_pages twice", unchanged(
            nop, lambda s: s.tree.append_tokens(0, 40, new_pages=[5, 5, 6])), "new_pages[1]"),
        Case("append_tokens new_pages in use", unchanged(
            nop, lambda s: s.tree.append_tokens(0, 20, new_pages=[2, 5])), "new_pages[0]"),
        Case("append_tokens new_pages too few", unchanged(
            nop, lambda s: s.tree.append_tokens(0, 60, new_pages=[5])), "new_pages"),
        Case("append_tokens new_pages 2^40", unchanged(
            nop, lambda s: s.tree.append_tokens(0, 20, new_pages=[2**40])), "new_pages[0]"),
        Case("append_tokens new_pages str", unchanged(
            nop, lambda s: s.tree.append_tokens(0, 20, new_pages="56")), "new_pages"),
        Case("append_tokens new_pages None", unchanged(
            nop, lambda s: s.tree.append_tokens(0, 20, new_pages=None)), "new_pages"),
        Case("add_query 99", unchanged(nop, lambda s: s.tree.add_query(99)), "node"),
        Case("add_query on a dead node", unchanged(kill, lambda s: s.tree.add_query(2)), "node"),
        Case("remove_query 99", unchanged(nop, lambda s: s.tree.remove_query(99)), "query"),
        Case("remove_query the last one", unchanged(
            lambda s: s.tree.remove_query(1), lambda s: s.tree.remove_query(0)), "query"),
        Case("fork_query n 0", unchanged(nop, lambda s: s.tree.fork_query(0, 0)), "n"),
        Case("fork_query n -1", unchanged(nop, lambda s: s.tree.fork_query(0, -1)), "n"),
        Case("fork_query n 2^31", unchanged(nop, lambda s: s.tree.fork_query(0, 2**31)), "n"),
        Case("fork_query n 2^24", unchanged(nop, lambda s: s.tree.fork_query(0, 2**24)), "n"),
        Case("fork_query query 99", unchanged(nop, lambda s: s.tree.fork_query(99, 1)), "query"),
        Case("num_pages = -5", unchanged(nop, lambda s: setattr(s.tree, "num_pages", -5)),
             "num_pages"),
        Case("num_pages below a used page", unchanged(
            nop, lambda s: setattr(s.tree, "num_pages", 2)), "num_pages"),
        Case("num_pages below a free page", unchanged(
            nop, lambda s: setattr(s.tree, "num_pages", 5)), "num_pages"),
        Case("num_pages = '8'", unchanged(nop, lambda s: setattr(s.tree, "num_pages", "8")),
             "num_pages"),
        Case("free_pages = 'abc'", unchanged(nop, lambda s: setattr(s.tree, "free_pages", "abc")),
             "free_pages"),
        Case("free_pages = None", unchanged(nop, lambda s: setattr(s.tree, "free_pages", None)),
             "free_pages"),
        Case("free_pages listed twice", unchanged(
            nop, lambda s: setattr(s.tree, "free_pages", [5, 5])), "free_pages[1]"),
        Case("free_pages in use", unchanged(nop, lambda s: setattr(s.tree, "free_pages", [1])),
             "free_pages[0]"),
        Case("free_pages out of range", unchanged(
            nop, lambda s: setattr(s.tree, "free_pages", [99])), "free_pages[0]"),
        Case("free_pages 2^40", unchanged(nop, lambda s: setattr(s.tree, "free_pages", [2**40])),
             "free_pages[0]"),
        Case("updates then decode (valid)", _updates_match_oracle),
    ]
    return c


def _updates_match_oracle() -> None:
    s = Small()
    s.tree.append_tokens(0, 13)  # fills page 1, opens a free page
    first = s.tree.fork_query(1, 2)
    s.tree.append_tokens(first, 5)
    s.tree.remove_query(0)
    s.tree.validate()
    p = treeattn.plan(s.tree, H, HK, D, planner="node")
    q = np.random.default_rng(1).standard_normal((s.tree.num_queries, H, D), dtype=np.float32)
    close(treeattn.decode(q, s.k, s.v, p), treeattn.reference(s.tree, q, s.k, s.v)[0])


def _plan_cases() -> List[Case]:
    def plan(**kw):
        return on(lambda s: treeattn.plan(s.tree, **{**dict(num_qo_heads=H, num_kv_heads=HK,
                                                            head_dim=D), **kw}))

    c = [
        Case("plan tree None", lambda: treeattn.plan(None, H, HK, D), "tree"),
        Case("plan a JSON string as tree", lambda: treeattn.plan(hostile_json.tree(), H, HK, D),
             "tree"),
        Case("plan num_qo_heads 0", plan(num_qo_heads=0), "num_qo_heads"),
        Case("plan num_qo_heads 2^40", plan(num_qo_heads=2**40), "num_qo_heads"),
        Case("plan num_qo_heads '8'", plan(num_qo_heads="8"), "num_qo_heads"),
        Case("plan num_kv_heads not dividing", plan(num_qo_heads=3, num_kv_heads=2),
             "num_kv_heads"),
        Case("plan num_kv_heads -1", plan(num_kv_heads=-1), "num_kv_heads"),
        Case("plan head_dim 96", plan(head_dim=96), "head_dim"),
        Case("plan head_dim 2^40", plan(head_dim=2**40), "head_dim"),
        Case("plan head_dim 64.0", plan(head_dim=64.0), "head_dim"),
        Case("plan planner unknown", plan(planner="bogus"), "planner"),
        Case("plan planner 5", plan(planner=5), "planner"),
        Case("plan device unknown", plan(device="b200"), "device"),
        Case("plan device 5", plan(device=5), "device"),
        Case("plan dtype int8", plan(dtype="int8"), "dtype"),
        Case("plan headroom 0.5", plan(headroom=0.5), "headroom"),
        Case("plan headroom nan", plan(headroom=math.nan), "headroom"),
        Case("plan headroom inf", plan(headroom=math.inf), "headroom"),
        Case("plan headroom 1e30", plan(headroom=1e30), "headroom"),
        Case("plan headroom '2'", plan(headroom="2"), "headroom"),
        Case("plan headroom True", plan(headroom=True), "headroom"),
        Case("plan reuse a str", plan(reuse="plan"), "reuse"),
        Case("plan reuse of another shape", on(lambda s: treeattn.plan(
            s.tree, 8, 2, D, reuse=s.plan)), "plan"),
        Case("plan every planner covers the tree (valid)", _every_planner_valid),
        Case("Plan() dtype_bytes 3", on(lambda s: treeattn.Plan(
            s.tree, "auto", H, HK, D, 3, treeattn.DeviceInfo.preset("h100"), 1.0)), "dtype_bytes"),
        Case("Plan.stats unknown preset", on(lambda s: s.plan.stats("b200")), "device"),
        Case("Plan.stats 3", on(lambda s: s.plan.stats(3)), "device"),
        Case("Plan.update a str", on(lambda s: s.plan.update("x")), "plan"),
        Case("Plan.update another shape", on(lambda s: s.plan.update(
            treeattn.plan(s.tree, 8, 2, D))), "plan"),
        Case("Plan.update a stale plan", on(lambda s: s.plan.update(s.new), _stale_new), "new"),
        Case("Plan.fits a str", on(lambda s: s.plan.fits("x")), "other"),
        Case("Plan.to_device 'cuda:x'", on(lambda s: s.plan.to_device("cuda:x")), "device"),
        Case("Plan.to_device 'cpu'", on(lambda s: s.plan.to_device("cpu")), "device"),
        Case("Plan.to_device 1.5", on(lambda s: s.plan.to_device(1.5)), "device"),
        Case("Plan.to_device stream 'x'", on(lambda s: s.plan.to_device(0, stream="x")),
             ("stream", "device")),
    ]
    if not treeattn.built_with_cuda:
        c.append(Case("Plan.to_device 0 without CUDA", on(lambda s: s.plan.to_device(0)),
                      "device", exc=(RuntimeError,)))
    return c


def _stale_new(s: Small) -> None:
    s.new = treeattn.plan(s.tree, H, HK, D)
    s.tree.append_tokens(0, 1)


def _every_planner_valid() -> None:
    s = Small()
    ref = s.ref()[0]
    for name in treeattn.planners():
        p = treeattn.plan(s.tree, H, HK, D, planner=name)
        p.check()
        close(treeattn.decode(s.q, s.k, s.v, p), ref)


def _decode_cases() -> List[Case]:
    dec = treeattn.decode

    def d(q=None, k=None, v=None, **kw):
        """decode on a fresh Small; q / k / v may be functions of it."""
        def call(s):
            f = lambda x, dflt: dflt if x is None else (x(s) if callable(x) else x)  # noqa: E731
            return dec(f(q, s.q), f(k, s.k), f(v, s.v) if v != "none" else None, s.plan,
                       **{n: (x(s) if callable(x) else x) for n, x in kw.items()})
        return on(call)

    c = [
        Case("decode plan None", on(lambda s: dec(s.q, s.k, s.v, None)), "plan"),
        Case("decode plan a tree", on(lambda s: dec(s.q, s.k, s.v, s.tree)), "plan"),
        Case("decode stale plan", on(lambda s: (s.tree.append_tokens(0, 1),
                                                dec(s.q, s.k, s.v, s.plan))), "plan"),
        Case("decode q 2-D", d(q=lambda s: s.q[0]), "q"),
        Case("decode q wrong queries", d(q=lambda s: s.q[:1]), "q"),
        Case("decode q wrong heads", d(q=lambda s: s.q[:, :2]), "q"),
        Case("decode q wrong head_dim", d(q=lambda s: s.q[..., :32]), "q"),
        Case("decode q 10^6 queries", d(q=lambda s: np.zeros((10**6, H, D), np.float32)), "q"),
        Case("decode q int32", d(q=lambda s: s.q.astype(np.int32)), "q"),
        Case("decode q complex", d(q=lambda s: s.q.astype(np.complex64)), "q"),
        Case("decode q a list", d(q=lambda s: s.q.tolist()), "q"),
        Case("decode q None", d(q=lambda s: None), "q"),
        Case("decode q read-only", d(q=lambda s: (lambda a: (a.setflags(write=False), a)[1])(
            s.q.copy())), "q"),
        Case("decode k 3-D", d(k=lambda s: s.k[0]), "k_cache"),
        Case("decode k wrong page_size", d(k=lambda s: s.k[:, :8], v=lambda s: s.v[:, :8]),
             "k_cache"),
        Case("decode k too few pages", d(k=lambda s: s.k[:2], v=lambda s: s.v[:2]), "k_cache"),
        Case("decode k no pages", d(k=lambda s: s.k[:0], v=lambda s: s.v[:0]), "k_cache"),
        Case("decode k wrong kv heads", d(k=lambda s: np.repeat(s.k, 2, 2),
                                          v=lambda s: np.repeat(s.v, 2, 2)), "k_cache"),
        Case("decode k uint8", d(k=lambda s: s.k.astype(np.uint8)), "k_cache"),
        Case("decode k a str", d(k="k"), "k_cache"),
        Case("decode v shape differs", d(v=lambda s: s.v[:7]), "v_cache"),
        Case("decode v dtype differs", d(v=lambda s: s.v.astype(np.float64)), "v_cache"),
        Case("decode v None with a 4-D k", d(v="none"), "k_cache"),
        Case("decode combined layout K/V axis 3", d(k=lambda s: np.stack([s.k, s.v, s.k], 1),
                                                    v="none"), "k_cache"),
        Case("decode out wrong shape", d(out=lambda s: np.empty((2, H, 32), np.float32)), "out"),
        Case("decode out wrong dtype", d(out=lambda s: np.empty((2, H, D), np.float64)), "out"),
        Case("decode out read-only broadcast", d(out=lambda s: np.broadcast_to(
            np.empty((1, H, D), np.float32), (2, H, D))), "out"),
        Case("decode lse wrong shape", d(lse=lambda s: np.empty((2, 3), np.float32)), "lse"),
        Case("decode lse float64", d(lse=lambda s: np.empty((2, H), np.float64)), "lse"),
        Case("decode return_lse 'no'", d(return_lse="no"), "return_lse"),
        Case("decode stream 'x'", d(stream="x"), "stream"),
        Case("decode sm_scale 0", d(sm_scale=0.0), "sm_scale"),
        Case("decode sm_scale -1", d(sm_scale=-1.0), "sm_scale"),
        Case("decode sm_scale nan", d(sm_scale=math.nan), "sm_scale"),
        Case("decode sm_scale inf", d(sm_scale=math.inf), "sm_scale"),
        Case("decode sm_scale 1e-50 (0 in float32)", d(sm_scale=1e-50), "sm_scale"),
        Case("decode sm_scale 1e300 (inf in float32)", d(sm_scale=1e300), "sm_scale"),
        Case("decode sm_scale '1'", d(sm_scale="1"), "sm_scale"),
        Case("decode sm_scale True", d(sm_scale=True), "sm_scale"),
        # valid layouts, dtypes and strides, checked against the oracle
        Case("decode numpy float32 (valid)", on(lambda s: close(dec(s.q, s.k, s.v, s.plan),
                                                                 s.ref()[0]))),
        Case("decode lse matches (valid)", on(lambda s: close(
            dec(s.q, s.k, s.v, s.plan, return_lse=True)[1], s.ref()[1]))),
        Case("decode sm_scale 0.05 (valid)", on(lambda s: close(
            dec(s.q, s.k, s.v, s.plan, sm_scale=0.05),
            treeattn.reference(s.tree, s.q, s.k, s.v, sm_scale=0.05)[0]))),
        Case("decode float16 (valid)", on(lambda s: close(dec(
            s.q.astype(np.float16), s.k.astype(np.float16), s.v.astype(np.float16), s.plan),
            treeattn.reference(s.tree, s.q.astype(np.float16), s.k.astype(np.float16),
                               s.v.astype(np.float16))[0], 2e-3))),
        Case("decode float64 (valid)", on(lambda s: close(dec(
            s.q.astype(np.float64), s.k.astype(np.float64), s.v.astype(np.float64), s.plan),
            s.ref()[0]))),
        Case("decode q transposed view (valid)", on(lambda s: close(dec(
            np.ascontiguousarray(s.q.transpose(2, 1, 0)).transpose(2, 1, 0), s.k, s.v, s.plan),
            s.ref()[0]))),
        Case("decode q reversed, negative strides (valid)", on(lambda s: close(dec(
            s.q[::-1], s.k, s.v, s.plan), s.ref(np.ascontiguousarray(s.q[::-1]))[0]))),
        Case("decode k every other page (valid)", on(lambda s: close(dec(
            s.q, np.repeat(s.k, 2, 0)[::2], np.repeat(s.v, 2, 0)[::2], s.plan), s.ref()[0]))),
        Case("decode combined layout (valid)", on(lambda s: close(dec(
            s.q, np.stack([s.k, s.v], 1), None, s.plan), s.ref()[0]))),
        Case("decode out aliasing q (valid)", on(lambda s: (lambda q: close(
            dec(q, s.k, s.v, s.plan, out=q), s.ref()[0]))(s.q.copy()))),
        Case("decode NaN in one query's q (valid)", _nan_row),
        Case("decode 1-page tree on a 50k-page cache (valid)", _big_cache, seconds=5),
    ]
    return c


def _nan_row() -> None:
    s = Small()
    q = s.q.copy()
    q[0, 1, 3] = np.nan
    out = treeattn.decode(q, s.k, s.v, s.plan)
    assert np.isnan(out[0, 1]).all(), "a NaN in q did not reach its output row"
    close(out[1], s.ref()[0][1])


def _big_cache() -> None:
    t = PT.from_block_tables(np.array([[49_999]], np.int32), [16], num_pages=50_000)
    p = treeattn.plan(t, H, HK, D)
    k = np.zeros((50_000, P, HK, D), np.float16)
    v = np.zeros_like(k)
    rng = np.random.default_rng(0)
    k[-1] = rng.standard_normal((P, HK, D))
    v[-1] = rng.standard_normal((P, HK, D))
    q = rng.standard_normal((1, H, D)).astype(np.float16)
    close(treeattn.decode(q, k, v, p), _oracle_last_page(q, k, v), 2e-3)


def _oracle_last_page(q, k, v):
    """The oracle over the cache's last page alone (a one-page copy)."""
    small = PT.from_block_tables(np.array([[0]], np.int32), [16], num_pages=1)
    return treeattn.reference(small, q, k[-1:], v[-1:])[0]


def _reference_cases() -> List[Case]:
    ref = treeattn.reference
    return [
        Case("reference tree None", on(lambda s: ref(None, s.q, s.k, s.v)), "tree"),
        Case("reference q 2-D", on(lambda s: ref(s.tree, s.q[0], s.k, s.v)), "q"),
        Case("reference q a str", on(lambda s: ref(s.tree, "q", s.k, s.v)), "q"),
        Case("reference k heads not dividing", on(lambda s: ref(
            s.tree, np.zeros((2, 3, D), np.float32), np.repeat(s.k, 2, 2),
            np.repeat(s.v, 2, 2))), "k_cache"),
        Case("reference queries out of range", on(lambda s: ref(s.tree, s.q, s.k, s.v,
                                                                queries=[5])), "queries"),
        Case("reference queries 2^40", on(lambda s: ref(s.tree, s.q, s.k, s.v,
                                                        queries=[2**40])), "queries"),
        Case("reference queries a str", on(lambda s: ref(s.tree, s.q, s.k, s.v, queries="0")),
             "queries"),
        Case("reference queries floats", on(lambda s: ref(s.tree, s.q, s.k, s.v,
                                                          queries=[0.0])), "queries"),
        Case("reference sm_scale nan", on(lambda s: ref(s.tree, s.q, s.k, s.v,
                                                        sm_scale=math.nan)), "sm_scale"),
        Case("reference queries numpy array (valid)", on(lambda s: close(
            ref(s.tree, s.q, s.k, s.v, queries=np.array([1]))[0][1], s.ref()[0][1]))),
    ]


def _torch_cases() -> List[Case]:
    if torch is None:
        return []
    import treeattn.torch_ops as tops

    dec = treeattn.decode
    # The first call of a custom op in a process pays torch's one-time dispatch setup (seconds on
    # a machine with CUDA): pay it here, in the fork server, so the cases time only the call.
    _s = Small()
    tops.decode(*_s.t(), _s.plan)

    def tq(call):
        return on(lambda s: call(s, *s.t()))

    return [
        Case("torch q sparse", tq(lambda s, q, k, v: dec(q.to_sparse(), k, v, s.plan)), "q"),
        Case("torch q meta", tq(lambda s, q, k, v: dec(q.to("meta"), k, v, s.plan)), "q"),
        Case("torch k int64", tq(lambda s, q, k, v: dec(q, k.long(), v.long(), s.plan)),
             "k_cache"),
        Case("torch out expanded (overlapping rows)", tq(lambda s, q, k, v: dec(
            q, k, v, s.plan, out=torch.empty(1, H, D).expand(2, H, D))), "out"),
        Case("torch lse expanded (overlapping rows)", tq(lambda s, q, k, v: dec(
            q, k, v, s.plan, lse=torch.empty(1, H).expand(2, H))), "lse"),
        Case("torch out int32", tq(lambda s, q, k, v: dec(
            q, k, v, s.plan, out=torch.empty(2, H, D, dtype=torch.int32))), "out"),
        Case("torch CPU float32 (valid)", tq(lambda s, q, k, v: close(dec(q, k, v, s.plan),
                                                                        s.ref()[0]))),
        Case("torch q requires_grad (valid)", tq(lambda s, q, k, v: close(dec(
            q.clone().requires_grad_(), k, v, s.plan), s.ref()[0]))),
        Case("torch bfloat16 (valid)", tq(lambda s, q, k, v: close(dec(
            q.bfloat16(), k.bfloat16(), v.bfloat16(), s.plan), treeattn.reference(
                s.tree, q.bfloat16().float().numpy(), k.bfloat16().float().numpy(),
                v.bfloat16().float().numpy())[0], 2e-2))),
        Case("torch float16 q with float32 caches (valid)", tq(lambda s, q, k, v: close(dec(
            q.half(), k, v, s.plan), s.ref(q.half().float().numpy())[0], 2e-3))),
        Case("torch permuted q (valid)", tq(lambda s, q, k, v: close(dec(
            q.permute(2, 1, 0).contiguous().permute(2, 1, 0), k, v, s.plan), s.ref()[0]))),
        Case("torch cache expanded to 10^12 pages (valid)", tq(lambda s, q, k, v: close(dec(
            q, k[:1].expand(10**12, P, HK, D), v[:1].expand(10**12, P, HK, D), s.plan),
            treeattn.reference(s.tree, s.q, np.repeat(s.k[:1], 8, 0), np.repeat(s.v[:1], 8, 0))
            [0]))),
        Case("torch_ops plan None", tq(lambda s, q, k, v: tops.decode(q, k, v, None)), "plan"),
        Case("torch_ops plan True", tq(lambda s, q, k, v: tops.decode(q, k, v, True)), "plan"),
        Case("torch_ops plan handle 10^9", tq(lambda s, q, k, v: tops.decode(q, k, v, 10**9)),
             "plan"),
        Case("torch_ops sm_scale 'x'", tq(lambda s, q, k, v: tops.decode(q, k, v, s.plan,
                                                                          sm_scale="x")),
             "sm_scale"),
        Case("torch_ops q wrong heads", tq(lambda s, q, k, v: tops.decode(q[:, :2], k, v,
                                                                           s.plan)), "q"),
        Case("torch_ops op with a dead handle", tq(lambda s, q, k, v: torch.ops.treeattn.decode(
            q, k, v, -7, None)), "plan"),
        Case("torch_ops decode_lse (valid)", tq(lambda s, q, k, v: close(
            tops.decode(q, k, v, s.plan, return_lse=True)[1], s.ref()[1]))),
    ]


def _fp8_cases() -> List[Case]:
    """fp8 KV caches: kv_dtype of plan(), the fp8 caches and their scales in decode() and the
    torch custom op (the caches are the fp8 values of s.k / s.v, the plan made for them)."""
    if torch is None:
        return []
    import treeattn.torch_ops as tops

    dec = treeattn.decode

    def f8(call, kind=torch.float8_e4m3fn):
        def run() -> None:
            s = Small()
            p8 = treeattn.plan(s.tree, H, HK, D, kv_dtype=str(kind).replace("torch.", ""))
            q = torch.from_numpy(s.q).half()
            k8 = torch.from_numpy(s.k).to(kind)
            v8 = torch.from_numpy(s.v).to(kind)
            call(s, p8, q, k8, v8)
        return run

    # the fp8 op's one-time dispatch setup in the fork server, as in _torch_cases
    f8(lambda s, p, q, k, v: tops.decode(q, k, v, p, k_scale=torch.tensor([2.0]),
                                         v_scale=torch.tensor([0.5])))()

    def ref8(s, q, k8, v8, ks=1.0, vs=1.0):
        return treeattn.reference(s.tree, q.float().numpy(), k8.float().numpy() * ks,
                                  v8.float().numpy() * vs)[0]

    c = [
        Case("plan kv_dtype 'fp8'", on(lambda s: treeattn.plan(s.tree, H, HK, D, kv_dtype="fp8")),
             "kv_dtype"),
        Case("plan kv_dtype int8", on(lambda s: treeattn.plan(s.tree, H, HK, D,
                                                              kv_dtype=torch.int8)), "kv_dtype"),
        Case("plan kv_dtype float8_e4m3fnuz", on(lambda s: treeattn.plan(
            s.tree, H, HK, D, kv_dtype=torch.float8_e4m3fnuz)), "kv_dtype"),
        Case("plan kv_dtype 5", on(lambda s: treeattn.plan(s.tree, H, HK, D, kv_dtype=5)),
             "kv_dtype"),
        Case("Plan() kv_dtype_bytes 3", on(lambda s: treeattn.Plan(
            s.tree, "auto", H, HK, D, 2, treeattn.DeviceInfo.preset("h100"), 1.0, 3)),
             "kv_dtype_bytes"),
        Case("fp8 decode with a plan for 2-byte KV", f8(lambda s, p, q, k, v: dec(q, k, v, s.plan)),
             "plan"),
        Case("fp16 caches with a plan for fp8 KV", f8(lambda s, p, q, k, v: dec(
            q, k.half(), v.half(), p)), "k_cache"),
        Case("fp8 k e4m3, v e5m2", f8(lambda s, p, q, k, v: dec(
            q, k, v.float().to(torch.float8_e5m2), p)), "v_cache"),
        Case("fp8 k, v float16", f8(lambda s, p, q, k, v: dec(q, k, v.half(), p)), "v_cache"),
        Case("fp8 caches float8_e4m3fnuz", f8(lambda s, p, q, k, v: dec(
            q, k.view(torch.uint8).view(torch.float8_e4m3fnuz),
            v.view(torch.uint8).view(torch.float8_e4m3fnuz), p)), "k_cache"),
        Case("fp8 caches with float32 q", f8(lambda s, p, q, k, v: dec(q.float(), k, v, p)), "q"),
        Case("fp8 with a float16 k_scale tensor", f8(lambda s, p, q, k, v: dec(
            q, k, v, p, k_scale=torch.ones(1, dtype=torch.float16))), "k_scale"),
        Case("fp8 with a 3-element v_scale tensor", f8(lambda s, p, q, k, v: dec(
            q, k, v, p, v_scale=torch.ones(3))), "v_scale"),
        Case("fp8 with a k_scale tensor holding 0", f8(lambda s, p, q, k, v: dec(
            q, k, v, p, k_scale=torch.zeros(1))), "k_scale"),
        Case("fp8 with a v_scale tensor holding NaN", f8(lambda s, p, q, k, v: dec(
            q, k, v, p, v_scale=torch.full((1,), math.nan))), "v_scale"),
        Case("reference() with fp8 caches", f8(lambda s, p, q, k, v: treeattn.reference(
            s.tree, q, k, v)), "k_cache"),
        Case("k_scale with float32 caches", on(lambda s: dec(s.q, s.k, s.v, s.plan, k_scale=2.0)),
             "k_scale"),
        Case("torch_ops fp8 v_scale -1", f8(lambda s, p, q, k, v: tops.decode(
            q, k, v, p, v_scale=-1.0)), "v_scale"),
        Case("fp8 e4m3 with scales (valid)", f8(lambda s, p, q, k, v: close(dec(
            q, k, v, p, k_scale=0.37, v_scale=torch.tensor([64.0])),
            ref8(s, q, k, v, np.float32(0.37), 64.0), 2e-3))),
        Case("fp8 e5m2 combined layout (valid)", f8(lambda s, p, q, k, v: close(dec(
            q, torch.stack([k, v], 1), None, p), ref8(s, q, k, v), 2e-3), torch.float8_e5m2)),
        Case("torch_ops fp8 with scale tensors (valid)", f8(lambda s, p, q, k, v: close(
            tops.decode(q, k, v, p, k_scale=torch.tensor([2.0]), v_scale=torch.tensor([0.5])),
            ref8(s, q, k, v, 2.0, 0.5), 2e-3))),
    ]
    for name in ("k_scale", "v_scale"):
        for bad in (0.0, -1.0, math.nan, math.inf, 1e-300, 1e300):
            c.append(Case(f"fp8 {name} {bad!r}", f8(lambda s, p, q, k, v, n=name, b=bad: dec(
                q, k, v, p, **{n: b})), name))
        for bad in (True, "2", [1.0], None.__class__):
            c.append(Case(f"fp8 {name} {bad!r}", f8(lambda s, p, q, k, v, n=name, b=bad: dec(
                q, k, v, p, **{n: b})), name))
    return c


def _device_info_cases() -> List[Case]:
    DI = treeattn.DeviceInfo

    def field(name, value):
        def call():
            d = DI.preset("h100")
            setattr(d, name, value)
            treeattn.plan(PT.from_levels("N=1,2 C=20,4"), H, HK, D, device=d)
        return call

    c = [
        Case("DeviceInfo.preset unknown", lambda: DI.preset("b200"), "device"),
        Case("DeviceInfo.preset None", lambda: DI.preset(None), "name"),
        Case("DeviceInfo.preset 'H100' (valid)", lambda: assert_eq(DI.preset("H100").name,
                                                                   "h100")),
        Case("DeviceInfo() default plans (valid)", lambda: treeattn.plan(
            PT.from_levels("N=1,2 C=20,4"), H, HK, D, device=DI()).check()),
    ]
    for name, value, arg in [
            ("num_sms", "132", "num_sms"), ("num_sms", 2**40, "num_sms"),
            ("num_sms", None, "num_sms"), ("num_sms", 1.5, "num_sms"), ("num_sms", 0, "device"),
            ("num_sms", -3, "device"), ("ctas_per_sm", 0, "device"),
            ("hbm_read_GBps", "fast", "hbm_read_GBps"), ("hbm_read_GBps", 0.0, "device"),
            ("hbm_read_GBps", math.nan, "device"), ("tc_TFLOPs", math.inf, "device"),
            ("launch_overhead_us", -1.0, "device"), ("tile_latency_us", math.nan, "device"),
            ("cta_bw_factor", 0.5, "device"), ("mask_penalty", -1.0, "device"),
            ("merge_round_trips", 2**31 - 1, "device"), ("prologue_round_trips", -5, "device"),
            ("warpgroup_mma", "yes", "warpgroup_mma"), ("latency_terms", 2, "latency_terms"),
            ("name", 5, "name"), ("smem_per_sm_bytes", 0, "device")]:
        c.append(Case(f"DeviceInfo.{name} = {value!r}", field(name, value), arg))
    return c


def _misc_cases() -> List[Case]:
    return [
        Case("check_int bool", lambda: treeattn.check_int("x", True), "x"),
        Case("check_int lo > hi", lambda: treeattn.check_int("x", 5, 10, 1), "x"),
        Case("check_int name an int", lambda: treeattn.check_int(5, 5), "name"),
        Case("check_int lo a float", lambda: treeattn.check_int("x", 5, 0.5), "lo"),
        Case("workloads unknown set", lambda: treeattn.workloads("bogus"), "workload"),
        Case("workloads set None", lambda: treeattn.workloads(None), "set"),
        Case("workloads details 'yes'", lambda: treeattn.workloads("pat", details="yes"),
             "details"),
        Case("workloads keys build (valid)", lambda: [
            PT.from_workload(w["key"]).validate() for w in treeattn.workloads("pat", True)]),
    ]


def cases() -> List[Case]:
    return (_block_table_cases() + _json_cases() + _builder_cases() + _update_cases()
            + _plan_cases() + _decode_cases() + _reference_cases() + _torch_cases()
            + _fp8_cases() + _device_info_cases() + _misc_cases())


# ---------------------------------------------------------------- probes


def _shared_prefix_tables(n: int):
    bt = np.zeros((n, 3), np.int32)
    bt[:, 1] = 1
    bt[:, 2] = np.arange(2, n + 2)
    return bt, np.full(n, 40, np.int64)


def _tree_with_queries(n: int) -> PT:
    bt, lens = _shared_prefix_tables(n)
    return PT.from_block_tables(bt, lens, num_pages=n + 2)


def _fork_probe(n: int):
    t = PT.from_levels("N=1 C=4")

    def call():
        t.copy().fork_query(0, n)
    return call


def _append_probe(n: int):
    t = PT.from_block_tables([[0]], [1], page_size=1, num_pages=n + 1)
    pages = list(range(1, n + 1))
    return lambda: t.copy().append_tokens(0, n, new_pages=pages)


def _free_pages_probe(n: int):
    t = PT.from_block_tables([[0]], [1], page_size=1, num_pages=n + 1)
    pages = list(range(1, n + 1))
    return lambda: setattr(t.copy(), "free_pages", pages)


def _decode_cache_probe(n: int):
    """A 1-page tree over an n-page cache: decode touches the plan's pages only."""
    t = PT.from_block_tables(np.array([[n - 1]], np.int32), [16], num_pages=n)
    p = treeattn.plan(t, H, HK, D)
    k = np.zeros((n, P, HK, D), np.float16)
    q = np.zeros((1, H, D), np.float16)
    return lambda: treeattn.decode(q, k, k, p)


def _reference_cache_probe(n: int):
    t = PT.from_block_tables(np.array([[n - 1]], np.int32), [16], num_pages=n)
    k = np.zeros((n, P, HK, D), np.float16)
    q = np.zeros((1, H, D), np.float16)
    return lambda: treeattn.reference(t, q, k, k)


def _decode_queries_probe(n: int):
    t = _tree_with_queries(n)
    p = treeattn.plan(t, H, HK, D, planner="node")
    rng = np.random.default_rng(0)
    q = rng.standard_normal((n, H, D), dtype=np.float32)
    k = rng.standard_normal((n + 2, P, HK, D), dtype=np.float32)
    return lambda: treeattn.decode(q, k, k, p)


def _update_plan_probe(n: int):
    t = _tree_with_queries(n)
    a = treeattn.plan(t, H, HK, D, planner="node")
    b = treeattn.plan(t, H, HK, D, planner="node")
    return lambda: a.update(b)


def probes() -> List[Probe]:
    return [
        Probe("from_block_tables: n rows sharing a prefix",
              lambda n: (lambda bt, lens: lambda: PT.from_block_tables(bt, lens))(
                  *_shared_prefix_tables(n)), 50_000),
        Probe("from_block_tables (lists): n rows",
              lambda n: (lambda bt, lens: lambda: PT.from_block_tables(bt, lens))(
                  *[x.tolist() for x in _shared_prefix_tables(n)]), 20_000),
        Probe("from_json_str: flat object of n keys",
              lambda n: (lambda s: lambda: PT.from_json_str(s))(hostile_json._flat_object(n)),
              50_000),
        Probe("from_json_str: chain of n nodes",
              lambda n: (lambda s: lambda: PT.from_json_str(s))(hostile_json._chain(n)), 20_000),
        Probe("from_levels: fan-out n", lambda n: lambda: PT.from_levels(f"N=1,{n} C=16,1"),
              50_000),
        Probe("fork_query(0, n)", _fork_probe, 100_000),
        Probe("append_tokens: n new pages", _append_probe, 100_000),
        Probe("free_pages = n pages", _free_pages_probe, 100_000),
        Probe("to_json: n queries", lambda n: (lambda t: t.to_json)(_tree_with_queries(n)),
              20_000),
        Probe("to_block_tables: n queries",
              lambda n: (lambda t: t.to_block_tables)(_tree_with_queries(n)), 20_000),
        Probe("remove_query: one of n", lambda n: (lambda t: lambda: t.copy().remove_query(0))(
            _tree_with_queries(n)), 20_000),
        Probe("plan (node): n queries", lambda n: (lambda t: lambda: treeattn.plan(
            t, H, HK, D, planner="node"))(_tree_with_queries(n)), 5_000),
        Probe("plan (auto): n queries", lambda n: (lambda t: lambda: treeattn.plan(
            t, H, HK, D, planner="auto"))(_tree_with_queries(n)), 2_000),
        Probe("Plan.update: n queries", _update_plan_probe, 20_000),
        Probe("decode: n queries", _decode_queries_probe, 2_000),
        Probe("decode: 1-page tree over n cache pages", _decode_cache_probe, 20_000),
        Probe("reference: 1-page tree over n cache pages", _reference_cache_probe, 20_000),
    ]
