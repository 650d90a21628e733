"""The SASS instructions of one kernel with the most warp-stall samples (the CSV of `ncu -i REP
--page source --csv --print-source sass`): address, samples, share of the kernel's, the two
largest stall reasons and the instruction; then the samples summed per opcode.
Usage: python3 bench/ab/stall_top.py SASS.csv [N (30)]"""
import sys
from collections import defaultdict

from ws_stall_report import rows as load, sample_column  # the CSV reader of the ws report


def num(s):
    try:
        return float(str(s).replace(",", ""))
    except ValueError:
        return 0.0


def main():
    rows = load(sys.argv[1])
    top_n = int(sys.argv[2]) if len(sys.argv) > 2 else 30
    header = list(rows[0].keys())
    total_col = sample_column(header)
    reasons = [h for h in header if h.startswith("stall_") and "Not Issued" not in h]
    total = sum(num(r[total_col]) for r in rows) or 1.0
    print(f"samples: {total:.0f}; reason columns: {len(reasons)}")
    ranked = sorted(range(len(rows)), key=lambda i: -num(rows[i][total_col]))
    for i in ranked[:top_n]:
        r = rows[i]
        s = num(r[total_col])
        rs = sorted(((num(r[h]), h) for h in reasons), reverse=True)[:2]
        why = ", ".join(f"{h.replace('stall_', '')} {v:.0f}" for v, h in rs if v > 0)
        print(f"{r.get('Address', '?'):>8} {s:7.0f} {100 * s / total:5.1f}%  [{why}]  "
              f"{r.get('Source', '').strip()[:90]}")
    per_op = defaultdict(float)
    for r in rows:
        src = r.get("Source", "").strip()
        op = src.split()[1] if src.startswith("@") and len(src.split()) > 1 else (src.split() or ["?"])[0]
        per_op[op.split(".")[0]] += num(r[total_col])
    print("per opcode:", ", ".join(f"{k} {100 * v / total:.1f}%" for k, v in
                                   sorted(per_op.items(), key=lambda kv: -kv[1])[:12]))


if __name__ == "__main__":
    main()
