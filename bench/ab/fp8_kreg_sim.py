#!/usr/bin/env python3
"""CPU check of the fp8 kM16 K-in-registers path (decode_kernel.cuh, AttnConfig::KREG): a model of
one warp's Q K^T under the kernel's index math. Run: python3 bench/ab/fp8_kreg_sim.py"""
# The model: the KREG Q K^T of one warp: loader placement (k8_swz), ldmatrix.x4 semantics, the
# fp8 pair split into b0/b1, the permuted Q fragments (8-byte loads from the swizzled dtype Q tile),
# and mma.m16n8k16 semantics; checks S == Q K^T for every (row, token).
import random
def k8_swz(r, c, HD):
    x = (r & 7) if HD == 128 else ((r >> 1) & 3)
    return r * HD + ((c ^ x) << 4)
def qswz(r, c, HD):  # dtype Q tile: rows of HD*2 bytes, chunk c (8 elems) XOR (r & 7)
    return r * HD * 2 + ((c ^ (r & 7)) << 4)
for HD in (64, 128):
  for BN, wtok in ((32, 0), (32, 16), (64, 48)):
    Q = [[random.randint(-9, 9) for _ in range(HD)] for _ in range(16)]
    K = [[random.randint(-9, 9) for _ in range(HD)] for _ in range(BN)]
    s8 = {}  # byte address -> value (one fp8 element per byte)
    LC = HD // 16
    for j in range(BN):
      for lc in range(LC):
        base = k8_swz(j, lc, HD)
        for b in range(16): s8[base + b] = K[j][16 * lc + b]
    sq = {}  # byte address -> (value) for 2-byte elements: store at even addresses
    for r in range(16):
      for c in range(HD // 8):
        base = qswz(r, c, HD)
        for e in range(8): sq[base + 2 * e] = Q[r][8 * c + e]
    KS = HD // 16
    S = [[0] * 16 for _ in range(16)]
    # q fragments per thread
    def qfrag(t, ks):
      g, t4 = t >> 2, t & 3
      off = 8 * (t4 & 1)
      def ld2(addr):  # 8 bytes = 4 halves -> (x: halves 0,1), (y: halves 2,3)
        return (sq[addr], sq[addr + 2]), (sq[addr + 4], sq[addr + 6])
      r0 = ld2(qswz(g, 2 * ks + (t4 >> 1), HD) + off)
      r1 = ld2(qswz(g + 8, 2 * ks + (t4 >> 1), HD) + off)
      return [r0[0], r1[0], r0[1], r1[1]]
    for ks in range(0, KS, 2):
      # ldmatrix.x4: lane l gives the row address of matrix l>>3, row l&7
      addr = {}
      for l in range(32):
        mi = l >> 3
        krow = wtok + 8 * (mi & 1) + (l & 7)
        addr[(mi, l & 7)] = k8_swz(krow, ks + (mi >> 1), HD)
      regs = {}
      for t in range(32):
        for m in range(4):
          a = addr[(m, t >> 2)] + 4 * (t & 3)
          regs[(t, m)] = [s8[a + i] for i in range(4)]  # bytes 0..3
      for h in range(2):
        for n in range(2):
          # mma: D[i][j] += sum_k A[i][k] B[k][j]; fragments per thread define A and B
          A = [[None] * 16 for _ in range(16)]; B = [[None] * 8 for _ in range(16)]
          for t in range(32):
            g, t4 = t >> 2, t & 3
            a = qfrag(t, ks + h)
            A[g][2 * t4], A[g][2 * t4 + 1] = a[0]
            A[g + 8][2 * t4], A[g + 8][2 * t4 + 1] = a[1]
            A[g][2 * t4 + 8], A[g][2 * t4 + 9] = a[2]
            A[g + 8][2 * t4 + 8], A[g + 8][2 * t4 + 9] = a[3]
            w = regs[(t, 2 * h + n)]
            B[2 * t4][g], B[2 * t4 + 1][g] = w[0], w[1]
            B[2 * t4 + 8][g], B[2 * t4 + 9][g] = w[2], w[3]
          for i in range(16):
            for j in range(8):
              S[i][8 * n + j] += sum(A[i][k] * B[k][j] for k in range(16))
    ref = [[sum(Q[i][d] * K[wtok + j][d] for d in range(HD)) for j in range(16)] for i in range(16)]
    assert S == ref, (HD, BN, wtok)
    # bank groups of each ldmatrix phase (8 lanes): 16-byte units within a 128-byte line distinct
    for ks in range(0, KS, 2):
      for m in range(4):
        units = {(k8_swz(wtok + 8 * (m & 1) + r, ks + (m >> 1), HD) % 128) // 16 for r in range(8)}
        assert len(units) == 8, ("bank conflict", HD, ks, m)
    print("ok", HD, BN, wtok)
