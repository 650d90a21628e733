#!/usr/bin/env python3
"""auto's choice under a margin for one candidate, replayed on a same-call A/B (bench/ab/cost_ab.sh).

Where the old and new builds' plans differ on a line, the new plan is the candidate the margin
concerns (e.g. paths-split, new among auto's candidates) and the old one is what auto picks without
it. auto with margin m keeps the candidate only where its estimate is below (1 - m) x the old plan's
estimate (both estimates from the results files, each with its process's ceilings); otherwise the
line takes the old plan's time from the same call. Prints per set the geomean of old/new time and
its minimum for each margin, then each changed line.
  python3 bench/ab/auto_margin_replay.py OLD.json NEW.json [MARGIN ...]
"""
import json
import math
import sys


def main():
    old_f, new_f = sys.argv[1], sys.argv[2]
    margins = [float(m) for m in sys.argv[3:]] or [0.0, 0.01, 0.02, 0.03, 0.05]
    load = lambda f: {(r["set"], r["workload"]): r for r in json.load(open(f))["results"]}
    old, new = load(old_f), load(new_f)
    for m in margins:
        per = {}
        for k, b in new.items():
            a = old[k]
            take = a["items"] == b["items"] or b["est_us"] < a["est_us"] * (1 - m)
            per.setdefault(k[0] or "named", []).append(a["median_ms"] / b["median_ms"] if take else 1.0)
        print(f"margin {m:.2f}: " + "; ".join(
            f"{s} {math.exp(sum(map(math.log, v)) / len(v)):.3f}x (min {min(v):.3f})"
            for s, v in sorted(per.items())))
    for k, b in new.items():
        a = old[k]
        if a["items"] != b["items"]:
            print(f"  {k[1][:60]:60s} est old/new {a['est_us'] / b['est_us']:.3f} "
                  f"time old/new {a['median_ms'] / b['median_ms']:.3f}")


if __name__ == "__main__":
    main()
