"""Merges `treeattn bench --json` files into one (the first file's header, every file's results)
and prints each set's geometric-mean floor fraction (auto and the query baseline) and every other
line's time: the device scripts return at most 8 files, so each call's bench JSON is one file.

Usage: python3 bench/merge_bench_json.py OUT.json IN.json [IN.json ...]
"""
import json
import math
import sys


def main(out, files):
    merged = None
    for f in sorted(set(files)):
        try:
            d = json.load(open(f))
        except (OSError, ValueError) as e:
            print("skip", f, e)
            continue
        if merged is None:
            merged = d
        else:
            merged["results"] += d["results"]
    if merged is None:
        return 1
    json.dump(merged, open(out, "w"), indent=1)
    sets = sorted({r.get("set") for r in merged["results"] if r.get("set")})
    for s in sets:
        r = [x for x in merged["results"] if x.get("set") == s]
        g = math.exp(sum(math.log(x["floor_fraction"]) for x in r) / len(r))
        q = [x for x in r if x.get("baseline_query_ms")]
        qg = math.exp(sum(math.log(x["floor_ms"] / x["baseline_query_ms"]) for x in q) / len(q)) if q else 0
        print(f"{s}: {len(r)} lines, {100 * g:.1f}% of the floor (query planner {100 * qg:.1f}%)")
    for x in merged["results"]:
        if not x.get("set"):
            print(f"{x['workload']}: {1e3 * x['median_ms']:.1f} us, "
                  f"{100 * x['floor_fraction']:.1f}% of the floor")
    return 0


if __name__ == "__main__":
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    sys.exit(main(sys.argv[1], sys.argv[2:]))
