// Bindings of the execution side: decode() (CUDA kernels through DevicePlan for CUDA tensors, the
// float32 CPU plan executor for CPU arrays) and reference() (the float64 oracle). Tensors arrive
// through DLPack (nb::ndarray, zero-copy); everything here validates shapes, dtypes, devices and
// strides, naming the argument, then converts and calls the library.
#include <nanobind/stl/optional.h>
#include <nanobind/stl/vector.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <stdexcept>
#include <utility>
#include <vector>

#include "common.h"
#include "treeattn/common/error.h"
#include "treeattn/common/half.h"
#include "treeattn/cpu/executor.h"
#include "treeattn/cpu/reference.h"

#if TREEATTN_PY_WITH_CUDA
#include "treeattn/kernels/device_plan.h"
#endif

namespace treeattn::py {

std::string shape_str(const AnyArray& a) {
  std::string s = "(";
  for (size_t i = 0; i < a.ndim(); ++i) {
    if (i) s += ", ";
    s += std::to_string(a.shape(i));
  }
  return s + (a.ndim() == 1 ? ",)" : ")");
}

std::string dtype_str(const nb::dlpack::dtype& dt) {
  using C = nb::dlpack::dtype_code;
  const char* base = "unknown";
  switch (static_cast<C>(dt.code)) {
    case C::Int:
      base = "int";
      break;
    case C::UInt:
      base = "uint";
      break;
    case C::Float:
      base = "float";
      break;
    case C::Bfloat:
      base = "bfloat";
      break;
    case C::Complex:
      base = "complex";
      break;
    case C::Bool:
      return "bool";
    default:
      break;
  }
  return std::string(base) + std::to_string(dt.bits);
}

bool is_half_dtype(const nb::dlpack::dtype& dt) {
  using C = nb::dlpack::dtype_code;
  return dt.lanes == 1 && dt.bits == 16 &&
         (dt.code == static_cast<uint8_t>(C::Float) || dt.code == static_cast<uint8_t>(C::Bfloat));
}

bool is_float_dtype(const nb::dlpack::dtype& dt) {
  using C = nb::dlpack::dtype_code;
  if (dt.lanes != 1) return false;
  if (dt.code == static_cast<uint8_t>(C::Bfloat)) return dt.bits == 16;
  return dt.code == static_cast<uint8_t>(C::Float) &&
         (dt.bits == 16 || dt.bits == 32 || dt.bits == 64);
}

namespace {

[[noreturn]] void type_fail(const std::string& msg) { throw nb::type_error(msg.c_str()); }

void check_ndim(const AnyArray& a, const char* name, size_t ndim, const char* dims) {
  TA_CHECK_ARG(a.ndim() == ndim, name, "expected ", ndim, " dims ", dims, ", got ", shape_str(a));
}

void check_dim(const AnyArray& a, const char* name, size_t i, int64_t want, const char* what,
               const char* source) {
  TA_CHECK_ARG(static_cast<int64_t>(a.shape(i)) == want, name, "dim ", i, " (", what, ") must be ",
               want, " (", source, "), got shape ", shape_str(a));
}

void check_same_device(const AnyArray& a, const char* name, const AnyArray& q) {
  if (a.device_type() != q.device_type() || a.device_id() != q.device_id())
    type_fail(std::string(name) + ": expected the device of q (device type " +
              std::to_string(q.device_type()) + ", id " + std::to_string(q.device_id()) +
              "), got device type " + std::to_string(a.device_type()) + ", id " +
              std::to_string(a.device_id()));
}

void check_float(const AnyArray& a, const char* name) {
  if (!is_float_dtype(a.dtype()))
    type_fail(std::string(name) + ": expected float16, bfloat16, float32 or float64, got " +
              dtype_str(a.dtype()));
}

/// How gather_into reads a KV cache: kSame = the array's float dtype as is; fp8 = the bytes of a
/// uint8 view, decoded and multiplied by `scale`.
struct KvDecode {
  KvDType dtype = KvDType::kSame;
  float scale = 1.f;
};

/// Element `offset` (in elements) of a float array of any supported dtype, as float.
inline float load_f32(const char* base, const nb::dlpack::dtype& dt, int64_t offset) {
  using C = nb::dlpack::dtype_code;
  if (dt.code == static_cast<uint8_t>(C::Bfloat)) {
    uint16_t b;
    std::memcpy(&b, base + offset * 2, 2);
    return bf16_bits_to_float(b);
  }
  switch (dt.bits) {
    case 16: {
      uint16_t h;
      std::memcpy(&h, base + offset * 2, 2);
      return half_bits_to_float(h);
    }
    case 32:
      return reinterpret_cast<const float*>(base)[offset];
    default:
      return static_cast<float>(reinterpret_cast<const double*>(base)[offset]);
  }
}

inline void store_f32(char* base, const nb::dlpack::dtype& dt, int64_t offset, float v) {
  using C = nb::dlpack::dtype_code;
  if (dt.code == static_cast<uint8_t>(C::Bfloat)) {
    const uint16_t b = float_to_bf16_bits(v);
    std::memcpy(base + offset * 2, &b, 2);
    return;
  }
  switch (dt.bits) {
    case 16: {
      const uint16_t h = float_to_half_bits(v);
      std::memcpy(base + offset * 2, &h, 2);
      return;
    }
    case 32:
      reinterpret_cast<float*>(base)[offset] = v;
      return;
    default:
      reinterpret_cast<double*>(base)[offset] = v;
      return;
  }
}

/// A strided view (sizes/strides in elements) over an array's data, starting `base_off` elements
/// in; dims are picked from the array by `axes`.
struct View {
  const AnyArray* a;
  int64_t base_off = 0;
  std::vector<int64_t> sizes, strides;
};

View view_of(const AnyArray& a, std::initializer_list<int> axes, int64_t base_off = 0) {
  View v{&a, base_off, {}, {}};
  for (int ax : axes) {
    v.sizes.push_back(static_cast<int64_t>(a.shape(ax)));
    v.strides.push_back(a.stride(ax));
  }
  return v;
}

int64_t num_elements(const View& v) {
  int64_t n = 1;
  for (int64_t s : v.sizes) n *= s;
  return n;
}

/// Writes a strided view, dense row-major, as float32 to out[0, num_elements(v)) (an fp8 cache's
/// bytes as scale x value, `kv`).
void gather_into(const View& v, float* out, const KvDecode& kv = {}) {
  const int64_t n = num_elements(v);
  if (n == 0) return;
  const char* base = static_cast<const char*>(v.a->data());
  const auto dt = v.a->dtype();
  const size_t nd = v.sizes.size();
  std::vector<int64_t> idx(nd, 0);
  int64_t off = v.base_off;
  const bool fp8 = is_fp8(kv.dtype);
  for (int64_t i = 0; i < n; ++i) {
    out[i] = fp8 ? kv.scale * fp8_bits_to_float(static_cast<uint8_t>(base[off]), kv.dtype)
                 : load_f32(base, dt, off);
    for (size_t d = nd; d-- > 0;) {  // odometer increment, last dim fastest
      off += v.strides[d];
      if (++idx[d] < v.sizes[d]) break;
      off -= v.strides[d] * v.sizes[d];
      idx[d] = 0;
    }
  }
}

/// Gathers a strided view into a dense row-major float32 vector.
std::vector<float> gather_f32(const View& v) {
  std::vector<float> out(static_cast<size_t>(num_elements(v)));
  gather_into(v, out.data());
  return out;
}

/// Gathers the pages `pages` (ids along axis 0) of a paged cache into a dense float32 buffer
/// [pages.size(), page_size, num_kv_heads, head_dim]: buffer page i is cache page pages[i].
/// `axes` are the slot, head and dim axes of `a`; `base_off` the element of page 0's first value
/// (the combined layout's V block). Reads nothing but those pages (an fp8 cache dequantized with
/// `kv`, so only the used pages are converted).
std::vector<float> gather_pages_f32(const AnyArray& a, std::initializer_list<int> axes,
                                    int64_t base_off, const std::vector<int32_t>& pages,
                                    const KvDecode& kv = {}) {
  View v = view_of(a, axes, base_off);
  const int64_t per_page = num_elements(v);
  std::vector<float> out(pages.size() * static_cast<size_t>(per_page));
  for (size_t i = 0; i < pages.size(); ++i) {
    v.base_off = base_off + static_cast<int64_t>(pages[i]) * a.stride(0);
    gather_into(v, out.data() + i * static_cast<size_t>(per_page), kv);
  }
  return out;
}

/// The distinct values of `ids`, ascending.
std::vector<int32_t> distinct_pages(std::vector<int32_t> ids) {
  std::sort(ids.begin(), ids.end());
  ids.erase(std::unique(ids.begin(), ids.end()), ids.end());
  return ids;
}

/// Position of `page` in `pages` (ascending, holding it): its page in gather_pages_f32's buffer.
int32_t page_index(const std::vector<int32_t>& pages, int32_t page) {
  return static_cast<int32_t>(std::lower_bound(pages.begin(), pages.end(), page) - pages.begin());
}

/// K and V of the pages `pages` gathered to float32 (gather_pages_f32), from the split layout
/// (v given) or the combined one (K and V in k); an fp8 cache dequantized with kd / vd.
struct HostKv {
  std::vector<float> k, v;
};
HostKv gather_kv(const AnyArray& k, const AnyArray* v, const std::vector<int32_t>& pages,
                 const KvDecode& kd = {}, const KvDecode& vd = {}) {
  HostKv kv;
  if (v == nullptr) {
    kv.k = gather_pages_f32(k, {2, 3, 4}, 0, pages, kd);
    kv.v = gather_pages_f32(k, {2, 3, 4}, k.stride(1), pages, vd);
  } else {
    kv.k = gather_pages_f32(k, {1, 2, 3}, 0, pages, kd);
    kv.v = gather_pages_f32(*v, {1, 2, 3}, 0, pages, vd);
  }
  return kv;
}

/// An fp8 cache's dequantization scale (k_scale or v_scale): a Python float (finite and > 0 in
/// float32) or a 1-element float32 array on the caches' device (its value is read at run time on
/// a GPU, so a captured CUDA graph replays with new values; on the CPU it is read and checked
/// now). Neither = 1.
struct KvScale {
  float value = 1.f;              ///< the host value (the float, or the CPU array's element)
  const float* device = nullptr;  ///< a CUDA array's data pointer
};
KvScale kv_scale_arg(const char* name, const std::optional<double>& value,
                     const std::optional<AnyArray>& array, const AnyArray& k) {
  KvScale s;
  if (value) {
    const double v = *value;
    TA_CHECK_ARG(std::isfinite(v) && v > 0 && std::isfinite(static_cast<float>(v)) &&
                     static_cast<float>(v) > 0.f,
                 name, "must be finite and > 0 in float32, got ", v);
    s.value = static_cast<float>(v);
  }
  if (!array) return s;
  const AnyArray& a = *array;
  if (a.dtype() != nb::dtype<float>())
    throw nb::type_error(
        (std::string(name) + ": expected a float32 scalar array, got " + dtype_str(a.dtype()))
            .c_str());
  TA_CHECK_ARG(a.size() == 1, name, "expected 1 element, got shape ", shape_str(a));
  if (a.device_type() != k.device_type() || a.device_id() != k.device_id())
    throw nb::type_error((std::string(name) + ": expected the device of k_cache (device type " +
                          std::to_string(k.device_type()) + ", id " +
                          std::to_string(k.device_id()) + "), got device type " +
                          std::to_string(a.device_type()) + ", id " + std::to_string(a.device_id()))
                             .c_str());
  if (a.device_type() == kDlCpu) {
    const float v = *static_cast<const float*>(a.data());
    TA_CHECK_ARG(std::isfinite(v) && v > 0.f, name, "must be finite and > 0, got ", v);
    s.value = v;
  } else {
    s.device = static_cast<const float*>(a.data());
  }
  return s;
}

/// The C++ sm_scale of a Python one: None -> 0 (the kernels' and executors' "1/sqrt(head_dim)");
/// a given value must be finite and > 0 (the kernels take the row max on raw scores, which
/// needs scale > 0) and finite in float32.
float scale_arg(const std::optional<double>& sm_scale) {
  if (!sm_scale) return 0.f;
  const double s = *sm_scale;
  TA_CHECK_ARG(std::isfinite(s) && s > 0 && std::isfinite(static_cast<float>(s)) &&
                   static_cast<float>(s) > 0.f,
               "sm_scale", "must be > 0 and finite in float32 (None: 1/sqrt(head_dim)), got ", s);
  return static_cast<float>(s);
}

/// Scatters a dense row-major float32 buffer into a strided array (all of its dims).
void scatter_f32(const float* src, const AnyArray& a) {
  const size_t nd = a.ndim();
  int64_t n = 1;
  for (size_t d = 0; d < nd; ++d) n *= static_cast<int64_t>(a.shape(d));
  char* base = static_cast<char*>(a.data());
  const auto dt = a.dtype();
  std::vector<int64_t> idx(nd, 0);
  int64_t off = 0;
  for (int64_t i = 0; i < n; ++i) {
    store_f32(base, dt, off, src[i]);
    for (size_t d = nd; d-- > 0;) {
      off += a.stride(d);
      if (++idx[d] < static_cast<int64_t>(a.shape(d))) break;
      off -= a.stride(d) * static_cast<int64_t>(a.shape(d));
      idx[d] = 0;
    }
  }
}

/// Refuses an output array two of whose elements share memory (a dim of size > 1 with stride 0,
/// e.g. torch's expand(), or strides that interleave): writing it would leave garbage. Checked
/// as: with the dims sorted by |stride|, each stride exceeds the span of the smaller ones.
void check_no_overlap(const AnyArray& a, const char* name) {
  std::vector<std::pair<int64_t, int64_t>> dims;  // (|stride|, size) of the dims of size > 1
  for (size_t d = 0; d < a.ndim(); ++d)
    if (a.shape(d) > 1) dims.push_back({std::abs(a.stride(d)), static_cast<int64_t>(a.shape(d))});
  std::sort(dims.begin(), dims.end());
  int64_t span = 0;  // elements covered by the dims so far, minus one
  for (const auto& [stride, size] : dims) {
    TA_CHECK_ARG(stride > span, name, "has overlapping elements (strides of ", shape_str(a),
                 " repeat memory, e.g. an expand()ed view); pass a writable array with distinct "
                 "elements");
    span += stride * (size - 1);
  }
}

void check_out(const ExpectedShape& e, const AnyArray& q, const AnyArray& out) {
  check_same_device(out, "out", q);
  if (out.dtype() != q.dtype())
    type_fail("out: expected the dtype of q (" + dtype_str(q.dtype()) + "), got " +
              dtype_str(out.dtype()));
  check_ndim(out, "out", 3, "[num_queries, num_qo_heads, head_dim]");
  check_dim(out, "out", 0, e.num_queries, "num_queries", "the plan");
  check_dim(out, "out", 1, e.num_qo_heads, "num_qo_heads", "the plan");
  check_dim(out, "out", 2, e.head_dim, "head_dim", "the plan");
  check_no_overlap(out, "out");
}

void check_lse(const ExpectedShape& e, const AnyArray& q, const AnyArray& lse) {
  check_same_device(lse, "lse", q);
  if (lse.dtype() != nb::dtype<float>())
    type_fail("lse: expected float32, got " + dtype_str(lse.dtype()));
  check_ndim(lse, "lse", 2, "[num_queries, num_qo_heads]");
  check_dim(lse, "lse", 0, e.num_queries, "num_queries", "the plan");
  check_dim(lse, "lse", 1, e.num_qo_heads, "num_qo_heads", "the plan");
  check_no_overlap(lse, "lse");
}

ExpectedShape expected_from_plan(const PlanState& st) {
  ExpectedShape e;
  e.num_queries = st.plan.shape.num_queries;
  e.num_qo_heads = st.plan.shape.num_qo_heads;
  e.num_kv_heads = st.plan.shape.num_kv_heads;
  e.head_dim = st.plan.shape.head_dim;
  e.page_size = st.plan.shape.page_size;
  e.max_page_id = st.max_page_id;
  return e;
}

// ---- CPU path: gather q and the pages the plan reads to float32, run the plan executor on a
// copy of the plan renumbered to those pages, scatter into out/lse. Time and memory grow with
// the plan, never with the cache.
void decode_cpu(const PlanState& st, const AnyArray& q, const AnyArray& k, const AnyArray* v,
                const AnyArray& out, const AnyArray* lse, float sm_scale, KvDType kv_dtype,
                const KvScale& k_scale, const KvScale& v_scale) {
  Plan plan = st.plan;
  const std::vector<int32_t> pages = distinct_pages(plan.page_ids);
  for (int32_t& id : plan.page_ids) id = page_index(pages, id);
  std::vector<float> hq = gather_f32(view_of(q, {0, 1, 2}));
  const HostKv kv = gather_kv(k, v, pages, {kv_dtype, k_scale.value}, {kv_dtype, v_scale.value});
  const PlanShape& s = plan.shape;
  std::vector<float> ho(static_cast<size_t>(s.num_queries) * s.num_qo_heads * s.head_dim);
  std::vector<float> hl(lse ? static_cast<size_t>(s.num_queries) * s.num_qo_heads : 0);
  const HostAttentionInputs in = host_inputs(hq.data(), kv.k.data(), kv.v.data(), s.num_qo_heads,
                                             s.num_kv_heads, s.head_dim, sm_scale);
  {
    nb::gil_scoped_release release;
    execute_plan_cpu(plan, in, ho.data(), lse ? hl.data() : nullptr);
  }
  scatter_f32(ho.data(), out);
  if (lse) scatter_f32(hl.data(), *lse);
}

#if TREEATTN_PY_WITH_CUDA
void check_cuda_strides(const AnyArray& a, const char* name, std::initializer_list<int> axes) {
  const int last = static_cast<int>(a.ndim()) - 1;
  TA_CHECK_ARG(a.stride(last) == 1, name, "head_dim must be contiguous (stride 1), got stride ",
               a.stride(last));
  for (int ax : axes)
    TA_CHECK_ARG(a.shape(ax) == 1 || a.stride(ax) % 8 == 0, name, "stride of dim ", ax, " is ",
                 a.stride(ax), " elements; the kernels need multiples of 8 (16-byte loads)");
  TA_CHECK_ARG(reinterpret_cast<uintptr_t>(a.data()) % 16 == 0, name,
               "data pointer must be 16-byte aligned");
}

void decode_cuda(PyPlan& p, const AnyArray& q, const AnyArray& k, const AnyArray* v,
                 const AnyArray& out, const AnyArray* lse, float sm_scale, uintptr_t stream,
                 KvDType kv_dtype, const KvScale& k_scale, const KvScale& v_scale) {
  if (!is_half_dtype(q.dtype()))
    type_fail("q: CUDA decode expects float16 or bfloat16, got " + dtype_str(q.dtype()));
  const bool combined = v == nullptr;
  check_cuda_strides(q, "q", {0, 1});
  check_cuda_strides(out, "out", {0, 1});
  if (combined) {
    check_cuda_strides(k, "k_cache", {0, 1, 2, 3});
  } else {
    check_cuda_strides(k, "k_cache", {0, 1, 2});
    check_cuda_strides(*v, "v_cache", {0, 1, 2});
    for (int d = 0; d < 3; ++d)
      TA_CHECK_ARG(v->stride(d) == k.stride(d) || v->shape(d) == 1, "v_cache",
                   "strides must equal k_cache's (dim ", d, ": ", v->stride(d), " vs ", k.stride(d),
                   ")");
  }
  if (lse) {
    TA_CHECK_ARG((lse->shape(1) == 1 || lse->stride(1) == 1) &&
                     (lse->shape(0) == 1 || lse->stride(0) == static_cast<int64_t>(lse->shape(1))),
                 "lse", "must be contiguous [num_queries, num_qo_heads]");
  }
  const int device = q.device_id();
  if (p.device != nullptr) {
    TA_CHECK_ARG(p.device_id == device, "q", "is on cuda:", device,
                 " but the plan's workspace is "
                 "on cuda:",
                 p.device_id, " (make one plan per device)");
  } else {
    p.to_device(device, stream);
  }
  DecodeArgs a;
  a.dtype = q.dtype().code == static_cast<uint8_t>(nb::dlpack::dtype_code::Bfloat)
                ? DType::kBFloat16
                : DType::kFloat16;
  a.q = q.data();
  a.q_stride_query = q.stride(0);
  a.q_stride_head = q.stride(1);
  const int o = combined ? 1 : 0;  // skip the K/V axis of the combined layout
  KvStrides kv;
  kv.page = k.stride(0);
  kv.kv = combined ? k.stride(1) : 0;
  kv.slot = k.stride(1 + o);
  kv.head = k.stride(2 + o);
  a.kv_dtype = kv_dtype;  // set_kv_combined steps to V in elements of it
  if (combined)
    set_kv_combined(&a, k.data(), kv);
  else
    set_kv_split(&a, k.data(), v->data(), kv);
  if (is_fp8(kv_dtype)) {
    // A CUDA scale array is read by the kernels at run time; a Python float != 1 lives in a
    // device tensor that treeattn.decode() made, so only 1 (nullptr) arrives here as a value.
    TA_CHECK_ARG(k_scale.device != nullptr || k_scale.value == 1.f, "k_scale",
                 "a CUDA decode needs a float32 tensor on the device (or 1)");
    TA_CHECK_ARG(v_scale.device != nullptr || v_scale.value == 1.f, "v_scale",
                 "a CUDA decode needs a float32 tensor on the device (or 1)");
    a.k_scale = k_scale.device;
    a.v_scale = v_scale.device;
  }
  a.out = out.data();
  a.o_stride_query = out.stride(0);
  a.o_stride_head = out.stride(1);
  a.lse = lse ? static_cast<float*>(lse->data()) : nullptr;
  a.sm_scale = sm_scale;
  for (int c = 0; c < kNumTileClasses; ++c) a.launch_class_items[c] = p.launch_class_items[c];
  a.launch_queries = p.launch_queries;
  p.device->run(a, reinterpret_cast<cudaStream_t>(stream));
}
#endif

/// The KvDType of the low-level decode's kv_dtype integer (0 same, 1 fp8_e4m3, 2 fp8_e5m2).
KvDType kv_dtype_arg(int kv_dtype) {
  TA_CHECK_ARG(kv_dtype >= 0 && kv_dtype <= 2, "kv_dtype",
               "expected 0 (same), 1 (fp8_e4m3) or 2 (fp8_e5m2), got ", kv_dtype);
  return static_cast<KvDType>(kv_dtype);
}

void decode(PyPlan& p, const AnyArray& q, const AnyArray& k, std::optional<AnyArray> v,
            const AnyArray& out, std::optional<AnyArray> lse, uintptr_t stream,
            std::optional<double> sm_scale_arg, int kv_dtype_code,
            std::optional<double> k_scale_value, std::optional<double> v_scale_value,
            std::optional<AnyArray> k_scale_array, std::optional<AnyArray> v_scale_array) {
  // One snapshot for the whole call: the checks and the run see the same plan even when another
  // thread update()s this one meanwhile (the CPU run releases the GIL).
  const std::shared_ptr<const PlanState> st = p.state.snapshot();
  ExpectedShape e = expected_from_plan(*st);
  if (p.label_base >= 0 && st->max_page_id >= p.label_base) {  // device-page labels
    TA_CHECK_ARG(p.resolved == st && p.device != nullptr && q.device_type() == kDlCuda, "plan",
                 "its page ids from ", p.label_base, " on are device-page labels, resolved ",
                 "on the device for one plan state only (ServingCore resolves them after every "
                 "update); this state's are not, or the decode is not on that device");
    e.max_page_id = p.resolved_max_page_id;
  }
  const AnyArray* vp = v ? &*v : nullptr;
  const AnyArray* lp = lse ? &*lse : nullptr;
  const KvDType kv_dtype = kv_dtype_arg(kv_dtype_code);
  const int32_t plan_kv_bytes = st->plan.shape.kv_dtype_bytes;
  if (is_fp8(kv_dtype)) {
    TA_CHECK_ARG(plan_kv_bytes == 1, "plan", "made for ", plan_kv_bytes,
                 "-byte K/V, but the caches are ", kv_dtype_name(kv_dtype),
                 " (1 byte): plan with treeattn.plan(..., kv_dtype='", kv_dtype_name(kv_dtype),
                 "')");
  } else {
    TA_CHECK_ARG(plan_kv_bytes != 1, "k_cache",
                 "the plan was made for an fp8 KV cache (1 byte per element), got ",
                 dtype_str(k.dtype()), ": pass the fp8 caches or plan with kv_dtype=None");
    TA_CHECK_ARG(!k_scale_value && !k_scale_array, "k_scale", "only for an fp8 KV cache");
    TA_CHECK_ARG(!v_scale_value && !v_scale_array, "v_scale", "only for an fp8 KV cache");
  }
  check_qkv(e, q, k, vp, kv_dtype);
  check_out(e, q, out);
  if (lp) check_lse(e, q, *lp);
  const float sm_scale = scale_arg(sm_scale_arg);
  const KvScale k_scale = kv_scale_arg("k_scale", k_scale_value, k_scale_array, k);
  const KvScale v_scale = kv_scale_arg("v_scale", v_scale_value, v_scale_array, k);
  if (q.device_type() == kDlCpu) {
    decode_cpu(*st, q, k, vp, out, lp, sm_scale, kv_dtype, k_scale, v_scale);
    return;
  }
#if TREEATTN_PY_WITH_CUDA
  decode_cuda(p, q, k, vp, out, lp, sm_scale, stream, kv_dtype, k_scale, v_scale);
#else
  (void)stream;
  throw std::runtime_error(
      "treeattn was built without CUDA (nvcc not found at build time): CUDA tensors cannot be "
      "decoded; pass numpy / CPU arrays for the CPU executor");
#endif
}

void reference(const PrefixTree& caller_tree, const AnyArray& q, const AnyArray& k,
               std::optional<AnyArray> v, nb::handle queries_arg, const AnyArray& out,
               const AnyArray& lse, std::optional<double> sm_scale) {
  const std::vector<int32_t> queries = int32_list_arg("queries", queries_arg);
  // A copy: the oracle runs without the GIL, while other threads may update the caller's tree.
  PrefixTree tree = caller_tree;
  if (q.device_type() != kDlCpu) type_fail("q: reference() needs CPU arrays");
  TA_CHECK_ARG(q.ndim() == 3, "q", "expected 3 dims [num_queries, num_qo_heads, head_dim], got ",
               shape_str(q));
  ExpectedShape e;
  e.num_queries = tree.num_queries();
  e.num_qo_heads = static_cast<int64_t>(q.shape(1));
  e.head_dim = static_cast<int64_t>(q.shape(2));
  e.page_size = tree.page_size;
  const bool combined = !v.has_value();
  e.num_kv_heads =
      static_cast<int64_t>(k.ndim() >= (combined ? 4u : 3u) ? k.shape(combined ? 3 : 2) : 0);
  for (const TreeNode& n : tree.nodes)
    if (n.alive)
      for (int32_t pg : n.pages) e.max_page_id = std::max<int64_t>(e.max_page_id, pg);
  check_qkv(e, q, k, v ? &*v : nullptr);
  TA_CHECK_ARG(e.num_kv_heads >= 1 && e.num_qo_heads % e.num_kv_heads == 0, "k_cache",
               "num_qo_heads ", e.num_qo_heads, " is not a multiple of num_kv_heads ",
               e.num_kv_heads);
  for (int32_t qi : queries)
    TA_CHECK_ARG(qi >= 0 && qi < e.num_queries, "queries", "index ", qi, " out of range [0, ",
                 e.num_queries, ")");
  if (out.device_type() != kDlCpu || out.dtype() != nb::dtype<double>() || out.ndim() != 3)
    type_fail("out: expected a CPU float64 array [num_queries, num_qo_heads, head_dim]");
  if (lse.device_type() != kDlCpu || lse.dtype() != nb::dtype<double>() || lse.ndim() != 2)
    type_fail("lse: expected a CPU float64 array [num_queries, num_qo_heads]");
  check_dim(out, "out", 0, e.num_queries, "num_queries", "the tree");
  check_dim(out, "out", 1, e.num_qo_heads, "num_qo_heads", "q");
  check_dim(out, "out", 2, e.head_dim, "head_dim", "q");
  check_dim(lse, "lse", 0, e.num_queries, "num_queries", "the tree");
  check_dim(lse, "lse", 1, e.num_qo_heads, "num_qo_heads", "q");
  const float scale = scale_arg(sm_scale);
  // Only the pages of live nodes are gathered; the copy's nodes are renumbered to them.
  std::vector<int32_t> used;
  for (const TreeNode& n : tree.nodes)
    if (n.alive) used.insert(used.end(), n.pages.begin(), n.pages.end());
  const std::vector<int32_t> pages = distinct_pages(std::move(used));
  for (TreeNode& n : tree.nodes)
    if (n.alive)
      for (int32_t& pg : n.pages) pg = page_index(pages, pg);
  tree.num_pages = static_cast<int32_t>(pages.size());
  tree.free_pages.clear();
  std::vector<float> hq = gather_f32(view_of(q, {0, 1, 2}));
  const HostKv kv = gather_kv(k, combined ? nullptr : &*v, pages);
  std::vector<double> ho(out.size()), hl(lse.size());
  const HostAttentionInputs in =
      host_inputs(hq.data(), kv.k.data(), kv.v.data(), static_cast<int32_t>(e.num_qo_heads),
                  static_cast<int32_t>(e.num_kv_heads), static_cast<int32_t>(e.head_dim), scale);
  {
    nb::gil_scoped_release release;
    reference_attention(tree, in, queries, ho.data(), hl.data());
  }
  // Only sampled rows are written by the oracle; copy every row (unsampled ones stay as given).
  const std::vector<int32_t>* rows = &queries;
  std::vector<int32_t> all;
  if (queries.empty()) {
    all.resize(static_cast<size_t>(e.num_queries));
    for (int32_t i = 0; i < e.num_queries; ++i) all[i] = i;
    rows = &all;
  }
  double* po = static_cast<double*>(out.data());
  double* pl = static_cast<double*>(lse.data());
  const int64_t H = e.num_qo_heads, D = e.head_dim;
  for (int32_t qi : *rows)
    for (int64_t h = 0; h < H; ++h) {
      pl[qi * lse.stride(0) + h * lse.stride(1)] = hl[(qi * H + h)];
      for (int64_t d = 0; d < D; ++d)
        po[qi * out.stride(0) + h * out.stride(1) + d * out.stride(2)] = ho[(qi * H + h) * D + d];
    }
}

}  // namespace

void check_qkv(const ExpectedShape& e, const AnyArray& q, const AnyArray& k, const AnyArray* v,
               KvDType kv) {
  const int dev = q.device_type();
  if (dev != kDlCpu && dev != kDlCuda)
    type_fail("q: expected a CPU or CUDA array, got DLPack device type " + std::to_string(dev));
  check_float(q, "q");
  const bool fp8 = is_fp8(kv);
  if (fp8 && !is_half_dtype(q.dtype()))
    type_fail(std::string("q: an ") + kv_dtype_name(kv) +
              " KV cache needs float16 or bfloat16 q, got " + dtype_str(q.dtype()));
  check_ndim(q, "q", 3, "[num_queries, num_qo_heads, head_dim]");
  check_dim(q, "q", 0, e.num_queries, "num_queries", "the plan");
  check_dim(q, "q", 1, e.num_qo_heads, "num_qo_heads", "the plan");
  check_dim(q, "q", 2, e.head_dim, "head_dim", "the plan");

  const bool combined = v == nullptr;
  check_same_device(k, "k_cache", q);
  if (fp8) {
    if (k.dtype() != nb::dtype<uint8_t>())
      type_fail(std::string("k_cache: an ") + kv_dtype_name(kv) +
                " cache arrives as its uint8 view, got " + dtype_str(k.dtype()));
  } else {
    check_float(k, "k_cache");
  }
  if (!fp8 && dev == kDlCuda && k.dtype() != q.dtype())
    type_fail("k_cache: expected the dtype of q (" + dtype_str(q.dtype()) + "), got " +
              dtype_str(k.dtype()));
  if (combined) {
    TA_CHECK_ARG(k.ndim() == 5, "k_cache",
                 "with v_cache=None expected the combined layout, 5 dims [num_pages, 2, "
                 "page_size, num_kv_heads, head_dim], got ",
                 shape_str(k));
    check_dim(k, "k_cache", 1, 2, "K/V", "combined layout");
  } else {
    check_ndim(k, "k_cache", 4, "[num_pages, page_size, num_kv_heads, head_dim]");
  }
  const size_t o = combined ? 1 : 0;
  check_dim(k, "k_cache", 1 + o, e.page_size, "page_size", "the plan's tree");
  check_dim(k, "k_cache", 2 + o, e.num_kv_heads, "num_kv_heads", "the plan");
  check_dim(k, "k_cache", 3 + o, e.head_dim, "head_dim", "the plan");
  TA_CHECK_ARG(static_cast<int64_t>(k.shape(0)) > e.max_page_id, "k_cache", "has ", k.shape(0),
               " pages but the tree reads page id ", e.max_page_id,
               " (num_pages must be > the largest page id)");
  if (!combined) {
    check_same_device(*v, "v_cache", q);
    if (v->dtype() != k.dtype())
      type_fail("v_cache: expected the dtype of k_cache (" + dtype_str(k.dtype()) + "), got " +
                dtype_str(v->dtype()));
    TA_CHECK_ARG(v->ndim() == 4, "v_cache",
                 "expected 4 dims [num_pages, page_size, num_kv_heads, head_dim], got ",
                 shape_str(*v));
    for (size_t d = 0; d < 4; ++d)
      TA_CHECK_ARG(v->shape(d) == k.shape(d), "v_cache", "shape ", shape_str(*v),
                   " must equal k_cache's ", shape_str(k));
  }
}

/// fp8 codes of float32 values: dst[i] = float_to_fp8_bits(src[i] / scale) (round to nearest
/// even, saturating, NaN -> NaN), both 1-D contiguous CPU arrays of one length. The conversion of
/// the CPU tests and of random fp8 inputs, the same function the GPU random fill uses.
void fp8_encode(const AnyArray& src, const AnyArray& dst, int kv_dtype, double scale) {
  const KvDType t = kv_dtype_arg(kv_dtype);
  TA_CHECK_ARG(is_fp8(t), "kv_dtype", "expected 1 (fp8_e4m3) or 2 (fp8_e5m2), got ", kv_dtype);
  TA_CHECK_ARG(std::isfinite(scale) && scale > 0, "scale", "must be finite and > 0, got ", scale);
  if (src.device_type() != kDlCpu || src.dtype() != nb::dtype<float>() || src.ndim() != 1 ||
      (src.shape(0) > 1 && src.stride(0) != 1))
    type_fail("src: expected a contiguous 1-D float32 CPU array");
  if (dst.device_type() != kDlCpu || dst.dtype() != nb::dtype<uint8_t>() || dst.ndim() != 1 ||
      (dst.shape(0) > 1 && dst.stride(0) != 1))
    type_fail("dst: expected a contiguous 1-D uint8 CPU array");
  TA_CHECK_ARG(dst.shape(0) == src.shape(0), "dst", "length ", dst.shape(0), " must equal src's ",
               src.shape(0));
  const float* in = static_cast<const float*>(src.data());
  uint8_t* out = static_cast<uint8_t*>(dst.data());
  const float sc = static_cast<float>(scale);
  for (size_t i = 0; i < src.shape(0); ++i) out[i] = float_to_fp8_bits(in[i] / sc, t);
}

void register_decode(nb::module_& m) {
  m.def("fp8_encode", &fp8_encode, nb::arg("src").noconvert(), nb::arg("dst").noconvert(),
        nb::arg("kv_dtype"), nb::arg("scale") = 1.0,
        "dst[i] = fp8 code of src[i] / scale (kv_dtype 1 = e4m3, 2 = e5m2; round to nearest even, "
        "saturating, NaN stays NaN); src float32, dst uint8, 1-D contiguous CPU arrays.");
  m.def("decode", &decode, nb::arg("plan"), nb::arg("q").noconvert(),
        nb::arg("k_cache").noconvert(), nb::arg("v_cache").noconvert().none(),
        nb::arg("out").noconvert(), nb::arg("lse").noconvert().none(), nb::arg("stream"),
        nb::arg("sm_scale").none(), nb::arg("kv_dtype") = 0, nb::arg("k_scale").none() = nb::none(),
        nb::arg("v_scale").none() = nb::none(),
        nb::arg("k_scale_array").noconvert().none() = nb::none(),
        nb::arg("v_scale_array").noconvert().none() = nb::none(),
        "Low-level decode: every tensor given (out/lse preallocated), stream as an integer "
        "handle; kv_dtype 0 (same), 1 (fp8_e4m3) or 2 (fp8_e5m2) with k_cache/v_cache as uint8 "
        "views and the scales as floats or 1-element float32 arrays. Use treeattn.decode().");
  m.def("reference", &reference, nb::arg("tree"), nb::arg("q").noconvert(),
        nb::arg("k_cache").noconvert(), nb::arg("v_cache").noconvert().none(),
        nb::arg("queries").none(), nb::arg("out").noconvert(), nb::arg("lse").noconvert(),
        nb::arg("sm_scale"),
        nb::sig("def reference(tree: PrefixTree, q: ndarray[], k_cache: ndarray[], v_cache: "
                "ndarray[] | None, queries: collections.abc.Sequence[int], out: ndarray[], lse: "
                "ndarray[], sm_scale: float | None) -> None"),
        "Low-level float64 oracle into preallocated float64 out/lse. Use treeattn.reference().");
#if TREEATTN_PY_WITH_CUDA
  m.attr("with_cuda") = true;
#else
  m.attr("with_cuda") = false;
#endif
}

}  // namespace treeattn::py
