// Online softmax of the decode kernels on the m16n8 C-fragment layout of a score tile S (a warp's
// 16 rows; a thread holds rows g and g + 8 of columns 8 n + 2 t4, 8 n + 2 t4 + 1), in the exp2
// domain: the running max m is kept scaled (m = max(s) * scale_log2, scale_log2 > 0 keeps the
// order of the raw scores), and each p = 2^(s scale_log2 - m) is one FFMA and an ex2. Scores
// hidden by a mask word or past the item are -inf, so p = 0; a row that has seen nothing keeps
// m = -inf and uses 0 in the exponent (alpha = 0, p = 0). Shared by the mma.sync / wgmma kernel
// and the warp-specialized Hopper kernel.
#pragma once

#include <cstdint>

#include "ptx.cuh"

namespace treeattn::cuda_detail {

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

/// New running max of the thread's two rows over the raw scores of the tile (reduced over the
/// row's quad), the exponent offset m_use to subtract, and alpha = 2^(m_old - m_use), the factor
/// of the earlier O and l.
template <int NT_S>
__device__ __forceinline__ void online_max(const float (&s)[NT_S][4], float (&m_run)[2],
                                           float scale_log2, float (&m_use)[2], float (&alpha)[2]) {
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    float mx = -INFINITY;
#pragma unroll
    for (int n = 0; n < NT_S; ++n) mx = fmaxf(mx, fmaxf(s[n][2 * i], s[n][2 * i + 1]));
    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
    mx = fmaxf(m_run[i], mx * scale_log2);
    m_use[i] = mx == -INFINITY ? 0.f : mx;  // a row that saw nothing yet stays empty
    alpha[i] = fast_exp2(m_run[i] - m_use[i]);
    m_run[i] = mx;
  }
}

/// s <- p = 2^(s scale_log2 - m_use) in place; row_sum = the thread's sum of p per row.
template <int NT_S>
__device__ __forceinline__ void exp_scores(float (&s)[NT_S][4], const float (&m_use)[2],
                                           float scale_log2, float (&row_sum)[2]) {
  row_sum[0] = row_sum[1] = 0.f;
#pragma unroll
  for (int n = 0; n < NT_S; ++n) {
#pragma unroll
    for (int e = 0; e < 4; ++e) s[n][e] = fast_exp2(fmaf(s[n][e], scale_log2, -m_use[e >> 1]));
    row_sum[0] += s[n][0] + s[n][1];
    row_sum[1] += s[n][2] + s[n][3];
  }
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

/// l <- l alpha + row_sum and O <- O alpha for the thread's two rows.
template <int NT_O>
__device__ __forceinline__ void rescale_state(float (&o)[NT_O][4], float (&l_run)[2],
                                              const float (&alpha)[2], const float (&row_sum)[2]) {
#pragma unroll
  for (int i = 0; i < 2; ++i) l_run[i] = l_run[i] * alpha[i] + row_sum[i];
#pragma unroll
  for (int n = 0; n < NT_O; ++n) {
    o[n][0] *= alpha[0];
    o[n][1] *= alpha[0];
    o[n][2] *= alpha[1];
    o[n][3] *= alpha[1];
  }
}

}  // namespace treeattn::cuda_detail
