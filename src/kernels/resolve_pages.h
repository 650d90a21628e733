// launch_resolve_pages: the kernel behind DevicePlan::resolve_pages
// (include/treeattn/kernels/device_plan.h), declared for device_plan.cc.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace treeattn::cuda_detail {

/// page_ids[pairs[2i]] = table[pairs[2i + 1]] for i < n, an id outside [0, num_pages) written as
/// 0; launched without programmatic dependent launch, each thread fencing its writes, so that a
/// kernel launched after it (PDL or not) reads the ids it wrote. Returns the launch error.
cudaError_t launch_resolve_pages(int32_t* page_ids, const int32_t* pairs, int32_t n,
                                 const int32_t* table, int32_t num_pages, cudaStream_t stream);

}  // namespace treeattn::cuda_detail
