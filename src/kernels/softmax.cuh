// Online softmax of the decode kernels on the m16n8 C-fragment layout of a score tile S (a warp's
// 16 rows; a thread holds rows g and g + 8 of columns 8 n + 2 t4, 8 n + 2 t4 + 1), in the exp2
// domain: the running max m is kept scaled (m = max(s) * scale_log2, scale_log2 > 0 keeps the
// order of the raw scores), and each p = 2^(s scale_log2 - m) is one FFMA and an ex2. Scores
// hidden by a mask word or past the item are -inf, so p = 0; a row that has seen nothing keeps
// m = -inf and uses 0 in the exponent (p = 0; alpha = 0 when it first rescales).
// The warp-specialized kernel rescales lazily (kLazy): a warp keeps its rows' m while no row's tile
// max exceeds it by more than kRescaleSlack, so p <= 2^kRescaleSlack (no overflow in fp16 / bf16 P
// or fp32 O and l; P rounds as before, and O, l and m stay consistent, so the result is the same
// softmax) and the tiles after the first few skip the rescale of O. The thread's maxima and sums
// are reduced as trees (short dependency chains). Shared by the mma.sync / wgmma kernel and the
// warp-specialized Hopper kernel.
#pragma once

#include <cstdint>

#include "ptx.cuh"

namespace treeattn::cuda_detail {

/// How the rows `rows` (item-row bits of a warp's MMA slab) see a KV slice of N tokens whose mask
/// words are words[0, N), the lanes striding the words: any() (some row sees some token; else the
/// slice can be skipped) and full() (every row sees every token; then no score needs mask_scores:
/// a token past the item has a zero word), each a warp vote.
struct SliceSeen {
  bool lane_any = false, lane_full = true;
  __device__ __forceinline__ bool any() const { return __any_sync(0xffffffffu, lane_any); }
  __device__ __forceinline__ bool full() const { return __all_sync(0xffffffffu, lane_full); }
};
template <int N>
__device__ __forceinline__ SliceSeen slice_seen(const uint64_t* words, uint64_t rows, int lane) {
  SliceSeen s;
#pragma unroll
  for (int j = lane; j < N; j += 32) {
    const uint64_t seen = words[j] & rows;
    s.lane_any |= seen != 0;
    s.lane_full &= seen == rows;
  }
  return s;
}

/// Hides the scores whose token's mask word (words[8 n + 2 t4 + (e & 1)], the words of the
/// thread's columns) lacks the bit of the column's item row (mrow0 for row g, mrow1 for g + 8).
template <int NT_S>
__device__ __forceinline__ void mask_scores(float (&s)[NT_S][4], const uint64_t* words, int mrow0,
                                            int mrow1, int t4) {
#pragma unroll
  for (int n = 0; n < NT_S; ++n)
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const uint64_t word = words[8 * n + 2 * t4 + (e & 1)];
      s[n][e] = (word >> ((e >> 1) ? mrow1 : mrow0)) & 1ull ? s[n][e] : -INFINITY;
    }
}

/// Hides the scores of tokens at or past `kv_tokens`; `first_token` is the token of column 0.
template <int NT_S>
__device__ __forceinline__ void tail_scores(float (&s)[NT_S][4], int first_token, int kv_tokens,
                                            int t4) {
#pragma unroll
  for (int n = 0; n < NT_S; ++n)
#pragma unroll
    for (int e = 0; e < 4; ++e)
      if (first_token + 8 * n + 2 * t4 + (e & 1) >= kv_tokens) s[n][e] = -INFINITY;
}

/// How far (log2 units) a row's tile max may exceed its running max before the warp rescales.
inline constexpr float kRescaleSlack = 8.f;

/// f folded over v[0, N) as a balanced tree (depth log2 N instead of N); the result in v[0].
template <int N, class F>
__device__ __forceinline__ void tree_fold(float (&v)[N], F f) {
#pragma unroll
  for (int w = 1; w < N; w *= 2)
#pragma unroll
    for (int n = 0; n + w < N; n += 2 * w) v[n] = f(v[n], v[n + w]);
}

/// The tile max of the thread's two rows (reduced over the row's quad, scaled) and the new running
/// max m_run = max(m_run, tile max) of each row, with alpha = 2^(m_old - m_use), the factor of the
/// earlier O and l, and m_use the exponent offset to subtract (0 for a row that has seen nothing);
/// returns true. kLazy: only when some row of the warp exceeds its m_run by more than
/// kRescaleSlack; otherwise m_run stays, alpha = 1 and it returns false (warp-uniform).
template <int NT_S, bool kLazy>
__device__ __forceinline__ bool online_max(const float (&s)[NT_S][4], float (&m_run)[2],
                                           float scale_log2, float (&m_use)[2], float (&alpha)[2]) {
  float mx[2];
  bool grow = false;
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    float v[NT_S];
#pragma unroll
    for (int n = 0; n < NT_S; ++n) v[n] = fmaxf(s[n][2 * i], s[n][2 * i + 1]);
    tree_fold(v, [](float x, float y) { return fmaxf(x, y); });
    float m = fmaxf(v[0], __shfl_xor_sync(0xffffffffu, v[0], 1));
    m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, 2));
    mx[i] = m * scale_log2;
    grow |= mx[i] > m_run[i] + kRescaleSlack;  // -inf + slack = -inf: a first score grows
  }
  const bool rescale = !kLazy || __any_sync(0xffffffffu, grow);
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    if (rescale) {
      const float m = fmaxf(m_run[i], mx[i]);
      alpha[i] = fast_exp2(m_run[i] - (m == -INFINITY ? 0.f : m));
      m_run[i] = m;
    } else {
      alpha[i] = 1.f;
    }
    m_use[i] = m_run[i] == -INFINITY ? 0.f : m_run[i];  // a row that saw nothing yet stays empty
  }
  return rescale;
}

/// s <- p = 2^(s scale_log2 - m_use) in place; row_sum = the thread's sum of p per row.
template <int NT_S>
__device__ __forceinline__ void exp_scores(float (&s)[NT_S][4], const float (&m_use)[2],
                                           float scale_log2, float (&row_sum)[2]) {
  float sum0[NT_S], sum1[NT_S];
#pragma unroll
  for (int n = 0; n < NT_S; ++n) {
#pragma unroll
    for (int e = 0; e < 4; ++e) s[n][e] = fast_exp2(fmaf(s[n][e], scale_log2, -m_use[e >> 1]));
    sum0[n] = s[n][0] + s[n][1];
    sum1[n] = s[n][2] + s[n][3];
  }
  const auto add = [](float x, float y) { return x + y; };
  tree_fold(sum0, add);
  tree_fold(sum1, add);
  row_sum[0] = sum0[0];
  row_sum[1] = sum1[0];
}

/// P rounded to the dtype, column pairs packed: the A fragments of O += P V (k16 step kk is
/// {p[2 kk][0], p[2 kk][1], p[2 kk + 1][0], p[2 kk + 1][1]}).
template <class Traits, int NT_S>
__device__ __forceinline__ void pack_p(const float (&s)[NT_S][4], uint32_t (&p)[NT_S][2]) {
#pragma unroll
  for (int n = 0; n < NT_S; ++n) {
    p[n][0] = Traits::pack(s[n][0], s[n][1]);
    p[n][1] = Traits::pack(s[n][2], s[n][3]);
  }
}

/// l <- l alpha + row_sum for the thread's two rows, and O <- O alpha when online_max rescaled
/// (its result; alpha = 1 otherwise).
template <int NT_O>
__device__ __forceinline__ void rescale_state(float (&o)[NT_O][4], float (&l_run)[2],
                                              const float (&alpha)[2], const float (&row_sum)[2],
                                              bool rescale) {
#pragma unroll
  for (int i = 0; i < 2; ++i) l_run[i] = l_run[i] * alpha[i] + row_sum[i];
  if (!rescale) return;
#pragma unroll
  for (int n = 0; n < NT_O; ++n) {
    o[n][0] *= alpha[0];
    o[n][1] *= alpha[0];
    o[n][2] *= alpha[1];
    o[n][3] *= alpha[1];
  }
}

}  // namespace treeattn::cuda_detail
