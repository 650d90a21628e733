#!/usr/bin/env python3
"""What the graph bound costs a CUDA-graph decode step (ServingCore with graph_rows / graph_pages,
docs/vllm.md and docs/sglang.md): the graph replay time of one decode over the same tree with the
core's per-key plan (headroom 2, the layout of the step) and with the shared graph plan laid out
for a bound of BOUND_ROWS rows of BOUND_PAGES pages, whose capacities (launch grids) exceed the
step's; plus the time of the query planner's plan (what a step that does not fit the graph plan
runs). CUDA events around each replay, L2 flushed before each (a 256 MB write), median of RUNS.

Usage: python3 bench/graph_bound_cost.py [--runs 200] [--json OUT]
"""
import argparse
import json
import statistics

import numpy as np
import torch

import treeattn
from treeattn.serving import ServingCore

H, HK, D, PAGE = 32, 8, 128, 16


def tables(rows, shared, own):
    """rows requests under one shared prefix of `shared` tokens, `own` tokens each."""
    sp = -(-shared // PAGE)
    op = -(-(shared % PAGE + own) // PAGE) if shared % PAGE else -(-own // PAGE)
    bt = np.zeros((rows, sp + op + 1), np.int64)
    nxt = sp + 1
    for r in range(rows):
        bt[r, :sp] = np.arange(1, sp + 1)
        bt[r, sp:sp + op] = np.arange(nxt, nxt + op)
        nxt += op
    return bt, np.full(rows, shared + own, np.int64), nxt


def replay_us(core, rows, bt, lens, k, v, runs, key):
    core.prepare(bt, lens, key=key)
    q = torch.randn(rows, H, D, device="cuda", dtype=torch.float16)
    out = torch.empty_like(q)
    core.decode(q, k, v, out=out)
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        core.decode(q, k, v, out=out)
    flush = torch.empty(256 << 20, dtype=torch.uint8, device="cuda")
    a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    ts = []
    for _ in range(runs):
        flush.fill_(1)
        a.record()
        g.replay()
        b.record()
        b.synchronize()
        ts.append(a.elapsed_time(b) * 1e3)
    return statistics.median(ts)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=200)
    ap.add_argument("--json")
    args = ap.parse_args()
    out = []
    print(f"{'rows':>5} {'context':>8} {'bound':>12} {'per-key us':>10} {'graph us':>9} "
          f"{'query us':>9} {'items':>6} {'capacity':>14}")
    for rows, shared, own in ((1, 0, 4096), (8, 2048, 256), (64, 2048, 256), (256, 1024, 128)):
        bt, lens, pages = tables(rows, shared, own)
        k = torch.randn(pages + 1, PAGE, HK, D, device="cuda", dtype=torch.float16)
        v = torch.randn_like(k)
        for bound_rows, bound_pages in ((256, 512), (512, 2048)):
            if rows > bound_rows:
                continue
            eager = ServingCore(H, HK, D, PAGE, num_pages=pages + 1, device="cuda", preset="h100",
                                headroom=2.0)
            t_key = replay_us(eager, rows, bt, lens, k, v, args.runs, key=rows)
            graph = ServingCore(H, HK, D, PAGE, num_pages=pages + 1, device="cuda",
                                preset="h100", headroom=2.0, graph_rows=bound_rows,
                                graph_pages=bound_pages)
            t_graph = replay_us(graph, rows, bt, lens, k, v, args.runs, key=rows)
            query = ServingCore(H, HK, D, PAGE, num_pages=pages + 1, device="cuda",
                                preset="h100", planner="query", headroom=2.0,
                                graph_rows=bound_rows, graph_pages=bound_pages)
            t_query = replay_us(query, rows, bt, lens, k, v, args.runs, key=rows)
            cap = graph.graph_plan.layout()["class_items"]
            r = dict(rows=rows, context=int(lens[0]), shared=shared, bound=[bound_rows, bound_pages],
                     per_key_us=t_key, graph_us=t_graph, query_us=t_query,
                     items=eager.plan.num_items, graph_class_items=cap,
                     workspace_mb=graph.graph_plan.workspace_bytes / 2**20)
            out.append(r)
            print(f"{rows:5d} {int(lens[0]):8d} {str((bound_rows, bound_pages)):>12} "
                  f"{t_key:10.1f} {t_graph:9.1f} {t_query:9.1f} {r['items']:6d} {str(cap):>14} "
                  f"ws {r['workspace_mb']:.1f} MB")
    if args.json:
        json.dump({"device": torch.cuda.get_device_name(), "results": out}, open(args.json, "w"),
                  indent=1)


if __name__ == "__main__":
    main()
