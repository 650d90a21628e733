#!/usr/bin/env python3
"""Fits the cost model's free DeviceInfo parameters to measured benchmark results.

Reads a `treeattn bench --json` results file (bench/results/<gpu>-<date>.json), re-plans every
(workload, planner) it names, and fits launch_overhead_us, merge_launch_us, item_overhead_us,
mma_efficiency, the per-tile latency floors and the mask penalties (docs/cost_model.md; the plans'
items carry a masked flag, mask_begin >= 0) so that log(estimate_plan_us)
matches log(median time) over all results (least squares in log space, Nelder-Mead over the log of
the parameters). Prints the fit, its error before/after, and what `auto` would pick per line.

Why a small C++ helper and not only `treeattn plan --json`: the CLI prints plan totals (items,
CTAs, bytes, est us) and plans and estimates on the same device, while the fit must keep the
measured plans fixed (the benchmark planned them with the default DeviceInfo{}) and re-estimate
them under many parameter sets; the LPT makespan needs every item. The helper (written to
<build>/calibrate_helper.cc and compiled against <build>/libtreeattn_core.a) dumps the plans'
per-item cost inputs and evaluates the library's own estimate_items_us on them, so the fitted
model is the C++ model, not a Python copy. Each re-planned plan is checked against the benchmark
file (items and KV bytes read); plans that differ (e.g. auto under a changed model) are skipped.

Usage: python3 tools/calibrate_cost_model.py bench/results/h100-2026-11-22.json \
           [--build build-cal] [--base h100] [--iters 400] [--auto-device h100]
Python 3 standard library only.
"""
import argparse
import json
import math
import os
import subprocess
import sys
from collections import defaultdict

HELPER_CC = r'''
// Helper of tools/calibrate_cost_model.py (generated; do not edit).
//   plans DEVICE PLANNER|'' [LEVELS...] : one JSON line per (workload, planner) plan
//   eval PLANS.jsonl BASE             : reads "k=v k=v ..." lines on stdin, prints estimates
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <map>
#include <sstream>
#include <string>
#include <tuple>
#include <vector>
#include "treeattn/plan/cost_model.h"
#include "treeattn/plan/planner.h"
#include "treeattn/tree/builders.h"
#include "treeattn/tree/workloads.h"
using namespace treeattn;

static void set_field(DeviceInfo* d, const std::string& k, double v) {
  if (k == "launch_overhead_us") d->launch_overhead_us = v;
  else if (k == "merge_launch_us") d->merge_launch_us = v;
  else if (k == "item_overhead_us") d->item_overhead_us = v;
  else if (k == "mma_efficiency") d->mma_efficiency = v;
  else if (k == "tile_latency_us") d->tile_latency_us = v;
  else if (k == "tile_latency_m128_us") d->tile_latency_m128_us = v;
  else if (k == "tile_latency_wide_us") d->tile_latency_wide_us = v;
  else if (k == "merge_slot_us") d->merge_slot_us = v;
  else if (k == "mask_penalty") d->mask_penalty = v;
  else if (k == "mask_penalty_m16") d->mask_penalty_m16 = v;
  else if (k == "hbm_read_GBps") d->hbm_read_GBps = v;
  else if (k == "tc_TFLOPs") d->tc_TFLOPs = v;
  else if (k == "ctas_per_sm") d->ctas_per_sm = static_cast<int32_t>(v);
  else if (k == "wide_ctas_per_sm") d->wide_ctas_per_sm = static_cast<int32_t>(v);
  else if (k == "num_sms") d->num_sms = static_cast<int32_t>(v);
  else { std::fprintf(stderr, "unknown field %s\n", k.c_str()); std::exit(2); }
}
// "legacy" = DeviceInfo{} (what the benchmark planned with), else a preset; then ",k=v" overrides.
static DeviceInfo device(const std::string& spec) {
  std::stringstream ss(spec);
  std::string tok;
  std::getline(ss, tok, ',');
  DeviceInfo d = tok == "legacy" ? DeviceInfo{} : device_preset(tok);
  while (std::getline(ss, tok, ',')) {
    const size_t eq = tok.find('=');
    set_field(&d, tok.substr(0, eq), std::atof(tok.c_str() + eq + 1));
  }
  return d;
}
static void dump(const std::string& set, std::string name, const PrefixTree& tree,
                 const LevelSpec& spec, const DeviceInfo& dev, const std::string& only) {
  const int qo = spec.shape.num_qo_heads > 0 ? spec.shape.num_qo_heads : 32;
  const int kv = spec.shape.num_kv_heads > 0 ? spec.shape.num_kv_heads : 8;
  const int hd = spec.shape.head_dim > 0 ? spec.shape.head_dim : 128;
  if (name.find("heads=") == std::string::npos)
    name += " heads=" + std::to_string(qo) + "/" + std::to_string(kv);
  for (const std::string& p : planner_names()) {
    if (!only.empty() && only != p) continue;
    PlanOptions o;
    o.planner = p; o.num_qo_heads = qo; o.num_kv_heads = kv; o.head_dim = hd; o.device = dev;
    const Plan plan = make_plan(tree, o);
    std::map<std::tuple<int, int, int, int, int>, long long> runs;
    for (const WorkItem& it : plan.items) {
      int partial = 0;
      for (int r = 0; r < it.num_rows; ++r) partial += plan.rows[it.row_begin + r].slot != kFinalOutput;
      ++runs[{it.num_rows, partial, it.kv_tokens, static_cast<int>(it.tile), it.mask_begin >= 0}];
    }
    int merged = 0;
    for (size_t q = 0; q + 1 < plan.merge_indptr.size(); ++q)
      merged += plan.merge_indptr[q + 1] > plan.merge_indptr[q];
    std::printf("{\"set\": \"%s\", \"workload\": \"%s\", \"planner\": \"%s\", \"qo\": %d, "
                "\"kv\": %d, \"hd\": %d, \"page\": %d, \"queries\": %d, \"slots\": %d, "
                "\"merged\": %d, \"n_items\": %zu, \"est_us\": %.4f, \"items\": [",
                set.c_str(), name.c_str(), p.c_str(), qo, kv, hd, tree.page_size,
                tree.num_queries(), plan.num_slots, merged, plan.items.size(),
                estimate_plan_us(dev, plan));
    bool first = true;
    for (const auto& [k, n] : runs) {
      std::printf("%s[%d, %d, %d, %d, %d, %lld]", first ? "" : ", ", std::get<0>(k),
                  std::get<1>(k), std::get<2>(k), std::get<3>(k), std::get<4>(k), n);
      first = false;
    }
    std::printf("]}\n");
  }
}
struct Dumped {
  PlanShape shape;
  long long slots, merged;
  std::vector<ItemSummary> items;
};
int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "";
  if (mode == "plans" && argc >= 4) {
    const DeviceInfo dev = device(argv[2]);
    for (const Workload& w : workload_set("all"))
      dump(w.set, w.name, build_workload(w), w.spec, dev, argv[3]);
    for (int i = 4; i < argc; ++i) {
      const LevelSpec s = parse_levels(argv[i]);
      dump("", s.text.empty() ? argv[i] : s.text, tree_from_levels(s), s, dev, argv[3]);
    }
    return 0;
  }
  if (mode == "eval" && argc == 4) {
    // plans file: one line per plan: qo kv hd slots merged n  rows partial kv tile masked count ...
    std::ifstream in(argv[2]);
    std::vector<Dumped> plans;
    std::string line;
    while (std::getline(in, line)) {
      std::istringstream ls(line);
      Dumped d;
      int n = 0;
      ls >> d.shape.num_qo_heads >> d.shape.num_kv_heads >> d.shape.head_dim >> d.slots >>
          d.merged >> n;
      for (int i = 0; i < n; ++i) {
        ItemSummary s;
        int tile = 0, masked = 0;
        ls >> s.rows >> s.partial_rows >> s.kv_tokens >> tile >> masked >> s.count;
        s.masked = masked != 0;
        s.tile = static_cast<TileClass>(tile);
        d.items.push_back(s);
      }
      plans.push_back(d);
    }
    while (std::getline(std::cin, line)) {
      std::string spec = argv[3];
      std::istringstream ls(line);
      std::string kv;
      while (ls >> kv) spec += "," + kv;
      const DeviceInfo dev = device(spec);
      for (size_t i = 0; i < plans.size(); ++i)
        std::printf("%s%.6g", i ? " " : "",
                    estimate_items_us(dev, plans[i].shape, plans[i].items.data(),
                                      plans[i].items.size(), plans[i].slots, plans[i].merged));
      std::printf("\n");
      std::fflush(stdout);
    }
    return 0;
  }
  std::fprintf(stderr, "usage: helper plans DEVICE PLANNER [LEVELS..] | eval PLANS BASE\n");
  return 2;
}
'''

# Free parameters: name -> (start, lower, upper). ctas_per_sm / wide_ctas_per_sm are integers,
# set from the kernel's occupancy (decode_params.h: 2 per SM for deep kM16/kM64/kM128, 4 wide).
FREE = {
    "launch_overhead_us": (9.6, 0.2, 20.0),
    "merge_launch_us": (0.6, 0.05, 20.0),
    "item_overhead_us": (4.7, 0.05, 20.0),
    "mma_efficiency": (0.3, 0.02, 1.0),
    "tile_latency_us": (0.4, 0.01, 5.0),
    "tile_latency_m128_us": (3.0, 0.01, 8.0),
    "tile_latency_wide_us": (1.5, 0.01, 5.0),
    "merge_slot_us": (0.64, 0.01, 5.0),
    "mask_penalty": (0.5, 0.001, 5.0),  # masked kM64/kM128 items: CTA time x (1 + this)
    "mask_penalty_m16": (0.05, 0.001, 5.0),  # masked kM16 items
}
FIXED = {"ctas_per_sm": 2, "wide_ctas_per_sm": 4}
# The original, uncalibrated kernel terms (the DeviceInfo defaults before the fit).
LEGACY = {"launch_overhead_us": 2.5, "merge_launch_us": 2.5, "item_overhead_us": 1.0,
          "mma_efficiency": 0.55, "tile_latency_us": 0, "tile_latency_m128_us": 0,
          "tile_latency_wide_us": 0, "merge_slot_us": 0, "mask_penalty": 0, "mask_penalty_m16": 0,
          "ctas_per_sm": 2, "wide_ctas_per_sm": 0}


def build_helper(build):
    src = os.path.join(build, "calibrate_helper.cc")
    exe = os.path.join(build, "calibrate_helper")
    lib = os.path.join(build, "libtreeattn_core.a")
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    with open(src, "w") as f:
        f.write(HELPER_CC)
    cxx = os.environ.get("CXX", "c++")
    subprocess.run([cxx, "-std=c++17", "-O2", "-I", os.path.join(root, "include"), src, lib,
                    "-o", exe], check=True)
    return exe


def dump_plans(exe, device, planner, extra_levels):
    out = subprocess.run([exe, "plans", device, planner] + extra_levels, check=True,
                         capture_output=True, text=True).stdout
    return [json.loads(l) for l in out.splitlines() if l.strip()]


class Evaluator:
    """Runs `helper eval` once; each call sends one parameter set and reads the estimates."""

    def __init__(self, exe, plans, base, path):
        with open(path, "w") as f:
            for p in plans:
                flat = [p["qo"], p["kv"], p["hd"], p["slots"], p["merged"], len(p["items"])]
                for it in p["items"]:
                    flat += it
                f.write(" ".join(map(str, flat)) + "\n")
        self.proc = subprocess.Popen([exe, "eval", path, base], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, text=True)

    def __call__(self, params):
        self.proc.stdin.write(" ".join(f"{k}={v:.9g}" for k, v in params.items()) + "\n")
        self.proc.stdin.flush()
        return [float(x) for x in self.proc.stdout.readline().split()]

    def close(self):
        self.proc.stdin.close()
        self.proc.wait()


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


def plan_key(p):
    return (p["slots"], p["merged"], tuple(tuple(it) for it in p["items"]))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("results")
    ap.add_argument("--build", default="build-cal")
    ap.add_argument("--base", default="h100", help="preset whose bandwidth/rate/SMs are kept")
    ap.add_argument("--plan-device", default="legacy",
                    help="device the benchmark planned with (legacy = DeviceInfo{} defaults)")
    ap.add_argument("--auto-device", default="h100",
                    help="device spec auto plans with for the choice analysis (preset[,k=v..])")
    ap.add_argument("--iters", type=int, default=600)
    ap.add_argument("--json", help="write the fit and the analysis here")
    ap.add_argument("--skip-fit", action="store_true",
                    help="only score the --base preset as it is (after putting a fit into it)")
    args = ap.parse_args()

    bench = json.load(open(args.results))
    res = bench["results"]
    exe = build_helper(args.build)
    extra = sorted({r["workload"] for r in res if r["set"] == ""})
    plans = dump_plans(exe, args.plan_device, "", extra)
    by_key = {(p["set"], p["workload"], p["planner"]): p for p in plans}
    rows, bad = [], 0
    for r in res:
        p = by_key.get((r["set"], r["workload"], r["planner"]))
        if p is None or p["n_items"] != r["items"] or r["kv_bytes_read"] != (
                sum(it[2] * it[-1] for it in p["items"]) * p["kv"] * p["hd"] * 4):
            bad += 1
            continue
        rows.append((r, p))
    print(f"{len(rows)} results with re-planned plans identical to the measured ones "
          f"({bad} skipped)")
    meas = [r["median_ms"] * 1e3 for r, _ in rows]
    ev = Evaluator(exe, [p for _, p in rows], args.base, os.path.join(args.build, "cal_plans.txt"))

    uncal = summary(log_errors(ev(LEGACY), meas))
    before_errs = log_errors(ev({}), meas)
    before = summary(before_errs)
    masked_rows = [i for i, (_, p) in enumerate(rows) if any(it[4] for it in p["items"])]
    names = list(FREE)

    def unpack(x):
        out = dict(FIXED)
        for k, v in zip(names, x):
            lo, hi = FREE[k][1], FREE[k][2]
            out[k] = min(hi, max(lo, math.exp(v)))
        return out

    def loss(x):
        e = log_errors(ev(unpack(x)), meas)
        return sum(v * v for v in e) / len(e)

    x0 = [math.log(FREE[k][0]) for k in names]
    if args.skip_fit:
        fit = {}
    else:
        x, _ = nelder_mead(loss, x0, iters=args.iters)
        x, _ = nelder_mead(loss, x, step=0.1, iters=args.iters)  # restart from the best vertex
        fit = unpack(x)
    est = ev(fit)
    errs = log_errors(est, meas)
    after = summary(errs)
    ev.close()
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
        print(f"  {errs[i]:+.2f} {r['workload'][:58]:58s} {r['planner']:10s} "
              f"meas {meas[i]:8.1f} est {est[i]:8.1f}")

    # ---- what auto picks on --auto-device (a preset: rebuild after putting the fit in it)
    auto = {(p["set"], p["workload"]): p for p in dump_plans(exe, args.auto_device, "auto", extra)}
    lines = defaultdict(dict)
    for r in res:
        lines[(r["set"], r["workload"])][r["planner"]] = r
    per_set = defaultdict(lambda: {"best": [], "auto": [], "query": [], "old_auto": [],
                                   "match": 0, "known": 0, "n": 0, "slower_than_query": 0,
                                   "ratios": []})
    print("auto's choice per line (measured time of the plan it picks; '?' = a plan not measured):")
    for (s, w), pl in lines.items():
        st = per_set[s or "no-sharing"]
        st["n"] += 1
        best = min(pl.values(), key=lambda r: r["median_ms"])
        st["best"].append(best["floor_fraction"])
        st["query"].append(pl["query"]["floor_fraction"])
        st["old_auto"].append(pl["auto"]["floor_fraction"])
        a = auto.get((s, w))
        pick = None
        if a is not None:
            for name, r in pl.items():
                p = by_key.get((s, w, name))
                if p is not None and plan_key(p) == plan_key(a) and r["items"] == a["n_items"]:
                    if pick is None or name != "auto":
                        pick = (name, r)
        if pick is None:
            print(f"  ? {s:8s} {w[:60]:60s} (auto's plan was not measured)")
            st["auto"].append(pl["auto"]["floor_fraction"])
            continue
        st["known"] += 1
        r = pick[1]
        st["auto"].append(r["floor_fraction"])
        st["match"] += r["median_ms"] <= best["median_ms"] * 1.0001
        ratio = r["median_ms"] / best["median_ms"]
        st["ratios"].append(ratio)
        if r["median_ms"] > pl["query"]["median_ms"] * 1.0001:
            st["slower_than_query"] += 1
            print(f"  slower than query: {s} {w} pick {pick[0]} {r['median_ms']*1e3:.1f} us vs "
                  f"query {pl['query']['median_ms']*1e3:.1f} us")
        if ratio > 1.15:
            print(f"  {ratio:.2f}x best: {s} {w[:56]} pick {pick[0]} "
                  f"{r['median_ms']*1e3:.1f} us, best {best['planner']} "
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
