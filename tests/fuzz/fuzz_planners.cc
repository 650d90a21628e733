// libFuzzer target over the planners. The input bytes decode into a small tree (up to 24 nodes,
// one to a few hundred tokens each with tile edges, several roots, queries on any node; pages of
// 1 to 32 tokens, now and then of kMaxPageSize), a few updates (append with copy-on-write forks,
// fork, remove), a model shape, a device and now and then a fixed paths group size; then every
// planner (planner_names(), auto included) must return a plan that passes validate_plan and
// check_coverage, lays out and packs with a fuzzed headroom, and has finite statistics; for one
// planner per input the CPU executor must match the float64 oracle (compare_to_oracle, fp32).
// Only std::invalid_argument from the tree updates is expected; any other exception, a crash or a
// mismatch aborts.
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include "fuzz_bytes.h"
#include "treeattn/cpu/compare.h"
#include "treeattn/cpu/executor.h"
#include "treeattn/cpu/random_inputs.h"
#include "treeattn/cpu/reference.h"
#include "treeattn/plan/coverage.h"
#include "treeattn/plan/layout.h"
#include "treeattn/plan/planner.h"
#include "treeattn/plan/stats.h"
#include "treeattn/tree/prefix_tree.h"

namespace {

using treeattn::fuzz::Bytes;

constexpr int32_t kTileEdges[] = {1, 15, 16, 17, 63, 64, 65, 127, 128, 129, 255, 256, 257};

int32_t tokens_from(uint8_t a, uint8_t b) {
  if (a < 64) return kTileEdges[b % (sizeof(kTileEdges) / sizeof(kTileEdges[0]))];
  if (a < 160) return 1 + b % 8;
  return 1 + (a % 2) * 256 + b;  // up to 512
}

[[noreturn]] void fail() { __builtin_trap(); }

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace treeattn;
  Bytes in{data, size};
  PrefixTree tree;
  const uint8_t page_byte = in.next();
  tree.page_size = page_byte >= 250 ? kMaxPageSize : 1 + page_byte % 32;
  const int32_t n = 1 + in.next() % 24;
  const int32_t P = tree.page_size;
  // Parents precede children; node 0 is a root, later nodes are roots now and then.
  std::vector<int64_t> start(n, 0);
  for (int32_t i = 0; i < n; ++i) {
    TreeNode nd;
    nd.id = i;
    const uint8_t pb = in.next();
    nd.parent = i == 0 || pb >= 240 ? kNoParent : pb % i;
    nd.tokens = tokens_from(in.next(), in.next());
    if (nd.parent != kNoParent) start[i] = start[nd.parent] + tree.nodes[nd.parent].tokens;
    nd.page_offset = static_cast<int32_t>(start[i] % P);
    nd.pages.resize(static_cast<size_t>((nd.page_offset + nd.tokens + P - 1) / P));
    for (int32_t& p : nd.pages) p = tree.num_pages++;
    tree.nodes.push_back(nd);
  }
  // Shuffle the page ids (a permutation keeps the layout valid).
  std::vector<int32_t> perm(tree.num_pages);
  for (int32_t i = 0; i < tree.num_pages; ++i) perm[i] = i;
  for (int32_t i = tree.num_pages - 1; i > 0 && in.more(); --i)
    std::swap(perm[i], perm[in.next() % (i + 1)]);
  for (TreeNode& nd : tree.nodes)
    for (int32_t& p : nd.pages) p = perm[p];
  const int32_t nq = 1 + in.next() % 32;
  for (int32_t q = 0; q < nq; ++q) tree.query_node.push_back(in.next() % n);
  for (int k = 0; k < 16; ++k) tree.free_pages.push_back(tree.num_pages++);
  validate(tree);  // the construction above is valid by design

  const uint8_t ops = in.next() % 6;
  for (uint8_t k = 0; k < ops; ++k) {
    const uint8_t op = in.next(), arg = in.next();
    const int32_t q = static_cast<int32_t>(arg % tree.num_queries());
    try {
      switch (op % 4) {
        case 0:
          tree.append_tokens(q, 1 + in.next() % 40);
          break;
        case 1:
          tree.fork_query(q, 1 + in.next() % 3);
          break;
        case 2:
          tree.remove_query(q);
          break;
        default:
          tree.add_query(static_cast<int32_t>(in.next() % tree.nodes.size()));
          break;
      }
    } catch (const std::invalid_argument&) {
      // empty page pool, last query, dead node: clear errors
    }
  }
  validate(tree);

  static constexpr int32_t kHeads[][2] = {{1, 1},  {4, 1},   {8, 2},  {32, 8},
                                          {28, 4}, {16, 16}, {64, 1}, {128, 1}};
  static constexpr int32_t kDims[] = {64, 128, 256};
  static constexpr const char* kDevices[] = {"h200", "h100", "a100"};
  const uint8_t hb = in.next();
  PlanOptions opts;
  opts.num_qo_heads = kHeads[hb % 8][0];
  opts.num_kv_heads = kHeads[hb % 8][1];
  opts.head_dim = kDims[(hb / 8) % 3];
  opts.device = device_preset(kDevices[in.next() % 3]);
  const uint8_t sm = in.next();
  if (sm >= 128) opts.device.num_sms = 1 + sm % 16;  // few SMs: different splits
  const double headroom = 1.0 + (in.next() % 8) * 0.25;
  const size_t exec_planner = in.next() % planner_names().size();
  // the paths planner's group size (auto's paths candidate too): the cost model's on most inputs,
  // else fixed at 1-64 (lowered to the head group's cap)
  const uint8_t gb = in.next();
  opts.paths_group = gb < 192 ? 0 : 1 + gb % kMaxMaskedRows;

  for (size_t pi = 0; pi < planner_names().size(); ++pi) {
    opts.planner = planner_names()[pi];
    const Plan plan = make_plan(tree, opts);
    validate_plan(plan);
    check_coverage(tree, plan);
    if (plan.tree_version != tree.version) fail();
    const PlanLayout layout = plan_layout(plan, headroom);
    std::vector<char> meta(static_cast<size_t>(layout.metadata_bytes));
    pack_plan(plan, layout, meta.data());
    const PlanStats st = plan_stats(tree, plan, opts.device);
    if (!std::isfinite(st.est_time_us) || st.est_time_us <= 0 || st.redundant_kv_bytes < 0) fail();
    if (pi != exec_planner) continue;
    // Executor vs oracle on one KV head (its whole GQA group), when the context is small.
    int64_t work = 0;
    for (int32_t q = 0; q < tree.num_queries(); ++q) work += query_context(tree, q);
    const int32_t group = opts.num_qo_heads / opts.num_kv_heads;
    if (work * group * opts.head_dim > 300000) continue;  // keeps each input well under a second
    const int64_t kv = int64_t{tree.num_pages} * tree.page_size * opts.head_dim;
    if (kv > (int64_t{1} << 22)) continue;  // the random K and V span every page
    Plan sub = plan;
    sub.shape.num_kv_heads = 1;
    sub.shape.num_qo_heads = group;
    const RandomInputs data = random_inputs(tree, group, 1, opts.head_dim, false, size);
    const HostAttentionInputs hin = host_inputs(data, group, 1, opts.head_dim);
    const size_t rows = static_cast<size_t>(tree.num_queries()) * group;
    std::vector<double> ref(rows * opts.head_dim), ref_lse(rows);
    std::vector<float> out(rows * opts.head_dim, NAN), lse(rows, NAN);
    reference_attention(tree, hin, {}, ref.data(), ref_lse.data());
    execute_plan_cpu(sub, hin, out.data(), lse.data());
    std::vector<int32_t> all(static_cast<size_t>(tree.num_queries()));
    for (int32_t q = 0; q < tree.num_queries(); ++q) all[q] = q;
    if (!compare_to_oracle(ref.data(), ref_lse.data(), out.data(), lse.data(), group, opts.head_dim,
                           all, OutputDtype::kFp32)
             .pass)
      fail();
  }
  return 0;
}
