// Random test inputs from the value stream of treeattn/common/random_values.h (every value rounded
// to fp16 or bf16, K/V of an fp8 spec to k_scale x fp8(value / k_scale), so the CPU and GPU paths
// see identical numbers; deterministic per seed), their
// HostAttentionInputs view, and the float64 oracle on a sample of queries whose inputs are
// recomputed from the stream for the sampled paths only.
#include "treeattn/cpu/random_inputs.h"

#include <cmath>
#include <cstdint>
#include <unordered_map>

#include "treeattn/common/error.h"
#include "treeattn/common/fp8.h"
#include "treeattn/common/half.h"

namespace treeattn {
namespace {

/// Element i of tensor t as stored: q (and K/V of kSame) rounded to fp16 or bf16; K/V of an fp8
/// spec the dequantized value scale x fp8(value / scale) (the stored code times its scale).
float rounded(const RandomValueStream& s, const RandomInputSpec& spec, InputTensor t, uint64_t i) {
  const float x = s.value(t, i);
  if (t != InputTensor::kQ && is_fp8(spec.kv_dtype)) {
    const float scale = t == InputTensor::kK ? spec.k_scale : spec.v_scale;
    return scale * round_to_fp8(x / scale, spec.kv_dtype);
  }
  return spec.bf16 ? round_to_bf16(x) : round_to_fp16(x);
}

void fill(std::vector<float>* v, const RandomValueStream& s, const RandomInputSpec& spec,
          InputTensor t, uint64_t n) {
  v->resize(n);
  for (uint64_t i = 0; i < n; ++i) (*v)[i] = rounded(s, spec, t, i);
}

}  // namespace

RandomInputs random_inputs(const PrefixTree& tree, const RandomInputSpec& spec) {
  TA_CHECK_ARG(tree.num_pages >= 0, "tree.num_pages", "must be >= 0, got ", tree.num_pages);
  check_page_size(tree.page_size, "tree.page_size");
  const RandomValueStream s =
      random_value_stream(spec, tree.num_queries(), tree.num_pages, tree.page_size);
  RandomInputs r;
  fill(&r.q, s, spec, InputTensor::kQ, s.q_elems);
  fill(&r.k, s, spec, InputTensor::kK, s.kv_elems);
  fill(&r.v, s, spec, InputTensor::kV, s.kv_elems);
  return r;
}

RandomInputs random_inputs(const PrefixTree& tree, int32_t num_qo_heads, int32_t num_kv_heads,
                           int32_t head_dim, bool bf16, uint64_t seed) {
  return random_inputs(tree, RandomInputSpec{num_qo_heads, num_kv_heads, head_dim, bf16, seed});
}

HostAttentionInputs host_inputs(const RandomInputs& data, int32_t num_qo_heads,
                                int32_t num_kv_heads, int32_t head_dim) {
  return host_inputs(data.q.data(), data.k.data(), data.v.data(), num_qo_heads, num_kv_heads,
                     head_dim);
}

OracleSample oracle_sample(const PrefixTree& tree, const RandomInputSpec& spec, int32_t k,
                           double max_work) {
  validate(tree);
  const RandomValueStream s =
      random_value_stream(spec, tree.num_queries(), tree.num_pages, tree.page_size);
  const int64_t H = spec.num_qo_heads, D = spec.head_dim;
  const int64_t page_elems = static_cast<int64_t>(tree.page_size) * spec.num_kv_heads * D;
  OracleSample rs;
  rs.num_qo_heads = spec.num_qo_heads;
  rs.head_dim = spec.head_dim;
  rs.bf16 = spec.bf16;
  double work = 0;
  for (const int32_t q : sample_queries(tree.num_queries(), k)) {
    const double w = static_cast<double>(query_context(tree, q)) * H * D * 2;
    if (!rs.queries.empty() && work + w > max_work) break;
    rs.queries.push_back(q);
    work += w;
  }
  // The sub-tree of the sampled queries' paths, its pages renumbered densely in first-use order.
  PrefixTree sub;
  sub.page_size = tree.page_size;
  std::unordered_map<int32_t, int32_t> node_map, page_map;
  std::vector<int32_t> orig_page;
  for (const int32_t q : rs.queries) {
    int32_t parent = kNoParent;
    for (const int32_t n : query_path(tree, q)) {
      auto it = node_map.find(n);
      if (it == node_map.end()) {
        TreeNode nn;
        nn.id = static_cast<int64_t>(sub.nodes.size());
        nn.parent = parent;
        nn.tokens = tree.nodes[n].tokens;
        nn.page_offset = tree.nodes[n].page_offset;
        for (const int32_t pg : tree.nodes[n].pages) {
          const auto ins = page_map.emplace(pg, static_cast<int32_t>(orig_page.size()));
          if (ins.second) orig_page.push_back(pg);
          nn.pages.push_back(ins.first->second);
        }
        it = node_map.emplace(n, static_cast<int32_t>(sub.nodes.size())).first;
        sub.nodes.push_back(std::move(nn));
      }
      parent = it->second;
    }
    sub.query_node.push_back(parent);
  }
  sub.num_pages = static_cast<int32_t>(orig_page.size());
  // Its inputs: the sampled queries' q rows and the used pages' k, v, from the stream.
  RandomInputs data;
  data.q.resize(rs.queries.size() * H * D);
  data.k.resize(orig_page.size() * page_elems);
  data.v.resize(data.k.size());
  for (size_t i = 0; i < rs.queries.size(); ++i)
    for (int64_t e = 0; e < H * D; ++e)
      data.q[i * H * D + e] =
          rounded(s, spec, InputTensor::kQ, static_cast<uint64_t>(rs.queries[i]) * H * D + e);
  for (size_t pg = 0; pg < orig_page.size(); ++pg)
    for (int64_t e = 0; e < page_elems; ++e) {
      const uint64_t src = static_cast<uint64_t>(orig_page[pg]) * page_elems + e;
      data.k[pg * page_elems + e] = rounded(s, spec, InputTensor::kK, src);
      data.v[pg * page_elems + e] = rounded(s, spec, InputTensor::kV, src);
    }
  rs.out.resize(rs.queries.size() * H * D);
  rs.lse.resize(rs.queries.size() * H);
  reference_attention(sub,
                      host_inputs(data.q.data(), data.k.data(), data.v.data(), spec.num_qo_heads,
                                  spec.num_kv_heads, spec.head_dim, spec.sm_scale),
                      {}, rs.out.data(), rs.lse.data());
  return rs;
}

}  // namespace treeattn
