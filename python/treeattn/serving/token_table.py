"""page_table: the host page table of one decode step from an engine's token table.

Engines such as SGLang keep, per request, the KV slot of every token (``req_to_token[req, t]``,
a device tensor [max_requests, max_context]) instead of a block table; requests that share a
cached prefix hold the same slots. With pages of ``page_size`` slots handed out whole (slot =
page * page_size + offset; page size 1: a page is one slot), page p of a request is
``req_to_token[req, p * page_size] // page_size``: the block table that
:class:`~treeattn.serving.ServingCore` and :class:`~treeattn.serving.TreeSync` take.
"""

from __future__ import annotations

from typing import Any, Tuple

import numpy as np

from .tree_sync import host_int_array

__all__ = ["page_table"]


def page_table(req_to_token: Any, req_pool_indices: Any, seq_lens: Any,
               page_size: int) -> Tuple[np.ndarray, np.ndarray]:
    """(block_tables [rows, pages] int, seq_lens [rows] int64) on the host for the requests
    `req_pool_indices` (a tensor on req_to_token's device) of lengths `seq_lens` (host integers,
    e.g. the engine's CPU copy): one gather on the device of the first slot of each page and
    one device-to-host copy. Entries past a row's last page are unspecified. Raises ValueError /
    TypeError naming the argument: lengths below 1 or above the table's width, indices out of
    range, a page whose first slot is not at offset 0 of a page."""
    import torch

    if isinstance(page_size, bool) or not isinstance(page_size, (int, np.integer)):
        raise TypeError(f"page_size: expected an int, got {type(page_size).__name__}")
    P = int(page_size)
    if not 1 <= P <= 4096:
        raise ValueError(f"page_size: expected 1..4096, got {P}")
    if not isinstance(req_to_token, torch.Tensor) or req_to_token.ndim != 2:
        raise TypeError("req_to_token: expected a 2-D torch tensor [max_requests, max_context]")
    if req_to_token.dtype not in (torch.int32, torch.int64):
        raise TypeError(f"req_to_token: expected int32 or int64, got {req_to_token.dtype}")
    if not isinstance(req_pool_indices, torch.Tensor) or req_pool_indices.ndim != 1:
        raise TypeError("req_pool_indices: expected a 1-D torch tensor")
    if req_pool_indices.device != req_to_token.device:
        raise ValueError(f"req_pool_indices: on {req_pool_indices.device}, req_to_token on "
                         f"{req_to_token.device}")
    lens = host_int_array("seq_lens", seq_lens, 1).astype(np.int64)
    rows = int(req_pool_indices.shape[0])
    if lens.shape[0] != rows:
        raise ValueError(f"seq_lens: {lens.shape[0]} entries, req_pool_indices has {rows}")
    if rows == 0:
        raise ValueError("req_pool_indices: empty (no rows)")
    width = int(req_to_token.shape[1])
    if int(lens.min()) < 1 or int(lens.max()) > width:
        r = int(np.argmax((lens < 1) | (lens > width)))
        raise ValueError(f"seq_lens: entry {r} is {int(lens[r])}, expected 1..{width} (a decode "
                         f"row attends at least its own token; req_to_token has {width} "
                         f"columns)")
    cols = -(-int(lens.max()) // P)
    idx = req_pool_indices.long()
    n = int(req_to_token.shape[0])
    # gather with clamped indices; range checked on the host copy (no extra synchronization)
    first = req_to_token[idx.clamp(0, n - 1), 0:cols * P:P]
    host = torch.cat([first, idx[:, None].to(first.dtype)], 1).cpu().numpy()
    slots, ids = host[:, :-1], host[:, -1]
    if (ids < 0).any() or (ids >= n).any():
        r = int(np.argmax((ids < 0) | (ids >= n)))
        raise ValueError(f"req_pool_indices: entry {r} is {int(ids[r])}, out of range [0, {n})")
    if P == 1:
        return slots, lens
    used = np.arange(cols)[None, :] < ((lens + P - 1) // P)[:, None]
    bad = used & (slots % P != 0)
    if bad.any():
        r, c = (int(x) for x in np.argwhere(bad)[0])
        raise ValueError(f"req_to_token: request {int(ids[r])} (row {r}) holds token {c * P} "
                         f"in slot {int(slots[r, c])}, not at the start of a page of {P} slots")
    return slots // P, lens
