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
grep -q '"classes": \[{"items": [0-9]*, "kv_tokens": [0-9]*, "auto_ws": false}' "$TMP/out" ||
  { echo "FAIL: plan --json lacks the per-class counts"; failures=$((failures + 1)); }
ok "check query" "$CLI" check --levels 'N=1,4,8 C=64,17,5 heads=8/2' --planner query
ok "check node shuffled" "$CLI" check --levels 'N=2,6 C=33,16' --heads 28/4 --head-dim 64 \
  --page-size 8 --planner node --shuffle-pages --seed 3
ok "check workload sampled" "$CLI" check --workload fasttree:13 --planner node --sample-queries 4
# fp8 KV: the plan counts 1 byte per KV element, check runs on dequantized fp8 inputs
ok "plan fp8" "$CLI" plan --levels 'N=1,4 C=1024,256' --planner node --kv-dtype fp8_e4m3 --json
grep -q '"kv_dtype": "fp8_e4m3", "kv_dtype_bytes": 1' "$TMP/out" &&
  grep -q '"kv_bytes_read": 4194304,' "$TMP/out" ||
  { echo "FAIL: plan --kv-dtype fp8_e4m3 --json: kv_dtype or 1-byte KV bytes"; cat "$TMP/out"; failures=$((failures + 1)); }
ok "plan fp16 KV bytes" "$CLI" plan --levels 'N=1,4 C=1024,256' --planner node --json
grep -q '"kv_bytes_read": 8388608,' "$TMP/out" ||
  { echo "FAIL: plan --json: 2-byte KV bytes"; failures=$((failures + 1)); }
for kv in fp8_e4m3 fp8_e5m2; do
  ok "check $kv" "$CLI" check --levels 'N=1,3,6 C=40,17,5 heads=8/2' --planner all --kv-dtype $kv
  ok "check $kv scaled" "$CLI" check --levels 'N=2,5 C=33,9 heads=16/2' --page-size 1 \
    --planner auto --kv-dtype $kv --k-scale 0.0009765625 --v-scale 64
done

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
bad "--kv-dtype" "$CLI" check --levels 'N=1,4 C=100,20' --kv-dtype fp8
bad "--kv-dtype" "$CLI" plan --levels 'N=1,4 C=100,20' --kv-dtype float8_e4m3fn
bad "--k-scale" "$CLI" check --levels 'N=1,4 C=100,20' --kv-dtype fp8_e4m3 --k-scale 0
bad "--k-scale" "$CLI" check --levels 'N=1,4 C=100,20' --kv-dtype fp8_e4m3 --k-scale nan
bad "--v-scale" "$CLI" check --levels 'N=1,4 C=100,20' --kv-dtype fp8_e5m2 --v-scale -1
bad "--v-scale" "$CLI" plan --levels 'N=1,4 C=100,20' --kv-dtype fp8_e5m2 --v-scale 1e39
bad "--k-scale" "$CLI" check --levels 'N=1,4 C=100,20' --k-scale 2
bad "--seed" "$CLI" check --levels 'N=1,4 C=100,20' --seed -1
bad "--tree" "$CLI" plan
bad "--paths-group" "$CLI" plan --levels 'N=1,4 C=100,20' --planner paths --paths-group 65
bad "--paths-group" "$CLI" check --levels 'N=1,4 C=100,20' --paths-group -1

# ---- issue 11: limits, page ownership, exit codes, CLI output options
ok "version" "$CLI" --version
grep -q "^treeattn [0-9]" "$TMP/out" || { echo "FAIL: --version"; failures=$((failures + 1)); }
bad "is a directory" "$CLI" plan --tree "$TMP"
bad "NUL byte" "$CLI" plan --tree /dev/zero --planner node  # a NUL ends the read (json.h)
jtree() {  # jtree <file> <nodes json> [extra top-level json]: a page_size 16 tree, query on node 0
  printf '{"page_size": 16, "nodes": [%s], "queries": [{"node": 0}]%s}\n' "$2" "${3:-}" > "$1"
}
jtree "$TMP/p11.json" '{"id": 0, "parent": null, "tokens": 32, "pages": [1, 1]}'
bad "nodes\[0\].pages\[1\]: page 1 slot 0 is also used by nodes\[0\].pages\[0\]" \
  "$CLI" plan --tree "$TMP/p11.json" --planner node
jtree "$TMP/reuse.json" '{"id": 0, "parent": null, "tokens": 16, "pages": [0]},
  {"id": 1, "parent": 0, "tokens": 20, "pages": [0, 1]}'
bad "nodes\[1\].pages\[0\]: page 0 slot 0 is also used by nodes\[0\]" \
  "$CLI" plan --tree "$TMP/reuse.json" --planner node
jtree "$TMP/free_dup.json" '{"id": 0, "parent": null, "tokens": 16, "pages": [0]}' \
  ', "num_pages": 8, "free_pages": [3, 3]'
bad "free_pages\[1\]: page id 3 is listed twice" "$CLI" plan --tree "$TMP/free_dup.json"
jtree "$TMP/free_used.json" '{"id": 0, "parent": null, "tokens": 16, "pages": [0]}' \
  ', "num_pages": 8, "free_pages": [0]'
bad "free_pages\[0\]: page id 0 is in use" "$CLI" plan --tree "$TMP/free_used.json"
jtree "$TMP/free_range.json" '{"id": 0, "parent": null, "tokens": 16, "pages": [0]}' \
  ', "num_pages": 8, "free_pages": [9]'
bad "free_pages\[0\]: page id 9 out of range" "$CLI" plan --tree "$TMP/free_range.json"
# check generates K/V only for used pages: 2^31-1 declared pages on a 16-token tree
jtree "$TMP/many_pages.json" '{"id": 0, "parent": null, "tokens": 16, "pages": [5]}' \
  ', "num_pages": 2147483647'
ok "check num_pages 2^31-1" "$CLI" check --tree "$TMP/many_pages.json" --planner node
# path-depth sum over the limit: a chain of 4096 one-token nodes with 8193 queries on its leaf
{
  printf '{"page_size": 16, "nodes": [{"id": 0, "parent": null, "tokens": 1}'
  for i in $(seq 1 4095); do printf ', {"id": %d, "parent": %d, "tokens": 1}' "$i" $((i - 1)); done
  printf '], "queries": ['
  for i in $(seq 1 8193); do printf '%s{"node": 4095}' "$([ "$i" -gt 1 ] && echo ', ')"; done
  printf ']}\n'
} > "$TMP/deep.json"
bad "kMaxPathDepthSum" "$CLI" plan --tree "$TMP/deep.json" --planner node
# flatten's ranges are bounded; auto leaves flatten out; --planner all exits 1 when one fails
bad "kMaxFlattenRanges" "$CLI" plan --levels 'N=1,131072 C=1,1' --planner flatten
ok "auto without flatten" "$CLI" plan --levels 'N=1,131072 C=1,1' --planner auto
cat > "$TMP/dim96.json" <<'JSON'
{"page_size": 16, "heads": [8, 2], "head_dim": 96,
 "nodes": [{"id": 0, "parent": null, "tokens": 20}], "queries": [{"node": 0}]}
JSON
bad "planner run" "$CLI" plan --tree "$TMP/dim96.json" --planner all
grep -q "head_dim: must be 64, 128 or 256" "$TMP/out" || { echo "FAIL: dim96 row"; failures=$((failures + 1)); }
# --json FILE (full precision) for plan and check, --tolerance, compared queries / KV heads
ok "plan --json FILE" "$CLI" plan --levels 'N=1,4 C=100,20' --planner node --json "$TMP/plan.json"
grep -q '"est_time_us": [0-9]*\.[0-9]\{3,\}' "$TMP/plan.json" ||
  { echo "FAIL: plan --json FILE lacks a full-precision est_time_us"; failures=$((failures + 1)); }
ok "check --json FILE" "$CLI" check --levels 'N=1,4 C=100,20' --planner node --json "$TMP/check.json"
grep -q '"queries_compared": 4' "$TMP/check.json" && grep -q '"kv_heads_compared"' "$TMP/check.json" ||
  { echo "FAIL: check --json"; cat "$TMP/check.json"; failures=$((failures + 1)); }
grep -q "queries 4/4, kv heads" "$TMP/out" || { echo "FAIL: check output lacks counts"; failures=$((failures + 1)); }
if "$CLI" check --levels 'N=1,4 C=100,20' --planner node --tolerance 1e-12 > "$TMP/out" 2>&1 ||
  ! grep -q "^FAIL  node" "$TMP/out"; then
  echo "FAIL: check --tolerance 1e-12 passed"; failures=$((failures + 1))
fi
ok "workloads --json" "$CLI" workloads --set pat --json "$TMP/workloads.json"
grep -q '"key": "pat:0"' "$TMP/workloads.json" || { echo "FAIL: workloads --json"; failures=$((failures + 1)); }
bad "--tolerance" "$CLI" check --levels 'N=1,4 C=100,20' --planner node --tolerance nan
bad "unknown command" "$CLI" frobnicate
if "$CLI" bench --help > /dev/null 2>&1; then  # CUDA builds
  bad "--grouped-kernel: expected legacy, ws, auto" "$CLI" bench --levels 'N=1,4 C=100,20' \
    --grouped-kernel bogus
  bad "--grouped-kernel: expected legacy, ws, auto" "$CLI" bench --levels 'N=1,4 C=100,20' \
    --grouped-kernel legacy,auto,
fi

# ---- issue 20: strict numbers, outputs never overwrite inputs, the chosen planner, labels
L='N=1,4 C=100,20'
for v in ' -1' '-1' '+1' '1x' '0x10' '18446744073709551616' ' 3' '3 ' ''; do
  bad "--seed" "$CLI" check --levels "$L" --planner node --seed="$v"
done
ok "seed 2^64-1" "$CLI" check --levels "$L" --planner node --seed 18446744073709551615
for v in ' 4' '4 ' '+4' '4.0' '1e2' '0x4' '99999999999999999999'; do
  bad "--sample-queries" "$CLI" check --levels "$L" --planner node --sample-queries="$v"
done
bad "--page-size" "$CLI" plan --levels "$L" --page-size ' 16'
bad "--head-dim" "$CLI" plan --levels "$L" --head-dim '+64'
bad "--heads" "$CLI" plan --levels "$L" --heads ' 8/2'
bad "--heads" "$CLI" plan --levels "$L" --heads '8/+2'
bad "--tolerance" "$CLI" check --levels "$L" --planner node --tolerance ' 1e-3'
bad "--tolerance" "$CLI" check --levels "$L" --planner node --tolerance '+1e-3'
# an output that is the same file as an input (any spelling, symlink, hard link) is refused and
# the input stays as it was; an output elsewhere is still written
cp "$TMP/tree.json" "$TMP/in.json"
cp "$TMP/in.json" "$TMP/in.orig"
ln -s "$TMP/in.json" "$TMP/in.link"
ln "$TMP/in.json" "$TMP/in.hard"
mkdir -p "$TMP/sub"
for cmd in plan check; do
  bad "--json: .* same file as the input --tree" "$CLI" $cmd --tree "$TMP/in.json" --planner node --json "$TMP/in.json"
  bad "--json: .* same file as the input --tree" "$CLI" $cmd --tree "$TMP/in.json" --planner node --json="$TMP/sub/../in.json"
  bad "--json: .* same file as the input --tree" "$CLI" $cmd --tree "$TMP/in.link" --planner node --json "$TMP/in.hard"
  bad "--json: .* same file as the input --tree" "$CLI" $cmd --json "$TMP/in.link" --tree "$TMP/in.json" --planner node
done
cmp -s "$TMP/in.json" "$TMP/in.orig" || { echo "FAIL: an input was overwritten"; failures=$((failures + 1)); }
ok "plan --json next to its input" "$CLI" plan --tree "$TMP/in.json" --planner node --json "$TMP/in.out.json"
grep -q '"planner": "node"' "$TMP/in.out.json" || { echo "FAIL: plan --json beside the input"; failures=$((failures + 1)); }
ok "workloads --json over an existing file" "$CLI" workloads --set pat --json "$TMP/in.out.json"
grep -q '"key": "pat:0"' "$TMP/in.out.json" || { echo "FAIL: workloads --json overwrite"; failures=$((failures + 1)); }
# chosen: the planner whose plan each row is (auto's pick; the others their own name)
ok "plan chosen" "$CLI" plan --workload fasttree:10 --planner all --json "$TMP/chosen.json"
grep -q '^auto  *paths ' "$TMP/out" || { echo "FAIL: plan table lacks auto's pick"; cat "$TMP/out"; failures=$((failures + 1)); }
grep -q '^query  *query ' "$TMP/out" || { echo "FAIL: plan table chosen column"; failures=$((failures + 1)); }
grep -q '"planner": "auto", "chosen": "paths"' "$TMP/chosen.json" &&
  grep -q '"planner": "pat", "chosen": "pat"' "$TMP/chosen.json" ||
  { echo "FAIL: plan --json chosen"; cat "$TMP/chosen.json"; failures=$((failures + 1)); }
ok "plan auto own" "$CLI" plan --workload fasttree:23 --planner auto
grep -q '^auto  *auto ' "$TMP/out" || { echo "FAIL: auto's own plan not 'auto'"; failures=$((failures + 1)); }
# the device is the cost-model preset, and est us is explained
grep -q 'cost-model preset h200' "$TMP/out" && grep -q "^est us: the cost model's estimated" "$TMP/out" ||
  { echo "FAIL: plan output does not explain the preset and est us"; cat "$TMP/out"; failures=$((failures + 1)); }
# the paths planner with its group size fixed: 64 queries in groups of 16 are 4 items
ok "plan paths group" "$CLI" plan --levels 'N=1,4,64 C=64,32,8' --planner paths --paths-group 16 \
  --heads 32/32
grep -q "^paths  *paths  *4 " "$TMP/out" ||
  { echo "FAIL: paths --paths-group 16 is not 4 items"; cat "$TMP/out"; failures=$((failures + 1)); }
ok "check paths group" "$CLI" check --levels 'N=1,4,64 C=64,32,8' --planner paths --paths-group 3 \
  --json
grep -q '"paths_group": 3' "$TMP/out" ||
  { echo "FAIL: check --json lacks the paths group"; cat "$TMP/out"; failures=$((failures + 1)); }

# JSON strings escape control characters (json_escape, cli_util.h): a tree file whose name holds
# one, through plan --json and, where a GPU is present, bench --json.
json_ok() {  # json_ok <file> <description>: the file parses as JSON and shows the name escaped
  if ! grep -q 'ctl\\u0001tree' "$1" ||
     { command -v python3 > /dev/null &&
       ! python3 -c 'import json, sys; json.load(open(sys.argv[1]))' "$1" 2> "$TMP/err"; }; then
    echo "FAIL: $2: invalid JSON"; cat "$1" "$TMP/err"; failures=$((failures + 1))
  fi
}
CTL="$TMP/ctl$(printf '\001')tree.json"
cp "$TMP/tree.json" "$CTL"
ok "plan --json, control character" "$CLI" plan --tree "$CTL" --planner node --json "$TMP/ctl_plan.json"
json_ok "$TMP/ctl_plan.json" "plan --json, control character"
if "$CLI" bench --help > /dev/null 2>&1 && nvidia-smi -L > /dev/null 2>&1; then
  ok "bench --json, control character" "$CLI" bench --tree "$CTL" --planner query --json "$TMP/ctl_bench.json"
  json_ok "$TMP/ctl_bench.json" "bench --json, control character"
fi

if [ "$failures" -ne 0 ]; then
  echo "cli_smoke: $failures failure(s)"
  exit 1
fi
echo "cli_smoke: all passed"
