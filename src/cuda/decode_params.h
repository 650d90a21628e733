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

/// Tile policy (one place, host and device). Kernel configs: 0 = kM16 "wide", 1 = kM64,
/// 2 = kM128, 3 = kM16 "deep"; config 3 runs tile class kM16 too (plan_class()).
///  * kM16 items are decode-shaped (one query's heads, or a few queries). Two variants, chosen
///    per launch on the host from the layout's kM16 capacity x kv heads (graph-safe, no device
///    reads), see use_wide_m16():
///    - wide (config 0): 32-token KV tiles split over 2 warps (each its own online softmax over
///      16 tokens, merged in shared memory), 3 stages: 49 KB, 64 threads, 4 CTAs per SM. For
///      plans with thousands of short items, whose time is the chain of dependent loads (header
///      -> item -> range -> page id -> K/V): resident CTAs hide it.
///    - deep (config 3): 64-token tiles split over 4 warps, 3 stages: 100 KB, 128 threads, 2
///      CTAs per SM, 2 x 32 KB in flight per CTA. For plans with few, long items (split-KV
///      chunks sized for ~2 CTAs per SM), where bytes in flight per CTA set the speed.
///    Measured on H100 (bench/NOTES.md): wide alone lost up to 1.7x on few-long-item lines,
///    deep alone lost up to 1.6x on leaf-heavy lines.
///  * kM64 = 4 warps x 16 rows, kM128 = 8 warps x 16 rows: 64-token tiles for head_dim 64/128
///    (32 for 256), 3 stages (~98 KB for hd128: 2 CTAs per SM on H100, 1 on A100).
///    Rejected for now: 4 warps x 32 rows for kM128 (halves shared-memory reads of K/V but needs
///    128 fp32 accumulators per thread for hd128 and does not fit hd256); 128-token tiles.
constexpr int kNumKernelConfigs = 4;
constexpr int plan_class(int cfg) { return cfg == 3 ? 0 : cfg; }
constexpr int kv_tile(int cfg, int head_dim) { return cfg == 0 || head_dim == 256 ? 32 : 64; }
constexpr int warps_m(int cfg) { return cfg == 1 ? 4 : cfg == 2 ? 8 : 1; }
constexpr int warps_n(int cfg, int head_dim) {
  return cfg == 0   ? 2
         : cfg == 3 ? (kv_tile(cfg, head_dim) / 16 >= 4 ? 4 : kv_tile(cfg, head_dim) / 16)
                    : 1;
}
constexpr int num_stages(int) { return 3; }
/// Wide kM16 when the launch has more than 3 CTAs per SM (deep holds 2 per SM).
inline bool use_wide_m16(int64_t ctas, int num_sms) {
  return ctas > 3 * static_cast<int64_t>(num_sms);
}

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

/// True when the current device is sm_90+ (programmatic dependent launch); cached per device.
bool device_supports_pdl();

/// Multiprocessor count of the current device (cached per device; 132 if unknown).
int device_sm_count();

/// Records a CUDA error string for last_cuda_error() (launch.cu).
void set_last_cuda_error(const char* msg);

}  // namespace treeattn::cuda_detail
