// Float32 CPU executor of a Plan (src/cpu/executor.cc): partial attention per work item plus the
// log-sum-exp merge, following the execution model of plan.h; runs any plan anywhere. Tensors as
// in reference.h.
#pragma once

#include <cstdint>
#include <vector>

#include "treeattn/cpu/reference.h"
#include "treeattn/plan/plan.h"

namespace treeattn {

/// Float32 executor of `plan`: every work item's partial attention, then the LSE merge.
/// out [num_queries, num_qo_heads, head_dim], lse (optional) [num_queries, num_qo_heads].
/// Reentrant: reads `plan` and `in`, writes only `out` and `lse` (threads may run one plan at
/// once, each with its own outputs).
void execute_plan_cpu(const Plan& plan, const HostAttentionInputs& in, float* out, float* lse);
/// Same, restricted to `queries` (empty = all): only the rows of those queries are computed and
/// merged, items without such rows are skipped, and only those queries' out/lse rows are written
/// (others are left untouched). `treeattn check` uses it to sample large workloads.
void execute_plan_cpu(const Plan& plan, const HostAttentionInputs& in,
                      const std::vector<int32_t>& queries, float* out, float* lse);

}  // namespace treeattn
