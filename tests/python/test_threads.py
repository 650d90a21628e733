"""Thread safety of the Python API (docs/python.md, "Thread safety"): Plan.update() on one thread
while other threads decode the same plan on the CPU (which runs without the GIL), several threads
decoding one plan, planning and reference() while another thread updates the tree. Every output
is checked against a single-threaded decode of the same plan (bitwise) and against the oracle."""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest

import treeattn
from conftest import tree_qkv


def oracle_close(out, want, tol=1e-4):
    assert np.abs(out.astype(np.float64) - want).max() < tol


def run_threads(fns, timeout=120.0):
    """Runs every fn on its own thread; re-raises the first exception one of them raised."""
    errors = []

    def wrap(fn):
        def target():
            try:
                fn()
            except BaseException as e:  # noqa: BLE001 - reported to the main thread
                errors.append(e)
        return target

    threads = [threading.Thread(target=wrap(fn)) for fn in fns]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout)
        assert not t.is_alive(), "a thread did not finish"
    if errors:
        raise errors[0]


def test_update_while_decoding(rng):
    """The issue's reproducer: plans of 64 and 2 queries (8/1 heads, dim 64), one thread
    alternating plan.update() between them while three threads decode the shared plan. A decode
    either refuses q (its plan had the other query count when the call began) or returns exactly
    what a single-threaded decode of the plan it ran returns."""
    big = treeattn.PrefixTree.from_levels("N=1,64 C=300,40")
    small = treeattn.PrefixTree.from_levels("N=1,2 C=100,20")
    assert small.num_pages <= big.num_pages  # one cache serves both
    q, k, v = tree_qkv(rng, big, 8, 1, 64)
    plan_big, plan_small = treeattn.plan(big, 8, 1, 64), treeattn.plan(small, 8, 1, 64)
    q_small = np.ascontiguousarray(q[:2])
    want_big = treeattn.decode(q, k, v, plan_big)
    want_small = treeattn.decode(q_small, k, v, plan_small)
    oracle_close(want_big, treeattn.reference(big, q, k, v)[0])
    oracle_close(want_small, treeattn.reference(small, q_small, k, v)[0])

    shared = treeattn.plan(big, 8, 1, 64)
    done = threading.Event()
    counts = {"big": 0, "small": 0, "refused": 0}
    lock = threading.Lock()

    def updater():
        while not done.is_set():
            shared.update(plan_small)
            shared.update(plan_big)

    def decoder():
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            with lock:
                if counts["big"] >= 20 and counts["small"] >= 20:
                    return
            for name, qq, want in (("big", q, want_big), ("small", q_small, want_small)):
                try:
                    out = treeattn.decode(qq, k, v, shared)
                except ValueError as e:
                    assert str(e).startswith("q: dim 0 (num_queries)"), e
                    name = "refused"
                else:
                    assert np.array_equal(out, want), f"{name}: wrong rows"
                with lock:
                    counts[name] += 1

    def decoders():
        try:
            run_threads([decoder] * 3)
        finally:
            done.set()

    run_threads([updater, decoders])
    assert counts["big"] >= 1 and counts["small"] >= 1, counts


def test_several_threads_decode_one_plan(rng):
    tree = treeattn.PrefixTree.from_levels("N=1,4,16 C=200,50,9", layout="shuffled", seed=3)
    plan = treeattn.plan(tree, 8, 2, 64)
    qs = []
    _, k, v = tree_qkv(rng, tree, 8, 2, 64)
    for _ in range(4):
        qs.append(tree_qkv(rng, tree, 8, 2, 64)[0])
    wants = [treeattn.decode(q, k, v, plan, return_lse=True) for q in qs]
    for q, (out, _) in zip(qs, wants):
        oracle_close(out, treeattn.reference(tree, q, k, v)[0])

    def decoder(i):
        def fn():
            for _ in range(8):
                out, lse = treeattn.decode(qs[i], k, v, plan, return_lse=True)
                assert np.array_equal(out, wants[i][0]) and np.array_equal(lse, wants[i][1])
        return fn

    run_threads([decoder(i) for i in range(4)])


def test_plan_and_reference_while_the_tree_changes(rng):
    """Planning and reference() work on a copy of the tree taken with the GIL held, so another
    thread may update the tree meanwhile (here: 128 queries on one node, each forked into a new
    child by an append, so the tree's node list grows): every plan covers the tree it copied, and
    every reference() row equals a single-threaded one before or after its query's append."""
    n = 128

    def make():
        t = treeattn.PrefixTree.from_levels("N=1 C=3000 page=1")
        t.fork_query(0, n)
        first_free = t.num_pages
        t.num_pages = first_free + n
        t.free_pages = list(range(first_free, first_free + n))
        return t

    q, k, v = tree_qkv(rng, make(), 1, 1, 4)  # tiny heads: the path walk dominates the oracle
    replay = make()
    before = treeattn.reference(replay, q, k, v)[0]
    for i in range(n):
        replay.append_tokens(i, 1)
    after = treeattn.reference(replay, q, k, v)[0]
    assert not np.array_equal(before, after)

    for _ in range(8):  # rounds: each race is a matter of timing
        tree = make()
        v0 = tree.version
        done = threading.Event()

        def mutator():
            try:
                for i in range(n):
                    tree.append_tokens(i, 1)
                    time.sleep(0.001)
            finally:
                done.set()

        def reader():
            calls = 0
            while not done.is_set() or calls < 3:
                if calls % 8 == 0:
                    treeattn.plan(tree, 8, 2, 64).check()
                out = treeattn.reference(tree, q, k, v)[0]
                for i in range(n):
                    assert np.array_equal(out[i], before[i]) or np.array_equal(out[i], after[i]), i
                calls += 1

        run_threads([mutator, reader])
        assert tree.version == v0 + n and tree.num_live_nodes == n + 1
