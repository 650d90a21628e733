"""HostRows: host copies of the block-table rows of an engine's request slots, for engines whose
block tables live on the device (vLLM's model runner V2): copied without a synchronization, and
used with ServingCore's device pages for what the host does not know."""

from __future__ import annotations

from typing import Any

import numpy as np

__all__ = ["HostRows"]


class HostRows:
    """Host copies of block-table rows of an engine's request slots (ints naming a request while
    it runs, e.g. vLLM's ``req_idx``), taken without waiting: request() starts a non-blocking
    device-to-host copy of some rows and records an event; poll() keeps the copies whose event
    has completed (it never waits); forget() drops a slot's row and any copy of it still in
    flight. The caller forgets a slot whenever its request (re)starts a prefill, so that a row
    is never read for another request. ``rows_copied`` counts the rows requested (tests).

    Thread safety: not thread-safe; one engine step loop uses it, as it uses its ServingCore."""

    def __init__(self) -> None:
        self.rows: dict = {}  # slot -> its first pages, as the copy saw them
        self._gen: dict = {}  # slot -> generation (bumped by forget / request)
        # copies in flight: (rows of the copy, slots, pages per slot, generations, host tensor,
        # event or None)
        self._pending: list = []
        self.rows_copied = 0

    def forget(self, slots) -> None:
        for s in slots:
            s = int(s)
            self.rows.pop(s, None)
            self._gen[s] = self._gen.get(s, 0) + 1

    def request(self, table: Any, select, slots, pages) -> None:
        """Copies rows `select` of `table` ([rows, cols] int32, any device), the first
        `pages[i]` entries of row select[i] becoming slot slots[i]'s copy once it lands."""
        import torch

        self.forget(slots)
        # pinned and asynchronous from a CUDA table; a copy from a CPU one (never its storage)
        host = table.to("cpu", non_blocking=True, copy=True)
        event = None
        if table.device.type == "cuda":
            event = torch.cuda.Event()
            event.record(torch.cuda.current_stream(table.device))
        gens = [self._gen[int(s)] for s in slots]
        self._pending.append((np.asarray(select), np.asarray(slots), np.asarray(pages), gens,
                              host, event))
        self.rows_copied += len(slots)

    def pending_slots(self) -> set:
        """Slots with a copy in flight."""
        return {int(s) for p in self._pending for s in p[1]}

    def poll(self) -> None:
        keep = []
        for item in self._pending:
            select, slots, pages, gens, host, event = item
            if event is not None and not event.query():
                keep.append(item)
                continue
            a = host.numpy()
            for r, s, n, g in zip(select, slots, pages, gens):
                if self._gen.get(int(s)) == g:
                    self.rows[int(s)] = a[int(r), :int(n)].copy()
        self._pending = keep

    def table(self, slots, cols: int) -> np.ndarray:
        """[len(slots), cols] page ids: each slot's known pages, -1 past them."""
        out = np.full((len(slots), max(cols, 1)), -1, dtype=np.int64)
        for i, s in enumerate(slots):
            row = self.rows.get(int(s))
            if row is not None:
                n = min(row.shape[0], out.shape[1])
                out[i, :n] = row[:n]
        return out
