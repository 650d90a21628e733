// run_decode: validates DecodeArgs against the PlanLayout, derives the kernel parameter block
// (workspace pointers at the layout's offsets, exp2-domain softmax scale) and dispatches over
// (dtype, head_dim) to the generated launch_plan instantiations. Never synchronizes, allocates or
// reads device memory from the host. Every status other than kOk leaves a message naming the
// argument or limit (or the CUDA error) in last_cuda_error().
#include <cuda_runtime.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdarg>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <initializer_list>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>

#include "decode_params.h"
#include "sm90/ptx_sm90.cuh"
#include "treeattn/kernels/decode.h"

namespace treeattn {

namespace cuda_detail {
namespace {
thread_local char g_last_error[256] = "";
}  // namespace

void set_last_cuda_error(const char* msg) {
  std::strncpy(g_last_error, msg != nullptr ? msg : "", sizeof(g_last_error) - 1);
  g_last_error[sizeof(g_last_error) - 1] = '\0';
}

bool device_supports_pdl() {
  static int cached[64];  // 0 unknown, 1 no, 2 yes
  int dev = 0;
  if (cudaGetDevice(&dev) != cudaSuccess || dev < 0 || dev >= 64) return false;
  if (cached[dev] == 0) {
    int major = 0;
    cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev);
    cached[dev] = major >= 9 ? 2 : 1;
  }
  return cached[dev] == 2;
}

int device_sm_count() {
  static int cached[64];  // 0 = unknown
  int dev = 0;
  if (cudaGetDevice(&dev) != cudaSuccess || dev < 0 || dev >= 64) return 132;
  if (cached[dev] == 0) {
    int n = 0;
    if (cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess || n <= 0)
      n = 132;
    cached[dev] = n;
  }
  return cached[dev];
}

namespace {

/// Never launched: its attributes tell whether this binary holds sm_90a code for the current
/// device (the sm_90a pass gives it static shared memory, the other passes an empty body).
__global__ void sm90a_probe_kernel(int* out) {
#if TREEATTN_WGMMA
  __shared__ int marker[32];
  marker[threadIdx.x & 31] = static_cast<int>(threadIdx.x);
  __syncthreads();
  if (out != nullptr) out[threadIdx.x] = marker[(threadIdx.x + 1) & 31];
#else
  (void)out;
#endif
}

}  // namespace

bool ws_kernels_available() {
  static int cached[64];  // 0 unknown, 1 no, 2 yes
  int dev = 0;
  if (cudaGetDevice(&dev) != cudaSuccess || dev < 0 || dev >= 64) return false;
  if (cached[dev] == 0) {
    int major = 0, minor = 0;
    cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev);
    cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev);
    cudaFuncAttributes attr{};
    const bool ok = major == 9 && minor == 0 &&
                    cudaFuncGetAttributes(&attr, sm90a_probe_kernel) == cudaSuccess &&
                    attr.sharedSizeBytes > 0;
    cached[dev] = ok ? 2 : 1;
  }
  return cached[dev] == 2;
}

namespace {

constexpr float kLog2e = 1.44269504088896340736f;

/// Sets the message of `st` (printf format) and returns `st`.
Status fail(Status st, const char* fmt, ...) __attribute__((format(printf, 2, 3)));
Status fail(Status st, const char* fmt, ...) {
  char buf[256];
  va_list ap;
  va_start(ap, fmt);
  std::vsnprintf(buf, sizeof(buf), fmt, ap);
  va_end(ap);
  set_last_cuda_error(buf);
  return st;
}

bool stride_ok(int64_t s) { return s > 0 && s % 8 == 0; }

template <typename F>
Status dispatch_dtype(DType dtype, F&& f) {
  switch (dtype) {
    case DType::kFloat16:
      return f(std::integral_constant<DType, DType::kFloat16>{});
    case DType::kBFloat16:
      return f(std::integral_constant<DType, DType::kBFloat16>{});
  }
  return Status::kUnsupported;
}

template <typename F>
Status dispatch_kv(KvDType kv, F&& f) {
  switch (kv) {
    case KvDType::kSame:
      return f(std::integral_constant<KvDType, KvDType::kSame>{});
    case KvDType::kFloat8E4M3:
      return f(std::integral_constant<KvDType, KvDType::kFloat8E4M3>{});
    case KvDType::kFloat8E5M2:
      return f(std::integral_constant<KvDType, KvDType::kFloat8E5M2>{});
  }
  return Status::kUnsupported;
}

template <typename F>
Status dispatch_head_dim(int head_dim, F&& f) {
  switch (head_dim) {
    case 64:
      return f(std::integral_constant<int, 64>{});
    case 128:
      return f(std::integral_constant<int, 128>{});
    case 256:
      return f(std::integral_constant<int, 256>{});
  }
  return Status::kUnsupported;
}

}  // namespace
}  // namespace cuda_detail

const char* status_string(Status s) {
  switch (s) {
    case Status::kOk:
      return "ok";
    case Status::kInvalidArgument:
      return "invalid argument";
    case Status::kCudaError:
      return "CUDA error";
    case Status::kUnsupported:
      return "unsupported configuration";
  }
  return "unknown status";
}

namespace {
std::atomic<int> g_kv_heads_per_cta{0};
}  // namespace

void set_kv_heads_per_cta(int n) { g_kv_heads_per_cta.store(n > 0 ? n : 0); }
int kv_heads_per_cta_override() { return g_kv_heads_per_cta.load(); }

namespace {
/// A process-wide setting: its value, or (while it is -1, never set) the environment's default,
/// stored once by the first reader (from_env may throw; the setting then stays unread).
int setting_or_env(std::atomic<int>& setting, int (*from_env)()) {
  int v = setting.load();
  if (v < 0) {
    int unset = -1;
    setting.compare_exchange_strong(unset, from_env());
    v = setting.load();
  }
  return v;
}
/// The value of environment variable `var` among `words` (unset or empty: `unset`); any other
/// value is refused with an error naming the variable and the words.
int env_choice(const char* var, std::initializer_list<std::pair<const char*, int>> words,
               int unset) {
  const char* e = std::getenv(var);
  if (e == nullptr || *e == '\0') return unset;
  std::string list;
  size_t i = 0;
  for (const auto& [word, value] : words) {
    if (std::strcmp(e, word) == 0) return value;
    list += std::string(i == 0 ? "" : i + 1 == words.size() ? " or " : ", ") + word;
    ++i;
  }
  throw std::invalid_argument(std::string(var) + ": must be " + list + ", got '" + e + "'");
}
}  // namespace

namespace {
/// The process default: TREEATTN_GROUPED_KERNEL=legacy|ws|auto in the environment (for engines
/// that load treeattn without calling set_grouped_kernel), else kAuto; any other value is
/// refused with an error naming the variable at the first launch that reads it.
int grouped_kernel_from_env() {
  return env_choice("TREEATTN_GROUPED_KERNEL",
                    {{"legacy", static_cast<int>(GroupedKernel::kLegacy)},
                     {"ws", static_cast<int>(GroupedKernel::kWarpSpecialized)},
                     {"auto", static_cast<int>(GroupedKernel::kAuto)}},
                    static_cast<int>(GroupedKernel::kAuto));
}
std::atomic<int> g_grouped_kernel{-1};  // -1: not read from the environment yet
}  // namespace

void set_grouped_kernel(GroupedKernel k) {
  if (k != GroupedKernel::kLegacy && k != GroupedKernel::kWarpSpecialized &&
      k != GroupedKernel::kAuto)
    throw std::invalid_argument(
        "set_grouped_kernel: k must be GroupedKernel::kLegacy, kWarpSpecialized or kAuto, got " +
        std::to_string(static_cast<int>(k)));
  g_grouped_kernel.store(static_cast<int>(k));
}
GroupedKernel grouped_kernel() {
  return static_cast<GroupedKernel>(setting_or_env(g_grouped_kernel, grouped_kernel_from_env));
}
bool grouped_kernel_supported(GroupedKernel k) {
  return k == GroupedKernel::kLegacy || k == GroupedKernel::kAuto ||
         (k == GroupedKernel::kWarpSpecialized && cuda_detail::ws_kernels_available());
}
namespace {
/// TREEATTN_PARTIALS=fp32|half, else kHalf; any other value is refused naming the variable.
int partial_precision_from_env() {
  return env_choice("TREEATTN_PARTIALS",
                    {{"fp32", static_cast<int>(PartialPrecision::kFloat32)},
                     {"half", static_cast<int>(PartialPrecision::kHalf)}},
                    static_cast<int>(PartialPrecision::kHalf));
}
std::atomic<int> g_partial_precision{-1};  // -1: not read from the environment yet
}  // namespace

void set_partial_precision(PartialPrecision p) {
  if (p != PartialPrecision::kFloat32 && p != PartialPrecision::kHalf)
    throw std::invalid_argument(
        "set_partial_precision: p must be PartialPrecision::kFloat32 or kHalf, got " +
        std::to_string(static_cast<int>(p)));
  g_partial_precision.store(static_cast<int>(p));
}
PartialPrecision partial_precision() {
  return static_cast<PartialPrecision>(
      setting_or_env(g_partial_precision, partial_precision_from_env));
}

namespace {
/// TREEATTN_SHORT_M16=on|off, else on; any other value is refused naming the variable.
int short_m16_from_env() { return env_choice("TREEATTN_SHORT_M16", {{"on", 1}, {"off", 0}}, 1); }
std::atomic<int> g_short_m16{-1};  // -1: not read from the environment yet
}  // namespace

void set_short_m16(bool on) { g_short_m16.store(on ? 1 : 0); }
bool short_m16() { return setting_or_env(g_short_m16, short_m16_from_env) != 0; }

namespace {
/// TREEATTN_PAIR_M16=on|off, else on; any other value is refused naming the variable.
int pair_m16_from_env() { return env_choice("TREEATTN_PAIR_M16", {{"on", 1}, {"off", 0}}, 1); }
std::atomic<int> g_pair_m16{-1};  // -1: not read from the environment yet
}  // namespace

void set_pair_m16(bool on) { g_pair_m16.store(on ? 1 : 0); }
bool pair_m16() { return setting_or_env(g_pair_m16, pair_m16_from_env) != 0; }

GroupedKernel grouped_kernel_for(const PlanLayout& layout, TileClass cls) {
  const int c = static_cast<int>(cls);
  if (c < 0 || c >= kNumTileClasses)
    throw std::invalid_argument("grouped_kernel_for: cls must be a TileClass, got " +
                                std::to_string(c));
  const GroupedKernel k = grouped_kernel();
  if (c == 0 || k == GroupedKernel::kLegacy || !tile::block_layout(c, layout.shape.head_dim) ||
      !cuda_detail::ws_kernels_available())
    return GroupedKernel::kLegacy;
  if (k == GroupedKernel::kWarpSpecialized) return k;
  return tile::ws_pays_off(c, layout.class_items_planned[c], layout.class_kv_tokens_planned[c],
                           layout.m16_items_planned, layout.shape.num_kv_heads,
                           cuda_detail::device_sm_count())
             ? GroupedKernel::kWarpSpecialized
             : GroupedKernel::kLegacy;
}

const char* last_cuda_error() { return cuda_detail::g_last_error; }

Status run_decode(const PlanLayout& layout, void* workspace, const DecodeArgs& args,
                  cudaStream_t stream) {
  using namespace cuda_detail;
  const PlanShape& shape = layout.shape;
  constexpr Status kBad = Status::kInvalidArgument;
  set_last_cuda_error("");
  // ---- validation (no device reads)
  if (args.dtype != DType::kFloat16 && args.dtype != DType::kBFloat16)
    return fail(kBad, "args.dtype: expected kFloat16 or kBFloat16, got %d",
                static_cast<int>(args.dtype));
  if (shape.head_dim != 64 && shape.head_dim != 128 && shape.head_dim != 256)
    return fail(kBad, "layout.shape.head_dim: expected 64, 128 or 256, got %d", shape.head_dim);
  if (shape.num_kv_heads <= 0 || shape.num_qo_heads <= 0 ||
      shape.num_qo_heads % shape.num_kv_heads != 0)
    return fail(kBad,
                "layout.shape: num_qo_heads %d must be a positive multiple of num_kv_heads %d",
                shape.num_qo_heads, shape.num_kv_heads);
  if (shape.page_size < 1 || shape.dtype_bytes != 2)
    return fail(kBad, "layout.shape: page_size %d must be >= 1 and dtype_bytes %d must be 2",
                shape.page_size, shape.dtype_bytes);
  if (args.kv_dtype != KvDType::kSame && !is_fp8(args.kv_dtype))
    return fail(kBad, "args.kv_dtype: expected kSame, kFloat8E4M3 or kFloat8E5M2, got %d",
                static_cast<int>(args.kv_dtype));
  const bool kv8 = is_fp8(args.kv_dtype);
  if (shape.kv_dtype_bytes != (kv8 ? 1 : 2))
    return fail(kBad,
                "layout.shape.kv_dtype_bytes: the plan was made for %d-byte K/V elements, "
                "args.kv_dtype %s has %d (plan again with the cache's KV dtype)",
                shape.kv_dtype_bytes, kv_dtype_name(args.kv_dtype), kv8 ? 1 : 2);
  if (!kv8 && (args.k_scale != nullptr || args.v_scale != nullptr))
    return fail(kBad, "%s: a scale is for an fp8 KV cache only (args.kv_dtype is kSame)",
                args.k_scale != nullptr ? "args.k_scale" : "args.v_scale");
  const struct {
    const void* ptr;
    const char* name;
    unsigned align;
  } ptrs[] = {{workspace, "workspace", 16},
              {args.q, "args.q", 16},
              {args.k, "args.k", 16},
              {args.v, "args.v", 16},
              {args.out, "args.out", 16}};
  for (const auto& p : ptrs) {
    if (p.ptr == nullptr) return fail(kBad, "%s: null pointer", p.name);
    if ((reinterpret_cast<uintptr_t>(p.ptr) & (p.align - 1)) != 0)
      return fail(kBad, "%s: must be %u-byte aligned", p.name, p.align);
  }
  for (const float* s : {args.k_scale, args.v_scale})
    if ((reinterpret_cast<uintptr_t>(s) & 3u) != 0)
      return fail(kBad, "%s: must be 4-byte aligned",
                  s == args.k_scale ? "args.k_scale" : "args.v_scale");
  if ((reinterpret_cast<uintptr_t>(args.timeline) & 7u) != 0)
    return fail(kBad, "args.timeline: must be 8-byte aligned");
  // launch grids: the layout's capacities, or the caller's caps, which the plan must fit
  PlanLayout grid = layout;
  for (int c = 0; c < kNumTileClasses; ++c) {
    const int64_t cap = args.launch_class_items[c];
    if (cap < -1) return fail(kBad, "args.launch_class_items[%d]: must be >= -1", c);
    if (cap < 0) continue;
    if (layout.class_items_planned[c] > cap)
      return fail(kBad,
                  "args.launch_class_items[%d]: the plan has %lld items of the class, above "
                  "the cap %lld",
                  c, static_cast<long long>(layout.class_items_planned[c]),
                  static_cast<long long>(cap));
    grid.class_items[c] = std::min(layout.class_items[c], cap);
  }
  if (args.launch_queries < -1) return fail(kBad, "args.launch_queries: must be >= -1");
  if (args.launch_queries >= 0) {
    if (layout.queries_planned > args.launch_queries)
      return fail(kBad, "args.launch_queries: the plan has %lld queries, above the cap %lld",
                  static_cast<long long>(layout.queries_planned),
                  static_cast<long long>(args.launch_queries));
    grid.queries = std::min(layout.queries, args.launch_queries);
  }
  const struct {
    int64_t stride;
    const char* name;
  } strides[] = {
      {args.q_stride_query, "args.q_stride_query"}, {args.q_stride_head, "args.q_stride_head"},
      {args.page_stride, "args.page_stride"},       {args.slot_stride, "args.slot_stride"},
      {args.head_stride, "args.head_stride"},       {args.o_stride_query, "args.o_stride_query"},
      {args.o_stride_head, "args.o_stride_head"}};
  for (const auto& s : strides)
    if (!stride_ok(s.stride))
      return fail(kBad, "%s: must be a positive multiple of 8 elements, got %lld", s.name,
                  static_cast<long long>(s.stride));
  if (kv8)                        // the fp8 loads are 16 elements (bytes) wide
    for (int i = 2; i <= 4; ++i)  // page, slot and head strides
      if (strides[i].stride % 16 != 0)
        return fail(kBad, "%s: must be a multiple of 16 elements for an fp8 KV cache, got %lld",
                    strides[i].name, static_cast<long long>(strides[i].stride));
  if (!(args.sm_scale >= 0.f) || !std::isfinite(args.sm_scale * kLog2e))
    return fail(kBad,
                "args.sm_scale: must be >= 0 (0 = 1/sqrt(head_dim)) and finite times log2(e), "
                "got %g",
                static_cast<double>(args.sm_scale));
  const int64_t total_items = layout.class_items[0] + layout.class_items[1] + layout.class_items[2];
  if (total_items <= 0 && layout.slots <= 0) return Status::kOk;  // nothing to run
  // grid limits of the launches (gridDim.x < 2^31, gridDim.y <= 65535)
  for (int c = 0; c < kNumTileClasses; ++c)
    if (layout.class_items[c] > 0x7fffffff)
      return fail(Status::kUnsupported, "layout.class_items[%d] = %lld exceeds 2^31 - 1", c,
                  static_cast<long long>(layout.class_items[c]));
  if (shape.num_kv_heads > 65535)
    return fail(Status::kUnsupported, "layout.shape.num_kv_heads = %d exceeds 65535",
                shape.num_kv_heads);
  if (layout.queries > 0x7fffffff)
    return fail(Status::kUnsupported, "layout.queries = %lld exceeds 2^31 - 1",
                static_cast<long long>(layout.queries));

  // ---- parameter block
  auto* base = static_cast<unsigned char*>(workspace);
  KernelParams p{};
  p.q = args.q;
  p.q_stride_query = args.q_stride_query;
  p.q_stride_head = args.q_stride_head;
  p.k = args.k;
  p.v = args.v;
  p.page_stride = args.page_stride;
  p.slot_stride = args.slot_stride;
  p.head_stride = args.head_stride;
  p.k_scale = kv8 ? args.k_scale : nullptr;
  p.v_scale = kv8 ? args.v_scale : nullptr;
  p.out = args.out;
  p.o_stride_query = args.o_stride_query;
  p.o_stride_head = args.o_stride_head;
  p.lse = args.lse;
  p.items = reinterpret_cast<const DeviceItem*>(base + layout.items_off);
  p.rows = reinterpret_cast<const int32_t*>(base + layout.rows_off);
  p.ranges = reinterpret_cast<const DeviceRange*>(base + layout.ranges_off);
  p.page_ids = reinterpret_cast<const int32_t*>(base + layout.page_ids_off);
  p.records = reinterpret_cast<const int4*>(base + layout.records_off);
  p.record_int4 = layout.record_bytes / 16;
  p.masks = reinterpret_cast<const uint64_t*>(base + layout.masks_off);
  p.merge_indptr = reinterpret_cast<const int32_t*>(base + layout.merge_indptr_off);
  p.merge_slots = reinterpret_cast<const int32_t*>(base + layout.merge_slots_off);
  p.partial_o = reinterpret_cast<float*>(base + layout.partial_o_off);
  p.partial_lse = reinterpret_cast<float*>(base + layout.partial_lse_off);
  p.num_qo_heads = shape.num_qo_heads;
  p.group = shape.num_qo_heads / shape.num_kv_heads;
  p.page_size = shape.page_size;
  p.page_shift = -1;
  for (int sh = 0; sh < 31; ++sh)
    if ((1 << sh) == shape.page_size) p.page_shift = sh;
  const float sm_scale =
      args.sm_scale > 0.f ? args.sm_scale : 1.f / std::sqrt(static_cast<float>(shape.head_dim));
  p.scale_log2 = sm_scale * kLog2e;
  for (int c = 0; c < kNumTileClasses; ++c)
    p.class_item_off[c] = static_cast<int32_t>(layout.class_item_off[c]);  // < 2^31 (plan_layout)
  p.timeline = args.timeline;
  p.timeline_merge_base = layout.items * shape.num_kv_heads;
  p.half_partials = partial_precision() == PartialPrecision::kHalf ? 1 : 0;

  const Status st = dispatch_dtype(args.dtype, [&](auto dt) {
    return dispatch_head_dim(shape.head_dim, [&](auto hd) {
      return dispatch_kv(args.kv_dtype, [&](auto kv) {
        return launch_plan<decltype(dt)::value, decltype(hd)::value, decltype(kv)::value>(p, grid,
                                                                                          stream);
      });
    });
  });
  if (st != Status::kOk && last_cuda_error()[0] == '\0')  // a launcher status without a message
    fail(st, "launch of the head_dim %d kernels: %s", shape.head_dim, status_string(st));
  return st;
}

}  // namespace treeattn
