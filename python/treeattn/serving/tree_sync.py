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
there and appends its own pages; otherwise the tree is rebuilt. A step with more joining rows
than 8 + rows / 8 (a new batch rather than a step, e.g. a new draft tree per step) is rebuilt
right away, without searching join points; when a bound shows that many joins before the
matching (rows holding their previous row's last page at most continue it, one moved row at most
per run of equal last pages), without the matching either.

Applying a step takes two calls into the C++ tree, each one pass over the tree (numpy does the
matching over the block tables):
  1. PrefixTree.set_query_nodes: query r moves to its previous row's node or its join node;
     previous queries no row continues (finished requests) go, and what no query uses is pruned;
  2. PrefixTree.append_tokens_bulk: every row that grew appends its tokens with exactly the
     pages it opened.
Anything the incremental path cannot express exactly (a copy-on-write page, a row whose query
is not alone on its leaf while its last page is partly filled, a join starting a new root or
inside a node, page ids the tree refuses) falls back to PrefixTree.from_block_tables, so the
result always equals the block tables (verify=True checks that after every step). The tree keeps
the slots of pruned nodes so that node indices stay valid; once most slots are dead, a rebuild
compacts them.
"""

from __future__ import annotations

from typing import Any, Dict, Optional, Tuple

import numpy as np

from treeattn import PrefixTree, check_int

__all__ = ["TreeSync"]

_INT32_MAX = 2**31 - 1
#: Joining rows a step takes incrementally, plus one per 8 rows; more rebuild the tree.
_MAX_JOINS = 8


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
    to 2^31-2); after :meth:`allow_labels`, ids from num_pages on are accepted too (labels of
    pages that only the device knows: ServingCore's device pages). pad_page: page read by padding
    rows (length 0). verify: after every update,
    compare the tree with the block tables (tests; costs a tree walk). ``counts`` tells how
    many steps took each path ('rebuild', 'incremental', 'unchanged'). Thread safety: not
    thread-safe (it updates its tree in place): one thread at a time.
    """

    def __init__(self, page_size: int, num_pages: int = 0, *, pad_page: int = 0,
                 verify: bool = False) -> None:
        self.page_size = check_int("page_size", page_size, 1, 4096)
        self.num_pages = check_int("num_pages", num_pages, 0, _INT32_MAX) or _INT32_MAX
        self.pad_page = check_int("pad_page", pad_page, 0, self.num_pages - 1)
        self.verify = bool(verify)
        self._limit = self.num_pages  # ids below it are accepted (labels: 2^31-1)
        self._labels = False
        self.tree: Optional[PrefixTree] = None
        self._bt: Optional[np.ndarray] = None  # previous step: [rows, max pages needed]
        self._lens: Optional[np.ndarray] = None
        self._pad: Optional[np.ndarray] = None  # previous step: padding rows
        self.counts: Dict[str, int] = {"rebuild": 0, "incremental": 0, "unchanged": 0}
        self.last_path = ""

    @property
    def labels_allowed(self) -> bool:
        """Whether allow_labels() was called."""
        return self._labels

    def allow_labels(self) -> None:
        """From now on, accepts page ids in [num_pages, 2^31-1) too: labels the caller gave pages
        it knows only on the device (their range is the caller's to check). The next update
        rebuilds the tree."""
        if not self._labels:
            self._labels = True
            self._limit = _INT32_MAX
            self.tree = None

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
        past = np.arange(cols)[None, :] >= need[:, None]  # not part of the row: -1, never read
        out = np.full((rows, cols), -1, dtype=np.int64)
        w = min(cols, bt.shape[1])
        out[:, :w] = bt[:, :w]
        if pad.any():
            out[pad, 0] = self.pad_page
        if out.min() < 0 and (out[~past] < 0).any():
            bad = np.argwhere((out < 0) & ~past)[0]
            raise ValueError(f"block_tables: page id {int(bt[bad[0], bad[1]])} at "
                             f"[{bad[0]}, {bad[1]}] is negative")
        np.putmask(out, past, -1)
        if int(out.max()) >= self._limit:
            bad = np.argwhere(out >= self._limit)[0]
            raise ValueError(f"block_tables: page id {int(out[bad[0], bad[1]])} at "
                             f"[{bad[0]}, {bad[1]}] out of range [0, {self._limit})")
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
                                                         num_pages=self._limit)
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

    def check_tables(self, block_tables: Any, seq_lens: Any) -> None:
        """Raises AssertionError unless the tree holds exactly these block tables and lengths
        (the caller's convention: length 0 for a padding row)."""
        bt, lens, _ = self._normalize(block_tables, seq_lens)
        self.check(bt, lens)

    def state(self) -> tuple:
        """What update() changes (tree, tables, lengths, padding, counts, path), for restore()."""
        return (self.tree, self._bt, self._lens, self._pad, dict(self.counts), self.last_path)

    def restore(self, state: tuple) -> None:
        """Puts back a state() taken earlier."""
        self.tree, self._bt, self._lens, self._pad, self.counts, self.last_path = state

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

    def _continues_in_place(self, bt: np.ndarray, lens: np.ndarray, m: int) -> np.ndarray:
        """_continues for rows 0..m-1 against the previous rows at the same index (slices, no
        gathers: the steady case)."""
        obt, olens = self._bt[:m], self._lens[:m]
        cols = min(bt.shape[1], obt.shape[1])
        P = self.page_size
        ok = (lens[:m] >= olens) & ((olens + P - 1) // P <= cols)
        b = obt[:, :cols]
        # previous rows are -1 past their pages: equal where they have pages
        ok &= ((bt[:m, :cols] == b) | (b < 0)).all(axis=1)
        return ok

    def _may_continue_in_place(self, bt: np.ndarray, lens: np.ndarray, m: int) -> np.ndarray:
        """For rows 0..m-1: not shorter than the previous row at the same index and holding its
        last page at the same column (what _continues_in_place needs, among the rest)."""
        obt, olens, P = self._bt, self._lens[:m], self.page_size
        col = (olens + P - 1) // P - 1
        ok = (lens[:m] >= olens) & (col < bt.shape[1])
        r = np.arange(m)
        c = np.minimum(col, bt.shape[1] - 1)
        return ok & (bt[r, c] == obt[r, col])

    def _incremental(self, bt: np.ndarray, lens: np.ndarray) -> None:
        tree, P = self.tree, self.page_size
        olens = self._lens
        R, Ro = lens.shape[0], olens.shape[0]
        if tree.num_nodes > 2 * tree.num_live_nodes + 64:
            raise _Fallback()  # mostly dead node slots: a rebuild compacts them
        prev = np.full(R, -1, dtype=np.int64)
        m = min(R, Ro)
        max_joins = _MAX_JOINS + R // 8
        # Rows continuing the row at their own index are at most those holding its last page
        # in the same column (O(rows), before the whole-table comparison): when the others
        # already leave too many joins, fall back now (W6: every row new, every step)
        missing = R - int(np.count_nonzero(self._may_continue_in_place(bt, lens, m)))
        if missing > max_joins and self._surely_too_many_joins(missing, max_joins):
            raise _Fallback()
        same = np.arange(m)
        prev[:m] = np.where(self._continues_in_place(bt, lens, m), same, -1)
        missing = int(np.count_nonzero(prev < 0))
        if missing > max_joins and self._surely_too_many_joins(missing, max_joins):
            raise _Fallback()  # (what the search below would end in, known without it)
        if missing:
            self._match_moved(bt, lens, prev)
        joins = np.nonzero(prev < 0)[0]
        if joins.size > max_joins:
            raise _Fallback()  # a new batch rather than a step: one rebuild is cheaper
        # Per row: its node (the previous row's, or where it joins), its first own page column
        # and the tokens it gained.
        qnode = np.asarray(tree.query_node, dtype=np.int64)
        has = prev >= 0
        o = np.where(has, prev, 0)
        node = np.where(has, qnode[o], -1)
        first = np.where(has, (olens[o] + P - 1) // P, 0)
        delta = np.where(has, lens - olens[o], 0)
        for r in joins.tolist():
            node[r], first[r] = self._join_point(bt, lens, r, qnode)
            delta[r] = int(lens[r]) - int(first[r]) * P
        # 1. one call: finished requests leave, joining ones are added, moved ones follow their
        # row (the previous queries' nodes are kept, so node indices stay valid)
        if node.shape != qnode.shape or not np.array_equal(node, qnode):
            tree.set_query_nodes(node)
        # 2. one call: every row that gained tokens appends them with exactly the pages it
        # opened. A row whose query is not alone on a leaf while its last page is partly filled
        # would fork a child needing one page more than the row opened: the tree refuses that
        # (ValueError naming new_pages) and the step rebuilds, as it must (the engine keeps
        # filling the shared page, which the tree cannot express).
        grow = np.nonzero(delta > 0)[0]
        if grow.size:
            f = first[grow]
            opened = (lens[grow] + P - 1) // P - f  # pages each row opened
            ptr = np.zeros(grow.size + 1, dtype=np.int64)
            np.cumsum(opened, out=ptr[1:])
            rows = np.nonzero(opened > 0)[0]  # (few: a row opens a page every P tokens)
            cols = np.arange(bt.shape[1])[None, :]
            f, n = f[rows, None], (f + opened)[rows, None]
            pages = bt[grow[rows]][(cols >= f) & (cols < n)]
            tree.append_tokens_bulk(grow, delta[grow], ptr, pages)

    def _surely_too_many_joins(self, missing: int, max_joins: int) -> bool:
        """True when `missing` rows that do not continue their own row leave more than
        `max_joins` joining rows whatever _match_moved finds: it matches a row to the previous
        row holding the page of the row's last (or second-last) token, one row per distinct
        last page of the previous rows at most, and these are no more than its runs of equal
        pages. O(previous rows); a draft tree's rows (all new every step) skip the search."""
        obt, olens, P = self._bt, self._lens, self.page_size
        last = obt[np.arange(olens.shape[0]), (olens + P - 1) // P - 1]
        runs = 1 + int(np.count_nonzero(last[1:] != last[:-1]))
        return missing - runs > max_joins

    def _match_moved(self, bt, lens, prev) -> None:
        """Rows that do not continue the row at their own index: look them up by the page that
        held a previous row's last token (unique among previous rows not yet matched)."""
        obt, olens, P = self._bt, self._lens, self.page_size
        Ro = olens.shape[0]
        used = np.zeros(Ro, dtype=bool)
        used[prev[prev >= 0]] = True
        free = np.nonzero(~used)[0]
        missing = np.nonzero(prev < 0)[0]
        if free.size == 0:
            return
        last_page = obt[free, (olens[free] + P - 1) // P - 1]
        pages, idx, cnt = np.unique(last_page, return_index=True, return_counts=True)
        owner = np.where(cnt == 1, free[idx], -1)
        need = (lens[missing] + P - 1) // P
        cand = np.full(missing.size, -1, dtype=np.int64)
        for back in (1, 2):  # the last token's page, or the one before (the row opened a page)
            col = need - back
            todo = (cand < 0) & (col >= 0)
            if not todo.any():
                continue
            rows = missing[todo]
            p = bt[rows, col[todo]]
            k = np.minimum(np.searchsorted(pages, p), pages.size - 1)
            o = np.where(pages[k] == p, owner[k], -1)
            ok = o >= 0
            ok[ok] = self._continues(bt, lens, rows[ok], o[ok])
            cand[np.nonzero(todo)[0][ok]] = o[ok]
        # each previous row continues in one row at most: the first one claiming it
        got = np.nonzero(cand >= 0)[0]
        _, firsts = np.unique(cand[got], return_index=True)
        got = got[firsts]
        prev[missing[got]] = cand[got]

    def _join_point(self, bt, lens, r: int, qnode) -> Tuple[int, int]:
        """(node, first own page column) where row r attaches: the node of a previous row with
        the same pages and length, else the end of the longest run of full pages it shares with
        a previous row, which must be a node boundary. O(previous rows x log(pages) + pages)."""
        obt, olens, P = self._bt, self._lens, self.page_size
        n = int(lens[r])
        need = (n + P - 1) // P
        if need <= obt.shape[1]:  # identical to a previous row (padding, a fresh fork)
            same = (olens == n) & (obt[:, need - 1] == bt[r, need - 1])
            for o in np.nonzero(same)[0][:1].tolist():
                if np.array_equal(obt[o, :need], bt[r, :need]):
                    return int(qnode[o]), need
        # Longest run: in a tree, a page at column c follows one prefix, so "some previous row
        # holds page bt[r, c] at column c, full" holds for c below the run's end and not past it;
        # binary search on c, then check the whole run against the row found (pages a shorter
        # run leaves out are refused as in use by append_tokens_bulk: a rebuild then).
        lo, hi = 0, min((n - 1) // P, obt.shape[1])  # run in [lo, hi]; own pages before the last
        full = olens // P
        while lo < hi:
            c = (lo + hi + 1) // 2
            if ((obt[:, c - 1] == bt[r, c - 1]) & (full >= c)).any():
                lo = c
            else:
                hi = c - 1
        shared = lo
        if shared == 0:
            raise _Fallback()  # a new root
        o = int(np.argmax((obt[:, shared - 1] == bt[r, shared - 1]) & (full >= shared)))
        if not np.array_equal(obt[o, :shared], bt[r, :shared]):
            raise _Fallback()
        tokens = 0
        for v in self.tree.query_path(o):
            tokens += int(self.tree.node(v)["tokens"])
            if tokens == shared * P:
                return v, shared
            if tokens > shared * P:
                break
        raise _Fallback()  # the shared run ends inside a node
