"""treeattn: prefix-aware (tree) attention for LLM decoding.

A :class:`PrefixTree` says which KV every decode query sees (queries that share a prompt
prefix share tree nodes); :func:`plan` cuts the tree into work items on the host once per
decode step; :func:`decode` runs the plan for every layer (CUDA kernels for CUDA tensors, a
float32 CPU executor for numpy arrays); :func:`reference` is the float64 oracle.

Plan once, run per layer (runs as is on the CPU; use torch CUDA tensors for the GPU path)::

    import numpy as np
    import treeattn

    page_size, heads, kv_heads, dim = 16, 8, 2, 64
    # two requests sharing their first two pages (32 tokens), then diverging
    tree = treeattn.PrefixTree.from_block_tables(
        [[0, 1, 2], [0, 1, 3]], [40, 37], page_size=page_size)
    plan = treeattn.plan(tree, num_qo_heads=heads, num_kv_heads=kv_heads, head_dim=dim)
    print(plan.planner, plan.num_items, plan.stats()["est_time_us"])

    rng = np.random.default_rng(0)
    for layer in range(2):  # one plan, every layer
        q = rng.standard_normal((tree.num_queries, heads, dim), dtype=np.float32)
        k = rng.standard_normal((4, page_size, kv_heads, dim), dtype=np.float32)
        v = rng.standard_normal((4, page_size, kv_heads, dim), dtype=np.float32)
        out, lse = treeattn.decode(q, k, v, plan, return_lse=True)
        ref, ref_lse = treeattn.reference(tree, q, k, v)
        assert np.allclose(out, ref, atol=1e-4)

With torch on a GPU, pass CUDA tensors (float16/bfloat16); the call runs on
``torch.cuda.current_stream()``. Call ``plan.to_device(q.device)`` before capturing
``treeattn.decode`` in a CUDA graph, and ``plan.update(new_plan)`` (or ``treeattn.plan(...,
reuse=plan)``) to refresh the metadata of a captured plan. ``treeattn.torch_ops`` registers
``torch.ops.treeattn.decode`` for ``torch.compile``.
"""

from ._treeattn import DeviceInfo, PrefixTree, check_int, planners, workload_sets, workloads
from ._treeattn import with_cuda as _with_cuda
from ._api import Plan, decode, plan, reference

__version__ = "0.1.0"

#: True when the extension was compiled with the CUDA kernels (nvcc found at build time).
built_with_cuda: bool = bool(_with_cuda)

__all__ = [
    "DeviceInfo",
    "Plan",
    "PrefixTree",
    "built_with_cuda",
    "check_int",
    "decode",
    "plan",
    "planners",
    "reference",
    "workload_sets",
    "workloads",
]
