#!/usr/bin/env bash
# Smoke test of the treeattn CLI (run by ctest with the CLI path as $1): plan/check/workloads on a
# few inputs (level specs, workload keys, a generated JSON tree, tests/data/*.json when present)
# and bad inputs that must exit non-zero with a message naming the offending flag. Seconds.
set -u
CLI="$1"
HERE="$(cd "$(dirname "$0")" && pwd)"
TMP="$(mktemp -d)"
trap 'rm -rf "$TMP"' EXIT
failures=0

ok() {  # ok <description> <command...>: must exit 0
  local what="$1"; shift
  if ! "$@" > "$TMP/out" 2> "$TMP/err"; then
    echo "FAIL (exit $?): $what"; cat "$TMP/out" "$TMP/err"; failures=$((failures + 1))
  fi
}
bad() {  # bad <expected text in stderr> <command...>: must exit non-zero and name the argument
  local want="$1"; shift
  "$@" > "$TMP/out" 2> "$TMP/err"
  local rc=$?
  if [ "$rc" -eq 0 ] || ! grep -q -- "$want" "$TMP/err"; then
    echo "FAIL: '$*' gave exit $rc, stderr lacks '$want':"; cat "$TMP/err"; failures=$((failures + 1))
  fi
}

ok "workloads" "$CLI" workloads
grep -q "fasttree" "$TMP/out" || { echo "FAIL: workloads lists no fasttree"; failures=$((failures + 1)); }
ok "plan all" "$CLI" plan --levels 'N=1,4 C=100,20' --planner all
grep -q "^node " "$TMP/out" || { echo "FAIL: plan table lacks node row"; failures=$((failures + 1)); }
ok "plan json" "$CLI" plan --workload fasttree:1 --planner node --json --device h100
grep -q '"est_time_us"' "$TMP/out" || { echo "FAIL: plan --json lacks est_time_us"; failures=$((failures + 1)); }
ok "check query" "$CLI" check --levels 'N=1,4,8 C=64,17,5 heads=8/2' --planner query
ok "check node shuffled" "$CLI" check --levels 'N=2,6 C=33,16' --heads 28/4 --head-dim 64 \
  --page-size 8 --planner node --shuffle-pages --seed 3
ok "check workload sampled" "$CLI" check --workload fasttree:13 --planner node --sample-queries 4

cat > "$TMP/tree.json" <<'JSON'
{"page_size": 16, "heads": [8, 2], "head_dim": 64,
 "nodes": [{"id": 0, "parent": null, "tokens": 70},
           {"id": 1, "parent": 0, "tokens": 1},
           {"id": 7, "parent": 0, "tokens": 33}],
 "queries": [{"node": 1}, {"node": 7}, {"node": 0}]}
JSON
ok "check json" "$CLI" check --tree "$TMP/tree.json" --planner query
ok "check json node" "$CLI" check --tree "$TMP/tree.json" --planner node
for f in "$HERE"/data/*.json; do
  [ -e "$f" ] || continue
  ok "check $f" "$CLI" check --tree "$f" --planner node --sample-queries 8
done

bad "--heads" "$CLI" plan --levels 'N=1,4 C=100,20' --heads 7/2
bad "--bogus" "$CLI" check --levels 'N=1,4 C=100,20' --bogus 1
bad "--head-dim" "$CLI" check --levels 'N=1,4 C=100,20' --head-dim 96
bad "--tree" "$CLI" plan --tree "$TMP/does-not-exist.json"
bad "--levels" "$CLI" plan --levels 'N=1,x C=5'
bad "--planner" "$CLI" check --levels 'N=1,4 C=100,20' --planner nope
bad "--workload" "$CLI" plan --workload nosuchset:3
bad "--seed" "$CLI" check --levels 'N=1,4 C=100,20' --seed -1
bad "--tree" "$CLI" plan
bad "unknown command" "$CLI" frobnicate

if [ "$failures" -ne 0 ]; then
  echo "cli_smoke: $failures failure(s)"
  exit 1
fi
echo "cli_smoke: all passed"
