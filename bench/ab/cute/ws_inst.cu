// The warp-specialized kernel's two tile configs (fp16 and bf16, head_dim 128 and 64), instantiated
// alone for the CuTe experiment's SASS comparison (compare.sh): built once with the PTX wrappers
// of wgmma.cuh and once with -DTREEATTN_WS_CUTE (mma_cute.cuh).
#include "../../../src/kernels/sm90/kernel.cuh"

namespace treeattn::cuda_detail::sm90 {
#define TREEATTN_WS_INST(DT, HD, CLS) \
  template __global__ void decode_ws_kernel<DType::DT, HD, CLS, KvDType::kSame>(const KernelParams);
TREEATTN_WS_INST(kFloat16, 128, 1)
TREEATTN_WS_INST(kFloat16, 128, 2)
TREEATTN_WS_INST(kBFloat16, 128, 2)
TREEATTN_WS_INST(kFloat16, 64, 2)
}  // namespace treeattn::cuda_detail::sm90
