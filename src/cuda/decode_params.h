// Internal: the parameter block every decode kernel receives (plain host/device data), the tile
// policy shared by host and device, and the per-(dtype, head_dim) launcher declared here and
// defined in the generated instantiation files src/cuda/inst_*.cu.
#pragma once

#include <cstdint>

#include "treeattn/kernels/decode.h"
#include "treeattn/plan/plan.h"

namespace treeattn::cuda_detail {

/// Everything a kernel reads: the user's tensors, the uploaded plan metadata (pointers into the
/// workspace at the layout's offsets) and derived scalars. Strides are in elements.
struct KernelParams {
  const void* q;
  int64_t q_stride_query, q_stride_head;
  const void* k;
  const void* v;
  int64_t page_stride, slot_stride, head_stride;
  void* out;
  int64_t o_stride_query, o_stride_head;
  float* lse;  ///< optional, natural log
  const DeviceHeader* header;
  const DeviceItem* items;
  const int32_t* rows;  ///< int32 pairs (query, slot)
  const DeviceRange* ranges;
  const int32_t* page_ids;
  const uint64_t* masks;
  const int32_t* merge_indptr;
  const int32_t* merge_slots;
  float* partial_o;    ///< [slots, num_qo_heads, head_dim]
  float* partial_lse;  ///< [slots, num_qo_heads], natural log
  int32_t num_qo_heads, group, page_size;
  float scale_log2;  ///< sm_scale * log2(e): logits are kept in the exp2 domain
};

/// Tile policy (one place, host and device).
///  * KV tile: 64 tokens for head_dim 64/128, 32 for 256 (K+V of one stage = 16/32/32 KB).
///    Rejected: 128-token tiles (one stage of hd128 would be 64 KB: 2 stages per CTA and 1 CTA
///    per SM); 32-token tiles for hd128 (half the bytes in flight per barrier).
///  * Rows: kM16 = 1 warp-row of 16 rows, the KV tile split along N over up to 4 warps (each its
///    own online softmax, merged in shared memory); kM64 = 4 warps x 16 rows; kM128 = 8 x 16.
///    Rejected for now: 4 warps x 32 rows for kM128 (halves shared-memory reads of K/V but needs
///    128 fp32 accumulators per thread for hd128 and does not fit hd256).
///  * 3-stage cp.async pipeline everywhere.
constexpr int kv_tile(int head_dim) { return head_dim == 256 ? 32 : 64; }
constexpr int warps_m(int cls) { return cls == 0 ? 1 : cls == 1 ? 4 : 8; }
constexpr int warps_n(int cls, int head_dim) {
  return cls != 0 ? 1 : (kv_tile(head_dim) / 16 >= 4 ? 4 : kv_tile(head_dim) / 16);
}
constexpr int kStages = 3;

/// Launches every attention class with nonzero capacity, then the merge when layout.slots > 0.
/// Defined per (dtype, head_dim) in the generated src/cuda/inst_*.cu files.
template <DType kDType, int kHeadDim>
Status launch_plan(const KernelParams& p, const PlanLayout& layout, cudaStream_t stream);
#define TREEATTN_DECLARE_LAUNCH_PLAN(DT, HD)                                  \
  template <>                                                                 \
  Status launch_plan<DT, HD>(const KernelParams& p, const PlanLayout& layout, \
                             cudaStream_t stream);
TREEATTN_DECLARE_LAUNCH_PLAN(DType::kFloat16, 64)
TREEATTN_DECLARE_LAUNCH_PLAN(DType::kFloat16, 128)
TREEATTN_DECLARE_LAUNCH_PLAN(DType::kFloat16, 256)
TREEATTN_DECLARE_LAUNCH_PLAN(DType::kBFloat16, 64)
TREEATTN_DECLARE_LAUNCH_PLAN(DType::kBFloat16, 128)
TREEATTN_DECLARE_LAUNCH_PLAN(DType::kBFloat16, 256)
#undef TREEATTN_DECLARE_LAUNCH_PLAN

/// Records a CUDA error string for last_cuda_error() (launch.cu).
void set_last_cuda_error(const char* msg);

}  // namespace treeattn::cuda_detail
