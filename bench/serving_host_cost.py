"""Host cost per step of treeattn.serving on the CPU: TreeSync.update (incremental tree from the
block tables) and ServingCore.prepare (update + plan), for steady decode steps (every row appends
one token; a row opens a page every page_size steps), against rebuilding the tree with
PrefixTree.from_block_tables each step. Batches: `rows` requests in groups of 8 sharing a
second-level prefix under one system prompt (half the context shared by all).

    .venv/bin/python bench/serving_host_cost.py [--steps 50]
"""

from __future__ import annotations

import argparse
import time

import numpy as np

import treeattn
from treeattn.serving import ServingCore, TreeSync

P = 16


def batch(rows: int, ctx: int, P: int = P):
    """(block tables [rows, pages], lengths, pages used) with room for 64 more pages a row."""
    npg = (ctx + P - 1) // P + 64
    sp, mid = ctx // 2 // P, ctx // 4 // P
    bt = np.zeros((rows, npg), np.int32)
    nxt = 1
    base = np.arange(nxt, nxt + sp)
    nxt += sp
    for g in range(0, rows, 8):
        m = np.arange(nxt, nxt + mid)
        nxt += mid
        for r in range(g, min(g + 8, rows)):
            own = np.arange(nxt, nxt + npg - sp - mid)
            nxt += len(own)
            bt[r] = np.concatenate([base, m, own])
    return bt, np.full(rows, ctx - P // 2, np.int64), nxt


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=50)
    args = ap.parse_args()
    print("| rows | context | from_block_tables ms | TreeSync.update ms | plan ms | "
          "ServingCore.prepare ms | incremental steps |")
    print("|---|---|---|---|---|---|---|")
    for rows, ctx in ((64, 4096), (256, 4096), (512, 2048)):
        bt, lens, npages = batch(rows, ctx)
        sync = TreeSync(P, npages)
        core = ServingCore(32, 8, 128, P, num_pages=npages)
        sync.update(bt, lens)
        core.prepare(bt, lens)
        t_fb = t_sync = t_core = t_plan = 0.0
        for s in range(1, args.steps + 1):
            cur = lens + s
            t0 = time.perf_counter()
            tree = treeattn.PrefixTree.from_block_tables(bt, cur, page_size=P, num_pages=npages)
            t1 = time.perf_counter()
            sync.update(bt, cur)
            t2 = time.perf_counter()
            core.prepare(bt, cur)
            t3 = time.perf_counter()
            treeattn.plan(tree, 32, 8, 128, device="h100")
            t4 = time.perf_counter()
            t_fb, t_sync, t_core, t_plan = (t_fb + t1 - t0, t_sync + t2 - t1, t_core + t3 - t2,
                                            t_plan + t4 - t3)
        n = args.steps
        print(f"| {rows} | {ctx} | {t_fb / n * 1e3:.3f} | {t_sync / n * 1e3:.3f} | "
              f"{t_plan / n * 1e3:.3f} | {t_core / n * 1e3:.3f} | "
              f"{sync.counts['incremental']}/{n} |")


if __name__ == "__main__":
    main()
