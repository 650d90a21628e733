"""treeattn.engine: a compact Llama-family decode engine on torch, to measure tree attention end
to end (needs torch; safetensors to load checkpoints, matplotlib for the bench PNG).

  model.py      ModelConfig (Llama-3, Qwen2, tiny), Model (random init, HF safetensors load/save)
  kv.py         KVCache: paged KV, refcounts, prefix sharing (block hash), fork + copy-on-write
  backends.py   attention backends: treeattn, treeattn-query, flashinfer, sdpa, none
  engine.py     Engine: prefill (SDPA, prefix reuse), decode steps, CUDA graphs, sampling;
                Scheduler: continuous batching of Requests
  workloads.py  branch controllers W0-W6
  check.py      teacher-forced KL against the fp32 sdpa path
  cli.py        ``treeattn-engine bench``

Quick start::

    from treeattn.engine import Engine, Model, ModelConfig, workloads
    model = Model.random(ModelConfig.preset("tiny"))
    eng = Engine(model, backend="treeattn")
    res = workloads.run(eng, "W1", workloads.PRESETS["cpu"]["W1"])
"""

from .backends import BACKENDS, StepMeta, make_backend
from .engine import Engine, Recorder, Request, Scheduler
from .kv import KVCache
from .model import Model, ModelConfig
from . import workloads

__all__ = ["BACKENDS", "Engine", "KVCache", "Model", "ModelConfig", "Recorder", "Request",
           "Scheduler", "StepMeta", "make_backend", "workloads"]
