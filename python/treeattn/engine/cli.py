"""``treeattn-engine bench``: runs workloads W0-W6 with several attention backends in one
process, prints a table, writes JSON and a PNG.

Metrics per (workload, backend): decode tokens/s (tokens emitted / summed decode step time),
TPOT p50/p99 (per step; W6: step time over tokens emitted per request), attention time per step
(CUDA events over every layer, sampled), host planning time per step (block tables -> tree ->
plan -> upload), and the share of the step it takes. The ``none`` backend (attention skipped)
gives the upper bound.

KV cache dtypes (``--kv-dtype auto,fp8_e4m3``): every (workload, backend) runs once per KV dtype
('auto' = the model's dtype; fp8 caches quantize on write with per-layer scales ``--kv-scale``,
default 1.0). ``--drift`` adds, per workload, backend and fp8 KV dtype, the logits drift against
the model-dtype KV cache on the same backend (teacher-forced, ``--drift-steps`` decode steps):
max and mean absolute logit difference and the greedy-token agreement rate
(``check.kv_drift``).

Every flag is checked before anything runs (argparse's error naming the flag, exit code 2):
numbers strictly (digits, no sign or spaces, in range), workload and size names against
``workloads.PARAMS``, backends, presets, devices, and output files (never the same file as an
input or as the other output). Timings taken on a CPU come with a warning on stderr and in the
JSON (``warning``): they do not measure GPU decode."""

from __future__ import annotations

import argparse
import gc
import json
import math
import os
import platform
import re
import sys
import time
from typing import List, Optional, Tuple

import numpy as np


def _pct(xs, q):
    xs = [x for x in xs if not math.isnan(x)]
    return float(np.percentile(xs, q)) if xs else float("nan")


def _mean(xs):
    xs = [x for x in xs if not math.isnan(x)]
    return float(np.mean(xs)) if xs else float("nan")


# ---- flag values (argparse types: ArgumentTypeError becomes "argument --flag: message", exit 2)

_DIGITS = re.compile(r"[0-9]+\Z")
_REAL = re.compile(r"([0-9]+(\.[0-9]*)?|\.[0-9]+)([eE][-+]?[0-9]+)?\Z")


def _int_flag(lo: int, hi: int):
    """A strict non-negative decimal integer in [lo, hi]: digits only (no sign, spaces, '_')."""

    def parse(text: str) -> int:
        if not _DIGITS.match(text):
            raise argparse.ArgumentTypeError(
                f"expected a non-negative decimal integer (digits only), got {text!r}")
        v = int(text)
        if not lo <= v <= hi:
            raise argparse.ArgumentTypeError(f"{v} is out of range [{lo}, {hi}]")
        return v

    return parse


def _real_flag(hi: float = math.inf):
    """A strict non-negative decimal number (digits, '.', exponent) in [0, hi]."""

    def parse(text: str) -> float:
        v = float(text) if _REAL.match(text) else math.nan
        if not math.isfinite(v) or v > hi:
            raise argparse.ArgumentTypeError(
                f"expected a finite decimal number in [0, {hi:g}], got {text!r}")
        return v

    return parse


def _size(workload: str, key: str, text: str):
    """One workload size from text, parsed strictly, checked by workloads.check_size."""
    from .workloads import check_size

    try:
        v = (_real_flag() if key == "rate" else _int_flag(0, 1 << 62))(text)
        return check_size(workload, key, v, label=f"{workload}.{key}")
    except (argparse.ArgumentTypeError, TypeError, ValueError) as e:
        msg = str(e)
        raise argparse.ArgumentTypeError(msg if msg.startswith(workload) or msg.startswith(
            "name:") else f"{workload}.{key}: {msg}") from None


def _workloads_flag(text: str) -> List[Tuple[str, str, dict]]:
    """'W0,W1' or 'W1@n=16,prompt=1024;W0' -> [(spec, workload, sizes)]."""
    from .workloads import check_name

    specs = text.split(";") if ";" in text or "@" in text else text.split(",")
    out = []
    for spec in specs:
        wl, at, variant = spec.partition("@")
        try:
            check_name(wl)
        except ValueError as e:
            raise argparse.ArgumentTypeError(str(e)) from None
        sizes = {}
        for item in variant.split(",") if at else []:
            key, eq, value = item.partition("=")
            if not eq:
                raise argparse.ArgumentTypeError(f"{spec!r}: expected key=value sizes after "
                                                 f"'@', got {item!r}")
            sizes[key] = _size(wl, key, value)
        out.append((spec, wl, sizes))
    return out


def _set_flag(text: str) -> Tuple[str, str, object]:
    """'W1.n=32' -> ('W1', 'n', 32)."""
    name, eq, value = text.partition("=")
    wl, dot, key = name.partition(".")
    if not eq or not dot:
        raise argparse.ArgumentTypeError(f"expected WORKLOAD.size=value such as W1.n=32, got "
                                         f"{text!r}")
    return wl, key, _size(wl, key, value)


def _backends_flag(text: str) -> List[str]:
    from .backends import check_name

    try:
        return [check_name(b) for b in text.split(",")]
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def _kv_dtypes_flag(text: str) -> List[str]:
    """'auto,fp8_e4m3' -> the names, each checked by the engine's kv_dtype check."""
    import torch

    from ._checks import kv_dtype_arg

    names = text.split(",")
    for n in names:
        try:
            kv_dtype_arg("kv_dtype", n, torch.bfloat16)
        except (TypeError, ValueError) as e:
            raise argparse.ArgumentTypeError(str(e)) from None
    if len(set(names)) != len(names):
        raise argparse.ArgumentTypeError(f"kv_dtype: a KV dtype is named twice in {text!r}")
    return names


def _is_fp8_flag(name: str) -> bool:
    from ._checks import FP8_KV_DTYPES

    return name in FP8_KV_DTYPES


def _model_flag(text: str) -> str:
    from .model import PRESETS

    if text not in PRESETS:
        raise argparse.ArgumentTypeError(f"unknown preset {text!r}, expected one of "
                                         f"{sorted(PRESETS)}")
    return text


def _model_path_flag(text: str) -> str:
    if not os.path.isfile(os.path.join(text, "config.json")):
        raise argparse.ArgumentTypeError(f"{text!r} is not a Hugging Face model directory "
                                         f"(no config.json)")
    return text


def _device_flag(text: str) -> str:
    from ._checks import device_arg

    try:
        device_arg("device", text)
    except (TypeError, ValueError) as e:
        raise argparse.ArgumentTypeError(str(e).partition(": ")[2]) from None
    return text


def _input_file_flag(text: str) -> str:
    if not os.path.isfile(text):
        raise argparse.ArgumentTypeError(f"no such file: {text!r}")
    return text


def _output_file_flag(text: str) -> str:
    parent = os.path.dirname(os.path.abspath(text))
    if os.path.isdir(text):
        raise argparse.ArgumentTypeError(f"{text!r} is a directory")
    if not os.path.isdir(parent):
        raise argparse.ArgumentTypeError(f"the folder of {text!r} does not exist")
    return text


def _same_file(a: str, b: str) -> bool:
    """Whether paths a and b name one file: by device and inode when both exist, else by their
    resolved paths (a file not yet written)."""
    if os.path.exists(a) and os.path.exists(b):
        return os.path.samefile(a, b)
    return os.path.realpath(a) == os.path.realpath(b)


def _refuse_same_files(ap: argparse.ArgumentParser, inputs, outputs) -> None:
    """ap.error naming the output flag that is the same file as an input or an earlier output;
    inputs, outputs: (flag, path or None) pairs."""
    seen = [(f, p, "input") for f, p in inputs if p]
    for flag, path in outputs:
        if not path:
            continue
        for other, opath, kind in seen:
            if _same_file(path, opath):
                ap.error(f"argument {flag}: {path!r} is the same file as the {kind} {other} "
                         f"{opath!r}; refusing to overwrite it (give another path)")
        seen.append((flag, path, "output"))


def cpu_timing_warning(dry_run: bool, device: str) -> str:
    """The warning a bench run on a CPU carries (stderr and the JSON's `warning`)."""
    if dry_run:
        return (f"timings come from a CPU ({device}) and no model ran (--dry-run, random "
                f"logits): tokens/s, TPOT and step times are meaningless; only the host-side "
                f"figures (plan ms, host meta ms) are measurements")
    return (f"timings come from a CPU ({device}), not a GPU: tokens/s, TPOT, step and "
            f"attention times measure a CPU forward of the model and say nothing about GPU "
            f"decode speed; compare backends on a GPU")


class Progress:
    """A plain-text progress bar on stderr."""

    def __init__(self, label: str, enabled: bool = True):
        self.label, self.enabled, self.t0 = label, enabled, time.time()
        self.last = 0.0

    def __call__(self, done: int, total: int):
        now = time.time()
        if not self.enabled or (now - self.last < 0.5 and done != total):
            return
        self.last = now
        if total:
            w = 30
            k = min(w, int(w * done / total))
            bar = "#" * k + "." * (w - k)
            sys.stderr.write(f"\r  {self.label:28s} [{bar}] {done}/{total} "
                             f"{now - self.t0:6.1f}s")
        else:
            sys.stderr.write(f"\r  {self.label:28s} step {done} {now - self.t0:6.1f}s")
        sys.stderr.flush()

    def close(self):
        if self.enabled:
            sys.stderr.write("\n")


def bench_one(model, workload: str, params: dict, backend: str, args,
              kv_dtype: str = "auto") -> dict:
    import torch

    from . import workloads
    from .engine import Engine
    from .model import ModelConfig

    mt = workloads.max_tokens(workload, params)
    dry = isinstance(model, ModelConfig)
    scale = args.kv_scale if _is_fp8_flag(kv_dtype) else 1.0  # (scales are fp8's)
    eng = Engine(model, backend, page_size=args.page_size, max_tokens=mt,
                 max_seqs=workloads.max_seqs(workload, params),
                 cuda_graphs=(not args.no_graphs and not dry and model.device.type == "cuda"),
                 seed=args.seed, time_attention_every=args.attn_every, dry_run=dry,
                 kv_dtype=kv_dtype, k_scale=scale, v_scale=scale)
    max_steps = args.sdpa_steps if backend == "sdpa" and args.sdpa_steps else 0
    prog = Progress(f"{workload} {backend}", not args.no_progress)
    t0 = time.perf_counter()
    res = workloads.run(eng, workload, params, seed=args.seed, progress=prog,
                        max_steps=max_steps, temperature=args.temperature)
    wall = time.perf_counter() - t0
    prog.close()
    eng.cache.check()
    steps = eng.steps
    # timed: after the first warm-up steps, without the steps that captured a CUDA graph
    # (backends re-capture at different times; captures are counted separately)
    keep = [i for i, s in enumerate(steps) if i >= args.warmup_steps and not s.captured]
    keep = keep or list(range(len(steps)))
    st = [steps[i] for i in keep]
    step_ms = [s.step_ms for s in st]
    tpot = [res.tpot_ms[i] for i in keep]
    toks = sum(res.step_tokens[i] for i in keep)
    dec_s = sum(step_ms) / 1e3
    rec = {
        "workload": workload, "backend": backend, "kv_dtype": kv_dtype, "params": params,
        "cuda_graphs": eng.cuda_graphs and not dry,
        "steps": len(steps), "timed_steps": len(st), "tokens": res.tokens,
        "decode_tok_s": toks / dec_s if dec_s > 0 else float("nan"),
        "tpot_p50_ms": _pct(tpot, 50), "tpot_p99_ms": _pct(tpot, 99),
        "step_p50_ms": _pct(step_ms, 50),
        "attn_ms_per_step": _mean([s.attn_ms for s in st]),
        "plan_ms_per_step": _mean([s.plan_ms for s in st]),
        "prefetch_ms_per_step": _mean([s.prefetch_ms for s in st]),
        "tree_updates": dict(getattr(eng.backend, "tree_updates", {})),
        "host_meta_ms_per_step": _mean([s.host_meta_ms for s in st]),
        "plan_share": _mean([s.plan_ms / s.step_ms for s in st if s.step_ms > 0]),
        "rows_mean": _mean([s.rows for s in st]),
        "captures": sum(1 for s in steps if s.captured),
        "prefill_ms": res.prefill_ms, "wall_s": wall,
        "kv_stats": dict(eng.cache.stats), "info": res.info,
        "truncated_steps": bool(max_steps),
    }
    del eng
    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()
    return rec


def plan_cost_probe(args) -> dict:
    """Host cost of the ways to get each step's tree for a W1-like batch: rebuilding it with
    PrefixTree.from_block_tables vs updating the previous tree, with append_tokens per row or
    one append_tokens_bulk for all rows (what treeattn.serving.TreeSync calls)."""
    import treeattn

    n, prompt, P = 64, 4096, args.page_size
    pages = list(range(1, prompt // P + 1))
    nxt = len(pages) + 1
    tables = []
    for _ in range(n):
        tables.append(pages + [nxt])
        nxt += 1
    lens = [prompt + 1] * n
    t = time.perf_counter()
    reps = 20
    for _ in range(reps):
        treeattn.PrefixTree.from_block_tables(tables, lens, page_size=P)
    rebuild = (time.perf_counter() - t) / reps * 1e3
    tree = treeattn.PrefixTree.from_block_tables(tables, lens, page_size=P)
    tree.num_pages = nxt + n * 64
    tree.free_pages = list(range(nxt, nxt + n * 64))
    t = time.perf_counter()
    for _ in range(reps):
        for q in range(n):
            tree.append_tokens(q, 1)
    incr = (time.perf_counter() - t) / reps * 1e3
    rows, ones = list(range(n)), [1] * n
    t = time.perf_counter()
    for _ in range(reps):
        tree.append_tokens_bulk(rows, ones)
    bulk = (time.perf_counter() - t) / reps * 1e3
    t = time.perf_counter()
    for _ in range(reps):
        treeattn.plan(tree, 32, 8, 128, planner="auto")
    plan_ms = (time.perf_counter() - t) / reps * 1e3
    return {"batch": f"n={n} prompt={prompt} page={P}", "from_block_tables_ms": rebuild,
            "append_tokens_ms": incr, "append_tokens_bulk_ms": bulk, "plan_auto_ms": plan_ms}


def drift_one(model, workload: str, params: dict, backend: str, kv_dtype: str, args) -> dict:
    """The logits drift of a kv_dtype KV cache against the model-dtype one (check.kv_drift)."""
    from .check import kv_drift

    t0 = time.perf_counter()
    d = kv_drift(model, workload, params, backend, kv_dtype, page_size=args.page_size,
                 seed=args.seed, cuda_graphs=(not args.no_graphs
                                              and model.device.type == "cuda"),
                 max_steps=args.drift_steps, k_scale=args.kv_scale, v_scale=args.kv_scale,
                 temperature=args.temperature)
    return dict(d, workload=workload, backend=backend, kv_dtype=kv_dtype,
                ref_kv_dtype="auto", steps=args.drift_steps, wall_s=time.perf_counter() - t0)


def _markdown(hdr, rows) -> str:
    """A markdown table: header cells, then rows of cells (an error row: fewer cells)."""
    lines = ["| " + " | ".join(hdr) + " |", "|" + "---|" * len(hdr)]
    return "\n".join(lines + ["| " + " | ".join(r) + " |" for r in rows])


def _error_cells(r: dict) -> List[str]:
    return [r["workload"], r["backend"], r.get("kv_dtype", "auto"), r["error"][:60]]


def drift_table(drifts: List[dict]) -> str:
    hdr = ("workload", "backend", "kv", "vs", "logits calls", "rows", "max abs diff",
           "mean abs diff", "mean abs logit", "greedy agree", "KL max")
    return _markdown(hdr, [_error_cells(d) if d.get("error") else [
        d["workload"], d["backend"], d["kv_dtype"], d["ref_kv_dtype"], str(d["calls"]),
        str(d["rows"]), f"{d['max_abs_diff']:.4g}", f"{d['mean_abs_diff']:.4g}",
        f"{d['ref_mean_abs']:.4g}", f"{100 * d['greedy_agreement']:.2f}%",
        f"{d['kl_max']:.3g}"] for d in drifts])


def table(recs: List[dict]) -> str:
    hdr = ("workload", "backend", "kv", "tok/s", "TPOT p50", "TPOT p99", "attn ms", "plan ms",
           "plan %", "rows", "vs best", "graphs")
    best = {}
    for r in recs:
        if r["backend"] != "none" and not r.get("error"):
            best[r["workload"]] = max(best.get(r["workload"], 0), r["decode_tok_s"])
    rows = []
    for r in recs:
        if r.get("error"):
            rows.append(_error_cells(r))
            continue
        b = best.get(r["workload"])
        rows.append([
            r["workload"], r["backend"], r.get("kv_dtype", "auto"), f"{r['decode_tok_s']:.0f}",
            f"{r['tpot_p50_ms']:.2f}", f"{r['tpot_p99_ms']:.2f}", f"{r['attn_ms_per_step']:.2f}",
            f"{r['plan_ms_per_step']:.2f}", f"{100 * r['plan_share']:.1f}",
            f"{r['rows_mean']:.0f}", f"{r['decode_tok_s'] / b:.2f}" if b else "-",
            "yes" if r.get("cuda_graphs") else "no"])
    return _markdown(hdr, rows)


def plot(recs: List[dict], path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    recs = [r for r in recs if not r.get("error")]
    if len({r.get("kv_dtype", "auto") for r in recs}) > 1:  # one bar per backend and KV dtype
        recs = [dict(r, backend=f"{r['backend']} {r.get('kv_dtype', 'auto')}") for r in recs]
    wls = sorted({r["workload"] for r in recs})
    bks = [b for b in ["treeattn", "treeattn-query", "flashinfer", "sdpa", "none"]
           if any(r["backend"] == b for r in recs)]
    bks += sorted({r["backend"] for r in recs} - set(bks))
    fig, axes = plt.subplots(1, 2, figsize=(13, 4.5))
    w = 0.8 / max(len(bks), 1)
    for ax, key, title in ((axes[0], "decode_tok_s", "decode tokens/s (higher is better)"),
                           (axes[1], "tpot_p50_ms", "TPOT p50, ms (lower is better)")):
        for j, b in enumerate(bks):
            ys = []
            for wl in wls:
                m = [r[key] for r in recs if r["workload"] == wl and r["backend"] == b]
                ys.append(m[0] if m else 0.0)
            ax.bar(np.arange(len(wls)) + j * w, ys, w, label=b)
        ax.set_xticks(np.arange(len(wls)) + w * (len(bks) - 1) / 2)
        ax.set_xticklabels(wls, rotation=20 if max(map(len, wls)) > 4 else 0, fontsize=8)
        ax.set_title(title)
        ax.set_yscale("log")
    axes[0].legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def cmd_bench(args) -> int:
    import torch

    import treeattn

    from . import workloads
    from ._checks import kv_dtype_arg
    from .backends import available, kv_support
    from .model import Model, ModelConfig

    dev = torch.device(args.device or ("cuda" if torch.cuda.is_available() else "cpu"))
    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}[
        args.dtype or ("bf16" if dev.type == "cuda" else "fp32")]
    if args.dry_run:  # host side only: a config, no weights; small vocab (logits are random)
        dev, dtype = torch.device("cpu"), torch.bfloat16
        over = {"num_layers": args.layers} if args.layers else {}
        model = ModelConfig.preset(args.model or "llama3-8b", vocab_size=1024, **over)
        args.scale = args.scale or "gpu"
    elif args.model_path:
        model = Model.load(args.model_path, dtype=dtype, device=dev)
    else:
        over = {"num_layers": args.layers} if args.layers else {}
        cfg = ModelConfig.preset(args.model or ("llama3-8b" if dev.type == "cuda" else "tiny"),
                                 **over)
        model = Model.random(cfg, dtype=dtype, device=dev, seed=args.seed)
    scale = args.scale or ("gpu" if dev.type == "cuda" else "cpu")
    backends = args.backends
    recs, drifts = [], []
    t_start = time.time()
    cfg = model if isinstance(model, ModelConfig) else model.config
    cpu_name = platform.processor() or platform.machine() or "cpu"
    warning = cpu_timing_warning(args.dry_run, cpu_name) if dev.type != "cuda" else None
    print(f"treeattn-engine bench: model {cfg.arch} layers={cfg.num_layers} "
          f"hidden={cfg.hidden_size} {str(dtype)[6:]} on {dev}"
          f"{' DRY RUN (host side only)' if args.dry_run else ''}"
          f"{' (' + torch.cuda.get_device_name(dev) + ')' if dev.type == 'cuda' else ''}, "
          f"scale {scale}, page {args.page_size}", file=sys.stderr)
    if warning:
        print(f"treeattn-engine bench: WARNING: {warning}", file=sys.stderr)

    def why_not(b: str, kv: str) -> Optional[str]:
        """Why backend b with KV dtype kv does not run now (None: it runs)."""
        why = available(b, dev) or kv_support(b, kv_dtype_arg("kv_dtype", kv, dtype),
                                              None if args.dry_run else dtype)
        if why is None and args.time_budget and time.time() - t_start > args.time_budget:
            why = f"skipped: time budget {args.time_budget}s spent"
        return why

    for spec, wl, variant in args.workloads:  # "W1" or a variant "W1@n=16,prompt=1024"
        params = dict(workloads.PRESETS[scale][wl])
        params.update(variant)
        for swl, key, value in args.set or []:  # --set W1.n=32 (after the variant's sizes)
            if swl == wl:
                params[key] = value
        for b, kv in [(b, kv) for kv in args.kv_dtype for b in backends]:
            why = why_not(b, kv)
            if why:
                recs.append({"workload": spec, "backend": b, "kv_dtype": kv, "error": why,
                             "unavailable": True})
                print(f"  {spec} {b} {kv}: {why}", file=sys.stderr)
                continue
            try:
                recs.append(dict(bench_one(model, wl, params, b, args, kv), workload=spec))
            except Exception as e:  # noqa: BLE001 - one failing backend must not stop the run
                import traceback

                traceback.print_exc()
                err = f"{type(e).__name__}: {e}"
                rec = {"workload": spec, "backend": b, "kv_dtype": kv, "error": err}
                if dev.type == "cuda" and not args.no_graphs:  # once more, eagerly
                    try:
                        args.no_graphs = True
                        rec = dict(bench_one(model, wl, params, b, args, kv), workload=spec)
                        rec["note"] = f"CUDA-graph run failed ({err[:200]}); eager decode"
                    except Exception as e2:  # noqa: BLE001
                        traceback.print_exc()
                        rec["error"] += f"; eager: {type(e2).__name__}: {e2}"
                    finally:
                        args.no_graphs = False
                recs.append(rec)
        if args.drift and not args.dry_run:
            for b, kv in [(b, kv) for kv in args.kv_dtype if _is_fp8_flag(kv)
                          for b in backends if b != "none"]:
                why = why_not(b, kv)
                if why:
                    drifts.append({"workload": spec, "backend": b, "kv_dtype": kv, "error": why,
                                   "unavailable": True})
                    continue
                try:
                    drifts.append(dict(drift_one(model, wl, params, b, kv, args),
                                       workload=spec))
                except Exception as e:  # noqa: BLE001 - reported, the run goes on
                    import traceback

                    traceback.print_exc()
                    drifts.append({"workload": spec, "backend": b, "kv_dtype": kv,
                                   "error": f"{type(e).__name__}: {e}"})
    probe = plan_cost_probe(args)
    out = {"date": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()),
           "device": torch.cuda.get_device_name(dev) if dev.type == "cuda" else cpu_name,
           "timing_device": dev.type, "warning": warning,
           "torch": torch.__version__, "treeattn_cuda": treeattn.built_with_cuda,
           "model": (dict(vars(model), dry_run=True) if args.dry_run else model.describe()),
           "scale": scale, "page_size": args.page_size,
           "cuda_graphs": not args.no_graphs and dev.type == "cuda", "records": recs,
           "kv_dtypes": args.kv_dtype, "kv_scale": args.kv_scale, "drift": drifts,
           "tree_update_probe": probe}
    if args.json:
        with open(args.json, "w") as f:
            json.dump(out, f, indent=1, default=str)
    if args.png:
        try:
            plot(recs, args.png)
        except ImportError as e:  # the table and JSON still count; `plot` makes the PNG later
            print(f"no PNG ({e}); run `treeattn-engine plot {args.json} {args.png}` where "
                  f"matplotlib is installed", file=sys.stderr)
    print(table(recs))
    if drifts:
        print(f"logits drift of the fp8 KV cache against {str(dtype)[6:]} KV (teacher-forced, "
              f"{args.drift_steps or 'all'} decode steps):")
        print(drift_table(drifts))
    print(f"tree per step (W1-like, host): from_block_tables {probe['from_block_tables_ms']:.3f} "
          f"ms, incremental append_tokens {probe['append_tokens_ms']:.3f} ms (bulk "
          f"{probe['append_tokens_bulk_ms']:.3f} ms), "
          f"plan(auto) {probe['plan_auto_ms']:.3f} ms")
    if warning:
        print(f"treeattn-engine bench: WARNING: {warning}", file=sys.stderr)
    ok = all(not r.get("error") or r.get("unavailable") for r in recs + drifts)
    return 0 if ok else 1


def main(argv: Optional[List[str]] = None) -> int:
    from .backends import BACKENDS
    from .workloads import PRESETS, WORKLOADS

    ap = argparse.ArgumentParser(prog="treeattn-engine",
                                 description="treeattn decode engine (see treeattn.engine)")
    sub = ap.add_subparsers(dest="cmd", required=True)
    b = sub.add_parser("bench", help="workloads x backends: table, JSON, PNG")
    b.add_argument("--workloads", default=",".join(WORKLOADS), type=_workloads_flag,
                   help="W0..W6, comma separated; sizes of one run: W1@n=16,prompt=1024 "
                        "(then separate workloads with ';')")
    b.add_argument("--backends", default=",".join(BACKENDS), type=_backends_flag)
    b.add_argument("--model", type=_model_flag,
                   help="preset: llama3-8b (GPU default), qwen2-7b, tiny (CPU)")
    b.add_argument("--model-path", type=_model_path_flag,
                   help="local HF directory (config.json + safetensors)")
    b.add_argument("--layers", type=_int_flag(1, 1024), help="override the preset's layer count")
    b.add_argument("--dtype", choices=["bf16", "fp16", "fp32"])
    b.add_argument("--device", type=_device_flag)
    b.add_argument("--scale", choices=list(PRESETS), help="workload sizes (default by device)")
    b.add_argument("--set", action="append", type=_set_flag,
                   help="override a size, e.g. W1.n=32 (repeatable)")
    b.add_argument("--page-size", type=_int_flag(1, 256), default=16)
    b.add_argument("--kv-dtype", type=_kv_dtypes_flag, default=["auto"],
                   help="KV cache dtypes, comma separated: auto (the model's), fp8_e4m3 (fp8), "
                        "fp8_e5m2; every run once per dtype")
    b.add_argument("--kv-scale", type=_real_flag(), default=1.0,
                   help="fp8 KV: the k and v scale of every layer (dequantized = scale x fp8 "
                        "value; default 1.0, vLLM's without calibration)")
    b.add_argument("--drift", action="store_true",
                   help="per fp8 KV dtype and backend: logits drift against the model-dtype KV "
                        "(teacher-forced; max/mean abs diff, greedy-token agreement)")
    b.add_argument("--drift-steps", type=_int_flag(0, 1 << 31), default=32,
                   help="decode steps of each --drift run (0: the whole workload)")
    b.add_argument("--temperature", type=_real_flag(), default=0.8)
    b.add_argument("--seed", type=_int_flag(0, 2**64 - 1), default=0)
    b.add_argument("--no-graphs", action="store_true", help="eager decode on CUDA")
    b.add_argument("--attn-every", type=_int_flag(0, 1 << 31), default=8,
                   help="time attention with CUDA events every N steps (0: never)")
    b.add_argument("--warmup-steps", type=_int_flag(0, 1 << 31), default=2,
                   help="steps left out of the timing")
    b.add_argument("--sdpa-steps", type=_int_flag(0, 1 << 31), default=0,
                   help="cap the sdpa backend's decode steps (it is slow; 0 = no cap)")
    b.add_argument("--time-budget", type=_real_flag(), default=0,
                   help="seconds; later runs are skipped once spent (0 = none)")
    b.add_argument("--dry-run", action="store_true",
                   help="host side only (KV manager, trees, plans; no model, random logits): "
                        "per-step host cost at full size, on any machine")
    b.add_argument("--json", type=_output_file_flag)
    b.add_argument("--png", type=_output_file_flag)
    b.add_argument("--no-progress", action="store_true")
    pl = sub.add_parser("plot", help="table and PNG from a bench JSON (e.g. a device run)")
    pl.add_argument("json", type=_input_file_flag)
    pl.add_argument("png", nargs="?", type=_output_file_flag)
    args = ap.parse_args(argv)
    if args.cmd == "bench":
        if args.dry_run and args.model_path:
            b.error("argument --model-path: not used with --dry-run (it runs a config, no weights)")
        if args.dry_run and args.drift:
            b.error("argument --drift: not used with --dry-run (no model runs, logits are random)")
        if not args.kv_scale > 0:
            b.error(f"argument --kv-scale: expected a number > 0, got {args.kv_scale:g}")
        _refuse_same_files(b, [], [("--json", args.json), ("--png", args.png)])
        return cmd_bench(args)
    if args.cmd == "plot":
        _refuse_same_files(pl, [("json", args.json)], [("png", args.png)])
        try:
            with open(args.json) as f:
                data = json.load(f)
            recs = data["records"]
        except (OSError, ValueError, KeyError, TypeError) as e:
            pl.error(f"argument json: {args.json!r} is not a treeattn-engine bench JSON "
                     f"({type(e).__name__}: {e})")
        if data.get("warning"):
            print(f"treeattn-engine plot: WARNING: {data['warning']}", file=sys.stderr)
        print(table(recs))
        if args.png:
            plot(recs, args.png)
        return 0
    return 2


if __name__ == "__main__":
    sys.exit(main())
