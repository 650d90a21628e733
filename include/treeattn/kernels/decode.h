// CUDA entry points: run a Plan's work items (paged tree attention on tensor cores) and the
// per-query LSE merge. run_decode() never synchronizes and never allocates: the caller owns the
// workspace (plan_layout(plan).total_bytes bytes, device memory) and uploads the plan metadata
// (pack_plan into host memory, then a host->device copy of [0, layout.metadata_bytes)).
// DevicePlan (device_plan.h) does both and fills the KV strides below.
//
// KV layout: page p, slot s, kv head h, element d of K lives at
//   k + p * page_stride + s * slot_stride + h * head_stride + d     (elements)
// which covers K/V each [num_pages, page_size, kv_heads, head_dim] (page_stride = P*H*D,
// slot_stride = H*D, head_stride = D) and the combined [num_pages, 2, page_size, kv_heads,
// head_dim] layout of vLLM/FlashInfer (v = k + P*H*D, page_stride = 2*P*H*D). head_dim is
// contiguous and every stride is a multiple of 8 elements (16-byte loads), of 16 for the K/V
// strides of an fp8 cache (DecodeArgs::kv_dtype; 16-byte loads of 16 elements).
#pragma once

#include <cstdint>

#include "treeattn/common/fp8.h"
#include "treeattn/plan/layout.h"
#include "treeattn/plan/plan.h"

typedef struct CUstream_st* cudaStream_t;

namespace treeattn {

enum class DType : int32_t { kFloat16 = 0, kBFloat16 = 1 };

struct DecodeArgs {
  DType dtype = DType::kFloat16;
  const void* q = nullptr;  ///< [num_queries, num_qo_heads, head_dim], strides below
  int64_t q_stride_query = 0, q_stride_head = 0;
  const void* k = nullptr;
  const void* v = nullptr;
  int64_t page_stride = 0, slot_stride = 0, head_stride = 0;
  /// Element type of k and v: kSame = dtype; fp8 (e4m3 / e5m2) = one byte per element (the
  /// strides stay in elements, so in bytes), dequantized as k_scale[0] x value for K and
  /// v_scale[0] x value for V. The plan must have been made for it (layout.shape.kv_dtype_bytes 1).
  KvDType kv_dtype = KvDType::kSame;
  /// fp8 only: device float32 scalars, read by the kernels at run time (a captured CUDA graph
  /// replays with the values they hold then); nullptr = 1. Finite and > 0 (not checked on the
  /// device: the Python API checks host scales).
  const float* k_scale = nullptr;
  const float* v_scale = nullptr;
  void* out = nullptr;  ///< [num_queries, num_qo_heads, head_dim], same dtype as q
  int64_t o_stride_query = 0, o_stride_head = 0;
  float* lse = nullptr;  ///< optional [num_queries, num_qo_heads], natural log; nullptr = skip
  float sm_scale = 0.f;  ///< 0 -> 1/sqrt(head_dim)
  /// Diagnostics (`treeattn bench --timeline`): device buffer of timeline_records(layout) records
  /// of kTimelineWords words, 8-byte aligned, that every attention and merge CTA stamps at its
  /// phases (TimelineWord); nullptr (the default) = off.
  uint64_t* timeline = nullptr;
  /// Launch grids (optional): CTAs for at most launch_class_items[c] items of tile class c and
  /// merge CTAs for at most launch_queries queries; -1 (the default) = the layout's capacity.
  /// The plan uploaded must stay within them (run_decode checks the plan it sees; a captured
  /// graph keeps its grids, so the caller keeps every later plan within them too).
  int64_t launch_class_items[kNumTileClasses] = {-1, -1, -1};
  int64_t launch_queries = -1;
};

/// Words of one CTA's timeline record. Record of attention CTA (blockIdx.x, blockIdx.y) of tile
/// class c: (layout.class_item_off[c] + blockIdx.x) x num_kv_heads + blockIdx.y; of merge CTA q:
/// layout.items x num_kv_heads + q (stamped by its first head block, blockIdx.y 0). Global-timer
/// words are ns, clock words SM cycles (clock64);
/// a word of a phase the CTA did not reach stays as the caller left it (zero it first). Merge
/// CTAs: kTlClockItem once the merge list and its first slot ids were read (before the wait, so
/// it can precede kTlClockKv), kTlClockKv when the attention kernels' results became visible
/// (griddepcontrol.wait returned), kTlClockLoop unused.
enum TimelineWord : int {
  kTlGlobalStart = 0,  ///< the CTA's first instruction (%globaltimer)
  kTlClockStart = 1,   ///< same, clock64
  kTlClockItem = 2,    ///< its work item (or CTA record) arrived
  kTlClockKv = 3,      ///< its first KV tile landed in shared memory
  kTlClockLoop = 4,    ///< the main loop of its last KV head finished
  kTlClockEnd = 5,     ///< its outputs were written
  kTlGlobalEnd = 6,    ///< same, %globaltimer
  kTlTag = 7,          ///< bit 63 set; bits 0-15 SM id, 16-19 kernel config (kTlMergeConfig for
                       ///< the merge; tile_policy.h otherwise), 20-39 blockIdx.y
};
inline constexpr int kTimelineWords = 8;
inline constexpr int kTlMergeConfig = 15;
/// Records a timeline buffer for a workspace laid out as `layout` needs.
inline int64_t timeline_records(const PlanLayout& layout) {
  return layout.items * layout.shape.num_kv_heads + layout.queries;
}

/// Status codes of the launchers (host validation throws; launches return).
enum class Status : int32_t { kOk = 0, kInvalidArgument = 1, kCudaError = 2, kUnsupported = 3 };
const char* status_string(Status s);

/// Launches the attention kernels (one per non-empty tile class) and the merge on `stream`.
/// `workspace` is the device workspace laid out as `layout` with the metadata already uploaded.
/// The kM16 config follows layout.m16_items_planned: DevicePlan keeps it at the uploaded plan's
/// count; a caller packing a later plan into an older layout itself keeps the older plan's choice
/// (correct, only the config and so the bits may differ from a fresh layout's).
/// Capturable in a CUDA graph; replaying it after uploading a later plan's metadata that fits the
/// same layout runs that plan. Every status other than kOk comes with a message in
/// last_cuda_error() naming the argument, the limit or the CUDA error.
Status run_decode(const PlanLayout& layout, void* workspace, const DecodeArgs& args,
                  cudaStream_t stream);

/// Message of the last non-kOk status run_decode returned on this thread ("" after kOk).
const char* last_cuda_error();

/// KV heads one kM16 CTA walks (the head loop; include/treeattn/plan/tile_policy.h). 0 (the
/// default) = the tile policy's choice per launch; n > 0 forces n (at most the KV head count) on
/// every later launch of this process. For tests and tuning; read on the host at launch, so a
/// captured CUDA graph keeps the value it was captured with.
void set_kv_heads_per_cta(int n);
int kv_heads_per_cta_override();

/// Kernel of the grouped tile classes (kM64, kM128) at head_dim <= 128:
///  * kLegacy: one warp per 16 rows, every warp loads and computes (mma.sync, or wgmma per
///    warpgroup on sm_90a);
///  * kWarpSpecialized: the Hopper kernel of src/kernels/sm90/ (a producer warpgroup fills an
///    mbarrier ring, two consumer warpgroups ping-pong their wgmma and softmax). Runs only where
///    grouped_kernel_supported() says so; elsewhere the launcher takes kLegacy.
///  * kAuto: per launch and class, kWarpSpecialized where it runs and the plan's items of the
///    class are of the kind it is faster on (tile::ws_pays_off, from the layout's planned counts),
///    else kLegacy.
enum class GroupedKernel : int32_t { kLegacy = 0, kWarpSpecialized = 1, kAuto = 2 };
/// Selects the grouped kernel for every later launch of this process (default: the environment
/// variable TREEATTN_GROUPED_KERNEL=legacy|ws|auto, else kAuto). Read on
/// the host at launch, so a captured CUDA graph keeps the kernels it was captured with.
void set_grouped_kernel(GroupedKernel k);
GroupedKernel grouped_kernel();
/// True when the current device runs `k` (kWarpSpecialized: an sm_90 device and a build with
/// sm_90a code; kLegacy and kAuto: always).
bool grouped_kernel_supported(GroupedKernel k);
/// Precision of the partial outputs the attention kernels write for the merge (their LSEs stay
/// fp32, and the merge sums in fp32):
///  * kFloat32: fp32 (8 bytes a pair of elements);
///  * kHalf: the query dtype (fp16 or bf16), as FlashInfer's merge_state takes them: half the
///    bytes written and read back. Each partial is normalized (|o| <= max |V|) and the merge
///    weights sum to 1, so the rounding adds at most one unit roundoff of max |V| to an output
///    element (and typically far less: the errors of the partials are independent); the GPU
///    tests hold it to the same oracle tolerance (cpu/compare.h) as fp32 partials.
/// The workspace keeps the fp32 size, so a plan runs in either mode.
enum class PartialPrecision : int32_t { kFloat32 = 0, kHalf = 1 };
/// Selects the precision for every later launch of this process (default: the environment variable
/// TREEATTN_PARTIALS=fp32|half, else kHalf). Read on the host at launch, so a captured CUDA graph
/// keeps the mode it was captured with; atomic, like set_grouped_kernel. Other values throw
/// std::invalid_argument.
void set_partial_precision(PartialPrecision p);
PartialPrecision partial_precision();
/// Whether kM16 launches of short items run the 2-stage "short" config where the wide one would
/// run (tile::use_short_m16 on the plan's counts; true) or always the wide one (false). Default:
/// TREEATTN_SHORT_M16=on|off in the environment, else on. Read on the host at launch, so a
/// captured CUDA graph keeps the kernel it was captured with; atomic, like set_grouped_kernel.
void set_short_m16(bool on);
bool short_m16();
/// Whether deep kM16 launches of few CTAs run their items as cluster pairs (two CTAs of one
/// cluster split an item's KV tiles in two halves and merge them through distributed shared
/// memory, no partials: tile::use_pair_m16 on the plan's counts, sm_90+; true) or one CTA per
/// item (false). Default: TREEATTN_PAIR_M16=on|off in the environment, else on. Read on the host
/// at launch, so a captured CUDA graph keeps the launch it was captured with; atomic, like
/// set_grouped_kernel.
void set_pair_m16(bool on);
bool pair_m16();
/// The kernel (kLegacy or kWarpSpecialized, never kAuto) that run_decode launches tile class `cls`
/// of `layout` on, on the current device under the current set_grouped_kernel(): kM16 and
/// head_dim 256 always kLegacy (fp8 KV caches run either: the ws producer converts). Host-only.
GroupedKernel grouped_kernel_for(const PlanLayout& layout, TileClass cls);

}  // namespace treeattn
