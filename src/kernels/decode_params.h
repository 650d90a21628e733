// Internal: the parameter block every decode kernel receives (plain host/device data) and the
// per-(dtype, head_dim, KV type) launcher declared here and defined in the generated instantiation
// files src/kernels/inst_*.cu.
#pragma once

#include <cstdint>

#include "treeattn/kernels/decode.h"
#include "treeattn/plan/plan.h"
#include "treeattn/plan/tile_policy.h"

namespace treeattn::cuda_detail {

/// Everything a kernel reads: the user's tensors, the uploaded plan metadata (pointers into the
/// workspace at the layout's offsets) and derived scalars. Strides are in elements.
struct KernelParams {
  const void* q;
  int64_t q_stride_query, q_stride_head;
  const void* k;
  const void* v;
  int64_t page_stride, slot_stride, head_stride;
  const float* k_scale;  ///< fp8 KV: device scalar (nullptr = 1), folded into the logit scale
  const float* v_scale;  ///< fp8 KV: device scalar (nullptr = 1), applied to the output
  void* out;
  int64_t o_stride_query, o_stride_head;
  float* lse;               ///< optional, natural log
  const DeviceItem* items;  ///< class c's items from class_item_off[c] (an empty item ends it)
  const int32_t* rows;      ///< int32 pairs (query, slot)
  const DeviceRange* ranges;
  const int32_t* page_ids;
  const int4*
      records;  ///< kM16 item slot j's record (DeviceRecordHead) at records + j * record_int4
  int32_t record_int4;  ///< 16-byte words of a record (PlanLayout::record_bytes / 16)
  const uint64_t* masks;
  const int32_t* merge_indptr;
  const int32_t* merge_slots;
  float* partial_o;       ///< [slots, num_qo_heads, head_dim], fp32 or (half_partials) dtype
  float* partial_lse;     ///< [slots, num_qo_heads], natural log
  int32_t half_partials;  ///< partial_o holds dtype elements (PartialPrecision::kHalf)
  int32_t num_qo_heads, group, page_size;
  int32_t page_shift;  ///< log2(page_size) when it is a power of two, else -1
  float scale_log2;    ///< sm_scale * log2(e): logits are kept in the exp2 domain
  int32_t class_item_off[kNumTileClasses];  ///< PlanLayout::class_item_off
  uint64_t* timeline;           ///< DecodeArgs::timeline: per-CTA phase stamps; nullptr = off
  int64_t timeline_merge_base;  ///< timeline record of merge CTA 0 (layout.items x kv heads)
};

// The tile policy (configs, tile sizes, warps, wide/deep and heads-per-CTA rules) lives in
// treeattn/plan/tile_policy.h, shared with the cost model.
using tile::heads_per_cta;
using tile::kNumKernelConfigs;
using tile::kv_tile;
using tile::num_stages;
using tile::plan_class;
using tile::slab_row_bits;
using tile::use_wide_m16;
using tile::warp_tokens;
using tile::warps_m;
using tile::warps_n;

/// Launches every attention class with nonzero capacity, then the merge when layout.slots > 0.
/// Defined per (dtype, head_dim, KV type) in the generated src/kernels/inst_*.cu files.
template <DType kDType, int kHeadDim, KvDType kKv>
Status launch_plan(const KernelParams& p, const PlanLayout& layout, cudaStream_t stream);
#define TREEATTN_DECLARE_LAUNCH_PLAN(DT, HD)                                               \
  template <>                                                                              \
  Status launch_plan<DT, HD, KvDType::kSame>(const KernelParams&, const PlanLayout&,       \
                                             cudaStream_t);                                \
  template <>                                                                              \
  Status launch_plan<DT, HD, KvDType::kFloat8E4M3>(const KernelParams&, const PlanLayout&, \
                                                   cudaStream_t);                          \
  template <>                                                                              \
  Status launch_plan<DT, HD, KvDType::kFloat8E5M2>(const KernelParams&, const PlanLayout&, \
                                                   cudaStream_t);
TREEATTN_DECLARE_LAUNCH_PLAN(DType::kFloat16, 64)
TREEATTN_DECLARE_LAUNCH_PLAN(DType::kFloat16, 128)
TREEATTN_DECLARE_LAUNCH_PLAN(DType::kFloat16, 256)
TREEATTN_DECLARE_LAUNCH_PLAN(DType::kBFloat16, 64)
TREEATTN_DECLARE_LAUNCH_PLAN(DType::kBFloat16, 128)
TREEATTN_DECLARE_LAUNCH_PLAN(DType::kBFloat16, 256)
#undef TREEATTN_DECLARE_LAUNCH_PLAN

/// True when the current device is sm_90+ (programmatic dependent launch); cached per device.
bool device_supports_pdl();

/// Multiprocessor count of the current device (cached per device; 132 if unknown).
int device_sm_count();

/// True when the current device is sm_90 and this binary holds the sm_90a code of the
/// warp-specialized kernels (src/kernels/sm90/); cached per device.
bool ws_kernels_available();

/// Records a CUDA error string for last_cuda_error() (decode.cu).
void set_last_cuda_error(const char* msg);

}  // namespace treeattn::cuda_detail
