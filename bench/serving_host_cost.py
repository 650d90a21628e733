"""Host cost per step of treeattn.serving on the CPU: TreeSync.update (incremental tree from the
block tables) and ServingCore.prepare (update + plan), against rebuilding the tree with
PrefixTree.from_block_tables each step. Batches: `rows` requests in groups of 8 sharing a
second-level prefix under one system prompt (half the context shared by all). Two kinds of step:

* steady: every row appends one token (a row opens a page every page_size steps; the rows'
          lengths are staggered, so that every step some rows open one);
* churn:  the same, and one request finishes each step (the last row moves into its slot, vLLM's
          condense) while a new one joins a group's prefix at the end of the batch.

Times are means over the steps (48 by default: every row opens pages 3 times).

    .venv/bin/python bench/serving_host_cost.py [--steps 48] [--churn]
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np

import treeattn
from treeattn.serving import ServingCore, TreeSync

P = 16


class Batch:
    """Block tables of `rows` requests of context `ctx` at page size P (see the module comment),
    with room for `steps` steps."""

    def __init__(self, rows: int, ctx: int, steps: int, P: int = P):
        self.width = (ctx + P - 1) // P + max(64, steps // P + 2)  # engines pad their tables
        self.sp, self.mid = ctx // 2 // P, ctx // 4 // P
        self.nxt = 1
        self.base = self._take(self.sp)
        self.groups = [self._take(self.mid) for _ in range((rows + 7) // 8)]
        self.bt = np.zeros((rows, self.width), np.int32)
        for r in range(rows):
            self.bt[r] = self._row(r // 8)
        self.lens = ctx - P + np.arange(rows, dtype=np.int64) % P
        self.used = self.nxt  # pages in the tables (ids 1..used-1; 0 is not used)
        self.num_pages = self.nxt + 2 * steps * self.width  # room for the joins' pages

    def _take(self, n: int) -> np.ndarray:
        self.nxt += n
        return np.arange(self.nxt - n, self.nxt)

    def _row(self, group: int) -> np.ndarray:
        own = self._take(self.width - self.sp - self.mid)
        return np.concatenate([self.base, self.groups[group], own])

    def step(self, s: int, churn: bool) -> None:
        self.lens += 1
        if churn:
            i = (7 * s) % (len(self.lens) - 1)
            self.bt[i], self.lens[i] = self.bt[-1], self.lens[-1]  # finished: last row moves in
            self.bt[-1], self.lens[-1] = self._row(s % len(self.groups)), self.lens[i]


def batch(rows: int, ctx: int, P: int = P):
    """(block tables [rows, pages], lengths, pages used) of a Batch, with room for 64 more pages
    a row."""
    b = Batch(rows, ctx, 0, P)
    return b.bt, b.lens, b.used


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=48)
    ap.add_argument("--churn", action="store_true", help="one request finishes and one joins "
                    "every step")
    args = ap.parse_args()
    print(f"steps: {'churn' if args.churn else 'steady'}; mean ms per step over {args.steps}")
    print("| rows | context | from_block_tables ms | TreeSync.update ms | plan ms | "
          "ServingCore.prepare ms | incremental steps |")
    print("|---|---|---|---|---|---|---|")
    for rows, ctx in ((64, 4096), (256, 4096), (512, 2048)):
        b = Batch(rows, ctx, args.steps)
        sync = TreeSync(P, b.num_pages)
        core = ServingCore(32, 8, 128, P, num_pages=b.num_pages)
        sync.update(b.bt, b.lens)
        core.prepare(b.bt, b.lens)
        times = {k: [] for k in ("fb", "sync", "plan", "core")}
        for s in range(1, args.steps + 1):
            b.step(s, args.churn)
            t0 = time.perf_counter()
            tree = treeattn.PrefixTree.from_block_tables(b.bt, b.lens, page_size=P,
                                                         num_pages=b.num_pages)
            t1 = time.perf_counter()
            sync.update(b.bt, b.lens)
            t2 = time.perf_counter()
            core.prepare(b.bt, b.lens)
            t3 = time.perf_counter()
            treeattn.plan(tree, 32, 8, 128, device="h100")
            t4 = time.perf_counter()
            for k, t in (("fb", t1 - t0), ("sync", t2 - t1), ("core", t3 - t2),
                         ("plan", t4 - t3)):
                times[k].append(t * 1e3)
        avg = {k: statistics.mean(v) for k, v in times.items()}
        print(f"| {rows} | {ctx} | {avg['fb']:.2f} | {avg['sync']:.2f} | {avg['plan']:.2f} | "
              f"{avg['core']:.2f} | {sync.counts['incremental']}/{args.steps} |")


if __name__ == "__main__":
    main()
