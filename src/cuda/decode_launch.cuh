// Thin launcher template: KernelParams + PlanLayout -> one attention launch per tile class with
// nonzero capacity (grid = (class capacity, kv heads), dynamic shared memory from AttnConfig),
// then the merge over the query capacity when the layout has partial slots. Included only by the
// generated src/cuda/inst_*.cu files.
#pragma once

#include <cuda_runtime.h>

#include <type_traits>

#include "decode_kernel.cuh"

namespace treeattn::cuda_detail {

template <DType kDType, int kHeadDim, int kClass>
Status launch_attention_class(const KernelParams& p, const PlanLayout& layout,
                              cudaStream_t stream) {
  using C = AttnConfig<kDType, kHeadDim, kClass>;
  const int64_t capacity = layout.class_items[kClass];
  if (capacity <= 0) return Status::kOk;
  if (capacity > 0x7fffffff || layout.shape.num_kv_heads > 65535) return Status::kUnsupported;
  auto* kernel = &decode_attention_kernel<kDType, kHeadDim, kClass>;
  // Raise the dynamic shared-memory limit once per instantiation (thread-safe static init).
  static const cudaError_t attr_status =
      cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, C::SMEM_BYTES);
  if (attr_status != cudaSuccess) {
    set_last_cuda_error(cudaGetErrorString(attr_status));
    return Status::kCudaError;
  }
  const dim3 grid(static_cast<unsigned>(capacity),
                  static_cast<unsigned>(layout.shape.num_kv_heads));
  kernel<<<grid, C::THREADS, C::SMEM_BYTES, stream>>>(p);
  const cudaError_t err = cudaGetLastError();
  if (err != cudaSuccess) {
    set_last_cuda_error(cudaGetErrorString(err));
    return Status::kCudaError;
  }
  return Status::kOk;
}

template <DType kDType, int kHeadDim>
Status launch_plan_impl(const KernelParams& p, const PlanLayout& layout, cudaStream_t stream) {
  Status st = Status::kOk;
  auto one = [&](auto cls) {
    if (st == Status::kOk)
      st = launch_attention_class<kDType, kHeadDim, decltype(cls)::value>(p, layout, stream);
  };
  one(std::integral_constant<int, 0>{});
  one(std::integral_constant<int, 1>{});
  one(std::integral_constant<int, 2>{});
  if (st != Status::kOk) return st;
  if (layout.slots > 0 && layout.queries > 0) {
    if (layout.queries > 0x7fffffff) return Status::kUnsupported;
    decode_merge_kernel<kDType, kHeadDim>
        <<<static_cast<unsigned>(layout.queries), kMergeThreads, 0, stream>>>(p);
    const cudaError_t err = cudaGetLastError();
    if (err != cudaSuccess) {
      set_last_cuda_error(cudaGetErrorString(err));
      return Status::kCudaError;
    }
  }
  return Status::kOk;
}

}  // namespace treeattn::cuda_detail
