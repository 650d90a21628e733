// AttentionState: a partial attention result (output o, normalised by its own softmax
// denominator, plus lse = natural log of that denominator over the scaled logits). Merging two
// states gives the state of the union of their KV; merging with the empty state (lse = -inf)
// returns the other state exactly, never NaN. Usable on host and device.
#pragma once

#include <cmath>

#include "treeattn/common/host_device.h"

namespace treeattn {

/// Weights (w_a, w_b) with w_a + w_b = 1 for merging states with log-sum-exps lse_a and lse_b,
/// and the merged lse. Empty states have lse = -INFINITY; two empty states merge to empty with
/// weights (0, 0).
template <typename T>
struct MergeWeights {
  T wa, wb, lse;
};

template <typename T>
TA_HOST_DEVICE MergeWeights<T> merge_weights(T lse_a, T lse_b) {
  using std::exp;  // float overloads on the host; CUDA's on the device
  using std::log;
  const T m = lse_a > lse_b ? lse_a : lse_b;
  if (m == -INFINITY) return {T(0), T(0), -INFINITY};
  const T ea = exp(lse_a - m), eb = exp(lse_b - m);
  const T s = ea + eb;
  return {ea / s, eb / s, m + log(s)};
}

/// Merges the state (o_b, lse_b) of `dim` elements into (o, *lse) in place: o = w_a o + w_b o_b,
/// *lse = the merged lse. Merging an empty state (lse = -inf) leaves the other one unchanged.
/// The one merge of the host code: AttentionState::merge and the CPU plan executor.
template <typename T>
TA_HOST_DEVICE void merge_state(T* o, T* lse, const T* o_b, T lse_b, int dim) {
  const MergeWeights<T> w = merge_weights(*lse, lse_b);
  for (int i = 0; i < dim; ++i) o[i] = w.wa * o[i] + w.wb * o_b[i];
  *lse = w.lse;
}

/// Scalar-per-row state with D output elements, for host code and tests.
template <typename T, int D>
struct AttentionState {
  T o[D];
  T lse;
  TA_HOST_DEVICE void set_empty() {
    for (int i = 0; i < D; ++i) o[i] = T(0);
    lse = -INFINITY;
  }
  TA_HOST_DEVICE void merge(const AttentionState& other) {
    merge_state(o, &lse, other.o, other.lse, D);
  }
};

}  // namespace treeattn
