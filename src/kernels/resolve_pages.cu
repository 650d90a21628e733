// The page-resolve kernel (resolve_pages.h): fills the entries of an uploaded plan's page ids that
// the host left as labels with page ids read from an engine's device block table.
#include <algorithm>

#include "resolve_pages.h"

namespace treeattn::cuda_detail {
namespace {

__global__ void resolve_pages_kernel(int32_t* page_ids, const int2* pairs, int32_t n,
                                     const int32_t* table, int32_t num_pages) {
  for (int32_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
    const int2 pr = pairs[i];
    const int32_t id = table[pr.y];
    // an id outside the cache would send the attention kernels outside it: page 0 instead
    page_ids[pr.x] = (id >= 0 && id < num_pages) ? id : 0;
  }
  // The attention kernels read page ids before griddepcontrol.wait; they may start as soon as
  // every CTA of this grid has exited, so its writes are made visible before it exits.
  __threadfence();
}

}  // namespace

cudaError_t launch_resolve_pages(int32_t* page_ids, const int32_t* pairs, int32_t n,
                                 const int32_t* table, int32_t num_pages, cudaStream_t stream) {
  if (n <= 0) return cudaSuccess;
  constexpr int kThreads = 256;
  const int blocks = static_cast<int>(std::min<int64_t>((n + kThreads - 1) / kThreads, 1024));
  resolve_pages_kernel<<<blocks, kThreads, 0, stream>>>(
      page_ids, reinterpret_cast<const int2*>(pairs), n, table, num_pages);
  return cudaGetLastError();
}

}  // namespace treeattn::cuda_detail
