#!/usr/bin/env python3
"""Per-line analysis of a grouped-kernel A/B (`treeattn bench --grouped-kernel legacy,ws,auto`):
each line's time on each kernel setting against legacy, joined with what auto's plan holds per
tile class (`treeattn plan --planner auto --device h100 --json`: items, KV tokens, and whether
kAuto runs the class on the warp-specialized kernel).

  ws_analysis.py --bench B.json [B2.json ...] [--plans P.json ...] [--lines] [--named LINE ...]

Prints per set the geometric mean of legacy time / setting time for every setting measured (and,
for a run without auto, auto's time predicted from the plans: a line whose grouped classes all run
ws takes ws's time, none: legacy's; a line that mixes them is counted at legacy's time and
flagged), the lines slower than legacy by more than 3%, the worst lines, and with --lines a table
of every line: class counts (kM64 / kM128 items, CTAs = items x KV heads, tokens per item) and the
speedups. --named prints those lines (a level line, optionally with page=N) last.
"""
import argparse
import json
import math
import sys


def load_bench(paths):
    by = {}
    for p in paths:
        try:
            doc = json.load(open(p))
        except (OSError, ValueError) as e:
            print("skipped %s: %s" % (p, e))
            continue
        for r in doc["results"]:
            if r["planner"] != "auto":
                continue
            key = (r["workload"], r["page_size"])
            by.setdefault(key, {"set": r.get("set") or "-", "heads": r["heads"]})
            by[key][r.get("grouped_kernel", "legacy")] = r
    return by


def load_plans(paths):
    plans = {}
    for p in paths:
        for w in json.load(open(p))["workloads"]:
            for pl in w["plans"]:
                if pl["planner"] == "auto" and "classes" in pl:
                    plans[(w["workload"], w["page_size"])] = (w, pl["classes"])
    return plans


def geomean(xs):
    return math.exp(sum(math.log(x) for x in xs) / len(xs)) if xs else float("nan")


def class_text(cls, kv):
    if not cls or cls["items"] == 0:
        return "-"
    n = cls["items"]
    return "%d it %d CTA %d tok%s" % (n, n * kv, cls["kv_tokens"] // n, " ws" if cls["auto_ws"] else "")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bench", nargs="+", required=True)
    ap.add_argument("--plans", nargs="*", default=[])
    ap.add_argument("--lines", action="store_true")
    ap.add_argument("--named", nargs="*", default=[])
    a = ap.parse_args()
    by = load_bench(a.bench)
    plans = load_plans(a.plans)
    rows = []
    for key, v in by.items():
        if "legacy" not in v:
            continue
        L = v["legacy"]["median_ms"]
        row = {"key": key, "set": v["set"], "heads": v["heads"], "L": L, "t": {}, "checks": 0}
        for k in ("ws", "auto"):
            if k in v:
                row["t"][k] = v[k]["median_ms"]
        row["checks"] = sum(1 for k in ("legacy", "ws", "auto") if k in v and not v[k]["check_ok"])
        row["run"] = v["auto"].get("grouped_run", "?") if "auto" in v else None
        if key in plans:
            w, classes = plans[key]
            row["classes"] = classes
            if "auto" not in row["t"] and "ws" in row["t"]:
                grouped = [c for c in classes[1:] if c["items"] > 0]
                picks = [c["auto_ws"] for c in grouped]
                if picks and all(picks):
                    row["t"]["auto*"] = row["t"]["ws"]
                else:
                    row["t"]["auto*"] = L
                    row["mixed"] = bool(picks) and any(picks)
        rows.append(row)
    if not rows:
        sys.exit("no line with a legacy result")
    settings = [k for k in ("ws", "auto", "auto*") if any(k in r["t"] for r in rows)]
    print("speedup = legacy time / setting time (planner auto; auto* = predicted from the plans)")
    print("%-9s %5s " % ("set", "lines") + " ".join("%28s" % ("%s geomean [min, max]" % k) for k in settings)
          + "  slower>3%  checks")
    for s in sorted({r["set"] for r in rows}):
        rs = [r for r in rows if r["set"] == s]
        cols, slow = [], []
        for k in settings:
            sp = [r["L"] / r["t"][k] for r in rs if k in r["t"]]
            cols.append("%10.3fx [%.3f, %.3f]" % (geomean(sp), min(sp), max(sp)) if sp else "%28s" % "-")
            slow.append("%s:%d" % (k, sum(1 for x in sp if x < 1 / 1.03)))
        ran_ws = sum(1 for r in rs if r["run"] and "ws" in r["run"].split(","))
        print("%-9s %5d " % (s, len(rs)) + " ".join("%28s" % c for c in cols) + "  " + " ".join(slow)
              + "  %d failed" % sum(r["checks"] for r in rs)
              + ("  (auto ran ws on %d lines)" % ran_ws if any(r["run"] for r in rs) else ""))
    for k in settings:
        worst = sorted((r for r in rows if k in r["t"]), key=lambda r: r["L"] / r["t"][k])[:5]
        print("worst %s:" % k)
        for r in worst:
            print("  %.3fx %8.1f -> %8.1f us  %s%s" % (r["L"] / r["t"][k], 1e3 * r["L"], 1e3 * r["t"][k],
                  r["key"][0][:70], "  (auto ran kM64,kM128 = %s)" % r["run"] if k == "auto" and r["run"] else ""))
    mixed = [r for r in rows if r.get("mixed")]
    if mixed:
        print("auto* mixes the kernels on %d line(s) (counted at legacy's time): %s" %
              (len(mixed), "; ".join(r["key"][0] for r in mixed)))
    if a.lines:
        print("\n%-62s %-6s %-26s %-26s %8s " % ("line", "heads", "kM64", "kM128", "legacy") +
              " ".join("%7s" % k for k in settings))
        for r in sorted(rows, key=lambda r: (r["set"], r["L"] / r["t"].get("ws", r["L"]))):
            kv = int(r["heads"].split("/")[1])
            cl = r.get("classes") or [None, None, None]
            print("%-62s %-6s %-26s %-26s %8.1f " % (r["key"][0][:62], r["heads"], class_text(cl[1], kv),
                  class_text(cl[2], kv), 1e3 * r["L"]) +
                  " ".join("%6.3fx" % (r["L"] / r["t"][k]) if k in r["t"] else "%7s" % "-" for k in settings))
    for line in a.named:
        base, _, page = line.partition(" page=")
        hits = [r for r in rows if r["key"][0].startswith(base) and (not page or r["key"][1] == int(page))]
        for r in hits[:1]:
            print("named %-44s legacy %8.1f us  " % (line[:44], 1e3 * r["L"]) +
                  "  ".join("%s %8.1f us %.3fx" % (k, 1e3 * r["t"][k], r["L"] / r["t"][k]) for k in settings if k in r["t"]))
        if not hits:
            print("named %-44s no result" % line[:44])


if __name__ == "__main__":
    main()
