// The epilogue shared by the decode attention kernels (decode_kernel.cuh, sm90/epilogue.cuh) and
// the merge (merge.cuh): each warp stages its rows' online-softmax state (O, m, l) in shared
// memory, a kM16 cluster pair's second CTA merges its states into the first's, and the states of
// a row are merged and written as the final output (dtype + natural-log LSE) or a partial slot
// (fp32, or the dtype under PartialPrecision::kHalf); the stores of one 16-byte output or partial
// chunk, which the merge uses too.
#pragma once

#include <cstdint>

#include "decode_params.h"
#include "kernel_common.cuh"
#include "ptx.cuh"

namespace treeattn::cuda_detail {

/// Eight floats rounded to the dtype, packed in 16 bytes.
template <class Traits>
__device__ __forceinline__ uint4 pack8(const float (&o)[8]) {
  return make_uint4(Traits::pack(o[0], o[1]), Traits::pack(o[2], o[3]), Traits::pack(o[4], o[5]),
                    Traits::pack(o[6], o[7]));
}

/// Writes one 16-byte chunk (elements 8c .. 8c+7) of the final output of (query, qo head) in the
/// dtype, and its natural-log LSE from chunk 0 when the caller asked for LSEs.
template <class Traits>
__device__ __forceinline__ void store_output_chunk(const KernelParams& p, int query, int head,
                                                   int c, const float (&o)[8], float lse) {
  using T = typename Traits::T;
  T* dst = static_cast<T*>(p.out) + query * p.o_stride_query + head * p.o_stride_head + 8 * c;
  *reinterpret_cast<uint4*>(dst) = pack8<Traits>(o);
  if (p.lse != nullptr && c == 0) p.lse[query * p.num_qo_heads + head] = lse;
}

/// Element offset of the 8-element chunk c of (slot, head) in the partial outputs (in floats, or
/// in dtype elements under half_partials).
template <int HD>
__device__ __forceinline__ int64_t partial_offset(const KernelParams& p, int slot, int head,
                                                  int c) {
  return (static_cast<int64_t>(slot) * p.num_qo_heads + head) * HD + 8 * c;
}
/// Stores chunk c of (slot, head)'s partial output: 8 floats, or 8 dtype elements.
template <class Traits, int HD>
__device__ __forceinline__ void store_partial_chunk(const KernelParams& p, int slot, int head,
                                                    int c, const float (&o)[8]) {
  const int64_t off = partial_offset<HD>(p, slot, head, c);
  if (p.half_partials) {
    *reinterpret_cast<uint4*>(reinterpret_cast<typename Traits::T*>(p.partial_o) + off) =
        pack8<Traits>(o);
  } else {
    *reinterpret_cast<float4*>(p.partial_o + off) = make_float4(o[0], o[1], o[2], o[3]);
    *reinterpret_cast<float4*>(p.partial_o + off + 4) = make_float4(o[4], o[5], o[6], o[7]);
  }
}

/// Stages one warp's online-softmax state of its 16 rows in shared memory: the unnormalized O
/// (m16n8 C fragments, `o_rows` = the warp's first row, `pitch` floats a row), the running max m
/// (exp2 domain) and the row sums l, which are summed over the row's quad here. g = lane / 4,
/// t4 = lane % 4.
template <int NT_O>
__device__ __forceinline__ void stage_warp_state(float* o_rows, float* m_rows, float* l_rows,
                                                 int pitch, const float (&o)[NT_O][4],
                                                 const float (&m)[2], float (&l)[2], int g,
                                                 int t4) {
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    l[i] += __shfl_xor_sync(0xffffffffu, l[i], 1);
    l[i] += __shfl_xor_sync(0xffffffffu, l[i], 2);
  }
#pragma unroll
  for (int n = 0; n < NT_O; ++n) {
    const int col = 8 * n + 2 * t4;
    *reinterpret_cast<float2*>(o_rows + g * pitch + col) = make_float2(o[n][0], o[n][1]);
    *reinterpret_cast<float2*>(o_rows + (g + 8) * pitch + col) = make_float2(o[n][2], o[n][3]);
  }
  if (t4 == 0) {
    m_rows[g] = m[0];
    m_rows[g + 8] = m[1];
    l_rows[g] = l[0];
    l_rows[g + 8] = l[1];
  }
}

/// The second CTA of a cluster pair (decode_kernel.cuh) hands its half of an item to the first:
/// the NS staged states of each packed row (as write_staged_rows reads them) merged into one, O
/// unnormalized against the merged max m (exp2 domain) with the summed l, stored into the first
/// CTA's peer region (O at shared::cluster address `peer_o`, [ROWS][PITCH] floats; m and l at
/// `peer_m` and `peer_l`, [ROWS] each). A row whose states saw nothing gets m = -inf, l = 0, O = 0;
/// a NaN score's NaN l carries on. One thread per (packed row, 8-element chunk); the caller
/// publishes the stores with the cluster barrier's arrive.release.
template <int HD, int NS, int ROWS, int PITCH>
__device__ __forceinline__ void push_merged_state(const float* sO, const float* sM, const float* sL,
                                                  uint32_t peer_o, uint32_t peer_m, uint32_t peer_l,
                                                  int packed_rows, int tid, int nthreads) {
  constexpr int CPT = HD / 8;
  for (int idx = tid; idx < ROWS * CPT; idx += nthreads) {
    const int pr = idx / CPT, c = idx - pr * CPT;
    if (pr >= packed_rows) break;  // idx grows with pr
    float m_max = -INFINITY;
#pragma unroll
    for (int w = 0; w < NS; ++w) m_max = fmaxf(m_max, sM[w * ROWS + pr]);
    float o[8] = {0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f};
    float l_tot = 0.f;
    if (m_max != -INFINITY) {
#pragma unroll
      for (int w = 0; w < NS; ++w) {
        const float wgt = fast_exp2(sM[w * ROWS + pr] - m_max);
        l_tot += wgt * sL[w * ROWS + pr];
        const float* src = sO + (w * ROWS + pr) * PITCH + 8 * c;
        const float4 x0 = *reinterpret_cast<const float4*>(src);
        const float4 x1 = *reinterpret_cast<const float4*>(src + 4);
        o[0] += wgt * x0.x, o[1] += wgt * x0.y, o[2] += wgt * x0.z, o[3] += wgt * x0.w;
        o[4] += wgt * x1.x, o[5] += wgt * x1.y, o[6] += wgt * x1.z, o[7] += wgt * x1.w;
      }
    }
    const uint32_t dst = peer_o + 4 * (pr * PITCH + 8 * c);
    st_cluster_f4(dst, o[0], o[1], o[2], o[3]);
    st_cluster_f4(dst + 16, o[4], o[5], o[6], o[7]);
    if (c == 0) {
      st_cluster_f32(peer_m + 4 * pr, m_max);
      st_cluster_f32(peer_l + 4 * pr, l_tot);
    }
  }
}

/// The merge of one row's NT states (max m_w in the exp2 domain, row sum l_w): each state's factor
/// f_w = 2^(m_w - m_max) * o_scale / l_tot, so that the row's output is sum_w f_w O_w, and the
/// row's natural-log LSE. A row whose states saw nothing gets f = 0 and lse = -inf; a NaN score
/// (a NaN l_tot) gives NaN factors and a NaN LSE.
template <int NT>
__device__ __forceinline__ float merge_row_factors(const float (&m)[NT], const float (&l)[NT],
                                                   float o_scale, float (&f)[NT]) {
  float m_max = -INFINITY;
#pragma unroll
  for (int w = 0; w < NT; ++w) m_max = fmaxf(m_max, m[w]);
#pragma unroll
  for (int w = 0; w < NT; ++w) f[w] = 0.f;
  float lse_nat = -INFINITY;
  if (m_max != -INFINITY) {
    float l_tot = 0.f;
    float wgt[NT];
#pragma unroll
    for (int w = 0; w < NT; ++w) {
      wgt[w] = fast_exp2(m[w] - m_max);
      l_tot += wgt[w] * l[w];
    }
    if (l_tot > 0.f || l_tot != l_tot) {
      const float inv = o_scale / l_tot;
#pragma unroll
      for (int w = 0; w < NT; ++w) f[w] = wgt[w] * inv;
      lse_nat = (m_max + log2f(l_tot)) * kLn2;
    }
  }
  return lse_nat;
}

/// Epilogue write of an item's packed rows from NS staged states per row (state w of row pr:
/// sO[(w * ROWS + pr) * PITCH], sM[w * ROWS + pr], sL[w * ROWS + pr]) and, with PEER, one more:
/// the second CTA of a cluster pair's merged state (push_merged_state) in this CTA's peer region
/// (pO[pr * PITCH], pM[pr], pL[pr]), which is only read. The states are merged in order (w = 0,
/// 1, ..., then the peer's; deterministic; merge_row_factors), normalized, and written as the
/// final output (dtype + natural-log LSE) or the row's partial slot. The merged O is multiplied by
/// `o_scale` (an fp8 cache's V scale; 1 otherwise). Item row r's query and slot are sRows[r] when
/// the caller staged them in shared memory (stage_item_rows, or a kM16 item's record), else they
/// are read from the plan's rows. The NTHREADS threads (`tid`) split the (row, 8-element chunk)
/// pairs, in one of two ways:
///  * up to two pairs a thread (the kM16 configs): one pass, each pair computing its row's
///    factors itself;
///  * more (kM64, kM128, the warp-specialized kernel: 8 or 16 a thread): two passes, so that the
///    per-row arithmetic (exponentials, the division, the logarithm) runs once per row and the
///    pairs' loop is a fixed trip count, unrolled by two so that pairs overlap (a full unroll
///    costs more in instruction fetches of its cold code than it saves):
///     1. one thread per row: the factors into sM[w][pr] (the peer's into sL[0][pr]) and the LSE
///        into sL[PEER ? 1 : 0][pr], in place of what it read; then `sync()` (the caller's
///        barrier over the NTHREADS threads);
///     2. one thread per pair: O = sum_w f_w O_w, stored with the LSE from chunk 0.
/// Both paths evaluate the same expressions in the same order (as the one-pass write did before).
template <class Traits, int HD, int NS, int ROWS, int PITCH, int NTHREADS, bool PEER = false,
          class Sync>
__device__ __forceinline__ void write_staged_rows(
    const KernelParams& p, const DeviceItem& item, int kv_head, const float* sO, float* sM,
    float* sL, int tid, Sync sync, float o_scale = 1.f, const int2* sRows = nullptr,
    const float* pO = nullptr, const float* pM = nullptr, const float* pL = nullptr) {
  constexpr int CPT = HD / 8;
  constexpr int NT = PEER ? NS + 1 : NS;  // states per row
  constexpr int ITER = (ROWS * CPT + NTHREADS - 1) / NTHREADS;
  constexpr bool kTwoPass = ITER > 2;
  static_assert(!kTwoPass || !PEER || NS >= 2, "the peer's factor and the LSE take two l slots");
  float* const sLse = sL + (PEER ? ROWS : 0);  // [ROWS], the LSEs of pass 1
  const int group = p.group;
  const int packed_rows = item.num_rows * group;
  // the row's NT states' m and l
  const auto row_states = [&](int pr, float(&m)[NT], float(&l)[NT]) {
#pragma unroll
    for (int w = 0; w < NT; ++w) {
      m[w] = w < NS ? sM[w * ROWS + pr] : pM[pr];
      l[w] = w < NS ? sL[w * ROWS + pr] : pL[pr];
    }
  };
  // where pass 1 keeps state w's factor of row pr: in place of its m, the peer's in place of
  // state 0's l
  const auto factor_slot = [&](int w, int pr) -> float& {
    return w < NS ? sM[w * ROWS + pr] : sL[pr];
  };
  // chunk c of row pr: O = sum_w f_w O_w (f from `factor(w)`; none read when lse is -inf),
  // rounded and stored with the LSE
  const auto write_chunk = [&](int pr, int r, int c, float lse_nat, auto factor) {
    float o[8] = {0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f};
    if (lse_nat != -INFINITY) {
#pragma unroll
      for (int w = 0; w < NT; ++w) {
        const float* src = w < NS ? sO + (w * ROWS + pr) * PITCH + 8 * c : pO + pr * PITCH + 8 * c;
        const float4 x0 = *reinterpret_cast<const float4*>(src);
        const float4 x1 = *reinterpret_cast<const float4*>(src + 4);
        const float f = factor(w);
        o[0] += f * x0.x, o[1] += f * x0.y, o[2] += f * x0.z, o[3] += f * x0.w;
        o[4] += f * x1.x, o[5] += f * x1.y, o[6] += f * x1.z, o[7] += f * x1.w;
      }
    }
    const int h = pr - r * group;
    const int2 qs = sRows != nullptr ? sRows[r]
                                     : make_int2(p.rows[2 * (item.row_begin + r)],
                                                 p.rows[2 * (item.row_begin + r) + 1]);
    const int query = qs.x, slot = qs.y;
    const int head = kv_head * group + h;
    if (slot == kFinalOutput) {
      store_output_chunk<Traits>(p, query, head, c, o, lse_nat);
    } else {
      store_partial_chunk<Traits, HD>(p, slot, head, c, o);
      if (c == 0) p.partial_lse[static_cast<int64_t>(slot) * p.num_qo_heads + head] = lse_nat;
    }
  };
  if constexpr (!kTwoPass) {
    for (int idx = tid; idx < ROWS * CPT; idx += NTHREADS) {
      const int pr = idx / CPT, c = idx - pr * CPT;
      if (pr >= packed_rows) break;  // idx grows with pr
      float m[NT], l[NT], f[NT];
      row_states(pr, m, l);
      const float lse_nat = merge_row_factors<NT>(m, l, o_scale, f);
      write_chunk(pr, pr / group, c, lse_nat, [&](int w) { return f[w]; });
    }
  } else {
    // ---- pass 1: per row
    for (int pr = tid; pr < packed_rows; pr += NTHREADS) {
      float m[NT], l[NT], f[NT];
      row_states(pr, m, l);
      const float lse_nat = merge_row_factors<NT>(m, l, o_scale, f);
#pragma unroll
      for (int w = 0; w < NT; ++w) factor_slot(w, pr) = f[w];
      sLse[pr] = lse_nat;
    }
    sync();
    // ---- pass 2: per (row, chunk)
    const SmallDivider div(static_cast<uint32_t>(group));  // packed row -> item row
#pragma unroll 2
    for (int k = 0; k < ITER; ++k) {
      const int idx = tid + k * NTHREADS;
      const int pr = idx / CPT, c = idx - pr * CPT;
      if ((ROWS * CPT % NTHREADS == 0 || idx < ROWS * CPT) && pr < packed_rows)
        write_chunk(pr, static_cast<int>(div(static_cast<uint32_t>(pr))), c, sLse[pr],
                    [&](int w) { return factor_slot(w, pr); });
    }
  }
}

}  // namespace treeattn::cuda_detail
