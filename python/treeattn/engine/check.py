"""Correctness of the engine: teacher-forced logits of a backend against an fp32 ``sdpa`` run on
the same token streams (recorded decisions replayed), and KL per step; and the logits drift of a
KV cache dtype (fp8) against another (the model's dtype) on one backend (:func:`kv_drift`)."""

from __future__ import annotations

import math
from typing import Dict, List, Optional

import torch

from . import workloads
from ._checks import int_arg, is_fp8, kv_dtype_arg
from .engine import Engine, Recorder
from .model import Model


def kl_rows(ref: torch.Tensor, got: torch.Tensor) -> torch.Tensor:
    """KL(softmax(ref) || softmax(got)) per row, float64."""
    for name, t in (("ref", ref), ("got", got)):
        if not torch.is_tensor(t) or not t.is_floating_point():
            raise TypeError(f"{name}: expected a floating torch tensor")
    if ref.shape != got.shape or ref.dim() != 2:
        raise ValueError(f"got: shape {tuple(got.shape)} differs from ref's "
                         f"{tuple(ref.shape)} (expected [rows, vocab] both)")
    lp = torch.log_softmax(ref.double(), -1)
    lq = torch.log_softmax(got.double(), -1)
    return (lp.exp() * (lp - lq)).sum(-1)


def teacher_forced_kl(model: Model, workload: str, params: dict, backend: str,
                      ref_model: Optional[Model] = None, page_size: int = 16, seed: int = 0,
                      every: int = 1, cuda_graphs: Optional[bool] = None,
                      max_steps: int = 0) -> List[float]:
    """Runs `workload` with the fp32 sdpa reference (ref_model, default model in fp32), records
    its decisions and every `every`-th step's logits, replays it with `backend` on `model`, and
    returns the max-over-rows KL of each checked step (prefill logits included)."""
    every = int_arg("every", every, 1, 1 << 31)
    max_steps = int_arg("max_steps", max_steps, 0, 1 << 31)
    if not isinstance(model, Model):
        raise TypeError(f"model: expected a Model, got {type(model).__name__}")
    if ref_model is not None and not isinstance(ref_model, Model):
        raise TypeError(f"ref_model: expected a Model, got {type(ref_model).__name__}")
    ref_model = ref_model or model.to(torch.float32)
    mt = workloads.max_tokens(workload, params)
    ms = workloads.max_seqs(workload, params)
    ref = Engine(ref_model, "sdpa", page_size=page_size, max_tokens=mt, max_seqs=ms,
                 cuda_graphs=False, seed=seed)
    ref.recorder = Recorder()
    logged: list = []
    count = [0]

    def keep(kind, lg):
        if count[0] % every == 0:
            logged.append(lg.detach().float().cpu())
        else:
            logged.append(None)
        count[0] += 1

    ref.on_logits = keep
    workloads.run(ref, workload, params, seed=seed, max_steps=max_steps)
    ref.cache.check()
    del ref.cache

    eng = Engine(model, backend, page_size=page_size, max_tokens=mt, max_seqs=ms,
                 cuda_graphs=cuda_graphs, seed=seed)
    eng.recorder = ref.recorder.replay()
    kls: List[float] = []
    pos = [0]

    def compare(kind, lg):
        r = logged[pos[0]]
        pos[0] += 1
        if r is not None:
            kls.append(float(kl_rows(r, lg.detach().float().cpu()).max()))

    eng.on_logits = compare
    workloads.run(eng, workload, params, seed=seed, max_steps=max_steps)
    assert pos[0] == len(logged), f"replay made {pos[0]} logit calls, reference {len(logged)}"
    eng.cache.check()
    return kls


def kv_drift(model: Model, workload: str, params: dict, backend: str, kv_dtype,
             ref_kv_dtype=None, page_size: int = 16, seed: int = 0,
             cuda_graphs: Optional[bool] = None, max_steps: int = 0, k_scale=1.0,
             v_scale=1.0, temperature: float = 0.8,
             ref_backend: Optional[str] = None) -> Dict[str, float]:
    """Logits drift of a `kv_dtype` KV cache (e.g. 'fp8_e4m3') against a `ref_kv_dtype` one
    (default: the model's dtype) on the same backend (or `ref_backend`: e.g. the sdpa reference
    on the same fp8 cache) and model, teacher-forced: the reference
    run records its decisions (sampled tokens) and logits, the kv_dtype run replays the
    decisions, so both see the same token streams and every logits row pairs with one.

    The reference logits stay on the model's device (float32, one [rows, vocab] tensor per
    prefill and decode step): bound the run with max_steps (decode steps; 0 = the whole
    workload). Returns a dict: calls (logits calls compared), rows, max_abs_diff and
    mean_abs_diff (over every logit), ref_mean_abs (mean |logit| of the reference, for scale),
    greedy_agreement (fraction of rows whose argmax token is the same), kl_max and kl_mean
    (KL(ref || got) per row)."""
    max_steps = int_arg("max_steps", max_steps, 0, 1 << 31)
    if not isinstance(model, Model):
        raise TypeError(f"model: expected a Model, got {type(model).__name__}")
    mt = workloads.max_tokens(workload, params)
    ms = workloads.max_seqs(workload, params)

    def engine(b, kv):
        fp8 = is_fp8(kv_dtype_arg("kv_dtype", kv, model.dtype))  # (scales are fp8's)
        return Engine(model, b, page_size=page_size, max_tokens=mt, max_seqs=ms,
                      cuda_graphs=cuda_graphs, seed=seed, kv_dtype=kv,
                      k_scale=k_scale if fp8 else 1.0, v_scale=v_scale if fp8 else 1.0)

    ref = engine(ref_backend or backend, ref_kv_dtype)
    ref.recorder = Recorder()
    logged: List[torch.Tensor] = []
    # (graph runs hand out their output buffer: keep a copy)
    ref.on_logits = lambda kind, lg: logged.append(lg.detach().float().clone())
    workloads.run(ref, workload, params, seed=seed, max_steps=max_steps,
                  temperature=temperature)
    ref.cache.check()
    ref_rec = ref.recorder
    del ref
    eng = engine(backend, kv_dtype)
    eng.recorder = ref_rec.replay()
    acc = {"calls": 0, "rows": 0, "elems": 0, "max_abs_diff": 0.0, "sum_abs": 0.0,
           "ref_sum_abs": 0.0, "agree": 0, "kl_max": 0.0, "kl_sum": 0.0}

    def compare(kind, lg):
        r = logged[acc["calls"]]
        g = lg.detach().float()
        d = (g - r).abs()
        acc["calls"] += 1
        acc["rows"] += r.shape[0]
        acc["elems"] += r.numel()
        acc["max_abs_diff"] = max(acc["max_abs_diff"], float(d.max()))
        acc["sum_abs"] += float(d.sum(dtype=torch.float64))
        acc["ref_sum_abs"] += float(r.abs().sum(dtype=torch.float64))
        acc["agree"] += int((g.argmax(-1) == r.argmax(-1)).sum())
        kl = kl_rows(r, g)
        acc["kl_max"] = max(acc["kl_max"], float(kl.max()))
        acc["kl_sum"] += float(kl.sum())

    eng.on_logits = compare
    workloads.run(eng, workload, params, seed=seed, max_steps=max_steps, temperature=temperature)
    if acc["calls"] != len(logged):
        raise RuntimeError(f"replay made {acc['calls']} logits calls, the reference "
                           f"{len(logged)} (the runs diverged)")
    eng.cache.check()
    n, rows = max(acc["elems"], 1), max(acc["rows"], 1)
    return {"calls": acc["calls"], "rows": acc["rows"], "max_abs_diff": acc["max_abs_diff"],
            "mean_abs_diff": acc["sum_abs"] / n, "ref_mean_abs": acc["ref_sum_abs"] / n,
            "greedy_agreement": acc["agree"] / rows, "kl_max": acc["kl_max"],
            "kl_mean": acc["kl_sum"] / rows if acc["rows"] else math.nan}
