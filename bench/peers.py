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

fp8 KV mode (issue 24): python3 bench/peers.py --fp8 --out fp8.md --json fp8.json
       [--kv-dtype fp8_e4m3] [--sets pat] [--lines 'N=256 C=4096 heads=32/8;...']
Per workload line: the floor of an fp8 KV cache (KV 1 byte per element, Q and O 2 bytes; the same
compute floor), treeattn `auto` on the fp16 cache, treeattn `auto` on the fp8 cache
(plan(kv_dtype=...), decode with k_scale / v_scale) and FlashInfer's paged decode on the fp8
cache (BatchDecodeWithPagedKVCacheWrapper, kv_data_type = the fp8 dtype, fp16 q, with and without
tensor cores; the best of the two counts). FlashInfer reads the tree's block tables
(PrefixTree.to_block_tables: one row per query, shared prefixes as shared pages of the same
cache), so it reads a shared page once per query that holds it. The fp16 cache holds exactly the
dequantized fp8 values, so treeattn fp16 is the reference every fp8 output is checked against.
Scales 1.0 (vLLM's without calibration; FlashInfer then skips its output rescale). FlashInfer
JIT-compiles its fp8 modules on first use unless its wheel carries them prebuilt: the time of its
first call is reported.
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


# ---- fp8 KV mode

#: The issue's no-sharing lines (page 16, head_dim 128), run before the sets.
FP8_LINES = ["N=256 C=4096 heads=32/8", "N=512 C=1024 heads=32/8"]
_FP8 = {"fp8_e4m3": torch.float8_e4m3fn, "fp8_e5m2": torch.float8_e5m2}


def floor_fp8_us(tree, H, Hk, D, hbm, tc):
    """floor_us with 1-byte K and V (Q and O stay 2 bytes)."""
    ctx = [tree.query_context(i) for i in range(tree.num_queries)]
    bytes_min = tree.unique_tokens() * Hk * D * 2 + tree.num_queries * H * D * 2 * 2
    return max(bytes_min / (hbm * 1e9), 4.0 * sum(ctx) * H * D / (tc * 1e12)) * 1e6


def block_table_csr(tree):
    """The tree's per-query block tables as FlashInfer's CSR page table (device int32):
    (indptr, indices, last_page_len)."""
    tables, lens = tree.to_block_tables()
    P = tree.page_size
    lens = np.asarray(lens, np.int64)
    counts = (lens + P - 1) // P
    indptr = np.zeros(len(lens) + 1, np.int64)
    np.cumsum(counts, out=indptr[1:])
    indices = np.concatenate([np.asarray(t[:c], np.int64) for t, c in zip(tables, counts)])
    last = lens - (counts - 1) * P
    return tuple(torch.from_numpy(x.astype(np.int32)).to(DEV) for x in (indptr, indices, last))


def fill_copied_slots(tree, *caches):
    """Makes the block-table view of every path read what the tree reads: a node that starts
    mid-page (page_offset > 0) owns a first page whose leading slots stand for its parent's last
    tokens (a serving engine's copy-on-write); they get the parent's last page's slots. Parents
    first (by depth), so a short parent passes on what it got."""
    nodes = [tree.node(i) for i in range(tree.num_nodes)]

    def depth(i):
        d = 0
        while nodes[i]["parent"] is not None:
            i, d = nodes[i]["parent"], d + 1
        return d

    for i in sorted((i for i, n in enumerate(nodes) if n["alive"]), key=depth):
        n = nodes[i]
        off, par = n["page_offset"], n["parent"]
        if off == 0 or par is None:
            continue
        src, dst = nodes[par]["pages"][-1], n["pages"][0]
        for c in caches:
            c[dst, :off] = c[src, :off]


def run_treeattn_fp8(tree, q, k8, v8, H, Hk, D, kv_dtype):
    plan = treeattn.plan(tree, H, Hk, D, planner="auto", kv_dtype=kv_dtype).to_device(DEV)
    out = torch.empty_like(q)

    def call():
        return treeattn.decode(q, k8, v8, plan, out=out, k_scale=1.0, v_scale=1.0)

    call()
    return bench_ms(call) * 1e3, out


class FlashInferFp8:
    """FlashInfer's paged decode on the fp8 cache; one workspace for every line."""

    def __init__(self):
        import flashinfer

        self.fi = flashinfer
        self.ws = torch.zeros(512 << 20, dtype=torch.uint8, device=DEV)

    def run(self, tree, q, k8, v8, H, Hk, D, tensor_cores):
        w = self.fi.BatchDecodeWithPagedKVCacheWrapper(self.ws, "NHD",
                                                       use_tensor_cores=tensor_cores)
        w.plan(*block_table_csr(tree), H, Hk, D, tree.page_size, pos_encoding_mode="NONE",
               q_data_type=q.dtype, kv_data_type=k8.dtype)
        out = torch.empty_like(q)

        def call():
            return w.run(q, (k8, v8), k_scale=1.0, v_scale=1.0, out=out)

        call()
        return bench_ms(call) * 1e3, out

    def first_call_s(self, kv):
        """Seconds of the first call of each variant on a small tree (the JIT compile of its
        module unless the wheel has it prebuilt)."""
        tree = treeattn.PrefixTree.from_levels("N=1,2 C=64,8 heads=32/8")
        k8 = torch.zeros((tree.num_pages, tree.page_size, 8, 128), device=DEV).to(kv)
        q = torch.zeros((tree.num_queries, 32, 128), dtype=torch.float16, device=DEV)
        times = {}
        for tc in (False, True):
            t = time.time()
            try:
                self.run(tree, q, k8, k8.clone(), 32, 8, 128, tc)
                torch.cuda.synchronize()
                times[_fi_name(tc)] = round(time.time() - t, 1)
            except Exception as e:  # noqa: BLE001 - reported
                times[_fi_name(tc)] = note(e)
        return times


def _fi_name(tc):
    return "FlashInfer fp8 " + ("tensor cores" if tc else "CUDA cores")


def _fp8_lines(args):
    """[(key, name, set)] of the fp8 table: --lines, then every --every'th line of --sets."""
    out = [(ln, ln, "no-sharing") for ln in (args.lines.split(";") if args.lines else [])]
    every = {kv.split("=")[0]: int(kv.split("=")[1]) for kv in args.every.split(",") if kv}
    for s in [x for x in args.sets.split(",") if x]:
        out += [(w["key"], w["name"], s)
                for w in treeattn.workloads(s, details=True)[:: every.get(s, 1)]]
    return out


def _gm(xs):
    return math.exp(sum(math.log(x) for x in xs) / len(xs)) if xs else float("nan")


def main_fp8(args):
    """The fp8 KV table (see the module docstring); writes args.out and args.json."""
    import json

    t0 = time.time()
    kv = _FP8[args.kv_dtype]
    hbm, tc = measure_ceilings()
    print(f"ceilings: HBM read {hbm:.0f} GB/s, bf16 matmul {tc:.0f} TFLOP/s", flush=True)
    try:
        fi = FlashInferFp8()
        first = fi.first_call_s(kv)
    except Exception as e:  # noqa: BLE001 - the table says why
        fi, first = None, {"import": note(e)}
    print(f"FlashInfer first calls (JIT unless prebuilt): {first}", flush=True)
    gen = torch.Generator(device=DEV)
    gen.manual_seed(0)
    recs, skipped = [], []
    for key, name, wset in _fp8_lines(args):
        if time.time() - t0 > args.time_budget:
            skipped.append(name)
            continue
        tree = (treeattn.PrefixTree.from_levels(key) if wset == "no-sharing"
                else treeattn.PrefixTree.from_workload(key))
        H, Hk, D = tree.shape
        P = tree.page_size
        rec = {"workload": name, "set": wset, "heads": f"{H}/{Hk}", "queries": tree.num_queries,
               "kv_dtype": args.kv_dtype, "page_size": P,
               "floor_fp8_us": floor_fp8_us(tree, H, Hk, D, hbm, tc),
               "floor_fp16_us": floor_us(tree, H, Hk, D, hbm, tc)[0], "us": {}, "err": {}}
        k8 = torch.empty((tree.num_pages, P, Hk, D), device=DEV).uniform_(-1, 1, generator=gen)
        k8 = k8.to(kv)
        v8 = torch.empty_like(k8, dtype=torch.float32).uniform_(-1, 1, generator=gen).to(kv)
        fill_copied_slots(tree, k8.view(torch.uint8), v8.view(torch.uint8))
        q = torch.empty((tree.num_queries, H, D), dtype=torch.float16, device=DEV)
        q.uniform_(-1, 1, generator=gen)
        runs = [("treeattn fp16", lambda: run_treeattn(tree, q, k8.half(), v8.half(), H, Hk, D,
                                                       "auto")),
                ("treeattn fp8", lambda: run_treeattn_fp8(tree, q, k8, v8, H, Hk, D,
                                                          args.kv_dtype))]
        if fi is not None:
            runs += [(_fi_name(c), lambda c=c: fi.run(tree, q, k8, v8, H, Hk, D, c))
                     for c in (False, True)]
        ref = None
        for peer, fn in runs:
            try:
                rec["us"][peer], out = fn()
                if ref is None:
                    ref = out.float()  # treeattn fp16 on the dequantized values
                else:
                    rec["err"][peer] = (out.float() - ref).abs().max().item()
                    if not rec["err"][peer] < args.fp8_tol:
                        rec["us"][peer] = f"MISMATCH {rec['err'][peer]:.2g}"
            except Exception as e:  # noqa: BLE001 - reported in the table
                rec["us"][peer] = note(e)
            torch.cuda.empty_cache()
        fis = [(rec["us"][_fi_name(c)], _fi_name(c)) for c in (False, True)
               if isinstance(rec["us"].get(_fi_name(c)), float)]
        if fis:
            rec["fi_best_us"], rec["fi_best"] = min(fis)
        recs.append(rec)
        print(f"[{time.time() - t0:6.1f}s] {name}: fp8 floor {rec['floor_fp8_us']:.1f} us | "
              + " | ".join(f"{p}: {c:.1f}" if isinstance(c, float) else f"{p}: {c}"
                           for p, c in rec["us"].items()), flush=True)
        del k8, v8, q, ref
        torch.cuda.empty_cache()
    summary = _fp8_summary(recs)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"device": torch.cuda.get_device_name(0), "torch": torch.__version__,
                       "date": str(datetime.date.today()), "hbm_gbs": hbm, "tc_tflops": tc,
                       "kv_dtype": args.kv_dtype, "flashinfer_first_call_s": first,
                       "records": recs, "summary": summary, "skipped": skipped}, f, indent=1)
    with open(args.out, "w") as f:
        f.write(_fp8_markdown(recs, summary, first, hbm, tc, args, skipped))
    print(f"wrote {args.out} ({len(recs)} lines, {len(skipped)} skipped) in "
          f"{time.time() - t0:.0f} s")
    return 0


def _fp8_summary(recs):
    """Per set: geomeans of fp8 floor / time, fp16 / fp8 time, FlashInfer / treeattn fp8 time,
    and how many lines treeattn fp8 beats FlashInfer's best fp8 variant on."""
    out = {}
    for wset in sorted({r["set"] for r in recs}):
        rs = [r for r in recs if r["set"] == wset and isinstance(r["us"].get("treeattn fp8"),
                                                                  float)]
        f16 = [r for r in rs if isinstance(r["us"].get("treeattn fp16"), float)]
        vs = [r for r in rs if "fi_best_us" in r]
        out[wset] = {
            "lines": len(rs),
            "fp8_floor_share": _gm([r["floor_fp8_us"] / r["us"]["treeattn fp8"] for r in rs]),
            "fp16_over_fp8": _gm([r["us"]["treeattn fp16"] / r["us"]["treeattn fp8"]
                                  for r in f16]),
            "fi_over_treeattn_fp8": _gm([r["fi_best_us"] / r["us"]["treeattn fp8"] for r in vs]),
            "faster_than_fi": sum(r["us"]["treeattn fp8"] < r["fi_best_us"] for r in vs),
            "vs_fi_lines": len(vs)}
    return out


def _fp8_markdown(recs, summary, first, hbm, tc, args, skipped):
    L = [f"# treeattn fp8 KV ({args.kv_dtype}) vs FlashInfer fp8 on "
         f"{torch.cuda.get_device_name(0)}\n",
         f"{datetime.date.today()}, torch {torch.__version__}; fp16 q/out, KV {args.kv_dtype} "
         f"(scales 1.0). Ceilings measured here: HBM read {hbm:.0f} GB/s, bf16 matmul {tc:.0f} "
         f"TFLOP/s. Median us (L2 flushed); (x%) = fp8 floor / time. fp16/fp8 = treeattn "
         f"fp16 time / treeattn fp8 time; FI/ta = FlashInfer's best fp8 time / treeattn fp8 "
         f"time (> 1: treeattn faster). FlashInfer's first calls (JIT unless prebuilt): "
         f"{first}.\n",
         "| workload | set | heads | queries | fp8 floor us | fp16 floor us | treeattn fp16 | "
         "treeattn fp8 | FlashInfer fp8 best | fp16/fp8 | FI/ta |",
         "|---|---|---|---|---|---|---|---|---|---|---|"]

    def cell(v, fl):
        return f"{v:.1f} ({100 * fl / v:.0f}%)" if isinstance(v, float) else str(v)

    for r in recs:
        u, fl = r["us"], r["floor_fp8_us"]
        a, b = u.get("treeattn fp16"), u.get("treeattn fp8")
        best = r.get("fi_best_us")
        fi = (f"{best:.1f} ({r['fi_best'].split()[-2]} cores)" if best else
              "; ".join(str(u[_fi_name(c)]) for c in (False, True) if _fi_name(c) in u)
              or "not run")
        both = isinstance(a, float) and isinstance(b, float)
        L.append(f"| {r['workload']} | {r['set']} | {r['heads']} | {r['queries']} | {fl:.1f} | "
                 f"{r['floor_fp16_us']:.1f} | {cell(a, fl)} | {cell(b, fl)} | {fi} | "
                 f"{f'{a / b:.2f}x' if both else '-'} | "
                 f"{f'{best / b:.2f}' if best and isinstance(b, float) else '-'} |")
    L.append("\nPer set (geometric means over the lines treeattn fp8 ran):\n")
    for wset, s in summary.items():
        L.append(f"- {wset}: {s['lines']} lines; treeattn fp8 at {100 * s['fp8_floor_share']:.1f}% "
                 f"of the fp8 floor; {s['fp16_over_fp8']:.2f}x faster than treeattn fp16; "
                 f"FlashInfer fp8 / treeattn fp8 {s['fi_over_treeattn_fp8']:.2f}x; treeattn fp8 "
                 f"faster than FlashInfer fp8 on {s['faster_than_fi']}/{s['vs_fi_lines']} lines")
    if skipped:
        L.append(f"\nNot run (time budget {args.time_budget:.0f} s): {', '.join(skipped)}")
    return "\n".join(L) + "\n"


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
    ap.add_argument("--fp8", action="store_true",
                    help="the fp8 KV table instead (treeattn fp16 / fp8, FlashInfer fp8; see the "
                         "module docstring); --sets defaults to pat, --lines to the no-sharing "
                         "lines")
    ap.add_argument("--kv-dtype", choices=sorted(_FP8), default="fp8_e4m3")
    ap.add_argument("--lines", default=None,
                    help="fp8: workload lines run first, ';' separated (default: "
                         + "; ".join(FP8_LINES) + ")")
    ap.add_argument("--json", default=None, help="fp8: JSON of every record")
    ap.add_argument("--fp8-tol", type=float, default=2e-2,
                    help="fp8: largest |out - treeattn fp16 out| on the same dequantized KV")
    args = ap.parse_args()
    if args.fp8:
        if args.lines is None:
            args.lines = ";".join(FP8_LINES)
        if "--sets" not in sys.argv:
            args.sets = "pat"
        if "--every" not in sys.argv:
            args.every = "pat=1"
        return main_fp8(args)

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
