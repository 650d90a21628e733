"""TreeSync: keeps a PrefixTree equal to a serving engine's per-step block tables, updating it
incrementally from one step to the next instead of rebuilding it.

Each step the engine hands the host copies of its block tables ([rows, max_pages] page ids, vLLM
layout: token t of row r sits in page block_tables[r][t // P], slot t % P) and sequence lengths
(tokens each row attends, its own included). Rows with length 0 are padding rows (CUDA-graph
batches): they become one-token queries on `pad_page` (the engine's null/scratch page), so the
tree has exactly one query per row and decode() writes every row of a padded output.

Matching rows across steps. Row r of this step *continues* row o of the previous step when its
length did not shrink and its first ceil(len_o / P) pages equal row o's (the request kept its
pages and appended tokens, possibly into new pages). Row identity is read from the contents, so
no request ids are needed: row r is first compared with row r (steady batches), and rows that do
not match are looked up by the page that held their previous last token (rows moved by a batch
condense or reorder). A row continuing no previous row *joins*: when its longest run of shared
full pages with a previous row ends exactly at a node boundary of that row's path, it is added
there (add_query + append_tokens of its own pages); otherwise the tree is rebuilt.

Applying a step:
  1. the longest leading run of rows whose previous rows are in increasing order keeps its
     queries; every later row is added at the end (add_query on its previous row's node, or on
     its join node);
  2. previous queries no row continues (finished requests) and those re-added are removed;
  3. rows that grew get append_tokens(query, delta, their new pages).
Anything the incremental path cannot express exactly (a copy-on-write page, a row whose query
is not alone on its leaf while its last page is partly filled, a join starting a new root or
inside a node, page ids the tree refuses) falls back to PrefixTree.from_block_tables, so the
result always equals the block tables (verify=True checks that after every step). So does a
step whose updates would cost more than a rebuild (every PrefixTree update checks the whole
tree; see TreeSync._too_costly): each step costs time linear in its block tables.
"""

from __future__ import annotations

from typing import Any, Dict, Optional, Tuple

import numpy as np

from treeattn import PrefixTree, check_int

__all__ = ["TreeSync"]

_INT32_MAX = 2**31 - 1
#: A step is applied incrementally only while its estimated cost (tree updates x tree size, see
#: TreeSync._too_costly) stays within this multiple of its input (rows x pages); one update costs
#: about 0.6 ns per tree node, a rebuild about 150 ns per block-table entry (2 cores, x86).
REBUILD_RATIO = 256


class _Fallback(Exception):
    """The incremental path cannot express this step: rebuild."""


def host_int_array(name: str, x: Any, ndim: int) -> np.ndarray:
    """A host integer array (numpy, or a CPU tensor through DLPack / __array__); device tensors
    are refused (reading them would synchronize the device)."""
    dev = getattr(x, "device", None)
    if dev is not None and getattr(dev, "type", "cpu") != "cpu":
        raise TypeError(f"{name}: expected a host (CPU) array, got a tensor on {dev}; pass the "
                        f"engine's host copy (reading a device tensor would synchronize)")
    try:
        a = np.asarray(x)
    except Exception as e:  # noqa: BLE001
        raise TypeError(f"{name}: expected an integer array, got {type(x).__name__} ({e})") from None
    if a.dtype.kind not in "iu":
        raise TypeError(f"{name}: expected an integer array, got dtype {a.dtype}")
    if a.ndim != ndim:
        raise ValueError(f"{name}: expected {ndim} dims, got shape {a.shape}")
    return a


class TreeSync:
    """Keeps ``tree`` equal to the block tables passed to :meth:`update`, step after step.

    page_size: tokens per page. num_pages: page ids lie in [0, num_pages) (0: unknown, any id up
    to 2^31-2). pad_page: page read by padding rows (length 0). verify: after every update,
    compare the tree with the block tables (tests; costs a tree walk). ``counts`` tells how
    many steps took each path ('rebuild', 'incremental', 'unchanged').
    """

    def __init__(self, page_size: int, num_pages: int = 0, *, pad_page: int = 0,
                 verify: bool = False) -> None:
        self.page_size = check_int("page_size", page_size, 1, 4096)
        self.num_pages = check_int("num_pages", num_pages, 0, _INT32_MAX) or _INT32_MAX
        self.pad_page = check_int("pad_page", pad_page, 0, self.num_pages - 1)
        self.verify = bool(verify)
        self.tree: Optional[PrefixTree] = None
        self._bt: Optional[np.ndarray] = None  # previous step: [rows, max pages needed]
        self._lens: Optional[np.ndarray] = None
        self._pad: Optional[np.ndarray] = None  # previous step: padding rows
        self.counts: Dict[str, int] = {"rebuild": 0, "incremental": 0, "unchanged": 0}
        self.last_path = ""

    # ---- inputs

    def _normalize(self, block_tables: Any,
                   seq_lens: Any) -> Tuple[np.ndarray, np.ndarray, np.ndarray]:
        bt = host_int_array("block_tables", block_tables, 2)
        lens = host_int_array("seq_lens", seq_lens, 1).astype(np.int64)
        rows = lens.shape[0]
        if rows == 0:
            raise ValueError("seq_lens: empty (no rows)")
        if bt.shape[0] != rows:
            raise ValueError(f"block_tables: {bt.shape[0]} rows, seq_lens has {rows} entries")
        if (lens < 0).any():
            r = int(np.argmax(lens < 0))
            raise ValueError(f"seq_lens: entry {r} is negative ({int(lens[r])})")
        if (lens > _INT32_MAX).any():
            r = int(np.argmax(lens > _INT32_MAX))
            raise ValueError(f"seq_lens: entry {r} is {int(lens[r])}, above 2^31-1")
        pad = lens == 0
        lens = np.where(pad, 1, lens)
        need = (lens + self.page_size - 1) // self.page_size
        cols = int(need.max())
        short = ~pad & (need > bt.shape[1])
        if short.any():
            r = int(np.argmax(short))
            raise ValueError(f"block_tables: row {r} has {bt.shape[1]} pages, seq_lens[{r}] = "
                             f"{int(lens[r])} needs {int(need[r])} (page_size {self.page_size})")
        out = np.zeros((rows, cols), dtype=np.int64)
        w = min(cols, bt.shape[1])
        out[:, :w] = bt[:, :w]
        if pad.any():
            out[pad, 0] = self.pad_page
        # entries past a row's length are not part of it: -1, never compared
        out[np.arange(cols)[None, :] >= need[:, None]] = -1
        used = out[out >= 0]
        if used.size and int(used.max()) >= self.num_pages:
            bad = np.argwhere(out >= self.num_pages)[0]
            raise ValueError(f"block_tables: page id {int(out[bad[0], bad[1]])} at "
                             f"[{bad[0]}, {bad[1]}] out of range [0, {self.num_pages})")
        if (out[np.arange(cols)[None, :] < need[:, None]] < 0).any():
            bad = np.argwhere((out < 0) & (np.arange(cols)[None, :] < need[:, None]))[0]
            raise ValueError(f"block_tables: page id {int(bt[bad[0], bad[1]])} at "
                             f"[{bad[0]}, {bad[1]}] is negative")
        return out, lens, pad

    # ---- the step

    def update(self, block_tables: Any, seq_lens: Any) -> PrefixTree:
        """Brings the tree to this step's block tables and returns it (the same object when
        updated in place). Raises ValueError / TypeError naming the bad argument."""
        bt, lens, pad = self._normalize(block_tables, seq_lens)
        path = "rebuild"
        if self.tree is not None:
            if (self._lens.shape == lens.shape and np.array_equal(self._lens, lens)
                    and self._bt.shape == bt.shape and np.array_equal(self._bt, bt)):
                path = "unchanged"
            else:
                try:
                    self._incremental(bt, lens)
                    path = "incremental"
                except _Fallback:
                    path = "rebuild"
                except ValueError:  # the tree refused an update (e.g. a page in use): rebuild
                    path = "rebuild"
        if path == "rebuild":
            try:
                self.tree = PrefixTree.from_block_tables(bt, lens, page_size=self.page_size,
                                                         num_pages=self.num_pages)
            except ValueError as e:
                if "block_tables" in str(e) or "seq_lens" in str(e):
                    raise
                # e.g. one page listed after two different prefixes: a prefix cache that
                # deduplicates pages by content can hand a request a page computed after
                # another request's copy of the same prefix; the tree cannot share it
                raise ValueError(f"block_tables: no prefix tree holds these rows ({e})") from None
            self.tree.free_pages = []  # every page comes from the engine's block tables
        self._bt, self._lens, self._pad = bt, lens, pad
        self.counts[path] += 1
        self.last_path = path
        if self.verify:
            self.check(bt, lens)
        return self.tree

    def check(self, bt: np.ndarray, lens: np.ndarray) -> None:
        """Raises AssertionError unless the tree's block tables equal (bt, lens)."""
        tbt, tlens = self.tree.to_block_tables()
        assert list(tlens) == [int(x) for x in lens], "TreeSync: lengths differ"
        P = self.page_size
        for r, n in enumerate(tlens):
            m = (int(n) + P - 1) // P
            assert list(tbt[r][:m]) == [int(x) for x in bt[r, :m]], f"TreeSync: row {r} differs"

    def _continues(self, bt: np.ndarray, lens: np.ndarray, rows: np.ndarray,
                   prev: np.ndarray) -> np.ndarray:
        """Per pair (rows[i], prev[i]): does the row continue that previous row?"""
        obt, olens = self._bt, self._lens
        ok = lens[rows] >= olens[prev]
        cols = min(bt.shape[1], obt.shape[1])
        P = self.page_size
        oneed = (olens[prev] + P - 1) // P
        a, b = bt[rows, :cols], obt[prev, :cols]
        mask = np.arange(cols)[None, :] < oneed[:, None]
        ok &= ~((a != b) & mask).any(axis=1)
        ok &= oneed <= cols
        return ok

    def _incremental(self, bt: np.ndarray, lens: np.ndarray) -> None:
        tree, P = self.tree, self.page_size
        obt, olens = self._bt, self._lens
        R, Ro = lens.shape[0], olens.shape[0]
        prev = np.full(R, -1, dtype=np.int64)
        m = min(R, Ro)
        same = np.arange(m)
        prev[:m] = np.where(self._continues(bt, lens, same, same), same, -1)
        missing = np.nonzero(prev < 0)[0]
        if missing.size:
            self._match_moved(bt, lens, prev, missing)
        taken = prev[prev >= 0]
        if np.unique(taken).size != taken.size:
            raise _Fallback()  # two rows continue one previous row (a fork): copy-on-write
        # 1. the leading run whose previous rows increase keeps its queries; every later row is
        # added (a joining row always is: its prev is -1)
        k = 0
        last = -1
        while k < R and prev[k] > last:
            last = prev[k]
            k += 1
        joining = np.nonzero(prev < 0)[0]
        if self._too_costly(bt, lens, prev, k, joining.size):
            raise _Fallback()
        qnode = tree.query_node
        # joins: node where each joining row attaches, and its first own page column
        join_at: Dict[int, Tuple[int, int]] = {}
        for r in joining:
            join_at[int(r)] = self._join_point(bt, lens, int(r), qnode)
        kept = set(int(x) for x in prev[:k])
        for r in range(k, R):
            node = qnode[int(prev[r])] if prev[r] >= 0 else join_at[r][0]
            tree.add_query(node)
        # 2. remove every previous query not kept (finished, or re-added above)
        for q in range(Ro - 1, -1, -1):
            if q not in kept:
                tree.remove_query(q)
        # 3. grow the rows that gained tokens (per-row values as Python ints: numpy scalars are
        # slow in this loop)
        has = prev >= 0
        o = np.where(has, prev, 0)
        first = np.where(has, (olens[o] + P - 1) // P, 0)
        delta = np.where(has, lens - olens[o], 0)
        partial = has & (olens[o] % P != 0)
        for r, (_, f) in join_at.items():
            first[r], delta[r] = f, int(lens[r]) - f * P
        need = (lens + P - 1) // P
        grow = np.nonzero(delta > 0)[0]
        for r, d, f, n, part in zip(grow.tolist(), delta[grow].tolist(), first[grow].tolist(),
                                    need[grow].tolist(), partial[grow].tolist()):
            pages = bt[r, f:n].tolist() if n > f else []
            before = tree.num_nodes
            tree.append_tokens(r, d, pages)
            if part and tree.num_nodes != before:
                # the query was not alone on a leaf, so the tree put the new tokens on a fresh
                # page while the engine kept filling the partly filled one
                raise _Fallback()

    def _too_costly(self, bt: np.ndarray, lens: np.ndarray, prev: np.ndarray, k: int,
                    joins: int) -> bool:
        """Whether applying this step incrementally would cost more than REBUILD_RATIO times the
        step's input (rows x pages): each tree update checks the whole tree (O(nodes + queries),
        and O(pages listed) when it takes new pages), and each join scans the previous rows. So
        a step with many updates (a large batch where every row appends, reordered rows, many
        joins) rebuilds instead, which keeps every step linear in its input."""
        P, olens = self.page_size, self._lens
        R, Ro = lens.shape[0], olens.shape[0]
        has = prev >= 0
        o = np.where(has, prev, 0)
        grows = int(np.count_nonzero(has & (lens > olens[o]))) + joins
        opens = int(np.count_nonzero(has & ((lens + P - 1) // P > (olens[o] + P - 1) // P))) + joins
        updates = (R - k) + (Ro - k) + grows
        size = self.tree.num_nodes + Ro
        cost = updates * size + (opens + joins) * self._bt.size
        return cost > REBUILD_RATIO * (bt.size + R)

    def _match_moved(self, bt, lens, prev, missing) -> None:
        """Rows that do not continue the row at their own index: look them up by the page that
        held a previous row's last token (unique among previous rows not yet matched)."""
        obt, olens, P = self._bt, self._lens, self.page_size
        Ro = olens.shape[0]
        oneed = (olens + P - 1) // P
        last_page = obt[np.arange(Ro), oneed - 1]
        used = np.zeros(Ro, dtype=bool)
        used[prev[prev >= 0]] = True
        owners: Dict[int, int] = {}
        for o in np.nonzero(~used)[0]:
            p = int(last_page[o])
            owners[p] = -1 if p in owners else int(o)
        need = (lens + P - 1) // P
        for r in missing:
            for col in (need[r] - 1, need[r] - 2):
                if col < 0:
                    continue
                o = owners.get(int(bt[r, col]), -1)
                if o >= 0 and not used[o] and self._continues(
                        bt, lens, np.array([r]), np.array([o]))[0]:
                    prev[r] = o
                    used[o] = True
                    break

    def _join_point(self, bt, lens, r: int, qnode) -> Tuple[int, int]:
        """(node, first own page column) where row r attaches: the node of a previous row with
        the same pages and length, else the end of its longest run of shared full pages with a
        previous row, which must be a node boundary."""
        obt, olens, P = self._bt, self._lens, self.page_size
        n = int(lens[r])
        need = (n + P - 1) // P
        if need <= obt.shape[1]:  # identical to a previous row (padding, a fresh fork)
            same = (olens == n) & (obt[:, :need] == bt[r, :need][None, :]).all(axis=1)
            if same.any():
                return qnode[int(np.argmax(same))], need
        own_full = (n - 1) // P  # pages before the one holding its last token
        cols = min(own_full, obt.shape[1])
        if cols == 0:
            raise _Fallback()
        eq = obt[:, :cols] == bt[r, :cols][None, :]
        lcp = np.where(eq.all(axis=1), cols, np.argmin(eq, axis=1))
        lcp = np.minimum(lcp, olens // P)  # only full pages of the previous row are shared
        o = int(np.argmax(lcp))
        shared = int(lcp[o])
        if shared == 0:
            raise _Fallback()  # a new root
        tokens = 0
        for v in self.tree.query_path(o):
            tokens += int(self.tree.node(v)["tokens"])
            if tokens == shared * P:
                return v, shared
            if tokens > shared * P:
                break
        raise _Fallback()  # the shared run ends inside a node
