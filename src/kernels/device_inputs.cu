// DeviceInputs and fill_random_values(_fp8) (include/treeattn/kernels/device_inputs.h): the random
// input values written by grid-stride kernels (fp16/bf16, or fp8 K/V of a scaled cache), the
// buffers, and the poisoned run through DevicePlan.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cmath>
#include <stdexcept>
#include <string>

#include "treeattn/common/error.h"
#include "treeattn/kernels/device_inputs.h"

namespace treeattn {
namespace {

void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess)
    throw std::runtime_error(std::string("DeviceInputs: ") + what + ": " + cudaGetErrorString(e));
}

/// Encoders of the random values: fp16 / bf16 bits, or fp8 bits of value / scale.
struct Encode16 {
  bool bf16;
  __device__ uint16_t operator()(float x) const {
    return bf16 ? __bfloat16_as_ushort(__float2bfloat16_rn(x))
                : __half_as_ushort(__float2half_rn(x));
  }
};
struct EncodeFp8 {
  KvDType type;
  float scale;
  __device__ uint8_t operator()(float x) const { return float_to_fp8_bits(x / scale, type); }
};

/// dst[i] (or, with chunk > 0, dst[(i / chunk) * chunk_stride + i % chunk]) = encode(value i).
template <class Elem, class Encode>
__global__ void fill_kernel(Elem* dst, RandomValueStream values, InputTensor tensor, uint64_t count,
                            Encode encode, uint64_t chunk, uint64_t chunk_stride) {
  const uint64_t step = static_cast<uint64_t>(gridDim.x) * blockDim.x;
  for (uint64_t i = blockIdx.x * static_cast<uint64_t>(blockDim.x) + threadIdx.x; i < count;
       i += step)
    dst[chunk == 0 ? i : (i / chunk) * chunk_stride + i % chunk] = encode(values.value(tensor, i));
}

void free_buffer(void* p) {
  if (p != nullptr) cudaFree(p);  // errors at teardown are ignored
}

/// Allocates `bytes` (+16, so that an empty tensor still has a valid pointer) at *ptr on first
/// use; later calls check that `bytes` fit.
void reserve(void** ptr, uint64_t* cap, uint64_t bytes, const char* what) {
  if (*ptr == nullptr) {
    check(cudaMalloc(ptr, bytes + 16), "cudaMalloc");
    *cap = bytes + 16;
  }
  TA_CHECK_ARG(bytes + 16 <= *cap, "tree", "its ", what, " need ", bytes,
               " bytes, more than the buffers of the first fill (", *cap - 16, ")");
}

}  // namespace

void fill_random_values(uint16_t* dst, const RandomValueStream& values, InputTensor tensor,
                        uint64_t count, bool bf16, cudaStream_t stream, uint64_t chunk,
                        uint64_t chunk_stride) {
  if (count == 0) return;
  fill_kernel<<<2048, 256, 0, stream>>>(dst, values, tensor, count, Encode16{bf16}, chunk,
                                        chunk_stride);
  check(cudaGetLastError(), "fill kernel launch");
}

void fill_random_values_fp8(uint8_t* dst, const RandomValueStream& values, InputTensor tensor,
                            uint64_t count, KvDType type, float scale, cudaStream_t stream,
                            uint64_t chunk, uint64_t chunk_stride) {
  TA_CHECK_ARG(is_fp8(type), "type", "must be an fp8 KvDType, got ", kv_dtype_name(type));
  TA_CHECK_ARG(std::isfinite(scale) && scale > 0.f, "scale", "must be finite and > 0, got ", scale);
  if (count == 0) return;
  fill_kernel<<<2048, 256, 0, stream>>>(dst, values, tensor, count, EncodeFp8{type, scale}, chunk,
                                        chunk_stride);
  check(cudaGetLastError(), "fill kernel launch");
}

DeviceInputs::~DeviceInputs() {
  for (const Buffer* b : {&q_, &kv_, &out_, &lse_, &scales_}) free_buffer(b->ptr);
}

void DeviceInputs::fill(const PrefixTree& tree, const RandomInputSpec& spec, KvLayout layout,
                        bool with_lse, cudaStream_t stream) {
  const RandomValueStream s =
      random_value_stream(spec, tree.num_queries(), tree.num_pages, tree.page_size);
  const int64_t H = spec.num_qo_heads, KH = spec.num_kv_heads, D = spec.head_dim;
  const int64_t P = tree.page_size;
  const uint64_t lse_elems = static_cast<uint64_t>(tree.num_queries()) * H;
  const bool kv8 = is_fp8(spec.kv_dtype);  // the spec was checked by random_value_stream
  const uint64_t kv_bytes = kv8 ? 1 : 2;
  reserve(&q_.ptr, &q_.bytes, s.q_elems * 2, "queries");
  reserve(&kv_.ptr, &kv_.bytes, s.kv_elems * 2 * kv_bytes, "K/V pages");
  reserve(&scales_.ptr, &scales_.bytes, 2 * sizeof(float), "scales");
  reserve(&out_.ptr, &out_.bytes, s.q_elems * 2, "outputs");
  reserve(&lse_.ptr, &lse_.bytes, lse_elems * 4, "LSEs");
  spec_ = spec;
  out_elems_ = s.q_elems;
  lse_elems_ = lse_elems;

  auto* q = static_cast<uint16_t*>(q_.ptr);
  fill_random_values(q, s, InputTensor::kQ, s.q_elems, spec.bf16, stream);
  args.dtype = spec.bf16 ? DType::kBFloat16 : DType::kFloat16;
  args.q = q;
  args.q_stride_query = H * D;
  args.q_stride_head = D;
  args.sm_scale = spec.sm_scale;
  args.kv_dtype = spec.kv_dtype;
  args.k_scale = args.v_scale = nullptr;
  if (kv8) {
    const float scales[2] = {spec.k_scale, spec.v_scale};
    auto* dev_scales = static_cast<float*>(scales_.ptr);
    check(cudaMemcpyAsync(dev_scales, scales, sizeof(scales), cudaMemcpyHostToDevice, stream),
          "cudaMemcpyAsync(scales)");
    check(cudaStreamSynchronize(stream), "cudaStreamSynchronize");  // `scales` is on the stack
    args.k_scale = dev_scales;
    args.v_scale = dev_scales + 1;
  }
  // split: K then V; combined: page p's K at 2p pages, its V at 2p + 1
  const bool split = layout == KvLayout::kSplit;
  const uint64_t page_elems = static_cast<uint64_t>(P * KH * D);
  const uint64_t chunk = split ? 0 : page_elems, v_off = split ? s.kv_elems : page_elems;
  auto* kv = static_cast<unsigned char*>(kv_.ptr);
  for (const InputTensor t : {InputTensor::kK, InputTensor::kV}) {
    unsigned char* dst = kv + (t == InputTensor::kV ? v_off * kv_bytes : 0);
    if (kv8)
      fill_random_values_fp8(dst, s, t, s.kv_elems, spec.kv_dtype,
                             t == InputTensor::kK ? spec.k_scale : spec.v_scale, stream, chunk,
                             2 * page_elems);
    else
      fill_random_values(reinterpret_cast<uint16_t*>(dst), s, t, s.kv_elems, spec.bf16, stream,
                         chunk, 2 * page_elems);
  }
  if (split)
    set_kv_split(&args, kv, kv + s.kv_elems * kv_bytes, split_kv_strides(P, KH, D));
  else
    set_kv_combined(&args, kv, combined_kv_strides(P, KH, D));  // by args.kv_dtype
  args.out = out_.ptr;
  args.o_stride_query = H * D;
  args.o_stride_head = D;
  args.lse = with_lse ? static_cast<float*>(lse_.ptr) : nullptr;
  check(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
}

void DeviceInputs::run_and_fetch(const DevicePlan& dp, const DecodeArgs& run_args,
                                 cudaStream_t stream, cudaGraphExec_t graph,
                                 std::vector<uint16_t>* out, std::vector<float>* lse) const {
  if (q_.ptr == nullptr) throw std::logic_error("DeviceInputs::run_and_fetch before fill()");
  check(cudaMemsetAsync(out_.ptr, 0xFF, out_.bytes, stream), "cudaMemsetAsync(out)");
  check(cudaMemsetAsync(lse_.ptr, 0xFF, lse_.bytes, stream), "cudaMemsetAsync(lse)");
  const PlanLayout& L = dp.layout();
  if (dp.uploaded() && L.total_bytes > L.metadata_bytes)
    check(cudaMemsetAsync(static_cast<unsigned char*>(dp.workspace()) + L.metadata_bytes, 0xFF,
                          L.total_bytes - L.metadata_bytes, stream),
          "cudaMemsetAsync(partials)");
  if (graph != nullptr)
    check(cudaGraphLaunch(graph, stream), "cudaGraphLaunch");
  else
    dp.run(run_args, stream);
  check(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
  out->resize(out_elems_);
  lse->resize(lse_elems_);
  check(cudaMemcpy(out->data(), out_.ptr, out_elems_ * 2, cudaMemcpyDeviceToHost),
        "cudaMemcpy(out)");
  check(cudaMemcpy(lse->data(), lse_.ptr, lse_elems_ * 4, cudaMemcpyDeviceToHost),
        "cudaMemcpy(lse)");
}

}  // namespace treeattn
