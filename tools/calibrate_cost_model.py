#!/usr/bin/env python3
"""Fits the cost model's free DeviceInfo parameters to measured benchmark results.

Reads a `treeattn bench --json` results file (bench/results/<gpu>-<date>.json, or .json.gz),
re-plans every (workload, planner) it names, and fits launch_overhead_us, merge_launch_us,
item_overhead_us, mma_efficiency, the per-tile latency floors and the mask penalties
(docs/cost_model.md) so that
log(estimated time) matches log(median time) over all results (least squares in log space,
Nelder-Mead over the log of the parameters). Prints the fit, its error before/after, and what
`auto` would pick per line.

The estimate is the library's own: the measured plans are planned once (with the DeviceInfo the
benchmark planned with, by default DeviceInfo() defaults) and kept fixed, and each parameter set
is scored with plan.stats(device)["est_time_us"] (every DeviceInfo field is bound in Python), so
the fitted model is the C++ model, not a Python copy. Each re-planned plan is checked against the
benchmark file (items and KV bytes read); plans that differ (e.g. auto under a changed model) are
skipped.

Usage: python3 tools/calibrate_cost_model.py bench/results/h100-2026-11-22.json \
           [--base h100] [--iters 600] [--auto-device h100] [--free a,b,..] [--skip-fit]
Needs the treeattn package (pip install ., CPU-only is enough). Run by an interpreter without it,
the script runs itself again with the repository's .venv/bin/python (where tools/setup.sh and
tools/test.sh install it) when that has it, and otherwise says how to get it.
"""
import argparse
import gzip
import json
import math
import os
import sys
from collections import defaultdict


def _import_treeattn():
    """The installed treeattn package. `python3 tools/<script>` puts tools/ first on sys.path,
    where tools/treeattn/ (the CLI's C++ sources) would be imported as an empty namespace package
    named treeattn: that folder is taken off the path first."""
    here = os.path.dirname(os.path.abspath(__file__))
    sys.path[:] = [p for p in sys.path if os.path.abspath(p or os.curdir) != here]
    try:
        import treeattn
        if hasattr(treeattn, "plan"):
            return treeattn
    except ImportError:
        pass
    venv_dir = os.path.join(os.path.dirname(here), ".venv")
    venv = os.path.join(venv_dir, "bin", "python")
    if os.path.exists(venv) and os.path.realpath(sys.prefix) != os.path.realpath(venv_dir):
        # (once: run by .venv's python, sys.prefix is .venv)
        os.execv(venv, [venv, os.path.abspath(__file__)] + sys.argv[1:])
    sys.exit(f"calibrate_cost_model: the treeattn Python package is not installed for "
             f"{sys.executable}: pip install . (CPU-only is enough), or run bash tools/setup.sh "
             f"and bash tools/test.sh, which install it into .venv")


treeattn = _import_treeattn()

# Free parameters: name -> (start, lower, upper). ctas_per_sm / wide_ctas_per_sm /
# m128_ctas_per_sm are integers, set from the kernels' occupancy (include/treeattn/plan/
# tile_policy.h: 2 per SM for deep kM16/kM64, 4 wide, 1 kM128).
FREE = {
    "launch_overhead_us": (9.6, 0.2, 20.0),
    "merge_launch_us": (0.6, 0.05, 20.0),
    "item_overhead_us": (4.7, 0.05, 20.0),
    "mma_efficiency": (0.3, 0.02, 1.0),
    "tile_latency_us": (0.4, 0.01, 5.0),
    "tile_latency_m128_us": (3.0, 0.01, 8.0),
    "tile_latency_ws_m128_us": (1.0, 0.01, 8.0),  # kM128 CTAs of the warp-specialized kernel
    "tile_latency_ws_m64_us": (1.0, 0.01, 8.0),  # kM64 CTAs of the warp-specialized kernel
    "mma_efficiency_ws_m128": (0.6, 0.05, 1.0),  # their share of the tensor-core rate
    "l2_read_GBps": (5500.0, 2000.0, 20000.0),  # the KV bytes read (re-reads too) over L2
    "tile_latency_wide_us": (1.5, 0.01, 5.0),
    "merge_slot_us": (0.64, 0.01, 5.0),
    "mask_penalty": (0.5, 0.001, 5.0),  # masked kM64/kM128 items: CTA time x (1 + this)
    "mask_penalty_m16": (0.05, 0.001, 5.0),  # masked kM16 items
    "path_mask_penalty": (0.5, 0.001, 5.0),  # masked kM64/kM128 items over root paths (paths*)
    "path_mask_penalty_m16": (0.1, 0.001, 5.0),  # masked kM16 items over root paths
    "cta_bw_factor": (1.5, 1.0, 8.0),  # a CTA's KV stream over its HBM share (L2 re-reads)
    # critical-path latency terms (used when the base device has latency_terms on)
    "first_launch_us": (4.0, 0.2, 20.0),
    "pdl_launch_us": (1.0, 0.05, 20.0),
    "round_trip_us": (0.8, 0.05, 5.0),
    "cta_fixed_us": (1.2, 0.05, 20.0),
    "merge_release_us": (2.0, 0.05, 20.0),
    "pair_exchange_us": (0.15, 0.0, 5.0),  # a kM16 cluster pair's exchange (kv_pairs on)
}
# The terms that only one mode reads: a fit of the other mode leaves them out.
LATENCY_ONLY = {"first_launch_us", "pdl_launch_us", "round_trip_us", "cta_fixed_us",
                "merge_release_us"}
LATENCY_OFF_ONLY = {"launch_overhead_us", "merge_launch_us", "item_overhead_us"}
FIXED = {"ctas_per_sm": 2, "wide_ctas_per_sm": 4, "m128_ctas_per_sm": 1}
# The original, uncalibrated kernel terms (the DeviceInfo defaults before the fit).
LEGACY = {"launch_overhead_us": 2.5, "merge_launch_us": 2.5, "item_overhead_us": 1.0,
          "mma_efficiency": 0.55, "tile_latency_us": 0, "tile_latency_m128_us": 0,
          "tile_latency_ws_m128_us": 0, "tile_latency_ws_m64_us": 0, "mma_efficiency_ws_m128": 0,
          "l2_read_GBps": 0,
          "tile_latency_wide_us": 0, "merge_slot_us": 0, "mask_penalty": 0, "mask_penalty_m16": 0,
          "path_mask_penalty": 0, "path_mask_penalty_m16": 0,
          "cta_bw_factor": 1, "ctas_per_sm": 2, "wide_ctas_per_sm": 0, "m128_ctas_per_sm": 0}


def device(spec):
    """'legacy' (DeviceInfo() defaults: what the benchmark planned with) or a preset, then
    ',k=v' overrides."""
    name, *over = spec.split(",")
    d = treeattn.DeviceInfo() if name == "legacy" else treeattn.DeviceInfo.preset(name)
    for kv in over:
        k, v = kv.split("=")
        setattr(d, k, type(getattr(d, k))(float(v)))
    return d


def with_params(base, params):
    d = device(base)
    for k, v in params.items():
        setattr(d, k, type(getattr(d, k))(v))
    return d


def problems(res):
    """(set, workload) -> PrefixTree for every line the results name."""
    trees = {}
    for w in treeattn.workloads("all", details=True):
        trees[(w["set"], w["name"])] = treeattn.PrefixTree.from_workload(w["key"])
    for r in res:
        if r["set"] == "" and ("", r["workload"]) not in trees:
            trees[("", r["workload"])] = treeattn.PrefixTree.from_levels(r["workload"])
    return trees


def plan_all(trees, dev, planners, groups=(0,)):
    """(set, workload with ' heads=qo/kv' when missing, planner, paths group) -> Plan; the paths
    and auto plans once per paths group (a results file's `paths_group`: bench --paths-group)."""
    out = {}
    for (s, w), tree in trees.items():
        name = w
        if "heads=" not in name:
            qo, kv, _ = tree.shape
            name += f" heads={qo or 32}/{kv or 8}"
        for p in planners:
            for g in groups if p in ("paths", "paths-split", "auto") else (0,):
                kw = {"paths_group": g} if g else {}  # (a treeattn without the option: g = 0)
                out[(s, name, p, g)] = treeattn.plan(tree, planner=p, device=dev, **kw)
    return out


def paths_group(r):
    """The paths group a result's plan used: bench --paths-group's `paths_group`, or `paths_k` of
    stop 40's probe sweep (h100-2026-11-27-s40-paths-sweep.json); 0 = the cost model's."""
    return r.get("paths_group", r.get("paths_k", 0))


def result_key(r):
    """A result's (set, workload, planner, paths group): its plan in plan_all's dict."""
    return (r["set"], r["workload"], r["planner"], paths_group(r))


def label(r):
    """A result's planner, with /gK where the paths group was fixed."""
    g = paths_group(r)
    return r["planner"] + (f"/g{g}" if g else "")


def plan_key(plan, dev):
    st = plan.stats(dev)
    return (plan.num_items, plan.num_rows, plan.num_ranges, plan.num_slots, st["kv_bytes_read"],
            st["partial_bytes"], st["qo_bytes"], st["flops"])


class Evaluator:
    """Estimates of the fixed plans under one parameter set (base preset + params)."""

    def __init__(self, plans, base):
        self.plans = plans
        self.base = base

    def __call__(self, params):
        dev = with_params(self.base, params)
        return [p.stats(dev)["est_time_us"] for p in self.plans]


def log_errors(est, meas):
    return [math.log(e / m) for e, m in zip(est, meas)]


def summary(errs):
    a = sorted(abs(e) for e in errs)
    med = a[len(a) // 2]
    rms = math.sqrt(sum(e * e for e in errs) / len(errs))
    return {"median_abs_log": med, "p90_abs_log": a[int(0.9 * (len(a) - 1))], "max_abs_log": a[-1],
            "rms_log": rms}


def nelder_mead(f, x0, step=0.3, iters=400, tol=1e-7):
    n = len(x0)
    simplex = [list(x0)] + [[x0[j] + (step if j == i else 0) for j in range(n)] for i in range(n)]
    vals = [f(x) for x in simplex]
    for _ in range(iters):
        order = sorted(range(n + 1), key=lambda i: vals[i])
        simplex = [simplex[i] for i in order]
        vals = [vals[i] for i in order]
        if abs(vals[-1] - vals[0]) < tol:
            break
        cen = [sum(simplex[i][j] for i in range(n)) / n for j in range(n)]
        xr = [cen[j] + (cen[j] - simplex[-1][j]) for j in range(n)]
        fr = f(xr)
        if fr < vals[0]:
            xe = [cen[j] + 2 * (cen[j] - simplex[-1][j]) for j in range(n)]
            fe = f(xe)
            simplex[-1], vals[-1] = (xe, fe) if fe < fr else (xr, fr)
        elif fr < vals[-2]:
            simplex[-1], vals[-1] = xr, fr
        else:
            xc = [cen[j] + 0.5 * (simplex[-1][j] - cen[j]) for j in range(n)]
            fc = f(xc)
            if fc < vals[-1]:
                simplex[-1], vals[-1] = xc, fc
            else:
                for i in range(1, n + 1):
                    simplex[i] = [simplex[0][j] + 0.5 * (simplex[i][j] - simplex[0][j])
                                  for j in range(n)]
                    vals[i] = f(simplex[i])
    i = min(range(n + 1), key=lambda i: vals[i])
    return simplex[i], vals[i]


def geomean(xs):
    return math.exp(sum(math.log(x) for x in xs) / len(xs)) if xs else float("nan")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("results")
    ap.add_argument("--base", default="h100", help="preset whose bandwidth/rate/SMs are kept")
    ap.add_argument("--plan-device", default="legacy",
                    help="device the benchmark planned with (legacy = DeviceInfo{} defaults)")
    ap.add_argument("--auto-device", default="h100",
                    help="device spec auto plans with for the choice analysis (preset[,k=v..])")
    ap.add_argument("--iters", type=int, default=600)
    ap.add_argument("--json", help="write the fit and the analysis here")
    ap.add_argument("--skip-fit", action="store_true",
                    help="only score the --base preset as it is (after putting a fit into it)")
    ap.add_argument("--free", help="comma-separated parameters to fit (default: every one the "
                    "base device's mode reads); the others keep the base device's values")
    args = ap.parse_args()

    with (gzip.open if args.results.endswith(".gz") else open)(args.results, "rt") as f:
        bench = json.load(f)
    res = bench["results"]
    trees = problems(res)
    groups = sorted({paths_group(r) for r in res} | {0})
    by_key = plan_all(trees, device(args.plan_device), treeattn.planners(), groups)
    rows, bad = [], 0
    for r in res:
        p = by_key.get(result_key(r))
        if p is None:
            bad += 1
            continue
        st = p.stats("h100")
        if st["items"] != r["items"] or st["kv_bytes_read"] != r["kv_bytes_read"]:
            bad += 1
            continue
        rows.append((r, p))
    print(f"{len(rows)} results with re-planned plans identical to the measured ones "
          f"({bad} skipped)")
    meas = [r["median_ms"] * 1e3 for r, _ in rows]
    ev = Evaluator([p for _, p in rows], args.base)

    uncal = summary(log_errors(ev(LEGACY), meas))
    before_errs = log_errors(ev({}), meas)
    before = summary(before_errs)
    # Plans with masked items: the estimate moves with the mask penalty.
    pen = ("mask_penalty", "mask_penalty_m16", "path_mask_penalty", "path_mask_penalty_m16")
    big_mask = with_params(args.base, {k: 20.0 for k in pen})
    no_mask = with_params(args.base, {k: 0.0 for k in pen})
    masked_rows = [i for i, (_, p) in enumerate(rows)
                   if p.stats(big_mask)["est_time_us"] > p.stats(no_mask)["est_time_us"]]
    if args.free:
        names = args.free.split(",")
        unknown = [k for k in names if k not in FREE]
        if unknown:
            ap.error(f"--free: unknown parameters {unknown} (known: {', '.join(FREE)})")
    else:
        skip = LATENCY_OFF_ONLY if device(args.base).latency_terms else LATENCY_ONLY
        names = [k for k in FREE if k not in skip]

    def unpack(x):
        out = {} if args.free else dict(FIXED)
        for k, v in zip(names, x):
            lo, hi = FREE[k][1], FREE[k][2]
            out[k] = min(hi, max(lo, math.exp(v)))
        return out

    def loss(x):
        e = log_errors(ev(unpack(x)), meas)
        return sum(v * v for v in e) / len(e)

    # a partial fit (--free) starts from the base device's values
    base_dev = device(args.base)
    x0 = [math.log(getattr(base_dev, k) if args.free and getattr(base_dev, k) > 0 else FREE[k][0])
          for k in names]
    if args.skip_fit:
        fit = {}
    else:
        x, _ = nelder_mead(loss, x0, iters=args.iters)
        x, _ = nelder_mead(loss, x, step=0.1, iters=args.iters)  # restart from the best vertex
        fit = unpack(x)
    est = ev(fit)
    errs = log_errors(est, meas)
    after = summary(errs)
    print("uncalibrated model: " + ", ".join(f"{k} {v:.3f}" for k, v in uncal.items()))
    print(f"{args.base} preset as built: " +
          ", ".join(f"{k} {v:.3f}" for k, v in before.items()))
    print("after: " + ", ".join(f"{k} {v:.3f}" for k, v in after.items()))
    print("fitted: " + ", ".join(f"{k}={v:.4g}" for k, v in fit.items()))
    if masked_rows:
        mb = [before_errs[i] for i in masked_rows]
        ma = [errs[i] for i in masked_rows]
        print(f"plans with masked items ({len(masked_rows)}): mean log err preset "
              f"{sum(mb) / len(mb):+.3f}, after {sum(ma) / len(ma):+.3f}; "
              "preset " + ", ".join(f"{k} {v:.3f}" for k, v in summary(mb).items()) +
              "; after " + ", ".join(f"{k} {v:.3f}" for k, v in summary(ma).items()))
    worst = sorted(range(len(rows)), key=lambda i: -abs(errs[i]))[:12]
    print("worst fits (log est/measured):")
    for i in worst:
        r = rows[i][0]
        print(f"  {errs[i]:+.2f} {r['workload'][:58]:58s} {label(r):10s} "
              f"meas {meas[i]:8.1f} est {est[i]:8.1f}")

    # ---- what auto picks on --auto-device (a preset: rebuild after putting the fit in it)
    auto_dev = device(args.auto_device)
    auto = {(s, w): p for (s, w, _, _), p in plan_all(trees, auto_dev, ["auto"]).items()}
    lines = defaultdict(dict)
    for r in res:
        lines[(r["set"], r["workload"])][label(r)] = r
    per_set = defaultdict(lambda: {"best": [], "auto": [], "query": [], "old_auto": [],
                                   "match": 0, "known": 0, "n": 0, "slower_than_query": 0,
                                   "ratios": []})
    print("auto's choice per line (measured time of the plan it picks; '?' = a plan not measured):")
    for (s, w), pl in lines.items():
        st = per_set[s or "no-sharing"]
        st["n"] += 1
        best = min(pl.values(), key=lambda r: r["median_ms"])
        st["best"].append(best["floor_fraction"])
        if "query" in pl:  # a results file may lack the slow query planner on some sets
            st["query"].append(pl["query"]["floor_fraction"])
        if "auto" in pl:  # (a sweep of chosen planners may leave auto out)
            st["old_auto"].append(pl["auto"]["floor_fraction"])
        a = auto.get((s, w))
        pick = None
        if a is not None:
            a_key = plan_key(a, auto_dev)
            for name, r in pl.items():
                p = by_key.get(result_key(r))
                if p is not None and plan_key(p, auto_dev) == a_key and r["items"] == a.num_items:
                    if pick is None or not name.startswith("auto"):
                        pick = (name, r)
        if pick is None:
            print(f"  ? {s:8s} {w[:60]:60s} (auto's plan was not measured)")
            if "auto" in pl:  # counted at the old auto's figure
                st["auto"].append(pl["auto"]["floor_fraction"])
            continue
        st["known"] += 1
        r = pick[1]
        st["auto"].append(r["floor_fraction"])
        st["match"] += r["median_ms"] <= best["median_ms"] * 1.0001
        ratio = r["median_ms"] / best["median_ms"]
        st["ratios"].append(ratio)
        if "query" in pl and r["median_ms"] > pl["query"]["median_ms"] * 1.0001:
            st["slower_than_query"] += 1
            print(f"  slower than query: {s} {w} pick {pick[0]} {r['median_ms']*1e3:.1f} us vs "
                  f"query {pl['query']['median_ms']*1e3:.1f} us")
        if ratio > 1.15:
            print(f"  {ratio:.2f}x best: {s} {w[:56]} pick {pick[0]} "
                  f"{r['median_ms']*1e3:.1f} us, best {label(best)} "
                  f"{best['median_ms']*1e3:.1f} us")
    print(f"{'set':11s} {'lines':>5s} {'measured':>8s} {'=best':>5s} {'>query':>6s} "
          f"{'mean x best':>11s} {'max x best':>10s} {'gm best':>8s} {'gm auto':>8s} "
          f"{'gm old auto':>11s} {'gm query':>8s}")
    for s, st in per_set.items():
        rr = st["ratios"] or [float("nan")]
        print(f"{s:11s} {st['n']:5d} {st['known']:8d} {st['match']:5d} "
              f"{st['slower_than_query']:6d} {geomean(rr):11.3f} {max(rr):10.2f} "
              f"{geomean(st['best']):8.3f} {geomean(st['auto']):8.3f} "
              f"{geomean(st['old_auto']):11.3f} {geomean(st['query']):8.3f}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"results_file": args.results, "fit": fit, "uncalibrated": uncal, "preset": before,
                       "after": after, "n": len(rows)}, f, indent=1)


if __name__ == "__main__":
    sys.exit(main())
