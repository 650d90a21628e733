// TA_HOST_DEVICE: marks the small inline functions that the host code and the CUDA kernels share
// (__host__ __device__ __forceinline__ under nvcc, plain inline elsewhere).
#pragma once

#if defined(__CUDACC__)
#define TA_HOST_DEVICE __host__ __device__ __forceinline__
#else
#define TA_HOST_DEVICE inline
#endif
