"""The adversarial harness of tests/hostile: tables of hostile inputs per interface, each case run
isolated so that a crash, a hang or a memory blow-up is detected and counted instead of ending
the run, then classified; and superlinear probes (time at n and 4n of a size-driven input).

Isolation.
* CLI cases run the `treeattn` binary under `ulimit -v` (CAP_MB above its start) with a kill
  after twice the time bound; os.wait4 gives its exit status, /proc its peak RSS.
* Python cases run in a fork server (the "zygote", `python harness.py --zygote`): one process
  imports numpy, torch and treeattn once (torch limited to one thread, no work done, so forking
  it is safe), then forks a child per case. The child caps its address space (RLIMIT_AS, CAP_MB
  above its size), resets its peak-RSS counter (/proc/self/clear_refs), runs the case and sends
  the result through a pipe; the zygote kills it after twice the time bound and reads its exit
  status (a signal is a crash). Cases therefore never see each other's state.

Outcomes (OUTCOMES): a hostile case (Case.arg set) is `clear` when refused with an expected
error type whose message starts with the argument's name (and holds Case.needle), `unclear`
when refused otherwise, `silent` when accepted; a valid case (Case.arg None) is `valid` when it
succeeds and its own checks pass, `wrong` when refused or answered wrongly (AssertionError, or
Wrong raised by the case, e.g. a refused engine call that changed the engine). Any case is a
`crash` when killed by a signal, a `hang` past its time bound, `memory` past its bound on peak
RSS growth (or refused with a bare MemoryError from the cap). Only `clear` and `valid` pass.

A probe times a size-driven call at n and FACTOR * n (best of REPS each, input construction and
Python's cyclic GC not timed) and is `superlinear` when the ratio exceeds LIMIT (linear cost gives
FACTOR) in each of ATTEMPTS measurements (the best times so far are kept across attempts;
times under MIN_TIME count as MIN_TIME).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import select
import signal
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path
from typing import Any, Callable, Dict, Iterable, Optional, Sequence, Tuple, Union

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]

OUTCOMES = {
    "clear": "refused with the expected error type, the message naming the argument",
    "valid": "a valid input, accepted and answered correctly (the case checks the answer)",
    "unclear": "refused with another error type or a message not naming the argument",
    "silent": "a hostile input accepted without an error",
    "wrong": "a valid input refused or answered wrongly, or a refusal that changed state",
    "crash": "killed by a signal",
    "hang": "over the time bound",
    "memory": "over the memory bound (peak RSS growth, or a bare MemoryError at the cap)",
}
GOOD = ("clear", "valid")
CAP_MB = 3072  # hard address-space cap above the process size at the start of a case
FACTOR = 4
LIMIT = 10.0  # linear cost gives FACTOR (4), quadratic 16; cache effects reach ~6
REPS = 2
ATTEMPTS = 3
MIN_TIME = 0.005  # s: shorter probe times count as this (noise floor)
CLI_MIN_TIME = 0.02  # s: the same for CLI probes, whose times are less a ~80 ms process start


class Wrong(Exception):
    """Raised by a case whose input was handled wrongly although no check of the call failed
    (e.g. a refused call that changed the engine's state)."""


@dataclasses.dataclass
class Case:
    """One hostile (arg set) or valid (arg None) input to a Python entry point.

    call(): builds its inputs and makes the call (all of it timed); a valid case's call checks
    its answer itself (assert). exc: the error types a refusal may raise; needle: text the
    message must hold besides starting with `arg` (one of them, when a tuple)."""

    name: str
    call: Callable[[], Any]
    arg: Optional[Union[str, Tuple[str, ...]]] = None
    exc: Tuple[type, ...] = (ValueError, TypeError, MemoryError)
    needle: Optional[str] = None
    seconds: float = 5.0
    mem_mb: float = 512.0
    known: Optional[str] = None  # an open finding (pytest: strict xfail until fixed)


@dataclasses.dataclass
class CliCase:
    """One hostile (needles set: exit 1 or 2, stderr holds every needle) or valid (needles None:
    exit 0, then `check(dir, stdout)` asserts) run of the treeattn CLI.

    argv: the arguments after the binary; "{d}" stands for the case's scratch folder. files:
    name -> bytes/str written there first (a callable gets the folder and makes what it likes).
    Every file present before the run must be unchanged after it, but those in `outputs`."""

    name: str
    argv: Sequence[str]
    needles: Optional[Sequence[str]] = None
    files: Dict[str, Any] = dataclasses.field(default_factory=dict)
    check: Optional[Callable[[Path, str], None]] = None
    outputs: Sequence[str] = ()
    seconds: float = 10.0
    mem_mb: float = 512.0
    known: Optional[str] = None


@dataclasses.dataclass
class Probe:
    """make(n) -> a zero-argument callable (Python) or (argv, files) (CLI) of size n. The call may
    raise one of `exc` (a refused input can be timed too)."""

    name: str
    make: Callable[[int], Any]
    n: int
    exc: Tuple[type, ...] = ()
    seconds: float = 30.0
    known: Optional[str] = None


# ---------------------------------------------------------------- classification (Python cases)


def _names_arg(msg: str, arg: Union[str, Tuple[str, ...]]) -> bool:
    return any(msg.startswith(a) for a in ((arg,) if isinstance(arg, str) else arg))


def classify(case: Case, error: Optional[BaseException]) -> Tuple[str, str]:
    """(outcome, detail) of a finished Python case (time and memory are judged by the caller)."""
    if isinstance(error, Wrong):
        return "wrong", str(error)
    if case.arg is None:
        if error is None:
            return "valid", ""
        return "wrong", f"valid input failed: {type(error).__name__}: {error}"
    if error is None:
        return "silent", "accepted"
    msg = str(error)
    detail = f"{type(error).__name__}: {msg[:300]}"
    if isinstance(error, MemoryError) and not _names_arg(msg, case.arg):
        return "memory", detail
    if not isinstance(error, case.exc):
        return "unclear", "unexpected type " + detail
    if not _names_arg(msg, case.arg):
        return "unclear", f"message does not start with {case.arg!r}: {detail}"
    if case.needle is not None and case.needle not in msg:
        return "unclear", f"message lacks {case.needle!r}: {detail}"
    return "clear", detail


# ---------------------------------------------------------------- the fork server

_SUITES: Dict[str, Dict[str, Any]] = {}


def suite_modules() -> Dict[str, str]:
    """Interface -> module holding its CASES (and PROBES)."""
    return {"cli": "cases_cli", "api": "cases_api", "engine": "cases_engine",
            "serving": "cases_serving"}


def load_suite(suite: str) -> Dict[str, Any]:
    """{'cases': {name: Case}, 'probes': {name: Probe}} of one interface (imported once)."""
    if suite not in _SUITES:
        for d in (HERE, ROOT / "tests" / "python"):  # the engine table lives in tests/python
            if str(d) not in sys.path:
                sys.path.insert(0, str(d))
        mod = __import__(suite_modules()[suite])
        cases, probes = mod.cases(), mod.probes()
        for kind, items in (("case", cases), ("probe", probes)):
            names = [c.name for c in items]
            dup = {n for n in names if names.count(n) > 1}
            assert not dup, f"{suite}: duplicate {kind} names {sorted(dup)}"
        _SUITES[suite] = {"cases": {c.name: c for c in cases},
                          "probes": {p.name: p for p in probes}}
    return _SUITES[suite]


def _rss_kb(field: str) -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    return 0


def _child_run(item: Any, kind: str) -> Dict[str, Any]:
    """Runs one case or probe in the forked child (after the caps are set)."""
    if kind == "probe":
        import gc

        gc.disable()  # the cyclic collector's pauses are Python's, not the call's
        times = [float("inf"), float("inf")]
        for _ in range(ATTEMPTS):  # noise on a shared machine: flagged only if every attempt is
            for i, n in enumerate((item.n, FACTOR * item.n)):
                fn = item.make(n)
                for _ in range(REPS):
                    t = time.perf_counter()
                    try:
                        fn()
                    except item.exc:
                        pass
                    times[i] = min(times[i], time.perf_counter() - t)
            if times[1] / max(times[0], 1e-3) <= LIMIT:
                break
        return {"times": times}
    error = None
    t = time.perf_counter()
    try:
        item.call()
    except BaseException as e:  # noqa: BLE001 - classified below
        error = e
    seconds = time.perf_counter() - t
    outcome, detail = classify(item, error)
    if outcome == "wrong" and error is not None and not isinstance(error, Wrong):
        detail += "\n" + "".join(traceback.format_exception(error)[-4:])
    return {"outcome": outcome, "detail": detail, "seconds": seconds}


def _fork_one(suite: str, name: str, kind: str) -> Dict[str, Any]:
    """Forks a child for one case / probe and judges it (zygote side)."""
    item = load_suite(suite)["cases" if kind == "case" else "probes"][name]
    bound = item.seconds
    r_fd, w_fd = os.pipe()
    pid = os.fork()
    if pid == 0:  # child
        os.close(r_fd)
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, 1)  # stdout is the zygote's reply channel
        try:
            import resource

            try:
                with open("/proc/self/clear_refs", "w") as f:
                    f.write("5")  # peak RSS := current RSS
            except OSError:
                pass
            base = _rss_kb("VmRSS")
            size = _rss_kb("VmSize") * 1024
            resource.setrlimit(resource.RLIMIT_AS, (size + CAP_MB * 2**20, resource.RLIM_INFINITY))
            res = _child_run(item, kind)
            res["peak_mb"] = max(0, _rss_kb("VmHWM") - base) / 1024
        except BaseException as e:  # noqa: BLE001 - a harness error is reported, not raised
            res = {"outcome": "wrong", "detail": "harness: " + "".join(
                traceback.format_exception(e)[-3:])}
        try:
            os.write(w_fd, json.dumps(res).encode())
        finally:
            os._exit(0)
    os.close(w_fd)
    deadline = time.monotonic() + max(2 * bound, bound + 5)
    data = b""
    status = None
    killed = False
    while True:
        ready, _, _ = select.select([r_fd], [], [], 0.05)
        if ready:
            chunk = os.read(r_fd, 1 << 16)
            data += chunk
        got, st, _ = os.wait4(pid, os.WNOHANG)
        if got == pid:
            status = st
            break
        if time.monotonic() > deadline:
            os.kill(pid, signal.SIGKILL)
            _, status, _ = os.wait4(pid, 0)
            killed = True
            break
    while True:  # the rest of the pipe
        chunk = os.read(r_fd, 1 << 16)
        if not chunk:
            break
        data += chunk
    os.close(r_fd)
    if killed:
        return {"outcome": "hang", "detail": f"killed after {max(2 * bound, bound + 5):.0f} s"}
    if os.WIFSIGNALED(status):
        sig = signal.Signals(os.WTERMSIG(status)).name
        return {"outcome": "crash", "detail": f"killed by {sig}"}
    try:
        res = json.loads(data.decode())
    except ValueError:
        return {"outcome": "crash", "detail": f"exit status {os.WEXITSTATUS(status)}, no result"}
    if kind == "probe":
        return _judge_probe(item, res)
    if res.get("seconds", 0) > bound and res["outcome"] in GOOD:
        res["detail"] = f"took {res['seconds']:.2f} s > {bound} s; " + res["detail"]
        res["outcome"] = "hang"
    if res.get("peak_mb", 0) > item.mem_mb and res["outcome"] in GOOD:
        res["detail"] = f"peak RSS +{res['peak_mb']:.0f} MB > {item.mem_mb} MB; " + res["detail"]
        res["outcome"] = "memory"
    return res


def _judge_probe(probe: Probe, res: Dict[str, Any], min_time: float = MIN_TIME) -> Dict[str, Any]:
    if "times" not in res:
        return res
    t1, t4 = res["times"]
    # times under MIN_TIME count as MIN_TIME: below it, the subtracted process start and the
    # machine's noise dominate (a 2 ms parse read as 28 ms on a loaded CI machine)
    ratio = t4 / max(t1, min_time)
    outcome = "superlinear" if ratio > LIMIT else "linear"
    return {"outcome": outcome, "ratio": ratio, "times": [t1, t4],
            "detail": f"n={probe.n}: {t1 * 1e3:.1f} ms, {FACTOR}n: {t4 * 1e3:.1f} ms, "
                      f"ratio {ratio:.1f} (limit {LIMIT})"}


def zygote_main() -> int:
    """The fork server: imports everything once, then one JSON request per stdin line."""
    import numpy  # noqa: F401

    try:
        import torch

        torch.set_num_threads(1)
    except ImportError:
        pass
    import treeattn  # noqa: F401

    for suite in suite_modules():
        if suite != "cli":
            load_suite(suite)
    out = sys.stdout
    out.write(json.dumps({"ready": True}) + "\n")
    out.flush()
    for line in sys.stdin:
        req = json.loads(line)
        try:
            res = _fork_one(req["suite"], req["name"], req.get("kind", "case"))
        except BaseException as e:  # noqa: BLE001
            res = {"outcome": "wrong", "detail": f"harness: {type(e).__name__}: {e}"}
        out.write(json.dumps(res) + "\n")
        out.flush()
    return 0


class Zygote:
    """Client of the fork server (restarted when it dies)."""

    def __init__(self) -> None:
        self.proc: Optional[subprocess.Popen] = None

    def _start(self) -> None:
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(
            [str(HERE), str(ROOT / "tests" / "python"), os.environ.get("PYTHONPATH", "")]))
        self.proc = subprocess.Popen([sys.executable, str(HERE / "harness.py"), "--zygote"],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env,
                                     text=True)
        ready = self.proc.stdout.readline()
        if not ready:
            raise RuntimeError("hostile harness: the fork server did not start")

    def run(self, suite: str, name: str, kind: str = "case") -> Dict[str, Any]:
        if self.proc is None or self.proc.poll() is not None:
            self._start()
        self.proc.stdin.write(json.dumps({"suite": suite, "name": name, "kind": kind}) + "\n")
        self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        if not line:
            self.proc = None
            return {"outcome": "crash", "detail": "the fork server died"}
        return json.loads(line)

    def close(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.stdin.close()
            self.proc.wait(timeout=30)
        self.proc = None


# ---------------------------------------------------------------- the CLI


def cli_path() -> Optional[Path]:
    """The treeattn binary (tests/python/conftest.py's cli_path: $TREEATTN_CLI, build/treeattn
    or build-cpu/treeattn)."""
    if str(ROOT / "tests" / "python") not in sys.path:
        sys.path.insert(0, str(ROOT / "tests" / "python"))
    from conftest import cli_path as find

    return find()


def _digest(p: Path) -> str:
    h = hashlib.sha256()
    with open(p, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _inputs(d: Path) -> Dict[Path, str]:
    """Digest of every regular file under d (links are followed only inside d)."""
    out = {}
    for p in sorted(d.rglob("*")):
        if p.is_file() and not p.is_symlink() and p.stat().st_size < (64 << 20):
            out[p] = _digest(p)
    return out


def _write_files(d: Path, files: Dict[str, Any]) -> None:
    for name, content in files.items():
        if callable(content):
            content(d / name)
        else:
            (d / name).write_bytes(content.encode() if isinstance(content, str) else content)


def _hwm_kb(pid: int, exe: str) -> int:
    """VmHWM (peak RSS) of process `pid` once it runs `exe` (0 before its exec or after its
    exit). Read from /proc while it runs: wait4's ru_maxrss would count the memory of the
    process it was forked from (this one, with torch loaded under pytest)."""
    try:
        if os.readlink(f"/proc/{pid}/exe") != exe:
            return 0
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1])
    except (OSError, ValueError):
        pass
    return 0


def run_cli(cli: Path, argv: Sequence[str], d: Path, seconds: float) -> Dict[str, Any]:
    """Runs the CLI once under the caps: exit code (negative: signal), stdout, stderr, time,
    peak RSS in MB (sampled every 2 ms), killed."""
    args = [a.replace("{d}", str(d)) for a in argv]
    out_p, err_p = d.parent / (d.name + ".out"), d.parent / (d.name + ".err")
    with open(out_p, "wb") as fo, open(err_p, "wb") as fe:
        t = time.perf_counter()
        p = subprocess.Popen(["/bin/sh", "-c", f'ulimit -v {CAP_MB * 1024 + 262144} && exec "$0" "$@"',
                              str(cli), *args], stdout=fo, stderr=fe, stdin=subprocess.DEVNULL,
                             cwd=d)
        deadline = t + max(2 * seconds, seconds + 5)
        killed = False
        peak_kb = 0
        while True:
            peak_kb = max(peak_kb, _hwm_kb(p.pid, str(cli)))
            got, status, _ = os.wait4(p.pid, os.WNOHANG)
            if got == p.pid:
                break
            if time.perf_counter() > deadline:
                p.kill()
                _, status, _ = os.wait4(p.pid, 0)
                killed = True
                break
            time.sleep(0.002)
        elapsed = time.perf_counter() - t
        p.returncode = -1  # reaped above; keeps Popen from waiting again
    code = -os.WTERMSIG(status) if os.WIFSIGNALED(status) else os.WEXITSTATUS(status)
    stdout = out_p.read_bytes().decode(errors="replace")
    stderr = err_p.read_bytes().decode(errors="replace")
    out_p.unlink()
    err_p.unlink()
    return {"code": code, "stdout": stdout, "stderr": stderr, "seconds": elapsed,
            "peak_mb": peak_kb / 1024, "killed": killed}


def run_cli_case(cli: Path, case: CliCase) -> Dict[str, Any]:
    """Runs and classifies one CLI case in a fresh scratch folder."""
    with tempfile.TemporaryDirectory(prefix="hostile-") as tmp:
        d = Path(tmp) / "d"
        d.mkdir()
        _write_files(d, case.files)
        before = _inputs(d)
        r = run_cli(cli, case.argv, d, case.seconds)
        changed = [p.name for p, h in before.items()
                   if p.name not in case.outputs and (not p.exists() or _digest(p) != h)]
        res = {"seconds": r["seconds"], "peak_mb": r["peak_mb"], "code": r["code"]}
        err = r["stderr"].strip().splitlines()
        tail = (err[-1] if err else "")[:300]
        if r["killed"]:
            res.update(outcome="hang", detail=f"killed after {max(2 * case.seconds, case.seconds + 5):.0f} s")
        elif r["code"] < 0:
            res.update(outcome="crash", detail=f"killed by {signal.Signals(-r['code']).name}: {tail}")
        elif r["code"] not in (0, 1, 2) or "terminate called" in r["stderr"]:
            res.update(outcome="crash", detail=f"exit code {r['code']}: {tail}")
        elif changed:
            res.update(outcome="wrong", detail=f"input file(s) changed: {changed}")
        elif case.needles is None:
            if r["code"] != 0:
                res.update(outcome="wrong", detail=f"valid input refused (exit {r['code']}): {tail}")
            else:
                try:
                    if case.check is not None:
                        case.check(d, r["stdout"])
                    res.update(outcome="valid", detail="")
                except AssertionError as e:
                    res.update(outcome="wrong", detail=f"wrong answer: {e}")
        elif r["code"] == 0:
            res.update(outcome="silent", detail="exit 0")
        else:
            missing = [n.replace("{d}", str(d)) for n in case.needles
                       if n.replace("{d}", str(d)) not in r["stderr"]]
            if missing:
                res.update(outcome="unclear", detail=f"exit {r['code']}, stderr lacks {missing}: "
                                                     f"{r['stderr'].strip()[-300:]}")
            else:
                res.update(outcome="clear", detail=f"exit {r['code']}: {tail}")
        if res["outcome"] in GOOD and r["seconds"] > case.seconds:
            res.update(outcome="hang", detail=f"took {r['seconds']:.2f} s > {case.seconds} s")
        if res["outcome"] in GOOD and r["peak_mb"] > case.mem_mb:
            res.update(outcome="memory", detail=f"peak RSS {r['peak_mb']:.0f} MB > {case.mem_mb} MB")
        return res


def run_cli_probe(cli: Path, probe: Probe) -> Dict[str, Any]:
    """Times a CLI probe at n and FACTOR * n, less the time of a minimal run (process start);
    up to ATTEMPTS measurements, as for Python probes. The process start is measured again in
    every attempt and its minimum over all of them is subtracted from the best times: a start
    measured slow once (a cold binary) would otherwise be subtracted from every time, and a
    linear 30 ms read as 1 ms next to its 4x."""
    best = [float("inf"), float("inf")]  # the raw times, process start included
    with tempfile.TemporaryDirectory(prefix="hostile-") as tmp:
        base_dir = Path(tmp) / "base"
        base_dir.mkdir()

        def start_time() -> float:
            return min(run_cli(cli, ["plan", "--levels", "N=1 C=1", "--planner", "query"],
                               base_dir, 10)["seconds"] for _ in range(REPS))

        base = start_time()
        dirs = []
        for i, n in enumerate((probe.n, FACTOR * probe.n)):
            d = Path(tmp) / f"n{i}"
            d.mkdir()
            argv, files = probe.make(n)
            _write_files(d, files)
            dirs.append((n, d, argv))
        times = best
        for attempt in range(ATTEMPTS):
            if attempt > 0:
                base = min(base, start_time())
            for i, (n, d, argv) in enumerate(dirs):
                for _ in range(REPS):
                    r = run_cli(cli, argv, d, probe.seconds)
                    if r["killed"]:
                        return {"outcome": "hang", "detail": f"n={n}: killed"}
                    if r["code"] < 0 or r["code"] not in (0, 1, 2):
                        return {"outcome": "crash", "detail": f"n={n}: exit {r['code']}"}
                    best[i] = min(best[i], r["seconds"])
            times = [max(t - base, 0.0) for t in best]
            if times[1] / max(times[0], CLI_MIN_TIME) <= LIMIT:
                break
    return _judge_probe(probe, {"times": times}, CLI_MIN_TIME)


# ---------------------------------------------------------------- running a whole suite


def run_suite(suite: str, zygote: Optional[Zygote], cli: Optional[Path],
              progress: Optional[Callable[[str, Dict[str, Any]], None]] = None
              ) -> Dict[str, Dict[str, Dict[str, Any]]]:
    """{'cases': {name: result}, 'probes': {name: result}} of one interface."""
    s = load_suite(suite)
    out: Dict[str, Dict[str, Dict[str, Any]]] = {"cases": {}, "probes": {}}
    for kind in ("cases", "probes"):
        for name, item in s[kind].items():
            if suite == "cli":
                r = run_cli_case(cli, item) if kind == "cases" else run_cli_probe(cli, item)
            else:
                r = zygote.run(suite, name, "case" if kind == "cases" else "probe")
            out[kind][name] = r
            if progress is not None:
                progress(name, r)
    return out


def counts(results: Dict[str, Dict[str, Dict[str, Any]]]) -> Dict[str, int]:
    c = {k: 0 for k in OUTCOMES}
    c["tried"] = len(results["cases"])
    for r in results["cases"].values():
        c[r["outcome"]] += 1
    c["probes"] = len(results["probes"])
    # a probe that crashed or hung (killed at n or 4n) counts here too
    c["superlinear"] = sum(r["outcome"] != "linear" for r in results["probes"].values())
    return c


COLUMNS = ["tried", "clear", "valid", "unclear", "silent", "wrong", "crash", "hang", "memory",
           "probes", "superlinear"]


def table(rows: Iterable[Tuple[str, Dict[str, int]]]) -> str:
    rows = list(rows)
    width = max([len("interface")] + [len(n) for n, _ in rows])
    lines = [f"{'interface':<{width}}  " + " ".join(f"{c:>11}" for c in COLUMNS)]
    total = {c: 0 for c in COLUMNS}
    for name, c in rows:
        lines.append(f"{name:<{width}}  " + " ".join(f"{c[k]:>11}" for k in COLUMNS))
        for k in COLUMNS:
            total[k] += c[k]
    lines.append(f"{'total':<{width}}  " + " ".join(f"{total[k]:>11}" for k in COLUMNS))
    return "\n".join(lines)


if __name__ == "__main__":
    if sys.argv[1:] == ["--zygote"]:
        sys.exit(zygote_main())
    print("usage: python tests/hostile/harness.py --zygote (the fork server; see report.py)",
          file=sys.stderr)
    sys.exit(2)
