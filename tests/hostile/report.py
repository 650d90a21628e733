"""Runs the adversarial suite (tests/hostile) and prints the counts per interface: inputs tried,
clear errors, valid inputs accepted and answered correctly, unclear errors, hostile inputs
accepted silently, valid inputs refused or answered wrongly, crashes, hangs, memory blow-ups, and
the superlinear probes; then every case and probe that is not `clear` / `valid` / linear, with
why. Exit code 1 when there is one. harness.py defines the outcomes; pytest runs the same cases
(tests/python/test_hostile.py).

usage: python tests/hostile/report.py [--suite cli,api,engine,serving] [--all] [--json FILE]
  --all   also list every case with its outcome and every probe's timings
  the CLI is $TREEATTN_CLI, build/treeattn or build-cpu/treeattn (its cases are left out,
  with a note, when none is built)
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import harness  # noqa: E402

NAMES = {"cli": "CLI (treeattn)", "api": "Python API", "engine": "engine (treeattn.engine)",
         "serving": "serving core, integrations"}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--suite", default="cli,api,engine,serving")
    ap.add_argument("--all", action="store_true")
    ap.add_argument("--json")
    args = ap.parse_args()
    suites = [s for s in args.suite.split(",") if s]
    unknown = [s for s in suites if s not in harness.suite_modules()]
    if unknown:
        ap.error(f"argument --suite: unknown {unknown}, expected {list(harness.suite_modules())}")
    cli = harness.cli_path()
    zygote = harness.Zygote()
    rows, results, bad = [], {}, []
    t0 = time.perf_counter()
    try:
        for suite in suites:
            if suite == "cli" and cli is None:
                print("note: no treeattn CLI built (cmake --build build --target treeattn); "
                      "CLI cases left out", file=sys.stderr)
                continue
            r = harness.run_suite(suite, zygote, cli)
            results[suite] = r
            rows.append((NAMES[suite], harness.counts(r)))
            for kind in ("cases", "probes"):
                for name, res in r[kind].items():
                    ok = res["outcome"] in harness.GOOD or res["outcome"] == "linear"
                    if not ok:
                        bad.append((suite, name, res))
                    if args.all:
                        print(f"{suite:8} {res['outcome']:11} {name}: {res.get('detail', '')}")
    finally:
        zygote.close()
    print(harness.table(rows))
    print(f"({time.perf_counter() - t0:.0f} s; outcomes: "
          + "; ".join(f"{k}: {v}" for k, v in harness.OUTCOMES.items())
          + f"; superlinear: a probe's time at {harness.FACTOR}n over {harness.LIMIT}x its "
          "time at n)")
    for suite, name, res in bad:
        print(f"NOT OK  {suite}: {name}: {res['outcome']}: {res.get('detail', '')}")
    if args.json:
        Path(args.json).write_text(json.dumps({"counts": dict(rows), "results": results},
                                              indent=1))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
