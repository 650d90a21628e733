"""Hostile inputs to the `treeattn` CLI (plan, check, workloads, bench; argv, tree files, paths,
outputs), for harness.run_cli_case: each refused with exit code 1 or 2 and a message naming the
flag (and the JSON path for tree files) on stderr, or, for valid inputs, exit 0 and the check's
answer. Plus the superlinear probes of its size-driven inputs."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import List

import hostile_json
from harness import CliCase, Probe

L = "N=1,4 C=100,20"  # a small level spec
TREE = hostile_json.tree()


def _has(text: str):
    def check(d: Path, stdout: str) -> None:
        assert text in stdout, f"stdout lacks {text!r}: {stdout[-300:]}"
    return check


def _file_has(name: str, text: str):
    def check(d: Path, stdout: str) -> None:
        body = (d / name).read_text()
        assert text in body, f"{name} lacks {text!r}"
        json.loads(body)
    return check


def _passes(d: Path, stdout: str) -> None:
    assert "PASS" in stdout and "FAIL" not in stdout, stdout[-300:]


def _symlink(target: str):
    def make(p: Path) -> None:
        p.symlink_to(p.parent / target)
    return make


def _hardlink(target: str):
    def make(p: Path) -> None:
        os.link(p.parent / target, p)
    return make


def _sparse(size: int):
    def make(p: Path) -> None:
        with open(p, "wb") as f:
            f.truncate(size)
    return make


def _loop(p: Path) -> None:
    p.symlink_to(p)


def _fifo_with_writer(p: Path) -> None:
    """A named pipe a shell writes a valid tree into (process substitution's case); the writer
    gives up after 30 s if nothing reads it."""
    os.mkfifo(p)
    subprocess.Popen(["timeout", "30", "/bin/sh", "-c", 'printf %s "$1" > "$0"', str(p), TREE],
                     stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                     stderr=subprocess.DEVNULL)


def _number_cases() -> List[CliCase]:
    """Malformed, negative, overflowing and out-of-range values of every numeric flag."""
    c: List[CliCase] = []
    for v in ["-1", " -1", "+1", "1x", "0x10", "1e3", "nan", "18446744073709551616",
              "99999999999999999999999999", " 3", "3 ", "٣"]:
        c.append(CliCase(f"check --seed {v!r}", ["check", "--levels", L, "--planner", "node",
                                                 f"--seed={v}"], ["--seed"]))
    c.append(CliCase("check --seed 2^64-1 (valid)", ["check", "--levels", L, "--planner", "node",
                                                     "--seed", "18446744073709551615"],
                     check=_passes))
    for v in ["-1", "1.5", "16777217", "99999999999999999999", "4.0", " 4"]:
        c.append(CliCase(f"check --sample-queries {v!r}",
                         ["check", "--levels", L, "--planner", "node", f"--sample-queries={v}"],
                         ["--sample-queries"]))
    c.append(CliCase("check --sample-queries 0 (valid)",
                     ["check", "--levels", L, "--planner", "node", "--sample-queries", "0"],
                     check=_passes))
    for v in ["nan", "inf", "-1", "1e10", "abc", "1e-3 ", "0x1p-3", "1e99999"]:
        c.append(CliCase(f"check --tolerance {v!r}",
                         ["check", "--levels", L, "--planner", "node", f"--tolerance={v}"],
                         ["--tolerance"]))
    c.append(CliCase("check --tolerance 0.5 (valid)",
                     ["check", "--levels", L, "--planner", "node", "--tolerance", "0.5"],
                     check=_passes))
    for v in ["0", "-16", "4097", "2147483648", "16.0", "1048576"]:
        c.append(CliCase(f"plan --page-size {v!r}", ["plan", "--levels", L, f"--page-size={v}"],
                         ["--page-size"]))
    c.append(CliCase("check --page-size 1 (valid)", ["check", "--levels", L, "--planner",
                                                     "node", "--page-size", "1"], check=_passes))
    for v in ["96", "0", "-64", "1099511627776", "128abc"]:
        c.append(CliCase(f"plan --head-dim {v!r}", ["plan", "--levels", L, f"--head-dim={v}"],
                         ["--head-dim"]))
    for v in ["0/0", "8/0", "7/2", "8/3", "8/", "/2", "8/2/1", "2147483648/1", "-8/2", "a/b",
              "8//2", "0"]:
        c.append(CliCase(f"plan --heads {v!r}", ["plan", "--levels", L, f"--heads={v}"],
                         ["--heads"]))
    c.append(CliCase("check --heads 8 (valid, MHA)", ["check", "--levels", L, "--planner", "node",
                                                      "--heads", "8", "--head-dim", "64"],
                     check=_passes))
    for v in ["fp8", "FP8_E4M3", "float8_e4m3fn", "fp8_e4m3 ", "", "int8", "fp16"]:
        c.append(CliCase(f"check --kv-dtype {v!r}",
                         ["check", "--levels", L, "--planner", "node", f"--kv-dtype={v}"],
                         ["--kv-dtype"]))
    for flag in ["--k-scale", "--v-scale"]:
        for v in ["0", "-1", "nan", "inf", "1e-50", "1e39", "0x1p-3", "abc", " 1"]:
            c.append(CliCase(f"check {flag} {v!r}",
                             ["check", "--levels", L, "--planner", "node", "--kv-dtype",
                              "fp8_e4m3", f"{flag}={v}"], [flag]))
        c.append(CliCase(f"check {flag} without an fp8 --kv-dtype",
                         ["check", "--levels", L, "--planner", "node", flag, "2"], [flag]))
    c.append(CliCase("check --kv-dtype fp8_e5m2 with scales (valid)",
                     ["check", "--levels", L, "--planner", "node", "--kv-dtype", "fp8_e5m2",
                      "--k-scale", "0.0009765625", "--v-scale", "64"], check=_passes))
    c.append(CliCase("plan --kv-dtype fp8_e4m3 (valid)",
                     ["plan", "--levels", L, "--planner", "node", "--kv-dtype", "fp8_e4m3",
                      "--json"], check=_has('"kv_dtype_bytes": 1')))
    return c


def _argv_cases() -> List[CliCase]:
    """Commands, flags and their values."""
    return [
        CliCase("no command", [], ["usage"]),
        CliCase("unknown command", ["frobnicate"], ["unknown command"]),
        CliCase("--version (valid)", ["--version"], check=_has("treeattn ")),
        CliCase("plan without an input", ["plan"], ["--tree"]),
        CliCase("plan --tree without a value", ["plan", "--tree"], ["--tree"]),
        CliCase("plan --tree= empty", ["plan", "--tree="], ["--tree"]),
        CliCase("plan unknown flag", ["plan", "--levels", L, "--bogus", "1"], ["--bogus"]),
        CliCase("plan single-dash flag", ["plan", "--levels", L, "-x"], ["-x"]),
        CliCase("plan positional word", ["plan", "--levels", L, "extra"], ["extra"]),
        CliCase("plan flag given twice", ["plan", "--levels", L, "--levels", L], ["--levels"]),
        CliCase("plan two inputs", ["plan", "--levels", L, "--workload", "fasttree:1"],
                ["--tree"]),
        CliCase("plan switch with a value", ["plan", "--levels", L, "--shuffle-pages=1"],
                ["--shuffle-pages"]),
        CliCase("plan --planner unknown", ["plan", "--levels", L, "--planner", "nope"],
                ["--planner"]),
        CliCase("plan --planner case", ["plan", "--levels", L, "--planner", "NODE"], ["--planner"]),
        CliCase("plan --planner list", ["plan", "--levels", L, "--planner", "node,query"],
                ["--planner"]),
        CliCase("plan --device unknown", ["plan", "--levels", L, "--device", "b200"], ["--device"]),
        CliCase("plan --device upper case (valid)", ["plan", "--levels", L, "--device", "H100"],
                check=_has("cost-model preset h100")),
        CliCase("plan --tree with --page-size", ["plan", "--tree", "{d}/t.json", "--page-size",
                                                 "8"], ["--page-size"], files={"t.json": TREE}),
        CliCase("plan --tree with --shuffle-pages", ["plan", "--tree", "{d}/t.json",
                                                     "--shuffle-pages"], ["--shuffle-pages"],
                files={"t.json": TREE}),
        CliCase("plan --help (valid)", ["plan", "--help"], check=_has("--levels")),
        # level specs
        CliCase("--levels non-number", ["plan", "--levels", "N=1,x C=5"], ["--levels"]),
        CliCase("--levels empty C", ["plan", "--levels", "N=1 C="], ["--levels"]),
        CliCase("--levels blank", ["plan", "--levels", " "], ["--levels"]),
        CliCase("--levels N=0", ["plan", "--levels", "N=0 C=5"], ["--levels"]),
        CliCase("--levels lengths differ", ["plan", "--levels", "N=1,2 C=5"], ["--levels"]),
        CliCase("--levels negative", ["plan", "--levels", "N=1 C=-5"], ["--levels"]),
        CliCase("--levels 10^8 nodes", ["plan", "--levels", "N=1,100000000 C=1,1"], ["--levels"]),
        CliCase("--levels 3e9 tokens", ["plan", "--levels", "N=1 C=3000000000"], ["--levels"]),
        CliCase("--levels fewer nodes deeper", ["plan", "--levels", "N=4,2 C=8,8"], ["--levels"]),
        CliCase("--levels 65536 roots (valid)", ["plan", "--levels", "N=65536,65536 C=1,1",
                                                 "--planner", "query"], check=_has("query")),
        CliCase("--levels missing N", ["plan", "--levels", "C=5"], ["--levels"]),
        CliCase("--levels heads 7/2", ["plan", "--levels", "N=1 C=5 heads=7/2"], ["--levels"]),
        CliCase("--levels page=0", ["plan", "--levels", "N=1 C=5 page=0"], ["--levels"]),
        CliCase("--levels page=99999", ["plan", "--levels", "N=1 C=5 page=99999"], ["--levels"]),
        CliCase("--levels unknown key", ["plan", "--levels", "N=1 C=5 bogus=3"], ["--levels"]),
        CliCase("--levels key twice", ["plan", "--levels", "N=1 C=5 N=2"], ["--levels"]),
        CliCase("--levels fullwidth digit", ["plan", "--levels", "N=\uff11 C=5"], ["--levels"]),
        CliCase("--levels control character", ["plan", "--levels", "N=1 C=5\x01"], ["--levels"]),
        CliCase("--levels 20000 levels", ["plan", "--levels", "N=" + ",".join(["1"] * 20000)
                                          + " C=" + ",".join(["1"] * 20000), "--planner", "node"],
                check=_has("node")),
        CliCase("--levels dim=96 (row error, exit 1)", ["plan", "--levels", "N=1 C=5 dim=96",
                                                        "--planner", "node"], ["head_dim"]),
        # workloads
        CliCase("--workload unknown set", ["plan", "--workload", "nosuchset:3"], ["--workload"]),
        CliCase("--workload index past the end", ["plan", "--workload", "fasttree:999"],
                ["--workload"]),
        CliCase("--workload index -1", ["plan", "--workload", "fasttree:-1"], ["--workload"]),
        CliCase("--workload no index", ["plan", "--workload", "fasttree:"], ["--workload"]),
        CliCase("--workload no set", ["plan", "--workload", ":3"], ["--workload"]),
        CliCase("--workload index 1x", ["plan", "--workload", "fasttree:1x"], ["--workload"]),
        CliCase("--workload index 2^70", ["plan", "--workload", "fasttree:1180591620717411303424"],
                ["--workload"]),
        CliCase("--workload unknown name", ["plan", "--workload", "no such workload"],
                ["--workload"]),
        CliCase("--workloads unknown set", ["plan", "--workloads", "bogus"], ["--workloads"]),
        CliCase("plan --workloads pat (valid)", ["plan", "--workloads", "pat", "--planner",
                                                 "query"], check=_has("query")),
        CliCase("workloads --set unknown", ["workloads", "--set", "bogus"], ["--set"]),
        CliCase("workloads positional", ["workloads", "pat"], ["pat"]),
        CliCase("workloads --json over a file (valid)", ["workloads", "--set", "pat", "--json",
                                                         "{d}/w.json"],
                files={"w.json": "old"}, outputs=["w.json"],
                check=_file_has("w.json", '"key": "pat:0"')),
        # bench: without CUDA it says so; with CUDA its flags are checked first
        CliCase("bench unknown flag", ["bench", "--levels", L, "--bogus"], ["bench"]),
        CliCase("bench --grouped-kernel bogus", ["bench", "--levels", L, "--grouped-kernel",
                                                 "bogus"], ["bench"]),
    ]


def _path_cases() -> List[CliCase]:
    """Input paths and output files."""
    return [
        CliCase("--tree nonexistent", ["plan", "--tree", "{d}/missing.json"], ["--tree"]),
        CliCase("--tree directory", ["plan", "--tree", "{d}"], ["--tree", "is a directory"]),
        CliCase("--tree /dev/zero", ["plan", "--tree", "/dev/zero"],
                ["--tree", "NUL byte"], mem_mb=300),
        CliCase("--tree unreadable (/proc/self/mem)", ["plan", "--tree", "/proc/self/mem"],
                ["--tree"]),
        CliCase("--tree sparse 300 MB file", ["plan", "--tree", "{d}/big.json"],
                ["--tree", "kMaxJsonFileBytes"], files={"big.json": _sparse(300 << 20)}),
        CliCase("--tree symlink loop", ["plan", "--tree", "{d}/loop.json"], ["--tree"],
                files={"loop.json": _loop}),
        CliCase("--tree name with a newline (valid)", ["plan", "--tree", "{d}/a\nb.json",
                                                       "--planner", "query"],
                files={"a\nb.json": TREE}, check=_has("query")),
        CliCase("--tree named pipe with a writer (valid)", ["plan", "--tree", "{d}/fifo",
                                                            "--planner", "query"],
                files={"fifo": _fifo_with_writer}, check=_has("query")),
        CliCase("--json same as --tree", ["plan", "--tree", "{d}/in.json", "--json",
                                          "{d}/in.json"], ["--json", "same file"],
                files={"in.json": TREE}),
        CliCase("--json same as --tree, other spelling", ["check", "--tree", "{d}/in.json",
                                                          "--json", "{d}/./in.json"],
                ["--json", "same file"], files={"in.json": TREE}),
        CliCase("--json a symlink to --tree", ["plan", "--tree", "{d}/in.json", "--json",
                                               "{d}/link.json"], ["--json", "same file"],
                files={"in.json": TREE, "link.json": _symlink("in.json")}),
        CliCase("--json a hard link to --tree", ["check", "--json", "{d}/hard.json", "--tree",
                                                 "{d}/in.json"], ["--json", "same file"],
                files={"in.json": TREE, "hard.json": _hardlink("in.json")}),
        CliCase("--json into a missing folder", ["plan", "--levels", L, "--json",
                                                 "{d}/no/such/dir/out.json"], ["--json"]),
        CliCase("--json a directory", ["plan", "--levels", L, "--json", "{d}"], ["--json"]),
        CliCase("--json /dev/full", ["plan", "--levels", L, "--json", "/dev/full"], ["--json"]),
        CliCase("--json read-only /proc file", ["plan", "--levels", L, "--json", "/proc/version"],
                ["--json"]),
        CliCase("--json empty", ["plan", "--levels", L, "--json="], ["--json"]),
        CliCase("--json beside the input (valid)", ["plan", "--tree", "{d}/in.json", "--planner",
                                                    "node", "--json", "{d}/out.json"],
                files={"in.json": TREE}, check=_file_has("out.json", '"planner": "node"')),
        CliCase("--json - to stdout (valid)", ["check", "--levels", L, "--planner", "node",
                                               "--json", "-"], check=_has('"passed": 1')),
    ]


def _json_cases() -> List[CliCase]:
    """Every hostile tree text of hostile_json, through `plan --tree FILE`."""
    c = []
    for name, text, where in hostile_json.texts():
        argv = ["plan", "--tree", "{d}/t.json", "--planner", "query"]
        if where is None:
            c.append(CliCase(f"tree: {name}", argv, files={"t.json": text}, check=_has("query")))
        else:
            c.append(CliCase(f"tree: {name}", argv, ["--tree", where], files={"t.json": text}))
    # `check` on trees whose declared sizes are hostile: cost follows the pages used
    c.append(CliCase("check: num_pages 2^31-1 (valid)", ["check", "--tree", "{d}/t.json",
                                                         "--planner", "node"],
                     files={"t.json": hostile_json.tree(hostile_json.ROOT_PAGES,
                                                        extra='"num_pages": 2147483647')},
                     check=_passes))
    c.append(CliCase("check: page_size 4096, page id 10^6 (valid)",
                     ["check", "--tree", "{d}/t.json", "--planner", "node"],
                     files={"t.json": hostile_json.tree(
                         '{"id": 0, "parent": null, "tokens": 5000, "pages": [1000000, 7]}',
                         page_size="4096")}, check=_passes))
    c.append(CliCase("check: head_dim 96 tree (row error, exit 1)",
                     ["check", "--tree", "{d}/t.json", "--planner", "node"], ["head_dim"],
                     files={"t.json": hostile_json.tree(extra='"heads": [8, 2], "head_dim": 96')}))
    return c


def cases() -> List[CliCase]:
    return _number_cases() + _argv_cases() + _path_cases() + _json_cases()


def _tree_file(text: str):
    return {"t.json": text}


def probes() -> List[Probe]:
    """Size-driven CLI inputs: time at n and 4n (process start subtracted)."""
    plan = ["plan", "--tree", "{d}/t.json", "--planner", "node"]
    return [
        # 800k keys: at 200k the parse took ~40 ms beside a ~80 ms process start, and CI once
        # read it as 11 ms (ratio 14)
        Probe("flat object of n keys", lambda n: (plan, _tree_file(hostile_json._flat_object(n))),
              800_000),
        Probe("flat object of n keys, one duplicate",
              lambda n: (plan, _tree_file(hostile_json._flat_object(n, dup=True))), 800_000),
        Probe("ignored array of n numbers", lambda n: (plan, _tree_file(hostile_json.tree(
            extra='"comment": [' + ",".join(["0"] * n) + "]"))), 500_000),
        # 100k nodes: at 20k the plan took ~30 ms beside a ~90 ms process start, and the
        # subtraction's noise once read as a 15x ratio in CI
        Probe("chain of n nodes", lambda n: (plan, _tree_file(hostile_json._chain(n))), 100_000),
        Probe("star of n leaves with a query each", lambda n: (plan, _tree_file(hostile_json.tree(
            hostile_json.ROOT + "".join(f', {{"id": {i}, "parent": 0, "tokens": 3}}'
                                        for i in range(1, n + 1)),
            queries=", ".join(f'{{"node": {i}}}' for i in range(1, n + 1))))), 10_000),
        Probe("n queries on one node", lambda n: (plan, _tree_file(hostile_json.tree(
            queries=", ".join(['{"node": 0}'] * n)))), 100_000),
        Probe("one node listing n pages", lambda n: (plan, _tree_file(hostile_json.tree(
            f'{{"id": 0, "parent": null, "tokens": {n}, "pages": ['
            + ",".join(str(i) for i in range(n)) + "]}", page_size="1"))), 200_000),
        Probe("one page repeated n times", lambda n: (plan, _tree_file(hostile_json.tree(
            f'{{"id": 0, "parent": null, "tokens": {n}, "pages": [' + ",".join(["0"] * n) + "]}",
            page_size="1"))), 200_000),
        Probe("free_pages of n pages", lambda n: (plan, _tree_file(hostile_json.tree(
            extra=f'"num_pages": {n + 2}, "free_pages": ['
            + ",".join(str(i) for i in range(2, n + 2)) + "]"))), 200_000),
        Probe("n sparse node ids", lambda n: (plan, _tree_file(hostile_json.tree(
            ", ".join(f'{{"id": {i * 1000003}, "parent": {(i // 2) * 1000003 if i else "null"}, '
                      f'"tokens": 2}}' for i in range(n)),
            queries=f'{{"node": {(n - 1) * 1000003}}}'))), 20_000),
        Probe("--levels fan-out n", lambda n: (["plan", "--levels", f"N=1,{n} C=16,1",
                                                "--planner", "node"], {}), 20_000),
        Probe("check, n queries", lambda n: (["check", "--levels", f"N=1,{n} C=64,3", "--planner",
                                              "node", "--sample-queries", "0"], {}), 1_000),
    ]
