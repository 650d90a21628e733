"""Totals of one kernel's per-SASS table (the CSV of `ncu -i REP --page source --csv --print-source
sass`): warp-stall samples per reason (share of all samples) and the executed code footprint: the
instructions that ran at least once and their bytes (16 a SASS instruction), and those that ran at
most once a warp (no more often than the first instruction), against the whole function. What
tells an instruction-fetch bound kernel: a large stall_no_inst share on a footprint of tens of KB
that runs once (little of it in loops).
Usage: python3 bench/ab/stall_totals.py SASS.csv [SASS.csv ...]"""
import sys

from stall_top import num
from ws_stall_report import rows as load, sample_column


def totals(path):
    rows = load(path)
    header = list(rows[0].keys())
    total_col = sample_column(header)
    reasons = [h for h in header if h.startswith("stall_") and "Not Issued" not in h]
    total = sum(num(r[total_col]) for r in rows) or 1.0
    per = sorted(((sum(num(r[h]) for r in rows), h) for h in reasons), reverse=True)
    ran = [r for r in rows if num(r.get("Instructions Executed", 0)) > 0]
    entry = num(rows[0].get("Instructions Executed", 0))  # the first instruction: once a warp
    once = [r for r in ran if num(r["Instructions Executed"]) <= entry]
    print(f"{path}: samples {total:.0f}; instructions {len(rows)} ({16 * len(rows) / 1024:.1f} KB), "
          f"executed {len(ran)} ({16 * len(ran) / 1024:.1f} KB), of them at most once a warp "
          f"{len(once)} ({16 * len(once) / 1024:.1f} KB)")
    print("  stall reasons: " + ", ".join(
        f"{h.replace('stall_', '')} {100 * v / total:.1f}%" for v, h in per[:10] if v > 0))


if __name__ == "__main__":
    for p in sys.argv[1:]:
        totals(p)
