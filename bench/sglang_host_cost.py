"""Host cost per decode step of the SGLang backend's path on the CPU: page_table (SGLang's
req_to_token rows -> block tables; here a CPU tensor, so no device copy is timed) and
ServingCore.prepare (incremental tree update + plan), at page size 1 (a page is one token slot)
and 16, for steady decode steps (every row appends one token). Batches: `rows` requests in groups
of 8 sharing a second-level prefix under one system prompt (half the context shared by all;
bench/serving_host_cost.py's batch), as SGLang's prefix cache lays them out: slot = page *
page_size + offset. One torch thread.

    .venv/bin/python bench/sglang_host_cost.py [--steps 30]
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import torch

from serving_host_cost import batch
from treeattn.serving import ServingCore
from treeattn.serving.token_table import page_table


def token_table(rows: int, ctx: int, P: int):
    """(req_to_token [rows + 1, width], req_pool_indices, lens, num_pages) of serving_host_cost's
    batch: slot = page * P + offset; row 0 is SGLang's padding row."""
    bt, _, npages = batch(rows, ctx, P)
    t = np.arange(bt.shape[1] * P)
    table = np.zeros((rows + 1, t.size), np.int32)
    table[1:] = bt[:, t // P] * P + t % P
    return torch.from_numpy(table), torch.arange(1, rows + 1), np.full(rows, ctx), npages


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=30, help="at most 64 (room in the batch)")
    args = ap.parse_args()
    torch.set_num_threads(1)  # the gather is small: threads only add noise here
    print("| page size | rows | context | page_table ms | ServingCore.prepare ms | "
          "incremental steps |")
    print("|---|---|---|---|---|---|")
    for P in (1, 16):
        for rows, ctx in ((64, 4096), (256, 2048)):
            table, idx, lens, npages = token_table(rows, ctx, P)
            core = ServingCore(32, 8, 128, P, num_pages=npages)
            core.prepare(*page_table(table, idx, lens, P))
            t_pt = t_core = 0.0
            for s in range(1, args.steps + 1):
                t0 = time.perf_counter()
                bt, cur = page_table(table, idx, lens + s, P)
                t1 = time.perf_counter()
                core.prepare(bt, cur)
                t2 = time.perf_counter()
                t_pt, t_core = t_pt + t1 - t0, t_core + t2 - t1
            n = args.steps
            print(f"| {P} | {rows} | {ctx} | {t_pt / n * 1e3:.2f} | {t_core / n * 1e3:.2f} | "
                  f"{core.sync.counts['incremental']}/{n} |")


if __name__ == "__main__":
    main()
