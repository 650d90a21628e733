// Paged tree-attention kernel (one CTA per (work item, KV head)) and the per-query LSE merge
// kernel, as templates over (dtype, head_dim, tile class); instantiated by src/cuda/inst_*.cu.
//
// Attention kernel, per CTA:
//   packed rows  pr = r * group + h  <->  item row r (query rows[row_begin + r].query),
//                                        qo head kv_head * group + h
//   sQ  [ROWS][HD]           dtype, 16-byte chunks XOR-swizzled by (row & 7)
//   sK, sV [STAGES][BN][HD]  dtype, same swizzle; filled by cp.async (zero-fill past the item)
//   sMask [STAGES][BN]       uint64 mask word of each token's range (masked items only)
// Warp (wm, wn) owns packed rows [16 wm, 16 wm + 16) and tokens [wn BN/WN, (wn+1) BN/WN) of each
// KV tile; S = Q K^T and O += P V run on mma.sync m16n8k16 (fp32 accumulate), online softmax in
// the exp2 domain. The epilogue stages every warp's (O, m, l) in shared memory (aliasing the
// stages), merges the WN column warps, and writes the final output (dtype, + natural-log LSE) or
// the fp32 partial slot of each row.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

#include "decode_params.h"
#include "treeattn/common/attention_state.h"

namespace treeattn::cuda_detail {

constexpr float kLn2 = 0.69314718055994530942f;

template <DType kDType>
struct DTypeTraits;
template <>
struct DTypeTraits<DType::kFloat16> {
  using T = __half;
  using T2 = __half2;
  static __device__ __forceinline__ uint32_t pack(float a, float b) {
    __half2 h = __floats2half2_rn(a, b);
    return *reinterpret_cast<uint32_t*>(&h);
  }
  static __device__ __forceinline__ float2 unpack(uint32_t u) {
    return __half22float2(*reinterpret_cast<__half2*>(&u));
  }
};
template <>
struct DTypeTraits<DType::kBFloat16> {
  using T = __nv_bfloat16;
  using T2 = __nv_bfloat162;
  static __device__ __forceinline__ uint32_t pack(float a, float b) {
    __nv_bfloat162 h = __floats2bfloat162_rn(a, b);
    return *reinterpret_cast<uint32_t*>(&h);
  }
  static __device__ __forceinline__ float2 unpack(uint32_t u) {
    return __bfloat1622float2(*reinterpret_cast<__nv_bfloat162*>(&u));
  }
};

// ---- PTX wrappers ------------------------------------------------------------------------------

__device__ __forceinline__ uint32_t smem_u32(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}
/// 16-byte global->shared copy; src_bytes = 0 zero-fills the destination.
__device__ __forceinline__ void cp_async16(uint32_t dst, const void* src, int src_bytes) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src),
               "r"(src_bytes));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}
__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}
__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t (&r)[4], uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}
/// D = A(16x16) B(16x8) + D, fp32 accumulate.
template <DType kDType>
__device__ __forceinline__ void mma16816(float (&d)[4], const uint32_t (&a)[4], uint32_t b0,
                                         uint32_t b1) {
  if constexpr (kDType == DType::kFloat16) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
        "{%8,%9}, {%0,%1,%2,%3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  } else {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
        "{%8,%9}, {%0,%1,%2,%3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  }
}
/// Programmatic dependent launch (sm_90+; no-ops on older targets). launch_dependents lets the
/// next kernel in the stream start early; wait blocks until the previous kernel finished and its
/// writes are visible. Every kernel here reads only plan metadata and q/k/v (written before the
/// first kernel of a call) before its wait, and writes only after it.
__device__ __forceinline__ void pdl_launch_dependents() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
#endif
}
__device__ __forceinline__ void pdl_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;\n" ::: "memory");
#endif
}

/// 2^x (ex2.approx.ftz: 2^-inf = +0).
__device__ __forceinline__ float fast_exp2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
  return y;
}

// ---- configuration -----------------------------------------------------------------------------

template <DType kDType, int kHeadDim, int kClass>
struct AttnConfig {
  static_assert(kHeadDim == 64 || kHeadDim == 128 || kHeadDim == 256, "head_dim");
  static_assert(kClass >= 0 && kClass < kNumKernelConfigs, "kernel config");
  using Traits = DTypeTraits<kDType>;
  using T = typename Traits::T;
  static constexpr int HD = kHeadDim;
  static constexpr int CPT = HD / 8;  ///< 16-byte chunks per row
  static constexpr int BN = kv_tile(kClass, HD);
  static constexpr int WM = warps_m(kClass);
  static constexpr int WN = warps_n(kClass, HD);
  static constexpr int ROWS = 16 * WM;
  static constexpr int BNW = BN / WN;  ///< tokens per warp per tile
  static constexpr int THREADS = 32 * WM * WN;
  static constexpr int STAGES = num_stages(kClass, HD);
  static_assert(STAGES >= 2, "pipeline");
  static constexpr bool Q_IN_REGS = HD <= 128;  ///< hd256 re-reads Q from shared memory
  /// The CTA walks several KV heads; every stage carries the Q rows of its tile's head.
  static constexpr bool HEAD_LOOP = tile::head_loop(kClass);
  static_assert(BNW % 16 == 0, "each warp needs whole k16 steps of P V");
  static_assert(THREADS % CPT == 0, "loader rows");
  static constexpr int ROWS_PER_PASS = THREADS / CPT;  ///< rows one loader pass covers
  static_assert(BN % ROWS_PER_PASS == 0 && ROWS % ROWS_PER_PASS == 0, "loader passes");
  static constexpr int Q_PASSES = ROWS / ROWS_PER_PASS;
  // shared memory (bytes)
  static constexpr int TILE_BYTES = BN * HD * 2;  ///< one of K or V, one stage
  static constexpr int STAGE_BYTES = 2 * TILE_BYTES;
  static constexpr int KV_BYTES = STAGES * STAGE_BYTES;
  static constexpr int Q_BYTES = ROWS * HD * 2;
  /// Q buffers: the head loop loads the next head's Q while the current head runs, into the one
  /// buffer once Q sits in registers, else into the other of two.
  static constexpr int NQ = HEAD_LOOP && !Q_IN_REGS ? 2 : 1;
  // Q with registers and one KV head per CTA aliases the last stage (first overwritten after Q
  // reached registers); otherwise it follows the stages.
  static constexpr bool Q_ALIASED = !HEAD_LOOP && Q_IN_REGS;
  static_assert(!Q_ALIASED || Q_BYTES <= STAGE_BYTES, "sQ alias");
  static constexpr int Q_OFF = Q_ALIASED ? (STAGES - 1) * STAGE_BYTES : KV_BYTES;
  static constexpr int MASK_OFF = Q_ALIASED ? KV_BYTES : KV_BYTES + NQ * Q_BYTES;
  static constexpr int SMEM_BYTES = MASK_OFF + STAGES * BN * 8;
  // Epilogue: the token warps wn > 0 publish (O, m, l) for warp wn = 0 to merge, in the stage of
  // the head's last tile. O_PITCH = HD + 8 keeps the float2 stores conflict-free.
  static_assert(HEAD_LOOP || WN == 1, "one token warp outside the head loop");
  static constexpr int O_PITCH = HD + 8;
  static constexpr int EPI_O_BYTES = (WN - 1) * ROWS * O_PITCH * 4;
  static constexpr int EPI_BYTES = EPI_O_BYTES + 2 * (WN - 1) * ROWS * 4;
  static_assert(EPI_BYTES <= STAGE_BYTES, "the epilogue must fit a stage");
  static_assert(SMEM_BYTES <= 163 * 1024, "must fit an A100 (164 KB per SM)");
};

/// Byte offset of 16-byte chunk `c` of row `r` in a swizzled [rows][HD] dtype tile.
template <int HD>
__device__ __forceinline__ uint32_t swz(int r, int c) {
  return static_cast<uint32_t>(r * HD * 2 + ((c ^ (r & 7)) << 4));
}

/// Forward-only cursor over an item's ranges: token position -> element offset of its page slot.
struct RangeCursor {
  const DeviceRange* ranges;
  int idx, num;
  DeviceRange cur;
  __device__ __forceinline__ void init(const DeviceRange* r, int n) {
    ranges = r;
    num = n;
    idx = 0;
    if (n > 0) cur = r[0];
  }
  /// Requires pos to be non-decreasing between calls and < the item's kv_tokens.
  __device__ __forceinline__ void seek(int pos) {
    while (pos >= cur.token_begin + cur.len && idx + 1 < num) cur = ranges[++idx];
  }
};

// ---- attention kernel --------------------------------------------------------------------------

/// Where this thread's two output rows (packed rows 16 wm + g and + 8) go: query, merge slot (or
/// kFinalOutput) and in-group head; live = the row exists in the item.
struct OutRows {
  int query[2], slot[2], head_in_group[2];
  bool live[2];
};

/// Epilogue of one (item, KV head) once every warp holds its (O, m, l) in registers: the token
/// warps wn > 0 publish theirs in shared memory at `epi` (float [WN-1][ROWS][O_PITCH] O, then
/// [WN-1][ROWS] m and l), warp wn = 0 merges them into its own and writes its rows' final output
/// (dtype, + natural-log LSE) or fp32 partial slot straight from registers. With WN > 1 it
/// contains CTA barriers and every thread must call it.
template <class C>
__device__ __forceinline__ void write_head_output(const KernelParams& p, int kv_head,
                                                  const OutRows& rows, unsigned char* epi,
                                                  float (&o_acc)[C::HD / 8][4], float (&m_run)[2],
                                                  float (&l_run)[2]) {
  using T = typename C::T;
  using Traits = typename C::Traits;
  constexpr int HD = C::HD, WN = C::WN, NT_O = HD / 8;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int wm = warp / WN, wn = warp % WN, g = lane >> 2, t4 = lane & 3;
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    l_run[i] += __shfl_xor_sync(0xffffffffu, l_run[i], 1);
    l_run[i] += __shfl_xor_sync(0xffffffffu, l_run[i], 2);
  }
  float scale[2], lse_nat[2];
  if constexpr (WN > 1) {
    float* sO = reinterpret_cast<float*>(epi);                   // [WN-1][ROWS][O_PITCH]
    float* sM = reinterpret_cast<float*>(epi + C::EPI_O_BYTES);  // [WN-1][ROWS]
    float* sL = sM + (WN - 1) * C::ROWS;                         // [WN-1][ROWS]
    __syncthreads();  // every warp is done reading the stage
    if (wn > 0) {
      float* o_w = sO + ((wn - 1) * C::ROWS + 16 * wm) * C::O_PITCH;
#pragma unroll
      for (int n = 0; n < NT_O; ++n) {
        const int col = 8 * n + 2 * t4;
        *reinterpret_cast<float2*>(o_w + g * C::O_PITCH + col) =
            make_float2(o_acc[n][0], o_acc[n][1]);
        *reinterpret_cast<float2*>(o_w + (g + 8) * C::O_PITCH + col) =
            make_float2(o_acc[n][2], o_acc[n][3]);
      }
      if (t4 == 0) {
#pragma unroll
        for (int i = 0; i < 2; ++i) {
          sM[(wn - 1) * C::ROWS + 16 * wm + g + 8 * i] = m_run[i];
          sL[(wn - 1) * C::ROWS + 16 * wm + g + 8 * i] = l_run[i];
        }
      }
    }
    __syncthreads();
    if (wn > 0) return;
      // warp wn = 0: rescale its own state and add the others' in place
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      const int row = 16 * wm + g + 8 * i;
      float m_max = m_run[i];
#pragma unroll
      for (int w = 1; w < WN; ++w) m_max = fmaxf(m_max, sM[(w - 1) * C::ROWS + row]);
      scale[i] = 0.f;
      lse_nat[i] = -INFINITY;
      float wgt[WN];
      float l_tot = 0.f;
      if (m_max != -INFINITY) {
        wgt[0] = fast_exp2(m_run[i] - m_max);
        l_tot = wgt[0] * l_run[i];
#pragma unroll
        for (int w = 1; w < WN; ++w) {
          wgt[w] = fast_exp2(sM[(w - 1) * C::ROWS + row] - m_max);
          l_tot += wgt[w] * sL[(w - 1) * C::ROWS + row];
        }
      }
      if (l_tot > 0.f) {
        const float inv = 1.f / l_tot;
        lse_nat[i] = (m_max + log2f(l_tot)) * kLn2;
        scale[i] = 1.f;
#pragma unroll
        for (int n = 0; n < NT_O; ++n) {
          const float* src = sO + row * C::O_PITCH + 8 * n + 2 * t4;
          float x0 = wgt[0] * o_acc[n][2 * i], x1 = wgt[0] * o_acc[n][2 * i + 1];
#pragma unroll
          for (int w = 1; w < WN; ++w) {
            const float2 y = *reinterpret_cast<const float2*>(src + (w - 1) * C::ROWS * C::O_PITCH);
            x0 += wgt[w] * y.x;
            x1 += wgt[w] * y.y;
          }
          o_acc[n][2 * i] = x0 * inv;
          o_acc[n][2 * i + 1] = x1 * inv;
        }
      }
    }
  } else {
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      const bool some = m_run[i] != -INFINITY && l_run[i] > 0.f;
      scale[i] = some ? 1.f / l_run[i] : 0.f;
      lse_nat[i] = some ? (m_run[i] + log2f(l_run[i])) * kLn2 : -INFINITY;
    }
  }
  // rows g and g + 8: 8 x NT_O 2-element pieces per row over the quad
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    if (!rows.live[i]) continue;
    const int head = kv_head * p.group + rows.head_in_group[i];
    const float sc = scale[i];
    if (rows.slot[i] == kFinalOutput) {
      T* dst = static_cast<T*>(p.out) + rows.query[i] * p.o_stride_query + head * p.o_stride_head +
               2 * t4;
#pragma unroll
      for (int n = 0; n < NT_O; ++n)
        *reinterpret_cast<uint32_t*>(dst + 8 * n) =
            Traits::pack(o_acc[n][2 * i] * sc, o_acc[n][2 * i + 1] * sc);
      if (p.lse != nullptr && t4 == 0) p.lse[rows.query[i] * p.num_qo_heads + head] = lse_nat[i];
    } else {
      const int64_t sh = static_cast<int64_t>(rows.slot[i]) * p.num_qo_heads + head;
      float* dst = p.partial_o + sh * HD + 2 * t4;
#pragma unroll
      for (int n = 0; n < NT_O; ++n)
        *reinterpret_cast<float2*>(dst + 8 * n) =
            make_float2(o_acc[n][2 * i] * sc, o_acc[n][2 * i + 1] * sc);
      if (t4 == 0) p.partial_lse[sh] = lse_nat[i];
    }
  }
}

/// One CTA per (work item, group of `heads_per_cta` KV heads; 1 outside the head loop).
template <DType kDType, int kHeadDim, int kClass>
__global__ void __launch_bounds__(AttnConfig<kDType, kHeadDim, kClass>::THREADS)
    decode_attention_kernel(const KernelParams p, const int heads_per_cta) {
  using C = AttnConfig<kDType, kHeadDim, kClass>;
  using T = typename C::T;
  using Traits = typename C::Traits;
  constexpr int HD = C::HD, BN = C::BN, CPT = C::CPT, BNW = C::BNW, WN = C::WN;

  pdl_launch_dependents();
  const DeviceHeader& hdr = *p.header;
  constexpr int kPlanClass = plan_class(kClass);
  const int item_idx = hdr.class_begin[kPlanClass] + static_cast<int>(blockIdx.x);
  if (item_idx >= hdr.class_begin[kPlanClass + 1]) return;  // capacity launched, real count smaller
  const DeviceItem item = p.items[item_idx];
  const int group = p.group;
  const int kv_heads = p.num_qo_heads / group;
  const int hpc = C::HEAD_LOOP ? heads_per_cta : 1;
  const int kv_head0 = static_cast<int>(blockIdx.y) * hpc;
  const int num_heads = min(hpc, kv_heads - kv_head0);
  if (num_heads <= 0) return;
  const int packed_rows = item.num_rows * group;
  const bool masked = item.mask_begin >= 0;

  extern __shared__ __align__(128) unsigned char smem[];
  const uint32_t s_base = smem_u32(smem);
  uint64_t* sMask = reinterpret_cast<uint64_t*>(smem + C::MASK_OFF);
  auto q_buffer = [&](int head) { return s_base + C::Q_OFF + (head % C::NQ) * C::Q_BYTES; };

  const int tid = threadIdx.x;
  const int warp = tid >> 5, lane = tid & 31;
  const int wm = warp / WN, wn = warp % WN;
  const int g = lane >> 2, t4 = lane & 3;

  // ---- Q rows of this thread's loader slots: element offset of (query, in-group head h), or -1
  // for rows past the item. Q of KV head kh adds kh * group * q_stride_head.
  const T* gq = static_cast<const T*>(p.q);
  int64_t q_row_off[C::Q_PASSES];
#pragma unroll
  for (int i = 0; i < C::Q_PASSES; ++i) {
    const int pr = i * C::ROWS_PER_PASS + tid / CPT;
    q_row_off[i] = -1;
    if (pr < packed_rows) {
      const int r = pr / group, h = pr - r * group;
      const int query = p.rows[2 * (item.row_begin + r)];
      q_row_off[i] = query * p.q_stride_query + h * p.q_stride_head + (tid % CPT) * 8;
    }
  }
  auto load_q = [&](int head) {  // head: index among the CTA's heads
    const uint32_t sQ = q_buffer(head);
    const int64_t head_off = static_cast<int64_t>(kv_head0 + head) * group * p.q_stride_head;
#pragma unroll
    for (int i = 0; i < C::Q_PASSES; ++i) {
      const int pr = i * C::ROWS_PER_PASS + tid / CPT;
      const bool live = q_row_off[i] >= 0;
      cp_async16(sQ + swz<HD>(pr, tid % CPT), live ? gq + q_row_off[i] + head_off : gq,
                 live ? 16 : 0);
    }
  };

  // ---- KV loader: each thread owns chunk column tid % CPT of tokens tid / CPT + k*ROWS_PER_PASS.
  // Tiles are numbered f = head * num_tiles + tile over the CTA's heads; load_tile is called for
  // f = 0, 1, 2, ... in order (ld_head, ld_tile follow f).
  const T* gk = static_cast<const T*>(p.k);
  const T* gv = static_cast<const T*>(p.v);
  RangeCursor cursor;
  const int num_tiles = (item.kv_tokens + BN - 1) / BN;
  const int total_tiles = num_tiles * num_heads;
  int ld_head = 0, ld_tile = 0;

  auto load_tile = [&](int stage) {
    const uint32_t sK = s_base + stage * C::STAGE_BYTES;
    const uint32_t sV = sK + C::TILE_BYTES;
    const int c = tid % CPT;
    const int64_t head_off = (kv_head0 + ld_head) * p.head_stride + c * 8;
    if (ld_tile == 0) cursor.init(p.ranges + item.range_begin, item.num_ranges);
#pragma unroll
    for (int j0 = 0; j0 < BN; j0 += C::ROWS_PER_PASS) {
      const int j = j0 + tid / CPT;
      const int pos = ld_tile * BN + j;
      int bytes = 0;
      int64_t off = 0;
      uint64_t mword = 0;
      if (pos < item.kv_tokens) {
        cursor.seek(pos);
        const int in_range = cursor.cur.page_offset + (pos - cursor.cur.token_begin);
        const int page_local = in_range / p.page_size;
        const int slot = in_range - page_local * p.page_size;
        const int page = p.page_ids[cursor.cur.page_begin + page_local];
        off = page * p.page_stride + slot * p.slot_stride + head_off;
        bytes = 16;
        if (masked) mword = p.masks[item.mask_begin + cursor.idx];
      }
      cp_async16(sK + swz<HD>(j, c), gk + off, bytes);
      cp_async16(sV + swz<HD>(j, c), gv + off, bytes);
      if (masked && c == 0) sMask[stage * BN + j] = mword;
    }
    if (++ld_tile == num_tiles) ld_tile = 0, ++ld_head;
  };

  // prologue: Q of the first head with tile 0 in group 0, then tiles 1..STAGES-2
  load_q(0);
#pragma unroll
  for (int s = 0; s < C::STAGES - 1; ++s) {
    if (s < total_tiles) load_tile(s);
    cp_async_commit();
  }

  // ---- per-warp state
  const bool warp_active = 16 * wm < packed_rows;
  constexpr int NT_S = BNW / 8;  // n8 tiles of S per warp
  constexpr int NT_O = HD / 8;   // n8 tiles of O
  constexpr int KS = HD / 16;    // k16 steps of Q K^T
  float o_acc[NT_O][4];
  float m_run[2], l_run[2];
  uint32_t q_frag[C::Q_IN_REGS ? KS : 1][4];
  // item row of this thread's two packed rows (mask bit), clamped for padding rows
  const int prow0 = 16 * wm + g;
  const int mrow0 = min(prow0 / group, kMaxMaskedRows - 1);
  const int mrow1 = min((prow0 + 8) / group, kMaxMaskedRows - 1);
  OutRows out_rows;
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    const int pr = prow0 + 8 * i;
    out_rows.live[i] = pr < packed_rows;
    const int r = out_rows.live[i] ? pr / group : 0;
    out_rows.head_in_group[i] = pr - r * group;
    out_rows.query[i] = out_rows.live[i] ? p.rows[2 * (item.row_begin + r)] : 0;
    out_rows.slot[i] = out_rows.live[i] ? p.rows[2 * (item.row_begin + r) + 1] : 0;
  }
  const float scale_log2 = p.scale_log2;
  auto reset_state = [&]() {
#pragma unroll
    for (int n = 0; n < NT_O; ++n)
#pragma unroll
      for (int e = 0; e < 4; ++e) o_acc[n][e] = 0.f;
    m_run[0] = m_run[1] = -INFINITY;
    l_run[0] = l_run[1] = 0.f;
  };
  auto load_q_frag = [&](uint32_t sQ) {
    if (warp_active) {
#pragma unroll
      for (int ks = 0; ks < KS; ++ks) {
        const int mi = lane >> 3;
        ldmatrix_x4(q_frag[ks],
                    sQ + swz<HD>(16 * wm + (lane & 7) + (mi & 1) * 8, 2 * ks + (mi >> 1)));
      }
    }
  };
  reset_state();

  int cur_head = 0, cur_tile = 0;
  for (int f = 0; f < total_tiles; ++f) {
    const int stage = f % C::STAGES;
    const uint32_t sK = s_base + stage * C::STAGE_BYTES;
    const uint32_t sV = sK + C::TILE_BYTES;
    const uint32_t sQ = q_buffer(cur_head);
    cp_async_wait<C::STAGES - 2>();
    __syncthreads();
    if (cur_tile == 0) {
      if constexpr (C::Q_IN_REGS) load_q_frag(sQ);
      if constexpr (C::HEAD_LOOP) {
        reset_state();
        // The next head's Q, in its own cp.async group ahead of the next tile's: the wait of the
        // next iteration covers it even when this head has a single tile.
        if (cur_head + 1 < num_heads) {
          if constexpr (C::NQ == 1) __syncthreads();  // every warp has its Q fragments
          load_q(cur_head + 1);
          cp_async_commit();
        }
      } else if constexpr (C::Q_ALIASED) {
        __syncthreads();  // sQ aliases the stage the next prefetch overwrites
      }
    }
    {
      const int next = f + C::STAGES - 1;
      if (next < total_tiles) load_tile(next % C::STAGES);
      cp_async_commit();
    }

    if (warp_active) {
      const int wtok = wn * BNW;  // warp's first token within the tile

      // S = Q K^T  [16 x BNW]
      float s_acc[NT_S][4];
#pragma unroll
      for (int n = 0; n < NT_S; ++n)
#pragma unroll
        for (int e = 0; e < 4; ++e) s_acc[n][e] = 0.f;
#pragma unroll
      for (int ks = 0; ks < KS; ++ks) {
        uint32_t a[4];
        if constexpr (C::Q_IN_REGS) {
#pragma unroll
          for (int e = 0; e < 4; ++e) a[e] = q_frag[ks][e];
        } else {
          const int mi = lane >> 3;
          ldmatrix_x4(a, sQ + swz<HD>(16 * wm + (lane & 7) + (mi & 1) * 8, 2 * ks + (mi >> 1)));
        }
#pragma unroll
        for (int np = 0; np < NT_S / 2; ++np) {
          uint32_t b[4];
          const int mi = lane >> 3;
          ldmatrix_x4(b,
                      sK + swz<HD>(wtok + 16 * np + (lane & 7) + (mi >> 1) * 8, 2 * ks + (mi & 1)));
          mma16816<kDType>(s_acc[2 * np], a, b[0], b[1]);
          mma16816<kDType>(s_acc[2 * np + 1], a, b[2], b[3]);
        }
      }

      // scale into the exp2 domain; hide tokens past the item or outside the row's mask
      const int tile_tok = cur_tile * BN;
      const bool check = masked || (tile_tok + BN > item.kv_tokens);
#pragma unroll
      for (int n = 0; n < NT_S; ++n) {
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          float s = s_acc[n][e] * scale_log2;
          if (check) {
            const int j = wtok + 8 * n + 2 * t4 + (e & 1);
            bool visible;
            if (masked) {
              visible = (sMask[stage * BN + j] >> ((e >> 1) ? mrow1 : mrow0)) & 1ull;
            } else {
              visible = tile_tok + j < item.kv_tokens;
            }
            if (!visible) s = -INFINITY;
          }
          s_acc[n][e] = s;
        }
      }

      // online softmax (rows g and g+8 of the warp)
      float m_use[2], alpha[2];
#pragma unroll
      for (int i = 0; i < 2; ++i) {
        float mx = m_run[i];
#pragma unroll
        for (int n = 0; n < NT_S; ++n) mx = fmaxf(mx, fmaxf(s_acc[n][2 * i], s_acc[n][2 * i + 1]));
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
        m_use[i] = mx == -INFINITY ? 0.f : mx;  // a row that saw nothing yet stays empty
        alpha[i] = fast_exp2(m_run[i] - m_use[i]);
        m_run[i] = mx;
      }
      float row_sum[2] = {0.f, 0.f};
      uint32_t p_frag[NT_S][2];  // P rounded to dtype, pairs of columns
#pragma unroll
      for (int n = 0; n < NT_S; ++n) {
        const float p0 = fast_exp2(s_acc[n][0] - m_use[0]);
        const float p1 = fast_exp2(s_acc[n][1] - m_use[0]);
        const float p2 = fast_exp2(s_acc[n][2] - m_use[1]);
        const float p3 = fast_exp2(s_acc[n][3] - m_use[1]);
        row_sum[0] += p0 + p1;
        row_sum[1] += p2 + p3;
        p_frag[n][0] = Traits::pack(p0, p1);
        p_frag[n][1] = Traits::pack(p2, p3);
      }
#pragma unroll
      for (int i = 0; i < 2; ++i) l_run[i] = l_run[i] * alpha[i] + row_sum[i];
#pragma unroll
      for (int n = 0; n < NT_O; ++n) {
        o_acc[n][0] *= alpha[0];
        o_acc[n][1] *= alpha[0];
        o_acc[n][2] *= alpha[1];
        o_acc[n][3] *= alpha[1];
      }

      // O += P V   [16 x HD], k = the warp's BNW tokens
#pragma unroll
      for (int kk = 0; kk < BNW / 16; ++kk) {
        const uint32_t a[4] = {p_frag[2 * kk][0], p_frag[2 * kk][1], p_frag[2 * kk + 1][0],
                               p_frag[2 * kk + 1][1]};
#pragma unroll
        for (int dp = 0; dp < NT_O / 2; ++dp) {
          uint32_t b[4];
          const int mi = lane >> 3;
          ldmatrix_x4_trans(
              b, sV + swz<HD>(wtok + 16 * kk + (lane & 7) + (mi & 1) * 8, 2 * dp + (mi >> 1)));
          mma16816<kDType>(o_acc[2 * dp], a, b[0], b[1]);
          mma16816<kDType>(o_acc[2 * dp + 1], a, b[2], b[3]);
        }
      }
    }

    if constexpr (C::HEAD_LOOP) {
      // The head's last tile: its token warps merge in this stage (no load targets it before the
      // next iteration's barrier) and warp wn = 0 writes the rows.
      if (cur_tile == num_tiles - 1) {
        pdl_wait();  // the previous kernel (e.g. the last call's merge) may still read our outputs
        write_head_output<C>(p, kv_head0 + cur_head, out_rows, smem + stage * C::STAGE_BYTES, o_acc,
                             m_run, l_run);
      }
    }
    if (++cur_tile == num_tiles) cur_tile = 0, ++cur_head;
  }

  if (C::HEAD_LOOP && total_tiles > 0) return;
  // ---- epilogue outside the head loop, or every head of an item without KV tokens (empty state)
  cp_async_wait<0>();
  pdl_wait();
  __syncthreads();
  for (int h = 0; h < num_heads; ++h) {
    if (warp_active || WN > 1)
      write_head_output<C>(p, kv_head0 + h, out_rows, smem, o_acc, m_run, l_run);
  }
}

// ---- merge kernel
// --------------------------------------------------------------------------------

constexpr int kMergeThreads = 256;

/// One CTA per query (grid = layout capacity, exits past header.num_queries); queries without
/// merge slots were written by the attention kernel. Each thread owns (head, 8-element chunk)
/// pairs. Two passes over the query's slots, both in slot order (deterministic, no atomics):
/// the max LSE, then the exp-weighted sum of the partial outputs. The loads of one pass do not
/// depend on each other, so they overlap (a fold through merge_weights chained every slot's
/// loads behind the previous slot's exp/log: ~0.6 us per slot on an H100). Empty partials
/// (lse = -inf) get weight 0 and are never read; a query whose partials are all empty gets the
/// empty state (o = 0, lse = -inf), never NaN.
template <DType kDType, int kHeadDim>
__global__ void __launch_bounds__(kMergeThreads) decode_merge_kernel(const KernelParams p) {
  using Traits = DTypeTraits<kDType>;
  using T = typename Traits::T;
  constexpr int CPT = kHeadDim / 8;
  pdl_launch_dependents();
  pdl_wait();  // partials come from the attention kernels before us
  const int query = blockIdx.x;
  if (query >= p.header->num_queries) return;
  const int begin = p.merge_indptr[query], end = p.merge_indptr[query + 1];
  if (begin >= end) return;
  const int pairs = p.num_qo_heads * CPT;
  for (int idx = threadIdx.x; idx < pairs; idx += kMergeThreads) {
    const int head = idx / CPT, c = idx - head * CPT;
    float m = -INFINITY;
#pragma unroll 4
    for (int i = begin; i < end; ++i)
      m = fmaxf(m, p.partial_lse[static_cast<int64_t>(p.merge_slots[i]) * p.num_qo_heads + head]);
    float o[8] = {0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f};
    float lse = -INFINITY;
    if (m != -INFINITY) {
      float sum = 0.f;
#pragma unroll 4
      for (int i = begin; i < end; ++i) {
        const int64_t sh = static_cast<int64_t>(p.merge_slots[i]) * p.num_qo_heads + head;
        const float w = expf(p.partial_lse[sh] - m);  // exp(-inf) = 0 for empty partials
        if (w != 0.f) {
          const float* src = p.partial_o + sh * kHeadDim + 8 * c;
          const float4 x0 = *reinterpret_cast<const float4*>(src);
          const float4 x1 = *reinterpret_cast<const float4*>(src + 4);
          const float xs[8] = {x0.x, x0.y, x0.z, x0.w, x1.x, x1.y, x1.z, x1.w};
          sum += w;
#pragma unroll
          for (int e = 0; e < 8; ++e) o[e] += w * xs[e];
        }
      }
      const float inv = 1.f / sum;  // sum >= 1: the max slot has weight 1
#pragma unroll
      for (int e = 0; e < 8; ++e) o[e] *= inv;
      lse = m + logf(sum);
    }
    T* dst = static_cast<T*>(p.out) + query * p.o_stride_query + head * p.o_stride_head + 8 * c;
    uint4 packed;
    packed.x = Traits::pack(o[0], o[1]);
    packed.y = Traits::pack(o[2], o[3]);
    packed.z = Traits::pack(o[4], o[5]);
    packed.w = Traits::pack(o[6], o[7]);
    *reinterpret_cast<uint4*>(dst) = packed;
    if (p.lse != nullptr && c == 0) p.lse[query * p.num_qo_heads + head] = lse;
  }
}

}  // namespace treeattn::cuda_detail
