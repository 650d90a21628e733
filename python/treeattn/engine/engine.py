"""The engine: prefill (torch SDPA, prefix reuse), batched decode steps over the paged cache with a
pluggable attention backend, CUDA graphs for decode (the same for every backend), sampling.

Its unit of work is a *row*: (sequence id, token). A decode step appends every row's token to its
sequence (one slot each, copy-on-write resolved by the KV manager), builds the block tables and
sequence lengths of the rows, lets the backend plan, and runs the model once over all rows.
Several rows may belong to one sequence (speculative decoding: a token tree verified per step);
each then attends its own prefix. Workload controllers (``workloads.py``) decide which rows run,
fork and finish sequences; this module knows nothing about them.

Every public entry point checks its arguments first (ValueError / TypeError naming the argument:
unknown sequence ids, token ids outside the vocabulary, sizes out of range, ...), and a call that
would run out of KV pages raises MemoryError before it changes anything."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Callable, Dict, List, Optional, Sequence, Tuple

import numpy as np
import torch
import torch.nn.functional as F

from ._checks import (MAX_PAGE_SIZE, MAX_PAGES, bool_arg, callable_arg, int_arg, is_fp8,
                      kv_dtype_arg, real_arg, tokens_arg)
from .backends import StepMeta, available, kv_support, make_backend
from .kv import KVCache
from .model import Model, ModelConfig


def _bucket(n: int) -> int:
    """Padded row count of a CUDA graph: 8, 16, 24, 32, 48, 64, 96, 128, ..."""
    if n <= 8:
        return 8
    b = 1 << (n - 1).bit_length()
    half = b // 2 + b // 4
    return half if n <= half else b


@dataclass
class StepTimes:
    host_meta_ms: float = 0.0  # slots, block tables
    plan_ms: float = 0.0  # backend.prepare (tree + plan + upload for treeattn)
    prefetch_ms: float = 0.0  # backend.prefetch: next step's plan, while the GPU runs
    step_ms: float = 0.0  # whole decode step, synchronised
    attn_ms: float = float("nan")  # all layers' attention (CUDA events), when sampled
    rows: int = 0
    captured: bool = False


class Engine:
    """Model + paged KV cache + one attention backend.

    backend: 'treeattn', 'treeattn-query', 'flashinfer', 'sdpa' or 'none'. cuda_graphs: default
    on for CUDA devices. num_pages: KV pages (default: max_tokens plus a partial page for each of
    max_seqs live sequences). seed: sampling. kv_dtype: the KV cache's element type (default:
    the model's dtype; 'fp8_e4m3' / 'fp8_e5m2': one byte per element, quantized on write with
    the per-layer scales k_scale / v_scale: a number > 0 or one per layer, default 1.0 as vLLM
    without calibration; see kv.py)."""

    def __init__(self, model: Model, backend: str = "sdpa", page_size: int = 16,
                 num_pages: Optional[int] = None, max_tokens: int = 1 << 16,
                 max_seqs: int = 64,
                 cuda_graphs: Optional[bool] = None, seed: int = 0,
                 time_attention_every: int = 0, dry_run: bool = False, kv_dtype=None,
                 k_scale=1.0, v_scale=1.0):
        """dry_run: host side only (KV manager, trees, plans; no K/V storage, no model, random
        logits): measures the host cost of any workload at full size on a CPU. `model` may then
        be a ModelConfig."""
        dry_run = bool_arg("dry_run", dry_run)
        if isinstance(model, ModelConfig):
            if not dry_run:
                raise ValueError("model: a ModelConfig needs dry_run=True")
            model = _ConfigOnly(model)
        elif not isinstance(model, Model):
            raise TypeError(f"model: expected a Model (or a ModelConfig with dry_run=True), got "
                            f"{type(model).__name__}")
        c = model.config
        if not isinstance(backend, str):
            raise TypeError(f"backend: expected a backend name, got {type(backend).__name__}")
        page_size = int_arg("page_size", page_size, 1, MAX_PAGE_SIZE)
        max_tokens = int_arg("max_tokens", max_tokens, 1, MAX_PAGES * MAX_PAGE_SIZE)
        max_seqs = int_arg("max_seqs", max_seqs, 0, MAX_PAGES)
        if num_pages is None:
            num_pages = -(-max_tokens // page_size) + max_seqs + 2  # + a partial page each
            if num_pages > MAX_PAGES:
                raise ValueError(f"max_tokens: {max_tokens} tokens and {max_seqs} sequences "
                                 f"need {num_pages} pages of {page_size} tokens, over the "
                                 f"limit of {MAX_PAGES}")
        else:
            num_pages = int_arg("num_pages", num_pages, 2, MAX_PAGES)
        cuda_graphs = bool_arg("cuda_graphs", cuda_graphs, allow_none=True)
        seed = int_arg("seed", seed)
        time_attention_every = int_arg("time_attention_every", time_attention_every, 0, 1 << 31)
        self.model, self.config = model, c
        self.device = model.device
        self.dtype = model.dtype
        self.kv_dtype = kv_dtype_arg("kv_dtype", kv_dtype, self.dtype)
        if not is_fp8(self.kv_dtype) and self.kv_dtype != self.dtype:
            raise ValueError(f"kv_dtype: {kv_dtype!r} differs from the model's dtype "
                             f"{self.dtype}; the KV cache holds the model's dtype or fp8 "
                             f"('fp8_e4m3', 'fp8_e5m2')")
        self.page_size = page_size
        self.dry_run = dry_run
        self.backend_name = backend
        # (on a CPU, constructing the backend says what is missing; the tests run the flashinfer
        # backend's bookkeeping there with a stand-in module)
        why = available(backend, self.device) if self.device.type == "cuda" else None
        if why:
            raise ValueError(f"backend: {backend!r} cannot run here: {why}")
        why = kv_support(backend, self.kv_dtype, None if dry_run else self.dtype)
        if why:
            raise ValueError(f"kv_dtype: {why}")
        backend_obj = make_backend(backend, c.num_heads, c.num_kv_heads, c.head_dim, self.dtype,
                                   self.device, kv_dtype=self.kv_dtype)
        self.cache = KVCache(c.num_layers, num_pages, page_size, c.num_kv_heads, c.head_dim,
                             dtype=self.kv_dtype, device=self.device, allocate=not dry_run,
                             k_scale=k_scale, v_scale=v_scale)
        backend_obj.use_scales(self.cache)
        self.backend = backend_obj
        # on a CPU device, cuda_graphs=True emulates them (padded rows, static buffers, keyed
        # backend state, eager run): the tests exercise that bookkeeping without a GPU
        self.cuda_graphs = (self.device.type == "cuda") if cuda_graphs is None else cuda_graphs
        self.graphs: Dict[int, dict] = {}
        self.pool = None
        self.gen = torch.Generator(device=self.device).manual_seed(seed)
        self.time_attention_every = time_attention_every
        self.steps: List[StepTimes] = []
        self.on_logits: Optional[Callable[[str, torch.Tensor], None]] = None
        self.recorder: Optional[Recorder] = None

    # ---- sequences

    def prefill(self, prompt: Sequence[int]) -> Tuple[int, torch.Tensor]:
        """New sequence for `prompt` (full pages of a cached prefix are reused, the rest computed
        with torch SDPA). Returns (seq id, float32 logits of the last prompt token). `prompt`:
        token ids in [0, vocab_size), at least one; MemoryError (nothing changed) when the free
        KV pages cannot hold it."""
        kv, c = self.cache, self.config
        prompt = tokens_arg("prompt", prompt, c.vocab_size)
        kv.check_prompt_fits(prompt)
        sid, cached = kv.new_seq(prompt)
        slots = [kv.append(sid, t) for t in prompt[cached:]]
        kv.apply_copies(kv.take_copies())
        if self.dry_run:
            return sid, torch.randn(c.vocab_size, generator=self.gen)
        L, n = len(prompt), len(prompt) - cached
        dev, P = self.device, self.page_size
        slots_t = torch.tensor(slots, device=dev)
        pages = torch.tensor(kv.block_table(sid), device=dev)
        pos = torch.arange(L, device=dev)
        ctx = pages[pos // P] * P + pos % P  # [L] flat slots of the whole context
        mask = None
        if cached:
            mask = pos[None, :] <= (pos[cached:, None])  # [n, L]
        g = c.num_heads // c.num_kv_heads

        def attend(i, q, k, v):
            self.cache.write(i, slots_t, k, v)  # (fp8: quantized; attention reads them back)
            kf, vf = self.cache.gather(i, ctx, q.dtype)  # [L, kv_heads, D]
            kk = kf.transpose(0, 1).repeat_interleave(g, 0)[None]  # [1, H, L, D]
            vv = vf.transpose(0, 1).repeat_interleave(g, 0)[None]
            o = F.scaled_dot_product_attention(q.transpose(0, 1)[None], kk, vv, attn_mask=mask,
                                               is_causal=mask is None)
            return o[0].transpose(0, 1)

        with torch.inference_mode():
            logits = self.model._forward(torch.tensor(prompt[cached:], device=dev),
                                         pos[cached:], attend,
                                         logits_rows=torch.tensor([n - 1], device=dev))[0]
        if self.on_logits is not None:
            self.on_logits("prefill", logits[None])
        return sid, logits

    def fork(self, sid: int, n: int = 1) -> List[int]:
        """n >= 1 new sequences sharing sid's pages; returns their ids."""
        return self.cache.fork(sid, n)

    def free(self, sid: int) -> None:
        self.cache.free_seq(sid)

    def truncate(self, sid: int, length: int) -> None:
        """Keeps sid's first `length` tokens, 0 <= length <= its length."""
        self.cache.truncate(sid, length)

    def length(self, sid: int) -> int:
        return self.cache.length(sid)

    def _rows(self, rows) -> List[Tuple[int, int]]:
        """rows checked: a non-empty sequence of (sequence id, token id) pairs, token ids in the
        vocabulary (the sequence ids are checked by the KV manager)."""
        if isinstance(rows, (str, bytes)) or not isinstance(rows, (list, tuple)):
            raise TypeError(f"rows: expected a list of (sequence id, token) pairs, got "
                            f"{type(rows).__name__}")
        if not rows:
            raise ValueError("rows: empty (a decode step needs at least one row)")
        V = self.config.vocab_size
        for r in rows:  # the common case: (int, int) pairs in range, taken as they are
            if type(r) is not tuple or len(r) != 2 or type(r[1]) is not int or not 0 <= r[1] < V:
                break
        else:
            return rows
        out = []
        for i, r in enumerate(rows):
            if not isinstance(r, (tuple, list)) or len(r) != 2:
                raise TypeError(f"rows[{i}]: expected a (sequence id, token) pair, got {r!r}")
            sid, tok = r
            out.append((sid, int_arg(f"rows[{i}] token", tok, 0, V - 1)))
        return out

    # ---- decode

    def decode(self, rows: Sequence[Tuple[int, int]]) -> torch.Tensor:
        """One decode step: rows (seq id, token) -> float32 logits [len(rows), vocab]. Under
        CUDA graphs the logits live in the graph's output buffer: use them before the next
        step. Sequence ids must be live, tokens in the vocabulary; MemoryError (nothing
        changed) when the step needs more new KV pages than are free."""
        t0 = time.perf_counter()
        kv, dev, P = self.cache, self.device, self.page_size
        rows = self._rows(rows)
        row_seqs = [sid for sid, _ in rows]
        tokens = [t for _, t in rows]
        kv.pages_for_step(row_seqs)
        positions, slots, bts = kv.append_rows(row_seqs, tokens)
        new_pages = [s // P if n % P == 0 else -1 for n, s in zip(positions, slots)]
        changed = kv.truncated
        copies = kv.take_copies()
        lens = [p + 1 for p in positions]
        T = len(rows)
        key = _bucket(T) if self.cuda_graphs else None
        if key is not None and key > T:  # padding rows: scratch page 0, slot 0
            pad = key - T
            tokens += [0] * pad
            positions += [0] * pad
            slots += [0] * pad
            bts += [[0]] * pad
            lens += [1] * pad
            row_seqs += [-1] * pad
            new_pages += [-1] * pad
        meta = StepMeta(bts, lens, P, kv.num_pages, row_seqs, new_pages,
                        cow=bool(copies) or changed)
        t1 = time.perf_counter()
        ok = self.backend.prepare(meta, key)
        t2 = time.perf_counter()
        st = StepTimes(host_meta_ms=(t1 - t0) * 1e3, plan_ms=(t2 - t1) * 1e3, rows=T)
        with torch.inference_mode():
            if self.dry_run:
                logits = torch.randn(T, self.config.vocab_size, generator=self.gen)
            elif key is None:
                logits = self._forward(torch.tensor(tokens, device=dev),
                                       torch.tensor(positions, device=dev),
                                       torch.tensor(slots, device=dev), copies)
            else:
                logits = self._graph_step(key, ok, tokens, positions, slots, copies, st)[:T]
            t3 = time.perf_counter()
            self.backend.prefetch(meta)  # overlaps the GPU's work on this step
            st.prefetch_ms = (time.perf_counter() - t3) * 1e3
            if dev.type == "cuda":
                torch.cuda.synchronize(dev)
            st.step_ms = (time.perf_counter() - t0) * 1e3
            if self.time_attention_every and len(self.steps) % self.time_attention_every == 0:
                st.attn_ms = self.time_attention(T)  # outside the step's time
        self.steps.append(st)
        if self.on_logits is not None:
            self.on_logits("decode", logits)
        return logits

    def _attend_fn(self, slots_t, csrc, cdst):
        def attend(i, q, k, v):
            self.cache.write(i, slots_t, k, v)
            if csrc is not None:  # deferred copy-on-write, after this step's writes
                self.cache.copy_slots(i, csrc, cdst)
            return self.backend.attend(i, q, self.cache.k[i], self.cache.v[i])

        return attend

    def _forward(self, tokens, positions, slots_t, copies):
        csrc = cdst = None
        if copies:
            csrc = torch.tensor([a for a, _ in copies], device=self.device)
            cdst = torch.tensor([b for _, b in copies], device=self.device)
        return self.model._forward(tokens, positions, self._attend_fn(slots_t, csrc, cdst))

    def _graph_step(self, key, ok, tokens, positions, slots, copies, st):
        g = self.graphs.get(key)
        ncopy = max(len(copies), 1)
        if g is not None and (not ok or g["csrc"].shape[0] < ncopy):
            g = None
        if g is None:
            dev = self.device
            cap = max(key * self.page_size, 1 << (ncopy - 1).bit_length())
            g = {"tokens": torch.zeros(key, dtype=torch.long, device=dev),
                 "positions": torch.zeros(key, dtype=torch.long, device=dev),
                 "slots": torch.zeros(key, dtype=torch.long, device=dev),
                 "csrc": torch.zeros(cap, dtype=torch.long, device=dev),
                 "cdst": torch.zeros(cap, dtype=torch.long, device=dev)}
        self._fill(g, tokens, positions, slots, copies)
        if self.device.type != "cuda":  # emulated graphs (CPU tests): same buffers, eager run
            self.graphs[key] = g
            g["logits"] = self.model._forward(g["tokens"], g["positions"], self._attend_fn(
                g["slots"], g["csrc"], g["cdst"]))
            return g["logits"]
        if "graph" not in g:
            fn = self._attend_fn(g["slots"], g["csrc"], g["cdst"])

            def run():
                return self.model._forward(g["tokens"], g["positions"], fn)

            s = torch.cuda.Stream(self.device)
            s.wait_stream(torch.cuda.current_stream(self.device))
            with torch.cuda.stream(s):
                run()  # warm-up (writes are idempotent)
            torch.cuda.current_stream(self.device).wait_stream(s)
            if self.pool is None:
                self.pool = torch.cuda.graph_pool_handle()
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph, pool=self.pool):
                g["logits"] = run()
            g["graph"] = graph
            self.graphs[key] = g
            st.captured = True
        g["graph"].replay()
        return g["logits"]

    @staticmethod
    def _fill(g, tokens, positions, slots, copies):
        g["tokens"].copy_(torch.tensor(tokens))
        g["positions"].copy_(torch.tensor(positions))
        g["slots"].copy_(torch.tensor(slots))
        cap = g["csrc"].shape[0]
        src = [a for a, _ in copies] + [0] * (cap - len(copies))
        dst = [b for _, b in copies] + [0] * (cap - len(copies))
        g["csrc"].copy_(torch.tensor(src))
        g["cdst"].copy_(torch.tensor(dst))

    def time_attention(self, T: int) -> float:
        """GPU time (CUDA events) of the backend's attention over every layer for the step just
        planned, on random queries (the cost does not depend on q's values). NaN on CPU."""
        T = int_arg("T", T, 1, 1 << 24)
        if self.device.type != "cuda":
            return float("nan")
        c = self.config
        rows = _bucket(T) if self.cuda_graphs else T
        q = torch.randn(rows, c.num_heads, c.head_dim, device=self.device, dtype=self.dtype)
        evs = []
        for i in range(c.num_layers):
            a = torch.cuda.Event(enable_timing=True)
            b = torch.cuda.Event(enable_timing=True)
            a.record()
            self.backend.attend(i, q, self.cache.k[i], self.cache.v[i])
            b.record()
            evs.append((a, b))
        torch.cuda.synchronize(self.device)
        return sum(a.elapsed_time(b) for a, b in evs)

    # ---- sampling and teacher forcing

    def sample(self, logits: torch.Tensor, temperature=0.0) -> List[int]:
        """Greedy (temperature 0) or temperature sampling with the engine's seeded generator;
        logits [rows, vocab]; temperature >= 0: one value or one per row."""
        if not torch.is_tensor(logits) or not logits.is_floating_point():
            raise TypeError(f"logits: expected a floating torch tensor, got "
                            f"{getattr(logits, 'dtype', type(logits).__name__)}")
        if logits.dim() != 2 or logits.shape[0] < 1 or logits.shape[1] < 1:
            raise ValueError(f"logits: expected [rows, vocab] with rows, vocab >= 1, got "
                             f"{tuple(logits.shape)}")
        temps = None
        if isinstance(temperature, (int, float, np.integer, np.floating)):
            scalar = real_arg("temperature", temperature)
        else:
            try:
                temps = np.asarray(temperature.cpu() if torch.is_tensor(temperature)
                                   else temperature, dtype=np.float64)
            except (TypeError, ValueError):
                raise TypeError(f"temperature: expected a number or one per row, got "
                                f"{type(temperature).__name__}") from None
            if temps.shape != (logits.shape[0],):
                raise ValueError(f"temperature: expected one value per row "
                                 f"({logits.shape[0]}), got shape {temps.shape}")
            bad = np.flatnonzero(~np.isfinite(temps) | (temps < 0))
            if bad.size:
                raise ValueError(f"temperature[{bad[0]}]: expected a finite number >= 0, got "
                                 f"{temps[bad[0]]}")
        if self.recorder is not None and self.recorder.replaying:
            return self.recorder.next()
        if temps is None and scalar == 0:
            out = logits.argmax(-1).tolist()
        else:
            t = torch.as_tensor(scalar if temps is None else temps, dtype=torch.float32,
                                device=logits.device)
            t = t.expand(logits.shape[0]) if t.dim() == 0 else t
            probs = torch.softmax(logits / t.clamp_min(1e-6)[:, None], dim=-1)
            drawn = torch.multinomial(probs, 1, generator=self.gen)[:, 0]
            out = torch.where(t > 0, drawn, logits.argmax(-1)).tolist()
        if self.recorder is not None:
            self.recorder.add(out)
        return out

    def decide(self, fn: Callable[[], object]):
        """Any other decision taken from logits (beam selection, pruning): recorded in a
        reference run and replayed in a teacher-forced one, so both follow the same streams."""
        callable_arg("fn", fn)
        if self.recorder is not None and self.recorder.replaying:
            return self.recorder.next()
        out = fn()
        if self.recorder is not None:
            self.recorder.add(out)
        return out


class _ConfigOnly:
    """Stands in for a Model in dry runs (host-side measurements)."""

    def __init__(self, config: ModelConfig):
        self.config = config
        self.device = torch.device("cpu")
        self.dtype = torch.bfloat16


@dataclass
class Request:
    prompt: List[int]
    max_new: int
    temperature: float = 0.0
    arrival: int = 0  # decode step at which it may join
    stop: Optional[int] = None  # stop token
    output: List[int] = field(default_factory=list)
    sid: int = -1
    done: bool = False


class Scheduler:
    """Continuous batching over an Engine: a request joins the running batch (after its prefill,
    which reuses cached prefix pages) once its arrival step has come, there is room in the batch
    and the KV cache can hold it; it leaves after max_new tokens or its stop token, freeing its
    pages. One decode step runs every running request."""

    def __init__(self, eng: Engine, max_batch: int = 256):
        if not isinstance(eng, Engine):
            raise TypeError(f"eng: expected an Engine, got {type(eng).__name__}")
        self.eng, self.max_batch = eng, int_arg("max_batch", max_batch, 1, 1 << 24)
        self.waiting: List[Request] = []
        self.running: List[Request] = []
        self.finished: List[Request] = []
        self.clock = 0  # decode steps so far (arrival times are in these units)

    def submit(self, req: Request) -> Request:
        """Queues `req` (checked first: prompt tokens in the vocabulary, max_new >= 1,
        temperature >= 0, arrival >= 0, stop a token id or None, and prompt + max_new within
        what the KV cache can ever hold)."""
        if not isinstance(req, Request):
            raise TypeError(f"req: expected a Request, got {type(req).__name__}")
        V = self.eng.config.vocab_size
        prompt = tokens_arg("req.prompt", req.prompt, V)
        max_new = int_arg("req.max_new", req.max_new, 1, 1 << 31)
        temperature = real_arg("req.temperature", req.temperature)
        arrival = int_arg("req.arrival", req.arrival, 0, (1 << 63) - 1)
        stop = None if req.stop is None else int_arg("req.stop", req.stop, 0, V - 1)
        if req.sid != -1 or req.output or req.done or any(
                r is req for r in self.waiting + self.running + self.finished):
            raise ValueError("req: already submitted (make a new Request)")
        P = self.eng.page_size
        need = -(-(len(prompt) + max_new) // P) + 1
        if need > self.eng.cache.num_pages - 1:
            raise ValueError(f"req: {len(prompt)} prompt + {max_new} new tokens need {need} KV "
                             f"pages of {P} tokens; the cache has {self.eng.cache.num_pages - 1}")
        req.prompt, req.max_new, req.temperature, req.arrival, req.stop = (
            prompt, max_new, temperature, arrival, stop)
        self.waiting.append(req)
        self.waiting.sort(key=lambda r: r.arrival)
        return req

    def _fits(self, req: Request) -> bool:
        P = self.eng.page_size
        need = -(-(len(req.prompt) + req.max_new) // P) + 1
        return self.eng.cache.num_free() >= need + len(self.running)

    def _finish(self, req: Request, token: int) -> None:
        req.output.append(token)
        if len(req.output) >= req.max_new or token == req.stop:
            req.done = True
            self.eng.free(req.sid)
            self.running.remove(req)
            self.finished.append(req)

    def admit(self) -> int:
        n = 0
        if not self.running and self.waiting:
            self.clock = max(self.clock, self.waiting[0].arrival)  # idle: jump to next arrival
        while (self.waiting and self.waiting[0].arrival <= self.clock
               and len(self.running) < self.max_batch and self._fits(self.waiting[0])):
            req = self.waiting.pop(0)
            req.sid, logits = self.eng.prefill(req.prompt)
            self.running.append(req)
            self._finish(req, self.eng.sample(logits[None], req.temperature)[0])
            n += 1
        if not self.running and self.waiting and self.waiting[0].arrival <= self.clock:
            raise MemoryError(f"KV cache: {self.eng.cache.num_free()} free pages cannot hold a "
                              f"request of {len(self.waiting[0].prompt)} + "
                              f"{self.waiting[0].max_new} tokens")
        return n

    def step(self) -> int:
        """Admits what has arrived, decodes one token for every running request; returns the
        number of rows decoded (0 when nothing is left)."""
        self.admit()
        if not self.running:
            return 0
        batch = list(self.running)
        logits = self.eng.decode([(r.sid, r.output[-1]) for r in batch])
        temps = [r.temperature for r in batch]
        toks = self.eng.sample(logits, temps if len(set(temps)) > 1 else temps[0])
        for r, t in zip(batch, toks):
            self._finish(r, t)
        self.clock += 1
        return len(batch)

    def run(self) -> List[Request]:
        while self.waiting or self.running:
            self.step()
        return self.finished


@dataclass
class Recorder:
    """Decisions of a run, to replay them (teacher forcing) in another engine."""
    items: list = field(default_factory=list)
    replaying: bool = False
    pos: int = 0

    def add(self, x):
        self.items.append(x)

    def next(self):
        if self.pos >= len(self.items):
            raise RuntimeError(f"recorder: the replay asked for decision {self.pos + 1}, the "
                               f"reference run recorded {len(self.items)} (the runs diverged)")
        x = self.items[self.pos]
        self.pos += 1
        return x

    def replay(self) -> "Recorder":
        return Recorder(self.items, True, 0)
