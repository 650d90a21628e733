"""Shared helpers for the treeattn Python tests: random caches and block tables, an
independent float64 numpy oracle that reads the caches through per-query block tables (it
does not use the tree, the plan or the library's reference), and where the treeattn CLI was
built."""

from __future__ import annotations

import math
import os
from pathlib import Path
from typing import Optional

import numpy as np
import pytest

import treeattn


def fp16_round(x: np.ndarray) -> np.ndarray:
    """Values rounded to float16 and widened back to float32 (what fp16 storage holds)."""
    return x.astype(np.float16).astype(np.float32)


def random_qkv(rng, num_queries, heads, kv_heads, dim, num_pages, page_size):
    q = fp16_round(rng.uniform(-1, 1, (num_queries, heads, dim)).astype(np.float32))
    k = fp16_round(rng.uniform(-1, 1, (num_pages, page_size, kv_heads, dim)).astype(np.float32))
    v = fp16_round(rng.uniform(-1, 1, (num_pages, page_size, kv_heads, dim)).astype(np.float32))
    return q, k, v


def numpy_oracle(q, k, v, block_tables, seq_lens, sm_scale=None):
    """Float64 attention of query r over tokens [0, seq_lens[r]) of block_tables[r]."""
    Q, H, D = q.shape
    P, Hk = k.shape[1], k.shape[2]
    g = H // Hk
    scale = 1.0 / math.sqrt(D) if sm_scale is None else sm_scale
    out = np.empty((Q, H, D))
    lse = np.empty((Q, H))
    for r in range(Q):
        n = int(seq_lens[r])
        pages = np.asarray(block_tables[r][: (n + P - 1) // P], dtype=np.int64)
        kk = k[pages].reshape(-1, Hk, D)[:n].astype(np.float64)
        vv = v[pages].reshape(-1, Hk, D)[:n].astype(np.float64)
        qq = q[r].astype(np.float64).reshape(Hk, g, D)
        s = np.einsum("hgd,nhd->hgn", qq, kk) * scale
        m = s.max(-1, keepdims=True)
        e = np.exp(s - m)
        den = e.sum(-1, keepdims=True)
        out[r] = np.einsum("hgn,nhd->hgd", e / den, vv).reshape(H, D)
        lse[r] = (m + np.log(den)).reshape(H)
    return out, lse


def random_block_tables(rng, page_size, num_prompts=3, max_children=4, max_prompt=200,
                        max_suffix=60, spare_pages=5):
    """Requests sharing prompts: each prompt (whole pages, shared) has several continuations
    (own pages, partly filled last page). Page ids are shuffled. Returns (tables, lens, num_pages)."""
    reqs = []
    next_page = 0
    for _ in range(num_prompts):
        prompt_pages = int(rng.integers(1, max_prompt // page_size + 2))
        prompt = list(range(next_page, next_page + prompt_pages))
        next_page += prompt_pages
        for _ in range(int(rng.integers(1, max_children + 1))):
            extra = int(rng.integers(0, max_suffix + 1))
            pages = (extra + page_size - 1) // page_size
            own = list(range(next_page, next_page + pages))
            next_page += pages
            reqs.append((prompt + own, prompt_pages * page_size + extra))
    num_pages = next_page + spare_pages
    perm = rng.permutation(num_pages)
    width = max(len(t) for t, _ in reqs) + 2
    tables = np.full((len(reqs), width), -1, dtype=np.int32)  # padded like vLLM
    lens = np.zeros(len(reqs), dtype=np.int64)
    for i, (t, n) in enumerate(reqs):
        tables[i, : len(t)] = perm[np.asarray(t, dtype=np.int64)]
        lens[i] = n
    return tables, lens, num_pages


@pytest.fixture
def rng(request):
    """A fresh, reported seed per test run (inputs are never reused across runs)."""
    seed = int(np.random.SeedSequence().entropy % (2**31))
    print(f"seed={seed}")
    return np.random.default_rng(seed)


def cli_path() -> Optional[Path]:
    """The treeattn CLI this checkout built: $TREEATTN_CLI, build/treeattn or
    build-cpu/treeattn (None when there is none)."""
    root = Path(__file__).resolve().parents[2]
    for c in (os.environ.get("TREEATTN_CLI"), root / "build" / "treeattn",
              root / "build-cpu" / "treeattn"):
        if c and Path(c).is_file() and os.access(c, os.X_OK):
            return Path(c).resolve()
    return None


def pytest_report_header(config):
    return f"treeattn {treeattn.__version__}, built_with_cuda={treeattn.built_with_cuda}"


def cow_fill(tree, *caches):
    """Copy-on-write as a serving engine does it: a node that starts mid-page owns a fresh first
    page whose leading slots (before its page_offset) must hold its ancestors' tokens. Copies
    them in every cache, so the block-table view of a path reads the same values as the tree."""
    P = tree.page_size
    nodes = [tree.node(i) for i in range(tree.num_nodes)]

    def start(i):
        s, p = 0, nodes[i]["parent"]
        while p is not None:
            s += nodes[p]["tokens"]
            p = nodes[p]["parent"]
        return s

    def locate(i, pos):
        """(page, slot) of absolute position pos on the path ending at node i."""
        while True:
            s = start(i)
            if pos >= s:
                j = nodes[i]["page_offset"] + pos - s
                return nodes[i]["pages"][j // P], j % P
            i = nodes[i]["parent"]

    order = sorted((i for i, n in enumerate(nodes) if n["alive"]), key=start)
    for i in order:
        n = nodes[i]
        off = n["page_offset"]
        if off == 0 or n["parent"] is None:
            continue
        s = start(i)
        for slot in range(off):
            page, src_slot = locate(n["parent"], s - off + slot)
            for c in caches:
                c[n["pages"][0], slot] = c[page, src_slot]


def tree_qkv(rng, tree, heads, kv_heads, dim):
    """Random q/k/v for a tree, with copy-on-write slots filled (see cow_fill)."""
    q, k, v = random_qkv(rng, tree.num_queries, heads, kv_heads, dim, tree.num_pages,
                         tree.page_size)
    cow_fill(tree, k, v)
    return q, k, v
