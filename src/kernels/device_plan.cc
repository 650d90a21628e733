// DevicePlan (include/treeattn/kernels/device_plan.h): workspace and pinned staging allocation,
// asynchronous plan upload, page ids resolved from a device table (resolve_pages.cu's kernel),
// run() with errors turned into exceptions, and the KV-layout helpers. Plain C++ on the CUDA
// runtime API.
#include "treeattn/kernels/device_plan.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <climits>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "resolve_pages.h"
#include "treeattn/common/error.h"

namespace treeattn {
namespace {

void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess)
    throw std::runtime_error(std::string("DevicePlan: ") + what + ": " + cudaGetErrorString(e));
}

/// Makes `device` current for the scope, restoring the previous one (no-op when it already is).
class DeviceScope {
 public:
  explicit DeviceScope(int device) {
    check(cudaGetDevice(&prev_), "cudaGetDevice");
    if (prev_ == device)
      prev_ = -1;
    else
      check(cudaSetDevice(device), "cudaSetDevice");
  }
  ~DeviceScope() {
    if (prev_ >= 0) cudaSetDevice(prev_);
  }
  DeviceScope(const DeviceScope&) = delete;
  DeviceScope& operator=(const DeviceScope&) = delete;

 private:
  int prev_ = -1;
};

/// Throws std::runtime_error "DevicePlan: <what> is not allowed while the stream is captured
/// into a CUDA graph<why>" when `stream` is being captured.
void check_not_capturing(cudaStream_t stream, const char* what, const char* why) {
  cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
  check(cudaStreamIsCapturing(stream, &capture), "cudaStreamIsCapturing");
  if (capture != cudaStreamCaptureStatusNone)
    throw std::runtime_error(std::string("DevicePlan: ") + what +
                             " is not allowed while the stream is captured into a CUDA graph" +
                             why);
}

/// A device buffer, the pinned buffer its copies come from, and the event recorded after the
/// last use of both (all nullptr: none). alloc_staged() makes all three or none (it throws
/// with none left); free_staged() waits for the event, then frees them.
void alloc_staged(void** device, size_t device_bytes, void** host, size_t host_bytes, void** event,
                  const char* what) {
  try {
    check(cudaMalloc(device, device_bytes), (std::string("cudaMalloc of the ") + what).c_str());
    check(cudaMallocHost(host, host_bytes),
          (std::string("cudaMallocHost for the ") + what).c_str());
    cudaEvent_t ev = nullptr;
    check(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming), "cudaEventCreate");
    *event = ev;
  } catch (...) {
    if (*host != nullptr) cudaFreeHost(*host);
    if (*device != nullptr) cudaFree(*device);
    *device = *host = nullptr;
    throw;
  }
}

void free_staged(void** device, void** host, void** event) {
  if (*event != nullptr) {
    cudaEventSynchronize(static_cast<cudaEvent_t>(*event));
    cudaEventDestroy(static_cast<cudaEvent_t>(*event));
  }
  if (*host != nullptr) cudaFreeHost(*host);
  if (*device != nullptr) cudaFree(*device);
  *device = *host = *event = nullptr;
}

}  // namespace

KvStrides split_kv_strides(int64_t page_size, int64_t kv_heads, int64_t head_dim) {
  KvStrides s;
  s.head = head_dim;
  s.slot = kv_heads * head_dim;
  s.page = page_size * s.slot;
  return s;
}

KvStrides combined_kv_strides(int64_t page_size, int64_t kv_heads, int64_t head_dim) {
  KvStrides s = split_kv_strides(page_size, kv_heads, head_dim);
  s.kv = s.page;
  s.page *= 2;
  return s;
}

void set_kv_split(DecodeArgs* args, const void* k, const void* v, const KvStrides& strides) {
  args->k = k;
  args->v = v;
  args->page_stride = strides.page;
  args->slot_stride = strides.slot;
  args->head_stride = strides.head;
}

void set_kv_combined(DecodeArgs* args, const void* kv, const KvStrides& strides) {
  const int64_t element_bytes = is_fp8(args->kv_dtype) ? 1 : 2;  // fp8, else fp16 / bf16
  set_kv_split(args, kv, static_cast<const char*>(kv) + strides.kv * element_bytes, strides);
}

DevicePlan::DevicePlan(int device) {
  int count = 0;
  const cudaError_t e = cudaGetDeviceCount(&count);
  if (e != cudaSuccess || count == 0) {
    cudaGetLastError();  // clear the sticky error of a missing driver
    throw std::runtime_error(std::string("device: no GPU (CUDA reports: ") +
                             (e != cudaSuccess ? cudaGetErrorString(e) : "0 devices") + ")");
  }
  if (device < 0) check(cudaGetDevice(&device), "cudaGetDevice");
  TA_CHECK_ARG(device < count, "device", "cuda:", device, " does not exist (", count, " GPU(s))");
  device_ = device;
}

DevicePlan::~DevicePlan() {
  try {
    release();
  } catch (...) {  // errors at process exit are ignored
  }
}

void DevicePlan::release_resolve() {
  if (resolve_pairs_ == nullptr) return;
  DeviceScope scope(device_);
  free_staged(&resolve_pairs_, &resolve_staging_, &resolve_done_);
  resolve_cap_ = 0;
}

void DevicePlan::release() {
  release_resolve();
  if (workspace_ == nullptr) return;
  DeviceScope scope(device_);
  free_staged(&workspace_, &staging_, &copy_done_);
  layout_ = PlanLayout{};
}

bool DevicePlan::fits(const Plan& plan) const {
  return workspace_ != nullptr && plan_fits(plan, layout_);
}

void DevicePlan::upload(const Plan& plan, cudaStream_t stream, double headroom,
                        const LayoutReserve* reserve) {
  DeviceScope scope(device_);
  check_not_capturing(stream, "plan upload",
                      " (upload before capturing; a graph around run() replays any later plan "
                      "that fits)");
  if (!fits(plan)) {
    const PlanLayout layout = plan_layout(plan, headroom, reserve);  // validates headroom
    release();
    alloc_staged(&workspace_, static_cast<size_t>(std::max<int64_t>(layout.total_bytes, 256)),
                 &staging_, static_cast<size_t>(std::max<int64_t>(layout.metadata_bytes, 256)),
                 &copy_done_, "workspace");
    layout_ = layout;
  }
  // The previous upload's copy must have read the staging buffer before it is rewritten.
  check(cudaEventSynchronize(static_cast<cudaEvent_t>(copy_done_)), "waiting for the last upload");
  pack_plan(plan, layout_, staging_);
  record_copies_known_ = false;
  // run() picks the kM16 config and the grouped kernels for the plan it runs (a captured graph
  // keeps its own)
  set_planned_counts(plan, &layout_);
  check(cudaMemcpyAsync(workspace_, staging_, static_cast<size_t>(layout_.metadata_bytes),
                        cudaMemcpyHostToDevice, stream),
        "plan metadata upload (cudaMemcpyAsync)");
  check(cudaEventRecord(static_cast<cudaEvent_t>(copy_done_), stream), "cudaEventRecord");
}

void DevicePlan::resolve_pages(const int32_t* pairs, int64_t n, const int32_t* table,
                               int32_t num_pages, cudaStream_t stream) {
  if (workspace_ == nullptr)
    throw std::logic_error("DevicePlan::resolve_pages: no plan uploaded (call upload() first)");
  TA_CHECK_ARG(n >= 0 && n <= layout_.page_ids, "pairs", "expected at most the layout's ",
               layout_.page_ids, " page ids, got ", n);
  TA_CHECK_ARG(num_pages >= 1, "num_pages", "must be >= 1, got ", num_pages);
  if (n == 0) return;
  TA_CHECK_ARG(pairs != nullptr, "pairs", "is null");
  TA_CHECK_ARG(table != nullptr, "table", "is null");
  for (int64_t i = 0; i < n; ++i)
    TA_CHECK_ARG(pairs[2 * i] >= 0 && pairs[2 * i] < layout_.page_ids && pairs[2 * i + 1] >= 0,
                 "pairs", "pair ", i, " (", pairs[2 * i], ", ", pairs[2 * i + 1],
                 ") is outside the plan's page ids or the table");
  DeviceScope scope(device_);
  check_not_capturing(stream, "resolve_pages", "");
  // the pairs, then one pair per record copy of each pair's page id (its position counted from
  // the page ids too, so that the kernel writes both alike); the copies are read once per upload
  // from the staged metadata, which the next upload alone rewrites
  if (!record_copies_known_) {
    const std::vector<int32_t> flat = record_page_copies(layout_, staging_);
    record_copies_.resize(flat.size() / 2);
    for (size_t i = 0; i < record_copies_.size(); ++i)
      record_copies_[i] = {flat[2 * i], flat[2 * i + 1]};
    std::sort(record_copies_.begin(), record_copies_.end());
    record_copies_known_ = true;
  }
  const auto by_position = [](const std::pair<int32_t, int32_t>& c, int32_t pos) {
    return c.first < pos;
  };
  resolve_extra_.clear();
  for (int64_t i = 0; i < n; ++i) {
    for (auto c = std::lower_bound(record_copies_.begin(), record_copies_.end(), pairs[2 * i],
                                   by_position);
         c != record_copies_.end() && c->first == pairs[2 * i]; ++c) {
      resolve_extra_.push_back(c->second);
      resolve_extra_.push_back(pairs[2 * i + 1]);
    }
  }
  const int64_t total = n + static_cast<int64_t>(resolve_extra_.size() / 2);
  TA_CHECK_ARG(total <= INT32_MAX, "pairs", n, " pairs and their ", total - n,
               " record copies exceed 2^31-1");
  if (total > resolve_cap_) {
    const int64_t cap = std::max<int64_t>(total, layout_.page_ids);
    const size_t bytes = static_cast<size_t>(cap) * 2 * sizeof(int32_t);
    release_resolve();
    alloc_staged(&resolve_pairs_, bytes, &resolve_staging_, bytes, &resolve_done_, "resolve pairs");
    resolve_cap_ = cap;
  }
  // the previous call's copy and kernel must have read the pair buffers before they are rewritten
  check(cudaEventSynchronize(static_cast<cudaEvent_t>(resolve_done_)),
        "waiting for the last resolve copy");
  // the pairs, then their record copies, into the pinned buffer (the pairs copied once)
  std::copy(resolve_extra_.begin(), resolve_extra_.end(),
            std::copy(pairs, pairs + 2 * n, static_cast<int32_t*>(resolve_staging_)));
  const size_t bytes = static_cast<size_t>(total) * 2 * sizeof(int32_t);
  check(cudaMemcpyAsync(resolve_pairs_, resolve_staging_, bytes, cudaMemcpyHostToDevice, stream),
        "resolve pairs upload (cudaMemcpyAsync)");
  int32_t* page_ids =
      reinterpret_cast<int32_t*>(static_cast<char*>(workspace_) + layout_.page_ids_off);
  check(cuda_detail::launch_resolve_pages(page_ids, static_cast<const int32_t*>(resolve_pairs_),
                                          static_cast<int32_t>(total), table, num_pages, stream),
        "resolve_pages kernel launch");
  // after the kernel: the next call rewrites both pair buffers only once it has read them (also
  // when that call comes on another stream)
  check(cudaEventRecord(static_cast<cudaEvent_t>(resolve_done_), stream), "cudaEventRecord");
}

void DevicePlan::run(const DecodeArgs& args, cudaStream_t stream) const {
  if (workspace_ == nullptr)
    throw std::logic_error("DevicePlan::run: no plan uploaded (call upload() first)");
  DeviceScope scope(device_);
  const Status st = run_decode(layout_, workspace_, args, stream);
  if (st == Status::kOk) return;
  if (st == Status::kInvalidArgument)
    throw std::invalid_argument(std::string("decode: ") + last_cuda_error());
  throw std::runtime_error(std::string("decode: ") + status_string(st) + ": " + last_cuda_error());
}

}  // namespace treeattn
