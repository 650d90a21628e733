"""Correctness of the engine: teacher-forced logits of a backend against an fp32 ``sdpa`` run on
the same token streams (recorded decisions replayed), and KL per step."""

from __future__ import annotations

from typing import List, Optional

import torch

from . import workloads
from ._checks import int_arg
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
