// Epilogue of the warp-specialized Hopper kernel: the consumers stage their online-softmax
// states in shared memory (over the stages and Q, which no one reads any more) and write the
// item's rows: the final output (dtype + natural-log LSE) or partial slots (PartialPrecision),
// through the shared write_staged_rows (../epilogue.cuh). Under SPLIT_KV the two consumers hold
// two states of the same 64 rows (alternate KV tiles), merged per row in consumer order; otherwise
// consumer w's state is rows [64 w, 64 w + 64).
#pragma once

#include "../epilogue.cuh"
#include "config.cuh"
#include "mainloop.cuh"

namespace treeattn::cuda_detail::sm90 {

template <class C>
__device__ __forceinline__ void epilogue(const KernelParams& p, const DeviceItem& item, int kv_head,
                                         unsigned char* smem, int cw, int ctid,
                                         ConsumerState<C>& st) {
  const int wq = (ctid >> 5) & 3, lane = ctid & 31;
  pdl_wait();  // the previous kernel (e.g. the last call's merge) may still read our outputs
  // Both consumers are past their last wgmma, so the stages and Q are free, and every tile's
  // copies have landed (each was waited for by its consumers).
  named_bar_sync(C::kConsumersBar, C::CONSUMER_THREADS);
  float* sO = reinterpret_cast<float*>(smem);                            // [NS][ROWS_S][O_PITCH]
  float* sM = reinterpret_cast<float*>(smem + C::EPI_O_BYTES);           // [NS][ROWS_S]
  float* sL = sM + C::NS * C::ROWS_S;                                    // [NS][ROWS_S]
  const int first = (C::SPLIT_KV ? cw * C::ROWS_S : 64 * cw) + 16 * wq;  // the warp's rows
  stage_warp_state<C::NT_O>(sO + first * C::O_PITCH, sM + first, sL + first, C::O_PITCH, st.o, st.m,
                            st.l, lane >> 2, lane & 3);
  named_bar_sync(C::kConsumersBar, C::CONSUMER_THREADS);
  write_staged_rows<typename C::Traits, C::HD, C::NS, C::ROWS_S, C::O_PITCH, C::CONSUMER_THREADS>(
      p, item, kv_head, sO, sM, sL, ctid,
      [] { named_bar_sync(C::kConsumersBar, C::CONSUMER_THREADS); }, output_v_scale<C::KV8>(p));
}

}  // namespace treeattn::cuda_detail::sm90
