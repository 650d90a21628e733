"""treeattn.serving on a GPU (marker gpu; skipped without CUDA): the core on vLLM-shaped block
tables and vLLM's packed KV cache (both stride orders), against the float64 oracle, with one
CUDA graph captured on the first step and replayed on later steps whose trees change (appends,
a finished request, a join, padding rows), the metadata refreshed by prepare() in place."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import treeattn
from conftest import numpy_oracle
from test_serving import P, Batch
from treeattn.serving import ServingCore, split_packed_kv

pytestmark = pytest.mark.gpu
if not (torch.cuda.is_available() and treeattn.built_with_cuda):
    pytest.skip("needs a CUDA device and a CUDA build of treeattn", allow_module_level=True)


@pytest.mark.parametrize("layout", ["nhd", "hnd"])
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_graph_replay_across_changing_trees(layout, dtype):
    H, Hk, D, pages, rows = 8, 2, 128, 2000, 16
    gen = torch.Generator(device="cuda").manual_seed(0)
    packed = torch.rand(pages, P, Hk, 2 * D, device="cuda", generator=gen, dtype=dtype) - 0.5
    cache = packed.transpose(1, 2) if layout == "nhd" else packed.transpose(1, 2).contiguous()
    k, v = split_packed_kv(cache, D)
    core = ServingCore(H, Hk, D, P, num_pages=pages, device="cuda", headroom=4.0, verify=True)
    b = Batch(1, num_pages=pages)
    q = torch.empty(rows, H, D, device="cuda", dtype=dtype)
    out = torch.empty_like(q)
    graph = None
    replays = 0
    for step in range(40):
        b.step(fork=False)
        bt, lens = b.tables()
        bt, lens = bt[:rows], lens[:rows]
        lens = np.concatenate([lens, np.zeros(rows - len(lens), np.int64)])
        bt = np.concatenate([bt, np.zeros((rows - len(bt), bt.shape[1]), bt.dtype)])
        fresh = not core.prepare(bt, lens, key=rows)
        q.copy_(torch.rand(rows, H, D, device="cuda", generator=gen, dtype=dtype) - 0.5)
        if graph is None or fresh:
            core.decode(q, k, v, out=out)  # warm-up / first use of the key's workspace
            torch.cuda.synchronize()
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph):
                core.decode(q, k, v, out=out)
        graph.replay()
        replays += 1
        torch.cuda.synchronize()
        real = lens > 0
        ref, _ = numpy_oracle(q.float().cpu().numpy()[real], k.float().cpu().numpy(),
                              v.float().cpu().numpy(), bt[real], lens[real])
        np.testing.assert_allclose(out.float().cpu().numpy()[real], ref, atol=2e-2)
    assert replays == 40 and core.sync.counts["incremental"] > 0
