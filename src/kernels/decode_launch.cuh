// Thin launcher template: KernelParams + PlanLayout -> one attention launch per tile class with
// nonzero capacity (grid = (class capacity, kv heads / heads per CTA), dynamic shared memory from
// AttnConfig), then the merge (merge.cuh; grid = (query capacity, head blocks), its variant from
// the plan's merge counts) when the layout has partial slots. The
// grouped classes (kM64, kM128) up to head_dim 128 run the warp-specialized Hopper kernel
// (sm90/kernel.cuh) instead where grouped_kernel_for() says so (the set_grouped_kernel() setting,
// the device, and for kAuto the plan's counts in the layout; an fp8 KV cache too, converted by
// the ws producer). Included only by the generated
// src/kernels/inst_*.cu files.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <type_traits>

#include "decode_kernel.cuh"
#include "merge.cuh"
#include "sm90/kernel.cuh"

namespace treeattn::cuda_detail {

/// Launches `kernel` on `stream`, allowing programmatic dependent launch (PDL) on sm_90+ so that
/// consecutive kernels of a call overlap their launch and prologue with the previous kernel's
/// tail (the kernels order their writes with griddepcontrol.wait).
/// `cluster_x` > 1 launches clusters of that many CTAs along x (sm_90+; the caller checks).
template <typename Kernel, typename... Args>
cudaError_t launch_pdl_cluster(Kernel kernel, dim3 grid, dim3 block, int smem, cudaStream_t stream,
                               unsigned cluster_x, Args... args) {
  cudaLaunchConfig_t cfg{};
  cfg.gridDim = grid;
  cfg.blockDim = block;
  cfg.dynamicSmemBytes = static_cast<size_t>(smem);
  cfg.stream = stream;
  cudaLaunchAttribute attr[2];
  unsigned n = 0;
  if (device_supports_pdl()) {
    attr[n].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attr[n++].val.programmaticStreamSerializationAllowed = 1;
  }
  if (cluster_x > 1) {
    attr[n].id = cudaLaunchAttributeClusterDimension;
    attr[n].val.clusterDim.x = cluster_x;
    attr[n].val.clusterDim.y = 1;
    attr[n++].val.clusterDim.z = 1;
  }
  cfg.attrs = attr;
  cfg.numAttrs = n;
  return cudaLaunchKernelEx(&cfg, kernel, args...);
}
template <typename Kernel, typename... Args>
cudaError_t launch_pdl(Kernel kernel, dim3 grid, dim3 block, int smem, cudaStream_t stream,
                       Args... args) {
  return launch_pdl_cluster(kernel, grid, block, smem, stream, 1u, args...);
}

/// The warp-specialized kernel of grouped class kClass (1 or 2): grid (class capacity, kv heads).
template <DType kDType, int kHeadDim, int kClass, KvDType kKv>
Status launch_ws_class(const KernelParams& p, int64_t capacity, int kv_heads, cudaStream_t stream) {
  using C = sm90::WsConfig<kDType, kHeadDim, sm90::ws_tile_for_class(kClass), kKv>;
  auto* kernel = &sm90::decode_ws_kernel<kDType, kHeadDim, kClass, kKv>;
  // Once per instantiation: the shared-memory limit, and the registers ptxas gave a thread. The
  // setmaxnreg split (config.cuh) hands out exactly LAUNCH_REGS x THREADS registers; with fewer
  // allocated to the CTA, the consumers' setmaxnreg.inc would wait for ever, so refuse instead.
  static int num_regs = 0;
  static const cudaError_t attr_status = [&] {
    cudaError_t e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                         C::DYN_SMEM_BYTES);
    cudaFuncAttributes fa{};
    if (e == cudaSuccess) e = cudaFuncGetAttributes(&fa, kernel);
    num_regs = fa.numRegs;
    return e;
  }();
  cudaError_t err = attr_status;
  if (err == cudaSuccess && num_regs != C::LAUNCH_REGS) {
    char msg[128];
    std::snprintf(msg, sizeof msg,
                  "decode_ws_kernel has %d registers a thread, its register split needs %d: "
                  "not launched",
                  num_regs, C::LAUNCH_REGS);
    set_last_cuda_error(msg);
    return Status::kCudaError;
  }
  if (err == cudaSuccess)
    err = launch_pdl(kernel, dim3(static_cast<unsigned>(capacity), static_cast<unsigned>(kv_heads)),
                     dim3(C::THREADS), C::DYN_SMEM_BYTES, stream, p);
  if (err == cudaSuccess) err = cudaGetLastError();
  if (err != cudaSuccess) {
    set_last_cuda_error(cudaGetErrorString(err));
    return Status::kCudaError;
  }
  return Status::kOk;
}

template <DType kDType, int kHeadDim, int kClass, KvDType kKv>
Status launch_attention_class(const KernelParams& p, const PlanLayout& layout,
                              cudaStream_t stream) {
  using C = AttnConfig<kDType, kHeadDim, kClass, kKv>;
  const int64_t capacity = layout.class_items[plan_class(kClass)];
  if (capacity <= 0) return Status::kOk;
  const int kv_heads = layout.shape.num_kv_heads;
  if (capacity > 0x7fffffff || kv_heads > 65535) return Status::kUnsupported;
  if constexpr (tile::block_layout(kClass, kHeadDim)) {
    if (grouped_kernel_for(layout, static_cast<TileClass>(kClass)) ==
        GroupedKernel::kWarpSpecialized)
      return launch_ws_class<kDType, kHeadDim, kClass, kKv>(p, capacity, kv_heads, stream);
  }
  auto* kernel = &decode_attention_kernel<kDType, kHeadDim, kClass, kKv>;
  // Raise the dynamic shared-memory limit and read the occupancy once per instantiation
  // (thread-safe static init).
  static int resident = 0;
  static const cudaError_t attr_status = [&] {
    cudaError_t e =
        cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, C::SMEM_BYTES);
    if (e == cudaSuccess)
      e = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&resident, kernel, C::THREADS,
                                                        C::SMEM_BYTES);
    return e;
  }();
  if (attr_status != cudaSuccess) {
    set_last_cuda_error(cudaGetErrorString(attr_status));
    return Status::kCudaError;
  }
  int hpc = 1;  // KV heads per CTA: the head loop of the kM16 configs
  if (tile::head_loop(kClass)) {
    const int forced = kv_heads_per_cta_override();
    hpc = forced > 0
              ? std::min(forced, kv_heads)
              : heads_per_cta(layout.m16_items_planned, kv_heads, device_sm_count(), resident);
  }
  const int64_t head_ctas = ceil_div(kv_heads, hpc);
  // the deep config's cluster pairs: two CTAs an item (from the planned counts: graph-safe)
  int pair = 0;
  if constexpr (C::PAIR)
    pair = pair_m16() && device_supports_pdl() &&
                   tile::use_pair_m16(
                       layout.m16_items_planned * head_ctas, layout.class_items_planned[0],
                       layout.class_kv_tokens_planned[0], device_sm_count(), kHeadDim)
               ? 1
               : 0;
  if ((capacity << pair) > 0x7fffffff) return Status::kUnsupported;
  const dim3 grid(static_cast<unsigned>(capacity << pair), static_cast<unsigned>(head_ctas));
  cudaError_t err = launch_pdl_cluster(kernel, grid, dim3(C::THREADS), C::SMEM_BYTES, stream,
                                       1u << pair, p, hpc, pair);
  if (err == cudaSuccess) err = cudaGetLastError();
  if (err != cudaSuccess) {
    set_last_cuda_error(cudaGetErrorString(err));
    return Status::kCudaError;
  }
  return Status::kOk;
}

template <DType kDType, int kHeadDim, KvDType kKv>
Status launch_plan_impl(const KernelParams& p, const PlanLayout& layout, cudaStream_t stream) {
  Status st = Status::kOk;
  auto one = [&](auto cls) {
    if (st == Status::kOk)
      st = launch_attention_class<kDType, kHeadDim, decltype(cls)::value, kKv>(p, layout, stream);
  };
  // from the planned count, not the capacity: the config (and so the bits) ignore the headroom
  const int64_t m16_ctas = layout.m16_items_planned * layout.shape.num_kv_heads;
  if (use_wide_m16(m16_ctas, device_sm_count())) {
    if (short_m16() &&
        tile::use_short_m16(layout.class_items_planned[0], layout.class_kv_tokens_planned[0]))
      one(std::integral_constant<int, tile::kConfigShort>{});
    else
      one(std::integral_constant<int, 0>{});
  } else {
    one(std::integral_constant<int, 3>{});
  }
  one(std::integral_constant<int, 1>{});
  one(std::integral_constant<int, 2>{});
  if (st != Status::kOk) return st;
  if (layout.slots > 0 && layout.queries > 0) {
    if (layout.queries > 0x7fffffff) return Status::kUnsupported;
    // from the planned counts, not the capacity (as the kM16 config above)
    const bool deep = tile::use_deep_merge(layout.merge_queries_planned, layout.merge_slots_planned,
                                           layout.num_qo_heads, kHeadDim, device_sm_count());
    const int per =
        tile::merge_heads_per_cta(kHeadDim, deep ? tile::kMergeSplitDeep : tile::kMergeSplitWide);
    const dim3 grid(static_cast<unsigned>(layout.queries),
                    static_cast<unsigned>((layout.num_qo_heads + per - 1) / per));
    auto merge = [&](auto split, auto half) {
      return launch_pdl(
          &decode_merge_kernel<kDType, kHeadDim, decltype(split)::value, decltype(half)::value>,
          grid, dim3(kMergeThreads), 0, stream, p);
    };
    using Deep = std::integral_constant<int, tile::kMergeSplitDeep>;
    using Wide = std::integral_constant<int, tile::kMergeSplitWide>;
    using Half = std::true_type;
    using Full = std::false_type;
    cudaError_t err = deep ? (p.half_partials ? merge(Deep{}, Half{}) : merge(Deep{}, Full{}))
                           : (p.half_partials ? merge(Wide{}, Half{}) : merge(Wide{}, Full{}));
    if (err == cudaSuccess) err = cudaGetLastError();
    if (err != cudaSuccess) {
      set_last_cuda_error(cudaGetErrorString(err));
      return Status::kCudaError;
    }
  }
  return Status::kOk;
}

}  // namespace treeattn::cuda_detail
