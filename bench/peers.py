#!/usr/bin/env python3
"""Peer benchmark (runs on a GPU): treeattn (planners auto and query) against PyTorch SDPA
(cuDNN and flash backends) over per-query dense KV, and FlexAttention with a tree mask over the
packed unique KV, on the embedded workload sets. Writes a markdown table with the physical floor
beside each peer.

Floor of one call = max(bytes_min / HBM read bandwidth, flops_min / matmul rate), both ceilings
measured in this process (a streaming read through torch.sum and an 8192^3 bf16 matmul):
  bytes_min = unique KV tokens x kv_heads x head_dim x 2 (K, V) x 2 B + queries x q_heads x
              head_dim x 2 B x 2 (Q in, O out)
  flops_min = 4 x sum over queries of context x q_heads x head_dim.
Timing: triton.testing.do_bench (CUDA events, L2 flushed before every run, median).

Peers, how they see the KV:
  * treeattn: the paged cache, one copy of every shared token.
  * SDPA: each query's context copied densely ([1, kv_heads, ctx, dim] per query, queries of
    equal context batched), so shared prefixes are read once per query (what a query-centric
    kernel does). GQA through enable_gqa=True.
  * FlexAttention: the tree's unique tokens packed into one sequence (not paged), queries as the
    query sequence, a block mask from the tree (token visible iff its node is on the query's
    path). Compiled per shape, so only every --flex-every'th workload runs it.

Usage: python3 bench/peers.py --out peers.md [--sets fasttree,pat,deft,forge] [--every 1]
       [--time-budget 240]
A peer that fails (out of memory, unsupported) gets a note in its cell instead of a time.
"""

from __future__ import annotations

import argparse
import datetime
import math
import sys
import time
import traceback
from collections import defaultdict

import numpy as np
import torch
import triton.testing

import treeattn

DEV = torch.device("cuda", 0)


def bench_ms(fn, rep_ms=40):
    return float(triton.testing.do_bench(fn, warmup=10, rep=rep_ms, return_mode="median"))


def measure_ceilings():
    """(HBM read GB/s, bf16 matmul TFLOP/s) measured here."""
    x = torch.empty(1 << 30, dtype=torch.float16, device=DEV).uniform_()  # 2 GiB
    ms = bench_ms(lambda: torch.sum(x, dtype=torch.float32), rep_ms=100)
    hbm = x.numel() * 2 / (ms * 1e-3) / 1e9
    del x
    a = torch.randn(8192, 8192, device=DEV, dtype=torch.bfloat16)
    b = torch.randn(8192, 8192, device=DEV, dtype=torch.bfloat16)
    ms = bench_ms(lambda: a @ b, rep_ms=100)
    tc = 2 * 8192**3 / (ms * 1e-3) / 1e12
    del a, b
    torch.cuda.empty_cache()
    return hbm, tc


def floor_us(tree, H, Hk, D, hbm, tc):
    ctx = [tree.query_context(i) for i in range(tree.num_queries)]
    bytes_min = tree.unique_tokens() * Hk * D * 2 * 2 + tree.num_queries * H * D * 2 * 2
    flops = 4.0 * sum(ctx) * H * D
    return max(bytes_min / (hbm * 1e9), flops / (tc * 1e12)) * 1e6, ctx


def run_treeattn(tree, q, k, v, H, Hk, D, planner):
    plan = treeattn.plan(tree, H, Hk, D, planner=planner).to_device(DEV)
    out = torch.empty_like(q)
    treeattn.decode(q, k, v, plan, out=out)
    return bench_ms(lambda: treeattn.decode(q, k, v, plan, out=out)) * 1e3, out


def dense_groups(tree, k, v, ctx, max_bytes):
    """Per-query KV copied densely, queries batched by equal context length."""
    Hk, D = k.shape[2], k.shape[3]
    need = sum(ctx) * Hk * D * 2 * 2
    if need > max_bytes:
        raise MemoryError(f"dense KV needs {need / 2**30:.0f} GiB")
    tables, lens = tree.to_block_tables()
    P = k.shape[1]
    by_len = defaultdict(list)
    for i, n in enumerate(lens):
        by_len[int(n)].append(i)
    groups = []
    for n, rows in sorted(by_len.items()):
        idx = torch.tensor([tables[r][: (n + P - 1) // P] for r in rows], device=DEV)
        kk = k[idx].reshape(len(rows), -1, Hk, D)[:, :n].transpose(1, 2).contiguous()
        vv = v[idx].reshape(len(rows), -1, Hk, D)[:, :n].transpose(1, 2).contiguous()
        groups.append((torch.tensor(rows, device=DEV), kk, vv))
    return groups


def run_sdpa(q, groups, backend):
    from torch.nn.attention import sdpa_kernel
    from torch.nn.functional import scaled_dot_product_attention as sdpa

    qs = [q[rows].unsqueeze(2) for rows, _, _ in groups]  # [B, H, 1, D]

    def call():
        with sdpa_kernel([backend]):
            return [sdpa(qq, kk, vv, enable_gqa=True) for qq, (_, kk, vv) in zip(qs, groups)]

    outs = call()
    out = torch.empty_like(q)
    for (rows, _, _), o in zip(groups, outs):
        out[rows] = o.squeeze(2)
    return bench_ms(call) * 1e3, out


_flex = None


def run_flex(tree, q, k, v):
    """FlexAttention over the packed unique KV with a tree block mask."""
    global _flex
    from torch.nn.attention.flex_attention import create_block_mask, flex_attention

    if _flex is None:
        _flex = torch.compile(flex_attention, dynamic=False)
    nodes = [tree.node(i) for i in range(tree.num_nodes)]
    children = defaultdict(list)
    roots = []
    for i, n in enumerate(nodes):
        if n["alive"]:
            (roots if n["parent"] is None else children[n["parent"]]).append(i)
    tin, tout, order = {}, {}, []
    stack = [(r, False) for r in reversed(roots)]
    t = 0
    while stack:  # Euler tour: node a is an ancestor-or-self of x iff tin[a] <= tin[x] < tout[a]
        i, done = stack.pop()
        if done:
            tout[i] = t
            continue
        tin[i] = t
        t += 1
        order.append(i)
        stack.append((i, True))
        stack.extend((c, False) for c in reversed(children[i]))
    P, Hk, D = k.shape[1], k.shape[2], k.shape[3]
    tok_pages, tok_slots, lo, hi = [], [], [], []
    for i in order:
        n = nodes[i]
        j = n["page_offset"] + np.arange(n["tokens"])
        tok_pages.append(np.asarray(n["pages"])[j // P])
        tok_slots.append(j % P)
        lo.append(np.full(n["tokens"], tin[i]))
        hi.append(np.full(n["tokens"], tout[i]))
    pages = torch.from_numpy(np.concatenate(tok_pages)).to(DEV)
    slots = torch.from_numpy(np.concatenate(tok_slots)).to(DEV)
    kk = k[pages, slots].transpose(0, 1).unsqueeze(0).contiguous()  # [1, Hk, N, D]
    vv = v[pages, slots].transpose(0, 1).unsqueeze(0).contiguous()
    lo_t = torch.from_numpy(np.concatenate(lo)).to(DEV)
    hi_t = torch.from_numpy(np.concatenate(hi)).to(DEV)
    qpos = torch.tensor([tin[x] for x in tree.query_node], device=DEV)

    def mask_mod(b, h, q_idx, kv_idx):
        return (lo_t[kv_idx] <= qpos[q_idx]) & (qpos[q_idx] < hi_t[kv_idx])

    Q, N = q.shape[0], kk.shape[2]
    bm = create_block_mask(mask_mod, B=None, H=None, Q_LEN=Q, KV_LEN=N, device=DEV)
    qq = q.transpose(0, 1).unsqueeze(0).contiguous()  # [1, H, Q, D]

    def call():
        return _flex(qq, kk, vv, block_mask=bm, enable_gqa=True)

    out = call()[0].transpose(0, 1)
    return bench_ms(call) * 1e3, out


def note(e):
    if isinstance(e, (MemoryError, torch.OutOfMemoryError)):
        msg = "OOM: " + str(e).split("\n")[0]
    else:
        msg = f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
    msg = msg.replace("|", "/")
    return msg[:60] + ("..." if len(msg) > 60 else "")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", required=True, help="markdown file to write")
    ap.add_argument("--sets", default="fasttree,pat,deft,forge")
    ap.add_argument("--every", default="fasttree=1,pat=4,deft=1,forge=1",
                    help="take every n-th workload per set, e.g. 'fasttree=1,pat=4'")
    ap.add_argument("--flex-every", type=int, default=6,
                    help="run FlexAttention on every n-th workload (it compiles per shape)")
    ap.add_argument("--time-budget", type=float, default=300.0,
                    help="seconds; remaining workloads are skipped (and listed) after it")
    ap.add_argument("--max-dense-gib", type=float, default=40.0)
    ap.add_argument("--check", action="store_true", help="compare every peer's output")
    args = ap.parse_args()

    t0 = time.time()
    every = {kv.split("=")[0]: int(kv.split("=")[1]) for kv in args.every.split(",") if kv}
    work = []
    for s in args.sets.split(","):
        ws = treeattn.workloads(s, details=True)
        work += ws[:: every.get(s, 1)]
    hbm, tc = measure_ceilings()
    print(f"ceilings: HBM read {hbm:.0f} GB/s, bf16 matmul {tc:.0f} TFLOP/s", flush=True)
    from torch.nn.attention import SDPBackend

    peers = ["treeattn auto", "treeattn query", "SDPA cuDNN", "SDPA flash", "Flex tree mask"]
    rows, skipped = [], []
    gen = torch.Generator(device=DEV)
    gen.manual_seed(0)
    for wi, w in enumerate(work):
        if time.time() - t0 > args.time_budget:
            skipped.append(w["key"])
            continue
        tree = treeattn.PrefixTree.from_workload(w["key"])
        H, Hk, D = tree.shape
        P = tree.page_size
        fl, ctx = floor_us(tree, H, Hk, D, hbm, tc)
        k = torch.empty((tree.num_pages, P, Hk, D), dtype=torch.float16, device=DEV)
        k.uniform_(-1, 1, generator=gen)
        v = torch.empty_like(k).uniform_(-1, 1, generator=gen)
        q = torch.empty((tree.num_queries, H, D), dtype=torch.float16, device=DEV)
        q.uniform_(-1, 1, generator=gen)
        cells, outs = {}, {}
        for name, fn in [
            ("treeattn auto", lambda: run_treeattn(tree, q, k, v, H, Hk, D, "auto")),
            ("treeattn query", lambda: run_treeattn(tree, q, k, v, H, Hk, D, "query")),
        ]:
            try:
                cells[name], outs[name] = fn()
            except Exception as e:  # noqa: BLE001 - reported in the table
                cells[name] = note(e)
        try:
            groups = dense_groups(tree, k, v, ctx, args.max_dense_gib * 2**30)
        except Exception as e:  # noqa: BLE001
            groups = e
        for name, be in [("SDPA cuDNN", SDPBackend.CUDNN_ATTENTION),
                         ("SDPA flash", SDPBackend.FLASH_ATTENTION)]:
            try:
                if isinstance(groups, Exception):
                    raise groups
                cells[name], outs[name] = run_sdpa(q, groups, be)
            except Exception as e:  # noqa: BLE001
                cells[name] = note(e)
        groups = None
        if wi % args.flex_every == 0:
            try:
                cells["Flex tree mask"], outs["Flex tree mask"] = run_flex(tree, q, k, v)
            except Exception as e:  # noqa: BLE001
                cells["Flex tree mask"] = note(e)
        else:
            cells["Flex tree mask"] = "not run (--flex-every)"
        if args.check and "treeattn auto" in outs:
            base = outs["treeattn auto"].float()
            for name, o in outs.items():
                err = (o.float() - base).abs().max().item()
                if not err < 0.05:
                    cells[name] = f"{cells[name]:.1f} (MISMATCH {err:.2g})"
        rows.append((w, f"{H}/{Hk}", tree.num_queries, fl, cells))
        line = " | ".join(f"{p}: {c:.1f}" if isinstance(c, float) else f"{p}: {c}"
                          for p, c in cells.items())
        print(f"[{time.time() - t0:6.1f}s] {w['key']} {w['name']}: floor {fl:.1f} us | {line}",
              flush=True)
        del k, v, q, outs
        torch.cuda.empty_cache()

    with open(args.out, "w") as f:
        f.write(f"# treeattn vs peers on {torch.cuda.get_device_name(0)}\n\n")
        f.write(f"{datetime.date.today()}, torch {torch.__version__}, fp16, page sizes from the "
                f"workload lines. Ceilings measured here: HBM read {hbm:.0f} GB/s, bf16 matmul "
                f"{tc:.0f} TFLOP/s. Times are medians in microseconds (L2 flushed); "
                f"(x%) = floor / time.\n\n")
        f.write("| workload | set | heads | queries | floor us | "
                + " | ".join(peers) + " |\n")
        f.write("|---|---|---|---|---|" + "---|" * len(peers) + "\n")
        fr = defaultdict(list)
        for w, heads, nq, fl, cells in rows:
            out = []
            for p in peers:
                c = cells.get(p, "")
                if isinstance(c, float):
                    out.append(f"{c:.1f} ({100 * fl / c:.0f}%)")
                    fr[p].append(fl / c)
                else:
                    out.append(c)
            f.write(f"| {w['name']} | {w['set']} | {heads} | {nq} | {fl:.1f} | "
                    + " | ".join(out) + " |\n")
        f.write("\nGeometric mean of floor / time over the workloads each peer ran:\n\n")
        for p in peers:
            if fr[p]:
                g = math.exp(sum(math.log(x) for x in fr[p]) / len(fr[p]))
                f.write(f"- {p}: {100 * g:.1f}% over {len(fr[p])} workloads\n")
        if skipped:
            f.write(f"\nNot run (time budget {args.time_budget:.0f} s): {', '.join(skipped)}\n")
    print(f"wrote {args.out} ({len(rows)} workloads, {len(skipped)} skipped) in "
          f"{time.time() - t0:.0f} s")
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except Exception:  # noqa: BLE001
        traceback.print_exc()
        sys.exit(1)
