#!/usr/bin/env python3
"""Summary of bench/ab/small_device.sh: merges the variants' `treeattn bench --json` files
(/tmp/small_<variant>_<set>.json) into one JSON and prints, per set, each variant's geomean floor
fraction (planner auto), the per-line speedup of every variant over A (same binary, same call),
the smallest lines' times and, from the --timeline files, where the critical path's microseconds
go on the smallest lines.

Usage: small_summary.py OUT.json small_A_fasttree.json ... [--timeline A=FILE ...]
"""
import argparse
import json
import math
import os
import re
from collections import defaultdict


def geomean(xs):
    return math.exp(sum(math.log(x) for x in xs) / len(xs)) if xs else float("nan")


def load_results(paths):
    """variant -> {"options": ..., "results": [...]}, from files named small_<variant>_<set>.json"""
    variants = {}
    for p in sorted(paths):
        m = re.match(r"small_([A-Za-z0-9]+)_([a-z]+)\.json$", os.path.basename(p))
        if not m:
            continue
        try:
            d = json.load(open(p))
        except (OSError, ValueError) as e:
            print(f"skip {p}: {e}")
            continue
        v = variants.setdefault(m.group(1), {"options": d.get("options"), "device": d.get("device"),
                                             "ceilings": d.get("ceilings"), "results": []})
        v["results"] += d["results"]
    return variants


def by_line(results, planner="auto"):
    return {(r["set"], r["workload"], r["page_size"]): r for r in results if r["planner"] == planner}


def timeline_lines(path):
    out = {}
    try:
        for line in open(path):
            d = json.loads(line)
            out[(d["workload"], d["planner"])] = d
    except (OSError, ValueError) as e:
        print(f"timeline {path}: {e}")
    return out


def fmt(x):
    return "-" if x is None else f"{x:.1f}"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("inputs", nargs="+")
    ap.add_argument("--timeline", action="append", default=[], help="VARIANT=FILE")
    args = ap.parse_args()
    variants = load_results(args.inputs)
    json.dump({"variants": variants}, open(args.out, "w"), indent=1)
    if "A" not in variants:
        print("no results of variant A")
        return 1
    lines = {v: by_line(d["results"]) for v, d in variants.items()}
    base = lines["A"]
    print("\n== floor fraction (geomean, planner auto) per set")
    sets = sorted({k[0] for k in base})
    for s in sets:
        row = f"  {s:10s}"
        for v in sorted(lines):
            fr = [r["floor_fraction"] for k, r in lines[v].items() if k[0] == s]
            row += f"  {v}: {100 * geomean(fr):5.1f}% ({len(fr)})"
        q = [r["floor_ms"] / r["baseline_query_ms"] for k, r in base.items()
             if k[0] == s and r["baseline_query_ms"] > 0]
        print(row + f"  query (A): {100 * geomean(q):5.1f}%")
    for v in sorted(lines):
        if v == "A":
            continue
        print(f"\n== {v} against A (A time / {v} time per line; > 1: {v} faster)")
        for s in sets:
            common = [k for k in base if k[0] == s and k in lines[v]]
            if not common:
                continue
            sp = {k: base[k]["median_ms"] / lines[v][k]["median_ms"] for k in common}
            slower = [k for k in common if sp[k] < 1 / 1.03]
            faster = [k for k in common if sp[k] > 1.03]
            changed = [k for k in common if base[k]["items"] != lines[v][k]["items"]]
            print(f"  {s:10s} geomean {geomean(list(sp.values())):.3f}x over {len(common)} lines; "
                  f"{len(faster)} > 3% faster, {len(slower)} > 3% slower, {len(changed)} other plans")
            for k in sorted(common, key=lambda k: sp[k])[:3] + sorted(common, key=lambda k: -sp[k])[:3]:
                a, b = base[k], lines[v][k]
                print(f"    {sp[k]:.3f}x {k[1][:56]:56s} A {a['median_ms'] * 1e3:7.1f} us "
                      f"{v} {b['median_ms'] * 1e3:7.1f} us (items {a['items']} / {b['items']})")
    print("\n== smallest FastTree lines (us, auto): " + "  ".join(sorted(lines)))
    ft = sorted((k for k in base if k[0] == "fasttree"), key=lambda k: base[k]["floor_ms"])
    for k in ft[:8]:
        row = f"  floor {base[k]['floor_ms'] * 1e3:5.2f}  {k[1][:52]:52s}"
        for v in sorted(lines):
            r = lines[v].get(k)
            row += f" {fmt(r['median_ms'] * 1e3 if r else None):>7s}"
        print(row)
    for v in sorted(lines):
        under3 = [r for k, r in lines[v].items() if k[0] == "fasttree" and r["floor_ms"] < 3e-3]
        if under3:
            print(f"  {v}: FastTree lines with floor < 3 us at <= 10 us: "
                  f"{sum(r['median_ms'] <= 0.010 for r in under3)} of {len(under3)}; smallest line "
                  f"{min(r['median_ms'] for r in under3) * 1e3:.1f} us")
    for spec in args.timeline:
        v, path = spec.split("=", 1)
        tl = timeline_lines(path)
        print(f"\n== timeline {v} (us from the first attention CTA; median of 7 stamped runs)")
        deep = sorted(k for k in base if k[0] == "irregular" and k[1].startswith("chain"))
        for k in ft[:6] + deep:
            name = k[1]
            d = tl.get((name, "auto"))
            if d is None:
                continue
            c, m = d.get("critical", {}), d.get("merge")
            print(f"  {name[:52]:52s} event {fmt(d['event_us'])} launch {fmt(d['launch_us'])} "
                  f"| crit {c.get('config')} start {fmt(c.get('start_us'))} item "
                  f"{fmt(c.get('item_us'))} chain {fmt(c.get('chain_us'))} compute "
                  f"{fmt(c.get('compute_us'))} epi {fmt(c.get('epilogue_us'))} end "
                  f"{fmt(c.get('end_us'))}" +
                  (f" | merge released {fmt(m['released_last_us'])} end {fmt(m['end_us'])}"
                   if m else ""))
        agg = defaultdict(list)
        for (w, p), d in tl.items():
            if p != "auto":
                continue
            med = d.get("median", {})
            for key in ("item_us", "chain_us", "compute_us", "epilogue_us"):
                if med.get(key) is not None:
                    agg[key].append(med[key])
            for key in ("launch_us", "span_us", "event_us"):
                if d.get(key) is not None:
                    agg[key].append(d[key])
        print("  medians over lines: " + ", ".join(
            f"{k} {sorted(x)[len(x) // 2]:.2f}" for k, x in agg.items() if x))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
