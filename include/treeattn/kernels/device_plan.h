// DevicePlan: the device side of a Plan, and the one path from a host plan to run_decode() for the
// bindings, `treeattn bench` and the GPU tests. It owns the device workspace (plan metadata and
// fp32 partials, laid out by plan_layout()) and a pinned staging buffer for the metadata, uploads
// plans asynchronously and runs them; set_kv_split / set_kv_combined fill DecodeArgs' KV pointers
// and strides for the two cache layouts.
//
//   DevicePlan dp;                                // on the current CUDA device
//   dp.upload(plan, stream, /*headroom=*/1.5);    // allocates, packs, copies (async)
//   DecodeArgs a = ...;                           // q, out, lse; set_kv_split(&a, ...)
//   dp.run(a, stream);                            // capturable in a CUDA graph
//   if (dp.fits(next)) dp.upload(next, stream);   // same workspace: captured graphs stay valid
//   dp.resolve_pages(pairs, n, table, num_pages, stream);  // page ids from a device block table
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

#include "treeattn/kernels/decode.h"
#include "treeattn/plan/layout.h"
#include "treeattn/plan/plan.h"

namespace treeattn {

/// Element strides of a paged KV cache: page p, slot s, KV head h of K start at
/// k + p * page + s * slot + h * head (head_dim contiguous). `kv` is used by the combined layout
/// only: the elements from a page's K block to its V block.
struct KvStrides {
  int64_t page = 0, slot = 0, head = 0, kv = 0;
};

/// Strides of contiguous K and V tensors, each [num_pages, page_size, kv_heads, head_dim].
KvStrides split_kv_strides(int64_t page_size, int64_t kv_heads, int64_t head_dim);
/// Strides of one contiguous [num_pages, 2, page_size, kv_heads, head_dim] cache (vLLM,
/// FlashInfer): K of page p, then its V.
KvStrides combined_kv_strides(int64_t page_size, int64_t kv_heads, int64_t head_dim);

/// K and V in two tensors of the split layout (strides of K; V has the same).
void set_kv_split(DecodeArgs* args, const void* k, const void* v, const KvStrides& strides);
/// K and V in one tensor of the combined layout: v = kv + strides.kv elements of
/// args->kv_dtype (set it first: 1 byte for fp8, else 2).
void set_kv_combined(DecodeArgs* args, const void* kv, const KvStrides& strides);

/// Thread safety: not thread-safe; use one DevicePlan from one thread at a time (or under the
/// caller's lock). On the device, upload() and run() are ordered by their streams only: across
/// two streams the caller orders them (events), else a kernel may read metadata mid-copy.
class DevicePlan {
 public:
  /// Binds to CUDA device `device` (-1: the current one). Allocates nothing yet. Throws
  /// std::runtime_error when no GPU is usable, std::invalid_argument naming "device" when it does
  /// not exist.
  explicit DevicePlan(int device = -1);
  ~DevicePlan();
  DevicePlan(const DevicePlan&) = delete;
  DevicePlan& operator=(const DevicePlan&) = delete;

  /// Packs `plan` into the pinned staging buffer and copies it to the workspace on `stream`
  /// (asynchronously; a later upload waits for this copy before reusing the buffer). When the
  /// plan does not fit the current workspace (or none exists), frees it and allocates one laid out
  /// as plan_layout(plan, headroom, reserve) first: graphs captured around run() stay valid only
  /// across uploads that fit. Not allowed while `stream` is being captured. Throws
  /// std::invalid_argument naming "plan" / "headroom" / "reserve", or std::runtime_error with the
  /// CUDA error.
  void upload(const Plan& plan, cudaStream_t stream, double headroom = 1.0,
              const LayoutReserve* reserve = nullptr);
  /// Fills page ids of the uploaded plan from a device array, on `stream`: for i < n, entry
  /// pairs[2i] of the plan's page ids becomes table[pairs[2i + 1]] (an id outside [0, num_pages)
  /// becomes 0, so that a bad table cannot send the kernels outside the cache), and so do the
  /// copies of that entry in the kM16 items' records (layout.h). For an engine whose
  /// block table lives on the device: the host plans with placeholder ids, and this writes the real
  /// ones without a device-to-host copy. `pairs` (2n int32, host) goes through a pinned buffer of
  /// this object (the call returns before the copy ends; it waits on the host for the previous
  /// call's kernel before it reuses the buffers); `table` is a device int32 array. Call it
  /// after the upload() of the plan that `pairs` indexes (positions within its page_ids) and
  /// before run(); a kernel launched after it reads the new ids. Not while `stream` is captured.
  /// Throws std::invalid_argument naming "pairs" / "table" / "num_pages", std::logic_error before
  /// any upload, std::runtime_error with the CUDA error.
  void resolve_pages(const int32_t* pairs, int64_t n, const int32_t* table, int32_t num_pages,
                     cudaStream_t stream);
  /// True when a workspace exists and `plan` fits its layout (upload() would not reallocate).
  bool fits(const Plan& plan) const;
  /// Runs the uploaded plan on `stream` (run_decode on this plan's device). Throws
  /// std::invalid_argument (the argument named), std::runtime_error (CUDA error, unsupported
  /// configuration), std::logic_error when nothing was uploaded.
  void run(const DecodeArgs& args, cudaStream_t stream) const;
  /// Frees the workspace and staging buffer (waits for a pending upload copy); upload() again
  /// before run(). Make sure no kernel using the workspace is still running.
  void release();

  bool uploaded() const { return workspace_ != nullptr; }
  int device() const { return device_; }
  const PlanLayout& layout() const { return layout_; }  ///< of the current workspace
  void* workspace() const { return workspace_; }

 private:
  PlanLayout layout_{};
  void* workspace_ = nullptr;
  void* staging_ = nullptr;    ///< pinned host memory, layout_.metadata_bytes
  void* copy_done_ = nullptr;  ///< cudaEvent_t recorded after the last staging copy
  // resolve_pages(): pinned and device buffers of `resolve_cap_` pairs, and the event after the
  // last call's kernel
  void* resolve_staging_ = nullptr;
  void* resolve_pairs_ = nullptr;
  void* resolve_done_ = nullptr;
  int64_t resolve_cap_ = 0;
  // the kM16 records' copies of page ids in the uploaded plan (record_page_copies: page-id
  // position, copy position), sorted by page-id position, read at the first resolve after an
  // upload: resolve_pages rewrites a page id's copies with it
  std::vector<std::pair<int32_t, int32_t>> record_copies_;
  bool record_copies_known_ = false;
  std::vector<int32_t> resolve_extra_;  ///< resolve_pages: the call's record-copy pairs
  void release_resolve();
  int device_ = -1;
};

}  // namespace treeattn
