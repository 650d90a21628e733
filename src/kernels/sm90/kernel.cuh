// The warp-specialized Hopper (sm_90a) attention kernel of the grouped tile classes (kM64, kM128;
// head_dim 64 and 128): one CTA per (item, KV head), 3 warpgroups (config.cuh). After the
// mbarriers are set up, the producer warpgroup gives registers up (setmaxnreg) and fills the
// stages (producer.cuh); the consumer warpgroups take registers and run the mainloop
// (mainloop.cuh: the Q copy, then the rounds), then the epilogue (epilogue.cuh). No CTA-wide
// barrier after the setup.
// Semantics as the other attention kernel (decode_kernel.cuh): rows past the item and tail tokens
// hidden, masked items with their skip, final output or partials, exp2-domain softmax, PDL, and
// an fp8 KV cache (converted by the producer; K scale in the logit scale, V scale in the epilogue).
// Outside the sm_90a device pass the body traps; the launcher only picks the kernel where the
// sm_90a code runs (ws_kernels_available()).
#pragma once

#include "../timeline.cuh"
#include "config.cuh"
#include "epilogue.cuh"
#include "mainloop.cuh"
#include "producer.cuh"

namespace treeattn::cuda_detail::sm90 {

template <DType kDType, int kHeadDim, int kClass, KvDType kKv>
__global__ void __launch_bounds__(
    WsConfig<kDType, kHeadDim, ws_tile_for_class(kClass), kKv>::THREADS, 1)
    decode_ws_kernel(const KernelParams p) {
#if TREEATTN_WGMMA
  using C = WsConfig<kDType, kHeadDim, ws_tile_for_class(kClass), kKv>;
  __shared__ alignas(8) uint64_t bar_mem[C::STAGES * C::BARS_PER_STAGE];
  pdl_launch_dependents();
  const DeviceItem item = p.items[p.class_item_off[kClass] + static_cast<int>(blockIdx.x)];
  // capacity launched, the plan's items of the class ended: wait like every CTA, so that this
  // grid's end still means its predecessor's end (the merge and the next call rely on the chain)
  if (item.num_rows == 0) {
    pdl_wait();
    return;
  }
  extern __shared__ __align__(128) unsigned char smem_raw[];
  unsigned char* smem = smem_raw + ((1024 - (smem_u32(smem_raw) & 1023)) & 1023);
  const uint32_t s_base = smem_u32(smem);
  const PipelineBars<C::STAGES> bars{smem_u32(bar_mem)};
  const int tid = threadIdx.x;
  if (tid == 0) {
    for (int s = 0; s < C::STAGES; ++s) {
      mbar_init(bars.full_k(s), C::PRODUCER_THREADS);
      mbar_init(bars.full_v(s), C::PRODUCER_THREADS);
      mbar_init(bars.empty_k(s), C::TILE_CONSUMER_WARPS);
      mbar_init(bars.empty_v(s), C::TILE_CONSUMER_WARPS);
    }
  }
  __syncthreads();
  const int kv_head = static_cast<int>(blockIdx.y);
  if (tid >= C::CONSUMER_THREADS) {
    setmaxnreg_dec<C::PRODUCER_REGS>();
    produce<C>(p, item, kv_head, s_base, bars, tid - C::CONSUMER_THREADS);
  } else {
    setmaxnreg_inc<C::CONSUMER_REGS>();
    // broadcast from lane 0: the compiler then knows the warpgroup index is warp-uniform
    const int cw = __shfl_sync(0xffffffffu, tid / C::WG_THREADS, 0);
    if (item.kv_tokens > 0) copy_q_tile<C>(p, item, kv_head, s_base, tid);
    ConsumerState<C> st;
    consume<C>(p, item, s_base, reinterpret_cast<const uint64_t*>(smem + C::MASK_OFF), bars, cw,
               tid, st);
    epilogue<C>(p, item, kv_head, smem, cw, tid, st);
  }
#else
  __trap();
#endif
}

}  // namespace treeattn::cuda_detail::sm90
