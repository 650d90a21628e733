"""Summary of bench/ab/epilogue_warps.sh's probe timelines (the JSON lines of `treeattn bench
--timeline` with the build tag of bench/ab/small_tree_ab.sh): per line and kernel config, the
median over CTAs of (end - warp k's write end) for warps k = 1..3, whose lane 0 stamped the item,
first-tile and loop words of the probe build. About 0 marks the warp the CTA's final barrier waited
for; a config of fewer warps leaves the other words unset (skipped).
Usage: python3 bench/ab/epilogue_warps.py TIMELINES.jsonl"""
import json
import statistics
import sys


def main():
    for line in open(sys.argv[1]):
        d = json.loads(line)
        if d.get("build", "probe") != "probe":
            continue
        per_cfg = {}
        for cfg, _item, _group, _sm, _start, w1, w2, w3, end in d["ctas"]:
            waits = [end - w if 0 <= w <= end else None for w in (w1, w2, w3)]
            per_cfg.setdefault(cfg, []).append(waits)
        parts = []
        for cfg, rows in sorted(per_cfg.items()):
            meds = []
            for k in range(3):
                vals = [r[k] for r in rows if r[k] is not None]
                meds.append(f"{statistics.median(vals) / 1000:.2f}" if vals else "-")
            parts.append(f"cfg{cfg} ({len(rows)} CTAs): end - warp 1/2/3 write end " + " / ".join(meds))
        print(f"{d['workload'][:50]:50s} {d.get('l2_flush', '')} event {d['event_us']:6.2f}  "
              + " | ".join(parts))


if __name__ == "__main__":
    main()
