"""Paged KV cache manager: pages with refcounts, prefix sharing of full pages (block hash chain),
fork with lazy copy-on-write of a shared partial last page, truncate, free on finish.

Storage: ``k[layer]`` and ``v[layer]`` are ``[num_pages, page_size, kv_heads, head_dim]`` (the
layout treeattn and FlashInfer read). Page 0 is a scratch page that is never handed out: padding
rows of a CUDA-graph batch write and read there.

fp8 KV (dtype torch.float8_e4m3fn / float8_e5m2): one byte per element, with a float32 scale per
layer for K (``k_scale[layer]``) and for V (``v_scale[layer]``) on the cache's device (vLLM's
convention: stored value = x / scale, dequantized value = scale x stored value). :meth:`write`
quantizes on write, saturating: x / scale is clamped to +-448 (e4m3) / +-57344 (e5m2) before
the cast (torch's cast does not saturate: 1000 would become NaN in e4m3); NaN stays NaN.
Without calibration the scales are 1.0, as in vLLM. Element moves (copy-on-write) go through
uint8 views, so they are bit-exact and need no fp8 kernels.

Copy-on-write is deferred: :meth:`append` records (src slot, dst slot) pairs for the filled
slots of a shared page and the engine applies them inside the forward, per layer, right after the
step's new K/V are written (so a token written this step into the source page is copied too).
A source page whose last holder copied away stays out of the pool until :meth:`take_copies`, so
no other row of the same step is handed it (its new K/V would overwrite what the copy reads).

A full page is immutable once registered in the hash table; it is shared by every sequence
whose prompt has the same tokens up to the end of that page. Pages whose refcount drops to zero
stay cached (LRU) while they carry a hash, and are evicted when the free list runs dry.

Every public method checks its arguments before it changes anything (ValueError / TypeError
naming the argument; MemoryError, state unchanged, when the free pages cannot hold what is
asked). :meth:`pages_for_step` and :meth:`check_prompt_fits` tell the engine before a step or a
prefill whether the pages suffice, so that a refused call leaves the cache as it was."""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Sequence, Tuple

import torch

from ._checks import (MAX_PAGE_SIZE, MAX_PAGES, device_arg, dtype_arg, int_arg, is_fp8,
                      kv_scale_arg, tokens_arg)


def quantize(x: torch.Tensor, dtype: torch.dtype, scale) -> torch.Tensor:
    """x / scale in the fp8 type `dtype`, saturating to its largest finite value (inf too; NaN
    stays NaN). scale: a float or a float32 tensor that broadcasts against x (e.g. one element).
    Capturable in a CUDA graph (no host sync)."""
    m = torch.finfo(dtype).max
    return (x.float() / scale).clamp_(-m, m).to(dtype)


def dequantize(x: torch.Tensor, dtype: torch.dtype, scale) -> torch.Tensor:
    """scale x (fp8 tensor x) in `dtype`."""
    return (x.float() * scale).to(dtype)


@dataclass
class Seq:
    pages: List[int] = field(default_factory=list)
    tokens: List[int] = field(default_factory=list)  # every token whose K/V is (to be) stored
    hashes: List[int] = field(default_factory=list)  # block hash of each full page


class KVCache:
    def __init__(self, num_layers: int, num_pages: int, page_size: int, num_kv_heads: int,
                 head_dim: int, dtype=torch.float32, device="cpu", allocate: bool = True,
                 k_scale=1.0, v_scale=1.0):
        """dtype: the storage type (a floating dtype, or fp8: torch.float8_e4m3fn / e5m2).
        k_scale, v_scale (fp8 only): a number > 0 for every layer or one per layer."""
        num_layers = int_arg("num_layers", num_layers, 1, 1 << 16)
        num_pages = int_arg("num_pages", num_pages, 2, MAX_PAGES)
        page_size = int_arg("page_size", page_size, 1, MAX_PAGE_SIZE)
        num_kv_heads = int_arg("num_kv_heads", num_kv_heads, 1, 1 << 16)
        head_dim = int_arg("head_dim", head_dim, 1, 1 << 16)
        dtype = dtype_arg("dtype", dtype)
        device = device_arg("device", device)
        if not isinstance(allocate, bool):
            raise TypeError(f"allocate: expected True or False, got {type(allocate).__name__}")
        self.page_size, self.num_pages = page_size, num_pages
        self.dtype, self.fp8 = dtype, is_fp8(dtype)
        #: fp8: the per-layer scales, float32 [num_layers] on the device (what the kernels read,
        #: so a CUDA graph replays with the values they hold) and as host floats (FlashInfer
        #: takes host scales); 1.0 (unused) for other dtypes
        self.k_scale_host = kv_scale_arg("k_scale", k_scale, num_layers)
        self.v_scale_host = kv_scale_arg("v_scale", v_scale, num_layers)
        if not self.fp8 and (set(self.k_scale_host) | set(self.v_scale_host)) != {1.0}:
            raise ValueError(f"k_scale: scales other than 1 need an fp8 KV cache (dtype is "
                             f"{dtype})")
        self.k_scale = torch.tensor(self.k_scale_host, dtype=torch.float32, device=device)
        self.v_scale = torch.tensor(self.v_scale_host, dtype=torch.float32, device=device)
        shape = (num_layers, num_pages, page_size, num_kv_heads, head_dim)
        self.k = torch.zeros(shape, dtype=dtype, device=device) if allocate else None
        self.v = torch.zeros(shape, dtype=dtype, device=device) if allocate else None
        self.ref = [0] * num_pages
        self.free: List[int] = list(range(num_pages - 1, 0, -1))  # page 0: scratch
        self.cached: "OrderedDict[int, None]" = OrderedDict()  # refcount 0, still hashed (LRU)
        self.page_hash: Dict[int, int] = {}  # page -> block hash (full, immutable pages)
        self.hash_page: Dict[int, int] = {}  # block hash -> page
        self.seqs: Dict[int, Seq] = {}
        self.pending_copies: List[Tuple[int, int]] = []  # (src slot, dst slot)
        self.held: List[int] = []  # copy sources left by their last holder, this step
        self._copied_from: Dict[int, int] = {}  # dst slot -> src slot, this step
        self.truncated = False  # since the last take_copies()
        self._next_id = 0
        self.stats = {"hit_tokens": 0, "cow_pages": 0, "evicted": 0}

    # ---- pages

    def _alloc(self) -> int:
        if self.free:
            p = self.free.pop()
        elif self.cached:
            p, _ = self.cached.popitem(last=False)
            del self.hash_page[self.page_hash.pop(p)]
            self.stats["evicted"] += 1
        else:
            raise MemoryError(f"KV cache: all {self.num_pages - 1} pages in use")
        self.ref[p] = 1
        return p

    def _incref(self, p: int) -> None:
        if self.ref[p] == 0:
            if p in self.cached:
                self.cached.pop(p)
            else:
                self.held.remove(p)
        self.ref[p] += 1

    def _release(self, p: int) -> None:
        """A page nobody holds back into the pool: cached while it carries a hash, else free."""
        if p in self.page_hash:
            self.cached[p] = None
        else:
            self.free.append(p)

    def _decref(self, p: int, hold: bool = False) -> None:
        """hold: a copy-on-write source, kept out of the pool until take_copies()."""
        self.ref[p] -= 1
        assert self.ref[p] >= 0, f"page {p} refcount below zero"
        if self.ref[p] == 0:
            if hold:
                self.held.append(p)
            else:
                self._release(p)

    @property
    def pages_in_use(self) -> int:
        return sum(1 for r in self.ref if r > 0)

    def num_free(self) -> int:
        return len(self.free) + len(self.cached)

    # ---- argument checks

    def _seq(self, sid, name: str = "sid") -> Seq:
        """The live sequence `sid` (ValueError naming `name` when there is none)."""
        s = self.seqs.get(sid) if type(sid) is int else None  # the engine's hot path
        if s is None:
            sid = int_arg(name, sid, 0, (1 << 63) - 1)
            s = self.seqs.get(sid)
            if s is None:
                raise ValueError(f"{name}: no live sequence {sid} (never created, or freed)")
        return s

    @staticmethod
    def _tokens(name: str, tokens, allow_empty: bool = True) -> List[int]:
        """Token ids as Python ints >= 0 (the cache does not know the vocabulary; the engine
        checks the upper bound)."""
        return tokens_arg(name, tokens, 1 << 62, allow_empty=allow_empty)

    # ---- sequences

    def _cached_prefix(self, prompt: Sequence[int]) -> Tuple[List[int], List[int]]:
        """Pages and block hashes of the longest run of cached full pages that starts `prompt`,
        leaving at least its last token to compute."""
        P, h = self.page_size, 0
        pages: List[int] = []
        hashes: List[int] = []
        for i in range((len(prompt) - 1) // P):
            h = hash((h, tuple(prompt[i * P:(i + 1) * P])))
            p = self.hash_page.get(h)
            if p is None:
                break
            pages.append(p)
            hashes.append(h)
        return pages, hashes

    def check_prompt_fits(self, prompt: Sequence[int], name: str = "prompt") -> None:
        """Raises unless new_seq(prompt) and one append() per uncached token can run now:
        ValueError when the whole cache is too small for it, MemoryError when the free pages
        are (nothing is changed either way)."""
        prompt = self._tokens(name, prompt)
        P = self.page_size
        total = -(-len(prompt) // P)
        if total > self.num_pages - 1:
            raise ValueError(f"{name}: {len(prompt)} tokens need {total} KV pages of "
                             f"{P} tokens; the cache has {self.num_pages - 1}")
        hits, _ = self._cached_prefix(prompt)
        free = self.num_free() - sum(1 for p in hits if self.ref[p] == 0)
        if total - len(hits) > free:
            raise MemoryError(f"{name}: {len(prompt)} tokens need {total - len(hits)} new KV "
                              f"pages, {free} are free (finish or free sequences first)")

    def new_seq(self, prompt: Sequence[int]) -> Tuple[int, int]:
        """A sequence for `prompt`, reusing cached full pages of its longest cached prefix (at
        least one token is left to compute). Returns (seq id, cached tokens). Call append() for
        each remaining prompt token (or append_many) before the prefill writes them."""
        prompt = self._tokens("prompt", prompt)
        pages, hashes = self._cached_prefix(prompt)
        sid = self._next_id
        self._next_id += 1
        s = self.seqs[sid] = Seq()
        for p in pages:
            self._incref(p)
        s.pages, s.hashes = pages, hashes
        s.tokens = prompt[:len(pages) * self.page_size]
        self.stats["hit_tokens"] += len(s.tokens)
        return sid, len(s.tokens)

    def length(self, sid: int) -> int:
        return len(self._seq(sid).tokens)

    def pages_for_step(self, sids: Sequence[int], name: str = "rows") -> int:
        """New pages that appending one token to each of `sids` (in order; a sequence may
        repeat) takes, checked against the free pages: MemoryError when they do not suffice,
        before anything changes. Follows append() exactly: a page opens at a page boundary, a
        shared or hashed partial last page is copied on a sequence's first append of the step,
        and a page whose last holder copies away stays out of the pool for the rest of the
        step."""
        P = self.page_size
        seqs = []
        for i, sid in enumerate(sids):
            s = self.seqs.get(sid) if type(sid) is int else None
            seqs.append(s if s is not None else self._seq(sid, f"{name}[{i}]"))
        state: Dict[int, List[int]] = {}  # id(seq) -> [length, last page private]
        dref: Dict[int, int] = {}
        avail, need = self.num_free(), 0
        for s in seqs:
            st = state.setdefault(id(s), [len(s.tokens), 0])
            off = st[0] % P
            if off == 0 or not st[1]:
                last = s.pages[-1] if off else -1
                r = self.ref[last] + dref.get(last, 0) if off else 0
                if off == 0 or r > 1 or last in self.page_hash:
                    need += 1
                    avail -= 1
                    if avail < 0:
                        raise MemoryError(
                            f"{name}: this step needs more new KV pages than the "
                            f"{self.num_free()} free ones (finish or free sequences first)")
                    if off:  # copy-on-write: the shared page loses a holder
                        dref[last] = dref.get(last, 0) - 1
            st[0] += 1
            st[1] = 1
        return need

    def append(self, sid: int, token: int) -> int:
        """Reserves the slot (page * page_size + offset) of the next token of `sid`. A full last
        page gets a new page; a partial last page that is shared or hashed is copied first
        (deferred copy of its filled slots). MemoryError (nothing changed) when no page is
        free."""
        s = self._seq(sid)
        if type(token) is not int or token < 0:  # (the engine's hot path passes plain ints)
            (token,) = self._tokens("token", [token])
        P = self.page_size
        n = len(s.tokens)
        off = n % P
        if off == 0:
            s.pages.append(self._alloc())
        else:
            last = s.pages[-1]
            if self.ref[last] > 1 or last in self.page_hash:
                new = self._alloc()
                for j in range(off):  # a slot copied earlier this step: read its source
                    src = self._copied_from.get(last * P + j, last * P + j)
                    self._copied_from[new * P + j] = src
                    self.pending_copies.append((src, new * P + j))
                self._decref(last, hold=True)
                s.pages[-1] = new
                self.stats["cow_pages"] += 1
        s.tokens.append(int(token))
        if off == P - 1:  # page now full: register its hash (content written this step)
            h = hash((s.hashes[-1] if s.hashes else 0, tuple(s.tokens[-P:])))
            s.hashes.append(h)
            p = s.pages[-1]
            if h not in self.hash_page and self.ref[p] == 1:
                self.hash_page[h] = p
                self.page_hash[p] = h
        return s.pages[-1] * P + off

    def append_rows(self, sids: Sequence[int], tokens: Sequence[int]
                    ) -> Tuple[List[int], List[int], List[List[int]]]:
        """append(sid, token) for each pair in order (a sequence may repeat): returns per row
        the sequence's length before its append (the token's position), the slot, and the
        sequence's block table (its live page list, as block_table() returns it). A token
        into a private, unhashed partial page that does not fill it is appended here; every
        other case goes through append() (new page, copy-on-write, hash registration, checks),
        so the state and the results are append()'s. MemoryError / ValueError as append()
        (the rows before the failing one are appended)."""
        P, ref, page_hash, seqs = self.page_size, self.ref, self.page_hash, self.seqs
        positions: List[int] = []
        slots: List[int] = []
        tables: List[List[int]] = []
        for sid, token in zip(sids, tokens):
            s = seqs.get(sid) if type(sid) is int else None
            if s is None:
                s = self._seq(sid)
            n = len(s.tokens)
            off = n % P
            if (off == 0 or off == P - 1 or type(token) is not int or token < 0
                    or ref[s.pages[-1]] > 1 or s.pages[-1] in page_hash):
                slot = self.append(sid, token)
            else:
                s.tokens.append(token)
                slot = s.pages[-1] * P + off
            positions.append(n)
            slots.append(slot)
            tables.append(s.pages)
        return positions, slots, tables

    def fork(self, sid: int, n: int = 1) -> List[int]:
        """n new sequences sharing every page of `sid` (the partial last page is copied lazily
        by the first append of whoever writes it while it is shared). n is at most the cache's
        page count: each fork needs a page of its own for its next token."""
        src = self._seq(sid)
        n = int_arg("n", n, 1, self.num_pages - 1)
        out = []
        for _ in range(n):
            nid = self._next_id
            self._next_id += 1
            self.seqs[nid] = Seq(list(src.pages), list(src.tokens), list(src.hashes))
            for p in src.pages:
                self._incref(p)
            out.append(nid)
        return out

    def truncate(self, sid: int, length: int) -> None:
        """Keeps the first `length` tokens (speculative decoding: drop rejected drafts); length
        in [0, current length]."""
        s = self._seq(sid)
        length = int_arg("length", length, 0, len(s.tokens))
        P = self.page_size
        keep = (length + P - 1) // P
        for p in s.pages[keep:]:
            self._decref(p)
        del s.pages[keep:]
        del s.tokens[length:]
        del s.hashes[length // P:]
        self.truncated = True

    def free_seq(self, sid: int) -> None:
        self._seq(sid)
        for p in self.seqs.pop(sid).pages:
            self._decref(p)

    def take_copies(self) -> List[Tuple[int, int]]:
        """The step's deferred copies (the caller runs them); copy sources nobody holds return to
        the pool."""
        for p in self.held:
            self._release(p)
        self.held = []
        c, self.pending_copies = self.pending_copies, []
        self._copied_from = {}
        self.truncated = False
        return c

    def apply_copies(self, copies: Sequence[Tuple[int, int]]) -> None:
        """Runs copies now on every layer (prefill path; decode applies them per layer)."""
        slots = self.num_pages * self.page_size
        for i, pair in enumerate(copies):
            if not isinstance(pair, (tuple, list)) or len(pair) != 2:
                raise TypeError(f"copies[{i}]: expected a (source slot, destination slot) pair")
            for j, x in enumerate(pair):
                int_arg(f"copies[{i}][{j}]", x, 0, slots - 1)
        if not copies or self.k is None:
            return
        src = torch.tensor([a for a, _ in copies], device=self.k.device)
        dst = torch.tensor([b for _, b in copies], device=self.k.device)
        for c in (self.k, self.v):
            flat = c.view(c.shape[0], -1, *c.shape[3:])
            if self.fp8:  # bit moves (advanced indexing of fp8 tensors is not everywhere)
                flat = flat.view(torch.uint8)
            flat[:, dst] = flat[:, src]

    def block_table(self, sid: int) -> List[int]:
        return self._seq(sid).pages

    # ---- element access (the engine's forward; CUDA-graph capturable)

    def flat(self, layer: int) -> Tuple[torch.Tensor, torch.Tensor]:
        """K and V of `layer` as [slots, kv_heads, head_dim] views for writes and copies: uint8
        views of an fp8 cache (bit moves), the storage itself otherwise."""
        k, v = self.k[layer], self.v[layer]
        k = k.view(-1, *k.shape[2:])
        v = v.view(-1, *v.shape[2:])
        if self.fp8:
            return k.view(torch.uint8), v.view(torch.uint8)
        return k, v

    def write(self, layer: int, slots: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> None:
        """Stores new K/V [n, kv_heads, head_dim] at the flat slots of `layer`; an fp8 cache
        quantizes them with the layer's scales (saturating, see quantize())."""
        kf, vf = self.flat(layer)
        if self.fp8:
            k = quantize(k, self.dtype, self.k_scale[layer]).view(torch.uint8)
            v = quantize(v, self.dtype, self.v_scale[layer]).view(torch.uint8)
        kf.index_copy_(0, slots, k.to(kf.dtype))
        vf.index_copy_(0, slots, v.to(vf.dtype))

    def copy_slots(self, layer: int, src: torch.Tensor, dst: torch.Tensor) -> None:
        """Copies the K/V of flat slots src to dst in `layer` (copy-on-write; bit-exact)."""
        kf, vf = self.flat(layer)
        kf.index_copy_(0, dst, kf[src])
        vf.index_copy_(0, dst, vf[src])

    def gather(self, layer: int, slots: torch.Tensor, dtype: torch.dtype
               ) -> Tuple[torch.Tensor, torch.Tensor]:
        """K and V at flat `slots` (any shape) of `layer` as `dtype`: [*slots.shape, kv_heads,
        head_dim], dequantized (scale x value) from an fp8 cache."""
        kf, vf = self.flat(layer)
        k, v = kf[slots], vf[slots]
        if not self.fp8:
            return k.to(dtype), v.to(dtype)
        return (dequantize(k.view(self.dtype), dtype, self.k_scale[layer]),
                dequantize(v.view(self.dtype), dtype, self.v_scale[layer]))

    # ---- invariants (tests)

    def check(self) -> None:
        """Refcount of every page == number of sequences holding it; free, cached, held and
        used pages are disjoint and cover every page but the scratch page; hashes are
        consistent; no sequence holds a page twice."""
        count = [0] * self.num_pages
        for sid, s in self.seqs.items():
            assert len(set(s.pages)) == len(s.pages), f"seq {sid} holds a page twice"
            assert len(s.pages) == (len(s.tokens) + self.page_size - 1) // self.page_size
            for p in s.pages:
                count[p] += 1
        assert count == self.ref, "refcounts differ from the sequences' page lists"
        free, cached = set(self.free), set(self.cached)
        used = {p for p in range(self.num_pages) if self.ref[p] > 0}
        assert len(free) == len(self.free), "a page is twice on the free list"
        assert len(set(self.held)) == len(self.held), "a page is held twice"
        assert not set(self.held) & (free | cached | used), "a held page is elsewhere too"
        free |= set(self.held)  # held until take_copies(): out of the pool, but not leaked
        assert not (free & cached) and not (free & used) and not (cached & used)
        assert free | cached | used == set(range(1, self.num_pages)), "a page leaked"
        assert 0 not in used | free | cached
        for p, h in self.page_hash.items():
            assert self.hash_page[h] == p
        assert len(self.hash_page) == len(self.page_hash)
        for p in cached:
            assert p in self.page_hash
