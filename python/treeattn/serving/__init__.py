"""treeattn.serving: the serving core that engines (treeattn.engine, the vLLM plugin in
treeattn.integrations.vllm) run decode attention on.

* :class:`TreeSync`    keeps a PrefixTree equal to an engine's per-step block tables, updated
                       incrementally (appends, finished requests, moved rows, joins at node
                       boundaries; a rebuild otherwise).
* :class:`ServingCore` per step: tree update, plan, in-place refresh of a persistent device plan
                       per CUDA-graph key; per layer: decode into the caller's output buffer.
* :class:`HostRows`    host copies of request slots' block-table rows for engines that keep
                       their tables on the device, taken without a synchronization.
* :func:`split_packed_kv` K/V views of vLLM's packed per-layer cache.
"""

from .core import ServingCore, split_packed_kv
from .host_rows import HostRows
from .tree_sync import TreeSync

__all__ = ["HostRows", "ServingCore", "TreeSync", "split_packed_kv"]
